"""Optimality proofs for small problems: the problem as a CP-SAT model, solved exactly.

The reference solver (``solvers/rlea_references.py``, OR-Tools' routing with guided local search) finds
good solutions but proves nothing. ``prove`` states a problem of our format (``codegen/benchmark.py``)
as a constraint program over one circuit per vehicle (``AddCircuit``: vehicle k's depot and every
customer, a customer it skips on a self-loop) and lets CP-SAT search to completion within a time
limit: status OPTIMAL proves the objective optimal, INFEASIBLE proves that no solution exists.

Every family and setting but depot docks is stated: loads (capacity, second resource; with pickup
and delivery the load after each stop), route length, service start times within windows with
waiting, a departure within the depot's window (and the return within it unless
``depot_window`` is "departure"), the duration from a free departure, open routes (the return arc
costs nothing and ends the route at the last service), multiple depots, prizes (a skipped customer
costs its penalty), pickup before delivery on one vehicle, the objective in distance or time.
"""

from __future__ import annotations

from dataclasses import dataclass

from ppoor.solvers.rlea_references import per_vehicle


@dataclass
class Proof:
    """What CP-SAT settled: ``status`` "optimal" (``objective`` and ``routes`` proven best),
    "infeasible" (no solution exists), or "unknown" (the time ran out or the problem is not stated
    here; ``objective`` / ``routes`` then hold the best solution found, if any)."""

    status: str
    objective: float | None = None
    routes: list[list[int]] | None = None


def prove(instance: dict, families: list[str], seconds: float, workers: int = 1) -> Proof:
    """Solve ``instance`` of ``families`` exactly with CP-SAT within ``seconds`` on ``workers``."""
    from ortools.sat.python import cp_model

    fams = set(families)
    if "depot_docks" in fams:
        return Proof("unknown")
    d = instance["distance"]
    n, vehicles = len(d), instance["num_vehicles"]
    homes, depots = instance["vehicle_depots"], set(instance["depots"])
    customers = [i for i in range(n) if i not in depots]
    closed = "open" not in fams
    service = instance["service_time"] if "service_time" in fams else [0] * n
    time_cost = instance.get("objective") == "time" and "service_time" in fams
    windows = instance["time_windows"] if "time_windows" in fams else None
    timed = windows is not None or "service_time" in fams or "max_route_duration" in instance
    horizon = (max(w[1] for w in windows) if windows else 0) + sum(map(max, d)) + sum(service)

    def leg(i: int, j: int) -> int:  # the cost of driving i -> j (an open route's return is free)
        return 0 if not closed and j in depots else d[i][j]

    model = cp_model.CpModel()
    visit = {}  # (k, c) -> vehicle k serves customer c
    arcs_of, cost = [], []
    for k in range(vehicles):
        home = homes[k]
        nodes = [home, *customers]
        arcs = {}
        for i in nodes:
            for j in nodes:
                if i != j:
                    arcs[i, j] = model.NewBoolVar(f"x{k}_{i}_{j}")
        skip_home = model.NewBoolVar(f"unused{k}")
        circuit = [(i, j, lit) for (i, j), lit in arcs.items()] + [(home, home, skip_home)]
        for c in customers:
            visit[k, c] = model.NewBoolVar(f"v{k}_{c}")
            circuit.append((c, c, visit[k, c].Not()))
            model.AddImplication(visit[k, c], skip_home.Not())
        model.AddCircuit(circuit)
        arcs_of.append(arcs)
        cost += [(leg(i, j) + (service[i] if time_cost else 0)) * lit for (i, j), lit in arcs.items()]
        if "capacity" in fams and "pickup_delivery" not in fams:
            cap = per_vehicle(instance["capacity"], vehicles)[k]
            model.Add(sum(instance["demand"][c] * visit[k, c] for c in customers) <= cap)
        if "resources" in fams:
            cap = per_vehicle(instance["volume_capacity"], vehicles)[k]
            model.Add(sum(instance["volume"][c] * visit[k, c] for c in customers) <= cap)
        if "distance_limit" in fams:
            model.Add(sum(leg(i, j) * lit for (i, j), lit in arcs.items()) <= instance["max_route_distance"])
        if "pickup_delivery" in fams:  # the position on the route orders the stops; the load after each
            position = {i: model.NewIntVar(0, n, f"p{k}_{i}") for i in nodes}
            model.Add(position[home] == 0)
            load = {i: model.NewIntVar(0, per_vehicle(instance.get("capacity", 0), vehicles)[k]
                                       if "capacity" in fams else 0, f"l{k}_{i}") for i in nodes}  # fmt: skip
            model.Add(load[home] == 0)
            for (i, j), lit in arcs.items():
                if j != home:
                    model.Add(position[j] == position[i] + 1).OnlyEnforceIf(lit)
                    if "capacity" in fams:
                        model.Add(load[j] == load[i] + instance["demand"][j]).OnlyEnforceIf(lit)
            for p, q in instance["pickup_delivery_pairs"]:
                model.Add(visit[k, p] == visit[k, q])
                model.Add(position[p] < position[q]).OnlyEnforceIf(visit[k, p])
        if timed:
            start = {i: model.NewIntVar(0, horizon, f"t{k}_{i}") for i in nodes}  # service start; depot: departure
            end = model.NewIntVar(0, horizon, f"e{k}")  # back at the depot, or the last service's end
            for (i, j), lit in arcs.items():
                target = end if j == home else start[j]
                model.Add(target >= start[i] + service[i] + leg(i, j)).OnlyEnforceIf(lit)
            if windows:
                for c in customers:
                    model.Add(start[c] >= windows[c][0])
                    model.Add(start[c] <= windows[c][1])
                model.Add(start[home] >= windows[home][0])
                model.Add(start[home] <= windows[home][1])
                if closed and instance.get("depot_window") != "departure":
                    model.Add(end <= windows[home][1]).OnlyEnforceIf(skip_home.Not())
            else:
                model.Add(start[home] == 0)
            if "max_route_duration" in instance:
                model.Add(end - start[home] <= instance["max_route_duration"]).OnlyEnforceIf(skip_home.Not())
    for c in customers:
        served = sum(visit[k, c] for k in range(vehicles))
        if "prize" in fams:
            model.Add(served <= 1)
            cost.append(instance["penalty"][c] * (1 - served))
        else:
            model.Add(served == 1)
    model.Minimize(sum(cost))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = seconds
    solver.parameters.num_search_workers = workers
    status = solver.Solve(model)
    if status == cp_model.INFEASIBLE:
        return Proof("infeasible")
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return Proof("unknown")
    routes = []
    for k in range(vehicles):
        successor = {i: j for (i, j), lit in arcs_of[k].items() if solver.BooleanValue(lit)}
        route, here = [homes[k]], successor.get(homes[k])
        while here is not None and here != homes[k]:
            route.append(here)
            here = successor[here]
        routes.append([] if len(route) == 1 else route + ([homes[k]] if closed else []))
    # every cost is an integer; CP-SAT reports the objective as a double (1 came back as 0.9999999999999998
    # with the prizes' constant term)
    return Proof("optimal" if status == cp_model.OPTIMAL else "unknown", round(solver.ObjectiveValue()), routes)
