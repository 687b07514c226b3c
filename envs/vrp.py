"""Multi-task vehicle routing: the CVRP with any combination of multiple depots (MD), open routes (O),
backhauls (B, classic or mixed: MB), route-length limits (L) and time windows with service times
(TW), RouteFinder's 48 variants in one env.

Actions 0..k-1 are the depots ``depots``, action k + i customer i of ``coords`` (with one depot:
0 the depot, i >= 1 customer i - 1). A trajectory starts at depot 0 with an empty route. A route
leaves its depot loaded with its deliveries and ends at the same depot; there is no limit on the
number of routes. The attributes:

- MD: at a depot with an empty route the policy picks a customer (the route starts from this depot)
  or moves to another depot at no cost (the route will start there): once per route start, or
  whenever no customer can be served from where it stands, then only to depots that can serve one.
  From a customer, only the route's own depot is allowed among the depots (the return). A depot
  that repeats an earlier one (same place and window: how a single-depot instance sits in a batch
  of several depots) is never moved to.
- O: the return to the depot costs nothing and is not checked against L or the depot's window.
- B: a customer is a linehaul (a delivery, ``demand_linehaul`` > 0) or a backhaul (a pickup,
  ``demand_backhaul`` > 0). ``backhaul_class`` 1 (classic): every linehaul of a route comes before
  any backhaul, and the linehaul load and the backhaul load are each within capacity. 2 (mixed,
  MB): any order, and the load on board (the deliveries not yet made plus the pickups made) is
  within capacity all along the route.
- L: the length of each route, the return included unless O, is at most ``distance_limit``.
- TW: travel time equals distance; a vehicle waits for a window to open; service starts no later
  than the window closes and lasts ``service_time``; a route starts at the opening of its depot's
  window and (unless O) is back by its closing.

A customer is masked when visiting it would make the route infeasible: load, precedence, its window,
and the return to the route's depot in time and within L afterwards. Validated instances are
solvable (every customer fits a route of its own from some depot), so an unfinished trajectory always
has an allowed action.

The instance distribution is RouteFinder's (ai4co/routefinder, ``routefinder/data/generate.py``,
``generate_mtvrp_data``, which makes its test sets); see ``vrp_instances``.
"""

from __future__ import annotations

from typing import NamedTuple

import gymnasium as gym
import numpy as np
from ppoor.envs.base import RoutingVectorEnv, SingleRoutingEnv
from ppoor.envs.distributions import solomon_instances
from ppoor.envs.instances import KOOL_SEEDS, read_arrays, standard_count
from ppoor.envs.instances import STATIC_KEYS as INSTANCE_KEYS


class Variant(NamedTuple):
    """The attributes of a VRP variant (mixed implies backhaul)."""

    multi_depot: bool
    open_route: bool
    backhaul: bool
    mixed: bool
    limit: bool
    windows: bool


def variant_name(v: Variant) -> str:
    """RouteFinder's name of a variant, lower case: [md][o]vrp[m][b][l][tw], "cvrp" / "mdcvrp"
    without O, B, L and TW."""
    plain = not (v.open_route or v.backhaul or v.limit or v.windows)
    core = "cvrp" if plain else (
        ("o" if v.open_route else "") + "vrp" + ("m" if v.mixed else "") + ("b" if v.backhaul else "")
        + ("l" if v.limit else "") + ("tw" if v.windows else "")
    )  # fmt: skip
    return ("md" if v.multi_depot else "") + core


def _all_variants() -> dict:
    flags = [
        Variant(md, o, b, m, lim, tw)
        for md in (False, True) for o in (False, True) for b in (False, True) for m in (False, True)
        for lim in (False, True) for tw in (False, True) if b or not m
    ]  # fmt: skip
    order = sorted(flags, key=lambda v: (v.multi_depot, v.mixed, sum(v) - v.mixed, variant_name(v)))
    return {variant_name(v): v for v in order}


