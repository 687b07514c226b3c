"""Capacitated vehicle routing: serve every customer once from a depot with a capacitated vehicle.

Action 0 is the depot, action i >= 1 customer i - 1 of ``coords``. The vehicle starts at the depot
with a full load; a customer is allowed if unserved and its demand fits the remaining load; the
depot refills the load and may not be chosen twice in a row; the episode ends on the return to the
depot after the last customer. There is no limit on the number of routes.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from ppoor.envs.base import DepotVectorEnv, SingleRoutingEnv

LOAD_TOLERANCE = 1e-5


class CVRPVectorEnv(DepotVectorEnv):
    """M CVRP instances x N trajectories. Actions are 0 (depot) .. n (customers).

    Dynamic observation: ``action_mask`` [M, N, n + 1], ``last_node`` [M, N] (0 = depot),
    ``current_load`` [M, N] (remaining load as a fraction of capacity).
    """

    problem = "cvrp"
    trajectory_state = (*DepotVectorEnv.trajectory_state, "current_load")

    def _dynamic_spaces(self, lead: tuple) -> dict:
        return {
            "depot": gym.spaces.Box(0.0, 1.0, (*lead, 2), np.float64),
            "demand": gym.spaces.Box(0.0, 1.0, (*lead, self.num_nodes), np.float64),
            "current_load": gym.spaces.Box(0.0, 1.0, (*lead, self.n_traj), np.float64),
        }

    def _start(self) -> None:
        shape = (self.num_envs, self.n_traj)
        self._set_points(np.concatenate([self.static["depot"][:, None], self.static["coords"]], axis=1))
        # float32 halves the memory traffic of the mask; the tolerance dwarfs its rounding
        self.node_demand = np.concatenate([np.zeros((self.num_envs, 1)), self.static["demand"]], axis=1)
        self._demand32 = self.node_demand[:, None, :].astype(np.float32)
        self.unvisited = np.ones((*shape, self.num_actions), dtype=bool)
        self.num_served = np.zeros(shape, dtype=np.int64)
        self.last_node = np.zeros(shape, dtype=np.int64)
        self.current_load = np.ones(shape)
        self._place(self.last_node)
        self._update_mask()

    def _move(self, actions: np.ndarray) -> np.ndarray:
        reward = -self._move_length(actions)
        at_depot = actions == 0
        self.current_load = np.where(at_depot, 1.0, self.current_load - self.node_demand[self._rows, actions])
        self.unvisited[self._rows, self._cols, actions] = False
        self.num_served += ~at_depot  # the mask lets a customer be chosen only once
        self.last_node = actions.copy()
        self.terminated |= at_depot & (self.num_served == self.num_nodes)
        self._update_mask()
        return reward

    def _update_mask(self) -> None:
        mask = self._demand32 <= (self.current_load + LOAD_TOLERANCE).astype(np.float32)[..., None]
        mask &= self.unvisited
        all_served = self.num_served == self.num_nodes
        mask[..., 0] = (self.last_node != 0) | all_served
        self.action_mask = mask

    def _dynamic_observation(self) -> dict:
        return {
            "action_mask": self.action_mask,
            "last_node": self.last_node,
            "current_load": self.current_load,
        }


class CVRPEnv(SingleRoutingEnv):
    """One CVRP instance x N trajectories (see ``CVRPVectorEnv``)."""

    vector_class = CVRPVectorEnv
