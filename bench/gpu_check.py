"""One-shot GPU check: what a GPU box does with ppo-or, in one script of under 8 minutes.

Prints, on the first CUDA device (or on the CPU with small sizes, so that CI runs it too):
1. training throughput of the default preset (ppo-or) at M = 1024 instances on TSP50, TSP100 and
   CVRP50, and at the paper's settings (TSP50, M = 1024 x N = 50, the rlor preset), with float32
   and with ``--amp`` (bf16 autocast; CUDA only), from the real trainer run in-process, the first
   iteration dropped as warm-up: seconds of rollout and of update per iteration, and the hours the
   default budget (``--total-timesteps``, 12,000 rollouts of TSP50 at M = 1024) takes at that rate;
2. the first iteration's losses of each run (same seed: bf16 must track float32) and the peak
   GPU memory of each;
3. how much of an iteration the device waits for the NumPy env and for the host-to-device copies of
   the observations (timed in an instrumented run that synchronises after each copy), and the
   copies, synchronisations and CUDA runtime calls per rollout step (``bench/host_traffic.py``);
4. evaluation throughput (instances/s) of the four decodes: greedy, multi-greedy (50 starts),
   greedy x8 augmentation, multi-greedy x8, with the published TSP50 checkpoint when ../shared has
   it (else untrained weights: speed does not depend on them);
5. the wall time to a TSP50 greedy length of 6.0 on 1,000 validation instances (the ppo-or preset,
   evaluated every few iterations), if reached within --minutes.

    python bench/gpu_check.py               # on a GPU machine
    python bench/gpu_check.py --small       # CPU-sized (TSP10, M = 32), about a minute
"""

import argparse
import contextlib
import re
import time
from pathlib import Path

import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

ROOT = Path(__file__).resolve().parents[1]
from host_traffic import report as traffic_report  # noqa: E402
from inprocess import iteration_rows, trainer_run  # noqa: E402
from ppoor import ppo_or  # noqa: E402
from ppoor.envs import TSPVectorEnv, kool_dataset  # noqa: E402
from ppoor.models import Agent, StateWrapper, load_agent  # noqa: E402
from ppoor.search import Decoding, decode  # noqa: E402
from ppoor.training import routing  # noqa: E402

