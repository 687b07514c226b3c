"""The RLEA benchmark: VRP variants described in words, each with its instance, a probing instance
on which every constraint binds, and a reference objective.

A problem is one JSON file (``codegen/problems/<name>.json``)::

    name          "vrp-c-tw"
    families      constraint families, from FAMILIES ("capacity", "time_windows")
    split         "train" or "test"
    description   the task in words: objective, every constraint, units, the instance's keys
    instance      plain values: distance [n][n] ints, depots, num_vehicles, vehicle_depots, and one key
                  or two per family (demand, capacity, time_windows, ...)
                  optional settings: "objective" ("distance", the default, or "time": distance plus
                  the service times of the visited customers), "depot_window" ("day", the default:
                  leave after the depot's window opens and return before it closes; or "departure":
                  the window bounds the departure only) and "max_route_duration" (any problem: a
                  bound on each route's return, or last service when open, minus its departure,
                  the departure as late as the windows allow)
    reference     {"objective", "routes", "solver", "optimal"}: the best known answer
    probe         optional {"instance", "reference"}: a second instance where each constraint binds;
                  without one, programs are also judged on the instance with its customers renumbered
                  (same optimum, other routes), so that a hard-coded answer cannot pass either way

Every program defines ``solve(instance) -> (objective, routes)`` (SIGNATURE); the checker of
``checkers/programs.py`` reads the same format. ``python -m ppoor.codegen.benchmark --out DIR`` writes the
benchmark again from its seed; a problem of your own is one more file in this format
(docs/rlea.md).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import zlib
from pathlib import Path

import numpy as np
from ppoor.checkers.programs import SUCCESS_GAP, check_answer
from ppoor.codegen.proof import prove
from ppoor.solvers.rlea_references import held_karp, ortools_routes

FAMILIES = {
    "capacity": "C",
    "open": "O",
    "distance_limit": "L",
    "service_time": "S",
    "time_windows": "TW",
    "multi_depot": "MD",
    "resources": "R",
    "prize": "P",
    "pickup_delivery": "PD",
    "depot_docks": "DK",
}
"""The paper's nine constraint families, and DRoC's depot loading docks (its "RC"), with their short
codes (in problem names)."""

FAMILY_SETS = [
    ["tsp"], ["tsp", "time_windows"], ["tsp", "prize"],
    *[f.split() for f in (
        "capacity", "open", "distance_limit", "capacity open", "capacity distance_limit", "capacity service_time",
        "capacity time_windows", "capacity multi_depot", "capacity resources", "capacity prize",
        "capacity pickup_delivery", "open distance_limit", "capacity open distance_limit",
        "capacity open time_windows", "capacity open multi_depot", "capacity open resources", "capacity open prize",
        "capacity distance_limit service_time", "capacity distance_limit time_windows",
        "capacity distance_limit multi_depot", "capacity distance_limit prize", "capacity service_time time_windows",
        "capacity service_time multi_depot", "capacity service_time resources", "capacity time_windows multi_depot",
        "capacity time_windows resources", "capacity time_windows prize", "capacity multi_depot resources",
        "capacity multi_depot prize", "capacity resources prize", "capacity pickup_delivery time_windows",
        "capacity pickup_delivery service_time", "capacity pickup_delivery distance_limit",
        "capacity open distance_limit time_windows", "capacity open service_time time_windows",
        "capacity distance_limit service_time time_windows", "capacity time_windows multi_depot resources",
        "capacity service_time time_windows prize", "capacity open multi_depot prize",
        "capacity distance_limit multi_depot resources", "capacity pickup_delivery service_time time_windows",
        "capacity open time_windows resources", "capacity distance_limit time_windows prize",
        "capacity service_time time_windows multi_depot", "capacity open distance_limit service_time time_windows",
        "capacity distance_limit service_time time_windows multi_depot",
        "capacity service_time time_windows resources prize",
        "capacity open distance_limit service_time time_windows multi_depot resources",
    )],
]
"""The benchmark's 51 variants: TSP, TSPTW, the prize-collecting TSP, each family with capacity,
and combinations of two to seven families."""
SEED = 2026
TEST_EVERY = 3  # every third variant is in the test split

SIGNATURE = '''def solve(instance: dict) -> tuple[float, list[list[int]]]:
    """Solve the problem on ``instance`` (a dict of plain lists and ints, keys as described).

    Returns (objective, routes): the objective value of the returned routes, and one route per
    vehicle, vehicle k's route as the list of node indices it visits in order, starting at its
    depot and, unless routes are open, ending at that depot; an unused vehicle's route is [].
    """'''


DOCKS_SIGNATURE = '''def solve(instance: dict) -> tuple[float, list[list[int]], list[list[int]]]:
    """Solve the problem on ``instance`` (a dict of plain lists and ints, keys as described).

    Returns (objective, routes, times): the objective value of the returned routes; one route per
    vehicle, vehicle k's route as the list of node indices it visits in order, starting and ending
    at its depot ([] for an unused vehicle); and times[k] = [departure, return], the minutes
    vehicle k leaves its depot and is back there (anything for an unused vehicle).
    """'''
"""The signature of a problem with depot docks: solve also returns each vehicle's times."""


