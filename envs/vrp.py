"""Multi-task vehicle routing: the CVRP with any combination of open routes (O), backhauls (B),
route-length limits (L) and time windows with service times (TW), 16 variants in one env.

Action 0 is the depot, action i >= 1 customer i - 1 of ``coords``. A vehicle leaves the depot empty
of pickups and loaded with its deliveries, and a route ends at the depot; there is no limit on the
number of routes. The attributes:

- O: the move back to the depot costs nothing and is not checked against L or the depot's horizon.
- B: a customer is a linehaul (a delivery, ``demand_linehaul`` > 0) or a backhaul (a pickup,
  ``demand_backhaul`` > 0); on a route every linehaul comes before any backhaul, and the linehaul
  load and the backhaul load are each within capacity (routes of backhauls only are allowed).
- L: the length of each route, the return included unless O, is at most ``distance_limit``.
- TW: travel time equals distance; a vehicle waits for a window to open; service starts no later
  than the window closes and lasts ``service_time``; a route starts at the opening of the depot's
  window and (unless O) is back by its closing.

A customer is masked when visiting it would make the route infeasible: load, precedence, its window,
and the return to the depot in time and within L afterwards. Validated instances are solvable
(every customer fits a route of its own), so an unfinished trajectory always has an allowed action.

The instance distribution is the one of RL4CO's multi-task VRP generator (ai4co/rl4co,
``rl4co/envs/routing/mtvrp/generator.py``, ``MTVRPGenerator``), used by RouteFinder and MVMoE; see
``vrp_instances``.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from ppoor.envs.base import DepotVectorEnv, SingleRoutingEnv
from ppoor.envs.instances import KOOL_SEEDS, cvrp_capacity, read_arrays, standard_count
from ppoor.envs.instances import STATIC_KEYS as INSTANCE_KEYS

ATTRIBUTES = ("open_route", "backhaul", "distance_limit", "time_windows")


def variant_name(open_route: bool, backhaul: bool, limit: bool, windows: bool) -> str:
    """The field's name of a variant: [o]vrp[b][l][tw], "cvrp" without any attribute."""
    if not (open_route or backhaul or limit or windows):
        return "cvrp"
    return (
        ("o" if open_route else "")
        + "vrp"
        + ("b" if backhaul else "")
        + ("l" if limit else "")
        + ("tw" if windows else "")
    )


_FLAGS = [
    (o, b, lim, tw) for o in (False, True) for b in (False, True) for lim in (False, True) for tw in (False, True)
]
VARIANTS = {variant_name(*f): f for f in sorted(_FLAGS, key=lambda f: (sum(f), variant_name(*f)))}
"""The 16 variants, by number of attributes: name -> (open_route, backhaul, distance_limit, time_windows)."""
MIXED = "all"
"""The variant that draws each attribute per instance with probability 0.5 (RL4CO's mixed batches)."""

TOLERANCE = 1e-5
HORIZON = 4.6  # the depot's window [0, 4.6]
DISTANCE_LIMIT = 3.0
BACKHAUL_PROBABILITY = 0.2
SERVICE_TIME = (0.15, 0.18)
WINDOW_LENGTH = (0.18, 0.2)
STATIC_KEYS = INSTANCE_KEYS["mtvrp"]
TEST_SET_SIZE = 1000


def check_variant(variant: str) -> str:
    if variant not in VARIANTS and variant != MIXED:
        raise ValueError(f"variant must be one of {[*VARIANTS, MIXED]}, got {variant!r}")
    return variant


