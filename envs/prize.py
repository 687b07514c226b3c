"""Prize collecting: customers are optional, each with a prize. Three problems:

- ``op`` orienteering (Kool et al. 2019): one tour from the depot collecting the most prize within
  a length limit ``max_length``. A customer is allowed while unvisited and reachable with the
  return: length so far + d(here, j) + d(j, depot) <= max_length; the depot is allowed from a
  customer (or when no customer is reachable) and ends the episode. Reward: the prize of each
  visited customer; cost = minus the collected prize.
- ``pctsp`` prize-collecting TSP (Kool et al.'s deterministic variant): one tour from the depot
  that collects at least ``MIN_PRIZE`` (1) in total, minimising its length plus the ``penalty`` of
  every skipped customer. The depot is allowed from a customer once the collected prize reaches the
  minimum (or every customer is visited) and ends the episode. Reward: minus each move's length,
  and at the end minus the skipped customers' penalties; cost = length + penalties.
- ``pcvrp`` prize-collecting CVRP (PyVRP's model): capacitated routes from the depot as in the
  CVRP, every customer optional, minimising the length plus the ``prize`` of every customer not
  visited (PyVRP's objective: distance + uncollected prizes). From the depot, choosing the depot
  again ends the episode (so does the return after the last customer). Reward: minus each move's
  length, and at the end minus the uncollected prizes; cost = length + uncollected prizes.

Action 0 is the depot, action i >= 1 customer i - 1 of ``coords``. In all three, minus the summed
reward is the cost that ``checkers.tours`` recomputes and the reference solvers minimise.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from ppoor.envs.base import DepotVectorEnv, SingleRoutingEnv
from ppoor.envs.instances import STATIC_KEYS, check_arrays, cvrp_capacity, read_arrays

TOLERANCE = 1e-5
MIN_PRIZE = 1.0  # pctsp: the prize a tour must collect (Kool et al.)
PRIZE_TYPES = ("const", "unif", "dist")


def kool_max_length(num_nodes: int) -> float:
    """Kool et al.'s length scale: 2, 3, 4 for 20, 50, 100 customers, linear in between and flat outside."""
    return float(np.interp(num_nodes, (20, 50, 100), (2.0, 3.0, 4.0)))


def op_instances(rng: np.random.Generator, num_instances: int, num_nodes: int, prize_type: str = "dist") -> dict:
    """Kool et al.'s orienteering distribution: depot and customers uniform; prizes ``const`` (1),
    ``unif`` ((1 + U{0..99}) / 100) or ``dist`` ((1 + floor(99 d_0i / max_j d_0j)) / 100, growing
    with the distance from the depot); ``max_length`` ``kool_max_length(n)``."""
    if prize_type not in PRIZE_TYPES:
        raise ValueError(f"prize type must be one of {PRIZE_TYPES}, got {prize_type!r}")
    m, n = num_instances, num_nodes
    points = rng.uniform(size=(m, n + 1, 2))
    depot, coords = points[:, 0], points[:, 1:]
    uniform = (1 + rng.integers(0, 100, size=(m, n))) / 100
    d0 = np.sqrt(((coords - depot[:, None]) ** 2).sum(-1))
    by_distance = (1 + np.floor(99 * d0 / d0.max(1, keepdims=True))) / 100
    prize = {"const": np.ones((m, n)), "unif": uniform, "dist": by_distance}[prize_type]
    return {"depot": depot, "coords": coords, "prize": prize, "max_length": np.full(m, kool_max_length(n))}


def pctsp_instances(rng: np.random.Generator, num_instances: int, num_nodes: int) -> dict:
    """Kool et al.'s deterministic PCTSP: depot and customers uniform, prize U(0, 4/n) (about 2 in
    total, of which ``MIN_PRIZE`` 1 must be collected), penalty U(0, 3 L_n / n) with L_n =
    ``kool_max_length(n)``."""
    m, n = num_instances, num_nodes
    points = rng.uniform(size=(m, n + 1, 2))
    penalty = rng.uniform(size=(m, n)) * 3 * kool_max_length(n) / n
    prize = rng.uniform(size=(m, n)) * 4 / n
    return {"depot": points[:, 0], "coords": points[:, 1:], "prize": prize, "penalty": penalty}


