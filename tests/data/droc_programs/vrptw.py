"""Written by the ppo-or team (not generated) for DRoC's VRPTW: service at each customer starts
within its window (waiting allowed), vehicles leave depot 0 within its window and may return at
any time; the total travel time is minimised. IGNORE names the constraints left out."""

from ortools.constraint_solver import pywrapcp, routing_enums_pb2

IGNORE = ()


def solve(instance):
    d, k, windows = instance["distance"], instance["num_vehicles"], instance["time_windows"]
    manager = pywrapcp.RoutingIndexManager(len(d), k, 0)
    routing = pywrapcp.RoutingModel(manager)
    node = manager.IndexToNode
    travel = routing.RegisterTransitCallback(lambda i, j: d[node(i)][node(j)])
    routing.SetArcCostEvaluatorOfAllVehicles(travel)
    if "time_windows" not in IGNORE:
        horizon = max(w[1] for w in windows) + sum(map(max, d))
        routing.AddDimension(travel, horizon, horizon, False, "time")
        time = routing.GetDimensionOrDie("time")
        for customer in range(1, len(d)):
            time.CumulVar(manager.NodeToIndex(customer)).SetRange(*windows[customer])
        for v in range(k):
            time.CumulVar(routing.Start(v)).SetRange(*windows[0])  # the return is free
    params = pywrapcp.DefaultRoutingSearchParameters()
    params.first_solution_strategy = routing_enums_pb2.FirstSolutionStrategy.PARALLEL_CHEAPEST_INSERTION
    params.local_search_metaheuristic = routing_enums_pb2.LocalSearchMetaheuristic.GUIDED_LOCAL_SEARCH
    params.time_limit.FromMilliseconds(200)
    solution = routing.SolveWithParameters(params)
    routes = []
    for v in range(k):
        index, route = routing.Start(v), []
        while not routing.IsEnd(index):
            route.append(node(index))
            index = solution.Value(routing.NextVar(index))
        routes.append(route + [0] if len(route) > 1 else [])
    return sum(d[a][b] for route in routes for a, b in zip(route, route[1:], strict=False)), routes
