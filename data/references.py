"""Reference solutions computed on the fly: LKH (elkai) for TSP, PyVRP for CVRP and every VRP variant.

Both are optional extras (requirements-dev.txt), imported only when asked. elkai bundles LKH,
whose licence is for non-commercial use only. Distances are made integer as the solvers need:
rounded instance distances for TSPLIB / CVRPLIB files, unit-square distances scaled by 10^4
otherwise (so the reference length is re-measured on the returned tour, in reported units).

PyVRP expresses every attribute of the multi-task VRP exactly: time windows, service durations
and the depot's horizon; the route-length limit (``max_distance``); open routes as free arcs back to
the depot (distance and duration 0, so neither L nor the horizon sees the return); and the strict
linehaul-before-backhaul order as forbidden (prohibitively long) arcs from a backhaul to a
linehaul, with deliveries and pickups as PyVRP's delivery and pickup loads. Times and lengths are
rounded conservatively (travel up, window openings and service up, closings and limits down), so
that a solution feasible for PyVRP is feasible for the real instance; it is checked nonetheless.
"""

from __future__ import annotations

import os

import numpy as np

from data.datasets import Dataset, load_data
from envs.instances import KOOL_SEEDS
from search.solutions import vrp_cost

UNIT_SCALE = 10_000
SOLVERS = {"lkh": ("tsp",), "pyvrp": ("cvrp", "mtvrp")}
LOAD_SCALE = 1_000_000  # demands are fractions of the capacity


def integer_distances(dataset: Dataset, index: int) -> np.ndarray:
    dist = dataset.distance_matrix(index)
    return dist.astype(np.int64) if dataset.rounding == "nearest" else np.rint(dist * UNIT_SCALE).astype(np.int64)


def solve_reference(dataset: Dataset, index: int, solver: str, seconds: float) -> float:
    """The reference length of instance ``index`` in reported units."""
    if dataset.problem not in SOLVERS[solver]:
        solves = " and ".join(p.upper() for p in SOLVERS[solver])
        raise ValueError(f"--reference-solver {solver} solves {solves}, not {dataset.problem.upper()}")
    if dataset.problem == "mtvrp":
        return dataset.reported_length(index, pyvrp_vrp_tour(dataset, index, seconds))
    dist = integer_distances(dataset, index)
    tour = lkh_tour(dist) if solver == "lkh" else pyvrp_tour(dataset, index, dist, seconds)
    return dataset.reported_length(index, tour)


def lkh_tour(dist: np.ndarray) -> np.ndarray:
    try:
        import elkai
    except ImportError as exc:
        raise ImportError(
            "--reference-solver lkh needs elkai: pip install elkai (LKH, non-commercial licence)"
        ) from exc
    if len(dist) < 3:
        return np.arange(len(dist))
    return np.asarray(elkai.DistanceMatrix(dist.tolist()).solve_tsp(runs=10)[:-1])


def pyvrp_tour(dataset: Dataset, index: int, dist: np.ndarray, seconds: float) -> np.ndarray:
    """CVRP actions (customers 1..n, 0 = depot) of PyVRP's best solution within ``seconds``."""
    try:
        from pyvrp import Model
        from pyvrp.stop import MaxRuntime
    except ImportError as exc:
        raise ImportError("--reference-solver pyvrp needs PyVRP: pip install pyvrp") from exc
    demand = np.rint(dataset.instances["demand"][index] * UNIT_SCALE).astype(int)
    points = dataset.node_points(index)
    model = Model()
    model.add_vehicle_type(num_available=len(demand), capacity=UNIT_SCALE)
    locations = [model.add_location(x=float(x), y=float(y)) for x, y in points]
    model.add_depot(locations[0])
    for location, d in zip(locations[1:], demand, strict=True):
        model.add_client(location, delivery=int(d))
    for i, a in enumerate(locations):
        for j, b in enumerate(locations):
            model.add_edge(a, b, distance=int(dist[i, j]))
    result = model.solve(stop=MaxRuntime(seconds), display=False)
    tour = []
    for route in result.best.routes():
        tour += [activity.idx + 1 for activity in route if activity.is_client()] + [0]
    return np.asarray(tour)