def pcvrp_instances(rng: np.random.Generator, num_instances: int, num_nodes: int) -> dict:
    """Kool et al.'s CVRP (integer demands 1..9 over ``cvrp_capacity(n)``) with optional customers
    whose prizes follow Kool's PCTSP penalties, U(0, 3 L_n / n): a prize below what serving the
    customer adds to a route makes skipping it worthwhile."""
    m, n = num_instances, num_nodes
    points = rng.uniform(size=(m, n + 1, 2))
    demand = rng.integers(1, 10, size=(m, n)) / cvrp_capacity(n)
    prize = rng.uniform(size=(m, n)) * 3 * kool_max_length(n) / n
    return {"depot": points[:, 0], "coords": points[:, 1:], "demand": demand, "prize": prize}


def check_prize_instances(
    problem: str, instances: dict, num_instances: int | None = None, num_nodes: int | None = None
) -> dict:
    """Validates ``op`` / ``pctsp`` / ``pcvrp`` instances (``STATIC_KEYS[problem]``) and returns them
    as float64 arrays; ``ValueError`` names what to fix: shapes, NaN, points outside the unit square,
    negative prizes or penalties, a non-positive ``max_length``, demands outside (0, 1]."""
    out, m, n = read_arrays(problem, instances, STATIC_KEYS[problem], num_instances, num_nodes)
    shapes = {
        "depot": (m, 2),
        "coords": (m, n, 2),
        "prize": (m, n),
        "penalty": (m, n),
        "demand": (m, n),
        "max_length": (m,),
    }
    check_arrays(out, {key: shapes[key] for key in out})
    for key in ("prize", "penalty"):
        if key in out and (out[key] < 0).any():
            b, i = np.argwhere(out[key] < 0)[0]
            raise ValueError(f"customer {i + 1} of instance {b} has a negative {key} ({out[key][b, i]:.4g})")
    if "max_length" in out and (out["max_length"] <= 0).any():
        raise ValueError("'max_length' must be positive")
    if "demand" in out and ((out["demand"] <= 0).any() or (out["demand"] > 1 + TOLERANCE).any()):
        raise ValueError("'demand' must lie in (0, 1] (demand divided by the vehicle capacity)")
    return out


class PrizeVectorEnv(DepotVectorEnv):
    """Base of the prize-collecting envs: M instances x N trajectories, actions 0 (depot) .. n.

    Dynamic observation: ``action_mask`` [M, N, n + 1], ``last_node`` [M, N] (0 = depot), and per
    problem ``remaining_length`` (op), ``remaining_prize`` (pctsp: what is still to collect) or
    ``current_load`` (pcvrp), each [M, N].
    """

    def check_instances(self, options: dict) -> dict:
        return check_prize_instances(self.problem, options, self.num_envs, self.num_nodes)

    def _static_spaces(self, lead: tuple) -> dict:
        n = self.num_nodes
        shapes = {"depot": (2,), "prize": (n,), "penalty": (n,), "demand": (n,), "max_length": ()}
        return {k: gym.spaces.Box(0.0, np.inf, (*lead, *shapes[k]), np.float64) for k in STATIC_KEYS[self.problem][2:]}

    def _start(self) -> None:
        shape, s = (self.num_envs, self.n_traj), self.static
        self._set_points(np.concatenate([s["depot"][:, None], s["coords"]], axis=1))
        zero = np.zeros((self.num_envs, 1))
        self.node_prize = np.concatenate([zero, s["prize"]], axis=1)
        self.unvisited = np.ones((*shape, self.num_actions), dtype=bool)
        self.num_served = np.zeros(shape, dtype=np.int64)
        self.last_node = np.zeros(shape, dtype=np.int64)
        self._place(self.last_node)

    def _visit(self, actions: np.ndarray) -> np.ndarray:
        """The move's common bookkeeping; returns its length [M, N]."""
        length = self._move_length(actions)
        self.unvisited[self._rows, self._cols, actions] = False
        self.num_served += actions != 0
        return length

    def _skipped(self, weights: np.ndarray, ending: np.ndarray) -> np.ndarray | float:
        """The summed ``weights`` [M, n] of the customers not visited, where ``ending`` [M, N] (0 elsewhere)."""
        if not ending.any():
            return 0.0
        left = np.einsum("mjn,mn->mj", self.unvisited[..., 1:].astype(np.float64), weights)
        return np.where(ending, left, 0.0)


