"""A local-search polish of decoded solutions, reported apart from the network's own.

``two_opt`` improves one closed TSP tour on a distance matrix by best-improvement 2-opt moves
(reverse the segment between two edges when the two new edges are shorter) until none improves;
``or_opt`` moves a segment of one to three nodes to another edge, forwards or reversed;
``tsp_local_search`` alternates them to a local optimum of both. Each pass scores every move of
its kind at once with numpy. ``tsp_iterated_search`` repeats it from double-bridge kicks of the best
tour for a time budget. ``pyvrp_search`` improves a CVRP, VRP variant, multi-resource or
prize-collecting CVRP solution by PyVRP's local search (its operators on the granular
neighbourhood, run to a local optimum, with prohibitive penalties so that it stays feasible) on the
same PyVRP model the references use, or by its iterated local search (``pyvrp.solve``) for a time
budget. ``polish`` applies them to every solution of
a ``search.solver.Solutions`` and returns new ``Solutions`` whose costs the data's checker
recomputes (an infeasible or costlier result keeps the decoded solution), so that both rows can be
shown.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
from ppoor.checkers.tours import validate_tour, vrp_cost
from ppoor.solvers.references import depot_actions, pyvrp, pyvrp_model, vrp_actions

EPS = 1e-9  # a move must shorten the tour by more than this
POLISHED = ("tsp", "cvrp", "mtvrp", "mrcvrp", "pcvrp")  # the problems ``polish`` takes
PENALTY = 1e9  # PyVRP's cost of a unit of excess load, time warp or excess distance: never worth it
KICK_SPAN = 50  # a double-bridge kick cuts the tour within this many consecutive positions
PER_NODES = 200  # polish budgets are given in seconds per this many nodes
MAX_POLISH = 3600.0  # the longest budget per 200 nodes polish takes


def two_opt(dist: np.ndarray, tour: np.ndarray, max_moves: int = 100_000) -> np.ndarray:
    """A 2-opt local optimum reached from ``tour`` (a permutation of the n nodes, closed back to its
    first) on ``dist`` [n, n] (symmetric); at most ``max_moves`` moves. Never longer than ``tour``."""
    tour = np.asarray(tour, dtype=np.int64).copy()
    n = len(tour)
    if n < 4:
        return tour
    i_idx, j_idx = np.triu_indices(n, k=2)
    keep = ~((i_idx == 0) & (j_idx == n - 1))  # those two edges touch
    i_idx, j_idx = i_idx[keep], j_idx[keep]
    for _ in range(max_moves):
        a, b = tour, np.roll(tour, -1)  # edge k runs a[k] -> b[k]
        delta = (
            dist[a[i_idx], a[j_idx]] + dist[b[i_idx], b[j_idx]] - dist[a[i_idx], b[i_idx]] - dist[a[j_idx], b[j_idx]]
        )
        best = int(delta.argmin())
        if delta[best] >= -EPS:
            break
        i, j = i_idx[best], j_idx[best]
        tour[i + 1 : j + 1] = tour[i + 1 : j + 1][::-1]
    return tour


def or_opt(dist: np.ndarray, tour: np.ndarray, max_moves: int = 100_000, longest: int = 3) -> np.ndarray:
    """An or-opt local optimum reached from ``tour`` (a permutation of the n nodes, closed) on
    ``dist`` [n, n] (symmetric): best-improvement moves of a segment of 1..``longest`` consecutive
    nodes to another edge, forwards or reversed; every (segment, edge) pair of a length is scored at
    once with numpy. At most ``max_moves`` moves; never longer than ``tour``."""
    tour = np.asarray(tour, dtype=np.int64).copy()
    n = len(tour)
    positions = np.arange(n)
    for _ in range(max_moves):
        best = (-EPS, None)
        for size in range(1, min(longest, n - 3) + 1):
            first, last = tour, np.roll(tour, -(size - 1))  # segment i is tour[i .. i + size - 1]
            before, after = np.roll(tour, 1), np.roll(tour, -size)
            removed = dist[before, first] + dist[last, after] - dist[before, after]  # [n]: saved by taking it out
            a, b = tour, np.roll(tour, -1)  # edge j runs a[j] -> b[j]
            forwards = dist[a[None, :], first[:, None]] + dist[last[:, None], b[None, :]]
            backwards = dist[a[None, :], last[:, None]] + dist[first[:, None], b[None, :]]
            delta = np.minimum(forwards, backwards) - dist[a, b][None, :] - removed[:, None]  # [i, j]
            touching = (positions[None, :] - positions[:, None] + 1) % n <= size  # edges j = i-1 .. i+size-1
            delta[touching] = np.inf
            i, j = np.unravel_index(int(delta.argmin()), delta.shape)
            if delta[i, j] < best[0]:
                best = (delta[i, j], (size, i, j, backwards[i, j] < forwards[i, j]))
        if best[1] is None:
            break
        size, i, j, reverse = best[1]
        order = np.roll(tour, -i)  # the segment first, then the rest in tour order
        segment, rest = order[:size], order[size:].tolist()
        at = rest.index(int(tour[j])) + 1  # insert after a[j]
        tour = np.asarray(rest[:at] + (segment[::-1] if reverse else segment).tolist() + rest[at:], dtype=np.int64)
    return tour


def tsp_local_search(dist: np.ndarray, tour: np.ndarray, max_moves: int = 100_000) -> np.ndarray:
    """2-opt and or-opt in turn until neither shortens ``tour``: a local optimum of both."""
    def length(t):
        return float(dist[t, np.roll(t, -1)].sum())

    tour = np.asarray(tour, dtype=np.int64)
    while True:
        better = or_opt(dist, two_opt(dist, tour, max_moves), max_moves)
        if length(better) >= length(tour) - EPS:
            return better if length(better) <= length(tour) else tour
        tour = better


def double_bridge(tour: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``tour`` with three consecutive segments A B C, cut within ``KICK_SPAN`` positions from a random
    start, reordered A C B: the move 2-opt and or-opt cannot undo in one step."""
    n = len(tour)
    tour = np.roll(tour, -int(rng.integers(n)))
    a, b, c = np.sort(rng.choice(np.arange(1, min(n, KICK_SPAN)), size=3, replace=False))
    return np.concatenate([tour[:a], tour[b:c], tour[a:b], tour[c:]])