def pyvrp_vrp_tour(dataset: Dataset, index: int, seconds: float) -> np.ndarray:
    """Actions (customers 1..n, 0 = depot) of PyVRP's best solution of a multi-task VRP instance
    within ``seconds``, checked against the instance (``search.solutions.vrp_cost``)."""
    try:
        from pyvrp import Model
        from pyvrp.stop import MaxRuntime
    except ImportError as exc:
        raise ImportError("--reference-solver pyvrp needs PyVRP: pip install pyvrp") from exc
    if dataset.rounding != "exact":
        raise ValueError(
            f"{dataset.names[index]}: PyVRP references are for generated and .npz instances; "
            "benchmark files carry their best-known costs"
        )
    inst = {key: value[index] for key, value in dataset.instances.items()}
    points = dataset.node_points(index)
    n = len(points) - 1
    dist = dataset.distance_matrix(index)  # exact: benchmark files were refused above
    travel = np.ceil(dist * UNIT_SCALE - 1e-6).astype(np.int64)
    if inst["open_route"]:
        travel[:, 0] = 0
    delivery = np.rint(np.concatenate([[0.0], inst["demand_linehaul"]]) * LOAD_SCALE).astype(int)
    pickup = np.rint(np.concatenate([[0.0], inst["demand_backhaul"]]) * LOAD_SCALE).astype(int)
    windows, service = inst["time_windows"], inst["service_time"]

    def down(x: float) -> int | None:
        return int(np.floor(x * UNIT_SCALE + 1e-6)) if np.isfinite(x) else None

    def up(x: float) -> int:
        return int(np.ceil(x * UNIT_SCALE - 1e-6))

    model = Model()
    closes = np.isfinite(windows[0, 1]) and not inst["open_route"]  # an open route's end is not checked
    horizon = {"tw_late": down(windows[0, 1])} if closes else {}
    limit = {"max_distance": down(inst["distance_limit"])} if np.isfinite(inst["distance_limit"]) else {}
    model.add_vehicle_type(num_available=n, capacity=LOAD_SCALE, tw_early=up(windows[0, 0]), **horizon, **limit)
    nodes = [model.add_location(x=float(x), y=float(y)) for x, y in points]
    model.add_depot(nodes[0])
    for i in range(1, n + 1):
        model.add_client(
            nodes[i],
            delivery=int(delivery[i]),
            pickup=int(pickup[i]),
            service_duration=up(service[i]),
            tw_early=up(windows[i, 0]),
            **({"tw_late": down(windows[i, 1])} if np.isfinite(windows[i, 1]) else {}),
        )
    forbidden = 1_000 * UNIT_SCALE * (n + 1)  # longer than any solution: a backhaul never precedes a linehaul
    for i, a in enumerate(nodes):
        for j, b in enumerate(nodes):
            blocked = pickup[i] > 0 and delivery[j] > 0
            model.add_edge(a, b, distance=forbidden if blocked else int(travel[i, j]), duration=int(travel[i, j]))
    result = model.solve(stop=MaxRuntime(seconds), display=False)
    tour = []
    for route in result.best.routes():
        tour += [activity.idx + 1 for activity in route if activity.is_client()] + [0]
    tour = np.asarray(tour)
    vrp_cost(inst, tour)  # raises InvalidTourError if PyVRP's best is not a feasible solution
    return tour


def kool_references(problem: str, num_nodes: int, split: str, count: int, cache_dir: str) -> np.ndarray | None:
    """LKH lengths [count] of the first ``count`` instances of a Kool et al. set (unit square), for
    the gaps of the trainer's periodic evaluation. TSP only (a CVRP reference takes PyVRP seconds
    per instance); computed once with elkai and cached as an .npy in ``cache_dir``. None (with a
    note) where they cannot be had."""
    if problem != "tsp":
        return None
    path = os.path.join(cache_dir, f"tsp{num_nodes}_{split}_seed{KOOL_SEEDS[split]}_first{count}_lkh.npy")
    try:
        cached = np.load(path, allow_pickle=False)
        if cached.shape == (count,):
            return cached
    except (OSError, ValueError, EOFError):
        pass  # missing or unreadable: computed again below
    try:
        import elkai  # noqa: F401
    except ImportError:
        print("note: no validation gaps (they need elkai for LKH references: pip install elkai)", flush=True)
        return None
    print(f"computing LKH references for {count} validation instances once (cached in {path})", flush=True)
    (data,) = load_data(f"kool-{split}", "tsp", num_nodes, count)
    lengths = np.array([solve_reference(data, i, "lkh", 0.0) for i in range(count)])
    os.makedirs(cache_dir, exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        np.save(f, lengths)
    os.replace(tmp, path)
    return lengths
