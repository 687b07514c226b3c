"""Training throughput of ppo_or.py on TSP50 at the paper's shape scaled to this machine.

Runs the real trainer (subprocess) for a few iterations at M instances x N = 50 trajectories on
one thread, with the encoder cache on and off in the rollout, and prints env steps/s (instance-
steps, the trainer's SPS), node selections/s, and the split between rollout and PPO update (the
first iteration is dropped as warm-up). The reference: the paper's original code measured on one
thread of this machine, TSP50, N = 50: about 370 env steps/s at M = 64 and 240 at M = 1024.

    python bench/train_throughput.py [--num-envs 64 256] [--iterations 3]
"""

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAPER_SPS = {64: 370, 1024: 240}


def measure(num_envs: int, iterations: int, cache: bool) -> dict:
    steps = (iterations + 1) * num_envs * 51
    cmd = [sys.executable, str(ROOT / "ppo_or.py"), "--num-envs", str(num_envs), "--total-timesteps", str(steps)]
    cmd += ["--threads", "1", "--eval-interval", "0", "--checkpoint-interval", "0", "--no-anneal-lr"]
    cmd += ["--preset", "rlor"]  # the paper's algorithm, as the original code it is compared with runs
    cmd += [] if cache else ["--no-encoder-cache"]
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, check=True).stdout
    rows = [dict(re.findall(r"(\w+)=([\d.]+)", line)) for line in out.splitlines() if line.startswith("iteration=")]
    rows = rows[1:]  # warm-up
    rollout = sum(float(r["rollout"]) for r in rows)
    update = sum(float(r["update"]) for r in rows)
    env_steps = len(rows) * num_envs * 51
    return {"sps": env_steps / (rollout + update), "rollout": rollout / len(rows), "update": update / len(rows)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--iterations", type=int, default=3, help="timed iterations after one warm-up")
    args = parser.parse_args()
    print("TSP50, N=50 trajectories, 1 thread; times per iteration (one rollout + one PPO update)")
    for m in args.num_envs:
        cached, uncached = measure(m, args.iterations, True), measure(m, args.iterations, False)
        share = cached["update"] / (cached["rollout"] + cached["update"])
        line = (
            f"M={m}: {cached['sps']:,.0f} env steps/s ({cached['sps'] * 50:,.0f} node selections/s), "
            f"rollout {cached['rollout']:.2f}s + update {cached['update']:.2f}s ({share:.0%} in the update); "
            f"without the encoder cache {uncached['sps']:,.0f} env steps/s (rollout {uncached['rollout']:.2f}s), "
            f"cache ratio {cached['sps'] / uncached['sps']:.2f}x"
        )
        if m in PAPER_SPS:
            line += f"; vs the paper's original code ({PAPER_SPS[m]}/s) {cached['sps'] / PAPER_SPS[m]:.1f}x"
        print(line, flush=True)


if __name__ == "__main__":
    main()
