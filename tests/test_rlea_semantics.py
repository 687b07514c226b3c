"""The problem format's settings: the objective in time (driving plus service), a depot
window that bounds the departure only, and a duration limit measured from a departure free within
the depot's window. The checker is compared with a brute force over every departure time, and the
reference solver with the checker's optimum over every solution of tiny instances."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st
from ppoor.checkers.programs import check_answer
from ppoor.codegen.benchmark import describe, instance_error, solve_reference


def tiny_instance(draw, customers: int, vehicles: int) -> tuple[list[str], dict]:
    """A random instance of one depot (node 0) with time windows, service times and the settings."""
    n = customers + 1
    points = [(draw(st.integers(0, 12)), draw(st.integers(0, 12))) for _ in range(n)]
    distance = [[abs(a[0] - b[0]) + abs(a[1] - b[1]) for b in points] for a in points]
    open_at = [draw(st.integers(0, 30)) for _ in range(n)]
    windows = [[o, o + draw(st.integers(0, 25))] for o in open_at]
    service = [0] + [draw(st.integers(0, 4)) for _ in range(customers)]
    families = ["time_windows", "service_time"] + (["open"] if draw(st.booleans()) else [])
    instance = {
        "distance": distance,
        "depots": [0],
        "num_vehicles": vehicles,
        "vehicle_depots": [0] * vehicles,
        "time_windows": windows,
        "service_time": service,
        "objective": draw(st.sampled_from(["distance", "time"])),
        "depot_window": draw(st.sampled_from(["day", "departure"])),
    }
    if draw(st.booleans()):
        instance["max_route_duration"] = draw(st.integers(0, 60))
    return families, instance


def by_every_departure(instance: dict, route: list[int], closed: bool) -> tuple[bool, int | None]:
    """(some departure meets every window, the shortest duration over those departures), trying every
    integer departure time of the depot's window in turn."""
    d, windows, service = instance["distance"], instance["time_windows"], instance["service_time"]
    best = None
    for departure in range(windows[0][0], windows[0][1] + 1):
        clock, ok = departure, True
        stops = route[1:]
        for i, node in enumerate(stops):
            clock += service[route[i]] + d[route[i]][node]
            if closed and i == len(stops) - 1:  # the return to the depot
                if instance["depot_window"] == "day":
                    clock = max(clock, windows[0][0])
                    ok &= clock <= windows[0][1]
                continue
            clock = max(clock, windows[node][0])
            ok &= clock <= windows[node][1]
        if not closed:
            clock += service[route[-1]]
        if ok and (best is None or clock - departure < best):
            best = clock - departure
    return best is not None, best


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_the_schedule_agrees_with_trying_every_departure(data):
    """A route is feasible when some departure in the depot's window meets every window, and keeps
    the duration limit when the best such departure does."""
    customers = data.draw(st.integers(1, 5))
    families, instance = tiny_instance(data.draw, customers, 1)
    closed = "open" not in families
    order = data.draw(st.permutations(range(1, customers + 1)))
    route = [0, *order] + ([0] if closed else [])
    verdict = check_answer(instance, families, [route], 0)
    feasible, shortest = by_every_departure(instance, route, closed)
    window_broken = any("window closes" in v for v in verdict.violations)
    assert window_broken == (not feasible), (verdict.violations, feasible)
    if feasible and "max_route_duration" in instance:
        too_long = any("duration limit" in v for v in verdict.violations)
        assert too_long == (shortest > instance["max_route_duration"]), (verdict.violations, shortest)
    travel = sum(instance["distance"][a][b] for a, b in itertools.pairwise(route))
    served = sum(instance["service_time"][v] for v in order)
    assert verdict.objective == travel + (served if instance["objective"] == "time" else 0)


def every_solution(customers: int, vehicles: int):
    """Every assignment of the customers 1..customers to ``vehicles`` ordered routes."""
    for order in itertools.permutations(range(1, customers + 1)):
        for cuts in itertools.combinations_with_replacement(range(customers + 1), vehicles - 1):
            bounds = (0, *cuts, customers)
            yield [list(order[a:b]) for a, b in itertools.pairwise(bounds)]


