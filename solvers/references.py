"""Reference solutions computed on the fly: LKH (elkai) for TSP, PyVRP for CVRP and every VRP variant.

Both are optional extras (the solvers extra), imported only when asked. elkai bundles LKH,
whose licence is for non-commercial use only. Distances are made integer as the solvers need:
rounded instance distances for TSPLIB / CVRPLIB files, unit-square distances scaled by 10^4
otherwise (so the reference length is re-measured on the returned tour, in reported units).

PyVRP expresses every attribute of the multi-task VRP exactly: several depots (a vehicle type per
depot), time windows, service durations and the depots' horizon; the route-length limit
(``max_distance``); open routes as free arcs back to the depots (distance and duration 0, so
neither L nor the horizon sees the return); deliveries and pickups as PyVRP's delivery and pickup
loads, checked along the route (mixed backhauls), and the strict linehaul-before-backhaul order of
classic backhauls as forbidden (prohibitively long) arcs from a backhaul to a linehaul. Times and lengths are
rounded conservatively (travel up, window openings and service up, closings and limits down), so
that a solution feasible for PyVRP is feasible for the real instance; it is checked nonetheless.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from ppoor.checkers.tours import INTEGER_ROUNDINGS, depot_points, vrp_cost
from ppoor.data.datasets import (  # noqa: F401 (the shipped lengths' names, also read from here)
    SHIPPED_SOLVERS,
    VRP_SHIPPED_SECONDS,
    Dataset,
    load_data,
    shipped_name,
    shipped_references,
)
from ppoor.envs.instances import KOOL_SEEDS
from ppoor.envs.vrp import VARIANTS

UNIT_SCALE = 10_000
SOLVERS = {"lkh": ("tsp",), "pyvrp": ("cvrp", "mtvrp", "mrcvrp", "pcvrp"), "ortools": ("pdp", "op", "pctsp")}
LOAD_SCALE = 1_000_000  # demands are fractions of the capacity


def scale_up(x: float) -> int:
    """A time or length x UNIT_SCALE rounded up (travel, openings, service): what PyVRP / OR-Tools
    accept on the integer data is then feasible on the real one."""
    return int(np.ceil(x * UNIT_SCALE - 1e-6))


def scale_down(x: float) -> int | None:
    """A closing time or limit x UNIT_SCALE rounded down; None when it is infinite (no bound)."""
    return int(np.floor(x * UNIT_SCALE + 1e-6)) if np.isfinite(x) else None


def late(x: float) -> dict:
    """``tw_late`` of a window closing at ``x``, none when it never closes."""
    return {"tw_late": scale_down(x)} if np.isfinite(x) else {}


def scaled_distances(points: np.ndarray) -> np.ndarray:
    """Distances [A, A] between ``points`` [A, 2], x UNIT_SCALE rounded up (``scale_up``)."""
    dist = np.sqrt(((points[:, None] - points[None]) ** 2).sum(-1))
    return np.ceil(dist * UNIT_SCALE - 1e-6).astype(np.int64)


def integer_distances(dataset: Dataset, index: int) -> np.ndarray:
    dist = dataset.distance_matrix(index)
    return (
        dist.astype(np.int64) if dataset.rounding in INTEGER_ROUNDINGS else np.rint(dist * UNIT_SCALE).astype(np.int64)
    )


def solve_reference(dataset: Dataset, index: int, solver: str, seconds: float) -> float:
    """The reference length of instance ``index`` in reported units."""
    if dataset.problem not in SOLVERS[solver]:
        solves = " and ".join(p.upper() for p in SOLVERS[solver])
        raise ValueError(f"--reference-solver {solver} solves {solves}, not {dataset.problem.upper()}")
    if dataset.problem == "mtvrp":
        return dataset.reported_length(index, pyvrp_vrp_tour(dataset, index, seconds))
    if dataset.problem in FAMILY_SOLVERS:  # the cost is re-measured (and the tour checked) on the instance
        instance = {key: value[index] for key, value in dataset.instances.items()}
        return dataset.reported_length(index, FAMILY_SOLVERS[dataset.problem](instance, seconds))
    tour = lkh_tour(integer_distances(dataset, index)) if solver == "lkh" else pyvrp_tour(dataset, index, seconds)
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


def pyvrp_tour(dataset: Dataset, index: int, seconds: float) -> np.ndarray:
    """CVRP actions (customers 1..n, 0 = depot) of PyVRP's best solution within ``seconds``."""
    model, _ = pyvrp_model(dataset, index)
    return depot_actions(model.solve(stop=max_runtime(seconds), display=False).best)


