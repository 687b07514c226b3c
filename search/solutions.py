"""Solution checks independent of the environments: validity and length of a tour."""

from __future__ import annotations

import numpy as np

CAPACITY_TOLERANCE = 1e-5
TIME_TOLERANCE = 1e-4  # the envs test times and lengths in float32


class InvalidTourError(ValueError):
    """A decoded tour that is not a feasible solution."""


ROUNDINGS = ("exact", "nearest", "tenth-down")
"""How an edge's length is reported: exact Euclidean; rounded to the nearest integer (TSPLIB's
EUC_2D rule, TSPLIB and CVRPLIB); truncated to one decimal (the DIMACS / CVRPLIB rule of the Solomon
best-known solutions)."""


def round_lengths(lengths: np.ndarray, rounding: str) -> np.ndarray:
    if rounding == "nearest":
        return np.rint(lengths)
    if rounding == "tenth-down":
        return np.floor(10 * lengths + 1e-9) / 10
    return lengths


def tour_length(
    points: np.ndarray, tour: np.ndarray, closed: bool, rounding: str = "exact", free_returns: bool = False
) -> float:
    """Euclidean length of visiting ``points`` [A, 2] in the order ``tour``; ``closed`` adds the
    return from the last node to the first; ``rounding`` (``ROUNDINGS``) rounds each edge;
    ``free_returns``: edges into node 0 (the depot of an open-route VRP) cost nothing."""
    tour = np.asarray(tour)
    path = points[tour]
    if closed:
        path = np.concatenate([path, path[:1]])
    edges = round_lengths(np.sqrt(((path[1:] - path[:-1]) ** 2).sum(-1)), rounding)
    if free_returns:
        edges = np.where(tour[1:] == 0, 0.0, edges)
    return float(edges.sum())


def check_routes(kind: str, tour: np.ndarray, num_nodes: int) -> None:
    """The checks every depot problem shares: ``tour`` (actions 0 = depot .. n, the depot start
    implied) ends at the depot, serves each of the ``num_nodes`` customers exactly once and has no
    empty route. ``kind`` names the problem in the message."""
    if tour.size == 0 or tour[-1] != 0:
        raise InvalidTourError(f"{kind} tour does not end at the depot")
    if not np.array_equal(np.sort(tour[tour != 0]), np.arange(1, num_nodes + 1)):
        raise InvalidTourError(f"{kind} tour does not serve each of the {num_nodes} customers exactly once")
    if np.any((tour[1:] == 0) & (tour[:-1] == 0)):
        raise InvalidTourError(f"{kind} tour has an empty route (the depot twice in a row)")


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
    check_routes("CVRP", tour, num_nodes)
    load = 0.0
    for node in tour:
        load = 0.0 if node == 0 else load + demand[node - 1]
        if load > 1 + CAPACITY_TOLERANCE:
            raise InvalidTourError(f"CVRP route exceeds the vehicle capacity ({load:.4f} of 1)")


def vrp_cost(instance: dict, tour: np.ndarray) -> float:
    """Checks a multi-task VRP solution and returns its cost (unit-square Euclidean; the returns to
    the depot free on open routes). Raises ``InvalidTourError`` unless it is feasible.

    ``instance``: one instance's arrays as in ``envs.vrp.STATIC_KEYS`` (no instance axis);
    ``tour``: actions 0 (depot) .. n starting at the first route (the depot start implied) and ending
    at the depot, each customer exactly once, no empty route. Checked per route: linehaul and
    backhaul loads within capacity (1), no linehaul after a backhaul, service starting within each
    window (waiting allowed; a route starts at the depot's opening), the return within the depot's
    closing and the route length (return included) within the limit, both unless the route is open.
    """
    tour = np.asarray(tour)
    check_routes("VRP", tour, len(instance["coords"]))
    points = np.concatenate([np.asarray(instance["depot"])[None], instance["coords"]])
    linehaul = np.concatenate([[0.0], instance["demand_linehaul"]])
    backhaul = np.concatenate([[0.0], instance["demand_backhaul"]])
    windows, service = instance["time_windows"], instance["service_time"]
    is_open, limit = bool(instance["open_route"]), float(instance["distance_limit"])
    cost = 0.0
    for route in np.split(tour, np.flatnonzero(tour == 0)[:-1] + 1):  # each ends at the depot
        stops = [0, *route.tolist()]
        loads, time, length, picked = [0.0, 0.0], float(windows[0, 0]), 0.0, False
        for a, b in zip(stops[:-1], stops[1:], strict=True):
            step = float(np.hypot(*(points[b] - points[a])))
            if b == 0:  # the return: free and unchecked on an open route
                if not is_open:
                    cost += step
                    length += step
                    if time + step > windows[0, 1] + TIME_TOLERANCE:
                        raise InvalidTourError(f"VRP route {stops} returns to the depot after it closes")
                continue
            cost += step
            length += step
            if backhaul[b] > 0:
                picked = True
                loads[1] += backhaul[b]
            elif picked:
                raise InvalidTourError(f"VRP route {stops} serves linehaul customer {b} after a backhaul")
            else:
                loads[0] += linehaul[b]
            if max(loads) > 1 + CAPACITY_TOLERANCE:
                raise InvalidTourError(f"VRP route {stops} exceeds the vehicle capacity ({max(loads):.4f} of 1)")
            if time + step > windows[b, 1] + TIME_TOLERANCE:
                raise InvalidTourError(f"VRP route {stops} reaches customer {b} after its window closes")
            time = max(time + step, float(windows[b, 0])) + float(service[b])
        if length > limit + TIME_TOLERANCE:
            raise InvalidTourError(f"VRP route {stops} is longer ({length:.4f}) than the distance limit {limit:g}")
    return cost
