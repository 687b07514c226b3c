"""Solution checks independent of the environments: validity and length of a tour."""

from __future__ import annotations

import numpy as np

CAPACITY_TOLERANCE = 1e-5
TIME_TOLERANCE = 1e-4  # the envs test times and lengths in float32


class InvalidTourError(ValueError):
    """A decoded tour that is not a feasible solution."""


ROUNDINGS = ("exact", "nearest", "ceil", "att", "geo", "tenth-down")
"""How an edge's length is reported: exact Euclidean; TSPLIB's distance functions of its symmetric
instances (EUC_2D: the Euclidean distance rounded to the nearest integer, also CVRPLIB's; CEIL_2D:
rounded up; ATT: the pseudo-Euclidean distance; GEO: the distance on the earth of coordinates in
degrees.minutes); truncated to one decimal (the DIMACS / CVRPLIB rule of the Solomon best-known
solutions)."""
INTEGER_ROUNDINGS = ("nearest", "ceil", "att", "geo")
EDGE_WEIGHT_TYPES = {"EUC_2D": "nearest", "CEIL_2D": "ceil", "ATT": "att", "GEO": "geo"}
"""TSPLIB's EDGE_WEIGHT_TYPE of coordinate instances -> the rounding that computes it."""
GEO_PI, GEO_RADIUS = 3.141592, 6378.388  # TSPLIB's constants for GEO


def round_lengths(lengths: np.ndarray, rounding: str) -> np.ndarray:
    """Euclidean ``lengths`` rounded by a Euclidean rule (exact, nearest, ceil, tenth-down)."""
    if rounding == "nearest":
        return np.floor(lengths + 0.5)  # TSPLIB's nint
    if rounding == "ceil":
        return np.ceil(lengths)
    if rounding == "tenth-down":
        return np.floor(10 * lengths + 1e-9) / 10
    return lengths


def geo_radians(points: np.ndarray) -> np.ndarray:
    """TSPLIB's GEO coordinates (degrees.minutes: 16.47 is 16 degrees 47 minutes) [..., 2] in radians."""
    degrees = np.trunc(points)
    return GEO_PI * (degrees + 5.0 * (points - degrees) / 3.0) / 180.0


def edge_lengths(start: np.ndarray, end: np.ndarray, rounding: str = "exact") -> np.ndarray:
    """Lengths of the edges from ``start`` [..., 2] to ``end`` [..., 2] (broadcast) by ``rounding``
    (``ROUNDINGS``), as TSPLIB's distance functions define them for ATT and GEO."""
    if rounding == "geo":
        (lat_a, lon_a), (lat_b, lon_b) = np.moveaxis(geo_radians(start), -1, 0), np.moveaxis(geo_radians(end), -1, 0)
        q1, q2, q3 = np.cos(lon_a - lon_b), np.cos(lat_a - lat_b), np.cos(lat_a + lat_b)
        return np.floor(GEO_RADIUS * np.arccos(np.clip(0.5 * ((1 + q1) * q2 - (1 - q1) * q3), -1, 1)) + 1.0)
    squared = ((end - start) ** 2).sum(-1)
    if rounding == "att":
        r = np.sqrt(squared / 10.0)
        t = np.floor(r + 0.5)
        return np.where(t < r, t + 1, t)
    return round_lengths(np.sqrt(squared), rounding)


def distance_matrix(points: np.ndarray, rounding: str = "exact") -> np.ndarray:
    """Distances [A, A] between ``points`` [A, 2] by ``rounding``; 0 on the diagonal (GEO's formula
    gives 1 there)."""
    dist = edge_lengths(points[:, None], points[None], rounding)
    np.fill_diagonal(dist, 0.0)
    return dist