def tsp_iterated_search(
    dist: np.ndarray, tour: np.ndarray, seconds: float, rng: np.random.Generator, max_moves: int = 100_000
) -> np.ndarray:
    """Iterated local search: ``tsp_local_search`` from ``tour``, then from double-bridge kicks of the
    best tour found, keeping a kicked tour when it is shorter, until ``seconds`` have passed (the first
    local search always runs). Never longer than ``tour``."""
    deadline = time.perf_counter() + seconds

    def length(t):
        return float(dist[t, np.roll(t, -1)].sum())

    best = tsp_local_search(dist, tour, max_moves)
    best_length = length(best)
    while len(best) >= 8 and time.perf_counter() < deadline:
        candidate = tsp_local_search(dist, double_bridge(best, rng), max_moves)
        if (candidate_length := length(candidate)) < best_length - EPS:
            best, best_length = candidate, candidate_length
    return best


def routes_of(tour: np.ndarray, k: int) -> list[tuple[int, list[int]]]:
    """The routes of ``tour`` (actions: depots 0..k-1, customers from k; a depot action after
    customers ends a route, one before any starts the next route there): (depot, customers)."""
    routes, depot, current = [], 0, []
    for action in np.asarray(tour).tolist():
        if action >= k:
            current.append(action)
        elif current:
            routes.append((depot, current))
            current = []
        else:
            depot = action
    if current:
        routes.append((depot, current))
    return routes