def pyvrp_depot_routes(
    points: np.ndarray, dist: np.ndarray, loads: np.ndarray, capacity: int, prizes: np.ndarray | None, seconds: float
) -> np.ndarray:
    """PyVRP's best solution within ``seconds`` of a one-depot problem with capacitated routes
    (``depot_model``'s arguments), as actions (``depot_actions``)."""
    model = depot_model(points, dist, loads, capacity, prizes)
    return depot_actions(model.solve(stop=max_runtime(seconds), display=False).best)


def pyvrp():
    """The pyvrp module, or an ImportError that says how to install it."""
    try:
        import pyvrp
        import pyvrp.search
        import pyvrp.stop
    except ImportError as exc:
        raise ImportError("PyVRP is needed here (references and the VRP polish): pip install pyvrp") from exc
    return pyvrp


def max_runtime(seconds: float):
    return pyvrp().stop.MaxRuntime(seconds)


def depot_model(points: np.ndarray, dist: np.ndarray, loads: np.ndarray, capacity: int, prizes: np.ndarray | None):
    """PyVRP's model of a one-depot problem with capacitated routes: ``points`` [A, 2] (depot first),
    integer distances [A, A], integer ``loads`` [n, R] against ``capacity`` in every dimension, and
    (prize collecting) optional clients with integer ``prizes`` [n]; client i is action i + 1."""
    model = pyvrp().Model()
    model.add_vehicle_type(num_available=len(loads), capacity=[capacity] * loads.shape[1])
    nodes = [model.add_location(x=float(x), y=float(y)) for x, y in points]
    model.add_depot(nodes[0])
    for i, load in enumerate(loads):
        optional = {} if prizes is None else {"required": False, "prize": int(prizes[i])}
        model.add_client(nodes[i + 1], delivery=load.tolist(), **optional)
    for i, a in enumerate(nodes):
        for j, b in enumerate(nodes):
            model.add_edge(a, b, distance=int(dist[i, j]))
    return model


def depot_actions(solution) -> np.ndarray:
    """A PyVRP solution of a ``depot_model`` as actions (customers 1..n, 0 = the depot after each
    route; [0] if no route)."""
    tour = []
    for route in solution.routes():
        tour += [activity.idx + 1 for activity in route if activity.is_client()] + [0]
    return np.asarray(tour or [0])


def pyvrp_vrp_tour(dataset: Dataset, index: int, seconds: float, benchmark: bool = False) -> np.ndarray:
    """Actions (depots 0..k-1, customers k..) of PyVRP's best solution of a multi-task VRP instance
    within ``seconds``, checked against the instance (``checkers.tours.vrp_cost``): one vehicle type
    per depot, starting and ending there; mixed backhauls are PyVRP's own pickups and deliveries
    (the load checked along the route), classic ones add the forbidden arcs. As the env's actions:
    from depot 0, a move to each route's depot where it differs, its customers, its return.
    ``benchmark``: a benchmark file's instance is solved too (a solver compared with others, not a
    reference; see ``vrp_model``)."""
    model = vrp_model(dataset, index, search=benchmark)
    k = len(dataset.instances["depots"][index])
    tour = vrp_actions(model.solve(stop=max_runtime(seconds), display=False).best, k)
    vrp_cost({key: value[index] for key, value in dataset.instances.items()}, tour)  # raises if not feasible
    return tour


