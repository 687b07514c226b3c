"""Pickup and delivery: n/2 pickup-delivery pairs served by one vehicle from the depot and back,
each delivery after its pickup (the setting of Li et al. 2021, "Heterogeneous Attention Model for
PDP"); ``cpdp`` adds a load per pair and a vehicle capacity.

Action 0 is the depot, action i >= 1 node i - 1 of ``coords``: nodes 1..n/2 are the pickups and
node i + n/2 is the delivery of pickup i. The vehicle starts at the depot; a pickup is allowed while
unvisited (and, cpdp, while its ``load`` fits the capacity left), a delivery once its pickup has
been visited; the depot only after every node, which ends the episode. Reward: minus the length of
each move. ``load`` [M, n/2] holds each pair's load as a fraction of the capacity (all 0 for pdp).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from ppoor.envs.base import DepotVectorEnv, SingleRoutingEnv
from ppoor.envs.instances import STATIC_KEYS as INSTANCE_KEYS
from ppoor.envs.instances import check_arrays, read_arrays

STATIC_KEYS = INSTANCE_KEYS["pdp"]
PDP_VARIANTS = ("pdp", "cpdp")
CAPACITY = 20.0  # cpdp: loads 1..9 over a capacity of 20, about four pairs on board at once
LOAD_TOLERANCE = 1e-5


def check_pdp_variant(variant: str) -> str:
    if variant not in PDP_VARIANTS:
        raise ValueError(f"variant must be one of {PDP_VARIANTS}, got {variant!r}")
    return variant


def check_pairs(num_nodes: int) -> None:
    if num_nodes % 2:
        raise ValueError(
            f"pickup and delivery needs an even number of nodes (n/2 pickups, then their deliveries); with {num_nodes}"
            f" nodes, node {num_nodes} would be a delivery without its pickup"
        )


def pdp_instances(rng: np.random.Generator, num_instances: int, num_nodes: int, variant: str = "pdp") -> dict:
    """Depot and nodes uniform in the unit square (Li et al.); cpdp: each pair's load an integer
    1..9 over a capacity of 20 (pdp: 0). The loads are drawn in both variants, so one seed gives the
    same points."""
    check_pdp_variant(variant)
    check_pairs(num_nodes)
    points = rng.uniform(size=(num_instances, num_nodes + 1, 2))
    load = rng.integers(1, 10, size=(num_instances, num_nodes // 2)) / CAPACITY
    return {"depot": points[:, 0], "coords": points[:, 1:], "load": load if variant == "cpdp" else np.zeros_like(load)}


def check_pdp_instances(instances: dict, num_instances: int | None = None, num_nodes: int | None = None) -> dict:
    """Validates pickup-and-delivery instances (``STATIC_KEYS``, ``load`` [M, n/2]); returns float64
    arrays. ``ValueError`` names what to fix."""
    out, m, n = read_arrays("pdp", instances, STATIC_KEYS, num_instances, num_nodes)
    check_pairs(n)
    check_arrays(out, {"depot": (m, 2), "coords": (m, n, 2), "load": (m, n // 2)})
    if (out["load"] < 0).any():
        raise ValueError("'load' must not be negative")
    if (out["load"] > 1 + LOAD_TOLERANCE).any():
        b, i = np.argwhere(out["load"] > 1 + LOAD_TOLERANCE)[0]
        raise ValueError(f"pair {i + 1} of instance {b} loads more than the vehicle capacity ({out['load'][b, i]:.4g})")
    return out


class PDPVectorEnv(DepotVectorEnv):
    """M pickup-and-delivery instances x N trajectories. Actions are 0 (depot) .. n (nodes).

    Dynamic observation: ``action_mask`` [M, N, n + 1], ``last_node`` [M, N] (0 = depot),
    ``current_load`` [M, N] (the load on board, a fraction of the capacity).
    """

    problem = "pdp"
    trajectory_state = (*DepotVectorEnv.trajectory_state, "current_load")

    def __init__(self, num_envs: int = 1, num_nodes: int = 20, n_traj: int = 1, variant: str = "pdp"):
        check_pairs(num_nodes)
        self.variant = check_pdp_variant(variant)
        super().__init__(num_envs=num_envs, num_nodes=num_nodes, n_traj=n_traj)

    @property
    def max_episode_steps(self) -> int:
        return self.num_nodes + 1

    @property
    def start_actions(self) -> np.ndarray:
        """The pickups: the only nodes a tour can start with."""
        return np.arange(1, self.num_nodes // 2 + 1)

    def random_instances(self, count: int) -> dict:
        return pdp_instances(self.rng, count, self.num_nodes, self.variant)

    def check_instances(self, options: dict) -> dict:
        return check_pdp_instances(options, self.num_envs, self.num_nodes)

    def _dynamic_spaces(self, lead: tuple) -> dict:
        return {
            "depot": gym.spaces.Box(0.0, 1.0, (*lead, 2), np.float64),
            "load": gym.spaces.Box(0.0, 1.0, (*lead, self.num_nodes // 2), np.float64),
            "current_load": gym.spaces.Box(0.0, 1.0, (*lead, self.n_traj), np.float64),
        }

    def _start(self) -> None:
        shape, s, half = (self.num_envs, self.n_traj), self.static, self.num_nodes // 2
        self._set_points(np.concatenate([s["depot"][:, None], s["coords"]], axis=1))
        # the load change at each action: + at a pickup, - at its delivery, 0 at the depot
        self.node_load = np.concatenate([np.zeros((self.num_envs, 1)), s["load"], -s["load"]], axis=1)
        self._pickup_load = self.node_load[:, None, 1 : half + 1].astype(np.float32)
        self.unvisited = np.ones((*shape, self.num_actions), dtype=bool)
        self.num_served = np.zeros(shape, dtype=np.int64)
        self.last_node = np.zeros(shape, dtype=np.int64)
        self.current_load = np.zeros(shape)
        self._place(self.last_node)
        self._update_mask()

    def _move(self, actions: np.ndarray) -> np.ndarray:
        reward = -self._move_length(actions)
        self.current_load = self.current_load + self.node_load[self._rows, actions]
        self.unvisited[self._rows, self._cols, actions] = False
        self.num_served += actions != 0
        self.last_node = actions.copy()
        self.terminated |= actions == 0  # the depot is allowed only after every node
        self._update_mask()
        return reward

    def _update_mask(self) -> None:
        half = self.num_nodes // 2
        mask = self.unvisited.copy()
        room = (1.0 - self.current_load + LOAD_TOLERANCE).astype(np.float32)[..., None]
        mask[..., 1 : half + 1] &= self._pickup_load <= room
        mask[..., half + 1 :] &= ~self.unvisited[..., 1 : half + 1]  # a delivery after its pickup
        mask[..., 0] = self.num_served == self.num_nodes  # a finished trajectory stays there
        self.action_mask = mask

    def _dynamic_observation(self) -> dict:
        return {"action_mask": self.action_mask, "last_node": self.last_node, "current_load": self.current_load}


class PDPEnv(SingleRoutingEnv):
    """One pickup-and-delivery instance x N trajectories (see ``PDPVectorEnv``; ``variant`` pdp or cpdp)."""

    vector_class = PDPVectorEnv
