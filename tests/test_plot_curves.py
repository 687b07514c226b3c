"""bench/plot_curves.py on a run's tensorboard file, with the test gaps of either result format."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def fake_run(folder: Path) -> Path:
    """A run folder with the tags ppo_or.py logs, written by tensorboard's own writer."""
    from torch.utils.tensorboard import SummaryWriter

    run = folder / "runs" / "tsp-v0__vs-rl4co__1__1"
    writer = SummaryWriter(str(run))
    for step in range(1, 21):
        for tag, value in (("charts/rollout_seconds", 20.0), ("charts/update_seconds", 40.0),
                           ("charts/tour_length", 10 - step / 5), ("losses/approx_kl", 0.01),
                           ("losses/clipfrac", 0.05), ("losses/entropy", 1.0), ("charts/learning_rate", 3e-4)):  # fmt: skip
            writer.add_scalar(tag, value, step)
    writer.close()
    return run


def plot(tmp_path, *args):
    return subprocess.run(
        [sys.executable, str(ROOT / "bench" / "plot_curves.py"), *map(str, args)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def plots_alone(tmp_path, run: Path, summary: str) -> None:
    """``run`` plots to a figure whose summary line holds ``summary``, and is refused beside an ordinary
    ppo_or.py run (runs of other kinds are plotted apart)."""
    out = tmp_path / "alone.png"
    result = plot(tmp_path, run, "--out", out)
    assert result.returncode == 0, result.stderr
    assert summary in result.stdout and out.stat().st_size > 10_000
    result = plot(tmp_path, run, fake_run(tmp_path), "--out", tmp_path / "x.png")
    assert result.returncode != 0 and "plot them apart" in result.stderr


def test_the_peer_and_the_run_in_one_figure(tmp_path):
    run = fake_run(tmp_path)
    vs = tmp_path / "results.json"  # bench/vs_rl4co.py's rows
    vs.write_text(json.dumps([
        {"trainer": t, "mark": m, "minutes": m, "greedy": g, "multi-greedy": g / 2, "multi-greedy x8": g / 4}
        for t, g0 in (("ppo-or", 10.0), ("rl4co-pomo", 20.0)) for m, g in ((10, g0), (20, g0 * 0.8))
    ]))  # fmt: skip
    ttq = tmp_path / "ttq.json"  # bench/time_to_quality.py's rows
    ttq.write_text(json.dumps([{"run": str(run), "minutes": 10, "greedy_gap": 9.0, "multi-greedy_gap": 4.0}]))
    for marks in (vs, ttq):
        out = tmp_path / f"{marks.stem}.png"
        result = plot(tmp_path, run, "--marks", marks, "--out", out)
        assert result.returncode == 0, result.stderr
        assert "up to 20.0 minutes" in result.stdout and out.stat().st_size > 10_000
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"minutes": 3}]))
    result = plot(tmp_path, run, "--marks", bad, "--out", tmp_path / "bad.png")
    assert result.returncode != 0 and "not a time_to_quality.py or vs_rl4co.py result file" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def fake_rail_run(folder: Path) -> Path:
    """A ppo_flatland.py run folder: an iteration every 30 s of wall clock, validated every 5, and a
    2-hour pause (a stop and its --resume) after iteration 10."""
    from torch.utils.tensorboard import SummaryWriter

    run = folder / "runs" / "flatland-35x35-10__stage__1__1"
    writer = SummaryWriter(str(run))
    for step in range(1, 21):
        wall = 1_000_000.0 + 30 * step + (7200 if step > 10 else 0)
        for tag, value in (("charts/arrival_rate", 0.5 + step / 100), ("losses/approx_kl", 0.004),
                           ("losses/clipfrac", 0.03), ("losses/entropy", 0.25), ("charts/learning_rate", 1e-3)):  # fmt: skip
            writer.add_scalar(tag, value, step, walltime=wall)
        if step % 5 == 0:
            writer.add_scalar("eval/arrival_rate", 0.7, step, walltime=wall)
            writer.add_scalar("eval/deadlock_rate", 0.1, step, walltime=wall)
    writer.close()
    return run