def vrp_instances(rng: np.random.Generator, num_instances: int, num_nodes: int, variant: str = MIXED) -> dict:
    """Draws instances of RL4CO's multi-task VRP distribution (``MTVRPGenerator`` of ai4co/rl4co,
    ``rl4co/envs/routing/mtvrp/generator.py``), as arrays of ``STATIC_KEYS``:

    - depot and the n customers uniform in the unit square;
    - integer demands 1..9 divided by the capacity ``cvrp_capacity(n)`` (Kool et al.'s 30, 40, 50 for
      20, 50, 100 customers, the same as RL4CO's 30 + n // 5 at those sizes);
    - B: each customer is a backhaul with probability 0.2, its pickup drawn 1..9 like a delivery;
      without B every customer is a linehaul;
    - L: ``distance_limit`` 3.0 (inf without L; every round trip from the depot is below 2 sqrt 2);
    - TW: depot window [0, 4.6]; service time s ~ U(0.15, 0.18); window length w ~ U(0.18, 0.2);
      start (1 + (h - 1) U) d_0i with h = (4.6 - s - w) / d_0i - 1 and d_0i the depot distance, so
      that every customer can be reached and left in time; without TW the windows are [0, inf]
      and the service times 0;
    - O: ``open_route`` True.

    ``variant`` is one of ``VARIANTS`` or "all" (each attribute present with probability 0.5 per
    instance). All random arrays are drawn whatever the variant, so one seed gives the same
    coordinates and demands in every variant.
    """
    check_variant(variant)
    m, n = num_instances, num_nodes
    points = rng.uniform(size=(m, n + 1, 2))
    depot, coords = points[:, 0], points[:, 1:]
    capacity = cvrp_capacity(n)
    linehaul = rng.integers(1, 10, size=(m, n)).astype(np.float64)
    pickup = rng.integers(1, 10, size=(m, n)).astype(np.float64)
    is_backhaul = rng.random((m, n)) < BACKHAUL_PROBABILITY
    service = rng.uniform(*SERVICE_TIME, size=(m, n))
    length = rng.uniform(*WINDOW_LENGTH, size=(m, n))
    d0 = np.maximum(np.sqrt(((coords - depot[:, None]) ** 2).sum(-1)), 1e-12)
    h_max = (HORIZON - service - length) / d0 - 1
    start = (1 + (h_max - 1) * rng.random((m, n))) * d0
    drawn = rng.random((m, len(ATTRIBUTES))) < 0.5
    flags = drawn if variant == MIXED else np.broadcast_to(np.array(VARIANTS[variant]), (m, len(ATTRIBUTES)))
    open_route, backhaul, limit, windows = (flags[:, k] for k in range(len(ATTRIBUTES)))
    backhaul_here = is_backhaul & backhaul[:, None]
    time_windows = np.zeros((m, n + 1, 2))
    time_windows[:, :, 1] = np.inf
    time_windows[windows, 0, 1] = HORIZON
    time_windows[windows, 1:, 0] = start[windows]
    time_windows[windows, 1:, 1] = start[windows] + length[windows]
    service_time = np.zeros((m, n + 1))
    service_time[windows, 1:] = service[windows]
    return {
        "depot": depot,
        "coords": coords,
        "demand_linehaul": np.where(backhaul_here, 0.0, linehaul) / capacity,
        "demand_backhaul": np.where(backhaul_here, pickup, 0.0) / capacity,
        "time_windows": time_windows,
        "service_time": service_time,
        "distance_limit": np.where(limit, DISTANCE_LIMIT, np.inf),
        "open_route": open_route.copy(),
    }


def vrp_dataset(variant: str, num_nodes: int, split: str = "test", num_instances: int | None = None) -> dict:
    """The standard test ("test", seed 1234) or validation ("val", seed 4321) set of a variant: 1,000
    instances of ``vrp_instances``, of which the first ``num_instances`` are returned. The sets of
    all variants share coordinates, demands and windows; only the attributes differ."""
    count = standard_count(split, num_instances, TEST_SET_SIZE)
    instances = vrp_instances(np.random.default_rng(KOOL_SEEDS[split]), TEST_SET_SIZE, num_nodes, variant)
    return {key: value[:count] for key, value in instances.items()}


def instance_variants(instances: dict) -> list[str]:
    """The variant name of each instance, read from its arrays (B: any backhaul demand; L: a finite
    limit; TW: a finite depot closing or any customer window narrower than [0, inf] or service)."""
    windows = (
        np.isfinite(instances["time_windows"][:, :, 1]).any(1)
        | (instances["time_windows"][:, :, 0] > 0).any(1)
        | (instances["service_time"] > 0).any(1)
    )
    flags = zip(
        instances["open_route"],
        (instances["demand_backhaul"] > 0).any(1),
        np.isfinite(instances["distance_limit"]),
        windows,
        strict=True,
    )
    return [variant_name(*map(bool, f)) for f in flags]


