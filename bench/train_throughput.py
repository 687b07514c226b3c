"""Training throughput of ppo_or.py on TSP at 50 and 100 nodes: the rollout against the update.

Runs the real trainer (subprocess) for a few iterations at M instances on one thread, the default
preset (ppo-or: N = n trajectories, 8 symmetric copies, minibatches of 32 instances, two epochs) or the paper's
(rlor: N = 50, 8 minibatches, two epochs), and
prints env steps/s (instance-steps, the trainer's SPS), node selections/s, and the split between
rollout and PPO update with their ratio (the first iteration is dropped as warm-up). The trust
region's early stop is off in these runs (``--target-kl None``), so every update does the same work.
The reference: the paper's original code measured on one thread of this machine, TSP50, N = 50:
about 370 env steps/s at M = 64 and 240 at M = 1024.

Against the machine's limit: the model FLOPs of one iteration (matrix products and attention,
counted by torch.utils.flop_counter.FlopCounterMode, taught the CPU attention kernels, over the real
trainer run in-process, split into rollout and update by counting with 1 and 2 update epochs) divided
by the measured times, beside the rate of a large float32 matmul on one thread measured in the same
run (the peak).

Where the time goes: one profiled iteration split into the attention kernels, the matrix products
and the rest (elementwise ops, indexing, optimizer, env), each with its FLOP rate. `--profile` also
prints torch.profiler's table of that iteration (ops by self CPU time).

    python bench/train_throughput.py                                   # TSP50 and TSP100, M = 256
    python bench/train_throughput.py --num-nodes 50 --num-envs 64 256 --preset rlor
    python bench/train_throughput.py --num-nodes 100 --iterations 2 --profile
    python bench/train_throughput.py --num-nodes 50 --minibatch-size 128
    python bench/train_throughput.py --num-nodes 50 --compile    # ppo_or.py --compile
"""

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from inprocess import iteration_rows, trainer_run
from ppoor import ppo_or
from ppoor.models import compiler_problem
from ppoor.training import options
from torch.utils import flop_counter
from torch.utils.flop_counter import FlopCounterMode

ROOT = Path(__file__).resolve().parents[1]

PAPER_SPS = {64: 370, 1024: 240}  # TSP50, N = 50


def measure(nodes: int, num_envs: int, preset: str, iterations: int, extra: tuple = ()) -> dict:
    steps = (iterations + 1) * num_envs * (nodes + 1)
    cmd = [sys.executable, str(ROOT / "ppo_or.py"), *trainer_args(nodes, num_envs, preset, steps, extra)]
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, check=True).stdout
    rows = iteration_rows(out)[1:]  # the first is warm-up
    rollout = sum(float(r["rollout"]) for r in rows)
    update = sum(float(r["update"]) for r in rows)
    env_steps = len(rows) * num_envs * (nodes + 1)
    return {"sps": env_steps / (rollout + update), "rollout": rollout / len(rows), "update": update / len(rows)}


def trainer_args(nodes: int, num_envs: int, preset: str, steps: int, extra: tuple = ()) -> list[str]:
    """ppo_or.py arguments of the measured runs: TSP, one thread, no evaluation, no early stop, and
    ``extra`` (e.g. --minibatch-size 128)."""
    args = ["--num-nodes", str(nodes), "--num-envs", str(num_envs), "--total-timesteps", str(steps)]
    args += ["--threads", "1", "--eval-interval", "0", "--checkpoint-interval", "0", "--no-anneal-lr"]
    return args + ["--preset", preset, "--target-kl", "None", *extra]


def count_cpu_attention() -> None:
    """Teaches FlopCounterMode the CPU kernels of scaled_dot_product_attention (torch 2.13 counts only
    the CUDA ones, so the attention, a quarter of the update's FLOPs, would be left out): forward
    4 B H L S d (scores and weighted values), backward twice that, as torch counts them on CUDA."""
    forward = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    backward = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward
    if forward not in flop_counter.flop_registry:
        flop_counter.register_flop_formula(forward, get_raw=True)(flop_counter.sdpa_flop)
    if backward not in flop_counter.flop_registry:
        flop_counter.register_flop_formula(backward, get_raw=True)(flop_counter.sdpa_backward_flop)


def one_iteration(nodes: int, num_envs: int, preset: str, mode, epochs: int, extra: tuple = ()) -> None:
    """One iteration of the real trainer, in-process in a temporary folder, under ``mode`` (a
    context manager such as FlopCounterMode or the profiler)."""
    argv = [*trainer_args(nodes, num_envs, preset, num_envs * (nodes + 1), extra), "--update-epochs", str(epochs)]
    with trainer_run(argv, mode):
        pass


def iteration_flops(nodes: int, num_envs: int, preset: str, extra: tuple = ()) -> tuple[float, float, dict]:
    """Model FLOPs of one rollout and of one update epoch (one iteration of the real trainer under
    FlopCounterMode, with 1 and with 2 update epochs: the difference is an epoch), and the FLOPs of
    the 1-epoch iteration per op name."""
    count_cpu_attention()
    totals, by_op = [], {}
    for epochs in (1, 2):
        counter = FlopCounterMode(display=False)
        one_iteration(nodes, num_envs, preset, counter, epochs, extra)
        totals.append(counter.get_total_flops())
        if epochs == 1:
            by_op = {str(op): flops for op, flops in counter.get_flop_counts()["Global"].items()}
    per_epoch = totals[1] - totals[0]
    return totals[0] - per_epoch, per_epoch, by_op


