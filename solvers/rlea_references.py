"""Reference solutions of the benchmark's problems: OR-Tools' routing solver with guided local
search (every family), and Held-Karp dynamic programming, which proves optimality, for the TSP.

Problem format: ``codegen/benchmark.py``. The routes returned are checked by ``checkers/programs.py``,
which shares no code with this module.
"""

from __future__ import annotations

import numpy as np


def held_karp(distance: list[list[int]]) -> tuple[int, list[int]]:
    """The optimal closed tour from node 0 of a small TSP (n <= 17) by dynamic programming over
    subsets: O(2^n n^2) time. Returns (length, tour with 0 first and last)."""
    d = np.asarray(distance, dtype=np.int64)
    n = len(d)
    if n > 17:
        raise ValueError(f"Held-Karp is for at most 17 nodes, got {n}")
    m = n - 1  # node i >= 1 is bit i - 1
    inf = np.iinfo(np.int64).max // 4
    cost = np.full((1 << m, m), inf, dtype=np.int64)
    parent = np.full((1 << m, m), -1, dtype=np.int64)
    for j in range(m):
        cost[1 << j, j] = d[0, j + 1]
    between = d[1:, 1:]  # [m, m]
    for subset in range(1, 1 << m):
        row = cost[subset]
        if not (row < inf).any():
            continue
        outside = [j for j in range(m) if not subset >> j & 1]
        if not outside:
            continue
        # extend every end i of subset to every node j outside it
        through = row[:, None] + between[:, outside]  # [m, len(outside)]
        best = through.argmin(axis=0)
        for col, j in enumerate(outside):
            value = through[best[col], col]
            target = subset | 1 << j
            if value < cost[target, j]:
                cost[target, j] = value
                parent[target, j] = best[col]
    full = (1 << m) - 1
    closing = cost[full] + d[1:, 0]
    end = int(closing.argmin())
    tour, subset = [], full
    while end >= 0:
        tour.append(end + 1)
        previous = int(parent[subset, end])
        subset &= ~(1 << end)
        end = previous
    return int(closing.min()), [0, *tour[::-1], 0]


FIRST_SOLUTIONS = ("PATH_CHEAPEST_ARC", "PARALLEL_CHEAPEST_INSERTION", "LOCAL_CHEAPEST_INSERTION", "SAVINGS",
                   "CHRISTOFIDES", "AUTOMATIC")
"""OR-Tools' first-solution strategies, tried in turn until one finds a feasible solution."""
DROP_PENALTY = 10**7
"""The cost of leaving a customer out in the last fallback (visits made optional): larger than any route."""


def per_vehicle(value: int | list[int], vehicles: int) -> list[int]:
    """A fleet-wide number (one for every vehicle) or a per-vehicle list, as a list per vehicle."""
    return list(value) if isinstance(value, list) else [value] * vehicles


Solution = tuple[list[list[int]], list[list[int]] | None]
"""Routes, one list per vehicle (empty when unused), and with depot docks each vehicle's
[departure, return] (None otherwise)."""


def ortools_routes(instance: dict, families: list[str], seconds: float) -> Solution | None:
    """OR-Tools' best solution of the problem within ``seconds`` (guided local search), or None
    when it found no feasible one. Where the first
    strategy finds no solution, the others of FIRST_SOLUTIONS are tried, then the model with every
    visit optional at a prohibitive penalty (its local search can reach a solution that visits
    every customer from one that does not); each try gets ``seconds``."""
    fams = set(families)
    first = "PARALLEL_CHEAPEST_INSERTION" if fams & {"pickup_delivery", "time_windows"} else "PATH_CHEAPEST_ARC"
    tries = [(first, False), *((s, False) for s in FIRST_SOLUTIONS if s != first), ("PATH_CHEAPEST_ARC", True)]
    for strategy, optional in tries:
        found = solve_routing(instance, fams, seconds, strategy, optional)
        if found is not None:
            return found
    return None


def add_time(routing, manager, instance: dict, fams: set[str], time_cb: int, service: list[int]) -> None:
    """``solve_routing``'s time dimension: service then drive per arc (``time_cb``), the windows (the depot's
    bounding departure and, unless the problem frees it, the return), the duration limit as each vehicle's
    span, and the depot docks as cumulative resources over the dispatch and reception intervals."""
    d, vehicles, starts = instance["distance"], instance["num_vehicles"], instance["vehicle_depots"]
    n, depots, closed = len(d), set(instance["depots"]), "open" not in fams
    windows = instance["time_windows"] if "time_windows" in fams else None
    duration = instance.get("max_route_duration")
    free_return = instance.get("depot_window") == "departure"
    horizon = (max(w[1] for w in windows) if windows else 0) + sum(map(max, d)) + sum(service)
    routing.AddDimension(time_cb, horizon if windows else 0, horizon, False, "time")
    time = routing.GetDimensionOrDie("time")
    for v in range(vehicles):
        if duration is not None:  # the span: end minus a departure free within the window
            time.SetSpanUpperBoundForVehicle(duration, v)
        if windows:
            time.CumulVar(routing.Start(v)).SetRange(*windows[starts[v]])
            if closed and not free_return:
                time.CumulVar(routing.End(v)).SetRange(*windows[starts[v]])
        else:
            time.CumulVar(routing.Start(v)).SetValue(0)
    if windows:
        for i in range(n):
            if i not in depots:
                time.CumulVar(manager.NodeToIndex(i)).SetRange(*windows[i])
    if "depot_docks" in fams:  # every vehicle's dispatch and reception hold a dock (unused ones too)
        solver = routing.solver()
        for depot in depots:
            based = [v for v in range(vehicles) if starts[v] == depot]
            busy = [solver.FixedDurationIntervalVar(time.CumulVar(routing.Start(v)), instance["load_time"], "load")
                    for v in based] + [
                solver.FixedDurationIntervalVar(time.CumulVar(routing.End(v)), instance["unload_time"], "unload")
                for v in based]  # fmt: skip
            solver.Add(solver.Cumulative(busy, [1] * len(busy), instance["docks"], f"docks {depot}"))
        for v in range(vehicles):  # the solution then holds one consistent departure and return
            routing.AddVariableMinimizedByFinalizer(time.CumulVar(routing.Start(v)))
            routing.AddVariableMinimizedByFinalizer(time.CumulVar(routing.End(v)))


