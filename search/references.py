"""Reference solutions computed on the fly: LKH (elkai) for TSP, PyVRP for CVRP.

Both are optional extras (requirements-dev.txt), imported only when asked. elkai bundles LKH,
whose licence is for non-commercial use only. Distances are made integer as the solvers need:
rounded instance distances for TSPLIB / CVRPLIB files, unit-square distances scaled by 10^4
otherwise (so the reference length is re-measured on the returned tour, in reported units).
"""

from __future__ import annotations

import os

import numpy as np

from envs.instances import KOOL_SEEDS
from search.datasets import Dataset, load_data

UNIT_SCALE = 10_000
SOLVERS = {"lkh": "tsp", "pyvrp": "cvrp"}


def integer_distances(dataset: Dataset, index: int) -> np.ndarray:
    dist = dataset.distance_matrix(index)
    return dist.astype(np.int64) if dataset.rounded else np.rint(dist * UNIT_SCALE).astype(np.int64)


def solve_reference(dataset: Dataset, index: int, solver: str, seconds: float) -> float:
    """The reference length of instance ``index`` in reported units."""
    if SOLVERS[solver] != dataset.problem:
        raise ValueError(f"--reference-solver {solver} solves {SOLVERS[solver].upper()}, not {dataset.problem.upper()}")
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