VARIANTS = _all_variants()
"""The 48 variants: name -> ``Variant``. First the 16 classic ones (by number of attributes), then
the 8 with mixed backhauls, then the same 24 with multiple depots."""
CLASSIC = tuple(name for name, v in VARIANTS.items() if not (v.multi_depot or v.mixed))
"""The 16 variants of RL4CO's multi-task VRP and of RouteFinder's main tables."""
GROUPS = ("classic", "mixed_backhaul", "multi_depot")
"""RouteFinder's groups of the 48: the 16 classic variants, the 8 single-depot ones with mixed backhauls,
and the 24 with several depots (with or without mixed backhauls)."""
MIXES = {"all": tuple(VARIANTS), "classic": CLASSIC}
"""Variants that draw each instance's variant uniformly: "all" of the 48, "classic" of the 16 (the
same as drawing each of O, B, L, TW with probability 0.5, RL4CO's and RouteFinder's training mix)."""

TOLERANCE = 1e-5
HORIZON = 4.6  # every depot's window [0, 4.6]
MAX_DISTANCE_LIMIT = 2.8
BACKHAUL_PROBABILITY = 0.2
SERVICE_TIME = (0.15, 0.18)
WINDOW_LENGTH = (0.18, 0.2)
MD_DEPOTS = 3  # RouteFinder's multi-depot instances
STATIC_KEYS = INSTANCE_KEYS["mtvrp"]
TEST_SET_SIZE = 1000  # RouteFinder's scripts/generate_data.py


def check_variant(variant: str) -> str:
    if variant not in VARIANTS and variant not in MIXES:
        raise ValueError(f"variant must be one of {[*VARIANTS, *MIXES]}, got {variant!r}")
    return variant