class OPVectorEnv(PrizeVectorEnv):
    """Orienteering (see the module docstring); ``variant``: the prize type of random instances
    (const, unif or dist)."""

    problem = "op"
    trajectory_state = (*PrizeVectorEnv.trajectory_state, "tour_length")

    def __init__(self, num_envs: int = 1, num_nodes: int = 20, n_traj: int = 1, variant: str = "dist"):
        if variant not in PRIZE_TYPES:
            raise ValueError(f"variant (the prize type) must be one of {PRIZE_TYPES}, got {variant!r}")
        self.variant = variant
        super().__init__(num_envs=num_envs, num_nodes=num_nodes, n_traj=n_traj)

    @property
    def max_episode_steps(self) -> int:
        return self.num_nodes + 1

    def random_instances(self, count: int) -> dict:
        return op_instances(self.rng, count, self.num_nodes, self.variant)

    def _dynamic_spaces(self, lead: tuple) -> dict:
        box = gym.spaces.Box(-np.inf, np.inf, (*lead, self.n_traj), np.float64)
        return {**self._static_spaces(lead), "remaining_length": box}

    def _start(self) -> None:
        super()._start()
        self.tour_length = np.zeros((self.num_envs, self.n_traj))
        points = np.concatenate([self.static["depot"][:, None], self.static["coords"]], axis=1).astype(np.float32)
        x, y = points[..., 0], points[..., 1]
        dist = np.hypot(x[:, :, None] - x[:, None], y[:, :, None] - y[:, None])  # [M, A, A]
        # node j is reachable from node i while length <= max_length - d_ij - d_j0: rows [(M * A), A]
        # gathered by one take per step
        budget = self.static["max_length"][:, None, None].astype(np.float32) - dist - dist[:, None, :, 0] + TOLERANCE
        self._budget_rows = budget.reshape(-1, self.num_actions)
        self._row_offsets = np.arange(self.num_envs)[:, None] * self.num_actions
        self._gathered = np.empty((self.num_envs, self.n_traj, self.num_actions), dtype=np.float32)
        self._update_mask()
        self.action_mask[..., 0] = ~self.action_mask[..., 1:].any(-1)  # an empty tour only if nothing is reachable

    def _move(self, actions: np.ndarray) -> np.ndarray:
        self.tour_length = self.tour_length + self._visit(actions)
        self.last_node = actions.copy()
        ended = actions == 0
        self.terminated |= ended
        if ended.any():
            self.unvisited[ended] = False  # a finished tour offers nothing more
        self._update_mask()
        return self.node_prize[self._rows, actions]

    def _update_mask(self) -> None:
        budget = self._budget_rows.take(self._row_offsets + self.last_node, axis=0, out=self._gathered, mode="clip")
        mask = np.less_equal(self.tour_length.astype(np.float32)[..., None], budget)
        mask &= self.unvisited
        mask[..., 0] = (self.last_node != 0) | self.terminated  # the first step: see _start
        self.action_mask = mask

    def _dynamic_observation(self) -> dict:
        remaining = self.static["max_length"][:, None] - self.tour_length
        return {"action_mask": self.action_mask, "last_node": self.last_node, "remaining_length": remaining}


