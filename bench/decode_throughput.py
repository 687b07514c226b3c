"""Decoding throughput of the Attention Model: full greedy rollouts of TSP50 on one thread.

(a) the cached encoder (encode once per rollout) against re-encoding at every step, for one
    trajectory per instance (greedy) and for N = 50 (multi-greedy);
(b) N = 50 trajectories decoded in parallel against the same 50 decoded one after another
    (each a cached rollout of one trajectory).
Unit: node selections per second (trajectory-steps/s). Untrained weights (speed does not depend on
them).

    python bench/decode_throughput.py [--instances 64] [--num-nodes 50]
"""

import argparse
import time

import torch
from ppoor.envs import kool_dataset  # noqa: E402
from ppoor.models import Agent  # noqa: E402
from ppoor.search import rollout  # noqa: E402


def rate(agent, instances, n_traj, reencode=False, repeat=1):
    start = time.perf_counter()
    selections = 0
    for _ in range(repeat):
        _, _, steps = rollout(agent, instances, n_traj, num_starts=n_traj if n_traj > 1 else None, reencode=reencode)
        selections += int(steps.sum())
    return selections / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=64)
    parser.add_argument("--num-nodes", type=int, default=50)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    agent = Agent("tsp").eval()
    data = kool_dataset("tsp", args.num_nodes, "test", args.instances)
    n = args.num_nodes
    print(f"TSP{n}, {args.instances} instances, 1 thread, node selections/s")
    for traj in (1, n):
        cached, reencoded = rate(agent, data, traj), rate(agent, data, traj, reencode=True)
        print(
            f"(a) N={traj:>3}: cached encoder {cached:,.0f}/s, re-encoding every step {reencoded:,.0f}/s, ratio {cached / reencoded:.1f}x"
        )
    parallel = rate(agent, data, n)
    sequential = rate(agent, data, 1, repeat=n)
    print(
        f"(b) N={n}: parallel {parallel:,.0f}/s, one after another {sequential:,.0f}/s, ratio {parallel / sequential:.1f}x"
    )


if __name__ == "__main__":
    main()
