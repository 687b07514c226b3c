"""Problem instances: random training instances, the standard test sets of Kool et al., validation.

An instance is a dict of NumPy arrays with a leading instance axis M (the *static* observation):
- TSP: ``coords`` [M, n, 2] in the unit square.
- CVRP: ``depot`` [M, 2], ``coords`` [M, n, 2] (customers), ``demand`` [M, n] (demand divided by
  the vehicle capacity, in (0, 1]).
"""

from __future__ import annotations

import numpy as np

PROBLEMS = ("tsp", "cvrp")
STATIC_KEYS = {
    "tsp": ("coords",),
    "cvrp": ("depot", "coords", "demand"),
    "mtvrp": (  # the multi-task VRP env, see envs.vrp
        "depots",
        "coords",
        "demand_linehaul",
        "demand_backhaul",
        "backhaul_class",
        "time_windows",
        "service_time",
        "distance_limit",
        "open_route",
    ),
    "mrcvrp": ("depot", "coords", "demand"),  # demand [M, n, R], see envs.mrcvrp
    "pdp": ("depot", "coords", "load"),  # see envs.pdp
    "op": ("depot", "coords", "prize", "max_length"),  # the prize-collecting problems, see envs.prize
    "pctsp": ("depot", "coords", "prize", "penalty"),
    "pcvrp": ("depot", "coords", "demand", "prize"),
}
KOOL_CAPACITY = {10: 20.0, 20: 30.0, 50: 40.0, 100: 50.0}
KOOL_SEEDS = {"test": 1234, "val": 4321}
KOOL_SET_SIZE = 10_000


def cvrp_capacity(num_customers: int) -> float:
    """Vehicle capacity for CVRP with ``num_customers`` customers (demands are integers 1..9).

    Kool et al.'s sizes keep their values (10: 20, 20: 30, 50: 40, 100: 50). Other sizes are
    interpolated linearly between those points and rounded to the nearest integer; below 10
    customers the capacity is 20, above 100 it grows by 1 per 5 customers (125: 55, 150: 60,
    200: 70, as in RL4CO).
    """
    if num_customers in KOOL_CAPACITY:
        return KOOL_CAPACITY[num_customers]
    if num_customers < 10:
        return 20.0
    if num_customers > 100:
        return float(round(50 + (num_customers - 100) / 5))
    sizes = sorted(KOOL_CAPACITY)
    return float(round(np.interp(num_customers, sizes, [KOOL_CAPACITY[s] for s in sizes])))


def random_instances(problem: str, rng: np.random.Generator, num_instances: int, num_nodes: int) -> dict:
    """Draws ``num_instances`` instances of Kool et al.'s distribution from ``rng``."""
    coords = rng.uniform(size=(num_instances, num_nodes, 2))
    if problem == "tsp":
        return {"coords": coords}
    depot = rng.uniform(size=(num_instances, 2))
    demand = rng.integers(1, 10, size=(num_instances, num_nodes))
    return {"depot": depot, "coords": coords, "demand": demand / cvrp_capacity(num_nodes)}


def standard_count(split: str, num_instances: int | None, set_size: int) -> int:
    """Checks the ``split`` of a standard set ("test" or "val") and returns how many of its
    ``set_size`` instances to take (all when ``num_instances`` is None)."""
    if split not in KOOL_SEEDS:
        raise ValueError(f"split must be one of {sorted(KOOL_SEEDS)}, got {split!r}")
    count = set_size if num_instances is None else num_instances
    if not 1 <= count <= set_size:
        raise ValueError(f"num_instances must be in 1..{set_size}, got {num_instances}")
    return count