def vrp_model(dataset: Dataset, index: int, search: bool = False):
    """PyVRP's model of multi-task VRP instance ``index`` (``pyvrp_vrp_tour``): depot d is PyVRP's
    depot d and vehicle type d, customer action k + i its client i. A benchmark file's instance is
    refused for references (it carries its best-known cost) but modelled for a ``search`` (the
    polish), whose solutions are feasible with exact distances, so under the file's rounding too, and
    are re-scored in the file's units by our checker."""
    if dataset.rounding != "exact" and not search:
        raise ValueError(
            f"{dataset.names[index]}: PyVRP references are for generated and .npz instances; "
            "benchmark files carry their best-known costs"
        )
    inst = {key: value[index] for key, value in dataset.instances.items()}
    points = np.concatenate([inst["depots"], inst["coords"]])  # the unit square, as the windows and limits are
    k, n = len(inst["depots"]), len(inst["coords"])
    travel = scaled_distances(points)  # exact distances, rounded up (a file's own rounding only in its re-scoring)
    if inst["open_route"]:
        travel[:, :k] = 0
    zeros = np.zeros(k)
    delivery = np.rint(np.concatenate([zeros, inst["demand_linehaul"]]) * LOAD_SCALE).astype(int)
    pickup = np.rint(np.concatenate([zeros, inst["demand_backhaul"]]) * LOAD_SCALE).astype(int)
    windows, service = inst["time_windows"], inst["service_time"]
    model = pyvrp().Model()
    nodes = [model.add_location(x=float(x), y=float(y)) for x, y in points]
    limit = {"max_distance": scale_down(inst["distance_limit"])} if np.isfinite(inst["distance_limit"]) else {}
    for d in range(k):
        depot = model.add_depot(nodes[d])
        closes = np.isfinite(windows[d, 1]) and not inst["open_route"]  # an open route's end is not checked
        horizon = late(windows[d, 1]) if closes else {}
        model.add_vehicle_type(
            num_available=n, capacity=LOAD_SCALE, start_depot=depot, end_depot=depot,
            tw_early=scale_up(windows[d, 0]), **horizon, **limit,
        )  # fmt: skip
    for i in range(k, k + n):
        model.add_client(
            nodes[i],
            delivery=int(delivery[i]),
            pickup=int(pickup[i]),
            service_duration=scale_up(service[i]),
            tw_early=scale_up(windows[i, 0]),
            **late(windows[i, 1]),
        )
    classic = float(inst["backhaul_class"]) == 1
    forbidden = 1_000 * UNIT_SCALE * (n + k)  # longer than any solution: a backhaul never precedes a linehaul
    for i, a in enumerate(nodes):
        for j, b in enumerate(nodes):
            blocked = classic and pickup[i] > 0 and delivery[j] > 0
            model.add_edge(a, b, distance=forbidden if blocked else int(travel[i, j]), duration=int(travel[i, j]))
    return model


def vrp_actions(solution, k: int) -> np.ndarray:
    """A PyVRP solution of a ``vrp_model`` with ``k`` depots as the env's actions: from depot 0, a
    move to each route's depot where it differs, its customers, its return."""
    tour, here = [], 0
    for route in solution.routes():
        depot = route.start_depot()
        tour += ([depot] if depot != here else []) + [k + activity.idx for activity in route if activity.is_client()]
        tour.append(depot)
        here = depot
    return np.asarray(tour)


def pyvrp_model(dataset: Dataset, index: int, search: bool = False) -> tuple[object, int]:
    """PyVRP's model of instance ``index`` of a CVRP, multi-task VRP, multi-resource CVRP or
    prize-collecting CVRP set, and the number of depot actions before the customers' (1, or the VRP's
    k): the model the references solve and, with ``search``, the polish searches (``vrp_model``)."""
    if dataset.problem == "mtvrp":
        return vrp_model(dataset, index, search), len(dataset.instances["depots"][index])
    if dataset.problem == "cvrp":
        demand = np.rint(dataset.instances["demand"][index] * UNIT_SCALE).astype(int)[:, None]
        return depot_model(dataset.node_points(index), integer_distances(dataset, index), demand, UNIT_SCALE, None), 1
    if dataset.problem in ("mrcvrp", "pcvrp"):
        return depot_model(*family_model_arguments({key: value[index] for key, value in dataset.instances.items()})), 1
    raise ValueError(f"PyVRP models CVRP, the VRP variants, MRCVRP and PCVRP, not {dataset.problem.upper()}")


