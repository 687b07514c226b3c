"""Time to quality: train configurations of ppo_or.py for the same wall-clock budget on one thread
each, then evaluate their checkpoints at fixed time marks on the first instances of the Kool et
al. test set (seed 1234): greedy and multi-greedy mean lengths and mean per-instance gaps against
reference lengths.

    python bench/time_to_quality.py --minutes 37 --marks 5 10 20 37 --configs ppo-or rlor --jobs 2
    python bench/time_to_quality.py --minutes 10 --configs ppo-or "lr3e-4=--learning-rate 3e-4"
    python bench/time_to_quality.py --env-id cvrp-v0 --minutes 10 --marks 5 10 --reference-solver pyvrp
    python bench/time_to_quality.py --evaluate bench-runs/runs/*   # evaluate finished runs again

A configuration is a preset name (ppo-or, rlor) or NAME=ARGS (extra ppo_or.py arguments over the
default preset). Every run gets the same shape (--num-envs x --n-traj, TSP20 by default as in the
side-by-side measurements of the paper's code), --total-seconds = the budget (so the learning rate
anneals over it), a checkpoint each minute and no periodic evaluation. A mark is scored with the
first checkpoint written at or after it (at most one iteration late; the table gives its time).
References: ``--references`` (.npy, one length per test instance; the LKH file in ../shared for
TSP20 by default), or ``--reference-solver pyvrp|lkh`` computed once for the first instances and
cached beside the runs. --jobs 2 runs two configurations side by side on this 2-core machine (each
on one thread); results then carry the noise of a shared machine.
"""

import argparse
import json
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
from ppoor.data.datasets import load_data  # noqa: E402
from ppoor.envs import ENV_IDS, ENV_VARIANTS  # noqa: E402
from ppoor.models import load_agent, read_checkpoint  # noqa: E402
from ppoor.search import Decoding, decode  # noqa: E402
from ppoor.solvers.references import solve_reference  # noqa: E402

PRESETS = ("ppo-or", "rlor")
SHARED_REFERENCES = ROOT.parent / "shared" / "references"


def parse_config(text: str) -> tuple[str, list[str]]:
    if text in PRESETS:
        return text, ["--preset", text]
    if "=" not in text:
        sys.exit(f"error: --configs {text!r}: a preset ({', '.join(PRESETS)}) or NAME=ARGS")
    name, extra = text.split("=", 1)
    return name, shlex.split(extra)