@settings(max_examples=12, deadline=None)
@given(st.data())
def test_the_reference_solver_finds_the_checkers_optimum_on_tiny_instances(data):
    """OR-Tools (solvers/rlea_references.py) and the checker (checkers/programs.py) are written apart: on
    instances of 4 customers and 2 vehicles the reference's objective equals the best the checker
    accepts over every solution, with each setting drawn at random."""
    families, instance = tiny_instance(data.draw, 4, 2)
    assert instance_error(instance, families) is None
    closed = "open" not in families
    best = None
    for parts in every_solution(4, 2):
        routes = [[0, *p] + ([0] if closed else []) if p else [] for p in parts]
        verdict = check_answer(instance, families, routes, 0)
        if not [v for v in verdict.violations if not v.startswith("the reported objective")]:
            best = verdict.objective if best is None else min(best, verdict.objective)
    answer = solve_reference(families, instance, 0.3)
    if best is None:
        assert answer is None
    else:
        assert answer is not None and answer["objective"] == best, (answer, best)


def test_the_settings_are_checked_and_described():
    families = ["time_windows"]
    instance = {
        "distance": [[0, 3], [3, 0]],
        "depots": [0],
        "num_vehicles": 1,
        "vehicle_depots": [0],
        "time_windows": [[0, 2], [4, 9]],
        "depot_window": "departure",
        "max_route_duration": 6,
    }
    assert instance_error(instance, families) is None
    text = describe(families, instance)
    assert "the return is not bound by it" in text and "Duration limit" in text
    # back at 7 at the earliest, after the depot's window closes at 2: allowed for a departure window,
    # whose latest departure (2: serves at 5, back at 8) makes the route last 6
    assert check_answer(instance, families, [[0, 1, 0]], 6).valid
    day = dict(instance, depot_window="day")
    assert "returns to depot 0 at time 7" in check_answer(day, families, [[0, 1, 0]], 6).violations[0]
    assert "lasts 6" in check_answer(dict(instance, max_route_duration=5), families, [[0, 1, 0]], 6).violations[0]
    assert "instance['objective'] must be one of" in instance_error(dict(instance, objective="money"), families)
    assert "instance['depot_window'] must be one of" in instance_error(dict(instance, depot_window=1), families)
    assert "max_route_duration" in instance_error(dict(instance, max_route_duration=-1), families)
    served = {"service_time": [2, 1], "max_route_duration": 99}
    assert "a depot has no service_time" in instance_error(dict(instance, **served), [*families, "service_time"])


DOCKS = {
    "distance": [[0, 5, 5, 5], [5, 0, 5, 5], [5, 5, 0, 5], [5, 5, 5, 0]],
    "depots": [0],
    "num_vehicles": 3,
    "vehicle_depots": [0, 0, 0],
    "time_windows": [[0, 50], [0, 100], [0, 100], [0, 100]],
    "load_time": 5,
    "unload_time": 5,
    "docks": 1,
}
THREE = [[0, 1, 0], [0, 2, 0], [0, 3, 0]]


def test_depot_docks_by_hand():
    """One dock: dispatches at 0, 5, 10 (back at 15, 20, 25) and receptions never overlap; two
    dispatches 3 minutes apart do; times are required, and a return cannot come early."""
    families = ["time_windows", "depot_docks"]
    assert instance_error(DOCKS, families) is None
    assert check_answer(DOCKS, families, THREE, 30, [[0, 15], [5, 20], [10, 25]]).valid
    assert "2 vehicles dispatched or received at time 3" in check_answer(
        DOCKS, families, THREE, 30, [[0, 15], [3, 20], [10, 25]]).violations[0]  # fmt: skip
    assert "must also return the [departure, return]" in check_answer(DOCKS, families, THREE, 30).violations[0]
    assert "before it can be" in check_answer(DOCKS, families, THREE, 30, [[0, 9], [5, 20], [10, 25]]).violations[0]
    assert "outside its window" in check_answer(DOCKS, families, THREE, 30, [[0, 15], [5, 20], [60, 75]]).violations[0]
    assert "needs time_windows" in instance_error(DOCKS, ["depot_docks"])
    assert "docks'] must be a positive integer" in instance_error(dict(DOCKS, docks=0), families)
    assert check_answer(dict(DOCKS, docks=2), families, THREE, 30, [[0, 15], [3, 20], [10, 25]]).valid


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), min_size=3, max_size=3), st.integers(1, 3),
       st.integers(0, 8), st.integers(0, 8))  # fmt: skip