def signature_of(families: list[str]) -> str:
    """The ``solve`` signature a problem of ``families`` states."""
    return DOCKS_SIGNATURE if "depot_docks" in families else SIGNATURE


def problem_name(families: list[str]) -> str:
    """``["capacity", "time_windows"]`` -> ``vrp-c-tw``; the TSPs are ``tsp``, ``tsp-tw``, ``tsp-p``."""
    head = "tsp" if "tsp" in families else "vrp"
    return "-".join([head, *(FAMILIES[f].lower() for f in families if f != "tsp")])


def seed_of(name: str, probe: bool) -> int:
    """The instance seed of a problem: the benchmark's seed and its name (stable across Python runs)."""
    return SEED * 1000 + zlib.crc32(f"{name}:{int(probe)}".encode()) % 100_000


def time_windows(inst: dict, fams: set[str], rng: np.random.Generator, tight: float, service: list[int],
                 far: int) -> list[list[int]]:  # fmt: skip
    """``generate_instance``'s time windows [earliest, latest] per node for instance ``inst`` so far: for a
    TSP around a nearest-neighbour tour's times (one vehicle can meet them), else each customer's window
    reachable from a depot and back by the day's end, a delivery's after its pickup. ``far``: the farthest
    customer's distance from any depot."""
    distance, depots = np.asarray(inst["distance"]), inst["depots"]
    n, pd = len(distance), "pickup_delivery" in fams
    customers = list(range(len(depots), n))
    if "tsp" in fams:  # windows around a nearest-neighbour tour's times, so one vehicle can
        tour, t, arrival = [0], 0, {}
        while len(tour) < n:
            here = tour[-1]
            nxt = min((c for c in customers if c not in arrival), key=lambda c: distance[here, c])
            t += service[here] + int(distance[here, nxt])
            arrival[nxt] = t
            tour.append(nxt)
        horizon = t + service[tour[-1]] + int(distance[tour[-1], 0]) + 100
        windows = [[0, horizon] for _ in range(n)]
        for c in customers:
            early, late = (int(tight * rng.integers(10, 61)) for _ in range(2))
            windows[c] = [max(0, arrival[c] - early), arrival[c] + late]
        return windows
    else:
        horizon = int(max(400, 3 * far + 100) * (1.2 if pd else 0.7))
        windows = [[0, horizon] for _ in range(n)]
        for c in customers:
            back = min(int(distance[c, depots].min()), horizon)
            reach = int(distance[depots, c].min())
            width = max(10, int(tight * rng.integers(40, 121)))
            latest = max(reach, horizon - back - service[c] - width)
            start = int(rng.integers(reach, latest + 1))
            windows[c] = [start, min(start + width, horizon - back - service[c])]
        for p, q in inst.get("pickup_delivery_pairs", []):  # a delivery is due after its pickup, by the day's end
            opens = windows[p][0] + service[p] + int(distance[p, q])
            windows[q] = [opens, max(opens, horizon - int(distance[q, depots].min()) - service[q])]
        return windows