def check_vrp_instances(instances: dict, num_instances: int | None = None, num_nodes: int | None = None) -> dict:
    """Validates a batch of multi-task VRP instances (the arrays of ``STATIC_KEYS``) and returns them
    as float64 arrays (``open_route`` bool).

    Demands are fractions of the capacity; ``demand_linehaul`` / ``demand_backhaul`` may also be given
    depot first ([M, n + 1], RL4CO's layout), the depot's entry then zero. Raises ``ValueError``
    naming the key, instance and customer: missing or unknown keys, shapes, NaN, coordinates outside
    the unit square, a customer with both or neither demand or one above capacity, windows with start
    > end, negative times or service times, a non-positive limit, and a customer that cannot be
    served on a route of its own (its window, the depot's horizon or the length limit).
    """
    out, m, n = read_arrays("vrp", instances, STATIC_KEYS, num_instances, num_nodes)
    for key in ("demand_linehaul", "demand_backhaul"):
        if out[key].shape == (m, n + 1):
            if (out[key][:, 0] != 0).any():
                raise ValueError(f"{key!r} gives the depot (its first entry) a demand; the depot has none")
            out[key] = out[key][:, 1:]
    expected = {
        "depot": (m, 2),
        "coords": (m, n, 2),
        "demand_linehaul": (m, n),
        "demand_backhaul": (m, n),
        "time_windows": (m, n + 1, 2),
        "service_time": (m, n + 1),
        "distance_limit": (m,),
        "open_route": (m,),
    }
    for key, value in out.items():
        if value.shape != expected[key]:
            raise ValueError(f"{key!r} must have shape {list(expected[key])}, got {list(value.shape)}")
        if value.dtype != bool and np.isnan(value).any():
            raise ValueError(f"{key!r} contains NaN values")
    for key in ("depot", "coords", "demand_linehaul", "demand_backhaul", "service_time"):
        if not np.isfinite(out[key]).all():
            raise ValueError(f"{key!r} contains infinite values")
    for key in ("coords", "depot"):
        if (out[key] < 0).any() or (out[key] > 1).any():
            raise ValueError(f"{key!r} must lie in the unit square [0, 1]^2; normalise the coordinates first")
    linehaul, backhaul = out["demand_linehaul"], out["demand_backhaul"]
    if (linehaul < 0).any() or (backhaul < 0).any():
        raise ValueError("demands must not be negative")
    if (linehaul > 1 + TOLERANCE).any() or (backhaul > 1 + TOLERANCE).any():
        raise ValueError("a demand above 1: a customer demands more than the vehicle capacity")
    both = (linehaul > 0) == (backhaul > 0)
    if both.any():
        b, i = np.argwhere(both)[0]
        raise ValueError(
            f"customer {i + 1} of instance {b} has {'both' if linehaul[b, i] > 0 else 'neither'} a linehaul and a"
            " backhaul demand; each customer has exactly one of them"
        )
    windows, service = out["time_windows"], out["service_time"]
    if (windows[..., 0] < 0).any() or not np.isfinite(windows[..., 0]).all():
        raise ValueError("'time_windows' opening times must be finite and not negative")
    if (windows[..., 0] > windows[..., 1]).any():
        b, i = np.argwhere(windows[..., 0] > windows[..., 1])[0]
        raise ValueError(f"'time_windows' of node {i} (0 = depot) in instance {b} opens after it closes")
    if (service < 0).any():
        raise ValueError("'service_time' must not be negative")
    if (out["distance_limit"] <= 0).any():
        raise ValueError("'distance_limit' must be positive (inf for no limit)")
    # every customer must fit a route of its own
    d0 = np.sqrt(((out["coords"] - out["depot"][:, None]) ** 2).sum(-1))
    closed = ~out["open_route"][:, None]
    arrival = windows[:, :1, 0] + d0
    begin = np.maximum(arrival, windows[:, 1:, 0])
    for problem, why in (
        (arrival > windows[:, 1:, 1] + TOLERANCE, "its window closes before a vehicle from the depot can arrive"),
        (
            closed & (begin + service[:, 1:] + d0 > windows[:, :1, 1] + TOLERANCE),
            "a vehicle serving it cannot be back at the depot before the depot closes",
        ),
        (
            np.where(closed, 2 * d0, d0) > out["distance_limit"][:, None] + TOLERANCE,
            "the trip from the depot (and back, unless open) is longer than the distance limit",
        ),
    ):
        if problem.any():
            b, i = np.argwhere(problem)[0]
            raise ValueError(f"customer {i + 1} of instance {b} cannot be served on a route of its own: {why}")
    return out