RLOR_TSP50 = ROOT.parent / "shared" / "checkpoints" / "rlor" / "tsp50-v0-12000.pt"
DECODES = [("greedy", 1), ("multi-greedy", 1), ("greedy", 8), ("multi-greedy", 8)]
TARGET = 6.0  # TSP50 greedy length
LOSSES = ("losses/policy_loss", "losses/value_loss", "losses/entropy")


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train(argv: list[str], device: torch.device) -> tuple[str, dict, float]:
    """Runs ppo_or.py in-process in a temporary folder; returns its printed output, the first
    iteration's losses (from its tensorboard events) and the peak device memory in GiB."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    with trainer_run([*argv, "--checkpoint-interval", "0", "--seed", "1"]) as (output, run):
        events = EventAccumulator(str(run))
        events.Reload()
        tags = set(events.Tags()["scalars"])
        losses = {tag: events.Scalars(tag)[0].value for tag in LOSSES if tag in tags}
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else float("nan")
    return output, losses, peak


@contextlib.contextmanager
def timed(cls, name: str, totals: dict, device: torch.device):
    """Adds the time spent in ``cls.name`` (synchronised after each call) to ``totals[name]``."""
    original = getattr(cls, name)

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        result = original(*args, **kwargs)
        synchronize(device)
        totals[name] = totals.get(name, 0.0) + time.perf_counter() - start
        return result

    setattr(cls, name, wrapper)
    try:
        yield
    finally:
        setattr(cls, name, original)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--small", action="store_true", help="CPU-sized run (TSP10, M = 32, N = 10); the default without CUDA"
    )
    parser.add_argument(
        "--iterations", type=int, default=4, help="iterations per throughput run (the first is warm-up)"
    )
    parser.add_argument("--minutes", type=float, default=3.0, help="budget of the time-to-target run")
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    small = args.small or not cuda
    n, m, traj = (10, 32, 10) if small else (50, 1024, 50)
    minutes = min(args.minutes, 0.3) if small else args.minutes
    name = torch.cuda.get_device_name(device) if cuda else f"CPU ({torch.get_num_threads()} threads)"
    print(f"gpu_check on {name}, torch {torch.__version__}; TSP{n}, M={m} x N={traj}" + (" (small)" if small else ""))
    routing.kool_references = lambda *args, **kwargs: None  # no LKH gaps: the check needs lengths only
    started = time.perf_counter()

    # 1-2. throughput, first losses, peak memory: the default preset at 50 and 100 nodes and the paper's
    # settings, float32 and bf16 autocast
    base = ["--env-id", "tsp-v0", "--num-nodes", str(n), "--num-envs", str(m), "--n-traj", str(traj)]
    base += ["--preset", "rlor", "--eval-interval", "0", "--no-anneal-lr", "--no-track"]
    base += ["--total-timesteps", str(args.iterations * m * (n + 1))]
    shapes = [("tsp-v0", n, "ppo-or"), ("cvrp-v0", n, "ppo-or"), ("tsp-v0", n, "rlor")]
    if not small:
        shapes.insert(1, ("tsp-v0", 100, "ppo-or"))
    for env_id, nodes, preset in shapes:
        steps = nodes + 1 if env_id == "tsp-v0" else 2 * nodes  # the longest episode
        run = ["--env-id", env_id, "--num-nodes", str(nodes), "--num-envs", str(m), "--preset", preset]
        run += ["--eval-interval", "0", "--no-anneal-lr", "--no-track", "--total-timesteps", str(args.iterations * m * steps)]
        run += ["--n-traj", str(traj)] if preset == "rlor" else []
        for amp in (False, True) if cuda else (False,):
            output, losses, peak = train([*run, *(["--amp"] if amp else [])], device)
            first, *rows = iteration_rows(output)
            rollout = sum(float(r["rollout"]) for r in rows) / len(rows)
            update = sum(float(r["update"]) for r in rows) / len(rows)
            sps = (int(rows[-1]["global_step"]) - int(first["global_step"])) / (len(rows) * (rollout + update))
            budget = ppo_or.Args().total_timesteps / (sps * 3600)
            loss_text = ", ".join(f"{tag.split('/')[1]} {value:.5f}" for tag, value in losses.items())
            print(
                f"train {env_id[:-3].upper()}{nodes} {preset} {'bf16 --amp' if amp else 'float32'}: rollout {rollout:.2f} s "
                f"+ update {update:.2f} s per iteration ({update / rollout:.1f}x), {sps:,.0f} env steps/s; "
                f"the default {ppo_or.Args().total_timesteps:,} steps would take {budget:.1f} h; first-iteration "
                f"losses: {loss_text}; peak memory " + (f"{peak:.2f} GiB" if cuda else "n/a (CPU)"),
                flush=True,
            )
    if not cuda:
        print("train bf16 --amp: skipped (needs CUDA)")

    # 3. where an iteration waits: the NumPy env and the host-to-device copies
    totals: dict = {}
    with timed(TSPVectorEnv, "step", totals, device), timed(StateWrapper, "state", totals, device):
        output, _, _ = train([*base[:-1], str(2 * m * (n + 1))], device)
    rows = iteration_rows(output)
    iteration = sum(float(r["rollout"]) + float(r["update"]) for r in rows)
    rollout = sum(float(r["rollout"]) for r in rows)
    print(
        f"waiting, over {len(rows)} iterations: the env {totals['step']:.3f} s ({totals['step'] / iteration:.0%} of the "
        f"iteration, {totals['step'] / rollout:.0%} of the rollout), observation copies to the device "
        f"{totals['state']:.3f} s ({totals['state'] / iteration:.0%}); rollout {rollout:.2f} s, iteration {iteration:.2f} s",
        flush=True,
    )
    print("host traffic: " + traffic_report("tsp-v0", n, 64, cuda), flush=True)

    # 4. evaluation throughput of the four decodes
    if not small and RLOR_TSP50.exists():
        agent, _ = load_agent(RLOR_TSP50, device=device)
        weights = "published RLOR TSP50 weights"
    else:
        torch.manual_seed(0)
        agent, weights = Agent("tsp").to(device).eval(), "untrained weights"
    count = 20 if small else 1000
    data = kool_dataset("tsp", n, "test", count)
    rates = []
    for mode, copies in DECODES:
        decode(agent, {k: v[:2] for k, v in data.items()}, Decoding(mode, augment=copies))  # warm-up
        synchronize(device)
        start = time.perf_counter()
        result = decode(agent, data, Decoding(mode, augment=copies, batch_size=count))
        synchronize(device)
        label = mode + (f" x{copies}" if copies > 1 else "")
        rates.append(f"{label} {count / (time.perf_counter() - start):,.0f}/s (mean {result.lengths.mean():.4f})")
    print(f"eval, {count} TSP{n} test instances, {weights}: " + ", ".join(rates), flush=True)

    # 5. time to the target greedy length (TSP50 only)
    ttq = ["--env-id", "tsp-v0", "--num-nodes", str(n), "--num-envs", str(m), "--no-track"]
    ttq += ["--total-seconds", str(60 * minutes), "--eval-interval", "5" if small else "20"]
    ttq += ["--eval-instances", str(100 if small else 1000)]
    output, _, _ = train(ttq, device)
    marks = []
    for line in output.splitlines():
        found = re.search(r"eval/greedy_length=([\d.]+).*?(\d\d):(\d\d):(\d\d) elapsed", line)
        if found:
            h, mi, s = (int(x) for x in found.groups()[1:])
            marks.append((3600 * h + 60 * mi + s, float(found.group(1))))
    best = min((length for _, length in marks), default=float("nan"))
    reached = [t for t, length in marks if length <= TARGET]
    if n != 50:
        print(f"time to target: TSP{n} greedy {best:.4f} after {60 * minutes:.0f} s (the {TARGET} target is for TSP50)")
    elif reached:
        print(f"time to target: TSP50 greedy {TARGET} reached after {reached[0]} s of training (ppo-or preset)")
    else:
        print(f"time to target: TSP50 greedy {TARGET} not reached in {60 * minutes:.0f} s (best {best:.4f})")
    print(f"gpu_check done in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
