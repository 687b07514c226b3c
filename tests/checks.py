"""Independent reference computations for the tests (plain Python, no code of the project), and the
random rollout that drives an env under test."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np

SHARED = Path(__file__).resolve().parents[2] / "shared"
BENCH = Path(__file__).resolve().parents[1] / "bench"


def bench_module(name: str):
    """A bench script of bench/ loaded as a module from its file (it imports no other bench script),
    so that a test calls its functions without putting bench/ on the import path."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
    """Asserts that an action sequence of the multi-task VRP env (depots 0..k-1, customers k..; from
    depot 0; padded by repeating the final depot) is feasible for ``instance`` (the arrays of one
    instance); returns its cost. Simulates one route at a time from the problem's definition: each
    route from a depot back to the same depot (moves between depots only before a route, free), the
    load on board after every stop (all of the route's deliveries on board at the start), linehauls
    before backhauls unless mixed, windows with waiting and service, depot closing and length limit
    unless open."""
    actions = [int(a) for a in actions]
    while len(actions) > 1 and actions[-1] == actions[-2]:
        actions.pop()
    depots = [tuple(d) for d in instance["depots"]]
    k = len(depots)
    points = depots + [tuple(c) for c in instance["coords"]]
    assert sorted(a for a in actions if a >= k) == list(range(k, len(points))), "not every customer served once"
    assert actions[-1] < k, "does not end at a depot"
    is_open = bool(instance["open_route"])
    mixed = float(instance["backhaul_class"]) == 2
    limit = float(instance["distance_limit"])
    opening = [float(w[0]) for w in instance["time_windows"]]
    closing = [float(w[1]) for w in instance["time_windows"]]
    service = [float(s) for s in instance["service_time"]]
    pickup = [0.0] * k + [float(d) for d in instance["demand_backhaul"]]
    delivery = [0.0] * k + [float(d) for d in instance["demand_linehaul"]]
    eps = 1e-5  # the problem's tolerance on times and lengths (the env's documented 1e-5; 1e-4 here passed routes the env rightly refuses)
    routes, home, here, stops = [], 0, 0, []
    for a in actions:
        if a >= k:
            stops.append(a)
        elif stops:
            assert a == home, f"route of depot {home} returns to depot {a}"
            routes.append((home, stops))
            stops = []
        else:
            assert a != here, "a depot to itself"
            home = a
        here = a
    total = 0.0
    for home, stops in routes:
        on_board = sum(delivery[a] for a in stops)
        assert on_board <= 1 + 1e-5, "route leaves with more than the capacity"
        clock, driven, after_pickup, here = opening[home], 0.0, False, home
        for a in stops:
            leg = math.hypot(points[a][0] - points[here][0], points[a][1] - points[here][1])
            total += leg
            driven += leg
            if pickup[a] > 0:
                after_pickup = True
            else:
                assert mixed or not after_pickup, "a linehaul customer after a backhaul one on a classic route"
            on_board += pickup[a] - delivery[a]
            assert on_board <= 1 + 1e-5, "load on board above capacity"
            arrival = clock + leg
            assert arrival <= closing[a] + eps, f"customer {a} reached after its window closes"
            clock = max(arrival, opening[a]) + service[a]
            here = a
        if not is_open:
            leg = math.hypot(points[home][0] - points[here][0], points[home][1] - points[here][1])
            total += leg
            driven += leg
            assert clock + leg <= closing[home] + eps, "route back after the depot closes"
        assert driven <= limit + eps, "route longer than the distance limit"
    return total


def _strip_padding(actions) -> list:
    """A whole padded action sequence without the depot repeats at its end (a finished trajectory
    stays at the depot), one depot action kept."""
    actions = [int(a) for a in actions]
    while len(actions) > 1 and actions[-1] == 0 and actions[-2] == 0:
        actions.pop()
    return actions