class VRPVectorEnv(DepotVectorEnv):
    """M multi-task VRP instances x N trajectories. Actions are 0 (depot) .. n (customers).

    ``variant``: one of ``VARIANTS`` (e.g. "vrptw") for the random instances, or "all"; fixed
    instances given to ``reset(options=...)`` may be of any variant.

    Dynamic observation, each [M, N] unless stated: ``action_mask`` [M, N, n + 1], ``last_node``
    (0 = depot), ``remaining_linehaul`` and ``remaining_backhaul`` (capacity left for deliveries and
    pickups on the current route, fractions of capacity; linehaul 0 once a backhaul is on board),
    ``current_time`` (when the vehicle is free to leave the last node), ``route_length`` (of the
    current route so far).
    """

    problem = "mtvrp"

    def __init__(self, num_envs: int = 1, num_nodes: int = 50, n_traj: int = 1, variant: str = MIXED):
        self.variant = check_variant(variant)
        super().__init__(num_envs=num_envs, num_nodes=num_nodes, n_traj=n_traj)
        self.routes = self.early_returns = 0

    def random_instances(self, count: int) -> dict:
        return vrp_instances(self.rng, count, self.num_nodes, self.variant)

    def check_instances(self, options: dict) -> dict:
        return check_vrp_instances(options, self.num_envs, self.num_nodes)

    def _dynamic_spaces(self, lead: tuple) -> dict:
        n, traj = self.num_nodes, self.n_traj
        unbounded = {"low": 0.0, "high": np.inf, "dtype": np.float64}
        return {
            "depot": gym.spaces.Box(0.0, 1.0, (*lead, 2), np.float64),
            "demand_linehaul": gym.spaces.Box(0.0, 1.0, (*lead, n), np.float64),
            "demand_backhaul": gym.spaces.Box(0.0, 1.0, (*lead, n), np.float64),
            "time_windows": gym.spaces.Box(shape=(*lead, n + 1, 2), **unbounded),
            "service_time": gym.spaces.Box(shape=(*lead, n + 1), **unbounded),
            "distance_limit": gym.spaces.Box(shape=lead, **unbounded),
            "open_route": gym.spaces.Box(0, 1, lead, bool),
            "remaining_linehaul": gym.spaces.Box(0.0, 1.0, (*lead, traj), np.float64),
            "remaining_backhaul": gym.spaces.Box(0.0, 1.0, (*lead, traj), np.float64),
            "current_time": gym.spaces.Box(shape=(*lead, traj), **unbounded),
            "route_length": gym.spaces.Box(shape=(*lead, traj), **unbounded),
        }

    def _start(self) -> None:
        s, shape, a = self.static, (self.num_envs, self.n_traj), self.num_actions
        points = np.concatenate([s["depot"][:, None], s["coords"]], axis=1)
        self._set_points(points)
        zero = np.zeros((self.num_envs, 1))
        self.node_linehaul = np.concatenate([zero, s["demand_linehaul"]], axis=1)
        self.node_backhaul = np.concatenate([zero, s["demand_backhaul"]], axis=1)
        # one comparison per load: a backhaul's linehaul key (-2) passes even the -1 left once a
        # backhaul is on board, which stops every linehaul; a linehaul's backhaul key is 0
        is_backhaul = self.node_backhaul > 0
        self._linehaul_key = np.where(is_backhaul, -2.0, self.node_linehaul)[:, None].astype(np.float32)
        self._backhaul_key = self.node_backhaul[:, None].astype(np.float32)
        self._backhauls = bool(is_backhaul.any())
        self._open = s["open_route"][:, None]
        self._opening, self._service = s["time_windows"][..., 0], s["service_time"]
        self._depot_opening = s["time_windows"][:, :1, 0]
        dist = np.sqrt(((points[:, :, None] - points[:, None]) ** 2).sum(-1))  # [M, A, A]
        to_depot = dist[:, :, 0]
        back = np.where(self._open, 0.0, to_depot)  # [M, A]: what the return adds (0 if open)
        # a node may be reached until its closing and (unless open) the last time that gets back in time
        home = np.where(self._open, np.inf, s["time_windows"][:, :1, 1] - self._service - to_depot)
        latest = np.minimum(s["time_windows"][..., 1], home)
        self._timed = bool(np.isfinite(latest[:, 1:]).any())
        self._limited = bool(np.isfinite(s["distance_limit"]).any())
        # thresholds by (from, to) node, so that a step gathers one row per trajectory and compares:
        # time <= latest_j - d_ij, route length <= L - d_ij - back_j (each with the tolerance)
        rows = (self.num_envs * a, a)
        self._time_rows = (latest[:, None] - dist + TOLERANCE).astype(np.float32).reshape(rows) if self._timed else None
        self._length_rows = None
        if self._limited:
            limit = s["distance_limit"][:, None, None] - dist - back[:, None] + TOLERANCE
            self._length_rows = limit.astype(np.float32).reshape(rows)
        self._row_offsets = np.arange(self.num_envs)[:, None] * a
        self._gathered = np.empty((*shape, a), dtype=np.float32)  # scratch buffers of the mask
        self._within = np.empty((*shape, a), dtype=bool)
        self._flat_offsets = (np.arange(self.num_envs * self.n_traj) * a).reshape(shape)
        self.unvisited = np.ones((*shape, a), dtype=bool)
        self.num_served = np.zeros(shape, dtype=np.int64)
        self.last_node = np.zeros(shape, dtype=np.int64)
        self.load_linehaul, self.load_backhaul = np.zeros(shape), np.zeros(shape)
        self.on_backhaul = np.zeros(shape, dtype=bool)
        self.current_time = np.broadcast_to(self._depot_opening, shape).copy()
        self.route_length = np.zeros(shape)
        self.routes = self.early_returns = 0
        self._place(self.last_node)
        self._update_mask()

    def _move(self, actions: np.ndarray) -> np.ndarray:
        node = self._row_offsets + actions  # [M, N]: flat index of each trajectory's node in [M, A] arrays
        length = self._move_length(actions)
        to_depot = actions == 0
        reward = -np.where(to_depot & self._open, 0.0, length)
        closing = to_depot & (self.last_node != 0)
        if closing.any():  # early: some unserved customer still fitted the load (the last mask's)
            closed = np.flatnonzero(closing)
            self.routes += len(closed)
            self.early_returns += int(self._fits.reshape(-1, self.num_actions)[closed, 1:].any(-1).sum())
        begin = np.maximum(self.current_time + length, self._opening.take(node))
        self.current_time = np.where(to_depot, self._depot_opening, begin + self._service.take(node))
        self.route_length = np.where(to_depot, 0.0, self.route_length + length)
        self.load_linehaul = np.where(to_depot, 0.0, self.load_linehaul + self.node_linehaul.take(node))
        pickup = self.node_backhaul.take(node)
        self.load_backhaul = np.where(to_depot, 0.0, self.load_backhaul + pickup)
        self.on_backhaul = ~to_depot & (self.on_backhaul | (pickup > 0))
        self.unvisited.reshape(-1)[self._flat_offsets + actions] = False
        self.num_served += ~to_depot  # the mask lets a customer be chosen only once
        self.last_node = actions.copy()
        self.terminated |= to_depot & (self.num_served == self.num_nodes)
        self._update_mask()
        return reward

    def _update_mask(self) -> None:
        tol = TOLERANCE
        left = np.where(self.on_backhaul, -1.0, 1.0 - self.load_linehaul + tol).astype(np.float32)
        fits = self._linehaul_key <= left[..., None]
        if self._backhauls:
            fits &= self._backhaul_key <= (1.0 - self.load_backhaul + tol).astype(np.float32)[..., None]
        fits &= self.unvisited
        self._fits = fits  # the load-feasible unserved customers, for the early-return statistic
        mask = fits
        index = self._row_offsets + self.last_node  # [M, N]: each trajectory's row of the thresholds
        for threshold, value in ((self._time_rows, self.current_time), (self._length_rows, self.route_length)):
            if threshold is not None:
                threshold.take(index, axis=0, out=self._gathered, mode="clip")  # valid indices: no buffering
                within = np.less_equal(value.astype(np.float32)[..., None], self._gathered, out=self._within)
                mask = mask & within if mask is fits else np.logical_and(mask, within, out=mask)
        if mask is fits:
            mask = fits.copy()
        mask[..., 0] = (self.last_node != 0) | (self.num_served == self.num_nodes)
        self.action_mask = mask

    def _dynamic_observation(self) -> dict:
        return {
            "action_mask": self.action_mask,
            "last_node": self.last_node,
            "remaining_linehaul": np.where(self.on_backhaul, 0.0, 1.0 - self.load_linehaul),
            "remaining_backhaul": 1.0 - self.load_backhaul,
            "current_time": self.current_time,
            "route_length": self.route_length,
        }

    def episode_statistics(self) -> dict:
        """``early_return_fraction``: the share of routes so far that went back to the depot while an
        unserved customer still fitted the load (cut by a window, the length limit or the policy)."""
        return {"early_return_fraction": self.early_returns / max(1, self.routes)}


class VRPEnv(SingleRoutingEnv):
    """One multi-task VRP instance x N trajectories (see ``VRPVectorEnv``; ``variant`` as there)."""

    vector_class = VRPVectorEnv
