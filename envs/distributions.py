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

``random_size(rng, low, high)`` draws an instance size for a rollout; both are seeded by the env's
generator, so a run is reproducible.
"""

from __future__ import annotations

import numpy as np
from ppoor.envs.instances import cvrp_capacity, random_instances

DISTRIBUTIONS = {"tsp": ("uniform", "clustered", "mixed"), "cvrp": ("uniform", "clustered", "mixed", "x")}
"""The distributions each problem's env can draw (the others draw only their own)."""
CENTRES = (3, 8)  # Gaussian centres (clustered) and X seeds per instance, inclusive
SPREAD = (0.03, 0.10)  # the clusters' standard deviation, in units of the square
GRID = 1000.0  # the X generator's grid
SEED_DECAY = 40.0  # X: a clustered customer's density falls as exp(-d / 40) from its seed
ROUTE_SIZE = (3, 25)  # X: average customers per route, which sets the capacity
DEMAND_LAWS = 7


def draw(problem: str, rng: np.random.Generator, count: int, num_nodes: int, distribution: str = "uniform") -> dict:
    """``count`` instances of ``num_nodes`` nodes (TSP) or customers (CVRP) of ``distribution``."""
    if distribution not in DISTRIBUTIONS.get(problem, ("uniform",)):
        known = DISTRIBUTIONS.get(problem, ("uniform",))
        raise ValueError(f"{problem} instances can be drawn from {', '.join(known)}, not {distribution!r}")
    if distribution == "uniform":
        return random_instances(problem, rng, count, num_nodes)
    if distribution == "x":
        return x_instances(rng, count, num_nodes)
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


def random_size(rng: np.random.Generator, low: int, high: int) -> int:
    """An instance size drawn uniformly from ``low``..``high`` (inclusive)."""
    return int(rng.integers(low, high + 1))