def check_mrcvrp_actions(actions, depot, coords, demand) -> float:
    """Asserts that a multi-resource CVRP action sequence (``demand`` [n][R], fractions of each
    capacity) serves every customer once with every route within every capacity; returns its length."""
    route = _strip_padding(actions)
    n = len(coords)
    assert route[-1] == 0, "does not end at the depot"
    assert sorted(a for a in route if a) == list(range(1, n + 1)), "not every customer served exactly once"
    load = [0.0] * len(demand[0])
    for prev, a in zip([0] + route[:-1], route, strict=True):
        assert not (prev == 0 and a == 0), "depot twice in a row"
        load = [0.0] * len(load) if a == 0 else [x + float(d) for x, d in zip(load, demand[a - 1], strict=True)]
        assert max(load) <= 1 + 1e-5, f"route load {load} exceeds a capacity"
    return path_length([tuple(depot)] + [tuple(c) for c in coords], [0] + route)


def check_pdp_actions(actions, depot, coords, load) -> float:
    """Asserts that a pickup-and-delivery action sequence visits all n nodes once in one route from the
    depot, node i + n/2 after node i, the load on board (``load`` [n/2] per pair) never above 1, then
    returns to the depot; returns its length."""
    route = _strip_padding(actions)
    n, half = len(coords), len(coords) // 2
    assert route[-1] == 0 and 0 not in route[:-1], "not one route ending at the depot"
    assert sorted(route[:-1]) == list(range(1, n + 1)), "not every node visited exactly once"
    seen, on_board = set(), 0.0
    for a in route[:-1]:
        if a > half:
            assert a - half in seen, f"delivery {a} before its pickup {a - half}"
            on_board -= float(load[a - half - 1])
        else:
            on_board += float(load[a - 1])
        assert on_board <= 1 + 1e-5, f"load on board {on_board} above capacity"
        seen.add(a)
    return path_length([tuple(depot)] + [tuple(c) for c in coords], [0] + route)


def _one_tour(actions) -> list:
    route = _strip_padding(actions)
    assert route[-1] == 0 and 0 not in route[:-1], "not one tour ending at the depot"
    assert len(set(route[:-1])) == len(route) - 1, "a customer visited twice"
    return route


def check_op_actions(actions, instance) -> float:
    """Asserts that an orienteering action sequence is one tour within ``max_length``; returns its
    cost, minus the collected prize."""
    route = _one_tour(actions)
    points = [tuple(instance["depot"])] + [tuple(c) for c in instance["coords"]]
    assert path_length(points, [0] + route) <= float(instance["max_length"]) + 1e-4, "tour longer than the limit"
    return -sum(float(instance["prize"][a - 1]) for a in route[:-1])


def check_pctsp_actions(actions, instance) -> float:
    """Asserts that a PCTSP action sequence is one tour collecting at least 1 (or visiting everyone);
    returns length + penalties of the skipped customers."""
    route = _one_tour(actions)
    n = len(instance["coords"])
    collected = sum(float(instance["prize"][a - 1]) for a in route[:-1])
    assert len(route) > 1, "an empty tour"
    assert collected >= 1 - 1e-5 or len(route) - 1 == n, f"collected {collected} < 1"
    points = [tuple(instance["depot"])] + [tuple(c) for c in instance["coords"]]
    skipped = set(range(1, n + 1)) - set(route)
    return path_length(points, [0] + route) + sum(float(instance["penalty"][a - 1]) for a in skipped)


def check_pcvrp_actions(actions, instance) -> float:
    """Asserts that a prize-collecting CVRP action sequence has routes within capacity, each customer
    at most once; returns length + prizes of the customers not visited."""
    route = _strip_padding(actions)
    n = len(instance["coords"])
    assert route[-1] == 0, "does not end at the depot"
    served = [a for a in route if a]
    assert len(served) == len(set(served)), "a customer visited twice"
    load = 0.0
    for a in route:
        load = 0.0 if a == 0 else load + float(instance["demand"][a - 1])
        assert load <= 1 + 1e-5, "route load above capacity"
    points = [tuple(instance["depot"])] + [tuple(c) for c in instance["coords"]]
    skipped = set(range(1, n + 1)) - set(served)
    return path_length(points, [0] + route) + sum(float(instance["prize"][a - 1]) for a in skipped)