def kool_dataset(problem: str, num_nodes: int, split: str = "test", num_instances: int | None = None) -> dict:
    """The standard data sets of Kool et al. (2019), regenerated bit-exactly from their recipe.

    ``split`` is ``"test"`` (seed 1234) or ``"val"`` (seed 4321); each set has 10,000 instances,
    of which the first ``num_instances`` are returned. Only those are kept: the stream is drawn in
    instance order (TSP: the first K instances are its first K x n x 2 values; CVRP: all depots, then
    all coordinates, then all demands, so the coordinates of the other instances are drawn in chunks
    and dropped).
    """
    check_problem(problem)
    count = standard_count(split, num_instances, KOOL_SET_SIZE)
    rs = np.random.RandomState(KOOL_SEEDS[split])
    if problem == "tsp":
        return {"coords": rs.uniform(size=(count, num_nodes, 2))}
    depot = rs.uniform(size=(KOOL_SET_SIZE, 2))
    coords = rs.uniform(size=(count, num_nodes, 2))
    chunk = max(1, (1 << 22) // (2 * num_nodes))  # 32 MB of float64 at a time
    for start in range(count, KOOL_SET_SIZE, chunk):
        rs.uniform(size=(min(chunk, KOOL_SET_SIZE - start), num_nodes, 2))
    demand = rs.randint(1, 10, size=(KOOL_SET_SIZE, num_nodes))
    return {"depot": depot[:count], "coords": coords, "demand": demand[:count] / cvrp_capacity(num_nodes)}


def check_problem(problem: str) -> None:
    if problem not in PROBLEMS:
        raise ValueError(f"problem must be one of {PROBLEMS}, got {problem!r}")


def read_arrays(
    problem: str, instances: dict, keys: tuple, num_instances: int | None, num_nodes: int | None
) -> tuple[dict, int, int]:
    """The first checks every problem shares: exactly ``keys``, numeric arrays (float64;
    ``open_route`` bool), ``coords`` [M, n, 2] with n >= 2 and M, n as expected when given.
    Returns the arrays, M and n."""
    if not isinstance(instances, dict):
        raise ValueError(f"{problem} instances must be a dict with keys {keys}, got {type(instances).__name__}")
    missing = [k for k in keys if k not in instances]
    unknown = [k for k in instances if k not in keys]
    if missing or unknown:
        raise ValueError(f"{problem} instances need exactly the keys {keys}; missing {missing}, unknown {unknown}")
    out = {}
    for key in keys:
        try:
            out[key] = np.asarray(instances[key], dtype=bool if key == "open_route" else np.float64)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{key!r} must be numeric: {exc}") from exc
    coords = out["coords"]
    if coords.ndim != 3 or coords.shape[2] != 2:
        raise ValueError(f"'coords' must have shape [M, n, 2], got {list(coords.shape)}")
    m, n, _ = coords.shape
    if n < 2:
        raise ValueError(f"an instance needs at least 2 nodes, 'coords' has {n}")
    if num_instances is not None and m != num_instances:
        raise ValueError(f"'coords' holds {m} instances, expected {num_instances} (one per env)")
    if num_nodes is not None and n != num_nodes:
        raise ValueError(f"'coords' holds {n} nodes per instance, expected num_nodes={num_nodes}")
    return out, m, n


def check_arrays(out: dict, expected: dict) -> None:
    """The checks the static arrays ``out`` of every depot problem share: each key's shape as in
    ``expected`` (key -> shape; a None entry takes any size on that axis), finite values, and
    points (``coords``, ``depot``, ``depots``) in the unit square. Raises ``ValueError`` naming the key."""
    for key, shape in expected.items():
        value = out[key]
        if value.ndim != len(shape) or any(s is not None and s != v for s, v in zip(shape, value.shape, strict=True)):
            wanted = [s if s is not None else "R" for s in shape]
            raise ValueError(f"{key!r} must have shape {wanted}, got {list(value.shape)}")
        if not np.isfinite(value).all():
            raise ValueError(f"{key!r} contains NaN or infinite values")
    for key in ("coords", "depot", "depots"):
        if key in out and ((out[key] < 0).any() or (out[key] > 1).any()):
            raise ValueError(f"{key!r} must lie in the unit square [0, 1]^2; normalise the coordinates first")


def check_instances(
    problem: str, instances: dict, num_instances: int | None = None, num_nodes: int | None = None
) -> dict:
    """Validates a batch of static arrays and returns them as float64 arrays.

    Raises ``ValueError`` naming the key and what is wrong: missing or unknown keys, shapes that do
    not agree (or differ from ``num_instances`` / ``num_nodes`` when given), NaN or infinite values,
    coordinates outside [0, 1], demands outside (0, 1].
    """
    check_problem(problem)
    out, m, n = read_arrays(problem, instances, STATIC_KEYS[problem], num_instances, num_nodes)
    expected = {"coords": (m, n, 2), "depot": (m, 2), "demand": (m, n)}
    check_arrays(out, {key: expected[key] for key in out})
    if "demand" in out:
        demand = out["demand"]
        if (demand <= 0).any():
            raise ValueError("'demand' must be positive (demand divided by capacity, in (0, 1])")
        if (demand > 1).any():
            raise ValueError("'demand' above 1: a customer demands more than the vehicle capacity")
    return out