def pyvrp_search(dataset, index: int, tour: np.ndarray, seed: int = 0, seconds: float | None = None) -> np.ndarray:
    """PyVRP from ``tour`` (actions) of instance ``index`` of ``dataset`` (CVRP, a VRP variant, MRCVRP or
    PCVRP) on the model the references use: without ``seconds`` its local search to a local optimum of
    all its operators (prohibitive penalties keep it feasible), with them its iterated local search
    (``pyvrp.solve``) within ``seconds`` counted from the call (building the model included). The actions
    of the result, or ``tour`` itself where the result is not feasible."""
    deadline = None if seconds is None else time.perf_counter() + seconds
    vrp = pyvrp()
    model, k = pyvrp_model(dataset, index, search=True)
    data = model.data()
    client = vrp.ActivityType.CLIENT
    routes = [vrp.Route(data, [vrp.Activity(client, c - k) for c in customers], depot)
              for depot, customers in routes_of(tour, k)]  # fmt: skip
    start = vrp.Solution(data, routes)
    if deadline is None:
        search = vrp.search.LocalSearch(data, vrp.RandomNumberGenerator(seed=seed), vrp.search.compute_neighbours(data))
        for operator in vrp.search.OPERATORS:
            search.add_operator(operator(data))
        penalties = vrp.CostEvaluator([PENALTY] * data.num_load_dimensions, PENALTY, PENALTY)
        better = search(start, penalties, exhaustive=True)
    else:
        from pyvrp.stop import MaxRuntime

        left = max(deadline - time.perf_counter(), 1e-3)
        better = vrp.solve(data, MaxRuntime(left), seed=seed, display=False, initial_solution=start).best
    if not better.is_feasible():
        return np.asarray(tour)
    return vrp_actions(better, k) if dataset.problem == "mtvrp" else depot_actions(better)


def polish(solutions, seconds: float | None = None, seed: int = 0, max_moves: int = 100_000):
    """``solutions`` with every solution polished. Without ``seconds``: to a local optimum, TSP tours by
    2-opt and or-opt (``tsp_local_search``, at most ``max_moves`` moves per pass) on the instance's
    distances in reported units, the others by ``pyvrp_search``. With ``seconds`` (per 200 nodes, so an
    instance of n nodes gets seconds x n / 200): iterated local search from each solution
    (``tsp_iterated_search``, ``pyvrp_search``; seeded by ``seed``). Costs are recomputed by the
    data's checker (``Dataset.reported_length``; a CVRP solution is validated first), and a polished
    solution that is not cheaper keeps the decoded one; the result's ``seconds`` is the polish's own
    time, ``decode`` named ``<decode> + 2-opt + or-opt`` or ``<decode> + local search`` (``+ ILS <s>
    s/200 nodes`` with a budget)."""
    if seconds is not None and not (isinstance(seconds, int | float) and 0 < seconds <= MAX_POLISH):
        raise ValueError(f"the polish's seconds per {PER_NODES} nodes must be in (0, {MAX_POLISH:g}], got {seconds!r}")
    start = time.perf_counter()
    rng = np.random.default_rng(seed)
    tours, lengths = [], []
    for group, i, tour, length in solutions.items():
        budget = None if seconds is None else seconds * group.num_nodes / PER_NODES
        if group.problem == "tsp" and budget is None:
            better = tsp_local_search(group.distance_matrix(i), tour, max_moves)
        elif group.problem == "tsp":
            better = tsp_iterated_search(group.distance_matrix(i), tour, budget, rng, max_moves)
        else:
            better = pyvrp_search(group, i, tour, seed, budget)
            if group.problem == "cvrp":  # (the cost of the other problems validates the solution)
                validate_tour("cvrp", better, group.num_nodes, group.instances["demand"][i])
            elif group.problem == "mtvrp" and group.rounding != "exact":  # a file's cost is its length alone:
                vrp_cost({key: value[i] for key, value in group.instances.items()}, better)  # check it here
        cost = group.reported_length(i, better)
        keep = group.problem != "tsp" and cost >= length
        tours.append(tour if keep else better)
        lengths.append(length if keep else cost)
    name = "2-opt + or-opt" if all(group.problem == "tsp" for group in solutions.groups) else "local search"
    name += "" if seconds is None else f" ILS {seconds:g} s/{PER_NODES} nodes"
    return replace(
        solutions,
        tours=tours,
        lengths=np.asarray(lengths, dtype=np.float64),
        seconds=time.perf_counter() - start,
        decode=f"{solutions.decode} + {name}",
    )