def train(name: str, extra: list[str], args: argparse.Namespace) -> Path:
    """Runs ppo_or.py for the budget; returns its run directory."""
    cmd = [sys.executable, str(ROOT / "ppo_or.py"), *("--env-id", args.env_id, "--num-nodes", str(args.num_nodes))]
    cmd += ["--num-envs", str(args.num_envs), "--n-traj", str(args.n_traj), "--threads", "1", "--seed", str(args.seed)]
    cmd += ["--total-timesteps", str(10**12), "--total-seconds", str(args.minutes * 60), "--exp-name", f"ttq-{name}"]
    cmd += ["--eval-interval", "0", "--checkpoint-interval", "0", "--checkpoint-seconds", "60", *extra]
    print(f"[{name}] {shlex.join(cmd[1:])}", flush=True)
    log = args.out / f"{name}.log"
    with open(log, "w") as f:
        result = subprocess.run(cmd, cwd=args.out, stdout=f, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        sys.exit(f"error: configuration {name} failed; see {log}")
    runs = sorted((args.out / "runs").glob(f"{args.env_id}__ttq-{name}__{args.seed}__*"))
    return runs[-1]


def references_for(args: argparse.Namespace, problem: str):
    """The test data (first --instances) and its reference lengths [B]."""
    (data,) = load_data("test", problem, args.num_nodes, args.instances, variant=ENV_VARIANTS.get(args.env_id))
    if args.references:
        values = np.load(args.references, allow_pickle=False)[: args.instances]
    else:
        cache = args.out / f"{args.env_id[:-3]}{args.num_nodes}_test_first{args.instances}_{args.reference_solver}.npy"
        if cache.exists():
            return data, np.load(cache)
        print(f"computing {args.reference_solver} references for {args.instances} instances (cached in {cache})")
        values = np.array(
            [solve_reference(data, i, args.reference_solver, args.solver_seconds) for i in range(args.instances)]
        )
        np.save(cache, values)
    if len(values) < args.instances:
        sys.exit(f"error: {args.references} has {len(values)} lengths, fewer than --instances {args.instances}")
    return data, values


def evaluate_run(run: Path, marks: list[float], data, references) -> list[dict]:
    """Scores the checkpoint of each mark: the first one at or after it, else the last."""
    checkpoints = []
    for path in (run / "ckpt").glob("*.pt"):
        ckpt = read_checkpoint(path)
        checkpoints.append((ckpt.get("elapsed_seconds", 0.0), ckpt["iteration"], path))
    checkpoints.sort()
    rows = []
    for mark in marks:
        later = [c for c in checkpoints if c[0] >= mark * 60 - 1e-6]
        seconds, iteration, path = later[0] if later else checkpoints[-1]
        agent, _ = load_agent(path)
        row = {"run": run.name, "mark": mark, "minutes": seconds / 60, "iteration": iteration}
        for decoding in ("greedy", "multi-greedy"):
            lengths = decode(agent, data.instances, Decoding(decoding, batch_size=250)).lengths
            row[f"{decoding}_length"] = float(lengths.mean())
            row[f"{decoding}_gap"] = float(100 * (lengths / references - 1).mean())
        rows.append(row)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=list(PRESETS))
    parser.add_argument("--minutes", type=float, default=10.0, help="training budget per configuration")
    parser.add_argument("--marks", type=float, nargs="+", help="minutes at which to score (default: 5, 10, ...)")
    parser.add_argument("--env-id", default="tsp-v0", choices=sorted(ENV_IDS))
    parser.add_argument("--num-nodes", type=int, default=20)
    parser.add_argument("--num-envs", type=int, default=256)
    parser.add_argument("--n-traj", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=1, help="configurations trained at once (one thread each)")
    parser.add_argument("--instances", type=int, default=1000, help="first test instances scored")
    parser.add_argument("--references", help=".npy of reference lengths of the test set")
    parser.add_argument("--reference-solver", choices=("lkh", "pyvrp"), help="compute references instead")
    parser.add_argument("--solver-seconds", type=float, default=1.0, help="pyvrp: seconds per instance")
    parser.add_argument("--out", type=Path, default=Path("bench-runs"), help="folder of the runs and results")
    parser.add_argument("--evaluate", type=Path, nargs="+", help="score these run folders, train nothing")
    args = parser.parse_args()
    problem = ENV_IDS[args.env_id]
    if not args.references and not args.reference_solver:
        default = SHARED_REFERENCES / f"{args.env_id[:-3]}{args.num_nodes}_test_seed1234_lkh.npy"
        if not default.exists():
            sys.exit(
                f"error: no references for {args.env_id} n={args.num_nodes}: give --references or --reference-solver"
            )
        args.references = str(default)
    marks = args.marks or [float(m) for m in range(5, int(args.minutes) + 1, 5)] or [args.minutes]
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    data, references = references_for(args, problem)

    if args.evaluate:
        runs = {run.name: run for run in args.evaluate}
    else:
        configs = [parse_config(c) for c in args.configs]
        start = time.time()
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            done = list(pool.map(lambda c: train(c[0], c[1], args), configs))
        print(f"trained {len(configs)} configurations in {(time.time() - start) / 60:.1f} minutes")
        runs = {name: run for (name, _), run in zip(configs, done, strict=True)}

    print(
        f"\n{args.env_id} n={args.num_nodes}, {args.num_envs} x {args.n_traj} per rollout, one thread per run; "
        f"first {args.instances} test instances, mean per-instance gap to the references "
        f"(mean {references.mean():.4f})"
    )
    print(f"{'config':<24} {'mark':>5} {'at min':>7} {'iters':>6} {'greedy':>8} {'gap':>7} {'multi':>8} {'gap':>7}")
    results = []
    for name, run in runs.items():
        for row in evaluate_run(run, marks, data, references):
            row["config"] = name
            results.append(row)
            print(
                f"{name:<24} {row['mark']:>5g} {row['minutes']:>7.1f} {row['iteration']:>6} "
                f"{row['greedy_length']:>8.4f} {row['greedy_gap']:>6.2f}% "
                f"{row['multi-greedy_length']:>8.4f} {row['multi-greedy_gap']:>6.2f}%",
                flush=True,
            )
    path = args.out / f"time_to_quality_{int(time.time())}.json"
    path.write_text(json.dumps(results, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
