"""Multiple resources: the CVRP with demands in several dimensions (e.g. weight and volume), a
capacity per dimension.

Action 0 is the depot, action i >= 1 customer i - 1 of ``coords``. ``demand`` [M, n, R] holds each
customer's demand per resource as a fraction of that resource's capacity. A customer is masked when
any dimension of its demand would overflow the remaining load; otherwise the env is the CVRP's:
the depot refills every dimension and may not be chosen twice in a row, the episode ends on the
return after the last customer, reward minus the length of each move.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from ppoor.envs.base import DepotVectorEnv, SingleRoutingEnv
from ppoor.envs.instances import STATIC_KEYS as INSTANCE_KEYS
from ppoor.envs.instances import check_arrays, cvrp_capacity, read_arrays

STATIC_KEYS = INSTANCE_KEYS["mrcvrp"]
RESOURCES = 2
LOAD_TOLERANCE = 1e-5


def mrcvrp_instances(rng: np.random.Generator, num_instances: int, num_nodes: int, resources: int = RESOURCES) -> dict:
    """Depot and customers uniform in the unit square; per resource, integer demands 1..9 divided by
    the CVRP capacity of the size (``envs.instances.cvrp_capacity``: 30 / 40 / 50 for 20 / 50 / 100
    customers), drawn independently per dimension: Kool et al.'s CVRP in every dimension."""
    points = rng.uniform(size=(num_instances, num_nodes + 1, 2))
    demand = rng.integers(1, 10, size=(num_instances, num_nodes, resources)) / cvrp_capacity(num_nodes)
    return {"depot": points[:, 0], "coords": points[:, 1:], "demand": demand}


def check_mrcvrp_instances(instances: dict, num_instances: int | None = None, num_nodes: int | None = None) -> dict:
    """Validates multi-resource instances (``STATIC_KEYS``; ``demand`` [M, n, R], fractions of each
    capacity) and returns them as float64 arrays; ``ValueError`` names what to fix."""
    out, m, n = read_arrays("mrcvrp", instances, STATIC_KEYS, num_instances, num_nodes)
    check_arrays(out, {"depot": (m, 2), "coords": (m, n, 2), "demand": (m, n, None)})  # R: one column per resource
    demand = out["demand"]
    if (demand < 0).any() or (demand.sum(-1) <= 0).any():
        raise ValueError("'demand' must not be negative, and every customer must demand something")
    over = demand > 1 + LOAD_TOLERANCE
    if over.any():
        b, i, r = np.argwhere(over)[0]
        raise ValueError(
            f"customer {i + 1} of instance {b} demands {demand[b, i, r]:.4g} of resource {r}'s capacity (above 1):"
            " no vehicle can carry it"
        )
    return out


class MRCVRPVectorEnv(DepotVectorEnv):
    """M multi-resource CVRP instances x N trajectories. Actions are 0 (depot) .. n (customers).

    Dynamic observation: ``action_mask`` [M, N, n + 1], ``last_node`` [M, N] (0 = depot),
    ``current_load`` [M, N, R] (what is left of each capacity, fractions).
    """

    problem = "mrcvrp"
    trajectory_state = (*DepotVectorEnv.trajectory_state, "current_load")

    def __init__(self, num_envs: int = 1, num_nodes: int = 50, n_traj: int = 1, resources: int = RESOURCES):
        if int(resources) != resources or resources < 1:
            raise ValueError(f"resources must be an integer >= 1, got {resources!r}")
        self.resources = int(resources)
        super().__init__(num_envs=num_envs, num_nodes=num_nodes, n_traj=n_traj)

    def random_instances(self, count: int) -> dict:
        return mrcvrp_instances(self.rng, count, self.num_nodes, self.resources)

    def check_instances(self, options: dict) -> dict:
        return check_mrcvrp_instances(options, self.num_envs, self.num_nodes)

    def _dynamic_spaces(self, lead: tuple) -> dict:
        n, r = self.num_nodes, self.resources
        return {
            "depot": gym.spaces.Box(0.0, 1.0, (*lead, 2), np.float64),
            "demand": gym.spaces.Box(0.0, 1.0, (*lead, n, r), np.float64),
            "current_load": gym.spaces.Box(0.0, 1.0, (*lead, self.n_traj, r), np.float64),
        }

    def _start(self) -> None:
        shape, s = (self.num_envs, self.n_traj), self.static
        self._set_points(np.concatenate([s["depot"][:, None], s["coords"]], axis=1))
        resources = s["demand"].shape[2]
        self.node_demand = np.concatenate([np.zeros((self.num_envs, 1, resources)), s["demand"]], axis=1)
        # per resource, contiguous [M, 1, A]: one broadcast comparison each (a trailing axis of R is slow)
        self._demand32 = [
            np.ascontiguousarray(self.node_demand[:, None, :, r], dtype=np.float32) for r in range(resources)
        ]
        self.unvisited = np.ones((*shape, self.num_actions), dtype=bool)
        self.num_served = np.zeros(shape, dtype=np.int64)
        self.last_node = np.zeros(shape, dtype=np.int64)
        self.current_load = np.ones((*shape, resources))
        self._place(self.last_node)
        self._update_mask()

    def _move(self, actions: np.ndarray) -> np.ndarray:
        reward = -self._move_length(actions)
        at_depot = (actions == 0)[..., None]
        taken = self.node_demand[self._rows, actions]  # [M, N, R]
        self.current_load = np.where(at_depot, 1.0, self.current_load - taken)
        self.unvisited[self._rows, self._cols, actions] = False
        self.num_served += actions != 0  # the mask lets a customer be chosen only once
        self.last_node = actions.copy()
        self.terminated |= (actions == 0) & (self.num_served == self.num_nodes)
        self._update_mask()
        return reward

    def _update_mask(self) -> None:
        left = (self.current_load + LOAD_TOLERANCE).astype(np.float32)  # [M, N, R]
        mask = self.unvisited.copy()
        for r, demand in enumerate(self._demand32):
            mask &= demand <= left[..., r, None]
        mask[..., 0] = (self.last_node != 0) | (self.num_served == self.num_nodes)
        self.action_mask = mask

    def _dynamic_observation(self) -> dict:
        return {"action_mask": self.action_mask, "last_node": self.last_node, "current_load": self.current_load}


class MRCVRPEnv(SingleRoutingEnv):
    """One multi-resource CVRP instance x N trajectories (see ``MRCVRPVectorEnv``)."""

    vector_class = MRCVRPVectorEnv
