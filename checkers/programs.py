"""The independent checker of a program's answer: every constraint of a problem, the objective
recomputed from the routes, and the gap to the reference.

Written from the problem format of ``codegen/benchmark.py`` alone: it shares no code with the
reference solver (``solvers/rlea_references.py``, OR-Tools) nor with any generated program. A route is a
list of node indices: vehicle k's route starts at its depot (``instance["vehicle_depots"][k]``),
visits customers, and returns to that depot unless the problem has open routes; an unused vehicle's
route is empty (``[]``, ``[d]`` or ``[d, d]`` also read as unused).

Three instance settings change the semantics where present (``codegen/benchmark.py`` lists them):
``objective`` "time" adds the service times of the visited customers to the distance;
``depot_window`` "departure" makes a depot's time window bound the departure only (the return is
free); ``max_route_duration`` bounds every route's duration, its return (or last service, for open
routes) minus its departure, the departure chosen as late as the time windows allow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

SUCCESS_GAP = 0.05
"""A valid answer succeeds when its objective is within 5% of the reference (the paper's rule)."""
OBJECTIVE_TOLERANCE = 1e-6


@dataclass
class Verdict:
    """What the checker found: ``valid`` when the routes pass every constraint and the reported
    objective agrees with them; ``objective`` recomputed from the routes (None when the routes
    could not be read); ``violations`` one line each, fed back to the LLM."""

    valid: bool
    objective: float | None
    violations: list[str] = field(default_factory=list)

    def gap(self, reference: float) -> float | None:
        """The signed relative gap (y - y*) / |y*| of a valid answer to the reference y* (negative
        when the answer beats it), else None."""
        if not self.valid or self.objective is None:
            return None
        return (self.objective - reference) / abs(reference)


def route_distance(distance: list[list[int]], route: list[int]) -> int:
    """The length of one route: the sum of its consecutive legs."""
    return sum(distance[a][b] for a, b in zip(route, route[1:], strict=False))


def read_routes(routes, instance: dict, families: set[str]) -> tuple[list[list[int]], list[str]]:
    """The routes as lists of ints, trailing depots stripped to the customers visited, or the
    reasons they cannot be read."""
    n = len(instance["distance"])
    if not isinstance(routes, list | tuple):
        return [], [f"routes must be a list of lists of node indices, got {type(routes).__name__}"]
    vehicles = instance["num_vehicles"]
    if len(routes) > vehicles:
        return [], [f"{len(routes)} routes returned for {vehicles} vehicles"]
    depots = instance["vehicle_depots"]
    closed = "open" not in families
    out, problems = [], []
    for k, route in enumerate(routes):
        if not isinstance(route, list | tuple) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in route
        ):
            return [], [f"route {k} must be a list of integer node indices, got {route!r:.80}"]
        if any(not 0 <= v < n for v in route):
            return [], [f"route {k} has a node outside 0..{n - 1}: {list(route)!r:.80}"]
        route = list(route)
        if len(route) <= 1 or (len(route) == 2 and route[0] == route[1] == depots[k]):
            if route and route[0] != depots[k]:
                problems.append(f"route {k} must start at its depot {depots[k]}, starts at {route[0]}")
            out.append([])
            continue
        if route[0] != depots[k]:
            problems.append(f"route {k} must start at its depot {depots[k]}, starts at {route[0]}")
        if closed:
            if route[-1] != depots[k]:
                problems.append(f"route {k} must end at its depot {depots[k]}, ends at {route[-1]}")
            inner = route[1:-1]
        else:
            inner = route[1:-1] if route[-1] == depots[k] else route[1:]
        out.append(inner)
    return out, problems


def check_answer(instance: dict, families: list[str], routes, reported, times=None) -> Verdict:
    """Check ``routes`` (one list per vehicle) and the ``reported`` objective against every
    constraint of a problem of the given constraint ``families`` on ``instance``; with depot docks,
    also ``times``, vehicle k's [departure, return] (read by ``dock_problems``)."""
    fams = set(families)
    visits, problems = read_routes(routes, instance, fams)
    if not visits and problems:
        return Verdict(False, None, problems)
    schedule = None
    if "depot_docks" in fams:
        schedule, reasons = read_times(times, visits)
        if reasons:
            return Verdict(False, None, problems + reasons)
    d = instance["distance"]
    n = len(d)
    depots = instance["vehicle_depots"]
    depot_nodes = set(instance["depots"])
    closed = "open" not in fams
    seen: dict[int, int] = {}
    for k, inner in enumerate(visits):
        for v in inner:
            if v in depot_nodes:
                problems.append(f"route {k} visits depot {v} as a customer")
            elif v in seen:
                problems.append(f"customer {v} is visited twice (routes {seen[v]} and {k})")
            seen.setdefault(v, k)
    customers = [i for i in range(n) if i not in depot_nodes]
    missing = [i for i in customers if i not in seen]
    if missing and "prize" not in fams:
        problems.append(f"customers never visited: {missing[:10]}{' ...' if len(missing) > 10 else ''}")
    objective = 0.0
    for k, inner in enumerate(visits):
        if not inner:
            continue
        route = [depots[k], *inner] + ([depots[k]] if closed else [])
        length = route_distance(d, route)
        objective += length
        if instance.get("objective") == "time" and "service_time" in fams:
            objective += sum(instance["service_time"][v] for v in inner)
        problems += route_constraints(instance, fams, k, route, inner, length, schedule and schedule[k])
    if "prize" in fams:
        objective += sum(instance["penalty"][i] for i in missing)
    if "pickup_delivery" in fams:
        for p, q in instance["pickup_delivery_pairs"]:
            if seen.get(p) != seen.get(q):
                problems.append(f"pickup {p} and its delivery {q} are not on the same route")
    if schedule is not None:
        problems += dock_problems(instance, visits, schedule)
    problems += objective_problem(reported, objective)
    return Verdict(not problems, objective, problems)