def run_random(env, rng, options=None, seed=None):
    """Random allowed actions to the end; asserts that the mask always allows an action. Returns the
    actions [M, N, T], rewards [M, N, T] and the step [M, N] at which each trajectory finished."""
    obs, _ = env.reset(seed=seed, options=options)
    actions, rewards, done = [], [], []
    for _ in range(env.max_episode_steps):
        assert obs["action_mask"].any(-1).all(), "a trajectory has no allowed action"
        a = random_allowed_actions(obs["action_mask"], rng)
        obs, r, terminated, _, _ = env.step(a)
        actions.append(a)
        rewards.append(r)
        done.append(terminated)
        if terminated.all():
            break
    assert env.terminated.all(), "episode did not finish within max_episode_steps"
    return np.stack(actions, -1), np.stack(rewards, -1), np.stack(done, -1).argmax(-1)


# -- Flatland maps (flatland-rl is imported by the callers) ----------------------------------------
STEPS = ((-1, 0), (0, 1), (1, 0), (0, -1))  # north, east, south, west: written here, not imported


def ways(env, position, heading):
    return [d for d, ok in enumerate(env.rail.get_transitions((position, heading))) if ok]


def straight_chain(env, length=3):
    """Cells c0 .. c_{length-1} of one track, each with a single way on heading d and a single way back."""
    for r in range(env.height):
        for c in range(env.width):
            for d in range(4):
                cells, ok = [(r, c)], True
                for _ in range(length - 1):
                    here = cells[-1]
                    if ways(env, here, d) != [d]:
                        ok = False
                        break
                    cells.append((here[0] + STEPS[d][0], here[1] + STEPS[d][1]))
                back = (d + 2) % 4
                if ok and all(ways(env, cell, back) == [back] for cell in cells[1:]) and ways(env, cells[-1], d) == [d]:
                    return cells, d
    raise AssertionError("no straight track of 3 cells on the map")


def place(env, trains):
    """Puts train h at (cell, heading) for each given entry, moving, and every other train off the map."""
    from flatland.envs.step_utils.states import TrainState

    for agent in env.agents:
        agent.current_configuration = None
    for handle, (cell, heading) in trains.items():
        env.agents[handle].current_configuration = (cell, heading)
        env.agents[handle].state_machine.set_state(TrainState.MOVING)


def earliest_arrival(track, book, handle: int, t0: int, at) -> int | None:
    """The earliest step train ``handle`` can reach its target within the step limit, by breadth-first
    search over every step (the plain time-expanded graph): from ``at`` = (cell, heading) at step t0, or
    off the map (entering its start cell at max(t0 + 1, its earliest step) or later); a state is kept
    only if ``book`` leaves its cell free at that step and a move swaps with nobody. None: unreachable."""
    target, limit = track.targets[handle], track.max_steps
    start, enter_from = track.starts[handle], max(t0 + 1, track.earliest[handle])
    layer = {at} if at is not None else set()
    for t in range(t0, limit + 1):
        if any(cell == target for cell, _ in layer):
            return t
        nxt = set()
        for cell, heading in layer:
            if book.free(cell, t + 1, handle):
                nxt.add((cell, heading))
            for way in ways(track.env, cell, heading):
                to = (cell[0] + STEPS[way][0], cell[1] + STEPS[way][1])
                if book.free(to, t + 1, handle) and not book.swap(cell, to, t, handle):
                    nxt.add((to, way))
        if at is None and t + 1 >= enter_from and book.free(start[0], t + 1, handle):
            nxt.add(start)
        layer = nxt
    return None