def vehicle_capacity(num_customers: int) -> int:
    """RouteFinder's capacity rule (``get_vehicle_capacity``): 30 up to 20 customers, 30 + n // 5
    above (40 at 50, 50 at 100), 1 more every 33.3 customers above 1,000."""
    if num_customers > 1000:
        return int(30 + 1000 // 5 + (num_customers - 1000) // 33.3)
    return 30 + (num_customers // 5 if num_customers > 20 else 0)


def default_depots(variant: str) -> int:
    """How many depots an env of ``variant`` has unless told: 3 where any instance may have several."""
    names = MIXES.get(variant, (variant,))
    return MD_DEPOTS if any(VARIANTS[name].multi_depot for name in names) else 1


def _integers(rng, low: int, high: int, size) -> np.ndarray:
    """Integers in [low, high) from a ``np.random.Generator`` or a legacy ``RandomState``."""
    return rng.integers(low, high, size) if isinstance(rng, np.random.Generator) else rng.randint(low, high, size)


def variant_instances(rng, num_instances: int, num_nodes: int, variant: str) -> dict:
    """RouteFinder's ``generate_mtvrp_data`` for one variant, draw by draw: from a legacy
    ``np.random.RandomState`` seeded as its ``np.random.seed`` it gives its files' values exactly
    (float32, as it saves them, held here as float64). The draws, in order:

    - locations uniform in the unit square, [m, kd + n, 2], the kd depots first (kd = 3 with MD);
    - linehaul demands: integers 1..9 over ``vehicle_capacity(n)``;
    - B: each customer a backhaul with probability 0.2 (its linehaul then 0), its pickup 1..9 over
      the capacity, drawn for the backhauls only;
    - TW: service s ~ U(0.15, 0.18), window length w ~ U(0.18, 0.2), start (1 + (h - 1) U) d_0i with
      h = (4.6 - s - w) / d_0i - 1 and d_0i the distance to the *first* depot; every depot's window
      [0, 4.6]; without TW [0, inf] and no service;
    - L: U(2 max_j d_0j + 1e-6, max(2.8, that + 1e-6)) per instance, the maximum over every other
      location (other depots included) from the first depot; without L inf;
    - O: ``open_route``; MB: ``backhaul_class`` 2 (else 1).

    Returns the arrays of ``STATIC_KEYS`` with kd depots.
    """
    v = VARIANTS[variant]
    m, n, kd = num_instances, num_nodes, MD_DEPOTS if v.multi_depot else 1
    capacity = vehicle_capacity(n)
    locs = rng.uniform(0.0, 1.0, (m, kd + n, 2))
    linehaul = _integers(rng, 1, 10, (m, n)).astype(np.float32) / capacity
    backhaul = np.zeros((m, n), dtype=np.float32)
    if v.backhaul:
        is_backhaul = rng.random((m, n)) < BACKHAUL_PROBABILITY
        backhaul[is_backhaul] = _integers(rng, 1, 10, int(is_backhaul.sum())).astype(np.float32) / capacity
        linehaul[is_backhaul] = 0
    windows = np.zeros((m, kd + n, 2))
    windows[..., 1] = np.inf
    service = np.zeros((m, kd + n))
    if v.windows:
        s = SERVICE_TIME[0] + (SERVICE_TIME[1] - SERVICE_TIME[0]) * rng.random((m, n))
        w = WINDOW_LENGTH[0] + (WINDOW_LENGTH[1] - WINDOW_LENGTH[0]) * rng.random((m, n))
        d0 = np.linalg.norm(locs[:, 0:1] - locs[:, kd:], axis=2)
        h_max = (HORIZON - s - w) / d0 - 1
        start = (1 + (h_max - 1) * rng.random((m, n))) * d0
        windows[:, kd:, 0], windows[:, kd:, 1] = start, start + w
        windows[:, :kd, 1] = HORIZON
        service[:, kd:] = s
    limit = np.full(m, np.inf)
    if v.limit:
        lower = 2 * np.linalg.norm(locs[:, 1:] - locs[:, 0:1], axis=2).max(1) + 1e-6
        limit = rng.uniform(lower, np.maximum(MAX_DISTANCE_LIMIT, lower + 1e-6), (m,))
    return {
        "depots": f32(locs[:, :kd]),
        "coords": f32(locs[:, kd:]),
        "demand_linehaul": linehaul.astype(np.float64),
        "demand_backhaul": backhaul.astype(np.float64),
        "backhaul_class": np.full(m, 2.0 if v.mixed else 1.0),
        "time_windows": f32(windows),
        "service_time": f32(service),
        "distance_limit": f32(limit),
        "open_route": np.full(m, v.open_route),
    }


def f32(x: np.ndarray) -> np.ndarray:
    """``x`` rounded to float32 and held as float64: RouteFinder saves its files in float32."""
    return x.astype(np.float32).astype(np.float64)


def pad_depots(instances: dict, num_depots: int) -> dict:
    """Instances with fewer depots than ``num_depots`` get copies of their first depot (place and
    window), which the env never moves to: the same problem in a batch of more depots."""
    k = instances["depots"].shape[1]
    if k == num_depots:
        return instances
    if k > num_depots:
        raise ValueError(f"the instances have {k} depots, more than the env's {num_depots}")
    extra = num_depots - k
    out = dict(instances)
    out["depots"] = np.concatenate([instances["depots"], np.repeat(instances["depots"][:, :1], extra, 1)], 1)
    for key in ("time_windows", "service_time"):
        out[key] = np.concatenate(
            [instances[key][:, :k], np.repeat(instances[key][:, :1], extra, 1), instances[key][:, k:]], 1
        )
    return out


def vrp_instances(
    rng: np.random.Generator,
    num_instances: int,
    num_nodes: int,
    variant: str = "classic",
    num_depots: int | None = None,
) -> dict:
    """``num_instances`` instances of ``variant`` (one of ``VARIANTS``, or a mix of ``MIXES``, which
    draws each instance's variant uniformly), as ``variant_instances`` draws them, with
    ``num_depots`` depots each (default ``default_depots(variant)``; single-depot instances are padded,
    ``pad_depots``)."""
    check_variant(variant)
    k = default_depots(variant) if num_depots is None else num_depots
    names = MIXES.get(variant, (variant,))
    drawn = rng.integers(len(names), size=num_instances) if len(names) > 1 else np.zeros(num_instances, dtype=int)
    rows, groups = [], []
    for index in np.unique(drawn):
        rows.append(np.flatnonzero(drawn == index))
        groups.append(pad_depots(variant_instances(rng, len(rows[-1]), num_nodes, names[index]), k))
    inverse = np.argsort(np.concatenate(rows))  # back to instance order
    return {key: np.concatenate([group[key] for group in groups])[inverse] for key in STATIC_KEYS}


def vrp_dataset(variant: str, num_nodes: int, split: str = "test", num_instances: int | None = None) -> dict:
    """The standard test ("test", seed 1234) or validation ("val", seed 4321) set of a variant: 1,000
    instances made as RouteFinder's ``scripts/generate_data.py`` makes its files (the legacy NumPy
    generator seeded once per file, then ``variant_instances``), so the test sets are its test sets
    (its validation files hold 128 instances, drawn in another order: ours are not those); the first
    ``num_instances``. For a mix (``MIXES``) each instance's variant is drawn from
    ``np.random.default_rng(seed)`` (RouteFinder has no such file)."""
    check_variant(variant)
    count = standard_count(split, num_instances, TEST_SET_SIZE)
    if variant in MIXES:
        instances = vrp_instances(np.random.default_rng(KOOL_SEEDS[split]), TEST_SET_SIZE, num_nodes, variant)
    else:
        instances = variant_instances(np.random.RandomState(KOOL_SEEDS[split]), TEST_SET_SIZE, num_nodes, variant)
    return {key: value[:count] for key, value in instances.items()}


def distinct_depots(depots: np.ndarray, windows: np.ndarray) -> np.ndarray:
    """[M, k] bool: depot j is not a copy (same place and window) of an earlier depot."""
    k = depots.shape[1]
    same = (depots[:, :, None] == depots[:, None]).all(-1) & (windows[:, :k, None] == windows[:, None, :k]).all(-1)
    return ~np.tril(same, -1).any(-1)


def instance_variants(instances: dict) -> list[str]:
    """The variant name of each instance, read from its arrays (MD: a second depot that is not a
    copy of the first; B: any backhaul demand, MB: with ``backhaul_class`` 2; L: a finite limit; TW: a
    finite depot closing or any customer window narrower than [0, inf] or service)."""
    k = instances["depots"].shape[1]
    windows = (
        np.isfinite(instances["time_windows"][:, :, 1]).any(1)
        | (instances["time_windows"][:, :, 0] > 0).any(1)
        | (instances["service_time"] > 0).any(1)
    )
    multi = (
        distinct_depots(instances["depots"], instances["time_windows"])[:, 1:].any(1)
        if k > 1
        else np.zeros(len(windows), bool)
    )
    backhaul = (instances["demand_backhaul"] > 0).any(1)
    flags = zip(
        multi,
        instances["open_route"],
        backhaul,
        backhaul & (instances["backhaul_class"] == 2),
        np.isfinite(instances["distance_limit"]),
        windows,
        strict=True,
    )
    return [variant_name(Variant(*map(bool, f))) for f in flags]


def variant_group(name: str) -> str:
    """The group (``GROUPS``) of variant ``name``: multi_depot, else mixed_backhaul, else classic."""
    v = VARIANTS[name]
    return "multi_depot" if v.multi_depot else "mixed_backhaul" if v.mixed else "classic"


def single_trips(static: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For each instance: distances [M, A, A] between all nodes (depots first); the latest time
    [M, k, A] node j may be reached on a route of depot r (its closing and, unless open, the return to
    r in time after its service; -inf when even its opening is too late for that); the length
    [M, k, A] a route of depot r may have on reaching j (the limit less the return to r unless open);
    and whether customer i fits a route of its own from depot r [M, k, n]."""
    k = static["depots"].shape[1]
    points = np.concatenate([static["depots"], static["coords"]], axis=1)
    dist = np.sqrt(((points[:, :, None] - points[:, None]) ** 2).sum(-1))
    windows, service = static["time_windows"], static["service_time"]
    is_open = static["open_route"][:, None, None]
    to_depot = np.swapaxes(dist[:, :, :k], 1, 2)  # [M, k, A]: from node j to depot r
    back = np.where(is_open, np.inf, windows[:, :k, 1, None] - service[:, None] - to_depot)
    latest = np.minimum(windows[:, None, :, 1], back)
    latest[windows[:, None, :, 0] > back + TOLERANCE] = -np.inf
    length = static["distance_limit"][:, None, None] - np.where(is_open, 0.0, to_depot)
    arrival = windows[:, :k, 0, None] + dist[:, :k, k:]
    alone = (arrival <= latest[:, :, k:] + TOLERANCE) & (dist[:, :k, k:] <= length[:, :, k:] + TOLERANCE)
    return dist, latest, length, alone


def check_demands_and_times(out: dict) -> None:
    """``check_vrp_instances``' checks of the demands (one of linehaul or backhaul per customer, within the
    capacity), the time windows, the service times and the length limits of read arrays ``out``."""
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
        raise ValueError(f"'time_windows' of node {i} (depots first) in instance {b} opens after it closes")
    if (service < 0).any():
        raise ValueError("'service_time' must not be negative")
    if (out["distance_limit"] <= 0).any():
        raise ValueError("'distance_limit' must be positive (inf for no limit)")


def check_vrp_instances(instances: dict, num_instances: int | None = None, num_nodes: int | None = None) -> dict:
    """Validates a batch of multi-task VRP instances (the arrays of ``STATIC_KEYS``) and returns them
    as float64 arrays (``open_route`` bool) with k >= 1 depots.

    ``depots`` [M, k, 2]; a single ``depot`` [M, 2] is read as k = 1. ``backhaul_class`` [M] (1
    classic, 2 mixed) may be left out (1). Demands are fractions of the capacity; ``demand_linehaul`` /
    ``demand_backhaul`` may also be given depots first ([M, k + n], RL4CO's layout), those entries then
    zero. ``time_windows`` [M, k + n, 2] and ``service_time`` [M, k + n], depots first. Raises
    ``ValueError`` naming the key, instance and customer: missing or unknown keys, shapes, NaN,
    coordinates outside the unit square, a customer with both or neither demand or one above capacity,
    windows with start > end, negative times or service times, a non-positive limit, a backhaul class
    other than 1 or 2, more depots than customers, and a customer that cannot be served on a route of
    its own from any depot (its window, the depot's horizon or the length limit).
    """
    if not isinstance(instances, dict):
        raise ValueError(f"vrp instances must be a dict with keys {STATIC_KEYS}, got {type(instances).__name__}")
    given = dict(instances)
    if "depot" in given and "depots" not in given:
        depot = np.asarray(given.pop("depot"), dtype=np.float64)
        if depot.ndim != 2 or depot.shape[1] != 2:
            raise ValueError(f"'depot' must have shape [M, 2], got {list(depot.shape)}")
        given["depots"] = depot[:, None]
    if "backhaul_class" not in given and "coords" in given:
        given["backhaul_class"] = np.ones(np.shape(given["coords"])[0])
    out, m, n = read_arrays("vrp", given, STATIC_KEYS, num_instances, num_nodes)
    depots = out["depots"]
    if depots.ndim != 3 or depots.shape[0] != m or depots.shape[2] != 2 or depots.shape[1] < 1:
        raise ValueError(f"'depots' must have shape [{m}, k, 2] with k >= 1, got {list(depots.shape)}")
    k = depots.shape[1]
    if k > n:
        raise ValueError(f"{k} depots for {n} customers: more depots than customers; use at most {n} depots")
    for key in ("demand_linehaul", "demand_backhaul"):
        if out[key].shape == (m, k + n):
            if (out[key][:, :k] != 0).any():
                raise ValueError(f"{key!r} gives a depot (its first {k} entries) a demand; depots have none")
            out[key] = out[key][:, k:]
    expected = {
        "depots": (m, k, 2),
        "coords": (m, n, 2),
        "demand_linehaul": (m, n),
        "demand_backhaul": (m, n),
        "backhaul_class": (m,),
        "time_windows": (m, k + n, 2),
        "service_time": (m, k + n),
        "distance_limit": (m,),
        "open_route": (m,),
    }
    for key, value in out.items():
        if value.shape != expected[key]:
            raise ValueError(f"{key!r} must have shape {list(expected[key])} (depots first), got {list(value.shape)}")
        if value.dtype != bool and np.isnan(value).any():
            raise ValueError(f"{key!r} contains NaN values")
    for key in ("depots", "coords", "demand_linehaul", "demand_backhaul", "service_time"):
        if not np.isfinite(out[key]).all():
            raise ValueError(f"{key!r} contains infinite values")
    for key in ("coords", "depots"):
        if (out[key] < 0).any() or (out[key] > 1).any():
            raise ValueError(f"{key!r} must lie in the unit square [0, 1]^2; normalise the coordinates first")
    if not np.isin(out["backhaul_class"], (1, 2)).all():
        raise ValueError("'backhaul_class' must be 1 (classic: linehauls before backhauls) or 2 (mixed)")
    check_demands_and_times(out)
    *_, alone = single_trips(out)
    unserved = ~alone.any(1)
    if unserved.any():
        b, i = np.argwhere(unserved)[0]
        raise ValueError(
            f"customer {i + 1} of instance {b} cannot be served on a route of its own from any depot: its window,"
            " the depot's closing or the distance limit rules it out"
        )
    return out


def thresholds(bound: np.ndarray, dist: np.ndarray, rows: tuple) -> np.ndarray:
    """The bound [M, k, A] on reaching node j less the move from node i: rows [(M * k * A), A] of
    float32 indexed by (instance, route depot, i), the tolerance included."""
    return (bound[:, :, None] - dist[:, None] + TOLERANCE).astype(np.float32).reshape(rows)


class VRPVectorEnv(RoutingVectorEnv):
    """M multi-task VRP instances x N trajectories. Actions are 0..k-1 (depots) and k..k+n-1 (customers).

    ``variant``: one of ``VARIANTS`` (e.g. "vrptw", "mdovrpmbltw") or a mix of ``MIXES`` for the
    random instances; ``num_depots``: k (default ``default_depots(variant)``: 3 where a variant has
    MD). Fixed instances given to ``reset(options=...)`` may be of any variant with k depots.

    Dynamic observation, each [M, N] unless stated: ``action_mask`` [M, N, k + n], ``last_node``,
    ``route_depot`` (the depot the current route returns to), ``remaining_linehaul`` and
    ``remaining_backhaul`` (room on the current route for deliveries and pickups, fractions of
    capacity; linehaul 0 once a classic backhaul is on board), ``current_time`` (when the vehicle is
    free to leave the last node), ``route_length`` (of the current route so far).
    """

    problem = "mtvrp"
    trajectory_state = (
        *RoutingVectorEnv.trajectory_state,
        *("num_served", "route_depot", "switched", "peak_load", "load_backhaul", "on_backhaul"),
        *("current_time", "route_length", "_fits"),
    )

    def __init__(
        self,
        num_envs: int = 1,
        num_nodes: int = 50,
        n_traj: int = 1,
        variant: str = "classic",
        num_depots: int | None = None,
        distribution: str = "uniform",
    ):
        """``distribution``: uniform (RouteFinder's generator) or, for the vrptw variant, solomon
        (``envs.distributions.solomon_instances``)."""
        self.variant = check_variant(variant)
        if distribution == "solomon" and variant != "vrptw":
            raise ValueError(f"the solomon distribution draws VRPTW instances; the variant is {variant!r}")
        k = default_depots(variant) if num_depots is None else num_depots
        if isinstance(k, bool) or int(k) != k or k < 1:
            raise ValueError(f"num_depots must be an integer >= 1, got {num_depots!r}")
        if variant in VARIANTS and VARIANTS[variant].multi_depot and k < 2:
            raise ValueError(f"variant {variant!r} has several depots; num_depots must be at least 2, got {k}")
        if k > num_nodes:
            raise ValueError(f"{k} depots for {num_nodes} customers: more depots than customers")
        self.num_depots = int(k)
        super().__init__(num_envs=num_envs, num_nodes=num_nodes, n_traj=n_traj, distribution=distribution)
        self.routes = self.early_returns = 0

    @property
    def num_actions(self) -> int:
        return self.num_depots + self.num_nodes

    @property
    def max_episode_steps(self) -> int:
        """One depot: a return after every customer. Several: also two depot moves (the second
        forced) before each route."""
        return 2 * self.num_nodes if self.num_depots == 1 else 4 * self.num_nodes + 1

    @property
    def start_actions(self) -> np.ndarray:
        """Every action allowed at the start: the customers (a route from depot 0) and the other depots."""
        return np.arange(1, self.num_actions)

    def random_instances(self, count: int) -> dict:
        if self.distribution == "solomon":
            return solomon_instances(self.rng, count, self.num_nodes)
        return vrp_instances(self.rng, count, self.num_nodes, self.variant, self.num_depots)

    def check_instances(self, options: dict) -> dict:
        static = check_vrp_instances(options, self.num_envs, self.num_nodes)
        if static["depots"].shape[1] != self.num_depots:
            raise ValueError(f"the instances have {static['depots'].shape[1]} depots, the env {self.num_depots}")
        return static

    def _dynamic_spaces(self, lead: tuple) -> dict:
        n, k, a, traj = self.num_nodes, self.num_depots, self.num_actions, self.n_traj
        unbounded = {"low": 0.0, "high": np.inf, "dtype": np.float64}
        return {
            "depots": gym.spaces.Box(0.0, 1.0, (*lead, k, 2), np.float64),
            "demand_linehaul": gym.spaces.Box(0.0, 1.0, (*lead, n), np.float64),
            "demand_backhaul": gym.spaces.Box(0.0, 1.0, (*lead, n), np.float64),
            "backhaul_class": gym.spaces.Box(1.0, 2.0, lead, np.float64),
            "time_windows": gym.spaces.Box(shape=(*lead, a, 2), **unbounded),
            "service_time": gym.spaces.Box(shape=(*lead, a), **unbounded),
            "distance_limit": gym.spaces.Box(shape=lead, **unbounded),
            "open_route": gym.spaces.Box(0, 1, lead, bool),
            "route_depot": gym.spaces.Box(0, k - 1, (*lead, traj), np.int64),
            "remaining_linehaul": gym.spaces.Box(0.0, 1.0, (*lead, traj), np.float64),
            "remaining_backhaul": gym.spaces.Box(0.0, 1.0, (*lead, traj), np.float64),
            "current_time": gym.spaces.Box(shape=(*lead, traj), **unbounded),
            "route_length": gym.spaces.Box(shape=(*lead, traj), **unbounded),
        }

    def _start(self) -> None:
        s, shape, k, a = self.static, (self.num_envs, self.n_traj), self.num_depots, self.num_actions
        self._set_points(np.concatenate([s["depots"], s["coords"]], axis=1))
        zero = np.zeros((self.num_envs, k))
        self.node_linehaul = np.concatenate([zero, s["demand_linehaul"]], axis=1)
        self.node_backhaul = np.concatenate([zero, s["demand_backhaul"]], axis=1)
        # one comparison per load: a backhaul's linehaul key (-2) passes even the -1 left once a classic
        # backhaul is on board, which stops every linehaul; a linehaul's backhaul key is 0
        is_backhaul = self.node_backhaul > 0
        self._linehaul_key = np.where(is_backhaul, -2.0, self.node_linehaul)[:, None].astype(np.float32)
        self._backhaul_key = self.node_backhaul[:, None].astype(np.float32)
        self._backhauls = bool(is_backhaul.any())
        self._classic = (s["backhaul_class"] == 1)[:, None]  # [M, 1]
        self._open = s["open_route"][:, None]
        self._opening, self._service = s["time_windows"][..., 0], s["service_time"]
        dist, latest, length, alone = single_trips(s)
        self._alone = np.concatenate([np.zeros((self.num_envs, k, k), dtype=bool), alone], axis=2)  # [M, k, A]
        self._switchable = distinct_depots(s["depots"], s["time_windows"])  # [M, k]
        self._timed = bool(np.isfinite(latest[:, :, k:]).any())
        self._limited = bool(np.isfinite(s["distance_limit"]).any())
        # thresholds by (instance, route depot, from node) rows of the next node, so that a step gathers
        # one row per trajectory and compares: time <= latest_rj - d_ij, length <= L - back_rj - d_ij
        rows = (self.num_envs * k * a, a)
        self._time_rows = thresholds(latest, dist, rows) if self._timed else None
        self._length_rows = thresholds(length, dist, rows) if self._limited else None
        self._row_offsets = np.arange(self.num_envs)[:, None] * (k * a)
        self._gathered = np.empty((*shape, a), dtype=np.float32)  # scratch buffers of the mask
        self._within = np.empty((*shape, a), dtype=bool)
        self._flat_offsets = (np.arange(self.num_envs * self.n_traj) * a).reshape(shape)
        self.unvisited = np.ones((*shape, a), dtype=bool)
        self.unvisited[..., :k] = False
        self.num_served = np.zeros(shape, dtype=np.int64)
        self.last_node = np.zeros(shape, dtype=np.int64)
        self.route_depot = np.zeros(shape, dtype=np.int64)
        self.switched = np.zeros(shape, dtype=bool)  # the last action moved between depots
        self.peak_load = np.zeros(shape)  # the most on board at any point of the route (deliveries ride from the depot)
        self.load_backhaul = np.zeros(shape)  # picked up on this route
        self.on_backhaul = np.zeros(shape, dtype=bool)
        self.current_time = np.broadcast_to(self._opening[:, :1], shape).copy()
        self.route_length = np.zeros(shape)
        self.routes = self.early_returns = 0
        self._place(self.last_node)
        self._update_mask()

    def _move(self, actions: np.ndarray) -> np.ndarray:
        k = self.num_depots
        node = self._offsets + actions  # [M, N]: flat index of each trajectory's node in [M, A] arrays
        length = self._move_length(actions)
        to_depot = actions < k
        switch = to_depot & (self.last_node < k) & ~self.terminated
        reward = -np.where(switch | (to_depot & self._open), 0.0, length)
        closing = to_depot & (self.last_node >= k)
        if closing.any():  # early: some unserved customer still fitted the load (the last mask's)
            closed = np.flatnonzero(closing)
            self.routes += len(closed)
            self.early_returns += int(self._fits.reshape(-1, self.num_actions)[closed, k:].any(-1).sum())
        opening = self._opening.take(node)
        begin = np.maximum(self.current_time + length, opening)
        self.current_time = np.where(to_depot, opening, begin + self._service.take(node))
        self.route_length = np.where(to_depot, 0.0, self.route_length + length)
        delivery, pickup = self.node_linehaul.take(node), self.node_backhaul.take(node)
        self.load_backhaul = np.where(to_depot, 0.0, self.load_backhaul + pickup)
        self.peak_load = np.where(to_depot, 0.0, np.maximum(self.peak_load + delivery, self.load_backhaul))
        self.on_backhaul = ~to_depot & (self.on_backhaul | (pickup > 0))
        self.route_depot = np.where(switch, actions, self.route_depot)
        self.switched = switch
        self.unvisited.reshape(-1)[self._flat_offsets + actions] = False
        self.num_served += ~to_depot  # the mask lets a customer be chosen only once
        self.last_node = actions.copy()
        self.terminated |= to_depot & (self.num_served == self.num_nodes)
        self._update_mask()
        return reward

    def _update_mask(self) -> None:
        tol, k = TOLERANCE, self.num_depots
        stopped = self.on_backhaul & self._classic
        left = np.where(stopped, -1.0, 1.0 - self.peak_load + tol).astype(np.float32)
        fits = self._linehaul_key <= left[..., None]
        if self._backhauls:
            fits &= self._backhaul_key <= (1.0 - self.load_backhaul + tol).astype(np.float32)[..., None]
        fits &= self.unvisited
        self._fits = fits  # the load-feasible unserved customers, for the early-return statistic
        mask = fits
        index = self._row_offsets + self.route_depot * self.num_actions + self.last_node  # each trajectory's row
        for threshold, value in ((self._time_rows, self.current_time), (self._length_rows, self.route_length)):
            if threshold is not None:
                threshold.take(index, axis=0, out=self._gathered, mode="clip")  # valid indices: no buffering
                within = np.less_equal(value.astype(np.float32)[..., None], self._gathered, out=self._within)
                mask = mask & within if mask is fits else np.logical_and(mask, within, out=mask)
        if mask is fits:
            mask = fits.copy()
        at_depot = self.last_node < k
        finished = at_depot & (self.num_served == self.num_nodes)
        if k == 1:
            mask[..., 0] = ~at_depot | finished
        else:
            own = np.arange(k) == self.route_depot[..., None]  # [M, N, k]
            depots = (at_depot & ~self.switched)[..., None] & self._switchable[:, None]
            stuck = np.nonzero(at_depot & ~mask[..., k:].any(-1) & ~finished)  # no customer from here
            if len(stuck[0]):  # only to depots that can still serve a customer alone: [S, k]
                depots[stuck] = (self._alone[stuck[0]] & self.unvisited[stuck][:, None]).any(-1)
            mask[..., :k] = np.where(at_depot[..., None], depots & ~own, own)
            mask[finished] = False
            mask[finished, self.last_node[finished]] = True  # a finished trajectory stays at its depot
        self.action_mask = mask

    def _dynamic_observation(self) -> dict:
        return {
            "action_mask": self.action_mask,
            "last_node": self.last_node,
            "route_depot": self.route_depot,
            "remaining_linehaul": np.where(self.on_backhaul & self._classic, 0.0, 1.0 - self.peak_load),
            "remaining_backhaul": 1.0 - self.load_backhaul,
            "current_time": self.current_time,
            "route_length": self.route_length,
        }

    def episode_statistics(self) -> dict:
        """``early_return_fraction``: the share of routes so far that went back to the depot while an
        unserved customer still fitted the load (cut by a window, the length limit or the policy)."""
        return {"early_return_fraction": self.early_returns / max(1, self.routes)}


class VRPEnv(SingleRoutingEnv):
    """One multi-task VRP instance x N trajectories (see ``VRPVectorEnv``; ``variant`` and
    ``num_depots`` as there)."""

    vector_class = VRPVectorEnv
