"""Written by the ppo-or team (not generated) for DRoC's CVRPMD: vehicle k starts and ends at its own
depot instance['vehicle_depots'][k] with its own capacity instance['capacity'][k] (the importer has
already taken a depot's demand off its vehicle's capacity). IGNORE names the constraints left out
("multi_depot": every vehicle from the first depot)."""

from ortools.constraint_solver import pywrapcp, routing_enums_pb2

IGNORE = ()


def solve(instance):
    d, k = instance["distance"], instance["num_vehicles"]
    homes = [instance["depots"][0]] * k if "multi_depot" in IGNORE else instance["vehicle_depots"]
    manager = pywrapcp.RoutingIndexManager(len(d), k, homes, homes)
    routing = pywrapcp.RoutingModel(manager)
    node = manager.IndexToNode
    routing.SetArcCostEvaluatorOfAllVehicles(routing.RegisterTransitCallback(lambda i, j: d[node(i)][node(j)]))
    if "capacity" not in IGNORE:
        capacity = instance["capacity"]
        load = routing.RegisterUnaryTransitCallback(lambda i: instance["demand"][node(i)])
        routing.AddDimensionWithVehicleCapacity(
            load, 0, capacity if isinstance(capacity, list) else [capacity] * k, True, "load"
        )
    others = set(instance["depots"]) - set(homes)  # depots no vehicle starts from are not customers
    for depot in others:
        routing.AddDisjunction([manager.NodeToIndex(depot)], 0)
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
        routes.append(route + [homes[v]] if len(route) > 1 else [])
    return sum(d[a][b] for route in routes for a, b in zip(route, route[1:], strict=False)), routes
