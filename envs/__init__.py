"""Bi-level vectorized NumPy environments for routing problems, registered with gymnasium.

``import envs`` registers ``tsp-v0``, ``cvrp-v0``, the 15 other VRP variants (``ovrp-v0`` ..
``ovrpbltw-v0``, see ``envs.vrp``) and ``mtvrp-v0`` (the VRP attributes drawn per instance):
``gymnasium.make("vrptw-v0", num_nodes=50, n_traj=50)`` gives one instance x N trajectories;
``gymnasium.make_vec("tsp-v0", num_envs=1024, vectorization_mode="vector_entry_point",
num_nodes=50, n_traj=50)`` gives the native M x N vector env.
"""

import gymnasium as gym

from envs.cvrp import CVRPEnv, CVRPVectorEnv
from envs.instances import check_instances, cvrp_capacity, kool_dataset, random_instances
from envs.tsp import TSPEnv, TSPVectorEnv
from envs.vrp import MIXED, VARIANTS, VRPEnv, VRPVectorEnv, vrp_dataset

ENV_IDS = {"tsp-v0": "tsp", "cvrp-v0": "cvrp"}
"""env id -> problem (the model family: tsp, cvrp, or mtvrp for the multi-task VRP env)."""
ENV_VARIANTS = {f"{name}-v0": name for name in VARIANTS if name != "cvrp"} | {"mtvrp-v0": MIXED}
"""env id -> VRP variant of the multi-task env (``cvrp-v0`` keeps its own env and model, which the
published RLOR checkpoint needs; the multi-task env's "cvrp" variant is the same problem)."""
ENV_IDS |= dict.fromkeys(ENV_VARIANTS, "mtvrp")
VECTOR_ENVS = {"tsp": TSPVectorEnv, "cvrp": CVRPVectorEnv, "mtvrp": VRPVectorEnv}


def standard_dataset(
    problem: str, num_nodes: int, split: str = "test", num_instances: int | None = None, variant: str | None = None
) -> dict:
    """The fixed test ("test") or validation ("val") set of a problem: Kool et al.'s for TSP and CVRP,
    the multi-task generator's for ``variant`` (default: mixed) of the VRP (``envs.vrp.vrp_dataset``)."""
    if problem == "mtvrp":
        return vrp_dataset(variant or MIXED, num_nodes, split, num_instances)
    return kool_dataset(problem, num_nodes, split, num_instances)


for _env_id, _single, _vector in (("tsp-v0", TSPEnv, TSPVectorEnv), ("cvrp-v0", CVRPEnv, CVRPVectorEnv)):
    if _env_id not in gym.registry:
        gym.register(id=_env_id, entry_point=_single, vector_entry_point=_vector, disable_env_checker=True)
for _env_id, _variant in ENV_VARIANTS.items():
    if _env_id not in gym.registry:
        gym.register(
            id=_env_id,
            entry_point=VRPEnv,
            vector_entry_point=VRPVectorEnv,
            disable_env_checker=True,
            kwargs={"variant": _variant},
        )

__all__ = [
    "CVRPEnv",
    "CVRPVectorEnv",
    "ENV_IDS",
    "ENV_VARIANTS",
    "TSPEnv",
    "TSPVectorEnv",
    "VECTOR_ENVS",
    "VRPEnv",
    "VRPVectorEnv",
    "check_instances",
    "cvrp_capacity",
    "kool_dataset",
    "random_instances",
    "standard_dataset",
]
