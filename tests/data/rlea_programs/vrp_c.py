"""Written by the ppo-or team (not generated): the capacitated VRP of the shipped benchmark's
``vrp-c`` problem, solved with OR-Tools' routing solver. Judge it with

    python eval_rlea.py --only vrp-c --judge tests/data/rlea_programs/vrp_c.py
"""

from ortools.constraint_solver import pywrapcp, routing_enums_pb2


def solve(instance):
    d = instance["distance"]
    vehicles = instance["num_vehicles"]
    manager = pywrapcp.RoutingIndexManager(len(d), vehicles, 0)
    routing = pywrapcp.RoutingModel(manager)
    arc = routing.RegisterTransitCallback(lambda i, j: d[manager.IndexToNode(i)][manager.IndexToNode(j)])
    routing.SetArcCostEvaluatorOfAllVehicles(arc)
    demand = routing.RegisterUnaryTransitCallback(lambda i: instance["demand"][manager.IndexToNode(i)])
    routing.AddDimensionWithVehicleCapacity(demand, 0, [instance["capacity"]] * vehicles, True, "load")
    params = pywrapcp.DefaultRoutingSearchParameters()
    params.first_solution_strategy = routing_enums_pb2.FirstSolutionStrategy.PATH_CHEAPEST_ARC
    params.local_search_metaheuristic = routing_enums_pb2.LocalSearchMetaheuristic.GUIDED_LOCAL_SEARCH
    params.time_limit.FromSeconds(1)
    solution = routing.SolveWithParameters(params)
    routes, total = [], 0
    for v in range(vehicles):
        index, route = routing.Start(v), []
        while not routing.IsEnd(index):
            route.append(manager.IndexToNode(index))
            index = solution.Value(routing.NextVar(index))
        route = route + [0] if len(route) > 1 else []
        total += sum(d[a][b] for a, b in zip(route, route[1:], strict=False))
        routes.append(route)
    return total, routes
