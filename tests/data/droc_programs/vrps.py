"""Written by the ppo-or team (not generated) for DRoC's VRPS: serving a customer takes its service
time, and the objective is the total time, driving plus service. IGNORE names the parts left out
("service in the objective": the travel alone is reported)."""

from ortools.constraint_solver import pywrapcp, routing_enums_pb2

IGNORE = ()


def solve(instance):
    d, k, service = instance["distance"], instance["num_vehicles"], instance["service_time"]
    manager = pywrapcp.RoutingIndexManager(len(d), k, 0)
    routing = pywrapcp.RoutingModel(manager)
    node = manager.IndexToNode
    busy = routing.RegisterTransitCallback(lambda i, j: service[node(i)] + d[node(i)][node(j)])
    routing.SetArcCostEvaluatorOfAllVehicles(busy)
    if "max_route_duration" in instance:
        routing.AddDimension(busy, 0, instance["max_route_duration"], True, "time")
    params = pywrapcp.DefaultRoutingSearchParameters()
    params.first_solution_strategy = routing_enums_pb2.FirstSolutionStrategy.PATH_CHEAPEST_ARC
    params.local_search_metaheuristic = routing_enums_pb2.LocalSearchMetaheuristic.GUIDED_LOCAL_SEARCH
    params.time_limit.FromMilliseconds(200)
    solution = routing.SolveWithParameters(params)
    routes, total = [], 0
    for v in range(k):
        index, route = routing.Start(v), []
        while not routing.IsEnd(index):
            route.append(node(index))
            index = solution.Value(routing.NextVar(index))
        route = route + [0] if len(route) > 1 else []
        total += sum(d[a][b] for a, b in zip(route, route[1:], strict=False))
        if "service in the objective" not in IGNORE:
            total += sum(service[c] for c in route[1:-1])
        routes.append(route)
    return total, routes