def generate_instance(families: list[str], rng: np.random.Generator, tight: float = 1.0) -> dict:
    """A random instance of 10-20 nodes with every key the families need. ``tight`` < 1 shrinks
    capacities, limits and windows (the probing instance tightens until each constraint binds)."""
    fams = set(families)
    tsp = "tsp" in fams
    pd = "pickup_delivery" in fams
    n_depots = 2 + int(rng.integers(2)) if "multi_depot" in fams else 1
    n_customers = int(rng.integers(9, 19 - n_depots + 1))
    if pd:
        n_customers += n_customers % 2
    n = n_depots + n_customers
    points = rng.integers(0, 101, size=(n, 2))
    distance = np.floor(np.linalg.norm(points[:, None] - points[None], axis=-1) + 0.5).astype(int)
    depots = list(range(n_depots))
    customers = list(range(n_depots, n))
    vehicles = 1 if tsp else (2 * n_depots if "multi_depot" in fams else int(rng.integers(3, 5)))
    inst = {
        "distance": distance.tolist(),
        "depots": depots,
        "num_vehicles": vehicles,
        "vehicle_depots": [depots[k % n_depots] for k in range(vehicles)],
    }
    far = max(int(distance[depots].min(axis=0)[c]) for c in customers)  # the farthest customer from any depot
    if "capacity" in fams:
        demand = [0] * n
        if pd:
            order = rng.permutation(customers).tolist()
            pairs = [order[i : i + 2] for i in range(0, len(order), 2)]
            for p, q in pairs:
                demand[p] = int(rng.integers(1, 10))
                demand[q] = -demand[p]
            inst["pickup_delivery_pairs"] = pairs
            inst["capacity"] = max(max(demand), math.ceil(tight * 15))
        else:
            for c in customers:
                demand[c] = int(rng.integers(1, 10))
            inst["capacity"] = max(max(demand), math.ceil(tight * 1.25 * sum(demand) / (vehicles - 1)))
        inst["demand"] = demand
    if "resources" in fams:
        volume = [0] * n
        for c in customers:
            volume[c] = int(rng.integers(1, 10))
        inst["volume"] = volume
        inst["volume_capacity"] = max(max(volume), math.ceil(tight * 1.25 * sum(volume) / (vehicles - 1)))
    if "distance_limit" in fams:
        tour = sum(int(distance[depots].min(axis=0)[c]) for c in customers) * 2 / max(1, vehicles - 1)
        inst["max_route_distance"] = max(2 * far + 1, int(tight**2 * 0.9 * tour))
    service = [0] * n
    if "service_time" in fams:
        for c in customers:
            service[c] = int(rng.integers(5, 16) / tight)
        inst["service_time"] = service
        if "time_windows" not in fams:
            need = (sum(service) + 2 * sum(int(distance[depots].min(axis=0)[c]) for c in customers)) / vehicles
            inst["max_route_duration"] = max(2 * far + max(service) + 1, int(tight**2 * 0.8 * need))
    if "time_windows" in fams:
        inst["time_windows"] = time_windows(inst, fams, rng, tight, service, far)
    if "prize" in fams:
        penalty = [0] * n
        for c in customers:
            penalty[c] = int(rng.integers(int(10 * tight) + 5, int(60 * tight) + 15))
        inst["penalty"] = penalty
    return inst


INSTANCE_KEYS = {
    "capacity": "demand[i] (units; 0 at depots) and capacity (units per vehicle)",
    "resources": "volume[i] (litres; 0 at depots) and volume_capacity (litres per vehicle)",
    "distance_limit": "max_route_distance (km per route)",
    "service_time": "service_time[i] (minutes; 0 at depots)",
    "time_windows": "time_windows[i] = [earliest, latest] (minutes from the start of the day)",
    "prize": "penalty[i] (cost units; 0 at depots)",
    "pickup_delivery": "pickup_delivery_pairs (a list of [pickup, delivery] node pairs) and demand[i]",
}


