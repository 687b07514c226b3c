"""Bi-level vectorized NumPy environments for routing problems, registered with gymnasium.

``import envs`` registers ``tsp-v0``, ``cvrp-v0``, the 47 other VRP variants of RouteFinder
(``ovrp-v0`` .. ``mdovrpmbltw-v0``, see ``envs.vrp``; ``mdvrp-v0`` is ``mdcvrp-v0``), ``mtvrp-v0``
(one of the 16 classic variants drawn per instance, RL4CO's mix) and ``mtvrp48-v0`` (one of all
48), and the further constraint families: ``mrcvrp-v0`` (two resources, ``envs.mrcvrp``), ``pdp-v0``
and ``cpdp-v0`` (pickup and delivery, ``envs.pdp``), ``op-v0`` (with ``op-const-v0`` /
``op-unif-v0`` for Kool et al.'s other prize types), ``pctsp-v0`` and ``pcvrp-v0`` (prize
collecting, ``envs.prize``):
``gymnasium.make("vrptw-v0", num_nodes=50, n_traj=50)`` gives one instance x N trajectories;
``gymnasium.make_vec("tsp-v0", num_envs=1024, vectorization_mode="vector_entry_point",
num_nodes=50, n_traj=50)`` gives the native M x N vector env.
"""

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
from ppoor.envs.cvrp import CVRPEnv, CVRPVectorEnv
from ppoor.envs.instances import (
    KOOL_SEEDS,
    check_instances,
    cvrp_capacity,
    kool_dataset,
    random_instances,
    standard_count,
)
from ppoor.envs.mrcvrp import MRCVRPEnv, MRCVRPVectorEnv
from ppoor.envs.pdp import PDPEnv, PDPVectorEnv
from ppoor.envs.prize import OPEnv, OPVectorEnv, PCTSPEnv, PCTSPVectorEnv, PCVRPEnv, PCVRPVectorEnv
from ppoor.envs.tsp import TSPEnv, TSPVectorEnv
from ppoor.envs.vrp import TEST_SET_SIZE, VARIANTS, VRPEnv, VRPVectorEnv, vrp_dataset

ENV_IDS = {"tsp-v0": "tsp", "cvrp-v0": "cvrp"}
"""env id -> problem (the model family: tsp, cvrp, or mtvrp for the multi-task VRP env)."""
ENV_VARIANTS = {f"{name}-v0": name for name in VARIANTS if name != "cvrp"}
ENV_VARIANTS |= {"mdvrp-v0": "mdcvrp", "mtvrp-v0": "classic", "mtvrp48-v0": "all"}
"""env id -> VRP variant of the multi-task env (``cvrp-v0`` keeps its own env and model, which the
published RLOR checkpoint needs; the multi-task env's "cvrp" variant is the same problem)."""
ENV_IDS |= dict.fromkeys(ENV_VARIANTS, "mtvrp")
FAMILY_ENVS = {  # env id -> (single env, vector env, variant or None)
    "mrcvrp-v0": (MRCVRPEnv, MRCVRPVectorEnv, None),
    "pdp-v0": (PDPEnv, PDPVectorEnv, "pdp"),
    "cpdp-v0": (PDPEnv, PDPVectorEnv, "cpdp"),
    "op-v0": (OPEnv, OPVectorEnv, "dist"),
    "op-const-v0": (OPEnv, OPVectorEnv, "const"),
    "op-unif-v0": (OPEnv, OPVectorEnv, "unif"),
    "pctsp-v0": (PCTSPEnv, PCTSPVectorEnv, None),
    "pcvrp-v0": (PCVRPEnv, PCVRPVectorEnv, None),
}
ENV_IDS |= {env_id: vector.problem for env_id, (_, vector, _) in FAMILY_ENVS.items()}
ENV_VARIANTS |= {env_id: variant for env_id, (_, _, variant) in FAMILY_ENVS.items() if variant}
VECTOR_ENVS = {"tsp": TSPVectorEnv, "cvrp": CVRPVectorEnv, "mtvrp": VRPVectorEnv}
VECTOR_ENVS |= {vector.problem: vector for _, vector, _ in FAMILY_ENVS.values()}


