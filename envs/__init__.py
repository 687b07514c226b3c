"""Bi-level vectorized NumPy environments for routing problems, registered with gymnasium.

``import envs`` registers ``tsp-v0`` and ``cvrp-v0``:
``gymnasium.make("tsp-v0", num_nodes=50, n_traj=50)`` gives one instance x N trajectories;
``gymnasium.make_vec("tsp-v0", num_envs=1024, vectorization_mode="vector_entry_point",
num_nodes=50, n_traj=50)`` gives the native M x N vector env.
"""

import gymnasium as gym

from envs.cvrp import CVRPEnv, CVRPVectorEnv
from envs.instances import check_instances, cvrp_capacity, kool_dataset, random_instances
from envs.tsp import TSPEnv, TSPVectorEnv

ENV_IDS = {"tsp-v0": "tsp", "cvrp-v0": "cvrp"}
VECTOR_ENVS = {"tsp": TSPVectorEnv, "cvrp": CVRPVectorEnv}

for _env_id, _single, _vector in (("tsp-v0", TSPEnv, TSPVectorEnv), ("cvrp-v0", CVRPEnv, CVRPVectorEnv)):
    if _env_id not in gym.registry:
        gym.register(
            id=_env_id,
            entry_point=_single,
            vector_entry_point=_vector,
            disable_env_checker=True,
        )

__all__ = [
    "CVRPEnv",
    "CVRPVectorEnv",
    "ENV_IDS",
    "TSPEnv",
    "TSPVectorEnv",
    "VECTOR_ENVS",
    "check_instances",
    "cvrp_capacity",
    "kool_dataset",
    "random_instances",
]