def constraint_lines(fams: set[str], instance: dict) -> list[str]:
    """``describe``'s sentences for each constraint of the families ``fams``, with its units and keys."""
    lines = []
    if "capacity" in fams and "pickup_delivery" not in fams:
        lines.append(
            "Capacity: customer i needs instance['demand'][i] units of goods; the goods delivered on one route "
            f"must not exceed {fleet_text(instance, 'capacity')} units."
        )
    if "pickup_delivery" in fams:
        lines.append(
            "Pickup and delivery: each pair [p, d] of instance['pickup_delivery_pairs'] is a load picked up at "
            "node p and delivered to node d by the same vehicle, p before d."
            + (" instance['demand'][p] > 0 is the load picked up, instance['demand'][d] = -instance['demand'][p]; "
               "vehicles leave the depot empty and the load on board must never exceed "
               f"{fleet_text(instance, 'capacity')} units." if "capacity" in fams else "")
        )
    if "resources" in fams:
        lines.append(
            "Second resource: customer i's goods also take instance['volume'][i] litres of space; the volume on one "
            f"route must not exceed {fleet_text(instance, 'volume_capacity')} litres."
        )
    if "distance_limit" in fams:
        lines.append(
            "Distance limit: each route may be at most instance['max_route_distance'] kilometres long"
            + (" (open routes: without a return)." if "open" in fams else " (including the return to the depot).")
        )
    if "service_time" in fams:
        lines.append(
            "Service time: serving customer i takes instance['service_time'][i] minutes, during which the vehicle stays there."
        )
        if "time_windows" not in fams and "max_route_duration" in instance:
            lines.append(
                "Working day: a route starts at time 0 and must end (back at the depot"
                + (", or at the end of the last service for open routes" if "open" in fams else "")
                + ") by instance['max_route_duration'] minutes; driving and service both count."
            )
    if "time_windows" in fams:
        lines.append(
            "Time windows: service at node i must start within instance['time_windows'][i] = [earliest, latest] "
            "(minutes); a vehicle arriving early waits until earliest. Vehicles leave the depot "
            + ("within its window (any time in it); the return is not bound by it."
               if instance.get("depot_window") == "departure"
               else "at or after its window opens" + ("." if "open" in fams else " and must be back before it closes."))
        )
    if "max_route_duration" in instance and ("time_windows" in fams or "service_time" not in fams):
        lines.append(
            "Duration limit: each route may last at most instance['max_route_duration'] minutes, from its departure "
            "to its " + ("last service's end" if "open" in fams else "return to the depot")
            + " (driving, service and waiting all count"
            + ("; the departure may be delayed within the depot's window to wait less)." if "time_windows" in fams
               else ").")
        )
    if "depot_docks" in fams:
        lines.append(
            "Depot docks: dispatching a vehicle keeps one of its depot's instance['docks'] docks busy for "
            "instance['load_time'] minutes from its departure, and receiving it back keeps one busy for "
            "instance['unload_time'] minutes from its return; no depot may dispatch or receive more vehicles at once "
            "than it has docks. A vehicle may wait anywhere, so it may be back later than it could be."
        )
    return lines


def describe(families: list[str], instance: dict) -> str:
    """The problem in words, as a practitioner would write it: fleet, objective, every constraint
    with its units, and the keys of ``instance`` that hold each piece of data."""
    fams = set(families)
    n, depots = len(instance["distance"]), instance["depots"]
    k = instance["num_vehicles"]
    time_objective = instance.get("objective") == "time" and "service_time" in fams
    lines = []
    if "tsp" in fams:
        lines.append(
            f"One vehicle leaves depot node 0 and visits customers (nodes 1..{n - 1}) before returning to the depot."
        )
    elif "multi_depot" in fams:
        lines.append(
            f"A fleet of {k} vehicles serves customers from {len(depots)} depots (nodes {depots}). Vehicle k is "
            "based at depot instance['vehicle_depots'][k]: it starts there and "
            + ("does not need to come back (open routes)." if "open" in fams else "must return there.")
            + (f" Customers are the nodes {len(depots)}..{n - 1}" if depots == list(range(len(depots)))
               else " Customers are the other nodes") + "; a depot is never visited as a customer."
        )
    else:
        lines.append(
            f"A fleet of {k} vehicles (instance['num_vehicles']) is based at depot node 0 and serves customers "
            f"(nodes 1..{n - 1}). "
            + ("Routes are open: a vehicle ends at its last customer and does not return to the depot, "
               "and the return trip is not counted." if "open" in fams else "Every route returns to the depot.")
        )
    lines.append(
        "Travelling from node i to node j takes instance['distance'][i][j] kilometres (an integer matrix)"
        + (", and as many minutes." if fams & {"time_windows", "service_time"} else ".")
    )
    if "prize" in fams:
        lines.append(
            "Visiting a customer is optional, but each customer left unvisited costs its penalty "
            "instance['penalty'][i]. Minimise the total "
            + ("time (driving plus service)" if time_objective else "distance travelled")
            + " plus the penalties of the unvisited customers."
        )
    else:
        lines.append("Every customer must be visited exactly once. " + (
            "Minimise the total time of all vehicles: driving plus service (waiting is not counted)."
            if time_objective else "Minimise the total distance travelled by all vehicles."))
    lines += constraint_lines(fams, instance)
    lines.append(
        "Return the objective value and, for each vehicle k, the list of nodes of its route in order, starting at "
        "its depot" + ("" if "open" in fams else " and ending at that depot") + " ([] for an unused vehicle)"
        + (", and a third value: for each vehicle k, [departure, return], the minutes it leaves its depot and is "
           "back there (anything for an unused vehicle): solve returns (objective, routes, times)."
           if "depot_docks" in fams else ".")
    )
    return " ".join(lines)


