"""The state wrapper: the environment's NumPy observation dict -> tensors on the model's device.

Static arrays (the instance) are converted once per rollout, the small dynamic arrays every step.
Floats become float32, node indices int64; masks stay bool (True = allowed).
"""

from __future__ import annotations

import numpy as np
import torch

from envs.instances import STATIC_KEYS

DYNAMIC_KEYS = {
    "tsp": ("action_mask", "first_node", "last_node", "is_initial_action"),
    "cvrp": ("action_mask", "last_node", "current_load"),
    "mtvrp": ("action_mask", "last_node", "remaining_linehaul", "remaining_backhaul", "current_time", "route_length"),
}


class StateWrapper:
    """Converts observations of one problem for one device.

    ``static(obs)`` -> {coords [B, n, 2] (+ depot [B, 2], demand [B, n] for CVRP)};
    ``dynamic(obs)`` -> {action_mask [B, N, A] bool, last_node [B, N] int64, and first_node,
    is_initial_action (TSP) or current_load (CVRP) [B, N]}; ``state(static, obs)`` merges a
    converted static part with the current dynamic part.
    """

    def __init__(self, problem: str, device: torch.device | str = "cpu"):
        self.problem = problem
        self.device = torch.device(device)

    def static(self, obs: dict) -> dict:
        return {key: self._tensor(obs[key]) for key in STATIC_KEYS[self.problem]}

    def dynamic(self, obs: dict) -> dict:
        return {key: self._tensor(obs[key]) for key in DYNAMIC_KEYS[self.problem]}

    def state(self, static: dict, obs: dict) -> dict:
        return {**static, **self.dynamic(obs)}

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        array = np.asarray(array)
        if array.dtype.kind == "f":
            array = array.astype(np.float32, copy=False)
        elif array.dtype.kind in "iu":
            array = array.astype(np.int64, copy=False)
        return torch.from_numpy(np.ascontiguousarray(array)).to(self.device, non_blocking=True)