def tour_length(
    points: np.ndarray, tour: np.ndarray, closed: bool, rounding: str = "exact", free_returns: bool = False
) -> float:
    """Length of visiting ``points`` [A, 2] in the order ``tour``; ``closed`` adds the return from
    the last node to the first; ``rounding`` (``ROUNDINGS``) is each edge's distance function;
    ``free_returns``: edges into node 0 (the depot of an open-route VRP) cost nothing."""
    tour = np.asarray(tour)
    path = points[tour]
    if closed:
        path = np.concatenate([path, path[:1]])
    edges = edge_lengths(path[:-1], path[1:], rounding)
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


def vrp_routes(tour: np.ndarray, num_depots: int, num_nodes: int) -> list[tuple[int, list[int]]]:
    """Splits a multi-task VRP ``tour`` (actions 0..k-1 the depots, k.. the customers; from depot 0)
    into its routes (depot, customers). A depot action at a depot moves there before a route; after
    a customer it is the return and must be the route's own depot. Raises ``InvalidTourError`` unless
    every customer is served exactly once, the tour ends at a depot and no route is empty."""
    k, tour = num_depots, [int(a) for a in np.asarray(tour).reshape(-1)]
    if not np.array_equal(np.sort([a for a in tour if a >= k]), np.arange(k, k + num_nodes)):
        raise InvalidTourError(f"VRP tour does not serve each of the {num_nodes} customers exactly once")
    if not tour or tour[-1] >= k or min(tour) < 0:
        raise InvalidTourError("VRP tour does not end at a depot")
    routes, depot, here, customers = [], 0, 0, []
    for node in tour:
        if node >= k:
            customers.append(node)
        elif customers:
            if node != depot:
                raise InvalidTourError(f"VRP route {[depot, *customers]} from depot {depot} ends at depot {node}")
            routes.append((depot, customers))
            customers = []
        elif node == here:
            raise InvalidTourError(f"VRP tour has an empty route (depot {node} twice in a row)")
        else:
            depot = node
        here = node
    return routes


def vrp_cost(instance: dict, tour: np.ndarray, tolerance: float = TIME_TOLERANCE) -> float:
    """Checks a multi-task VRP solution and returns its cost (unit-square Euclidean; the returns to
    the depot free on open routes). Raises ``InvalidTourError`` unless it is feasible.

    ``instance``: one instance's arrays as in ``envs.vrp.STATIC_KEYS`` (no instance axis; a single
    ``depot`` [2] is read as one depot); ``tour``: as ``vrp_routes`` reads it. Checked per route,
    from the definitions: the load on board (the route's deliveries from the start, less those made,
    plus the pickups made) within capacity (1) after every stop; with ``backhaul_class`` 1 (or none
    given) no linehaul after a backhaul; service starting within each window (waiting allowed; a
    route starts at its depot's opening); the return by the depot's closing and the route length
    (return included) within the limit, both unless the route is open.
    """
    depots = np.asarray(instance["depots"] if "depots" in instance else np.asarray(instance["depot"])[None])
    coords = np.asarray(instance["coords"])
    k, n = len(depots), len(coords)
    points = np.concatenate([depots, coords])
    linehaul = np.concatenate([np.zeros(k), instance["demand_linehaul"]])
    backhaul = np.concatenate([np.zeros(k), instance["demand_backhaul"]])
    classic = float(instance.get("backhaul_class", 1)) == 1
    windows, service = np.asarray(instance["time_windows"]), np.asarray(instance["service_time"])
    is_open, limit = bool(instance["open_route"]), float(instance["distance_limit"])
    cost = 0.0
    for depot, customers in vrp_routes(tour, k, n):
        route = [depot, *customers]
        load = float(linehaul[customers].sum())
        time, length, picked = float(windows[depot, 0]), 0.0, False
        if load > 1 + max(tolerance, CAPACITY_TOLERANCE):
            raise InvalidTourError(f"VRP route {route} leaves with more than the vehicle capacity ({load:.4f} of 1)")
        for a, b in zip(route[:-1], customers, strict=True):
            step = float(np.hypot(*(points[b] - points[a])))
            cost += step
            length += step
            if classic and picked and linehaul[b] > 0:
                raise InvalidTourError(f"VRP route {route} serves linehaul customer {b} after a backhaul")
            picked |= backhaul[b] > 0
            load += float(backhaul[b] - linehaul[b])
            if load > 1 + max(tolerance, CAPACITY_TOLERANCE):
                raise InvalidTourError(f"VRP route {route} exceeds the vehicle capacity after {b} ({load:.4f} of 1)")
            if time + step > windows[b, 1] + tolerance:
                raise InvalidTourError(f"VRP route {route} reaches customer {b} after its window closes")
            time = max(time + step, float(windows[b, 0])) + float(service[b])
        if not is_open:  # the return: free and unchecked on an open route
            step = float(np.hypot(*(points[depot] - points[customers[-1]])))
            cost += step
            length += step
            if time + step > windows[depot, 1] + tolerance:
                raise InvalidTourError(f"VRP route {route} returns to depot {depot} after it closes")
        if length > limit + tolerance:
            raise InvalidTourError(f"VRP route {route} is longer ({length:.4f}) than the distance limit {limit:g}")
    return cost


