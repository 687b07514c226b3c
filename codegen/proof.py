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


def leg(instance: dict, closed: bool, i: int, j: int) -> int:
    """The cost of driving i -> j (an open route's return to a depot is free)."""
    return 0 if not closed and j in instance["depots"] else instance["distance"][i][j]


def add_pickup_delivery(model, instance: dict, fams: set[str], k: int, arcs: dict, home: int, visit: dict) -> None:
    """Vehicle k's pickups before their deliveries on the same vehicle: the position on the route orders the
    stops; with capacity the load after each stop stays within it (``arcs``: (i, j) -> literal of its arcs)."""
    n, vehicles = len(instance["distance"]), instance["num_vehicles"]
    nodes = [home, *(c for c in range(n) if c not in set(instance["depots"]))]
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


def add_times(model, instance: dict, fams: set[str], k: int, arcs: dict, home: int, skip_home, service: list[int],
              horizon: int) -> None:  # fmt: skip
    """Vehicle k's service start at each node (its departure at the depot) and its end: each arc taken
    takes the service and the drive; the windows, the depot's and the duration limit hold."""
    n, closed = len(instance["distance"]), "open" not in fams
    customers = [c for c in range(n) if c not in set(instance["depots"])]
    nodes, windows = [home, *customers], instance["time_windows"] if "time_windows" in fams else None

    start = {i: model.NewIntVar(0, horizon, f"t{k}_{i}") for i in nodes}  # service start; depot: departure
    end = model.NewIntVar(0, horizon, f"e{k}")  # back at the depot, or the last service's end
    for (i, j), lit in arcs.items():
        target = end if j == home else start[j]
        model.Add(target >= start[i] + service[i] + leg(instance, closed, i, j)).OnlyEnforceIf(lit)
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


def route_of(solver, arcs: dict, home: int, closed: bool) -> list[int]:
    """A vehicle's route in the solution: from ``home`` along the arcs whose literal is true (``arcs``:
    (i, j) -> literal), back home when routes are closed; [] for an unused vehicle."""
    successor = {i: j for (i, j), lit in arcs.items() if solver.BooleanValue(lit)}
    route, here = [home], successor.get(home)
    while here is not None and here != home:
        route.append(here)
        here = successor[here]
    return [] if len(route) == 1 else route + ([home] if closed else [])


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
        cost += [(leg(instance, closed, i, j) + (service[i] if time_cost else 0)) * lit for (i, j), lit in arcs.items()]
        if "capacity" in fams and "pickup_delivery" not in fams:
            cap = per_vehicle(instance["capacity"], vehicles)[k]
            model.Add(sum(instance["demand"][c] * visit[k, c] for c in customers) <= cap)
        if "resources" in fams:
            cap = per_vehicle(instance["volume_capacity"], vehicles)[k]
            model.Add(sum(instance["volume"][c] * visit[k, c] for c in customers) <= cap)
        if "distance_limit" in fams:
            model.Add(sum(leg(instance, closed, i, j) * lit for (i, j), lit in arcs.items()) <= instance["max_route_distance"])
        if "pickup_delivery" in fams:
            add_pickup_delivery(model, instance, fams, k, arcs, home, visit)
        if timed:
            add_times(model, instance, fams, k, arcs, home, skip_home, service, horizon)
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
    routes = [route_of(solver, arcs, home, closed) for arcs, home in zip(arcs_of, homes, strict=True)]
    # every cost is an integer; CP-SAT reports the objective as a double (1 came back as 0.9999999999999998
    # with the prizes' constant term)
    return Proof("optimal" if status == cp_model.OPTIMAL else "unknown", round(solver.ObjectiveValue()), routes)