class PCTSPVectorEnv(PrizeVectorEnv):
    """Prize-collecting TSP (see the module docstring)."""

    problem = "pctsp"
    trajectory_state = (*PrizeVectorEnv.trajectory_state, "collected")

    @property
    def max_episode_steps(self) -> int:
        return self.num_nodes + 1

    def random_instances(self, count: int) -> dict:
        return pctsp_instances(self.rng, count, self.num_nodes)

    def _dynamic_spaces(self, lead: tuple) -> dict:
        box = gym.spaces.Box(0.0, np.inf, (*lead, self.n_traj), np.float64)
        return {**self._static_spaces(lead), "remaining_prize": box}

    def _start(self) -> None:
        super()._start()
        self.collected = np.zeros((self.num_envs, self.n_traj))
        self._update_mask()

    def _move(self, actions: np.ndarray) -> np.ndarray:
        ending = (actions == 0) & ~self.terminated
        reward = -self._visit(actions) - self._skipped(self.static["penalty"], ending)
        self.collected = self.collected + self.node_prize[self._rows, actions]
        self.last_node = actions.copy()
        self.terminated |= actions == 0
        self._update_mask()
        return reward

    def _update_mask(self) -> None:
        mask = self.unvisited & ~self.terminated[..., None]
        enough = self.collected >= MIN_PRIZE - TOLERANCE
        mask[..., 0] = ((self.last_node != 0) & enough) | (self.num_served == self.num_nodes) | self.terminated
        self.action_mask = mask

    def _dynamic_observation(self) -> dict:
        remaining = np.maximum(MIN_PRIZE - self.collected, 0.0)
        return {"action_mask": self.action_mask, "last_node": self.last_node, "remaining_prize": remaining}


class PCVRPVectorEnv(PrizeVectorEnv):
    """Prize-collecting CVRP (see the module docstring)."""

    problem = "pcvrp"
    trajectory_state = (*PrizeVectorEnv.trajectory_state, "current_load")

    @property
    def max_episode_steps(self) -> int:
        """Worst case: a return after every customer, then the closing depot step."""
        return 2 * self.num_nodes + 1

    def random_instances(self, count: int) -> dict:
        return pcvrp_instances(self.rng, count, self.num_nodes)

    def _dynamic_spaces(self, lead: tuple) -> dict:
        box = gym.spaces.Box(0.0, 1.0, (*lead, self.n_traj), np.float64)
        return {**self._static_spaces(lead), "current_load": box}

    def _start(self) -> None:
        super()._start()
        self.node_demand = np.concatenate([np.zeros((self.num_envs, 1)), self.static["demand"]], axis=1)
        self._demand32 = self.node_demand[:, None].astype(np.float32)
        self.current_load = np.ones((self.num_envs, self.n_traj))
        self._update_mask()

    def _move(self, actions: np.ndarray) -> np.ndarray:
        at_depot = self.last_node == 0
        reward = -self._visit(actions)
        self.current_load = np.where(actions == 0, 1.0, self.current_load - self.node_demand[self._rows, actions])
        finished = (actions == 0) & (at_depot | (self.num_served == self.num_nodes))
        reward -= self._skipped(self.static["prize"], finished & ~self.terminated)
        self.last_node = actions.copy()
        self.terminated |= finished
        self._update_mask()
        return reward

    def _update_mask(self) -> None:
        room = (self.current_load + TOLERANCE).astype(np.float32)[..., None]
        mask = (self._demand32 <= room) & self.unvisited & ~self.terminated[..., None]
        mask[..., 0] = True  # back to the depot, or, from the depot, the end of the episode
        self.action_mask = mask

    def _dynamic_observation(self) -> dict:
        return {"action_mask": self.action_mask, "last_node": self.last_node, "current_load": self.current_load}


class OPEnv(SingleRoutingEnv):
    """One orienteering instance x N trajectories (see ``OPVectorEnv``)."""

    vector_class = OPVectorEnv


class PCTSPEnv(SingleRoutingEnv):
    """One prize-collecting TSP instance x N trajectories (see ``PCTSPVectorEnv``)."""

    vector_class = PCTSPVectorEnv


class PCVRPEnv(SingleRoutingEnv):
    """One prize-collecting CVRP instance x N trajectories (see ``PCVRPVectorEnv``)."""

    vector_class = PCVRPVectorEnv
