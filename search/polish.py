"""A local-search polish of decoded TSP tours (2-opt), reported apart from the network's own tours.

``two_opt`` improves one closed tour on a distance matrix by best-improvement 2-opt moves (reverse
the segment between two edges when the two new edges are shorter) until none improves; each pass
evaluates every pair of edges at once with numpy. ``polish`` applies it to every tour of a
``search.solver.Solutions`` on the data's own distances (TSPLIB's rounding for TSPLIB files) and
returns new ``Solutions`` whose lengths the checker recomputes, so that both rows can be shown.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

EPS = 1e-9  # a move must shorten the tour by more than this


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


def polish(solutions, max_moves: int = 100_000):
    """``solutions`` (TSP) with every tour 2-opt polished on its instance's distances in reported
    units; lengths recomputed by the data's checker (``Dataset.reported_length``), ``seconds`` the
    polish's own time, ``decode`` named ``<decode> + 2-opt``."""
    start = time.perf_counter()
    tours, lengths = [], []
    for group, i, tour, _ in solutions.items():
        if group.problem != "tsp":
            raise ValueError(f"the 2-opt polish is for TSP tours, not {group.problem.upper()}")
        better = two_opt(group.distance_matrix(i), tour, max_moves)
        tours.append(better)
        lengths.append(group.reported_length(i, better))
    return replace(
        solutions,
        tours=tours,
        lengths=np.asarray(lengths, dtype=np.float64),
        seconds=time.perf_counter() - start,
        decode=f"{solutions.decode} + 2-opt",
    )