def test_a_railway_run_against_minutes_without_its_pause(tmp_path):
    rail = fake_rail_run(tmp_path)
    out = tmp_path / "rail.png"
    result = plot(tmp_path, rail, "--out", out)
    assert result.returncode == 0, result.stderr
    assert "up to 10.0 minutes" in result.stdout and out.stat().st_size > 10_000  # 20 x 30 s; not 130 minutes
    for args, message in (
        ((rail, fake_run(tmp_path), "--out", tmp_path / "x.png"), "plot them apart"),
        ((rail, "--marks", tmp_path / "none.json", "--out", tmp_path / "x.png"), "ppo_flatland.py runs have none"),
        ((tmp_path, "--out", tmp_path / "x.png"), "holds no ppo_or.py or ppo_flatland.py curves"),
    ):
        result = plot(tmp_path, *args)
        assert result.returncode != 0 and message in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


def test_a_priority_run_beside_the_fixed_orders(tmp_path):
    """A ppo_priorities.py run: its own panels, minutes from rollout + update seconds."""
    from torch.utils.tensorboard import SummaryWriter

    run = tmp_path / "runs" / "flatland-50x50-30__prio__1__1"
    writer = SummaryWriter(str(run))
    for step in range(1, 21):
        for tag, value in (("charts/rollout_seconds", 20.0), ("charts/update_seconds", 1.0),
                           ("charts/arrival_rate", 0.9 + step / 400), ("charts/reward", 0.88 + step / 400),
                           ("losses/approx_kl", 0.01), ("losses/clipfrac", 0.1), ("losses/entropy", 2.0)):  # fmt: skip
            writer.add_scalar(tag, value, step)
        if step % 5 == 0:
            for tag, value in (("eval/arrival_rate", 0.99), ("eval/longest_first_arrival_rate", 0.993),
                               ("eval/closest_first_arrival_rate", 0.987)):  # fmt: skip
                writer.add_scalar(tag, value, step)
    writer.close()
    plots_alone(tmp_path, run, "up to 7.0 minutes")  # 20 x (20 + 1) s


def validated_run(run: Path, evals) -> Path:
    """A ppo_or.py run folder of 20 iterations (3 s of rollout and update each) validated every 10:
    ``evals(step)`` gives the validation tags and their values at that step."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(run))
    for step in range(1, 21):
        for tag, value in (("charts/rollout_seconds", 1.0), ("charts/update_seconds", 2.0), ("charts/tour_length", 12.0),
                           ("losses/approx_kl", 0.01), ("losses/clipfrac", 0.05), ("losses/entropy", 0.3)):  # fmt: skip
            writer.add_scalar(tag, value, step)
        if step % 10 == 0:
            for tag, value in evals(step).items():
                writer.add_scalar(tag, value, step)
    writer.close()
    return run


def test_a_multi_task_run_shows_its_validation_per_group_of_variants(tmp_path):
    """A ppo_or.py run on the 48 variants logs its validation length per group (classic, mixed backhaul,
    multi-depot) and no gaps: the last panel draws the three; an ordinary ppo_or.py run is plotted apart."""
    groups = {"classic": 11.9, "mixed_backhaul": 12.7, "multi_depot": 10.1}
    run = validated_run(tmp_path / "runs" / "mtvrp48-v0__all__1__1", lambda step: {
        **{f"eval/{group}_multi_greedy_length": value - step / 100 for group, value in groups.items()},
        "eval/multi_greedy_length": 11.1,
    })  # fmt: skip
    plots_alone(tmp_path, run, "up to 1.0 minutes, 3 validation curves")


def test_a_run_validated_by_length_only_shows_its_lengths(tmp_path):
    """A ppo_or.py run on another --distribution logs validation lengths and no gaps: the last panel draws
    its greedy and multi-greedy lengths; a run with gaps is plotted apart."""
    run = validated_run(tmp_path / "runs" / "vrptw-v0__solomon__1__1", lambda step: {
        "eval/greedy_length": 14.5 - step / 100, "eval/multi_greedy_length": 13.8 - step / 100,
    })  # fmt: skip
    plots_alone(tmp_path, run, "up to 1.0 minutes, 2 validation curves")
