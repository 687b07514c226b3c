"""ppo_flatland.py and eval_flatland.py as a user runs them."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from in_process import run_script

pytest.importorskip("flatland", reason="flatland-rl is an optional extra: pip install -e '.[flatland]'")

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "checkpoints" / "flatland" / "flatland35.pt"
SCORES = (
    "arrival_rate", "on_time_rate", "deadlock_rate", "normalized_score", "seconds_per_step", "max_seconds_per_step",
    "seconds_before_first_step", "flatland_seconds_per_step",
)  # fmt: skip


def run(script, *args, cwd, timeout=1800):
    return subprocess.run(
        [sys.executable, str(ROOT / script), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """Two iterations of ppo_flatland.py on 2 maps: its run folder."""
    cwd = tmp_path_factory.mktemp("flatland")
    result = run(
        "ppo_flatland.py", "--num-envs", "2", "--total-timesteps", "50", "--eval-interval", "1",
        "--eval-episodes", "2", "--checkpoint-interval", "1", "--imitation-episodes", "2", "--imitation-epochs", "1",
        "--release-episodes", "4", cwd=cwd,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "imitation: " in result.stdout and "episodes, greedy agreement" in result.stdout
    assert "start: validation arrival rate" in result.stdout  # the imitated policy, kept if nothing beats it
    assert "release threshold 0.25: validation arrival rate" in result.stdout
    assert "kept (chosen on the validation maps)" in result.stdout
    assert "final: greedy policy on 2 validation maps: arrival rate" in result.stdout
    (run_dir,) = (cwd / "runs").iterdir()
    return run_dir


def test_training_logs_the_tags_and_checkpoints(tiny_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tiny_run))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    for tag in ("charts/arrival_rate", "charts/deadlock_rate", "charts/normalized_score", "charts/decisions_per_second",
                "losses/policy_loss", "losses/value_loss", "losses/entropy", "eval/arrival_rate"):  # fmt: skip
        assert tag in tags
    assert sorted(p.name for p in (tiny_run / "ckpt").iterdir())[-1].endswith(".pt")


def test_resume_continues_the_run(tiny_run):
    import torch

    ckpt = sorted((tiny_run / "ckpt").iterdir(), key=lambda p: int(p.stem))[-1]
    cwd = tiny_run.parent.parent
    result = run("ppo_flatland.py", "--resume", str(ckpt), cwd=cwd)
    assert result.returncode != 0 and "the run already finished" in result.stderr  # as ppo_or.py: nothing written
    result = run("ppo_flatland.py", "--resume", str(ckpt), "--num-envs", "3", cwd=cwd)
    assert result.returncode != 0 and "--num-envs cannot change when resuming" in result.stderr
    done = torch.load(ckpt, weights_only=True)["global_step"]  # Flatland 3's episodes vary in length
    result = run("ppo_flatland.py", "--resume", str(ckpt), "--total-timesteps", str(done + 1), cwd=cwd)
    assert result.returncode == 0, result.stderr  # a larger budget continues the run
    assert f"iteration={int(ckpt.stem) + 1} " in result.stdout and "final: greedy policy" in result.stdout


def test_eval_writes_the_contract_json(tiny_run, tmp_path):
    out = tmp_path / "eval.json"
    result = run(
        "eval_flatland.py", "--checkpoint", str(tiny_run / "ckpt"), "--sizes", "25x25x5", "--episodes", "2",
        "--output", str(out), "--render", str(tmp_path / "episode.png"), cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(out.read_text())
    assert (row["width"], row["height"], row["trains"], row["episodes"]) == (25, 25, 5, 2)
    for rule in ("policy", "policy_sampled", "shortest_path", "shortest_path_release", "random", "deadlock_avoidance",
                 "shortest_path_safety"):  # fmt: skip
        changes = {"decisions", "changed_to_move", "changed_to_stop", "changed_branch"} if "policy" in rule else set()
        assert set(row[rule]) == set(SCORES) | {"decisions_per_second", "failed_maps"} | changes
        assert row[rule]["failed_maps"] == [] and 0 < row[rule]["flatland_seconds_per_step"]
        assert 0 < row[rule]["seconds_per_step"] <= row[rule]["max_seconds_per_step"]
        assert 0 <= row[rule]["on_time_rate"] <= row[rule]["arrival_rate"] <= 1 and 0 <= row[rule]["deadlock_rate"] <= 1
        assert 0 <= row[rule]["normalized_score"] <= 1
    for rule in ("planner", "planner_longest", "planner_random"):
        assert set(row[rule]) == set(SCORES) | {"planning_seconds", "replans", "failed_maps"}
        assert row[rule]["arrival_rate"] <= row["oracle"]["arrival_rate"] and row[rule]["failed_maps"] == []
    assert set(row["oracle"]) == {"arrival_rate"}
    assert (tmp_path / "episode.png").stat().st_size > 1000


def test_export_kept_writes_the_best_validated_policy_of_a_stopped_state(tiny_run, tmp_path):
    """A state stopped before its end holds its last weights and, beside them, the policy of its best
    validation: ``export --kept`` writes the latter, a plain export the former, and a state that kept
    none fails in one line."""
    import torch
    from ppoor.models.checkpoints import save_checkpoint
    from ppoor.railway.policy import load_rail_policy

    last = sorted((tiny_run / "ckpt").iterdir(), key=lambda p: int(p.stem))[-1]
    state = torch.load(last, weights_only=True)
    best = {name: weights + 1.0 for name, weights in state["model"].items()}
    save_checkpoint({**state, "best": {"arrival_rate": 0.5, "iteration": 3, "model": best}}, tmp_path / "state.pt")
    save_checkpoint({key: value for key, value in state.items() if key != "best"}, tmp_path / "unkept.pt")
    for flags, expected in ((["--kept"], best), ([], state["model"])):
        result = subprocess.run(
            [sys.executable, "-m", "ppoor.models.export", str(tmp_path / "state.pt"), str(tmp_path / "out.pt"), *flags],
            cwd=ROOT, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        policy, exported = load_rail_policy(tmp_path / "out.pt")
        assert "optimizer" not in exported and "best" not in exported
        for name, weights in policy.state_dict().items():
            torch.testing.assert_close(weights, expected[name])
    result = subprocess.run(
        [sys.executable, "-m", "ppoor.models.export", str(tmp_path / "unkept.pt"), str(tmp_path / "x.pt"), "--kept"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 1 and not (tmp_path / "x.pt").exists()
    assert result.stderr.count("\n") == 1 and "keeps no best policy" in result.stderr


def test_eval_plays_only_the_rules_asked_for_with_the_chosen_threshold(tiny_run, tmp_path):
    import torch
    from ppoor.models.checkpoints import export_weights
    from ppoor.railway.trainer import RELEASE_THRESHOLDS

    ckpt = sorted((tiny_run / "ckpt").iterdir(), key=lambda p: int(p.stem))[-1]
    chosen = torch.load(ckpt, weights_only=True)["release_threshold"]
    assert chosen in RELEASE_THRESHOLDS
    export_weights(ckpt, tmp_path / "shipped.pt")  # the weights-only copy keeps it
    assert torch.load(tmp_path / "shipped.pt", weights_only=True)["release_threshold"] == chosen
    out = tmp_path / "eval.json"
    result = run(
        "eval_flatland.py", "--checkpoint", str(ckpt), "--sizes", "25x25x5", "--episodes", "1", "--rules",
        "policy_learned_release", "shortest_path_safety", "--output", str(out), cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"learned release threshold {chosen:g}" in result.stdout
    (row,) = json.loads(out.read_text())
    assert {"policy_learned_release", "shortest_path_safety", "lead_over_safety_layer_alone"} <= set(row)
    assert not {"policy", "random", "deadlock_avoidance", "lead_over_best_baseline"} & set(row)


def test_a_segment_veto_run_trains_and_evaluates_beside_the_layer_alone(tmp_path):
    """--veto segment: a residual policy trains under the weaker veto, its
    checkpoint says so, and eval_flatland.py plays it with that veto beside the layer alone (the
    reservation check), both on the same map."""
    import torch

    result = run(
        "ppo_flatland.py", "--veto", "segment", "--prior-weight", "2", "--num-envs", "2", "--total-timesteps", "40",
        "--eval-interval", "0", "--eval-episodes", "1", "--release-episodes", "0", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    ckpt = sorted((run_dir / "ckpt").iterdir(), key=lambda p: int(p.stem))[-1]
    assert torch.load(ckpt, weights_only=True)["args"]["veto"] == "segment"
    out = tmp_path / "eval.json"
    result = run(
        "eval_flatland.py", "--checkpoint", str(ckpt), "--sizes", "25x25x5", "--episodes", "1", "--rules", "policy",
        "shortest_path_safety", "--output", str(out), cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "segment veto" in result.stdout
    (row,) = json.loads(out.read_text())
    assert 0 <= row["policy"]["arrival_rate"] <= 1 and "lead_over_safety_layer_alone" in row


def test_a_curriculum_starts_from_a_smaller_maps_policy(tmp_path):
    """--init-from (a curriculum): a run on larger maps starts from the shipped 35x35 policy's weights,
    evaluates that policy before PPO (kept if nothing beats it) and learns its own release classifier."""
    import torch

    result = run(
        "ppo_flatland.py", "--init-from", "flatland/flatland35", "--width", "40", "--height", "40", "--trains", "6",
        "--num-envs", "1", "--total-timesteps", "1", "--eval-interval", "1", "--eval-episodes", "1",
        "--release-episodes", "2", "--learning-rate", "1e-10", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "start: validation arrival rate" in result.stdout
    (run_dir,) = (tmp_path / "runs").iterdir()
    ckpt = torch.load(sorted((run_dir / "ckpt").iterdir(), key=lambda p: int(p.stem))[-1], weights_only=True)
    shipped = torch.load(SHIPPED, weights_only=True)["model"]
    assert all(torch.allclose(ckpt["model"][k], shipped[k], atol=1e-6) for k in shipped)  # lr 1e-10: unchanged
    assert ckpt["args"]["width"] == 40 and "release_model" in ckpt


@pytest.mark.parametrize(
    ("script", "args", "message"),
    [
        ("ppo_flatland.py", ["--tree-depth", "0"], "--tree-depth must be between 1 and 6, got 0"),
        ("ppo_flatland.py", ["--total-seconds", "-5"], "--total-seconds must be a finite number of at least 1"),
        ("eval_flatland.py", ["--threads", "0"], "--threads must be between 1 and 1024"),
        ("eval_flatland.py", ["--seed", "-1"], "--seed must be between 0"),
        ("eval_flatland.py", ["--max-active", "0"], "--max-active must be between 1"),
        ("eval_flatland.py", ["--threshold", "7"], "--threshold must be between 0 and 1, got 7"),
        ("eval_flatland.py", ["--planner-seconds", "0"], "--planner-seconds must be between 0.001"),
        ("eval_flatland.py", ["--output", "."], "is a folder; name a .json file"),
        ("ppo_flatland.py", ["--trains", "12", "--cities", "2", "--no-flatland3"], "do not fit"),
        ("ppo_flatland.py", ["--width", "10"], "--width must be between 20 and 1000, got 10"),
        ("ppo_flatland.py", ["--resume", "missing.pt"], "does not exist"),
        ("ppo_flatland.py", ["--imitation-episodes", "5", "--no-safety"], "drop --no-safety"),
        ("eval_flatland.py", ["--sizes", "10x10x2"], "at least 20x20"),
        ("eval_flatland.py", ["--sizes", "big"], "WIDTHxHEIGHTxTRAINS"),
        ("eval_flatland.py", ["--rules", "policy", "best"], "--rules best: unknown; choose from policy"),
        ("eval_flatland.py", ["--rules"], "--rules: name at least one of policy"),
        ("ppo_flatland.py", ["--wait", "--no-safety"], "drop --no-safety"),
        ("ppo_flatland.py", ["--veto", "segment", "--no-safety"], "--veto is a setting of the safety layer"),
        ("ppo_flatland.py", ["--prior-weight", "nan"], "--prior-weight must be"),
        ("eval_flatland.py", ["--output", "/no/such/folder/x.json"], "does not exist"),
        ("eval_flatland.py", ["--checkpoint", "missing.pt"], "does not exist"),
        ("ppo_flatland.py", ["--init-from", "missing.pt"], "--init-from: checkpoint missing.pt does not exist"),
        ("ppo_flatland.py", ["--init-from", "flatland/flatland35", "--hidden", "64"], "--hidden must match"),
        ("ppo_flatland.py", ["--init-from", "cvrp20"], "not a railway policy"),
    ],
)
def test_bad_arguments_fail_in_one_line(tmp_path, script, args, message):
    result = run_script(ROOT / script, *args, cwd=tmp_path)
    assert result.returncode != 0 and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (tmp_path / "runs").exists()


def test_a_routing_checkpoint_is_not_a_railway_policy(tmp_path):
    result = run(
        "eval_flatland.py", "--checkpoint", str(ROOT / "checkpoints" / "vrptw20.pt"), cwd=tmp_path, timeout=120
    )
    assert result.returncode != 0 and "not a railway policy" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_short_training_run_raises_the_arrival_rate(tmp_path, monkeypatch):
    """About 35 s of PPO (10,000 steps without the safety layer, which alone lands most trains, and
    without imitation: the policy alone learns) on 25x25 maps with 2 trains: the greedy policy's
    arrival rate on 20 fixed validation maps rises above the untrained policy's (0.0 -> 0.225 here)."""
    import torch
    from ppoor import ppo_flatland
    from ppoor.railway import trainer as railway
    from ppoor.railway.policy import RailPolicy, load_rail_policy
    from ppoor.railway.tree import EDGE_FEATURES, GLOBAL_FEATURES, edge_slots

    monkeypatch.chdir(tmp_path)
    args = ppo_flatland.Args(
        trains=2, max_active=2, total_timesteps=10_000, eval_interval=0, eval_episodes=20, checkpoint_interval=0,
        release_episodes=0, safety=False,
    )  # fmt: skip
    torch.manual_seed(args.seed)  # the trainer's initial weights
    untrained = railway.evaluate(RailPolicy(edge_slots(2), len(EDGE_FEATURES), len(GLOBAL_FEATURES)).eval(), args)
    ppo_flatland.main(args)
    (run,) = (tmp_path / "runs").iterdir()
    trained_policy, _ = load_rail_policy(sorted((run / "ckpt").iterdir(), key=lambda p: int(p.stem))[-1])
    trained = railway.evaluate(trained_policy, args)
    print(f"arrival rate: untrained {untrained['arrival_rate']:.3f}, trained {trained['arrival_rate']:.3f}")
    assert trained["arrival_rate"] >= untrained["arrival_rate"] + 0.1, (untrained, trained)


