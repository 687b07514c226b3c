"""Written by the ppo-or team (not generated) for DRoC's PDP: each [pickup, delivery] pair is served
by one vehicle, the pickup first; the total distance is minimised. IGNORE names the constraints
left out."""

from ortools.constraint_solver import pywrapcp, routing_enums_pb2

IGNORE = ()


def solve(instance):
    d, k = instance["distance"], instance["num_vehicles"]
    manager = pywrapcp.RoutingIndexManager(len(d), k, 0)
    routing = pywrapcp.RoutingModel(manager)
    node = manager.IndexToNode
    arc = routing.RegisterTransitCallback(lambda i, j: d[node(i)][node(j)])
    routing.SetArcCostEvaluatorOfAllVehicles(arc)
    routing.AddDimension(arc, 0, sum(map(sum, d)), True, "order")
    order, solver = routing.GetDimensionOrDie("order"), routing.solver()
    if "pickup_delivery" not in IGNORE:
        for p, q in instance["pickup_delivery_pairs"]:
            pickup, delivery = manager.NodeToIndex(p), manager.NodeToIndex(q)
            routing.AddPickupAndDelivery(pickup, delivery)
            solver.Add(routing.VehicleVar(pickup) == routing.VehicleVar(delivery))
            solver.Add(order.CumulVar(pickup) <= order.CumulVar(delivery))
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
