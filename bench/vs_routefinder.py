"""ppo-or's trainer and RouteFinder's MTPOMO baseline side by side on the multi-task VRP: the same 16
classic variants at the same size, one thread each, the same wall-clock budget; checkpoints at fixed
marks scored on the same RouteFinder test instances (``envs.vrp.vrp_dataset``, its generator at seed
1234) against PyVRP: mean gap over the variants, greedy and multi-greedy x8.

    python bench/vs_routefinder.py --minutes 20 --marks 5 10 20 --num-nodes 20 --instances 100 --jobs 2
    python bench/vs_routefinder.py --evaluate   # score the finished runs in --out again
    python bench/vs_routefinder.py --num-nodes 50 --minutes 60 --evaluate --marks 40 60   # some marks (kept beside the others)

The peer is RL4CO's POMO on RL4CO's multi-task VRP env (RouteFinder's MTPOMO: RouteFinder itself is
not on the package index; ``pip install -e ".[bench]"``), trained by RL4CO's Lightning
trainer with POMO's own settings (batch 64, Adam 1e-4, every customer a start, shared baseline) on
RL4CO's generator with its "all" preset (each of O, B, L, TW with probability 0.5), whose distance
limit is given RouteFinder's rule (drawn per instance, as in the test sets; RL4CO fixes 3.0, which
never binds). ppo-or trains ``mtvrp-v0`` (the same 16-variant mix) with ``--preset variants`` (the
transformer encoder, 64 distinct instances per rollout in one minibatch; ``--ppo-or-args`` adds
arguments, e.g. ``--preset ppo-or --num-envs 256`` for the default trainer). Both save a checkpoint each minute; a
mark is scored with the first one written at or after it. Every tour of both is checked by
``checkers.tours.vrp_cost``. PyVRP references (``--solver-seconds`` each): the shipped ones at
n = 50 and 100, else solved and cached in ``--out``.
"""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import shlex  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from ppoor.checkers.tours import vrp_cost  # noqa: E402
from ppoor.data.datasets import VRP_SHIPPED_SECONDS, load_data  # noqa: E402
from ppoor.envs.vrp import CLASSIC  # noqa: E402
from ppoor.models import load_agent, read_checkpoint  # noqa: E402
from ppoor.search import Decoding, decode  # noqa: E402
from ppoor.solvers.references import variant_references  # noqa: E402
from rl4co_peer import (  # noqa: E402
    latest_run,
    mark_checkpoints,
    pomo_policy,
    ppo_or_command,
    rl4co_decode,
    run_side_by_side,
    save_results,
    train_rl4co,
)

SETTINGS = (("greedy", False, 1), ("multi-greedy x8", True, 8))


def rl4co_env(num_nodes: int):
    """RL4CO's multi-task VRP env whose generator draws RouteFinder's distance limits."""
    from rl4co.envs import MTVRPEnv
    from rl4co.envs.routing.mtvrp.generator import MTVRPGenerator

    class RouteFinderLimits(MTVRPGenerator):
        def generate_distance_limit(self, shape, locs):
            """U(2 max_i d_0i + 1e-6, max(2.8, that + 1e-6)) per instance [B, 1]."""
            lower = 2 * torch.cdist(locs[:, :1], locs[:, 1:]).amax(-1) + 1e-6
            upper = torch.maximum(torch.full_like(lower, 2.8), lower + 1e-6)
            return lower + (upper - lower) * torch.rand_like(lower)

    return MTVRPEnv(generator=RouteFinderLimits(num_loc=num_nodes, variant_preset="all"))


def train(name: str, args: argparse.Namespace) -> list[str]:
    """The command of one trainer (one thread)."""
    if name == "ppo-or":
        cmd = ppo_or_command("mtvrp-v0", args.num_nodes, args.minutes, args.seed, "vs-routefinder", ("--preset", "variants"))
        return cmd + shlex.split(args.ppo_or_args)
    return [sys.executable, __file__, "--train-rl4co", str(args.out.resolve() / "rl4co-mtpomo"),
            "--minutes", str(args.minutes), "--num-nodes", str(args.num_nodes), "--seed", str(args.seed)]  # fmt: skip


def test_sets(args: argparse.Namespace) -> dict:
    """variant -> (data, PyVRP references [K]) for the first --instances of each classic variant:
    the shipped lengths where they were solved with --solver-seconds, else solved and cached in --out."""
    sets = {}
    for variant in CLASSIC:
        (data,) = load_data("test", "mtvrp", args.num_nodes, args.instances, variant=variant)
        sets[variant] = (data, variant_references(variant, args.num_nodes, args.instances, args.solver_seconds, args.out))
    return sets


def gaps(tours, data, references) -> tuple[float, int]:
    """Mean gap (%) of checked tours and how many failed the checker (scored at twice the reference)."""
    costs, invalid = [], 0
    for b, tour in enumerate(tours):
        try:
            costs.append(vrp_cost({k: v[b] for k, v in data.instances.items()}, tour))
        except ValueError:
            invalid += 1
            costs.append(2 * references[b])
    return float(100 * (np.array(costs) / references - 1).mean()), invalid