def kool_references(problem: str, num_nodes: int, split: str, count: int, cache_dir: str) -> np.ndarray | None:
    """Reference lengths [count] of the first ``count`` instances of a Kool et al. set (unit square),
    for the gaps of the trainer's periodic evaluation: the shipped ones (TSP 20 / 50 / 100 by LKH,
    CVRP 20 / 50 / 100 by PyVRP, 1,000 validation instances each), else for TSP computed once with elkai
    and cached as an .npy in ``cache_dir``. None (with a note) where they cannot be had."""
    shipped = shipped_references(problem, num_nodes, split, count)
    if shipped is not None or problem != "tsp":
        return shipped
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
    lengths = reference_lengths("tsp", num_nodes, split, count, "lkh", 0.0)
    os.makedirs(cache_dir, exist_ok=True)
    save_lengths(path, lengths)
    return lengths


def variant_references(variant: str, num_nodes: int, count: int, seconds: float, cache_dir, solve_all=None) -> np.ndarray:
    """PyVRP's lengths [count] of the first ``count`` RouteFinder test instances of ``variant``: the
    shipped ones where they were solved with ``seconds`` per instance, else solved once (by
    ``solve_all()``, default one after another here) and cached as an .npy in ``cache_dir``."""
    if VRP_SHIPPED_SECONDS.get(num_nodes) == seconds:
        shipped = shipped_references("mtvrp", num_nodes, "test", count, variant)
        if shipped is not None:
            return shipped
    path = os.path.join(cache_dir, f"{variant}{num_nodes}_test_first{count}_pyvrp{seconds:g}s.npy")
    if os.path.exists(path):
        return np.load(path, allow_pickle=False)
    print(f"{variant}: PyVRP, {seconds:g} s x {count} instances (cached in {path})", flush=True)
    if solve_all is None:
        lengths = reference_lengths("mtvrp", num_nodes, "test", count, "pyvrp", seconds, variant)
    else:
        lengths = np.asarray(solve_all(), dtype=float)
    os.makedirs(cache_dir, exist_ok=True)
    save_lengths(path, lengths)
    return lengths


def save_lengths(path: str, lengths: np.ndarray) -> None:
    """Writes ``lengths`` as an .npy at ``path`` atomically (a reader never sees half a file)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        np.save(f, lengths)
    os.replace(tmp, path)


def reference_lengths(
    problem: str, num_nodes: int, split: str, count: int, solver: str, seconds: float, variant: str | None = None
) -> np.ndarray:
    """``solver``'s lengths [count] of the first ``count`` instances of a standard set (Kool et al.'s;
    for the VRP, RouteFinder's of ``variant``)."""
    (data,) = load_data(split, problem, num_nodes, count, variant=variant)
    return np.array([solve_reference(data, i, solver, seconds) for i in range(count)])


def pyvrp_family_tour(instance: dict, seconds: float) -> np.ndarray:
    """PyVRP's best solution within ``seconds`` of a multi-resource CVRP (one load dimension per
    resource) or a prize-collecting CVRP (optional clients with prizes: PyVRP minimises distance +
    uncollected prizes) instance, as actions (customers 1..n, 0 = depot)."""
    return pyvrp_depot_routes(*family_model_arguments(instance), seconds)


def family_model_arguments(instance: dict) -> tuple:
    """``depot_model``'s arguments for a multi-resource or prize-collecting CVRP instance."""
    demand = np.asarray(instance["demand"], dtype=np.float64)
    loads = np.rint((demand if demand.ndim == 2 else demand[:, None]) * LOAD_SCALE).astype(int)  # [n, R]
    prizes = np.rint(np.asarray(instance["prize"]) * UNIT_SCALE) if "prize" in instance else None
    points = depot_points(instance)
    return points, scaled_distances(points), loads, LOAD_SCALE, prizes


