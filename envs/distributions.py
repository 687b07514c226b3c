"""Instance distributions for training models that hold up on files unlike Kool et al.'s uniform data.

``draw(problem, rng, count, num_nodes, distribution)`` returns static arrays in the layout of
``envs.instances`` (coordinates in the unit square, CVRP demands divided by the capacity):

- ``uniform``: Kool et al.'s distribution (``envs.instances.random_instances``), unchanged.
- ``clustered``: the nodes around 3-8 Gaussian centres (standard deviation 0.03-0.10 of the
  square), each instance then stretched to fill the unit square along its longer side, as files are
  read (``data.datasets.unit_square``); CVRP keeps Kool's demands and capacities.
- ``mixed``: per instance, uniform, clustered or half of each (the rest uniform), stretched alike.
- ``x`` (CVRP): the families of Uchoa et al.'s X generator (2017), on their 1000 x 1000 grid:
  the depot in the centre, a corner or at random; the customers at random, around 3-8 seeds (a
  customer's density falls as exp(-d / 40) from a seed: its distance from it is Gamma(2, 40)) or half
  each; one of seven demand laws (unit; U[1,10]; U[5,10]; U[1,100]; U[50,100]; U[1,50] in two
  opposite quadrants of the depot and U[51,100] in the others; 70-95% of the customers U[1,10] and
  the rest U[50,100]); an average route size r drawn from 3-25 customers, which sets the capacity to
  ceil(r x mean demand). The points are then stretched into the unit square.

- ``solomon`` (the VRP env's ``vrptw`` variant): instances like Solomon's VRPTW benchmark, on its
  100 x 100 grid: customers at random (R), in 6-12 tight clusters (C) or half each (RC), the depot
  near the middle; one of two horizons (type 1: short, capacity 200; type 2: long, capacity
  700-1000), both as Solomon's classes have them (R 230 / 1000, C 1236 / 3390, RC 240 / 960, within
  10%); service 10 (R, RC) or 90 (C); 25-100% of the customers with a window whose width is drawn
  around a per-instance scale from the class's range; the window's centre, as Solomon made them,
  at random between the earliest arrival from the depot and the last start that returns in time
  (R, RC), or at the customer's arrival in a cluster-by-cluster routing (C: ``cluster_routes``;
  the best known routes of Solomon's C files arrive within a sixth of a width of the centres);
  demands 1-41 (R, RC) or 10-50 in tens (C). Coordinates and times are
  divided by the points' span, demands by the capacity, as Solomon files are read
  (``data.datasets.load_solomon``).

``random_size(rng, low, high)`` draws an instance size for a rollout; both are seeded by the env's
generator, so a run is reproducible.
"""

from __future__ import annotations

import numpy as np
from ppoor.envs.instances import cvrp_capacity, random_instances

DISTRIBUTIONS = {
    "tsp": ("uniform", "clustered", "mixed"),
    "cvrp": ("uniform", "clustered", "mixed", "x"),
    "mtvrp": ("uniform", "solomon"),
}
"""The distributions each problem's env can draw (the others draw only their own; the VRP's solomon only
for its vrptw variant, ``env_distributions``)."""
CENTRES = (3, 8)  # Gaussian centres (clustered) and X seeds per instance, inclusive
SPREAD = (0.03, 0.10)  # the clusters' standard deviation, in units of the square
GRID = 1000.0  # the X generator's grid
SEED_DECAY = 40.0  # X: a clustered customer's density falls as exp(-d / 40) from its seed
ROUTE_SIZE = (3, 25)  # X: average customers per route, which sets the capacity
DEMAND_LAWS = 7


def env_distributions(problem: str, variant: str | None = None) -> tuple[str, ...]:
    """The distributions the env of ``problem`` (of the VRP's ``variant``) draws."""
    if problem == "mtvrp" and variant != "vrptw":
        return ("uniform",)
    return DISTRIBUTIONS.get(problem, ("uniform",))