def evaluate(args: argparse.Namespace, marks: list[float]) -> list[dict]:
    sets = test_sets(args)
    rows = []
    ours = mark_checkpoints(latest_run(args.out, "mtvrp-v0__vs-routefinder"), marks,
                            lambda p: read_checkpoint(p).get("elapsed_seconds", 0.0))  # fmt: skip
    theirs = mark_checkpoints(args.out / "rl4co-mtpomo" / "ckpt", marks,
                              lambda p: torch.load(p, weights_only=True)["elapsed_seconds"])  # fmt: skip
    env = rl4co_env(args.num_nodes)
    policy = pomo_policy(env)
    for mark, (seconds, path), (peer_seconds, peer_path) in zip(marks, ours, theirs, strict=True):
        agent, _ = load_agent(path)
        policy.load_state_dict(torch.load(peer_path, weights_only=True)["policy"])
        policy.eval()
        for name, model_seconds in (("ppo-or", seconds), ("rl4co-mtpomo", peer_seconds)):
            row = {"trainer": name, "mark": mark, "minutes": model_seconds / 60}
            for label, multi, copies in SETTINGS:
                per_variant, invalid = {}, 0
                for variant, (data, references) in sets.items():
                    if name == "ppo-or":
                        mode = "multi-greedy" if multi else "greedy"
                        tours = decode(agent, data.instances, Decoding(mode, augment=copies, batch_size=100)).tours
                    else:
                        tours = rl4co_decode(policy, env, data.instances, multi, copies, problem="mtvrp")
                    per_variant[variant], bad = gaps(tours, data, references)
                    invalid += bad
                row[label] = float(np.mean(list(per_variant.values())))
                row[f"{label} per variant"] = per_variant
                row[f"{label} invalid"] = invalid
            rows.append(row)
            print(f"mark {mark:g} min: {name} ({row['minutes']:.1f} min) greedy {row['greedy']:.2f}%, "
                  f"multi-greedy x8 {row['multi-greedy x8']:.2f}%", flush=True)  # fmt: skip
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=20.0, help="training budget of each trainer")
    parser.add_argument("--marks", type=float, nargs="+", help="minutes at which to score (default: 5, 10, ...)")
    parser.add_argument("--num-nodes", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=2, choices=(1, 2), help="2: both trainers at once")
    parser.add_argument("--instances", type=int, default=100, help="first test instances of each variant")
    parser.add_argument("--solver-seconds", type=float,
                        help="PyVRP seconds per instance (default: the shipped references' 1 s at n = 50, 2 s at "
                             "100; 0.5 s at other sizes)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("bench-runs/vs-routefinder"))
    parser.add_argument("--ppo-or-args", default="", help="extra ppo_or.py arguments, e.g. '--preset ppo-or --num-envs 256' (the default trainer)")
    parser.add_argument("--evaluate", action="store_true", help="score the runs in --out, train nothing")
    parser.add_argument("--train-rl4co", type=Path, help=argparse.SUPPRESS)  # the peer's child process
    args = parser.parse_args()
    if not (0 < args.minutes <= 24 * 60 and 1 <= args.instances <= 1000 and 5 <= args.num_nodes <= 1000):
        sys.exit("error: --minutes in (0, 1440], --instances in 1..1000, --num-nodes in 5..1000")
    if args.solver_seconds is None:
        args.solver_seconds = VRP_SHIPPED_SECONDS.get(args.num_nodes, 0.5)
    if args.solver_seconds <= 0 or not np.isfinite(args.solver_seconds):
        sys.exit("error: --solver-seconds must be a positive number")
    if args.train_rl4co:
        train_rl4co(args.train_rl4co, rl4co_env(args.num_nodes), args.minutes, args.seed)
        return
    try:
        import rl4co  # noqa: F401
    except ImportError:
        sys.exit("error: the peer needs RL4CO: pip install -e '.[bench]'")
    marks = args.marks or [float(m) for m in range(5, int(args.minutes) + 1, 5)] or [args.minutes]
    if any(m <= 0 or m > args.minutes for m in marks):
        sys.exit(f"error: --marks must lie in (0, --minutes {args.minutes:g}]")
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    if not args.evaluate:
        run_side_by_side({name: train(name, args) for name in ("ppo-or", "rl4co-mtpomo")}, args.out, args.jobs)
    rows = save_results(args.out, evaluate(args, marks), marks, keep=args.evaluate)
    print(f"\nn = {args.num_nodes}, {args.instances} RouteFinder test instances per classic variant, mean gap to "
          f"PyVRP ({args.solver_seconds:g} s), 1 thread each" + (", trained at once" if args.jobs == 2 else ""))  # fmt: skip
    print("| mark (min) | trainer | minutes | greedy | multi-greedy x8 | invalid tours |\n|---|---|---|---|---|---|")
    for r in rows:
        invalid = r["greedy invalid"] + r["multi-greedy x8 invalid"]
        print(f"| {r['mark']:g} | {r['trainer']} | {r['minutes']:.1f} | {r['greedy']:.2f}% | "
              f"{r['multi-greedy x8']:.2f}% | {invalid} |")  # fmt: skip


if __name__ == "__main__":
    main()
