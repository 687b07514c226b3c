"""Ranks checkpoints and distance priors on generated instances like the files they are meant for.

A model for files (TSPLIB, CVRPLIB, Solomon) is chosen on data drawn like them, never on the files
themselves: for each size of --sizes, --instances instances of --distribution (``envs.distributions``,
the same seed --seed for every size), decoded by multi-greedy (every node a start, no augmentation)
with each checkpoint at each prior of --distance-priors (none given: the checkpoint's own). Each row
prints the mean length per size, their mean, and its ratio to the first row's (the baseline, measured
in the same run); lower is better. Every tour is checked as it is decoded (``Model.solve``).

    python bench/rank_checkpoints.py --problem tsp --distribution mixed --checkpoints tsp-general runs/RUN/ckpt/125.pt --distance-priors 5
    python bench/rank_checkpoints.py --problem cvrp --distribution x --instances 96 --checkpoints cvrp-general --distance-priors 2 3 4
    python bench/rank_checkpoints.py --problem mtvrp --distribution solomon --sizes 100 --instances 48 --checkpoints vrptw-solomon
"""

import argparse

import numpy as np
import torch
from ppoor.envs import KOOL_SEEDS
from ppoor.envs.distributions import DISTRIBUTIONS, draw
from ppoor.models import CheckpointError
from ppoor.models.attention_model import check_prior
from ppoor.search import Decoding
from ppoor.search.solver import Model


def validation_sets(problem: str, distribution: str, sizes: list[int], count: int, seed: int) -> list[dict]:
    """One set of ``count`` instances per size, each drawn from a generator seeded ``seed``; demands come
    as fractions of the capacity, so the capacity is 1."""
    sets = []
    for n in sizes:
        data = draw(problem, np.random.default_rng(seed), count, n, distribution)
        sets.append(data if problem == "tsp" else {**data, "capacity": 1.0})
    return sets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problem", choices=list(DISTRIBUTIONS), default="tsp")
    parser.add_argument("--distribution", default="mixed", help="one of the problem's (envs.distributions)")
    parser.add_argument("--checkpoints", nargs="+", required=True, help="shipped names or .pt files; the first is the baseline")
    parser.add_argument("--distance-priors", nargs="*", type=float, default=[], help="priors B to decode with (default: each checkpoint's own)")
    parser.add_argument("--sizes", nargs="+", type=int, default=[100, 200], help="nodes (TSP) or customers per instance")
    parser.add_argument("--instances", type=int, default=192, help="instances per size")
    parser.add_argument("--seed", type=int, default=KOOL_SEEDS["val"], help="the validation seed of ppo_or.py's runs by default")
    parser.add_argument("--batch-size", type=int, default=32, help="instances decoded at once")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    if args.distribution not in DISTRIBUTIONS[args.problem]:
        parser.error(f"--distribution: {args.problem} draws {', '.join(DISTRIBUTIONS[args.problem])}, not {args.distribution!r}")
    if min(args.sizes) < 2 or args.instances < 1 or args.batch_size < 1 or args.threads < 1:
        parser.error("--sizes must be at least 2, --instances, --batch-size and --threads at least 1")
    try:
        args.distance_priors = [check_prior(b) for b in args.distance_priors]
    except ValueError as exc:
        parser.error(f"--distance-priors: {exc}")
    torch.set_num_threads(args.threads)
    try:
        models = [(name, Model(name)) for name in args.checkpoints]  # every checkpoint read before decoding
    except (CheckpointError, FileNotFoundError, ValueError) as exc:
        parser.exit(2, f"rank_checkpoints.py: {exc}\n")
    for name, model in models:
        if model.problem != args.problem:
            parser.error(f"{name} is a {model.problem} model, not {args.problem}")
    sets = validation_sets(args.problem, args.distribution, args.sizes, args.instances, args.seed)
    print(f"{args.problem} {args.distribution}, {args.instances} instances at each of {args.sizes} (seed {args.seed}), multi-greedy")
    print(f"{'checkpoint':<40} {'B':>5} " + " ".join(f"{f'n={n}':>9}" for n in args.sizes) + f" {'mean':>9} {'ratio':>7}")
    baseline = None
    for name, model in models:
        for prior in args.distance_priors or [None]:
            means = [float(np.mean(model.solve(data, Decoding("multi-greedy", distance_prior=prior, batch_size=args.batch_size)).lengths)) for data in sets]
            mean = float(np.mean(means))
            baseline = baseline or mean
            shown = model.agent.distance_prior if prior is None else prior
            print(f"{name:<40} {shown:>5g} " + " ".join(f"{m:>9.4f}" for m in means) + f" {mean:>9.4f} {mean / baseline:>7.4f}", flush=True)


if __name__ == "__main__":
    main()