def read_routes(routing, manager, solution, starts: list[int], closed: bool) -> list[list[int]]:
    """Each vehicle's route in ``solution`` as nodes from its depot (back to it when routes are closed); []
    for an unused vehicle."""
    routes = []
    for v in range(len(starts)):
        index, route = routing.Start(v), []
        while not routing.IsEnd(index):
            route.append(manager.IndexToNode(index))
            index = solution.Value(routing.NextVar(index))
        routes.append([] if len(route) == 1 else route + [starts[v]] if closed else route)
    return routes


def solve_routing(instance: dict, fams: set[str], seconds: float, strategy: str, optional: bool) -> Solution | None:
    """One OR-Tools solve with the first-solution ``strategy``; ``optional``: every customer may be
    left out at DROP_PENALTY (a solution that leaves one out is no solution, unless the problem
    collects prizes, where its own penalties apply)."""
    from ortools.constraint_solver import pywrapcp, routing_enums_pb2

    d = instance["distance"]
    n, vehicles = len(d), instance["num_vehicles"]
    starts = instance["vehicle_depots"]
    depots = set(instance["depots"])
    closed = "open" not in fams
    manager = pywrapcp.RoutingIndexManager(n, vehicles, starts, starts)
    routing = pywrapcp.RoutingModel(manager)

    def arc(i: int, j: int) -> int:
        return 0 if not closed and j in depots else d[i][j]

    def node_callback(values):
        return routing.RegisterUnaryTransitCallback(lambda index: values[manager.IndexToNode(index)])

    service = instance["service_time"] if "service_time" in fams else [0] * n
    distance_cb = routing.RegisterTransitCallback(
        lambda a, b: arc(manager.IndexToNode(a), manager.IndexToNode(b))
    )
    time_cb = routing.RegisterTransitCallback(  # leaving a node takes its service, then the drive
        lambda a, b: service[manager.IndexToNode(a)] + arc(manager.IndexToNode(a), manager.IndexToNode(b))
    )
    routing.SetArcCostEvaluatorOfAllVehicles(time_cb if instance.get("objective") == "time" else distance_cb)
    if "capacity" in fams:
        # cumuls lie in 0..capacity: with pickups (+q) and deliveries (-q) the load never goes negative
        routing.AddDimensionWithVehicleCapacity(
            node_callback(instance["demand"]), 0, per_vehicle(instance["capacity"], vehicles), True, "load"
        )
    if "resources" in fams:
        routing.AddDimensionWithVehicleCapacity(
            node_callback(instance["volume"]), 0, per_vehicle(instance["volume_capacity"], vehicles), True, "volume"
        )
    limit = instance["max_route_distance"] if "distance_limit" in fams else sum(map(sum, d))
    routing.AddDimension(distance_cb, 0, limit, True, "distance")
    if "time_windows" in fams or "service_time" in fams or "max_route_duration" in instance:
        add_time(routing, manager, instance, fams, time_cb, service)
    if "pickup_delivery" in fams:
        order = routing.GetDimensionOrDie("distance")
        solver = routing.solver()
        for p, q in instance["pickup_delivery_pairs"]:
            pi, qi = manager.NodeToIndex(p), manager.NodeToIndex(q)
            routing.AddPickupAndDelivery(pi, qi)
            solver.Add(routing.VehicleVar(pi) == routing.VehicleVar(qi))
            solver.Add(order.CumulVar(pi) <= order.CumulVar(qi))
    if "prize" in fams or optional:
        for i in range(n):
            if i not in depots:
                routing.AddDisjunction([manager.NodeToIndex(i)], instance["penalty"][i] if "prize" in fams else DROP_PENALTY)
    params = pywrapcp.DefaultRoutingSearchParameters()
    params.first_solution_strategy = getattr(routing_enums_pb2.FirstSolutionStrategy, strategy)
    params.local_search_metaheuristic = routing_enums_pb2.LocalSearchMetaheuristic.GUIDED_LOCAL_SEARCH
    params.time_limit.FromMilliseconds(max(1, int(seconds * 1000)))
    solution = routing.SolveWithParameters(params)
    if solution is None:
        return None
    routes = read_routes(routing, manager, solution, starts, closed)
    visited = {v for route in routes for v in route}
    if optional and "prize" not in fams and any(i not in visited for i in range(n) if i not in depots):
        return None
    times = None
    if "depot_docks" in fams:
        time = routing.GetDimensionOrDie("time")
        times = [[solution.Value(time.CumulVar(routing.Start(v))), solution.Value(time.CumulVar(routing.End(v)))]
                 for v in range(vehicles)]  # fmt: skip
    return routes, times
