"""Evaluation throughput: instances per second for TSP and CVRP (50 nodes by default) on one thread (or --threads).

For greedy, multi-greedy (one start per node), greedy x8 augmentation, multi-greedy x8 (8 x n
trajectories per instance) and beam search of width --beam-width (RL4CO's beam_search beside it: W
distinct starts, then one beam of W; ours searches the first step too), at each of --num-nodes, our cached decoder against re-encoding at every step (the way the paper's original
evaluation runs) and against RL4CO's Attention Model policy (same architecture, untrained, the same
instances, batch size, thread and trajectories per instance; ``pip install -e
".[bench]"``; left out with a note where RL4CO is not installed), all measured in this
run, on the first Kool test instances. One external figure stays quoted: the original RLOR
evaluation took 79 s per 1,000 TSP50 instances in multi-greedy (12.7/s) on one thread here.

Each cached figure is the median of --repeats runs after a warm-up; the process keeps freed memory
for reuse as ppo_or.py and eval.py do (``models.keep_freed_memory``). ``--compile`` also times our
decoder with its step compiled (``models.compile_step``), compiled afresh for each decode as one
eval.py run compiles for its own, the compiling left to the warm-up.

    python bench/eval_throughput.py [--instances 500] [--batch-size 250] [--repeats 3]
    python bench/eval_throughput.py --num-nodes 50 100 --instances 200 --batch-size 100
    python bench/eval_throughput.py --threads 2    # both sides on two threads
    python bench/eval_throughput.py --compile      # also our decode step compiled (torch.compile)
"""

import argparse
import copy
import os
import sys
import time

import numpy as np
import torch
from ppoor.envs import kool_dataset  # noqa: E402
from ppoor.models import Agent, compile_step, compiler_problem  # noqa: E402
from ppoor.search import Decoding, decode  # noqa: E402
from ppoor.training.runtime import keep_freed_memory  # noqa: E402

SETTINGS = [("greedy", 1), ("multi-greedy", 1), ("greedy", 8), ("multi-greedy", 8), ("beam", 1)]


def rate(agent, data, mode, copies, batch_size, reencode, repeats, width=4):
    """Instances/s of ``decode``: the median of ``repeats`` timed runs after a warm-up on 2 instances
    and on one batch (two shapes: a compiled step then holds a graph for any batch size; ``width``:
    the beam's)."""
    decoding = Decoding(mode, augment=copies, beam_width=width, batch_size=batch_size)
    decode(agent, {k: v[:2] for k, v in data.items()}, decoding, reencode=reencode)
    decode(agent, {k: v[:batch_size] for k, v in data.items()}, decoding, reencode=reencode)
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        decode(agent, data, decoding, reencode=reencode)
        rates.append(len(data["coords"]) / (time.perf_counter() - start))
    return float(np.median(rates))


def rl4co_rate(problem, data, mode, copies, batch_size, repeats, width=4):
    """Instances/s of RL4CO's decoding of the same instances (median of ``repeats``), None without RL4CO."""
    try:
        from rl4co_peer import rl4co_decode, rl4co_policy
    except ImportError:
        return None
    env, policy = rl4co_policy(problem, data["coords"].shape[1])
    multi, beam = mode == "multi-greedy", width if mode == "beam" else None
    rl4co_decode(policy, env, {k: v[:2] for k, v in data.items()}, multi, copies, batch_size, problem, beam)
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        rl4co_decode(policy, env, data, multi, copies, batch_size, problem, beam)
        rates.append(len(data["coords"]) / (time.perf_counter() - start))
    return float(np.median(rates))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=500, help="instances for the cached decoder")
    parser.add_argument("--baseline-instances", type=int, default=40, help="instances for the re-encoding baseline")
    parser.add_argument("--batch-size", type=int, default=250)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per figure (the median is printed)")
    parser.add_argument("--num-nodes", type=int, nargs="+", default=[50], help="sizes (Kool's: 20, 50, 100)")
    parser.add_argument("--beam-width", type=int, default=16, help="the beam search's width (at least 2, as RL4CO's)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of both sides (1 to the cores here)")
    parser.add_argument("--skip-reencoding", action="store_true", help="leave out the re-encoding baseline")
    parser.add_argument(
        "--compile", action="store_true", help="also time our decoder with its step compiled (models.compile_step)"
    )
    args = parser.parse_args()
    if not 1 <= args.threads <= (os.cpu_count() or 1):
        sys.exit(f"error: --threads must be between 1 and {os.cpu_count()} (the cores here), got {args.threads}")
    if any(n not in (20, 50, 100) for n in args.num_nodes):
        sys.exit(f"error: --num-nodes takes Kool's sizes 20, 50 and 100, got {args.num_nodes}")
    if args.beam_width < 2:
        sys.exit(f"error: --beam-width must be at least 2 (RL4CO's beam search needs it), got {args.beam_width}")
    if min(args.instances, args.baseline_instances, args.batch_size, args.repeats) < 1:
        sys.exit("error: --instances, --baseline-instances, --batch-size and --repeats must be at least 1")
    if args.compile and (problem := compiler_problem()):
        sys.exit(f"error: --compile: {problem}")
    torch.set_num_threads(args.threads)
    keep_freed_memory()  # as ppo_or.py and eval.py run
    torch.manual_seed(0)
    print(f"{args.threads} thread(s), instances/s (untrained weights: speed does not depend on them)")
    for nodes, problem in ((n, p) for n in args.num_nodes for p in ("tsp", "cvrp")):
        agent = Agent(problem).eval()
        data = kool_dataset(problem, nodes, "test", args.instances)
        small = {k: v[: args.baseline_instances] for k, v in data.items()}
        for mode, copies in SETTINGS:
            name = mode + (f" x{copies}" if copies > 1 else "") + (f" W={args.beam_width}" if mode == "beam" else "")
            cached = rate(agent, data, mode, copies, args.batch_size, False, args.repeats, args.beam_width)
            if mode == "beam" or args.skip_reencoding:  # (beam search always decodes from the cache)
                line = f"{problem.upper()}{nodes} {name:<16}: cached {cached:8.1f}/s"
            else:
                reencoded = rate(agent, small, mode, copies, args.batch_size, True, 1)
                line = f"{problem.upper()}{nodes} {name:<16}: cached {cached:8.1f}/s, re-encoding {reencoded:7.1f}/s, ratio {cached / reencoded:5.1f}x"
            compiled = None
            if args.compile:  # compiled afresh for each decode, as one eval.py run compiles for its own
                torch._dynamo.reset()
                compiled_agent = compile_step(copy.deepcopy(agent))
                compiled = rate(
                    compiled_agent, data, mode, copies, args.batch_size, False, args.repeats, args.beam_width
                )
            if compiled:
                line += f", compiled {compiled:8.1f}/s"
            peer = rl4co_rate(problem, data, mode, copies, args.batch_size, args.repeats, args.beam_width)
            if peer:
                line += f"; RL4CO {peer:7.1f}/s ({cached / peer:.1f}x" + (
                    f", compiled {compiled / peer:.1f}x)" if compiled else ")"
                )
            else:
                line += "; RL4CO not installed"
            if problem == "tsp" and nodes == 50 and name == "multi-greedy":
                line += f"; original RLOR eval: 12.7/s ({cached / 12.7:.1f}x)"
            print(line, flush=True)


if __name__ == "__main__":
    main()