def ortools_pdp_tour(instance: dict, seconds: float) -> np.ndarray:
    """OR-Tools routing's pickup-and-delivery model (one vehicle, pickup i and delivery i + n/2 on it
    in that order; with loads, a capacity dimension), guided local search for ``seconds``: actions
    (nodes 1..n, then the depot)."""
    routing_module = _ortools_routing()
    pywrapcp, enums = routing_module
    dist = scaled_distances(depot_points(instance))
    n = len(instance["coords"])
    half = n // 2
    manager = pywrapcp.RoutingIndexManager(n + 1, 1, 0)
    routing = pywrapcp.RoutingModel(manager)

    def distance(i: int, j: int) -> int:
        return int(dist[manager.IndexToNode(i), manager.IndexToNode(j)])

    transit = routing.RegisterTransitCallback(distance)
    routing.SetArcCostEvaluatorOfAllVehicles(transit)
    routing.AddDimension(transit, 0, int(dist.sum()) + 1, True, "distance")
    order = routing.GetDimensionOrDie("distance")
    load = np.concatenate(
        [[0], np.rint(np.asarray(instance["load"]) * LOAD_SCALE), -np.rint(np.asarray(instance["load"]) * LOAD_SCALE)]
    )
    if load.any():
        change = routing.RegisterUnaryTransitCallback(lambda i: int(load[manager.IndexToNode(i)]))
        routing.AddDimensionWithVehicleCapacity(change, 0, [LOAD_SCALE], True, "load")
    for k in range(1, half + 1):
        pickup, delivery = manager.NodeToIndex(k), manager.NodeToIndex(k + half)
        routing.AddPickupAndDelivery(pickup, delivery)
        routing.solver().Add(routing.VehicleVar(pickup) == routing.VehicleVar(delivery))
        routing.solver().Add(order.CumulVar(pickup) <= order.CumulVar(delivery))
    params = pywrapcp.DefaultRoutingSearchParameters()
    params.first_solution_strategy = enums.FirstSolutionStrategy.PARALLEL_CHEAPEST_INSERTION
    params.local_search_metaheuristic = enums.LocalSearchMetaheuristic.GUIDED_LOCAL_SEARCH
    params.time_limit.FromMilliseconds(max(1, int(seconds * 1000)))
    solution = routing.SolveWithParameters(params)
    if solution is None:
        raise ValueError("OR-Tools found no pickup-and-delivery solution")
    tour, index = [], solution.Value(routing.NextVar(routing.Start(0)))
    while not routing.IsEnd(index):
        tour.append(manager.IndexToNode(index))
        index = solution.Value(routing.NextVar(index))
    return np.asarray(tour + [0])


def _ortools_routing():
    try:
        from ortools.constraint_solver import pywrapcp, routing_enums_pb2
    except ImportError as exc:
        raise ImportError("--reference-solver ortools needs OR-Tools: pip install ortools") from exc
    return pywrapcp, routing_enums_pb2