def op_group(name: str) -> str:
    """An op ("aten::bmm" from the profiler, "aten.bmm" from the FLOP counter) -> its group."""
    op = name.replace("::", ".").removeprefix("aten.").split(".")[0]
    if "scaled_dot_product" in op:
        return "attention kernels"
    return "matrix products" if op in ("mm", "bmm", "addmm") else "the rest"


def where_time_goes(nodes: int, num_envs: int, preset: str, epochs: int, by_op: dict, peak: float, extra=()) -> str:
    """One profiled iteration, its self CPU time split into the attention kernels, the matrix products
    and everything else (elementwise ops, indexing, the optimizer, the env: no model FLOPs), each
    with its share of the time and its FLOP rate against the peak (``by_op``: the FLOPs of a
    1-epoch iteration; ``epochs`` is that of the profiled one)."""
    profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    one_iteration(nodes, num_envs, preset, profiler, 1, extra)
    seconds = dict.fromkeys(["attention kernels", "matrix products", "the rest"], 0.0)
    for event in profiler.key_averages():
        seconds[op_group(event.key)] += event.self_cpu_time_total / 1e6
    flops = dict.fromkeys(seconds, 0.0)
    for op, count in by_op.items():
        flops[op_group(op)] += count
    total = sum(seconds.values())
    parts = []
    for group, spent in seconds.items():
        part = f"{group} {spent / total:.0%} of the time"
        if flops[group]:
            rate = flops[group] / spent
            part += f" at {rate / 1e9:.0f} GFLOP/s ({rate / peak:.0%} of peak)"
        parts.append(part)
    return "  where the time goes (one profiled iteration, self CPU time): " + "; ".join(parts)


def matmul_peak(size: int = 2048, repeats: int = 5) -> float:
    """FLOP/s of a float32 [size, size] @ [size, size] product on one thread, the best of ``repeats``."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b  # warm-up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    torch.set_num_threads(threads)
    return 2 * size**3 / best


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-nodes", type=int, nargs="+", default=[50, 100])
    parser.add_argument("--num-envs", type=int, nargs="+", default=[256])
    parser.add_argument("--preset", choices=("ppo-or", "rlor"), default="ppo-or")
    parser.add_argument("--iterations", type=int, default=3, help="timed iterations after one warm-up")
    parser.add_argument("--profile", action="store_true", help="print the profiler's table of one iteration")
    parser.add_argument(
        "--minibatch-size", type=int, default=None, help="ppo_or.py's --minibatch-size (default: its own)"
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="time ppo_or.py --compile (the model FLOPs are counted eagerly: the same)",
    )
    args = parser.parse_args()
    if min(args.num_nodes) < 5 or min(args.num_envs) < 8 or args.iterations < 1:
        sys.exit("error: --num-nodes at least 5, --num-envs at least 8, --iterations at least 1")
    if args.compile and (problem := compiler_problem()):
        sys.exit(f"error: --compile: {problem}")
    epochs = options.presets(ppo_or.Args)[args.preset].update_epochs
    extra = ("--minibatch-size", str(args.minibatch_size)) if args.minibatch_size else ()
    print(
        f"TSP, preset {args.preset} ({epochs} update epoch(s)), 1 thread{', decode step compiled' if args.compile else ''}; "
        "times per iteration (one rollout + one update)"
    )
    peak = matmul_peak()
    print(f"peak: float32 2048x2048 matmul on 1 thread, {peak / 1e9:.1f} GFLOP/s")
    for nodes in args.num_nodes:
        for m in args.num_envs:
            timed = extra + (("--compile",) if args.compile else ())  # the first iteration compiles: not timed
            cached = measure(nodes, m, args.preset, args.iterations, timed)
            ratio = cached["update"] / cached["rollout"]
            line = (
                f"TSP{nodes} M={m}: {cached['sps']:,.0f} env steps/s, rollout {cached['rollout']:.2f}s + update "
                f"{cached['update']:.2f}s per iteration: the update costs {ratio:.2f}x the rollout"
            )
            if nodes == 50 and args.preset == "rlor" and m in PAPER_SPS:
                line += f"; vs the paper's original code ({PAPER_SPS[m]}/s) {cached['sps'] / PAPER_SPS[m]:.1f}x"
            print(line, flush=True)
            rollout_flops, epoch_flops, by_op = iteration_flops(nodes, m, args.preset, extra)
            update_rate = epochs * epoch_flops / cached["update"]
            rollout_rate = rollout_flops / cached["rollout"]
            print(
                f"  model FLOPs per iteration: rollout {rollout_flops / 1e9:.1f} G, update {epochs * epoch_flops / 1e9:.1f} G; "
                f"achieved: update {update_rate / 1e9:.2f} GFLOP/s ({update_rate / peak:.0%} of peak), "
                f"rollout {rollout_rate / 1e9:.2f} GFLOP/s ({rollout_rate / peak:.0%})",
                flush=True,
            )
            print(where_time_goes(nodes, m, args.preset, epochs, by_op, peak, extra), flush=True)
            if args.profile:
                torch.set_num_threads(1)
                profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
                one_iteration(nodes, m, args.preset, profiler, epochs, extra)
                print(profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=15), flush=True)


if __name__ == "__main__":
    main()