def objective_problem(reported, objective: float) -> list[str]:
    """A line when the reported objective is not a finite number agreeing with the routes'."""
    if isinstance(reported, bool) or not isinstance(reported, int | float) or not math.isfinite(reported):
        return [f"the objective must be a finite number, got {reported!r:.60}"]
    if abs(reported - objective) > OBJECTIVE_TOLERANCE * max(1.0, abs(objective)):
        return [f"the reported objective {reported:g} disagrees with its routes, whose objective is {objective:g}"]
    return []


def route_constraints(
    instance: dict, fams: set[str], k: int, route: list[int], inner: list[int], length: int, times=None
) -> list[str]:
    """The violations of vehicle k's ``route`` (depot first; the depot last when closed), whose
    customers are ``inner``, of ``length``; ``times``: its given [departure, return], if any."""
    problems = []
    if "pickup_delivery" in fams:  # precedence holds with or without a capacity
        position = {v: i for i, v in enumerate(inner)}
        for p, q in instance["pickup_delivery_pairs"]:
            if p in position and q in position and position[p] > position[q]:
                problems.append(f"route {k}: delivery {q} comes before its pickup {p}")
    if "capacity" in fams:
        capacity = vehicle_value(instance["capacity"], k)
        if "pickup_delivery" in fams:
            load = 0
            for v in inner:
                load += instance["demand"][v]
                if not 0 <= load <= capacity:
                    problems.append(f"route {k}: load {load} after node {v} is outside 0..{capacity}")
                    break
        else:
            load = sum(instance["demand"][v] for v in inner)
            if load > capacity:
                problems.append(f"route {k}: load {load} exceeds the capacity {capacity}")
    if "resources" in fams:
        volume, capacity = sum(instance["volume"][v] for v in inner), vehicle_value(instance["volume_capacity"], k)
        if volume > capacity:
            problems.append(f"route {k}: volume {volume} exceeds the volume capacity {capacity}")
    if "distance_limit" in fams and length > instance["max_route_distance"]:
        problems.append(f"route {k}: distance {length} exceeds the limit {instance['max_route_distance']}")
    if times is not None:
        problems += timed_problems(instance, fams, k, route, *times)
    elif "time_windows" in fams or "service_time" in fams or "max_route_duration" in instance:
        problems += schedule_problems(instance, fams, k, route)
    return problems


def vehicle_value(value, k: int):
    """Vehicle k's value of a fleet-wide (one number) or per-vehicle (one per vehicle) key."""
    return value[k] if isinstance(value, list) else value


def schedule_problems(instance: dict, fams: set[str], k: int, route: list[int]) -> list[str]:
    """The time violations of vehicle k's ``route``: travel time equals distance, service starts on
    arrival or at the window's opening, whichever is later, and must start by the window's close;
    the route's duration (departure as late as ``latest_departure`` finds) stays within
    ``max_route_duration`` if given."""
    windows = instance["time_windows"] if "time_windows" in fams else None
    if windows is None:
        start = 0
    else:
        start = latest_departure(instance, fams, route)
        if start is None:
            return [window_violation(k, route, simulate(instance, fams, route, windows[route[0]][0])[1], windows)]
    limit = instance.get("max_route_duration")
    if limit is not None:
        end, _ = simulate(instance, fams, route, start)
        if end - start > limit:
            return [f"route {k} lasts {end - start} (from its departure at {start} to its end at {end}), more "
                    f"than the duration limit {limit}"]
    return []