def instance_kwargs(problem: str, instances: dict) -> dict:
    """The env arguments that fixed ``instances`` (static arrays [M, ...]) set: the number of depots of
    VRP instances."""
    shape = np.shape(instances.get("depots")) if problem == "mtvrp" else ()
    return {"num_depots": shape[1]} if len(shape) == 3 and shape[1] >= 1 else {}


@dataclass(frozen=True)
class EnvSizes:
    """The sizes of a registered env at one ``num_nodes``, read off the env itself."""

    starts: int
    """distinct first actions of a multi-start rollout (``start_actions``)"""
    actions: int
    """A: the actions (nodes, depots first)"""
    max_episode_steps: int
    """the longest an episode can be"""


def env_sizes(env_id: str, num_nodes: int) -> EnvSizes:
    """The sizes of the registered env ``env_id`` (its variant and depots included) at ``num_nodes``,
    from one instance of it: the one source the trainer's defaults and memory checks read. Raises
    ValueError when the env cannot take the size."""
    env = gym.make_vec(env_id, num_envs=1, vectorization_mode="vector_entry_point", num_nodes=num_nodes, n_traj=1)
    return EnvSizes(len(env.start_actions), env.num_actions, env.max_episode_steps)


def start_count(problem: str, num_nodes: int, **kwargs) -> int:
    """How many distinct first actions a multi-start rollout has (TSP: every node; the depot problems:
    every customer; pickup and delivery: the pickups; several depots: the customers and the other
    depots). ``kwargs``: further env arguments (``instance_kwargs``)."""
    return len(VECTOR_ENVS[problem](num_envs=1, num_nodes=num_nodes, **kwargs).start_actions)


def standard_dataset(
    problem: str, num_nodes: int, split: str = "test", num_instances: int | None = None, variant: str | None = None
) -> dict:
    """The fixed test ("test") or validation ("val") set of a problem: Kool et al.'s for TSP and CVRP,
    RouteFinder's for ``variant`` (default: the classic mix) of the VRP (``envs.vrp.vrp_dataset``);
    for the other families the first ``num_instances`` of 1,000 instances their env draws from seed
    1234 (test) or 4321 (val), of ``variant`` where the family has several."""
    if problem == "mtvrp":
        return vrp_dataset(variant or "classic", num_nodes, split, num_instances)
    if problem in ("tsp", "cvrp"):
        return kool_dataset(problem, num_nodes, split, num_instances)
    count = standard_count(split, num_instances, TEST_SET_SIZE)
    env = VECTOR_ENVS[problem](num_envs=1, num_nodes=num_nodes, **({"variant": variant} if variant else {}))
    env.rng = np.random.default_rng(KOOL_SEEDS[split])
    return {key: value[:count] for key, value in env.random_instances(TEST_SET_SIZE).items()}


for _env_id, _single, _vector in (("tsp-v0", TSPEnv, TSPVectorEnv), ("cvrp-v0", CVRPEnv, CVRPVectorEnv)):
    if _env_id not in gym.registry:
        gym.register(id=_env_id, entry_point=_single, vector_entry_point=_vector, disable_env_checker=True)
for _env_id, _variant in ENV_VARIANTS.items():
    if _env_id not in gym.registry and ENV_IDS[_env_id] == "mtvrp":
        gym.register(
            id=_env_id,
            entry_point=VRPEnv,
            vector_entry_point=VRPVectorEnv,
            disable_env_checker=True,
            kwargs={"variant": _variant},
        )
for _env_id, (_single, _vector, _variant) in FAMILY_ENVS.items():
    if _env_id not in gym.registry:
        gym.register(
            id=_env_id,
            entry_point=_single,
            vector_entry_point=_vector,
            disable_env_checker=True,
            kwargs={"variant": _variant} if _variant else {},
        )

__all__ = [
    "EnvSizes",
    "env_sizes",
    "CVRPEnv",
    "CVRPVectorEnv",
    "ENV_IDS",
    "ENV_VARIANTS",
    "FAMILY_ENVS",
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
    "instance_kwargs",
    "start_count",
]