def draw(problem: str, rng: np.random.Generator, count: int, num_nodes: int, distribution: str = "uniform") -> dict:
    """``count`` instances of ``num_nodes`` nodes (TSP) or customers (CVRP) of ``distribution``."""
    if distribution not in (known := DISTRIBUTIONS.get(problem, ("uniform",))):
        raise ValueError(f"{problem} instances can be drawn from {', '.join(known)}, not {distribution!r}")
    if distribution == "uniform" and problem == "mtvrp":
        raise ValueError("the VRP env draws its uniform instances itself (envs.vrp.vrp_instances)")
    if distribution == "uniform":
        return random_instances(problem, rng, count, num_nodes)
    if distribution == "x":
        return x_instances(rng, count, num_nodes)
    if distribution == "solomon":
        return solomon_instances(rng, count, num_nodes)
    nodes = num_nodes + (problem == "cvrp")  # the depot is placed like a customer
    if distribution == "clustered":
        share = np.ones(count)
    else:  # mixed: uniform, clustered or half and half, a third of the instances each
        share = rng.choice([0.0, 1.0, 0.5], size=count)
    points = stretch(clustered_points(rng, count, nodes, share))
    if problem == "tsp":
        return {"coords": points}
    demand = rng.integers(1, 10, size=(count, num_nodes))
    return {"depot": points[:, 0], "coords": points[:, 1:], "demand": demand / cvrp_capacity(num_nodes)}


def clustered_points(rng: np.random.Generator, count: int, nodes: int, share: np.ndarray) -> np.ndarray:
    """[count, nodes, 2] points in the unit square: a ``share`` [count] of each instance's points
    (rounded down) around its Gaussian centres, clipped to the square, the rest uniform; in random order."""
    centres = rng.integers(CENTRES[0], CENTRES[1] + 1, size=count)
    means = rng.uniform(0.1, 0.9, size=(count, CENTRES[1], 2))
    spread = rng.uniform(*SPREAD, size=(count, CENTRES[1], 1))
    which = (rng.random((count, nodes)) * centres[:, None]).astype(np.int64)  # [count, nodes]
    rows = np.arange(count)[:, None]
    gaussian = means[rows, which] + spread[rows, which] * rng.standard_normal((count, nodes, 2))
    uniform = rng.uniform(size=(count, nodes, 2))
    clustered = np.arange(nodes)[None, :] < np.floor(share * nodes)[:, None]
    points = np.where(clustered[..., None], np.clip(gaussian, 0.0, 1.0), uniform)
    return np.take_along_axis(points, rng.permuted(np.tile(np.arange(nodes), (count, 1)), axis=1)[..., None], 1)


def stretch(points: np.ndarray) -> np.ndarray:
    """[count, A, 2] points shifted to the origin and divided by their larger side, per instance: the
    normalisation files get when read (``data.datasets.unit_square``)."""
    low = points.min(axis=1, keepdims=True)
    span = (points.max(axis=1, keepdims=True) - low).max(axis=2, keepdims=True)
    return np.clip((points - low) / np.where(span > 0, span, 1.0), 0.0, 1.0)


