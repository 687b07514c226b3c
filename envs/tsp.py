"""Travelling salesman: visit every node once and return to the first.

The first action picks the start node at zero cost; the tour ends with the return to it, so an
episode takes n + 1 steps and minus the summed reward is the tour length.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from ppoor.envs.base import RoutingVectorEnv, SingleRoutingEnv


class TSPVectorEnv(RoutingVectorEnv):
    """M TSP instances x N trajectories. Actions are node indices 0..n-1.

    Dynamic observation: ``action_mask`` [M, N, n] (unvisited nodes; the first node alone once all
    are visited), ``first_node`` and ``last_node`` [M, N] (0 before the first action),
    ``is_initial_action`` [M, N] (True before the first action).
    """

    problem = "tsp"
    trajectory_state = (*RoutingVectorEnv.trajectory_state, "first_node")

    @property
    def num_actions(self) -> int:
        return self.num_nodes

    @property
    def max_episode_steps(self) -> int:
        return self.num_nodes + 1

    @property
    def start_actions(self) -> np.ndarray:
        """Every node can start a tour."""
        return np.arange(self.num_nodes)

    def _dynamic_spaces(self, lead: tuple) -> dict:
        shape = (*lead, self.n_traj)
        return {
            "first_node": gym.spaces.Box(0, self.num_nodes - 1, shape, np.int64),
            "is_initial_action": gym.spaces.Box(0, 1, shape, bool),
        }

    def _start(self) -> None:
        shape = (self.num_envs, self.n_traj)
        self.unvisited = np.ones((*shape, self.num_nodes), dtype=bool)
        self.first_node = np.zeros(shape, dtype=np.int64)
        self.last_node = np.zeros(shape, dtype=np.int64)
        self.action_mask = self.unvisited.copy()
        self._set_points(self.static["coords"])

    def _move(self, actions: np.ndarray) -> np.ndarray:
        if self.steps == 0:
            self.first_node = actions.copy()
            self._place(actions)
            reward = np.zeros(actions.shape)
        else:
            reward = -self._move_length(actions)
            self.terminated |= actions == self.first_node
        self.unvisited[self._rows, self._cols, actions] = False
        self.last_node = actions.copy()
        if self.steps + 1 < self.num_nodes:
            self.action_mask = self.unvisited.copy()
        else:  # every step visits a new node, so after n steps all are visited: only the return is left
            self.action_mask = np.zeros_like(self.unvisited)
            self.action_mask[self._rows, self._cols, self.first_node] = True
        return reward

    def _dynamic_observation(self) -> dict:
        return {
            "action_mask": self.action_mask,
            "first_node": self.first_node,
            "last_node": self.last_node,
            "is_initial_action": np.full(self.terminated.shape, self.steps == 0),
        }


class TSPEnv(SingleRoutingEnv):
    """One TSP instance x N trajectories (see ``TSPVectorEnv``)."""

    vector_class = TSPVectorEnv
