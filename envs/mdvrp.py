"""Multiple depots: capacitated routes, each from a depot of the policy's choice back to the same
depot (``mdvrp``), with time windows and service times (``mdvrptw``).

Actions 0..k-1 are the depots ``depots``, action k + i customer i of ``coords``. A trajectory starts
at depot 0 with an empty route. At a depot with an empty route the policy picks a customer (the route
starts from this depot) or moves to another depot at no cost (the route will start there): once per
route start, or whenever no customer can be served from the depot it stands at, then only to depots
that can serve one. From a customer, only the route's own depot is allowed among the depots (the
return, which closes the route); the episode ends on the return after the last customer. Reward:
minus the length of each move. Capacity as in the CVRP; time windows as in ``envs.vrp``: travel time
equals distance, waiting allowed, service within the window, a route leaves its depot at the
depot's opening and is back by its closing (every depot shares one window, RouteFinder's setting).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from ppoor.envs.base import RoutingVectorEnv, SingleRoutingEnv
from ppoor.envs.instances import STATIC_KEYS as INSTANCE_KEYS
from ppoor.envs.instances import check_arrays, cvrp_capacity, read_arrays
from ppoor.envs.vrp import HORIZON, SERVICE_TIME, WINDOW_LENGTH

STATIC_KEYS = INSTANCE_KEYS["mdvrp"]
VARIANTS = ("mdvrp", "mdvrptw")
NUM_DEPOTS = 3  # RouteFinder's multi-depot setting
TOLERANCE = 1e-5


def mdvrp_instances(
    rng: np.random.Generator, num_instances: int, num_nodes: int, variant: str = "mdvrp", num_depots: int = NUM_DEPOTS
) -> dict:
    """``num_depots`` depots and the customers uniform in the unit square; Kool et al.'s CVRP demands
    (integers 1..9 over ``cvrp_capacity(n)``); mdvrptw: RL4CO's multi-task windows (``envs.vrp``:
    horizon [0, 4.6] at every depot, service U(0.15, 0.18), window length U(0.18, 0.2), opening drawn
    so that a vehicle from the customer's nearest depot can serve it and return); mdvrp: windows
    [0, inf], no service."""
    check_mdvrp_variant(variant)
    m, n, k = num_instances, num_nodes, num_depots
    depots = rng.uniform(size=(m, k, 2))
    coords = rng.uniform(size=(m, n, 2))
    demand = rng.integers(1, 10, size=(m, n)) / cvrp_capacity(n)
    service = rng.uniform(*SERVICE_TIME, size=(m, n))
    length = rng.uniform(*WINDOW_LENGTH, size=(m, n))
    nearest = np.maximum(np.sqrt(((coords[:, :, None] - depots[:, None]) ** 2).sum(-1)).min(-1), 1e-12)
    h_max = (HORIZON - service - length) / nearest - 1
    start = (1 + (h_max - 1) * rng.random((m, n))) * nearest
    windows = np.zeros((m, k + n, 2))
    windows[..., 1] = np.inf
    service_time = np.zeros((m, k + n))
    if variant == "mdvrptw":
        windows[:, :k, 1] = HORIZON
        windows[:, k:, 0], windows[:, k:, 1] = start, start + length
        service_time[:, k:] = service
    return {"depots": depots, "coords": coords, "demand": demand, "time_windows": windows, "service_time": service_time}


def check_mdvrp_variant(variant: str) -> str:
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    return variant


def single_trips(static: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each instance: distances [M, A, A] between all nodes (depots first), the latest time [M, k, A]
    node j may be reached on a route of depot r (its closing, and the return to r in time after its
    service; -inf if even its opening is too late for that), and whether customer i can be served alone on a route of depot r [M, k, n]."""
    k = static["depots"].shape[1]
    points = np.concatenate([static["depots"], static["coords"]], axis=1)
    dist = np.sqrt(((points[:, :, None] - points[:, None]) ** 2).sum(-1))
    windows, service = static["time_windows"], static["service_time"]
    back = windows[:, :k, 1, None] - service[:, None] - np.swapaxes(dist[:, :, :k], 1, 2)  # [M, k, A]
    latest = np.minimum(windows[:, None, :, 1], back)
    latest[windows[:, None, :, 0] > back + TOLERANCE] = -np.inf  # opens too late to be back at depot r in time
    arrival = windows[:, :k, 0, None] + dist[:, :k, k:]  # [M, k, n]
    alone = (arrival <= latest[:, :, k:] + TOLERANCE) & (static["demand"][:, None] <= 1 + TOLERANCE)
    return dist, latest, alone


