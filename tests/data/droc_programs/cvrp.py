"""Written by the ppo-or team (not generated) for DRoC's CVRP, read by ``python -m ppoor.codegen.droc``:
routes from depot 0 whose loads fit each vehicle's capacity, shortest in total. IGNORE names the
constraints left out (the tests judge the copy without each one)."""

from ortools.constraint_solver import pywrapcp, routing_enums_pb2

IGNORE = ()


def solve(instance):
    d, k = instance["distance"], instance["num_vehicles"]
    manager = pywrapcp.RoutingIndexManager(len(d), k, 0)
    routing = pywrapcp.RoutingModel(manager)
    node = manager.IndexToNode
    routing.SetArcCostEvaluatorOfAllVehicles(routing.RegisterTransitCallback(lambda i, j: d[node(i)][node(j)]))
    if "capacity" not in IGNORE:
        capacity = instance["capacity"]
        capacities = capacity if isinstance(capacity, list) else [capacity] * k
        load = routing.RegisterUnaryTransitCallback(lambda i: instance["demand"][node(i)])
        routing.AddDimensionWithVehicleCapacity(load, 0, capacities, True, "load")
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
        routes.append(route)
    return total, routes