def fleet_text(instance: dict, key: str) -> str:
    """How the description names a fleet-wide or per-vehicle limit."""
    if isinstance(instance[key], list):
        return f"its vehicle's own limit, instance['{key}'][k] for vehicle k,"
    return f"instance['{key}']"


def relax(families: list[str], instance: dict, family: str) -> tuple[list[str], dict]:
    """The problem with one constraint ``family`` left out, as a program that forgot it would
    solve it: its keys dropped (open routes become closed, depots merge into depot 0)."""
    fams = [f for f in families if f != family]
    inst = dict(instance)
    if family == "multi_depot":
        inst["vehicle_depots"] = [0] * inst["num_vehicles"]
        inst["depots"] = [0]  # the other depots become customers of demand 0
        for key in ("demand", "volume", "penalty", "service_time"):
            if key in inst:
                inst[key] = [0 if i in instance["depots"][1:] else v for i, v in enumerate(inst[key])]
    if family == "time_windows" and "service_time" in fams:  # service times, but no end to the day
        inst.setdefault("max_route_duration", sum(map(sum, inst["distance"])) + sum(inst["service_time"]))
    if family == "capacity" and "pickup_delivery" in fams:
        fams.remove("pickup_delivery")
    if family == "pickup_delivery" and "capacity" in fams:
        inst["demand"] = [abs(v) for v in inst["demand"]]
        inst["capacity"] = max(inst["capacity"], sum(inst["demand"]))
    return fams, inst


def binding(families: list[str], instance: dict, reference: float, seconds: float) -> dict[str, bool]:
    """For each constraint family: whether the best solution of the problem without it fails the
    real problem (breaks a constraint, or lies more than 5% from ``reference``)."""
    out = {}
    for family in families:
        if family == "tsp":
            continue
        fams, inst = relax(families, instance, family)
        found = ortools_routes(inst, fams, seconds)
        if found is None:
            out[family] = True
            continue
        verdict = check_answer(instance, families, found[0], None, found[1])
        valid = not [v for v in verdict.violations if not v.startswith("the objective")]
        out[family] = not valid or verdict.objective is None or (verdict.objective - reference) / reference > SUCCESS_GAP
    return out


def solve_reference(families: list[str], instance: dict, seconds: float, prove_seconds: float = 0.0) -> dict | None:
    """The reference answer: Held-Karp (optimal) for the plain TSP, OR-Tools for the rest; with
    ``prove_seconds``, CP-SAT (``codegen.proof``) then tries to prove it optimal, and its proven
    optimum replaces OR-Tools' answer (``optimal`` true). None where no solution is known; a
    ``{"infeasible": True}`` where CP-SAT proves that none exists."""
    if families == ["tsp"]:
        length, tour = held_karp(instance["distance"])
        return {"objective": float(length), "routes": [tour], "solver": "held-karp", "optimal": True}
    found = ortools_routes(instance, families, seconds)
    proof = prove(instance, families, prove_seconds) if prove_seconds > 0 else None
    if proof is not None and proof.status == "infeasible":
        return {"infeasible": True, "solver": f"cp-sat proof ({prove_seconds:g} s)"}
    if proof is not None and proof.status == "optimal":
        found, solver = (proof.routes, None), f"cp-sat, proven optimal ({prove_seconds:g} s)"
    else:
        solver = f"ortools guided local search {seconds:g} s"
    if found is None:
        return None
    routes, times = found
    verdict = check_answer(instance, families, routes, 0.0, times)
    problems = [v for v in verdict.violations if not v.startswith("the reported objective")]
    if problems:
        raise AssertionError(f"the reference solver broke a constraint of {families}: {problems}")
    return {
        "objective": verdict.objective,
        "routes": routes,
        **({"times": times} if times is not None else {}),
        "solver": solver,
        "optimal": proof is not None and proof.status == "optimal",
    }


