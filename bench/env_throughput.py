"""Environment throughput: the native bi-level vector env against a Python loop over single envs.

Node selections per second (trajectory-steps/s) for TSP50 and CVRP50 at M instances x N
trajectories, one thread, random allowed actions drawn the same way for both (drawing excluded
from the timed part). The loop baseline is the structure of the paper's reference implementation:
one NumPy env of N trajectories per instance, stepped one after another.

    python bench/env_throughput.py [--num-envs 1024] [--n-traj 50] [--num-nodes 50]
"""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from envs import VECTOR_ENVS  # noqa: E402
from envs.cvrp import CVRPEnv  # noqa: E402
from envs.tsp import TSPEnv  # noqa: E402

SINGLE_ENVS = {"tsp": TSPEnv, "cvrp": CVRPEnv}


def random_allowed(mask, rng):
    return np.where(mask, rng.random(mask.shape), -1.0).argmax(-1)


def native(problem, m, n, traj, seed):
    env = VECTOR_ENVS[problem](num_envs=m, num_nodes=n, n_traj=traj)
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


def loop(problem, m, n, traj, seed):
    envs = [SINGLE_ENVS[problem](num_nodes=n, n_traj=traj) for _ in range(m)]
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    obs = [env.reset(seed=seed + i)[0] for i, env in enumerate(envs)]
    timed, selections = time.perf_counter() - start, 0
    while not all(env.vec.terminated.all() for env in envs):
        for i, env in enumerate(envs):
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
    args = parser.parse_args()
    m, traj, n = args.num_envs, args.n_traj, args.num_nodes
    print(f"M={m} instances x N={traj} trajectories, {n} nodes, 1 thread")
    for problem in ("tsp", "cvrp"):
        fast = max((native(problem, m, n, traj, seed) for seed in range(args.repeats)), key=lambda r: r[0] / r[1])
        slow = loop(problem, m, n, traj, 0)
        fast_rate, slow_rate = fast[0] / fast[1], slow[0] / slow[1]
        print(
            f"{problem.upper()}{n}: native {fast_rate:,.0f} node selections/s, "
            f"loop over single envs {slow_rate:,.0f}/s, ratio {fast_rate / slow_rate:.1f}x"
        )


if __name__ == "__main__":
    main()
