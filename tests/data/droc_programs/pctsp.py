"""Written by the ppo-or team (not generated) for DRoC's PCTSP: one tour from depot 0 of at most
instance['max_route_distance']; a customer left out costs its penalty (DRoC's prize). The tour's
length plus the penalties is minimised. IGNORE names the constraints left out."""

from ortools.constraint_solver import pywrapcp, routing_enums_pb2

IGNORE = ()


def solve(instance):
    d, penalty = instance["distance"], instance["penalty"]
    manager = pywrapcp.RoutingIndexManager(len(d), 1, 0)
    routing = pywrapcp.RoutingModel(manager)
    node = manager.IndexToNode
    arc = routing.RegisterTransitCallback(lambda i, j: d[node(i)][node(j)])
    routing.SetArcCostEvaluatorOfAllVehicles(arc)
    if "distance_limit" not in IGNORE:
        routing.AddDimension(arc, 0, instance["max_route_distance"], True, "distance")
    for customer in range(1, len(d)):
        routing.AddDisjunction([manager.NodeToIndex(customer)], penalty[customer])
    params = pywrapcp.DefaultRoutingSearchParameters()
    params.first_solution_strategy = routing_enums_pb2.FirstSolutionStrategy.PATH_CHEAPEST_ARC
    params.local_search_metaheuristic = routing_enums_pb2.LocalSearchMetaheuristic.GUIDED_LOCAL_SEARCH
    params.time_limit.FromMilliseconds(200)
    solution = routing.SolveWithParameters(params)
    index, tour = routing.Start(0), []
    while not routing.IsEnd(index):
        tour.append(node(index))
        index = solution.Value(routing.NextVar(index))
    tour = tour + [0] if len(tour) > 1 else []
    missed = sum(penalty[c] for c in range(1, len(d)) if c not in tour)
    return sum(d[a][b] for a, b in zip(tour, tour[1:], strict=False)) + missed, [tour]
