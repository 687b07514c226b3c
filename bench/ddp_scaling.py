"""Data-parallel scaling of ppo_or.py on CPU: 1 and 2 processes (gloo), one thread each, at equal
work per process (M instances x N trajectories each), TSP50.

Prints the training SPS (env steps/s over all processes, after a warm-up iteration) and the scaling
efficiency SPS(2) / (2 x SPS(1)). Needs 2 free cores to mean anything.

    python bench/ddp_scaling.py [--num-envs 32] [--iterations 3]
"""

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def sps(processes: int, num_envs: int, iterations: int) -> float:
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes)]
    steps = (iterations + 1) * num_envs * 51 * processes
    cmd = launcher + [str(ROOT / "ppo_or.py"), "--num-envs", str(num_envs), "--total-timesteps", str(steps)]
    cmd += ["--threads", "1", "--eval-interval", "0", "--checkpoint-interval", "0", "--no-anneal-lr"]
    cmd += ["--preset", "rlor"]  # the paper's algorithm, as the original code it is compared with runs
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, check=True).stdout
    rows = [dict(re.findall(r"(\w+)=([\d.]+)", line)) for line in out.splitlines() if line.startswith("iteration=")]
    timed = rows[1:]  # drop the warm-up iteration
    seconds = sum(float(r["rollout"]) + float(r["update"]) for r in timed)
    return len(timed) * num_envs * 51 * processes / seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=32, help="instances per process")
    parser.add_argument("--iterations", type=int, default=3)
    args = parser.parse_args()
    one, two = sps(1, args.num_envs, args.iterations), sps(2, args.num_envs, args.iterations)
    print(f"TSP50, M={args.num_envs} per process, N=50, 1 thread per process (gloo)")
    print(
        f"1 process: {one:,.0f} env steps/s; 2 processes: {two:,.0f} env steps/s; scaling efficiency {two / (2 * one):.0%}"
    )


if __name__ == "__main__":
    main()
