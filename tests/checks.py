"""Independent reference computations for the tests: plain Python, no code of the project."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

SHARED = Path(__file__).resolve().parents[2] / "shared"


def random_allowed_actions(mask: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One uniformly random allowed action per trajectory: mask [..., A] -> actions [...]."""
    scores = np.where(mask, rng.random(mask.shape), -1.0)
    return scores.argmax(-1)


def path_length(points, order) -> float:
    """Length of the open path through ``points`` in ``order``, summed with math.hypot."""
    return sum(
        math.hypot(points[b][0] - points[a][0], points[b][1] - points[a][1])
        for a, b in zip(order[:-1], order[1:], strict=True)
    )


def check_tsp_actions(actions, coords) -> float:
    """Asserts that an action sequence is a closed TSP tour; returns its length."""
    n = len(coords)
    actions = [int(a) for a in actions]
    assert sorted(actions[:n]) == list(range(n)), f"not a permutation: {actions}"
    assert actions[n] == actions[0], "tour does not return to its first node"
    assert all(a == actions[0] for a in actions[n:]), "left the terminal node"
    return path_length([tuple(c) for c in coords], actions[: n + 1])


def check_cvrp_actions(actions, depot, coords, demand, capacity) -> float:
    """Asserts that a CVRP action sequence (integer ``demand`` [n]) is feasible; returns its length."""
    actions = [int(a) for a in actions]
    n = len(coords)
    last = max(i for i, a in enumerate(actions) if a != 0) + 1
    assert actions[last] == 0 and all(a == 0 for a in actions[last:]), "does not end at the depot"
    route = actions[: last + 1]
    customers = [a for a in route if a != 0]
    assert sorted(customers) == list(range(1, n + 1)), "not every customer served exactly once"
    load = 0
    for prev, a in zip([0] + route[:-1], route, strict=True):
        assert not (prev == 0 and a == 0), "depot twice in a row"
        load = 0 if a == 0 else load + int(demand[a - 1])
        assert load <= capacity, f"route load {load} exceeds capacity {capacity}"
    points = [tuple(depot)] + [tuple(c) for c in coords]
    return path_length(points, [0] + route)


def check_vrp_actions(actions, instance) -> float:
    """Asserts that an action sequence of the multi-task VRP env (after its depot start, possibly
    padded with depot steps) is feasible for ``instance`` (the arrays of one instance); returns its
    cost. Simulates one route at a time from the problem's definition: loads, linehauls before
    backhauls, windows with waiting and service, depot closing and length limit unless open."""
    actions = [int(a) for a in actions]
    coords = [tuple(c) for c in instance["coords"]]
    points = [tuple(instance["depot"])] + coords
    n = len(coords)
    served = [a for a in actions if a != 0]
    assert sorted(served) == list(range(1, n + 1)), "not every customer served exactly once"
    assert actions[-1] == 0, "does not end at the depot"
    is_open = bool(instance["open_route"])
    limit = float(instance["distance_limit"])
    opening = [float(w[0]) for w in instance["time_windows"]]
    closing = [float(w[1]) for w in instance["time_windows"]]
    service = [float(s) for s in instance["service_time"]]
    pickup = [0.0] + [float(d) for d in instance["demand_backhaul"]]
    delivery = [0.0] + [float(d) for d in instance["demand_linehaul"]]
    eps = 1e-4
    total, here, clock, driven, delivered, picked, after_pickup = 0.0, 0, opening[0], 0.0, 0.0, 0.0, False
    last = max(i for i, a in enumerate(actions) if a != 0) + 1
    for nxt in actions[: last + 1]:
        assert not (here == 0 and nxt == 0), "depot twice in a row"
        leg = math.hypot(points[nxt][0] - points[here][0], points[nxt][1] - points[here][1])
        if nxt == 0:
            if not is_open:
                total += leg
                assert driven + leg <= limit + eps, "route longer than the distance limit"
                assert clock + leg <= closing[0] + eps, "route back after the depot closes"
            here, clock, driven, delivered, picked, after_pickup = 0, opening[0], 0.0, 0.0, 0.0, False
            continue
        total += leg
        driven += leg
        if pickup[nxt] > 0:
            picked += pickup[nxt]
            after_pickup = True
        else:
            assert not after_pickup, "a linehaul customer after a backhaul one on the same route"
            delivered += delivery[nxt]
        assert delivered <= 1 + 1e-5 and picked <= 1 + 1e-5, "route load above capacity"
        arrival = clock + leg
        assert arrival <= closing[nxt] + eps, f"customer {nxt} reached after its window closes"
        clock = max(arrival, opening[nxt]) + service[nxt]
        here = nxt
    assert all(a == 0 for a in actions[last:]), "left the depot after the last route"
    if not is_open:
        assert driven == 0.0
    return total
