"""Written by the ppo-or team (not generated) for DRoC's VRPTWRC: VRPTW (the depot's window bounds
the departure only) where dispatching a vehicle keeps a depot dock busy for load_time from its
departure and receiving it for unload_time from its return, at most instance['docks'] at once.
Returns each vehicle's [departure, return] too. IGNORE names the constraints left out."""

from ortools.constraint_solver import pywrapcp, routing_enums_pb2

IGNORE = ()


def solve(instance):
    d, k, windows = instance["distance"], instance["num_vehicles"], instance["time_windows"]
    manager = pywrapcp.RoutingIndexManager(len(d), k, 0)
    routing = pywrapcp.RoutingModel(manager)
    node = manager.IndexToNode
    travel = routing.RegisterTransitCallback(lambda i, j: d[node(i)][node(j)])
    routing.SetArcCostEvaluatorOfAllVehicles(travel)
    horizon = max(w[1] for w in windows) + sum(map(max, d)) + instance["unload_time"]
    routing.AddDimension(travel, horizon, horizon, False, "time")
    time = routing.GetDimensionOrDie("time")
    for customer in range(1, len(d)):
        time.CumulVar(manager.NodeToIndex(customer)).SetRange(*windows[customer])
    for v in range(k):
        time.CumulVar(routing.Start(v)).SetRange(*windows[0])
        routing.AddVariableMinimizedByFinalizer(time.CumulVar(routing.Start(v)))
        routing.AddVariableMinimizedByFinalizer(time.CumulVar(routing.End(v)))
    if "depot_docks" not in IGNORE:
        solver = routing.solver()
        loads = [solver.FixedDurationIntervalVar(time.CumulVar(routing.Start(v)), instance["load_time"], "load")
                 for v in range(k)]
        unloads = [solver.FixedDurationIntervalVar(time.CumulVar(routing.End(v)), instance["unload_time"], "unload")
                   for v in range(k)]
        solver.Add(solver.Cumulative(loads + unloads, [1] * (2 * k), instance["docks"], "docks"))
    # the first-solution heuristics rarely satisfy the docks at once: every visit may be skipped at a
    # prohibitive price, and the local search brings them all in
    for customer in range(1, len(d)):
        routing.AddDisjunction([manager.NodeToIndex(customer)], 10**7)
    params = pywrapcp.DefaultRoutingSearchParameters()
    params.first_solution_strategy = routing_enums_pb2.FirstSolutionStrategy.PATH_CHEAPEST_ARC
    params.local_search_metaheuristic = routing_enums_pb2.LocalSearchMetaheuristic.GUIDED_LOCAL_SEARCH
    params.time_limit.FromMilliseconds(400)
    solution = routing.SolveWithParameters(params)
    routes, times = [], []
    for v in range(k):
        index, route = routing.Start(v), []
        while not routing.IsEnd(index):
            route.append(node(index))
            index = solution.Value(routing.NextVar(index))
        routes.append(route + [0] if len(route) > 1 else [])
        times.append([solution.Value(time.CumulVar(routing.Start(v))), solution.Value(time.CumulVar(index))])
    return sum(d[a][b] for route in routes for a, b in zip(route, route[1:], strict=False)), routes, times
