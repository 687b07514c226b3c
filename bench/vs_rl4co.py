"""ppo-or's trainer and RL4CO's POMO side by side on TSP or CVRP at any size: one thread each, the
same wall-clock budget, started together; the checkpoints of fixed time marks scored on the first
Kool et al. test instances (seed 1234) against the reference lengths shipped with ppo-or, greedy,
multi-greedy and multi-greedy x8.

    python bench/vs_rl4co.py --env-id tsp-v0 --num-nodes 50 --minutes 60 --marks 10 20 40 60
    python bench/vs_rl4co.py --env-id cvrp-v0 --num-nodes 50 --minutes 60 --marks 10 20 40 60
    python bench/vs_rl4co.py --env-id tsp-v0 --num-nodes 50 --evaluate   # score the runs in --out again
    python bench/vs_rl4co.py --env-id tsp-v0 --num-nodes 100 --evaluate --marks 40 60   # some marks (kept beside the others)

ppo-or trains with its defaults at a CPU shape (``--num-envs 256``; ``--ppo-or-args`` adds arguments); the peer is RL4CO's POMO
(``pip install -e ".[bench]"``) with POMO's own settings (batch 64, Adam 1e-4, every node
or customer a start, the shared baseline) on RL4CO's generator of the same distribution (uniform
unit square; CVRP demands 1..9 over Kool's capacities). Both save a checkpoint each minute; a mark
is scored with the first one written at or after it. Every tour of both is checked by
``checkers.tours.validate_tour`` and measured by ``tour_length`` (a tour that fails counts at twice
its reference, and is reported). References: ``data/reference_lengths`` (TSP by LKH, the first 1,000;
CVRP by PyVRP 0.5 s, the first 200), or ``--references FILE.npy``.
"""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import shlex  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from ppoor.checkers.tours import InvalidTourError, tour_length, validate_tour  # noqa: E402
from ppoor.data.datasets import load_data  # noqa: E402
from ppoor.models import load_agent, read_checkpoint  # noqa: E402
from ppoor.search import Decoding, decode  # noqa: E402
from ppoor.solvers.references import shipped_references  # noqa: E402
from rl4co_peer import (  # noqa: E402
    latest_run,
    mark_checkpoints,
    pomo_policy,
    ppo_or_command,
    rl4co_decode,
    rl4co_env,
    run_side_by_side,
    save_results,
    train_rl4co,
)

SETTINGS = (("greedy", "greedy", 1), ("multi-greedy", "multi-greedy", 1), ("multi-greedy x8", "multi-greedy", 8))
PROBLEMS = {"tsp-v0": "tsp", "cvrp-v0": "cvrp"}


def checked_lengths(problem: str, instances: dict, tours: list) -> tuple[np.ndarray, int]:
    """Each tour validated and measured independently of its decoder: lengths [B] (NaN where the
    tour is infeasible) and the count of infeasible ones."""
    n = instances["coords"].shape[1]
    lengths = np.full(len(tours), np.nan)
    for b, tour in enumerate(tours):
        try:
            if problem == "tsp":
                validate_tour("tsp", tour, n)
                lengths[b] = tour_length(instances["coords"][b], tour, closed=True)
            else:
                validate_tour("cvrp", tour, n, instances["demand"][b])
                points = np.concatenate([instances["depot"][b][None], instances["coords"][b]])
                lengths[b] = tour_length(points, np.concatenate([[0], tour]), closed=False)
        except InvalidTourError:
            pass
    return lengths, int(np.isnan(lengths).sum())


def gap(lengths: np.ndarray, references: np.ndarray) -> float:
    """Mean per-instance gap in percent; an infeasible tour (NaN) counts at twice its reference."""
    return float(100 * (np.where(np.isnan(lengths), 2 * references, lengths) / references - 1).mean())