def simulate(instance: dict, fams: set[str], route: list[int], departure: int) -> tuple[int, tuple | None]:
    """Drive ``route`` leaving its depot at ``departure``: (the time it ends, the first (node, time)
    whose service would start after its window closes, or None). A closed route ends on its return
    to the depot, an open one when its last service ends. The return must fall within the depot's
    window unless ``instance['depot_window']`` is "departure"."""
    d = instance["distance"]
    service = instance["service_time"] if "service_time" in fams else None
    windows = instance["time_windows"] if "time_windows" in fams else None
    back_free = instance.get("depot_window") == "departure"
    t, late = departure, None
    for position, (a, b) in enumerate(zip(route, route[1:], strict=False), start=1):
        t += (service[a] if service else 0) + d[a][b]
        returning = position == len(route) - 1 and b == route[0]
        if windows and not (returning and back_free):
            t = max(t, windows[b][0])
            if t > windows[b][1] and late is None:
                late = (b, t)
    if route[-1] != route[0] and service:
        t += service[route[-1]]  # an open route ends when its last service ends
    return t, late


def window_violation(k: int, route: list[int], late: tuple[int, int], windows: list, leaving: str = "") -> str:
    """The line for vehicle k's ``route`` reaching node ``late[0]`` at ``late[1]``, after its window."""
    node, t = late
    what = "returns to depot" if node == route[0] else "starts serving"
    return f"route {k}{leaving} {what} {node} at time {t}, after its window closes at {windows[node][1]}"


def latest_departure(instance: dict, fams: set[str], route: list[int]) -> int | None:
    """The latest departure within the depot's window from which ``route`` meets every window, or
    None when none does. Every service start is non-decreasing in the departure, so the feasible
    departures form an interval from the window's opening: its end is found by bisection (integer
    data, integer times). The latest departure gives the shortest duration: the end is the larger of
    departure + driving and service, and a fixed time set by some window's opening."""
    earliest, latest = instance["time_windows"][route[0]]
    if simulate(instance, fams, route, earliest)[1] is not None:
        return None
    while earliest < latest:  # invariant: departing at earliest meets every window
        middle = (earliest + latest + 1) // 2
        if simulate(instance, fams, route, middle)[1] is None:
            earliest = middle
        else:
            latest = middle - 1
    return earliest


def read_times(times, visits: list[list[int]]) -> tuple[list | None, list[str]]:
    """The answer's [departure, return] of every used vehicle (integers), or the reasons they
    cannot be read."""
    if not isinstance(times, list | tuple) or len(times) < len(visits):
        return None, [f"depot docks: solve must also return the [departure, return] of each vehicle, got {times!r:.60}"]
    out = []
    for k, inner in enumerate(visits):
        pair = times[k]
        if inner and (not isinstance(pair, list | tuple) or len(pair) != 2
                      or not all(isinstance(t, int) and not isinstance(t, bool) for t in pair)):  # fmt: skip
            return None, [f"depot docks: vehicle {k}'s times must be [departure, return] integers, got {pair!r:.40}"]
        out.append(list(pair) if inner else None)
    return out, []


def timed_problems(instance: dict, fams: set[str], k: int, route: list[int], departure: int, back: int) -> list[str]:
    """The violations of vehicle k's ``route`` leaving at the given ``departure`` and back at its
    depot at ``back`` (a vehicle may wait anywhere, so ``back`` is any time from its earliest
    return): the depot's window, every customer's, the duration limit."""
    windows = instance["time_windows"]
    depot = route[0]
    if not windows[depot][0] <= departure <= windows[depot][1]:
        return [f"route {k} leaves depot {depot} at {departure}, outside its window {windows[depot]}"]
    earliest, late = simulate(instance, fams, route, departure)
    if late is not None:
        return [window_violation(k, route, late, windows, f" leaving at {departure}")]
    if back < earliest:
        return [f"route {k} is back at {back}, before it can be (leaving at {departure}, the earliest is {earliest})"]
    if instance.get("depot_window") != "departure" and back > windows[depot][1]:
        return [f"route {k} is back at {back}, after depot {depot}'s window closes at {windows[depot][1]}"]
    limit = instance.get("max_route_duration")
    if limit is not None and back - departure > limit:
        return [f"route {k} lasts {back - departure} (from {departure} to {back}), more than the duration limit {limit}"]
    return []


def dock_problems(instance: dict, visits: list[list[int]], schedule: list) -> list[str]:
    """Depot docks: dispatching a vehicle keeps a dock of its depot busy for ``load_time`` from its
    departure, receiving it for ``unload_time`` from its return; at most ``docks`` at once per depot."""
    problems = []
    for depot in instance["depots"]:
        busy = []  # (from, until) of every dispatch and reception at this depot
        for k, inner in enumerate(visits):
            if inner and instance["vehicle_depots"][k] == depot:
                departure, back = schedule[k]
                busy += [(departure, departure + instance["load_time"]), (back, back + instance["unload_time"])]
        for start, _ in busy:  # the most at once is reached when some dispatch or reception starts
            at_once = sum(1 for a, b in busy if a <= start < b)
            if at_once > instance["docks"]:
                problems.append(f"depot {depot}: {at_once} vehicles dispatched or received at time {start}, more "
                                f"than its {instance['docks']} docks")  # fmt: skip
                break
    return problems
