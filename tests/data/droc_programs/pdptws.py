"""Written by the ppo-or team (not generated) for DRoC's PDPTWS: pickup and delivery pairs on one
vehicle, pickup first; service starts within each customer's window and takes its service time;
vehicles leave depot 0 within its window and may return at any time; the objective is the total
time, driving plus service. IGNORE names the constraints left out."""

from ortools.constraint_solver import pywrapcp, routing_enums_pb2

IGNORE = ()


def solve(instance):
    d, k = instance["distance"], instance["num_vehicles"]
    windows, service = instance["time_windows"], instance["service_time"]
    if "service_time" in IGNORE:
        service = [0] * len(d)
    manager = pywrapcp.RoutingIndexManager(len(d), k, 0)
    routing = pywrapcp.RoutingModel(manager)
    node = manager.IndexToNode
    busy = routing.RegisterTransitCallback(lambda i, j: service[node(i)] + d[node(i)][node(j)])
    routing.SetArcCostEvaluatorOfAllVehicles(busy)
    horizon = max(w[1] for w in windows) + sum(map(max, d)) + sum(service)
    routing.AddDimension(busy, horizon, horizon, False, "time")
    time = routing.GetDimensionOrDie("time")
    if "time_windows" not in IGNORE:
        for customer in range(1, len(d)):
            time.CumulVar(manager.NodeToIndex(customer)).SetRange(*windows[customer])
        for v in range(k):
            time.CumulVar(routing.Start(v)).SetRange(*windows[0])
    if "pickup_delivery" not in IGNORE:
        solver = routing.solver()
        for p, q in instance["pickup_delivery_pairs"]:
            pickup, delivery = manager.NodeToIndex(p), manager.NodeToIndex(q)
            routing.AddPickupAndDelivery(pickup, delivery)
            solver.Add(routing.VehicleVar(pickup) == routing.VehicleVar(delivery))
            solver.Add(time.CumulVar(pickup) <= time.CumulVar(delivery))
    params = pywrapcp.DefaultRoutingSearchParameters()
    params.first_solution_strategy = routing_enums_pb2.FirstSolutionStrategy.PARALLEL_CHEAPEST_INSERTION
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
        total += sum(d[a][b] for a, b in zip(route, route[1:], strict=False)) + sum(instance["service_time"][c] for c in route[1:-1])
        routes.append(route)
    return total, routes