def make_problem(families: list[str], index: int, seconds: float, probe_seconds: float) -> dict:
    """One benchmark problem: its instance and reference, and a probing instance tightened until
    every constraint binds (8 tightening steps)."""
    name = problem_name(families)
    rng = np.random.default_rng(seed_of(name, False))
    for _ in range(20):
        instance = generate_instance(families, rng)
        reference = solve_reference(families, instance, seconds)
        if reference is not None:
            break
    else:
        raise RuntimeError(f"{name}: no feasible instance in 20 draws")
    rng = np.random.default_rng(seed_of(name, True))
    probe, binds = None, {}
    for attempt in range(24):  # tighter and tighter; past 8 tries, any feasible draw at the start
        if attempt >= 8 and probe is not None:
            break
        tight = 0.9**attempt if attempt < 8 else 1.0
        candidate = generate_instance(families, rng, tight)
        answer = solve_reference(families, candidate, probe_seconds)
        if answer is None:
            continue
        binds = binding(families, candidate, answer["objective"], probe_seconds / 2)
        if probe is None or sum(binds.values()) > sum(probe[2].values()):
            probe = (candidate, answer, binds)
        if all(binds.values()):
            break
    if probe is None:
        raise RuntimeError(f"{name}: no feasible probing instance in 24 draws")
    candidate, answer, binds = probe
    return {
        "name": name,
        "families": families,
        "split": "test" if index % TEST_EVERY == TEST_EVERY - 1 else "train",
        "description": describe(families, instance),
        "signature": signature_of(families),
        "instance": instance,
        "reference": reference,
        "probe": {"instance": candidate, "reference": answer, "binds": binds},
    }


def load_problems(folder: str | os.PathLike, split: str = "all") -> list[dict]:
    """The problems of a folder of JSON files (sorted by name), those of one ``split`` or all.
    Raises ValueError with one line naming the file for a malformed problem."""
    path = Path(folder)
    if not path.is_dir():
        raise ValueError(f"{folder} is not a folder of problem .json files")
    problems = []
    for file in sorted(path.glob("*.json")):
        try:
            problem = json.loads(file.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"{file}: not a problem file ({e})") from None
        problem_error(problem, file)
        if split in ("all", problem["split"]):
            problems.append(problem)
    if not problems:
        raise ValueError(f"{folder} has no problem .json files" + ("" if split == "all" else f" in split {split!r}"))
    return problems


NODE_KEYS = ("demand", "volume", "service_time", "time_windows", "penalty")
"""The instance keys that hold one value per node (renumbered with the nodes)."""
FAMILY_KEYS = {
    "capacity": {"demand": "ints", "capacity": "fleet"},
    "resources": {"volume": "ints", "volume_capacity": "fleet"},
    "distance_limit": {"max_route_distance": "int"},
    "service_time": {"service_time": "ints"},
    "time_windows": {"time_windows": "windows"},
    "prize": {"penalty": "ints"},
    "pickup_delivery": {"pickup_delivery_pairs": "pairs"},
    "depot_docks": {"load_time": "int", "unload_time": "int", "docks": "int"},
}
"""The keys each family's instance must hold, and their kinds (ints: one int per node; fleet: one
int for every vehicle, or a list of one per vehicle)."""
SETTINGS = {"objective": ("distance", "time"), "depot_window": ("day", "departure")}
"""The instance's optional settings and their values (the first is the default)."""
ZERO_AT_DEPOTS = ("demand", "volume", "service_time")
"""Per-node keys a depot must hold 0 in (a depot's demand is refused, never silently ignored)."""