def test_the_shipped_checkpoint_reproduces_its_figures(tmp_path):
    """checkpoints/flatland/flatland35.pt (README's table) on the first 4 evaluation maps of 25x25 with 5
    trains under the NeurIPS 2020 rules it was trained under (--no-flatland3): the greedy policy within the safety layer lands 18 of 20 trains (0.90), shortest paths 11
    (0.55); the layer alone with shortest-path choices is reported beside it."""
    out = tmp_path / "eval.json"
    result = run(
        "eval_flatland.py", "--checkpoint", str(SHIPPED), "--sizes", "25x25x5", "--episodes", "4", "--output", str(out),
        "--no-flatland3", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(out.read_text())
    assert row["policy"]["arrival_rate"] == pytest.approx(0.90)
    assert row["shortest_path"]["arrival_rate"] == pytest.approx(0.55)
    assert row["policy"]["deadlock_rate"] == 0 and "shortest_path_safety" in row
    assert row["policy"]["arrival_rate"] > row["random"]["arrival_rate"] + 0.5


def test_the_shipped_residual_checkpoint_plays_the_layers_rule(tmp_path):
    """checkpoints/flatland/flatland50.pt (docs/railway.md, the table): its kept policy is the
    untrained residual one, so with the release heuristic it scores exactly what the layer alone does
    with the same release (first 4 maps of 35x35 with 10 trains: 39 of 40 trains, 0.975); its learned
    release lands 39 too there."""
    out = tmp_path / "eval.json"
    result = run(
        "eval_flatland.py", "--checkpoint", "flatland/flatland50", "--sizes", "35x35x10", "--episodes", "4",
        "--rules", "policy", "policy_learned_release", "shortest_path_safety", "--output", str(out), "--no-flatland3",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "waiting allowed" in result.stdout and "learned release threshold 0\n" in result.stdout
    (row,) = json.loads(out.read_text())
    assert row["policy"]["arrival_rate"] == row["shortest_path_safety"]["arrival_rate"] == pytest.approx(0.975)
    assert row["policy"]["normalized_score"] == row["shortest_path_safety"]["normalized_score"]
    assert row["policy_learned_release"]["arrival_rate"] == pytest.approx(0.975)
    assert row["policy"]["decisions"] > 100  # and it never leaves the layer's rule
    assert row["policy"]["changed_to_move"] == row["policy"]["changed_to_stop"] == row["policy"]["changed_branch"] == 0


def test_a_run_validated_with_sampled_actions_keeps_and_releases_by_them(tmp_path):
    """--eval-sample: validation draws the policy's actions (seeded, so the same policy scores the same
    twice) instead of taking the most likely ones (on these maps the two differ), the run says so at
    the end and in its checkpoint, and eval_flatland.py plays its learned release with sampled actions."""
    import torch
    from ppoor.ppo_flatland import Args
    from ppoor.railway.policy import load_rail_policy
    from ppoor.railway.trainer import evaluate

    result = run(
        "ppo_flatland.py", "--no-safety", "--eval-sample", "--num-envs", "2", "--total-timesteps", "40",
        "--eval-interval", "1", "--eval-episodes", "2", "--release-episodes", "3", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "final: sampled policy on 2 validation maps" in result.stdout
    (run_dir,) = (tmp_path / "runs").iterdir()
    ckpt = sorted((run_dir / "ckpt").iterdir(), key=lambda p: int(p.stem))[-1]
    assert torch.load(ckpt, weights_only=True)["args"]["eval_sample"] is True
    policy, _ = load_rail_policy(ckpt)
    sampled = Args(safety=False, eval_sample=True, eval_episodes=3)
    first, again = evaluate(policy, sampled), evaluate(policy, sampled)
    assert first == again
    greedy = evaluate(policy, Args(safety=False, eval_episodes=3))
    assert greedy != first
    result = run(
        "eval_flatland.py", "--checkpoint", str(ckpt), "--sizes", "25x25x5", "--episodes", "1", "--rules",
        "policy_learned_release", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "(chosen with sampled actions, as the learned release plays)" in result.stdout


def test_a_checkpoint_lacking_a_setting_is_refused_with_the_way_on(tiny_run, tmp_path):
    """A training state whose arguments lack one of today's (--eval-sample: an older ppo-or's) is not
    resumed with a guessed value: one line says to start from its weights with --init-from."""
    import torch

    ckpt = sorted((tiny_run / "ckpt").iterdir(), key=lambda p: int(p.stem))[-1]
    state = torch.load(ckpt, weights_only=True)
    del state["args"]["eval_sample"]
    old = tmp_path / "old.pt"
    torch.save(state, old)
    budget = str(state["global_step"] + 200)  # more than it did (another test may have resumed the run)
    result = run("ppo_flatland.py", "--resume", str(old), "--total-timesteps", budget, cwd=tmp_path)
    assert result.returncode != 0 and result.stderr.strip().splitlines()[-1] == (
        f"error: --resume: {old} was written by an older ppo_flatland.py without --eval-sample; start a new run "
        f"from its weights with --init-from {old}"
    )


def test_a_rule_that_fails_on_a_map_is_a_row_that_says_so():
    """A rule that raises on one map (flatland-baselines' heuristic asserts on a map whose train has no
    path) scores that map 0 on the quality scores, lists it with its error in one line, and the other maps
    count as played; the largest step's seconds is the largest over the maps it played."""
    from ppoor.eval_flatland import METRICS, attempt, averaged

    def one_map(seed):
        if seed == 11:
            raise AssertionError("no path from\nthe start")
        return dict.fromkeys(METRICS, 1.0) | {"max_seconds_per_step": seed / 10}

    played = [attempt(one_map, seed) for seed in (10, 11, 12)]
    assert played[1] == "AssertionError: no path from"
    row = averaged(played, (10, 11, 12), METRICS)
    assert row["failed_maps"] == [{"seed": 11, "error": "AssertionError: no path from"}]
    assert row["arrival_rate"] == row["on_time_rate"] == row["normalized_score"] == pytest.approx(2 / 3)
    assert row["deadlock_rate"] == row["seconds_per_step"] == 1.0 and row["max_seconds_per_step"] == 1.2
    assert averaged([attempt(one_map, 11)], (11,), METRICS)["seconds_per_step"] != 0  # nan: nothing played