def x_instances(rng: np.random.Generator, count: int, num_customers: int) -> dict:
    """``count`` CVRP instances of the X generator's families (see the module's docstring)."""
    n = num_customers
    rows = np.arange(count)[:, None]
    # the depot: 0 centre, 1 corner, 2 random
    depot_kind = rng.integers(0, 3, size=count)
    depot = np.where(
        (depot_kind == 0)[:, None], GRID / 2, np.where((depot_kind == 1)[:, None], 0.0, rng.uniform(0, GRID, (count, 2)))
    )
    # the customers: 0 random, 1 clustered, 2 half each
    kind = rng.integers(0, 3, size=count)
    seeds = rng.uniform(0, GRID, size=(count, CENTRES[1], 2))
    num_seeds = rng.integers(CENTRES[0], CENTRES[1] + 1, size=count)
    which = (rng.random((count, n)) * num_seeds[:, None]).astype(np.int64)
    angle = rng.uniform(0, 2 * np.pi, size=(count, n))
    radius = rng.gamma(2.0, SEED_DECAY, size=(count, n))
    around = seeds[rows, which] + radius[..., None] * np.stack([np.cos(angle), np.sin(angle)], axis=-1)
    clustered = (kind[:, None] == 1) | ((kind[:, None] == 2) & (np.arange(n)[None, :] < n // 2))
    coords = np.where(clustered[..., None], np.clip(around, 0.0, GRID), rng.uniform(0, GRID, (count, n, 2)))
    demand = x_demands(rng, coords, depot)
    route_size = rng.uniform(*ROUTE_SIZE, size=count)
    capacity = np.maximum(np.ceil(route_size * demand.mean(axis=1)), demand.max(axis=1))
    points = stretch(np.concatenate([depot[:, None], coords], axis=1) / GRID)
    return {"depot": points[:, 0], "coords": points[:, 1:], "demand": demand / capacity[:, None]}


def x_demands(rng: np.random.Generator, coords: np.ndarray, depot: np.ndarray) -> np.ndarray:
    """Integer demands [count, n] of the X generator, one of its seven laws drawn per instance."""
    count, n, _ = coords.shape
    law = rng.integers(0, DEMAND_LAWS, size=count)[:, None]
    low = np.select([law == 0, law == 1, law == 2, law == 3, law == 4], [1, 1, 5, 1, 50], 1)
    high = np.select([law == 0, law == 1, law == 2, law == 3, law == 4], [1, 10, 10, 100, 100], 1)
    # law 5: U[1, 50] in the quadrants (relative to the depot) where x and y lie on the same side, U[51, 100] else
    same_side = (coords[..., 0] >= depot[:, None, 0]) == (coords[..., 1] >= depot[:, None, 1])
    low, high = np.where(law == 5, np.where(same_side, 1, 51), low), np.where(law == 5, np.where(same_side, 50, 100), high)
    # law 6: many small, few large: 70-95% of the customers U[1, 10], the rest U[50, 100]
    small = rng.random((count, n)) < rng.uniform(0.70, 0.95, size=(count, 1))
    low, high = np.where(law == 6, np.where(small, 1, 50), low), np.where(law == 6, np.where(small, 10, 100), high)
    return rng.integers(low, high + 1).astype(np.float64)


SOLOMON = {  # class: (horizon type 1, type 2; service; window width scale range type 1, type 2)
    "R": ((230.0, 1000.0), 10.0, ((10.0, 190.0), (115.0, 470.0))),
    "C": ((1236.0, 3390.0), 90.0, ((40.0, 360.0), (160.0, 640.0))),
    "RC": ((240.0, 960.0), 10.0, ((30.0, 190.0), (120.0, 890.0))),
}
SOLOMON_GRID = 100.0


def solomon_instances(rng: np.random.Generator, count: int, num_customers: int) -> dict:
    """``count`` single-depot VRPTW instances like Solomon's (see the module's docstring), in the layout
    of ``envs.vrp.STATIC_KEYS``."""
    n, rows = num_customers, np.arange(count)[:, None]
    kind = rng.choice(list(SOLOMON), size=count)
    long = rng.random(count) < 0.5  # type 2
    depot = rng.uniform(0.3, 0.5, (count, 2)) * SOLOMON_GRID
    # customers: random, clustered around 6-12 centres (spread 2-5), or half each
    centres = rng.uniform(0.1, 0.9, (count, 12, 2)) * SOLOMON_GRID
    which = (rng.random((count, n)) * rng.integers(6, 13, size=count)[:, None]).astype(np.int64)
    around = centres[rows, which] + rng.uniform(2.0, 5.0, (count, 1, 1)) * rng.standard_normal((count, n, 2))
    clustered = (kind[:, None] == "C") | ((kind[:, None] == "RC") & (np.arange(n)[None, :] < n // 2))
    points = np.where(clustered[..., None], around, rng.uniform(0, 0.8, (count, n, 2)) * SOLOMON_GRID)
    points = np.clip(points, 0.0, SOLOMON_GRID)
    demand = np.where(kind[:, None] == "C", 10 * rng.choice(5, size=(count, n), p=[0.35, 0.3, 0.2, 0.1, 0.05]) + 10,
                      rng.integers(1, 42, size=(count, n))).astype(np.float64)  # fmt: skip
    capacity = np.where(long, rng.uniform(700, 1000, count).round(), 200.0)
    horizon = np.array([SOLOMON[k][0][t] for k, t in zip(kind, long.astype(int), strict=True)])
    horizon = horizon * rng.uniform(0.9, 1.1, count)
    service = np.array([SOLOMON[k][1] for k in kind])
    low, high = np.array([SOLOMON[k][2][t] for k, t in zip(kind, long.astype(int), strict=True)]).T
    scale = rng.uniform(low, high)
    d0 = np.linalg.norm(points - depot[:, None], axis=2)  # [count, n]
    latest = horizon[:, None] - d0 - service[:, None]  # the last start that still returns in time
    width = scale[:, None] * rng.uniform(0.5, 1.5, (count, n))
    centre = d0 + rng.random((count, n)) * np.maximum(latest - d0, 0.0)
    for b in np.flatnonzero(kind == "C"):
        centre[b] = cluster_routes(depot[b], points[b], which[b], demand[b], capacity[b], horizon[b], service[b])[1]
    start = np.clip(centre - width / 2, 0.0, None)
    end = np.maximum(np.minimum(centre + width / 2, latest), start)
    windowed = rng.random((count, n)) < rng.choice([0.25, 0.5, 0.75, 1.0], size=(count, 1))
    windows = np.zeros((count, n + 1, 2))
    windows[:, 0, 1] = horizon
    windows[:, 1:, 0] = np.where(windowed, start, 0.0)
    windows[:, 1:, 1] = np.where(windowed, end, horizon[:, None])
    services = np.concatenate([np.zeros((count, 1)), np.repeat(service[:, None], n, 1)], axis=1)
    # into the unit square by the span, times alike (travel time = distance), demands by the capacity
    every = np.concatenate([depot[:, None], points], axis=1)
    low_corner = every.min(axis=1, keepdims=True)
    span = (every.max(axis=1, keepdims=True) - low_corner).max(axis=2, keepdims=True)  # [count, 1, 1]
    unit = np.clip((every - low_corner) / span, 0.0, 1.0)
    return {
        "depots": unit[:, :1],
        "coords": unit[:, 1:],
        "demand_linehaul": demand / capacity[:, None],
        "demand_backhaul": np.zeros((count, n)),
        "backhaul_class": np.ones(count),
        "time_windows": windows / span,
        "service_time": services / span[:, :, 0],
        "distance_limit": np.full(count, np.inf),
        "open_route": np.zeros(count, dtype=bool),
    }


def cluster_routes(
    depot: np.ndarray, points: np.ndarray, cluster: np.ndarray, demand: np.ndarray, capacity: float,
    horizon: float, service: float,
) -> tuple[list[list[int]], np.ndarray]:
    """A cluster-by-cluster routing of one instance, as Solomon routed his C instances before he placed
    their windows: the clusters in the order of their centroids' angle around the depot, each
    cluster's customers by nearest neighbour from the previous stop, the sequence cut into a new route
    from the depot where the next customer would exceed ``capacity`` or leave no time to be back by
    ``horizon``; no waiting.

    ``depot`` [2], ``points`` [n, 2], ``cluster`` [n] (ints), ``demand`` [n]; travel time = distance; each
    customer can be served alone within ``horizon`` and ``capacity``.
    Returns the routes (customer indices, 0-based) and each customer's service start [n]."""
    def angle(c: int) -> float:
        x, y = points[cluster == c].mean(axis=0) - depot
        return float(np.arctan2(y, x))

    order = sorted(np.unique(cluster), key=angle)
    sequence, here = [], depot
    for c in order:
        members = list(np.flatnonzero(cluster == c))
        while members:
            nearest = members.pop(int(np.argmin(np.linalg.norm(points[members] - here, axis=1))))
            sequence.append(int(nearest))
            here = points[nearest]
    home = [float(np.linalg.norm(point - depot)) for point in points]  # each customer's distance from the depot
    routes, starts, time, load, here = [], np.zeros(len(points)), 0.0, 0.0, depot
    for c in sequence:
        arrive = time + float(np.linalg.norm(points[c] - here))
        if not routes or load + demand[c] > capacity or arrive + service + home[c] > horizon:
            routes.append([])
            load, arrive = 0.0, home[c]
        routes[-1].append(c)
        starts[c], time, load, here = arrive, arrive + service, load + demand[c], points[c]
    return routes, starts


def random_size(rng: np.random.Generator, low: int, high: int) -> int:
    """An instance size drawn uniformly from ``low``..``high`` (inclusive)."""
    return int(rng.integers(low, high + 1))