def instance_error(instance, families: list[str]) -> str | None:
    """What is wrong with ``instance`` for a problem of ``families`` (a key missing, mistyped or
    missized), in one phrase naming the key, or None."""
    if not isinstance(instance, dict):
        return "the instance must be a JSON object"
    d = instance.get("distance")
    if not isinstance(d, list) or not d or any(not isinstance(r, list) or len(r) != len(d) for r in d):
        return "instance['distance'] must be a square list of lists"
    n = len(d)
    if any(not is_int(v) or v < 0 for r in d for v in r):
        return "instance['distance'] must hold non-negative integers"
    depots, vehicles = instance.get("depots"), instance.get("num_vehicles")
    if not is_int(vehicles) or vehicles < 1:
        return "instance['num_vehicles'] must be a positive integer"
    if not isinstance(depots, list) or not depots or any(not is_int(v) or not 0 <= v < n for v in depots):
        return f"instance['depots'] must be a non-empty list of nodes 0..{n - 1}"
    starts = instance.get("vehicle_depots")
    if not isinstance(starts, list) or len(starts) != vehicles:
        return f"instance['vehicle_depots'] must list one depot of instance['depots'] per vehicle ({vehicles})"
    if missing := sorted({v for v in starts if v not in depots}, key=str):
        return f"instance['depots'] {depots} lacks {missing}, depots of vehicles in instance['vehicle_depots']"
    needed = {key: (kind, family) for family in families for key, kind in FAMILY_KEYS.get(family, {}).items()}
    if "max_route_duration" in instance:
        needed["max_route_duration"] = ("int", "duration limit")
    if "depot_docks" in families and ("time_windows" not in families or "open" in families):
        return "the depot_docks family needs time_windows (its departures are timed) and routes that return"
    if "depot_docks" in families and (not is_int(instance.get("docks")) or instance["docks"] < 1):
        return f"instance['docks'] must be a positive integer, got {instance.get('docks')!r:.40}"
    for key, allowed in SETTINGS.items():
        if key in instance and instance[key] not in allowed:
            return f"instance['{key}'] must be one of {', '.join(map(repr, allowed))}, got {instance[key]!r:.40}"
    for key, (kind, family) in needed.items():
        value = instance.get(key)
        if key not in instance:
            return f"instance['{key}'] is missing (the {family} family needs it)"
        if kind == "fleet" and isinstance(value, list):
            if len(value) != vehicles or any(not is_int(v) or v < 0 for v in value):
                return f"instance['{key}'] must be one non-negative integer, or a list of one per vehicle ({vehicles})"
            continue
        if kind in ("int", "fleet") and (not is_int(value) or value < 0):
            return f"instance['{key}'] must be a non-negative integer, got {value!r:.40}"
        if kind not in ("int", "fleet") and (not isinstance(value, list) or (kind != "pairs" and len(value) != n)):
            return f"instance['{key}'] must be a list" + ("" if kind == "pairs" else f" of {n} values, one per node")
        if kind == "ints" and any(not is_int(v) for v in value):
            return f"instance['{key}'] must hold integers"
        if kind == "windows" and any(not isinstance(w, list) or len(w) != 2 or not all(map(is_int, w)) or w[0] > w[1]
                                     for w in value):
            return f"instance['{key}'] must hold [earliest, latest] integer pairs with earliest <= latest"
        if kind == "pairs" and any(not isinstance(pq, list) or len(pq) != 2 or not all(is_int(v) and 0 <= v < n and
                                   v not in depots for v in pq) for pq in value):
            return f"instance['{key}'] must hold [pickup, delivery] pairs of customer nodes"
        if key in ZERO_AT_DEPOTS and any(value[d] != 0 for d in depots):
            depot = next(d for d in depots if value[d] != 0)
            return (f"instance['{key}'][{depot}] is {value[depot]} at depot {depot}: a depot has no {key} "
                    "(give it to a customer node)")
    return None


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def problem_error(problem, file) -> None:
    """Raise ValueError, one line naming the file and the key, when ``problem`` lacks a key of the
    format, has an unknown family, or an instance lacks (or mistypes, or missizes) a key its families need."""
    keys = ("name", "families", "split", "description", "instance", "reference")
    if not isinstance(problem, dict) or any(k not in problem for k in keys):
        raise ValueError(f"{file}: a problem needs the keys {', '.join(keys)} (and optionally probe)")
    if not isinstance(problem["families"], list):
        raise ValueError(f"{file}: families must be a list of constraint families")
    unknown = set(problem["families"]) - set(FAMILIES) - {"tsp"}
    if unknown:
        raise ValueError(f"{file}: unknown constraint families {sorted(unknown)}; known: {', '.join(FAMILIES)}")
    cases = [("instance", problem["instance"], problem["reference"])]
    if problem.get("probe") is not None:
        probe = problem["probe"]
        if not isinstance(probe, dict) or "instance" not in probe or "reference" not in probe:
            raise ValueError(f"{file}: probe must hold an instance and its reference")
        cases.append(("probe", probe["instance"], probe["reference"]))
    for where, inst, reference in cases:
        error = instance_error(inst, problem["families"])
        if error:
            raise ValueError(f"{file}: {where}: {error}")
        objective = reference.get("objective") if isinstance(reference, dict) else None
        if not isinstance(objective, int | float) or not math.isfinite(objective) or objective <= 0:
            raise ValueError(f"{file}: {where}'s reference objective must be a positive number, got {objective!r}")


