"""The training curves of ppo_or.py or ppo_flatland.py runs as one PNG, the runs overlaid, against training
minutes, each with a 9-iteration running mean. ppo_or.py: sampled tour length, approx-KL, clip fraction,
entropy, learning rate (minutes: the iterations' rollout + update seconds summed); the sixth panel is
the test gap at the marks of a bench/time_to_quality.py or bench/vs_rl4co.py result file (--marks;
greedy solid, multi-greedy dashed, multi-greedy x8 dotted; vs_rl4co.py's peer beside ppo-or), else the
run's own validation gaps (``eval/greedy_gap``, ``eval/multi_greedy_gap``, where it logged them), or its
validation lengths where it logged lengths only (a run on another --distribution), else the KL an update
reached; a multi-task run (``mtvrp48-v0``) shows its validation length per group of
variants (classic solid, mixed backhaul dashed, multi-depot dotted). ppo_flatland.py: the training
maps' arrival rate, the same three losses and the learning rate, and the validation maps' arrival
(solid) and deadlock (dashed) rates (minutes: the wall clock between iterations, validation included, a
pause of over 10 minutes, as between a stop and its --resume, counted as one median iteration).
ppo_priorities.py: the sampled orders' planned arrival and reward, the three losses,
and the validation maps' planned arrival of the learned order (solid) beside the longest-first
(dashed) and closest-first (dotted) orders (minutes: rollout + update seconds).

    python bench/plot_curves.py bench-runs/vs-rl4co-tsp50/runs/RUN --marks bench-runs/vs-rl4co-tsp50/results.json --out x.png
    python bench/plot_curves.py bench-runs/s38/runs/* --marks bench-runs/s38/time_to_quality_*.json --out cmp.png
    python bench/plot_curves.py runs/tsp-v0__tsp50-mb128__1__* --out docs/images/tsp50_mb128_curves.png
    python bench/plot_curves.py runs/flatland-35x35-10__* --out docs/images/flatland35_sampled_curves.png
"""

import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from ppoor.envs.vrp import GROUPS  # noqa: E402
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

PANELS = (
    ("charts/tour_length", "sampled tour length"),
    ("losses/approx_kl", "approx-KL (before the last minibatch)"),
    ("losses/clipfrac", "clip fraction"),
    ("losses/entropy", "entropy"),
    ("charts/learning_rate", "learning rate"),
    ("losses/update_kl", "KL after the update (steers the lr)"),
)
RAIL_PANELS = (("charts/arrival_rate", "arrival rate, training maps (sampled)"), *PANELS[1:5])
PRIORITY_PANELS = (
    ("charts/arrival_rate", "planned arrival, sampled orders"), ("charts/reward", "reward, sampled orders"),
    *PANELS[1:4],
)  # fmt: skip
PAUSE = 600.0
"""Seconds between two ppo_flatland.py iterations beyond which the gap is a pause, not training."""


def running_mean(values: list[float], width: int = 9) -> list[float]:
    return [
        sum(values[max(0, i - width + 1) : i + 1]) / len(values[max(0, i - width + 1) : i + 1])
        for i in range(len(values))
    ]


def label_of(run: Path) -> str:
    """A run's label: the configuration of a time_to_quality run (``..__ttq-NAME__..``), else its folder name."""
    parts = run.name.split("__")
    return parts[1].removeprefix("ttq-") if len(parts) > 2 else run.name


VALIDATION = ("eval/greedy_gap", "eval/multi_greedy_gap")
LENGTH_VALIDATION = ("eval/greedy_length", "eval/multi_greedy_length")
RAIL_VALIDATION = ("eval/arrival_rate", "eval/deadlock_rate")
PRIORITY_VALIDATION = ("eval/arrival_rate", "eval/longest_first_arrival_rate", "eval/closest_first_arrival_rate")
GROUP_VALIDATION = tuple(f"eval/{group}_multi_greedy_length" for group in GROUPS)  # as training.routing logs them
CURVES = {
    "ppo_or": (PANELS, VALIDATION, "validation gap %: greedy solid, multi-greedy dashed"),
    "ppo_or_length": (PANELS, LENGTH_VALIDATION, "validation length: greedy solid, multi-greedy dashed"),
    "multi_task": (PANELS, GROUP_VALIDATION, "validation length: classic -, mixed backhaul --, depots :"),
    "ppo_flatland": (RAIL_PANELS, RAIL_VALIDATION, "validation: arrival solid, deadlocked dashed"),
    "priorities": (PRIORITY_PANELS, PRIORITY_VALIDATION, "validation planned arrival: learned -, longest --, closest :"),
}
"""Each trainer's (panels read from its runs, its validation tags, the validation panel's title)."""