def cpsat_prize_tour(instance: dict, seconds: float, min_prize: float = 1.0) -> np.ndarray:
    """One tour from the depot by OR-Tools CP-SAT, exact on the scaled integer data when it proves
    optimality within ``seconds`` (else its best tour): orienteering (``max_length`` given: the most
    prize within the length budget) or the prize-collecting TSP (the least length + penalties of the
    skipped customers, collecting at least ``min_prize`` or visiting every customer). A circuit over
    depot and customers where a customer's self-loop means it is skipped. Returns actions (the
    customers in order, then the depot)."""
    try:
        from ortools.sat.python import cp_model
    except ImportError as exc:
        raise ImportError("--reference-solver ortools needs OR-Tools: pip install ortools") from exc
    dist = scaled_distances(depot_points(instance))
    n = len(instance["coords"])
    orienteering = "max_length" in instance
    if orienteering:  # customers that fit no tour are left out of the model
        budget = scale_down(float(instance["max_length"]))
        usable = [i for i in range(1, n + 1) if dist[0, i] + dist[i, 0] <= budget]
        if not usable:
            return np.asarray([0])
    else:
        usable = list(range(1, n + 1))
    model = cp_model.CpModel()
    nodes = [0, *usable]
    arcs, used = [], {}
    for i in nodes:
        for j in nodes:
            if i != j:
                used[i, j] = model.NewBoolVar(f"x{i}_{j}")
                arcs.append((i, j, used[i, j]))
    visited = {i: model.NewBoolVar(f"v{i}") for i in usable}
    for i in usable:
        arcs.append((i, i, visited[i].Not()))  # the self-loop: skipped
    model.AddCircuit(arcs)
    model.AddBoolOr(list(visited.values()))  # at least one customer: the depot is on a real tour
    length = sum(int(dist[i, j]) * x for (i, j), x in used.items())
    prize = np.asarray(instance["prize"])
    if orienteering:
        model.Add(length <= budget)
        model.Maximize(sum(int(np.rint(prize[i - 1] * UNIT_SCALE)) * visited[i] for i in usable))
    else:
        needed = min(min_prize, float(prize.sum()))
        if needed >= float(prize.sum()) - 1e-9:
            model.Add(sum(visited.values()) == n)
        else:  # prizes rounded down, the minimum up: enough on the integer data is enough on the real one
            model.Add(
                sum(int(np.floor(prize[i - 1] * UNIT_SCALE)) * visited[i] for i in usable)
                >= int(np.ceil(needed * UNIT_SCALE))
            )
        penalty = np.asarray(instance["penalty"])
        model.Minimize(length + sum(int(np.rint(penalty[i - 1] * UNIT_SCALE)) * visited[i].Not() for i in usable))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = float(seconds)
    solver.parameters.num_workers = 1
    status = solver.Solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise ValueError(f"CP-SAT found no tour within {seconds:g} s; raise --solver-seconds")
    successor = {i: j for (i, j), x in used.items() if solver.Value(x)}
    tour, node = [], successor[0]
    while node != 0:
        tour.append(node)
        node = successor[node]
    return np.asarray(tour + [0])


FAMILY_SOLVERS = {
    "mrcvrp": pyvrp_family_tour,
    "pcvrp": pyvrp_family_tour,
    "pdp": ortools_pdp_tour,
    "op": cpsat_prize_tour,
    "pctsp": cpsat_prize_tour,
}
"""problem -> solver(instance arrays, seconds) -> tour (actions), for the further constraint families."""


if __name__ == "__main__":  # how the shipped reference lengths were made (data/reference_lengths/README.md)
    parser = argparse.ArgumentParser(description="reference lengths of a standard set, written as .npy")
    parser.add_argument("--problem", choices=[*sorted(SHIPPED_SOLVERS), "mtvrp"], required=True)
    parser.add_argument("--variant", choices=VARIANTS, help="mtvrp: the VRP variant (RouteFinder's test set of it)")
    parser.add_argument("--num-nodes", type=int, required=True)
    parser.add_argument("--split", choices=sorted(KOOL_SEEDS), default="val")
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=0.5, help="PyVRP's time per instance")
    parser.add_argument("--out", required=True, help="the .npy file to write")
    cli = parser.parse_args()
    if (cli.problem == "mtvrp") != (cli.variant is not None):
        parser.error("--variant is given with --problem mtvrp, and only with it")
    if not (1 <= cli.count <= 10_000 and 2 <= cli.num_nodes <= 1000 and 0 < cli.seconds <= 3600):
        parser.error("--count takes 1..10000, --num-nodes 2..1000, --seconds (0, 3600]")
    solver = "lkh" if cli.problem == "tsp" else "pyvrp"
    lengths = reference_lengths(cli.problem, cli.num_nodes, cli.split, cli.count, solver, cli.seconds, cli.variant)
    try:
        save_lengths(cli.out, lengths)
    except OSError as exc:
        parser.error(f"--out {cli.out}: cannot be written ({exc.strerror})")
    print(f"wrote {cli.out}")