RENUMBER_TRIES = 64


def relabelled(instance: dict, seed: int) -> tuple[dict, list[int]]:
    """The instance with its customers renumbered by a random permutation (depots keep their
    numbers): the same problem, the same optimum, other routes. Returns (instance, new number of
    each old node)."""
    n = len(instance["distance"])
    depots = set(instance["depots"])
    customers = [i for i in range(n) if i not in depots]
    new = list(range(n))
    for old, shuffled in zip(customers, np.random.default_rng(seed).permutation(customers).tolist(), strict=True):
        new[old] = shuffled
    old_of = [0] * n
    for old, renumbered in enumerate(new):
        old_of[renumbered] = old
    out = dict(instance)
    out["distance"] = [[instance["distance"][old_of[i]][old_of[j]] for j in range(n)] for i in range(n)]
    for key in NODE_KEYS:
        if key in instance:
            out[key] = [instance[key][old_of[i]] for i in range(n)]
    if "pickup_delivery_pairs" in instance:
        out["pickup_delivery_pairs"] = [[new[p], new[q]] for p, q in instance["pickup_delivery_pairs"]]
    return out, new


def judged_instances(problem: dict) -> list[tuple[str, dict, dict]]:
    """(what it is, instance, reference) for every instance a program is judged on: the problem's
    own, then its probe, or, for a problem without one, the instance with its customers renumbered."""
    cases = [("the problem's instance", problem["instance"], problem["reference"])]
    if problem.get("probe") is not None:
        cases.append(("a second instance of the same problem", problem["probe"]["instance"], problem["probe"]["reference"]))
        return cases
    reference, routes = dict(problem["reference"]), problem["reference"].get("routes")
    seed, fams, times = zlib.crc32(problem["name"].encode()), problem["families"], problem["reference"].get("times")
    hard_coded = None if routes is None else check_answer(problem["instance"], fams, routes, 0, times).objective
    for tries in range(RENUMBER_TRIES):  # a numbering on which the reference's own answer, hard-coded, fails
        instance, new = relabelled(problem["instance"], seed + tries)
        if hard_coded is None or not check_answer(instance, fams, routes, hard_coded, times).valid:
            break
    if routes is not None:
        reference["routes"] = [[new[v] for v in route] for route in routes]
    cases.append(("the same instance with its customers renumbered", instance, reference))
    return cases


def protection(problem: dict) -> str:
    """What keeps a hard-coded answer from passing on ``problem``: its probing instance, or the
    automatic renumbering of its customers."""
    return "probe instance" if problem.get("probe") is not None else "customers renumbered"


def shipped_problems() -> Path:
    """The folder of the benchmark shipped with the package."""
    return Path(__file__).resolve().parent / "problems"


def main() -> None:
    parser = argparse.ArgumentParser(description="Write the RLEA benchmark (one JSON file per problem).")
    parser.add_argument("--out", default=str(shipped_problems()), help="folder to write the problems to")
    parser.add_argument("--seconds", type=float, default=5.0, help="OR-Tools time per reference")
    parser.add_argument("--probe-seconds", type=float, default=1.0, help="OR-Tools time per probing reference")
    parser.add_argument("--only", default="", help="comma-separated problem names to write (default all)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    only = set(filter(None, args.only.split(",")))
    for index, families in enumerate(FAMILY_SETS):
        name = problem_name(families)
        if only and name not in only:
            continue
        problem = make_problem(families, index, args.seconds, args.probe_seconds)
        (out / f"{name}.json").write_text(json.dumps(problem, indent=1) + "\n")
        binds = problem["probe"]["binds"]
        print(
            f"{name:42s} {problem['split']:5s} n={len(problem['instance']['distance']):2d} "
            f"ref={problem['reference']['objective']:.0f} probe binds {sum(binds.values())}/{len(binds)}",
            flush=True,
        )


if __name__ == "__main__":
    main()
