"""Environment throughput: the native bi-level vector env against a Python loop over single envs.

Node selections per second (trajectory-steps/s) for TSP50, CVRP50, the VRP variants VRPTW50,
OVRPBLTW50, VRPMBLTW50 (mixed backhauls), MDOVRPMBLTW50 (three depots, every attribute) and the
48-variant mix, and the further families (MRCVRP, CPDP, OP, PCTSP, PCVRP) at M instances x N
trajectories, one thread, random allowed actions drawn the same way for both (drawing excluded from
the timed part). The loop baseline is the structure of the paper's reference
implementation: one NumPy env of N trajectories per instance, stepped one after another.

    python bench/env_throughput.py [--num-envs 1024] [--n-traj 50] [--num-nodes 50] [--env-ids tsp-v0 ...]
"""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import time  # noqa: E402

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
from ppoor import envs  # noqa: E402  (registers the env ids)

ENV_IDS = (
    "tsp-v0",
    "cvrp-v0",
    "vrptw-v0",
    "ovrpbltw-v0",
    "vrpmbltw-v0",
    "mdovrpmbltw-v0",
    "mtvrp48-v0",
    "mrcvrp-v0",
    "cpdp-v0",
    "op-v0",
    "pctsp-v0",
    "pcvrp-v0",
)


def random_allowed(mask, rng):
    return np.where(mask, rng.random(mask.shape), -1.0).argmax(-1)


def native(env_id, m, n, traj, seed):
    env = gym.make_vec(env_id, num_envs=m, vectorization_mode="vector_entry_point", num_nodes=n, n_traj=traj)
    env = env.unwrapped
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    obs, _ = env.reset(seed=seed)
    timed, selections = time.perf_counter() - start, 0
    while not env.terminated.all():
        actions = random_allowed(obs["action_mask"], rng)
        selections += int((~env.terminated).sum())
        start = time.perf_counter()
        obs, *_ = env.step(actions)
        timed += time.perf_counter() - start
    return selections, timed


def loop(env_id, m, n, traj, seed):
    singles = [gym.make(env_id, num_nodes=n, n_traj=traj).unwrapped for _ in range(m)]
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    obs = [env.reset(seed=seed + i)[0] for i, env in enumerate(singles)]
    timed, selections = time.perf_counter() - start, 0
    while not all(env.vec.terminated.all() for env in singles):
        for i, env in enumerate(singles):
            actions = random_allowed(obs[i]["action_mask"], rng)
            selections += int((~env.vec.terminated).sum())
            start = time.perf_counter()
            obs[i] = env.step(actions)[0]
            timed += time.perf_counter() - start
    return selections, timed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=1024)
    parser.add_argument("--n-traj", type=int, default=50)
    parser.add_argument("--num-nodes", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3, help="episodes timed for the native env (best kept)")
    parser.add_argument("--env-ids", nargs="+", default=list(ENV_IDS), choices=sorted(envs.ENV_IDS))
    args = parser.parse_args()
    m, traj, n = args.num_envs, args.n_traj, args.num_nodes
    print(f"M={m} instances x N={traj} trajectories, {n} nodes, 1 thread")
    for env_id in args.env_ids:
        fast = max((native(env_id, m, n, traj, seed) for seed in range(args.repeats)), key=lambda r: r[0] / r[1])
        slow = loop(env_id, m, n, traj, 0)
        fast_rate, slow_rate = fast[0] / fast[1], slow[0] / slow[1]
        print(
            f"{env_id[:-3].upper()}{n}: native {fast_rate:,.0f} node selections/s, "
            f"loop over single envs {slow_rate:,.0f}/s, ratio {fast_rate / slow_rate:.1f}x"
        )


if __name__ == "__main__":
    main()