def check_mdvrp_instances(instances: dict, num_instances: int | None = None, num_nodes: int | None = None) -> dict:
    """Validates multi-depot instances (``STATIC_KEYS``: ``depots`` [M, k, 2], ``coords`` [M, n, 2],
    ``demand`` [M, n], ``time_windows`` [M, k + n, 2] and ``service_time`` [M, k + n], depots first);
    returns float64 arrays. ``ValueError`` names what to fix, e.g. more depots than customers or a
    customer that no depot can serve."""
    out, m, n = read_arrays("mdvrp", instances, STATIC_KEYS, num_instances, num_nodes)
    depots = out["depots"]
    if depots.ndim != 3 or depots.shape[0] != m or depots.shape[2] != 2 or depots.shape[1] < 1:
        raise ValueError(f"'depots' must have shape [{m}, k, 2] with k >= 1, got {list(depots.shape)}")
    k = depots.shape[1]
    if k > n:
        raise ValueError(f"{k} depots for {n} customers: more depots than customers; use at most {n} depots")
    check_arrays(out, {"depots": (m, k, 2), "coords": (m, n, 2), "demand": (m, n), "service_time": (m, k + n)})
    if out["time_windows"].shape != (m, k + n, 2):  # closings may be inf
        raise ValueError(
            f"'time_windows' must have shape {[m, k + n, 2]} (depots first), got {list(out['time_windows'].shape)}"
        )
    if (out["demand"] <= 0).any() or (out["demand"] > 1 + TOLERANCE).any():
        raise ValueError("'demand' must lie in (0, 1] (demand divided by the vehicle capacity)")
    windows = out["time_windows"]
    if np.isnan(windows).any() or not np.isfinite(windows[..., 0]).all() or (windows[..., 0] < 0).any():
        raise ValueError("'time_windows' opening times must be finite and not negative")
    if (windows[..., 0] > windows[..., 1]).any() or (out["service_time"] < 0).any():
        raise ValueError("'time_windows' must open before they close, and 'service_time' must not be negative")
    _, _, alone = single_trips(out)
    unserved = ~alone.any(1)
    if unserved.any():
        b, i = np.argwhere(unserved)[0]
        raise ValueError(f"customer {i + 1} of instance {b} cannot be served on a route of its own from any depot")
    return out


