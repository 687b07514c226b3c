"""The VRP variants table: each checkpoint's greedy and multi-greedy gap to PyVRP on every variant.

For each variant, the first K instances of its standard test set (``envs.vrp.vrp_dataset``, seed
1234, RouteFinder's) are solved by PyVRP for --solver-seconds each (the lengths shipped in
``data/reference_lengths`` where they cover K instances at that time limit, else computed --jobs at a
time and cached as .npy in --out) and decoded by every checkpoint, one thread; the table gives the
mean PyVRP cost and, per checkpoint, the mean greedy and multi-greedy (every customer as a start,
under --augment symmetries of the square: 8 is RouteFinder's and RL4CO's "x8") cost and gap in
percent, the way RouteFinder and RL4CO report the variants. Every decoded and every PyVRP solution
is checked (``checkers.tours.vrp_cost``).

    python bench/vrp_variants.py --checkpoints mtvrp=checkpoints/mtvrp20.pt vrptw=checkpoints/vrptw20.pt \\
        --num-nodes 20 --instances 200 --variants vrptw cvrp ...   (default: all 48)
"""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
from concurrent.futures import ProcessPoolExecutor  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from ppoor.data.datasets import load_data  # noqa: E402
from ppoor.envs.vrp import VARIANTS  # noqa: E402
from ppoor.models import CheckpointError, load_agent  # noqa: E402
from ppoor.search import Decoding, decode  # noqa: E402
from ppoor.solvers.references import solve_reference, variant_references  # noqa: E402


def solve(job: tuple) -> float:
    variant, num_nodes, count, index, seconds = job
    (data,) = load_data("test", "mtvrp", num_nodes, count, variant=variant)
    return solve_reference(data, index, "pyvrp", seconds)


def references(variant: str, args: argparse.Namespace, pool: ProcessPoolExecutor) -> np.ndarray:
    """PyVRP costs [K] of the first K test instances of ``variant``: shipped, or cached in --out."""
    jobs = [(variant, args.num_nodes, args.instances, i, args.solver_seconds) for i in range(args.instances)]
    return variant_references(variant, args.num_nodes, args.instances, args.solver_seconds, args.out,
                              lambda: list(pool.map(solve, jobs)))  # fmt: skip


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", nargs="+", required=True, help="NAME=PATH of VRP checkpoints")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--num-nodes", type=int, default=20)
    parser.add_argument("--instances", type=int, default=200, help="first K instances of each test set")
    parser.add_argument("--solver-seconds", type=float, default=1.0, help="PyVRP time limit per instance")
    parser.add_argument("--jobs", type=int, default=2, help="PyVRP processes")
    parser.add_argument("--augment", type=int, default=1, choices=(1, 8), help="multi-greedy: symmetries decoded")
    parser.add_argument("--batch-size", type=int, default=100, help="instances decoded at once")
    parser.add_argument("--out", type=Path, default=Path("runs/references/vrp"), help="reference cache folder")
    parser.add_argument("--output", type=Path, help="write the table as JSON")
    args = parser.parse_args()
    if not (1 <= args.instances <= 1000 and 2 <= args.num_nodes <= 1000 and 1 <= args.jobs <= 64):
        parser.error("--instances takes 1..1000, --num-nodes 2..1000, --jobs 1..64")
    if not (0 < args.solver_seconds <= 3600 and 1 <= args.batch_size <= 10_000):
        parser.error("--solver-seconds takes (0, 3600], --batch-size 1..10000")
    torch.set_num_threads(1)
    agents = {}
    for item in args.checkpoints:
        name, _, path = item.rpartition("=")
        try:
            agents[name or Path(path).stem] = load_agent(path, problem="mtvrp")[0]
        except CheckpointError as exc:
            sys.exit(f"error: {exc}")
    rows = []
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for variant in args.variants:
            reference = references(variant, args, pool)
            (data,) = load_data("test", "mtvrp", args.num_nodes, args.instances, variant=variant)
            row = {"variant": variant, "pyvrp": float(reference.mean()), "lengths": {}}
            for name, agent in agents.items():
                for decoding, copies in (("greedy", 1), ("multi-greedy", args.augment)):
                    result = decode(agent, data.instances, Decoding(decoding, augment=copies, batch_size=args.batch_size))
                    column = f"{name} {decoding}" + (f" x{copies}" if copies > 1 else "")
                    row[column] = float(100 * (result.lengths / reference - 1).mean())
                    row["lengths"][column] = float(result.lengths.mean())
            rows.append(row)
            columns = list(row["lengths"])
            figures = "  ".join(f"{c}={row['lengths'][c]:.4f} ({row[c]:.2f}%)" for c in columns)
            print(f"{variant}: PyVRP {row['pyvrp']:.4f}  {figures}", flush=True)
    print(
        f"\n{args.instances} test instances per variant, n={args.num_nodes}: mean cost and mean gap in % to PyVRP "
        f"({args.solver_seconds:g} s per instance), 1 thread"
    )
    print(f"| variant | PyVRP | {' | '.join(columns)} |\n|---|---|{'---|' * len(columns)}")
    for row in rows:
        cells = " | ".join(f"{row['lengths'][c]:.4f} ({row[c]:.2f}%)" for c in columns)
        print(f"| {row['variant']} | {row['pyvrp']:.4f} | {cells} |")
    means = {c: np.mean([row[c] for row in rows]) for c in columns}
    print("| mean | | " + " | ".join(f"{means[c]:.2f}%" for c in columns) + " |")
    if args.output:
        args.output.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
