"""The state wrapper: the environment's NumPy observation dict -> tensors on the model's device.

Static arrays (the instance) are converted once per rollout, the small dynamic arrays every step.
Floats become float32, node indices int64; masks stay bool (True = allowed).

Host-device traffic per step: each dynamic array is one copy to the device, staged in pinned
(page-locked) memory and sent without blocking on a GPU (``tensor``); the actions the env needs
come back in one copy (``numpy``), the only synchronisation of a step. On the CPU both are free
(the tensor shares the array's memory). Both run under a profiler label (``host_to_device``,
``device_to_host``) so that ``bench/host_traffic.py`` can count them per step.
"""

from __future__ import annotations

import numpy as np
import torch
from ppoor.envs.instances import STATIC_KEYS

DYNAMIC_KEYS = {
    "tsp": ("action_mask", "first_node", "last_node", "is_initial_action"),
    "cvrp": ("action_mask", "last_node", "current_load"),
    "mtvrp": (
        *("action_mask", "last_node", "route_depot"),
        *("remaining_linehaul", "remaining_backhaul", "current_time", "route_length"),
    ),
    "mrcvrp": ("action_mask", "last_node", "current_load"),
    "pdp": ("action_mask", "last_node", "current_load"),
    "op": ("action_mask", "last_node", "remaining_length"),
    "pctsp": ("action_mask", "last_node", "remaining_prize"),
    "pcvrp": ("action_mask", "last_node", "current_load"),
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
        return {key: self.tensor(obs[key]) for key in STATIC_KEYS[self.problem]}

    def dynamic(self, obs: dict) -> dict:
        return {key: self.tensor(obs[key]) for key in DYNAMIC_KEYS[self.problem]}

    def state(self, static: dict, obs: dict) -> dict:
        return {**static, **self.dynamic(obs)}

    def tensor(self, array: np.ndarray) -> torch.Tensor:
        """One NumPy array -> a tensor on the device (float32 / int64 / bool), in one
        non-blocking copy from pinned memory on a GPU. The pinned block is fresh for each copy (torch's
        host allocator reuses it only once its copy has finished), so the env may overwrite its
        arrays right after the call."""
        array = np.asarray(array)
        if array.dtype.kind == "f":
            array = array.astype(np.float32, copy=False)
        elif array.dtype.kind in "iu":
            array = array.astype(np.int64, copy=False)
        with torch.profiler.record_function("host_to_device"):
            host = torch.from_numpy(np.ascontiguousarray(array))
            if self.device.type != "cuda":
                return host.to(self.device)
            return host.pin_memory().to(self.device, non_blocking=True)

    @staticmethod
    def numpy(x: torch.Tensor) -> np.ndarray:
        """A device tensor -> a NumPy array: one blocking copy (a synchronisation on a GPU)."""
        with torch.profiler.record_function("device_to_host"):
            return x.cpu().numpy()
