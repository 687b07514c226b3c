"""Bi-level vectorized routing environment: M problem instances x N trajectories per instance.

Every array of the state carries the axes [M, N, ...] and is stepped by array operations, with no
Python loop over instances or trajectories. Episodes do not auto-reset: a trajectory that has
terminated stays on its terminal node (zero reward, only that node allowed) until ``reset``.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from ppoor.envs.distributions import DISTRIBUTIONS, draw
from ppoor.envs.instances import check_instances


class RoutingVectorEnv(VectorEnv):
    """Base class; subclasses define the problem's dynamics.

    Subclass hooks: ``problem`` (name), ``num_actions`` (A), ``max_episode_steps``,
    ``start_actions`` (the first actions that start distinct trajectories, for multi-start
    rollouts), ``_dynamic_spaces(shape)``, ``_start()`` (initial dynamic state) and
    ``_move(action)`` (one step; returns reward [M, N]); ``trajectory_state``: the names of the
    attributes that hold one entry per trajectory ([M, N, ...]: the dynamic state, which ``select``
    copies between trajectories; positional helpers such as offsets stay out).
    """

    metadata = {"autoreset_mode": AutoresetMode.DISABLED}
    problem = ""
    trajectory_state = ("terminated", "_pos_x", "_pos_y", "unvisited", "last_node", "action_mask")

    def __init__(self, num_envs: int = 1, num_nodes: int = 50, n_traj: int = 1, distribution: str = "uniform"):
        """``distribution``: what ``reset`` draws (``envs.distributions``: TSP and CVRP have several)."""
        for name, value, low in (("num_envs", num_envs, 1), ("num_nodes", num_nodes, 2), ("n_traj", n_traj, 1)):
            if int(value) != value or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        if distribution not in (known := DISTRIBUTIONS.get(self.problem, ("uniform",))):
            raise ValueError(f"distribution must be one of {', '.join(known)} for {self.problem}, got {distribution!r}")
        self.num_envs, self.n_traj, self.distribution = int(num_envs), int(n_traj), distribution
        self.rng = np.random.default_rng()
        self.static: dict = {}
        self.terminated = np.zeros((self.num_envs, self.n_traj), dtype=bool)
        self._rows = np.arange(self.num_envs)[:, None]
        self._cols = np.arange(self.n_traj)[None, :]
        self.resize(num_nodes)

    def resize(self, num_nodes: int) -> None:
        """Makes the next ``reset`` draw instances of ``num_nodes`` nodes (mixed-size training); the
        episodes in progress end."""
        if int(num_nodes) != num_nodes or num_nodes < 2:
            raise ValueError(f"num_nodes must be an integer >= 2, got {num_nodes!r}")
        self.num_nodes, self.static = int(num_nodes), {}
        self.single_observation_space = self._space(())
        self.observation_space = self._space((self.num_envs,))
        self.single_action_space = gym.spaces.MultiDiscrete(np.full(self.n_traj, self.num_actions))
        self.action_space = gym.spaces.MultiDiscrete(np.full((self.num_envs, self.n_traj), self.num_actions))

    def _space(self, lead: tuple) -> gym.spaces.Dict:
        m, n, traj = lead, self.num_nodes, self.n_traj
        spaces = {
            "coords": gym.spaces.Box(0.0, 1.0, (*m, n, 2), np.float64),
            "action_mask": gym.spaces.Box(0, 1, (*m, traj, self.num_actions), bool),
            "last_node": gym.spaces.Box(0, self.num_actions - 1, (*m, traj), np.int64),
        }
        spaces.update(self._dynamic_spaces(m))
        return gym.spaces.Dict(spaces)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Starts new episodes. ``seed`` reseeds this env's generator; ``options`` gives fixed
        instances (the static arrays with the instance axis, see ``envs.instances``); otherwise
        ``num_envs`` random instances are drawn."""
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.static = self.check_instances(options) if options else self.random_instances(self.num_envs)
        self.terminated = np.zeros((self.num_envs, self.n_traj), dtype=bool)
        self.steps = 0
        self._start()
        return self._observation(), {}

    def random_instances(self, count: int) -> dict:
        """``count`` instances of the env's distribution, drawn from its generator ``rng``."""
        return draw(self.problem, self.rng, count, self.num_nodes, self.distribution)

    def check_instances(self, options: dict) -> dict:
        """Validates fixed instances given to ``reset``; returns the static arrays."""
        return check_instances(self.problem, options, self.num_envs, self.num_nodes)

    def episode_statistics(self) -> dict:
        """Problem-specific figures of the current episodes, logged by the trainer under charts/."""
        return {}

    def step(self, actions):
        """Moves every trajectory to the node in ``actions`` [M, N]; returns observation, reward
        [M, N] (minus the length of the move), terminated [M, N], truncated [M, N] (never set) and
        an empty info dict."""
        if not self.static:
            raise RuntimeError("call reset() before step()")
        actions = self._check_actions(actions)
        reward = self._move(actions)
        self.steps += 1
        return self._observation(), reward, self.terminated.copy(), np.zeros_like(self.terminated), {}

    def select(self, parents) -> None:
        """Makes trajectory j of instance m a copy of trajectory ``parents[m, j]`` ([M, N] indices in
        0..N-1; beam search's step): every attribute of ``trajectory_state`` is gathered along N."""
        parents = np.asarray(parents)
        if parents.shape != (self.num_envs, self.n_traj) or parents.dtype.kind not in "iu":
            raise ValueError(f"parents must be integers of shape {(self.num_envs, self.n_traj)}, got {parents.shape}")
        if parents.size and (parents.min() < 0 or parents.max() >= self.n_traj):
            raise ValueError(f"parents must lie in 0..{self.n_traj - 1}")
        if not self.static:
            raise RuntimeError("call reset() before select()")
        for name in self.trajectory_state:
            if (value := getattr(self, name, None)) is not None:  # (TSP has no position before its first step)
                setattr(self, name, value[self._rows, parents])

    def _check_actions(self, actions) -> np.ndarray:
        actions = np.asarray(actions)
        shape = (self.num_envs, self.n_traj)
        if actions.shape != shape:
            raise ValueError(
                f"actions must have shape {list(shape)} (instances x trajectories), got {list(actions.shape)}"
            )
        if not np.issubdtype(actions.dtype, np.integer):
            raise ValueError(f"actions must be integers, got dtype {actions.dtype}")
        outside = (actions < 0) | (actions >= self.num_actions)
        if outside.any():
            m, j = np.argwhere(outside)[0]
            raise ValueError(
                f"action {actions[m, j]} of instance {m}, trajectory {j} is outside 0..{self.num_actions - 1}"
            )
        allowed = np.take_along_axis(self.action_mask, actions[..., None], axis=2)[..., 0]
        if not allowed.all():
            m, j = np.argwhere(~allowed)[0]
            raise ValueError(f"action {actions[m, j]} of instance {m}, trajectory {j} is forbidden by its action mask")
        return actions.astype(np.int64, copy=False)

    def _observation(self) -> dict:
        return {**self.static, **self._dynamic_observation()}

    def _set_points(self, points: np.ndarray) -> None:
        """Stores ``points`` [M, A, 2], the coordinates indexed by action, flat for fast gathers."""
        self._x, self._y = (np.ascontiguousarray(points[..., k]).reshape(-1) for k in (0, 1))
        self._offsets = np.arange(self.num_envs)[:, None] * points.shape[1]

    def _place(self, nodes: np.ndarray) -> None:
        """Puts every trajectory at node ``nodes`` [M, N]."""
        index = nodes + self._offsets
        self._pos_x, self._pos_y = self._x.take(index), self._y.take(index)

    def _move_length(self, actions: np.ndarray) -> np.ndarray:
        """Moves every trajectory to node ``actions`` [M, N]; returns the Euclidean lengths [M, N]."""
        x, y = self._pos_x, self._pos_y
        self._place(actions)
        return np.sqrt((self._pos_x - x) ** 2 + (self._pos_y - y) ** 2)

    def close(self, **kwargs):
        self.static = {}


