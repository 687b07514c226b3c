"""Written by the ppo-or team (not generated) for DRoC's CVRPL: the capacitated VRP whose routes are
each at most instance['max_route_distance'] long. IGNORE names the constraints left out."""

from ortools.constraint_solver import pywrapcp, routing_enums_pb2

IGNORE = ()


def solve(instance):
    d, k = instance["distance"], instance["num_vehicles"]
    manager = pywrapcp.RoutingIndexManager(len(d), k, 0)
    routing = pywrapcp.RoutingModel(manager)
    node = manager.IndexToNode
    arc = routing.RegisterTransitCallback(lambda i, j: d[node(i)][node(j)])
    routing.SetArcCostEvaluatorOfAllVehicles(arc)
    if "capacity" not in IGNORE:
        capacity = instance["capacity"]
        load = routing.RegisterUnaryTransitCallback(lambda i: instance["demand"][node(i)])
        routing.AddDimensionWithVehicleCapacity(
            load, 0, capacity if isinstance(capacity, list) else [capacity] * k, True, "load"
        )
    if "distance_limit" not in IGNORE:
        routing.AddDimension(arc, 0, instance["max_route_distance"], True, "distance")
    params = pywrapcp.DefaultRoutingSearchParameters()
    params.first_solution_strategy = routing_enums_pb2.FirstSolutionStrategy.PATH_CHEAPEST_ARC
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
