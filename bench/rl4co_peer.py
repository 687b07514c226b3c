"""RL4CO as a peer for the benchmarks: its envs and policies (its POMO on its multi-task VRP env is
RouteFinder's MTPOMO baseline), fed our instances, their tours scored by our checker.

RL4CO (``pip install -r requirements-bench.txt``) holds instances as TensorDicts. TSP: ``locs``
[B, n, 2]. CVRP: ``locs`` [B, n, 2] (customers), ``depot`` [B, 2], ``demand`` [B, n] (fractions of
the capacity), ``capacity`` [B, 1]. Multi-task VRP: ``locs`` [B, n + 1, 2] (depot first), demands
[B, n + 1] (the depot's 0), ``time_windows`` [B, n + 1, 2], ``service_time`` [B, n + 1],
``distance_limit``, ``open_route``, ``vehicle_capacity``, ``capacity_original``, ``speed`` [B, 1];
only classic backhauls and one depot exist there (RL4CO 0.7). Its actions are TSP permutations, or
customers 1..n with 0 for the depot, the start implied, padded with 0: our one-depot actions once the
repeats are dropped and the final return added.
"""

from __future__ import annotations

import numpy as np
import torch
from ppoor.envs.vrp import vehicle_capacity


def rl4co_instances(problem: str, instances: dict):
    """Our arrays of ``problem`` (tsp, cvrp, mtvrp with one depot) -> RL4CO's TensorDict."""
    from tensordict import TensorDict

    m = len(instances["coords"])
    as_tensor = lambda x: torch.as_tensor(np.asarray(x), dtype=torch.float32)  # noqa: E731
    if problem == "tsp":
        return TensorDict({"locs": as_tensor(instances["coords"])}, batch_size=[m])
    if problem == "cvrp":
        arrays = {"locs": instances["coords"], "depot": instances["depot"], "demand": instances["demand"]}
        return TensorDict({k: as_tensor(v) for k, v in arrays.items()} | {"capacity": torch.ones(m, 1)}, batch_size=[m])
    if instances["depots"].shape[1] != 1 or (instances["backhaul_class"] != 1).any():
        raise ValueError("RL4CO's multi-task VRP has one depot and classic backhauls only")
    zero = np.zeros((m, 1))
    return TensorDict(
        {
            "locs": as_tensor(np.concatenate([instances["depots"], instances["coords"]], axis=1)),
            "demand_linehaul": as_tensor(np.concatenate([zero, instances["demand_linehaul"]], axis=1)),
            "demand_backhaul": as_tensor(np.concatenate([zero, instances["demand_backhaul"]], axis=1)),
            "distance_limit": as_tensor(instances["distance_limit"][:, None]),
            "time_windows": as_tensor(instances["time_windows"]),
            "service_time": as_tensor(instances["service_time"]),
            "vehicle_capacity": torch.ones(m, 1),
            "capacity_original": torch.full((m, 1), float(vehicle_capacity(instances["coords"].shape[1]))),
            "open_route": torch.as_tensor(np.asarray(instances["open_route"])[:, None], dtype=torch.bool),
            "speed": torch.ones(m, 1),
        },
        batch_size=[m],
    )


def our_tour(actions: np.ndarray) -> np.ndarray:
    """RL4CO's action row -> our actions (no repeated depot, ending at the depot)."""
    tour = [int(a) for a in actions]
    tour = [a for i, a in enumerate(tour) if a != 0 or (i > 0 and tour[i - 1] != 0)]
    if tour and tour[0] == 0:
        tour = tour[1:]
    return np.asarray(tour + ([0] if not tour or tour[-1] != 0 else []), dtype=np.int64)


def rl4co_policy(problem: str, num_nodes: int):
    """RL4CO's env and its Attention Model policy (untrained: for speed) for tsp or cvrp."""
    from rl4co.envs import CVRPEnv, TSPEnv
    from rl4co.models import AttentionModelPolicy

    env = {"tsp": TSPEnv, "cvrp": CVRPEnv}[problem](generator_params={"num_loc": num_nodes})
    return env, AttentionModelPolicy(env_name=problem).eval()


@torch.no_grad()
def rl4co_decode(
    policy, env, instances: dict, multi: bool, copies: int, batch_size: int = 100, problem: str = "mtvrp"
) -> list[np.ndarray]:
    """The best tour per instance of RL4CO's decoding: greedy (``multi`` False) or POMO's multi-start
    greedy from every node (TSP) or customer, over ``copies`` dihedral augmentations (1 or 8), in
    batches; as our actions."""
    from rl4co.data.transforms import StateAugmentation
    from rl4co.utils.ops import unbatchify

    n = instances["coords"].shape[1]
    augment = StateAugmentation(num_augment=copies, augment_fn="dihedral8") if copies > 1 else None
    tours = []
    for start in range(0, len(instances["coords"]), batch_size):
        part = {key: value[start : start + batch_size] for key, value in instances.items()}
        td = env.reset(rl4co_instances(problem, part))
        if augment is not None:
            td = augment(td)
        out = policy(td, env, decode_type="multistart_greedy" if multi else "greedy", num_starts=n if multi else 0)
        shape = (copies, n) if multi and copies > 1 else n if multi else copies
        reward = unbatchify(out["reward"], shape).reshape(len(part["coords"]), -1)
        actions = unbatchify(out["actions"], shape).reshape(len(part["coords"]), reward.shape[1], -1)
        best = reward.argmax(1)
        rows = [actions[b, best[b]].numpy() for b in range(len(best))]
        tours += rows if problem == "tsp" else [our_tour(row) for row in rows]
    return tours
