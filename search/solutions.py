"""Solution checks independent of the environments: validity and length of a tour."""

from __future__ import annotations

import numpy as np

CAPACITY_TOLERANCE = 1e-5


class InvalidTourError(ValueError):
    """A decoded tour that is not a feasible solution."""


def tour_length(points: np.ndarray, tour: np.ndarray, closed: bool, rounded: bool = False) -> float:
    """Euclidean length of visiting ``points`` [A, 2] in the order ``tour``; ``closed`` adds the
    return from the last node to the first; ``rounded`` rounds each edge to the nearest integer
    (TSPLIB's EUC_2D rule)."""
    path = points[np.asarray(tour)]
    if closed:
        path = np.concatenate([path, path[:1]])
    edges = np.sqrt(((path[1:] - path[:-1]) ** 2).sum(-1))
    return float((np.rint(edges) if rounded else edges).sum())


def validate_tour(problem: str, tour: np.ndarray, num_nodes: int, demand: np.ndarray | None = None) -> None:
    """Raises ``InvalidTourError`` unless ``tour`` is feasible.

    TSP: a permutation of 0..n-1 (the closing return is implied). CVRP: actions 0 (depot) ..n,
    starting at the first route (the depot start is implied) and ending at the depot, every
    customer exactly once, and the demand (fractions of capacity, [n]) of each route at most 1.
    """
    tour = np.asarray(tour)
    if problem == "tsp":
        if tour.shape != (num_nodes,) or not np.array_equal(np.sort(tour), np.arange(num_nodes)):
            raise InvalidTourError(f"TSP tour is not a permutation of the {num_nodes} nodes: {tour.tolist()}")
        return
    if tour.size == 0 or tour[-1] != 0:
        raise InvalidTourError("CVRP tour does not end at the depot")
    customers = tour[tour != 0]
    if not np.array_equal(np.sort(customers), np.arange(1, num_nodes + 1)):
        raise InvalidTourError(f"CVRP tour does not serve each of the {num_nodes} customers exactly once")
    if np.any((tour[1:] == 0) & (tour[:-1] == 0)):
        raise InvalidTourError("CVRP tour has an empty route (the depot twice in a row)")
    load = 0.0
    for node in tour:
        load = 0.0 if node == 0 else load + demand[node - 1]
        if load > 1 + CAPACITY_TOLERANCE:
            raise InvalidTourError(f"CVRP route exceeds the vehicle capacity ({load:.4f} of 1)")
