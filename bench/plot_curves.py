"""The training curves of one ppo_or.py run as one PNG: sampled tour length, approx-KL, the KL an
update reached, clip fraction, entropy and learning rate against training minutes (the iterations'
rollout + update seconds summed), each with a 9-iteration running mean.

    python bench/plot_curves.py bench-runs/vs-rl4co-tsp50/runs/RUN --out docs/images/tsp50_default_curves.png
"""

import argparse
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

PANELS = (
    ("charts/tour_length", "sampled tour length"),
    ("losses/approx_kl", "approx-KL (before the last minibatch)"),
    ("losses/update_kl", "KL after the update (steers the lr)"),
    ("losses/clipfrac", "clip fraction"),
    ("losses/entropy", "entropy"),
    ("charts/learning_rate", "learning rate"),
)


def running_mean(values: list[float], width: int = 9) -> list[float]:
    return [sum(values[max(0, i - width + 1) : i + 1]) / len(values[max(0, i - width + 1) : i + 1]) for i in range(len(values))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a ppo_or.py run folder (runs/...)")
    parser.add_argument("--out", type=Path, required=True, help="the PNG to write")
    parser.add_argument("--title", default=None, help="the figure's title (default: the run's name)")
    args = parser.parse_args()
    if not args.run.is_dir():
        sys.exit(f"error: {args.run}: no such run folder")
    events = EventAccumulator(str(args.run), size_guidance={"scalars": 0})
    events.Reload()
    tags = set(events.Tags()["scalars"])
    if "charts/rollout_seconds" not in tags:
        sys.exit(f"error: {args.run} holds no ppo_or.py curves (no charts/rollout_seconds)")
    seconds = [r.value + u.value for r, u in zip(events.Scalars("charts/rollout_seconds"),
                                                  events.Scalars("charts/update_seconds"), strict=True)]  # fmt: skip
    minutes = [sum(seconds[: i + 1]) / 60 for i in range(len(seconds))]
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.5))
    for ax, (tag, title) in zip(axes.flat, PANELS, strict=True):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("training minutes")
        if tag not in tags:
            ax.text(0.5, 0.5, "not logged", ha="center", transform=ax.transAxes)
            continue
        values = [e.value for e in events.Scalars(tag)][: len(minutes)]
        ax.plot(minutes[: len(values)], values, lw=0.5, alpha=0.4, color="C0")
        ax.plot(minutes[: len(values)], running_mean(values), lw=1.5, color="C0")
        if "kl" in tag:
            ax.set_yscale("log")
    fig.suptitle(args.title or args.run.name, fontsize=11)
    fig.tight_layout()
    fig.savefig(args.out, dpi=80)
    print(f"wrote {args.out} ({len(minutes)} iterations, {minutes[-1]:.1f} minutes)")


if __name__ == "__main__":
    main()