class DepotVectorEnv(RoutingVectorEnv):
    """Base of the vehicle routing envs: action 0 is the depot, action i >= 1 customer i - 1, and
    every customer can start a trajectory (each fits a route of its own; the depot may not be
    chosen twice in a row, so it cannot)."""

    trajectory_state = (*RoutingVectorEnv.trajectory_state, "num_served")

    @property
    def num_actions(self) -> int:
        return self.num_nodes + 1

    @property
    def max_episode_steps(self) -> int:
        """Worst case: a return to the depot after every customer."""
        return 2 * self.num_nodes

    @property
    def start_actions(self) -> np.ndarray:
        return np.arange(1, self.num_nodes + 1)


class SingleRoutingEnv(gym.Env):
    """One problem instance with N trajectories: the vector env with M = 1, without the M axis.

    Observations, actions [N], rewards [N] and terminated [N] are those of the vector env for a
    single instance; ``options`` takes the static arrays without the instance axis.
    """

    metadata = {"render_modes": []}
    vector_class: type[RoutingVectorEnv]

    def __init__(self, num_nodes: int = 50, n_traj: int = 1, **kwargs):
        """``kwargs``: further arguments of the vector env (e.g. the VRP's ``variant``)."""
        self.vec = self.vector_class(num_envs=1, num_nodes=num_nodes, n_traj=n_traj, **kwargs)
        self.observation_space = self.vec.single_observation_space
        self.action_space = self.vec.single_action_space

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if options:
            options = {k: np.asarray(v)[None] for k, v in options.items()}
        obs, info = self.vec.reset(seed=seed, options=options)
        return _first(obs), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.vec.step(np.asarray(action)[None])
        return _first(obs), reward[0], terminated[0], truncated[0], info


def _first(obs: dict) -> dict:
    return {k: v[0] for k, v in obs.items()}