def wall_seconds(events: list) -> list[float]:
    """Seconds between successive tensorboard events [I] (the first: the median), a gap over ``PAUSE``
    replaced by the median gap."""
    gaps = [b.wall_time - a.wall_time for a, b in zip(events, events[1:], strict=False)]
    usual = sorted(gaps)[len(gaps) // 2] if gaps else 0.0
    return [usual] + [gap if gap <= PAUSE else usual for gap in gaps]


def read_run(run: Path) -> tuple[str, list[float], dict]:
    """(the trainer, "ppo_or", "ppo_or_length" (ppo_or.py validated by length only), "multi_task"
    (ppo_or.py validated per group of variants), "ppo_flatland" or
    "priorities" (ppo_priorities.py); training
    minutes per iteration; {tag: values}) of one
    run folder; the validation figures (logged at some iterations only) as {tag: [(minutes, value)]}
    under "validation"."""
    if not run.is_dir():
        sys.exit(f"error: {run}: no such run folder")
    events = EventAccumulator(str(run), size_guidance={"scalars": 0})
    events.Reload()
    tags = set(events.Tags()["scalars"])
    if "charts/rollout_seconds" in tags:
        trainer = "priorities" if "charts/arrival_rate" in tags else "multi_task" if GROUP_VALIDATION[0] in tags else "ppo_or"
        if trainer == "ppo_or" and VALIDATION[1] not in tags and LENGTH_VALIDATION[1] in tags:
            trainer = "ppo_or_length"
        clock = events.Scalars("charts/rollout_seconds")
        seconds = [r.value + u.value for r, u in zip(clock, events.Scalars("charts/update_seconds"), strict=True)]
    elif "charts/arrival_rate" in tags:
        trainer, clock = "ppo_flatland", events.Scalars("charts/arrival_rate")
        seconds = wall_seconds(clock)
    else:
        sys.exit(f"error: {run} holds no ppo_or.py or ppo_flatland.py curves (no charts/rollout_seconds or charts/arrival_rate)")
    panels, validation, _ = CURVES[trainer]
    minutes = [sum(seconds[: i + 1]) / 60 for i in range(len(seconds))]
    at = {e.step: m for e, m in zip(clock, minutes, strict=False)}
    values = {tag: [e.value for e in events.Scalars(tag)][: len(minutes)] for tag, _ in panels if tag in tags}
    values["validation"] = {tag: [(at[e.step], e.value) for e in events.Scalars(tag) if e.step in at]
                            for tag in validation if tag in tags}  # fmt: skip
    return trainer, minutes, values


def read_marks(path: Path) -> list[dict]:
    """The test gaps at time marks of a bench/time_to_quality.py result file (one run per row) or of a
    bench/vs_rl4co.py results.json (ppo-or and the peer): rows {label, minutes, greedy, multi-greedy and,
    where measured, multi-greedy x8}."""
    try:
        rows = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        sys.exit(f"error: --marks {path}: not a time_to_quality.py or vs_rl4co.py result file ({exc})")
    if isinstance(rows, list) and all(isinstance(r, dict) and "greedy_gap" in r for r in rows):
        return [
            {"label": label_of(Path(r["run"])), "minutes": r["minutes"], "greedy": r["greedy_gap"],
             "multi-greedy": r["multi-greedy_gap"]}
            for r in rows
        ]  # fmt: skip
    if isinstance(rows, list) and all(isinstance(r, dict) and {"trainer", "greedy"} <= set(r) for r in rows):
        keys = ("minutes", "greedy", "multi-greedy", "multi-greedy x8")
        return [{"label": r["trainer"], **{k: r[k] for k in keys if k in r}} for r in rows]
    sys.exit(f"error: --marks {path}: not a time_to_quality.py or vs_rl4co.py result file (rows with their gaps)")


def plot_marks(ax, marks: list[dict], run_labels: list[str]) -> None:
    """Each trainer's test gaps at the marks: greedy solid, multi-greedy dashed, multi-greedy x8 dotted;
    a trainer that is one of the runs keeps the run's colour, a peer gets the next free one."""
    labels = list(dict.fromkeys(r["label"] for r in marks))
    peers = [label for label in labels if label not in run_labels]
    for label in labels:
        k = run_labels.index(label) if label in run_labels else len(run_labels) + peers.index(label)
        rows = sorted((r for r in marks if r["label"] == label), key=lambda r: r["minutes"])
        for style, key in (("o-", "greedy"), ("o--", "multi-greedy"), ("o:", "multi-greedy x8")):
            if all(key in r for r in rows):
                line = ax.plot([r["minutes"] for r in rows], [r[key] for r in rows], style, color=f"C{k % 10}", ms=3)
                if key == "greedy":
                    line[0].set_label(label)
    ax.legend(fontsize=7)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="+", help="ppo_or.py or ppo_flatland.py run folders (runs/...)")
    parser.add_argument("--out", type=Path, required=True, help="the PNG to write")
    parser.add_argument(
        "--marks", type=Path, nargs="*", default=[],
        help="time_to_quality.py or vs_rl4co.py result files: the test gaps (the peer's too)"
    )
    parser.add_argument("--title", default=None, help="the figure's title (default: the runs' names)")
    args = parser.parse_args()
    read = [(label_of(run), *read_run(run)) for run in args.runs]
    trainers = {trainer for _, trainer, _, _ in read}
    if len(trainers) > 1:
        sys.exit("error: runs of different trainers (ppo_or.py by gap, by length only or per group of variants, ppo_flatland.py, ppo_priorities.py) have different curves: plot them apart")
    trainer = trainers.pop()
    if trainer not in ("ppo_or", "ppo_or_length", "multi_task") and args.marks:
        sys.exit("error: --marks are test gaps of routing runs; ppo_flatland.py runs have none")
    runs = [(label, minutes, values) for label, _, minutes, values in read]
    marks = [row for path in args.marks for row in read_marks(path)]
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.5))
    validated = any(values["validation"] for _, _, values in runs)
    trainer_panels, validation_tags, validation_title = CURVES[trainer]
    last = ("validation", validation_title) if validated else PANELS[5]
    marks_title = "test gap %: greedy -, multi-greedy --, x8 :"
    panels = trainer_panels[:5] + ((("marks", marks_title),) if marks else (last,))
    for ax, (tag, title) in zip(axes.flat, panels, strict=True):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("training minutes")
        for k, (label, minutes, values) in enumerate(runs):
            colour = f"C{k % 10}"
            if tag == "marks":
                continue  # drawn once for every trainer below
            if tag == "validation":
                styles = ("o-", "o--", "o:")[: len(validation_tags)]
                for style, points in zip(styles, (values[tag].get(t, []) for t in validation_tags), strict=True):
                    ax.plot([m for m, _ in points], [v for _, v in points], style, color=colour, ms=3, label=label)
                continue
            if tag not in values:
                continue
            series = values[tag]
            if len(runs) == 1:
                ax.plot(minutes[: len(series)], series, lw=0.5, alpha=0.4, color=colour)
            ax.plot(minutes[: len(series)], running_mean(series), lw=1.5, color=colour, label=label)
        if tag == "marks":
            plot_marks(ax, marks, [label for label, _, _ in runs])
        if "kl" in tag or tag == "marks":
            ax.set_yscale("log")
        if not ax.lines:
            ax.text(0.5, 0.5, "not logged", ha="center", transform=ax.transAxes)
    if len(runs) > 1:
        axes.flat[0].legend(fontsize=8)
    fig.suptitle(args.title or ", ".join(label for label, _, _ in runs), fontsize=11)
    fig.tight_layout()
    fig.savefig(args.out, dpi=80)
    longest = max(minutes[-1] for _, minutes, _ in runs)
    curves = sum(bool(points) for _, _, values in runs for points in values["validation"].values())
    print(f"wrote {args.out} ({len(runs)} runs, up to {longest:.1f} minutes, {curves} validation curves)")


if __name__ == "__main__":
    main()