def evaluate(args: argparse.Namespace, problem: str, marks: list[float]) -> list[dict]:
    (data,) = load_data("test", problem, args.num_nodes, args.instances)
    references = (
        np.load(args.references, allow_pickle=False)[: args.instances]
        if args.references
        else shipped_references(problem, args.num_nodes, "test", args.instances)
    )
    if references is None or len(references) < args.instances:
        sys.exit(f"error: no {args.instances} reference lengths for {args.env_id} n={args.num_nodes}: give --references")
    ours = mark_checkpoints(latest_run(args.out, f"{args.env_id}__vs-rl4co"), marks,
                            lambda p: read_checkpoint(p).get("elapsed_seconds", 0.0))  # fmt: skip
    theirs = mark_checkpoints(args.out / "rl4co-pomo" / "ckpt", marks,
                              lambda p: torch.load(p, weights_only=True)["elapsed_seconds"])  # fmt: skip
    env = rl4co_env(problem, args.num_nodes)
    policy = pomo_policy(env)
    rows = []
    for mark, (seconds, path), (peer_seconds, peer_path) in zip(marks, ours, theirs, strict=True):
        agent, _ = load_agent(path)
        policy.load_state_dict(torch.load(peer_path, weights_only=True)["policy"])
        policy.eval()
        for name, model_seconds in (("ppo-or", seconds), ("rl4co-pomo", peer_seconds)):
            row = {"trainer": name, "mark": mark, "minutes": model_seconds / 60, "reference mean length": float(references.mean())}
            for label, mode, copies in SETTINGS:
                if name == "ppo-or":
                    tours = decode(agent, data.instances, Decoding(mode, augment=copies, batch_size=100)).tours
                else:
                    multi = mode == "multi-greedy"
                    tours = rl4co_decode(policy, env, data.instances, multi, copies, problem=problem)
                lengths, row[f"{label} invalid"] = checked_lengths(problem, data.instances, tours)
                row[label] = gap(lengths, references)
                row[f"{label} mean length"] = float(np.nanmean(lengths)) if not np.isnan(lengths).all() else None
            rows.append(row)
            print(f"mark {mark:g} min: {name} ({row['minutes']:.1f} min) " + ", ".join(
                f"{label} {row[label]:.2f}%" for label, _, _ in SETTINGS), flush=True)  # fmt: skip
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-id", choices=sorted(PROBLEMS), default="tsp-v0")
    parser.add_argument("--num-nodes", type=int, default=50)
    parser.add_argument("--minutes", type=float, default=60.0, help="training budget of each trainer")
    parser.add_argument("--marks", type=float, nargs="+", help="minutes at which to score (default: 10, 20, 40, 60)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=2, choices=(1, 2), help="2: both trainers at once")
    parser.add_argument("--instances", type=int, help="first test instances (default: 1,000 TSP, 200 CVRP)")
    parser.add_argument("--references", type=Path, help=".npy of reference lengths of the test set")
    parser.add_argument("--out", type=Path, help="folder of the runs (default bench-runs/vs-rl4co-{env}{n})")
    parser.add_argument("--ppo-or-args", default="", help="extra ppo_or.py arguments, e.g. '--target-kl 0.02'")
    parser.add_argument("--evaluate", action="store_true", help="score the runs in --out, train nothing")
    parser.add_argument("--train-rl4co", type=Path, help=argparse.SUPPRESS)  # the peer's child process
    args = parser.parse_args()
    problem = PROBLEMS[args.env_id]
    args.instances = args.instances or (1000 if problem == "tsp" else 200)
    args.out = args.out or Path(f"bench-runs/vs-rl4co-{problem}{args.num_nodes}")
    if not (0 < args.minutes <= 24 * 60 and 1 <= args.instances <= 10_000 and 5 <= args.num_nodes <= 1000):
        sys.exit("error: --minutes in (0, 1440], --instances in 1..10000, --num-nodes in 5..1000")
    if args.references is not None and not args.references.is_file():
        sys.exit(f"error: --references {args.references}: no such file")
    if args.train_rl4co:
        train_rl4co(args.train_rl4co, rl4co_env(problem, args.num_nodes), args.minutes, args.seed)
        return
    try:
        import rl4co  # noqa: F401
    except ImportError:
        sys.exit("error: the peer needs RL4CO: pip install -e '.[bench]'")
    marks = args.marks or [m for m in (10.0, 20.0, 40.0, 60.0) if m <= args.minutes] or [args.minutes]
    if any(m <= 0 or m > args.minutes for m in marks):
        sys.exit(f"error: --marks must lie in (0, --minutes {args.minutes:g}]")
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    if not args.evaluate:
        ours = ppo_or_command(args.env_id, args.num_nodes, args.minutes, args.seed, "vs-rl4co")
        ours += shlex.split(args.ppo_or_args)
        peer = [sys.executable, __file__, "--env-id", args.env_id, "--num-nodes", str(args.num_nodes), "--minutes",
                str(args.minutes), "--seed", str(args.seed), "--train-rl4co", str(args.out.resolve() / "rl4co-pomo")]  # fmt: skip
        run_side_by_side({"ppo-or": ours, "rl4co-pomo": peer}, args.out, args.jobs)
    rows = save_results(args.out, evaluate(args, problem, marks), marks, keep=args.evaluate)
    print(f"\n{args.env_id} n = {args.num_nodes}, the first {args.instances} Kool test instances, mean gap to the "
          "shipped references, 1 thread each" + (", trained at once" if args.jobs == 2 else ""))  # fmt: skip
    print("| mark (min) | trainer | minutes | " + " | ".join(label for label, _, _ in SETTINGS) + " | invalid tours |")
    print("|---|---|---|" + "---|" * len(SETTINGS) + "---|")
    for r in rows:
        invalid = sum(r[f"{label} invalid"] for label, _, _ in SETTINGS)
        print(f"| {r['mark']:g} | {r['trainer']} | {r['minutes']:.1f} | "
              + " | ".join(f"{r[label]:.2f}%" for label, _, _ in SETTINGS) + f" | {invalid} |")  # fmt: skip


if __name__ == "__main__":
    main()