class MDVRPVectorEnv(RoutingVectorEnv):
    """M multi-depot instances x N trajectories. Actions are 0..k-1 (depots) and k..k+n-1 (customers).

    Dynamic observation, each [M, N]: ``action_mask`` [M, N, k + n], ``last_node``, ``route_depot``
    (the depot the current route returns to), ``current_load`` (what is left of the capacity),
    ``current_time`` (when the vehicle may leave its node).
    """

    problem = "mdvrp"

    def __init__(
        self,
        num_envs: int = 1,
        num_nodes: int = 20,
        n_traj: int = 1,
        variant: str = "mdvrp",
        num_depots: int = NUM_DEPOTS,
    ):
        self.variant = check_mdvrp_variant(variant)
        if int(num_depots) != num_depots or num_depots < 1:
            raise ValueError(f"num_depots must be an integer >= 1, got {num_depots!r}")
        if num_depots > num_nodes:
            raise ValueError(f"{num_depots} depots for {num_nodes} customers: more depots than customers")
        self.num_depots = int(num_depots)
        super().__init__(num_envs=num_envs, num_nodes=num_nodes, n_traj=n_traj)

    @property
    def num_actions(self) -> int:
        return self.num_depots + self.num_nodes

    @property
    def max_episode_steps(self) -> int:
        """Worst case: a depot move, the customer and the return for every customer, and two depot
        moves (the second forced) before a route."""
        return 4 * self.num_nodes + 1

    @property
    def start_actions(self) -> np.ndarray:
        """Every action allowed at the start: the customers (a route from depot 0) and the other depots."""
        return np.arange(1, self.num_actions)

    def random_instances(self, count: int) -> dict:
        return mdvrp_instances(self.rng, count, self.num_nodes, self.variant, self.num_depots)

    def check_instances(self, options: dict) -> dict:
        static = check_mdvrp_instances(options, self.num_envs, self.num_nodes)
        if static["depots"].shape[1] != self.num_depots:
            raise ValueError(f"the instances have {static['depots'].shape[1]} depots, the env {self.num_depots}")
        return static

    def _dynamic_spaces(self, lead: tuple) -> dict:
        k, a, traj = self.num_depots, self.num_actions, self.n_traj
        unbounded = {"low": 0.0, "high": np.inf, "dtype": np.float64}
        return {
            "depots": gym.spaces.Box(0.0, 1.0, (*lead, k, 2), np.float64),
            "demand": gym.spaces.Box(0.0, 1.0, (*lead, self.num_nodes), np.float64),
            "time_windows": gym.spaces.Box(shape=(*lead, a, 2), **unbounded),
            "service_time": gym.spaces.Box(shape=(*lead, a), **unbounded),
            "route_depot": gym.spaces.Box(0, k - 1, (*lead, traj), np.int64),
            "current_load": gym.spaces.Box(0.0, 1.0, (*lead, traj), np.float64),
            "current_time": gym.spaces.Box(shape=(*lead, traj), **unbounded),
        }

    def _start(self) -> None:
        s, shape, k = self.static, (self.num_envs, self.n_traj), self.num_depots
        self._set_points(np.concatenate([s["depots"], s["coords"]], axis=1))
        dist, latest, alone = single_trips(s)
        # node j may be entered from i on a route of depot r while time <= reach: rows [(M * k * A), A]
        # indexed by (m, r, i), gathered by one take per step
        reach = latest[:, :, None, :] - dist[:, None] + TOLERANCE
        self._reach = reach.astype(np.float32).reshape(-1, self.num_actions)
        self._row_offsets = np.arange(self.num_envs)[:, None] * (k * self.num_actions)
        self._gathered = np.empty((*shape, self.num_actions), dtype=np.float32)
        self._alone = np.concatenate([np.zeros((self.num_envs, k, k), dtype=bool), alone], axis=2)  # [M, k, A]
        self.node_demand = np.concatenate([np.zeros((self.num_envs, k)), s["demand"]], axis=1)
        self._demand32 = self.node_demand[:, None].astype(np.float32)  # [M, 1, A]
        self._opening, self._service = s["time_windows"][..., 0], s["service_time"]
        self.unvisited = np.ones((*shape, self.num_actions), dtype=bool)
        self.unvisited[..., :k] = False
        self.num_served = np.zeros(shape, dtype=np.int64)
        self.last_node = np.zeros(shape, dtype=np.int64)
        self.route_depot = np.zeros(shape, dtype=np.int64)
        self.switched = np.zeros(shape, dtype=bool)  # the last action moved between depots
        self.current_load = np.ones(shape)
        self.current_time = np.broadcast_to(self._opening[:, :1], shape).copy()
        self._place(self.last_node)
        self._update_mask()

    def _move(self, actions: np.ndarray) -> np.ndarray:
        k = self.num_depots
        at_depot = self.last_node < k
        to_depot = actions < k
        switch = to_depot & at_depot & ~self.terminated
        length = self._move_length(actions)
        reward = -np.where(switch, 0.0, length)
        opening = self._opening[self._rows, actions]  # a depot's opening starts its next route
        begin = np.maximum(self.current_time + length, opening)
        self.current_time = np.where(to_depot, opening, begin + self._service[self._rows, actions])
        self.current_load = np.where(to_depot, 1.0, self.current_load - self.node_demand[self._rows, actions])
        self.route_depot = np.where(switch, actions, self.route_depot)
        self.switched = switch
        self.unvisited[self._rows, self._cols, actions] = False
        self.num_served += ~to_depot
        self.last_node = actions.copy()
        self.terminated |= to_depot & (self.num_served == self.num_nodes)
        self._update_mask()
        return reward

    def _update_mask(self) -> None:
        k = self.num_depots
        index = self._row_offsets + self.route_depot * self.num_actions + self.last_node
        limits = self._reach.take(index, axis=0, out=self._gathered, mode="clip")  # [M, N, A]
        mask = (self.current_time.astype(np.float32)[..., None] <= limits) & self.unvisited
        room = (self.current_load + TOLERANCE).astype(np.float32)[..., None]
        mask &= self._demand32 <= room
        at_depot = (self.last_node < k)[..., None]  # there the route is empty and starts from this depot
        finished = at_depot[..., 0] & (self.num_served == self.num_nodes)
        depots = np.broadcast_to(at_depot & ~self.switched[..., None], (*at_depot.shape[:2], k)).copy()
        stuck = np.nonzero(at_depot[..., 0] & ~mask[..., k:].any(-1) & ~finished)  # no customer from here
        if len(stuck[0]):  # only to depots that can still serve a customer alone: [S, k]
            depots[stuck] = (self._alone[stuck[0]] & self.unvisited[stuck][:, None]).any(-1)
        own = np.arange(k) == self.route_depot[..., None]  # [M, N, k]
        depots = np.where(at_depot, depots & ~own, own)  # from a customer: back to the route's depot only
        mask[..., :k] = depots
        mask[finished] = False
        mask[finished, self.last_node[finished]] = True  # a finished trajectory stays at its depot
        self.action_mask = mask

    def _dynamic_observation(self) -> dict:
        return {
            "action_mask": self.action_mask,
            "last_node": self.last_node,
            "route_depot": self.route_depot,
            "current_load": self.current_load,
            "current_time": self.current_time,
        }


class MDVRPEnv(SingleRoutingEnv):
    """One multi-depot instance x N trajectories (see ``MDVRPVectorEnv``)."""

    vector_class = MDVRPVectorEnv