def depot_points(instance: dict) -> np.ndarray:
    """The depot and the customers' coordinates [n + 1, 2] of one instance, indexed by action."""
    return np.concatenate([np.asarray(instance["depot"])[None], instance["coords"]])


def routes_length(instance: dict, tour: np.ndarray) -> float:
    """Euclidean length of ``tour`` (actions 0 = depot .. n, the depot start implied)."""
    return tour_length(depot_points(instance), np.concatenate([[0], tour]), closed=False)


def _visits(kind: str, tour: np.ndarray, num_nodes: int) -> np.ndarray:
    """The customers of ``tour`` (actions 0 = depot .. n, ending at the depot), each at most once."""
    tour = np.asarray(tour)
    if tour.size == 0 or tour[-1] != 0:
        raise InvalidTourError(f"{kind} tour does not end at the depot")
    served = tour[tour != 0]
    if served.size and (served.min() < 1 or served.max() > num_nodes):
        raise InvalidTourError(f"{kind} tour visits a node outside 1..{num_nodes}")
    if len(np.unique(served)) != len(served):
        raise InvalidTourError(f"{kind} tour visits a customer twice")
    return served


def mrcvrp_cost(instance: dict, tour: np.ndarray) -> float:
    """Checks a multi-resource CVRP solution (``envs.mrcvrp``: every customer once, each route's load
    within capacity in every dimension) and returns its length."""
    tour = np.asarray(tour)
    check_routes("MRCVRP", tour, len(instance["coords"]))
    demand = np.asarray(instance["demand"])
    for route in np.split(tour, np.flatnonzero(tour == 0)[:-1] + 1):
        load = demand[route[route != 0] - 1].sum(0)
        if (load > 1 + CAPACITY_TOLERANCE).any():
            raise InvalidTourError(
                f"MRCVRP route {route.tolist()} exceeds a capacity (loads {np.round(load, 4).tolist()})"
            )
    return routes_length(instance, tour)


def pdp_cost(instance: dict, tour: np.ndarray) -> float:
    """Checks a pickup-and-delivery solution (``envs.pdp``: one route visiting every node once, the
    delivery i + n/2 after its pickup i, the load on board within capacity) and returns its length."""
    tour = np.asarray(tour)
    n = len(instance["coords"])
    served = _visits("PDP", tour, n)
    if len(tour) != n + 1 or len(served) != n:
        raise InvalidTourError(f"PDP tour does not visit each of the {n} nodes exactly once in one route")
    position = np.empty(n + 1, dtype=np.int64)
    position[served] = np.arange(n)
    half = n // 2
    late = position[1 : half + 1] > position[half + 1 :]
    if late.any():
        raise InvalidTourError(f"PDP tour delivers pair {int(np.argmax(late)) + 1} before picking it up")
    load = np.asarray(instance["load"])
    on_board = np.cumsum(np.where(served <= half, load[(served - 1) % half], -load[(served - 1) % half]))
    if on_board.size and on_board.max() > 1 + CAPACITY_TOLERANCE:
        raise InvalidTourError(f"PDP tour carries {on_board.max():.4f} of the capacity at once")
    return routes_length(instance, tour)


