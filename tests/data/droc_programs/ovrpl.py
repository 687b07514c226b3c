"""Written by the ppo-or team (not generated) for DRoC's OVRPL, as the importer states it: node 0 is
a virtual depot at distance 0 from every node, so each route is an open path between any two
customers, at most instance['max_route_distance'] long. IGNORE names the constraints left out."""

from ortools.constraint_solver import pywrapcp, routing_enums_pb2

IGNORE = ()


def solve(instance):
    d, k = instance["distance"], instance["num_vehicles"]
    manager = pywrapcp.RoutingIndexManager(len(d), k, 0)
    routing = pywrapcp.RoutingModel(manager)
    node = manager.IndexToNode
    leg = routing.RegisterTransitCallback(lambda i, j: 0 if node(j) == 0 else d[node(i)][node(j)])
    routing.SetArcCostEvaluatorOfAllVehicles(leg)
    if "distance_limit" not in IGNORE:
        routing.AddDimension(leg, 0, instance["max_route_distance"], True, "distance")
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
        routes.append(route if len(route) > 1 else [])  # open: no return
    return sum(d[a][b] for route in routes for a, b in zip(route, route[1:], strict=False)), routes
