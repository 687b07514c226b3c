"""Written by the ppo-or team (not generated) for DRoC's VRPTWL: time windows (the depot's bounds the
departure only) and a limit on each route's duration, from its departure, which may be delayed
within the depot's window, to its return. IGNORE names the constraints left out."""

from ortools.constraint_solver import pywrapcp, routing_enums_pb2

IGNORE = ()


def solve(instance):
    d, k, windows = instance["distance"], instance["num_vehicles"], instance["time_windows"]
    manager = pywrapcp.RoutingIndexManager(len(d), k, 0)
    routing = pywrapcp.RoutingModel(manager)
    node = manager.IndexToNode
    travel = routing.RegisterTransitCallback(lambda i, j: d[node(i)][node(j)])
    routing.SetArcCostEvaluatorOfAllVehicles(travel)
    horizon = max(w[1] for w in windows) + sum(map(max, d))
    routing.AddDimension(travel, horizon, horizon, False, "time")
    time = routing.GetDimensionOrDie("time")
    for v in range(k):
        if "duration_limit" not in IGNORE:
            time.SetSpanUpperBoundForVehicle(instance["max_route_duration"], v)
        time.CumulVar(routing.Start(v)).SetRange(*windows[0])
    if "time_windows" not in IGNORE:
        for customer in range(1, len(d)):
            time.CumulVar(manager.NodeToIndex(customer)).SetRange(*windows[customer])
    solution = None
    for first in ("PARALLEL_CHEAPEST_INSERTION", "PATH_CHEAPEST_ARC", "LOCAL_CHEAPEST_INSERTION", "SAVINGS"):
        params = pywrapcp.DefaultRoutingSearchParameters()  # the first strategy that finds a solution
        params.first_solution_strategy = getattr(routing_enums_pb2.FirstSolutionStrategy, first)
        params.local_search_metaheuristic = routing_enums_pb2.LocalSearchMetaheuristic.GUIDED_LOCAL_SEARCH
        params.time_limit.FromMilliseconds(200)
        if (solution := routing.SolveWithParameters(params)) is not None:
            break
    routes = []
    for v in range(k):
        index, route = routing.Start(v), []
        while not routing.IsEnd(index):
            route.append(node(index))
            index = solution.Value(routing.NextVar(index))
        routes.append(route + [0] if len(route) > 1 else [])
    return sum(d[a][b] for route in routes for a, b in zip(route, route[1:], strict=False)), routes