def op_cost(instance: dict, tour: np.ndarray) -> float:
    """Checks an orienteering solution (``envs.prize``: one tour from the depot, each customer at most
    once, length within ``max_length``) and returns its cost: minus the collected prize."""
    served = _visits("OP", tour, len(instance["coords"]))
    if len(served) != len(tour) - 1:
        raise InvalidTourError("OP solution is not a single tour")
    length = routes_length(instance, tour)
    if length > float(instance["max_length"]) + TIME_TOLERANCE:
        raise InvalidTourError(f"OP tour is longer ({length:.4f}) than the limit {float(instance['max_length']):g}")
    return -float(np.asarray(instance["prize"])[served - 1].sum())


def pctsp_cost(instance: dict, tour: np.ndarray, min_prize: float = 1.0) -> float:
    """Checks a prize-collecting TSP solution (``envs.prize``: one tour from the depot, each customer
    at most once, at least ``min_prize`` collected unless every customer is visited) and returns its
    cost: length + penalties of the skipped customers."""
    n = len(instance["coords"])
    served = _visits("PCTSP", tour, n)
    if len(served) != len(tour) - 1 or len(served) == 0:
        raise InvalidTourError("PCTSP solution is not a single tour through at least one customer")
    prize = np.asarray(instance["prize"])
    if prize[served - 1].sum() < min_prize - CAPACITY_TOLERANCE and len(served) < n:
        raise InvalidTourError(f"PCTSP tour collects {prize[served - 1].sum():.4f}, below the minimum {min_prize:g}")
    skipped = np.setdiff1d(np.arange(1, n + 1), served)
    length = routes_length(instance, tour)
    return length + float(np.asarray(instance["penalty"])[skipped - 1].sum())


def pcvrp_cost(instance: dict, tour: np.ndarray) -> float:
    """Checks a prize-collecting CVRP solution (``envs.prize``: routes from the depot, each customer at
    most once, each route's load within capacity; a final extra depot action closes the episode) and
    returns its cost: length + prizes of the customers not visited (PyVRP's objective)."""
    tour = np.asarray(tour)
    n = len(instance["coords"])
    served = _visits("PCVRP", tour, n)
    routes = tour[:-1] if len(tour) > 1 and tour[-1] == 0 and tour[-2] == 0 else tour  # the closing action
    if len(routes) > 1 and np.any((routes[1:] == 0) & (routes[:-1] == 0)):
        raise InvalidTourError("PCVRP tour has an empty route (the depot twice in a row)")
    demand = np.asarray(instance["demand"])
    for route in np.split(routes, np.flatnonzero(routes == 0)[:-1] + 1):
        if demand[route[route != 0] - 1].sum() > 1 + CAPACITY_TOLERANCE:
            raise InvalidTourError(f"PCVRP route {route.tolist()} exceeds the vehicle capacity")
    skipped = np.setdiff1d(np.arange(1, n + 1), served)
    length = routes_length(instance, tour)
    return length + float(np.asarray(instance["prize"])[skipped - 1].sum())


COSTS = {
    "mtvrp": vrp_cost,
    "mrcvrp": mrcvrp_cost,
    "pdp": pdp_cost,
    "op": op_cost,
    "pctsp": pctsp_cost,
    "pcvrp": pcvrp_cost,
}
"""problem -> cost(instance arrays without the instance axis, tour): checks the solution, returns its
cost (what the env's summed rewards are minus)."""


COST_NAMES = {"op": "mean -prize", "pctsp": "mean cost", "pcvrp": "mean cost"}
"""The column of the mean cost where it is not a length: minus the collected prize (OP), length +
penalties of skipped customers (PCTSP), length + uncollected prizes (PCVRP)."""