def test_the_docks_agree_with_counting_every_minute(starts, docks, load, unload):
    """A schedule is refused exactly when some minute sees more dispatches and receptions than docks."""
    instance = dict(DOCKS, docks=docks, load_time=load, unload_time=unload, depot_window="departure")
    times = [[departure, departure + 10 + extra] for departure, extra in starts]
    busy = [(d, d + load) for d, _ in times] + [(b, b + unload) for _, b in times]
    crowded = any(sum(a <= t < b for a, b in busy) > docks for t in range(0, 120))
    verdict = check_answer(instance, ["time_windows", "depot_docks"], THREE, 30, times)
    assert verdict.valid == (not crowded), (verdict.violations, times)


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_cp_sat_proves_the_checkers_optimum_on_tiny_instances(data):
    """codegen/proof.py, a CP-SAT model written apart from the checker: on instances of 4 customers
    and 2 vehicles, with windows, service and the settings drawn, and capacity, a route limit,
    prizes or pickup and delivery added at random, it proves the optimum the checker finds over every
    solution (or proves that none exists), and its routes pass the checker at that cost."""
    from ppoor.codegen.proof import prove

    families, instance = tiny_instance(data.draw, 4, 2)
    extra = data.draw(st.sampled_from(["", "capacity", "distance_limit", "prize", "pickup_delivery"]))
    if extra == "capacity":
        instance["demand"], instance["capacity"] = [0, *data.draw(st.lists(st.integers(1, 5), min_size=4, max_size=4))], 7
    elif extra == "distance_limit":
        instance["max_route_distance"] = data.draw(st.integers(10, 40))
    elif extra == "prize":
        instance["penalty"] = [0, *data.draw(st.lists(st.integers(0, 30), min_size=4, max_size=4))]
    elif extra == "pickup_delivery":
        instance["pickup_delivery_pairs"] = [[1, 2], [4, 3]]
    families = families + ([extra] if extra else [])
    assert instance_error(instance, families) is None
    closed = "open" not in families
    best = None
    for parts in every_solution(4, 2):
        for kept in itertools.product(*[[True, False] if extra == "prize" else [True]] * 4):
            drop = {c for c, keep in zip(range(1, 5), kept, strict=True) if not keep}
            routes = [[0, *[c for c in p if c not in drop]] for p in parts]
            routes = [r + ([0] if closed else []) if len(r) > 1 else [] for r in routes]
            verdict = check_answer(instance, families, routes, 0)
            if not [v for v in verdict.violations if not v.startswith("the reported objective")]:
                best = verdict.objective if best is None else min(best, verdict.objective)
    proof = prove(instance, families, 20.0)
    if best is None:
        assert proof.status == "infeasible"
    else:
        assert proof.status == "optimal" and proof.objective == best, (proof, best)
        assert check_answer(instance, families, proof.routes, best).valid


def test_cp_sat_reports_an_integer_objective_with_prizes():
    """The example hypothesis found: windows [0, 0] everywhere leave only node 2 (at the depot's
    place) servable; leaving nodes 1, 3, 4 costs their prizes 0 + 0 + 1. CP-SAT said
    0.9999999999999998 (a double, the prizes' constant term), and the proof compared it with 1."""
    from ppoor.codegen.proof import prove

    d = [[abs(a[0] - b[0]) + abs(a[1] - b[1]) for b in POINTS] for a in POINTS]
    instance = {"distance": d, "depots": [0], "num_vehicles": 2, "vehicle_depots": [0, 0],
                "time_windows": [[0, 0]] * 5, "service_time": [0] * 5, "penalty": [0, 0, 3, 0, 1]}  # fmt: skip
    families = ["time_windows", "service_time", "prize"]
    proof = prove(instance, families, 10.0)
    assert proof.status == "optimal" and proof.objective == 1 and isinstance(proof.objective, int)
    assert check_answer(instance, families, proof.routes, 1).valid


POINTS = [(1, 1), (0, 0), (1, 1), (0, 0), (0, 0)]
