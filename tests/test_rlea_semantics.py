"""The problem format's settings (issue 32): the objective in time (driving plus service), a depot
window that bounds the departure only, and a duration limit measured from a departure free within
the depot's window. The checker is compared with a brute force over every departure time, and the
reference solver with the checker's optimum over every solution of tiny instances."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st
from ppoor.agents.problems import describe, instance_error, solve_reference
from ppoor.agents.verify import check_answer


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
    """OR-Tools (agents/reference.py) and the checker (agents/verify.py) are written apart: on
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
