"""The benchmarks' plumbing that needs no peer and no solver: where a run's checkpoints are found and
how the results of marks scored by separate --evaluate processes are merged (bench/rl4co_peer.py),
and the VRP variants' PyVRP references, shipped or solved once and cached (solvers.references)."""

import json

import numpy as np
import pytest
from checks import SHARED, bench_module
from hypothesis import given, settings
from hypothesis import strategies as st

peer = bench_module("rl4co_peer")
latest_run, save_results = peer.latest_run, peer.save_results


def row(trainer: str, mark: float, gap: float) -> dict:
    return {"trainer": trainer, "mark": mark, "minutes": mark, "greedy": gap}


def test_marks_scored_apart_are_merged_and_rescored_marks_replaced(tmp_path):
    save_results(tmp_path, [row("ppo-or", 10, 9.0), row("peer", 10, 12.0)], [10], keep=True)
    rows = save_results(tmp_path, [row("ppo-or", 40, 5.0), row("peer", 40, 6.0)], [40], keep=True)
    assert [(r["mark"], r["trainer"]) for r in rows] == [(10, "ppo-or"), (10, "peer"), (40, "ppo-or"), (40, "peer")]
    rows = save_results(tmp_path, [row("ppo-or", 10, 8.0), row("peer", 10, 11.0)], [10], keep=True)
    assert [r["greedy"] for r in rows] == [8.0, 11.0, 5.0, 6.0]
    assert json.loads((tmp_path / "results.json").read_text()) == rows
    # a training run's own scoring starts the file afresh
    rows = save_results(tmp_path, [row("ppo-or", 20, 7.0)], [20], keep=False)
    assert json.loads((tmp_path / "results.json").read_text()) == rows == [row("ppo-or", 20, 7.0)]


def test_the_latest_run_or_one_line_saying_what_to_do(tmp_path):
    with pytest.raises(SystemExit) as stop:
        latest_run(tmp_path, "tsp-v0__vs-rl4co")
    message = str(stop.value.code)
    assert message.startswith("error:") and "--out" in message and "\n" not in message
    for name in ("tsp-v0__vs-rl4co__1__100", "tsp-v0__vs-rl4co__1__200", "cvrp-v0__vs-rl4co__1__300"):
        (tmp_path / "runs" / name / "ckpt").mkdir(parents=True)
    assert latest_run(tmp_path, "tsp-v0__vs-rl4co") == tmp_path / "runs" / "tsp-v0__vs-rl4co__1__200" / "ckpt"


def test_variant_references_shipped_else_solved_once_and_cached(tmp_path):
    from ppoor.solvers.references import shipped_references, variant_references

    shipped = shipped_references("mtvrp", 50, "test", 3, "vrptw")
    assert shipped is not None  # PyVRP 1 s per instance at n = 50 ships with ppo-or
    calls = []
    assert (variant_references("vrptw", 50, 3, 1.0, tmp_path, lambda: calls.append(1)) == shipped).all()
    assert not calls and not list(tmp_path.iterdir())
    solved = lambda: calls.append(1) or [7.0, 8.0, 9.0]  # noqa: E731
    for _ in range(2):  # other seconds than the shipped ones: solved the first time, read from the cache after
        assert list(variant_references("vrptw", 50, 3, 0.5, tmp_path, solved)) == [7.0, 8.0, 9.0]
    assert calls == [1] and [p.name for p in tmp_path.iterdir()] == ["vrptw50_test_first3_pyvrp0.5s.npy"]


def test_published_rows_cover_every_instance_of_the_run_or_are_left_out():
    real = bench_module("real_instances")
    lines = [line for line in real.PUBLISHED.read_text().splitlines() if not line.startswith(("#", "method,"))]
    method, bench, instance, cost = lines[0].rsplit(",", 3)
    (label, gap, seconds), *_ = real.published_rows(bench, [instance], np.array([float(cost) / 1.05]))
    assert label.startswith(method) and gap == pytest.approx(5.0) and np.isnan(seconds)
    assert real.published_rows(bench, [instance, "not-in-the-file"], np.array([1.0, 1.0])) == []
    assert real.published_rows("no-such-benchmark", [instance], np.array([1.0])) == []


@pytest.mark.skipif(not SHARED.exists(), reason="the benchmarks' references are in ../shared, absent here")
def test_each_published_method_reports_its_whole_benchmark_and_nothing_below_its_reference():
    """A method missing one instance would drop out of the table unseen, and a cost below the optimum or
    best known is a mistyped figure: both are caught in the file, not in the printed table."""
    real = bench_module("real_instances")
    found = real.published_costs()
    references = {}
    for bench in {"tsplib", "cvrplib"}:  # the last column of their files is the reference
        rows = (SHARED / "benchmarks" / bench / real.FOLDERS[bench][1]).read_text().splitlines()[1:]
        references[bench] = {row.split(",")[0]: float(row.split(",")[-1]) for row in rows}
    assert {bench for _, bench in found} == set(references)
    for (method, bench), costs in found.items():
        assert set(costs) == set(references[bench]), method
        assert all(cost >= references[bench][name] for name, cost in costs.items()), method


@pytest.mark.parametrize(
    ("shape", "extra", "expected"),
    [
        (("--num-envs", "256"), [], ("ppo-or", 256, 32, 8, "am")),
        (("--preset", "variants"), [], ("variants", 64, 64, 1, "transformer")),
        (("--preset", "variants"), ["--preset", "ppo-or", "--num-envs", "256"], ("ppo-or", 256, 32, 8, "am")),
    ],
)
def test_the_side_by_sides_train_ppo_or_as_their_docs_say(shape, extra, expected):
    """vs_rl4co.py's ppo-or runs the default preset at 256 instances, vs_routefinder.py's --preset variants,
    and --ppo-or-args given after it (here the default trainer's) win."""
    from ppoor import ppo_or

    cmd = peer.ppo_or_command("mtvrp-v0", 50, 60.0, 1, "vs-routefinder", shape) + extra
    args, _ = ppo_or.parse_args(cmd[2:])
    assert (args.preset, args.num_envs, args.minibatch_size, args.train_augment, args.encoder) == expected
    assert (args.threads, args.total_seconds, args.checkpoint_seconds) == (1, 3600.0, 60.0)


def test_vs_routefinder_trains_the_variants_preset_unless_told_otherwise(monkeypatch, tmp_path):
    import argparse

    from checks import BENCH
    from ppoor import ppo_or

    monkeypatch.syspath_prepend(str(BENCH))  # vs_routefinder.py imports rl4co_peer beside it
    bench = bench_module("vs_routefinder")
    for extra, expected in (("", ("variants", 64, "transformer")), ("--preset ppo-or --num-envs 256", ("ppo-or", 256, "am"))):
        options = argparse.Namespace(num_nodes=50, minutes=60.0, seed=1, ppo_or_args=extra, out=tmp_path)
        args, _ = ppo_or.parse_args(bench.train("ppo-or", options)[2:])
        assert (args.env_id, args.num_nodes, args.threads) == ("mtvrp-v0", 50, 1)
        assert (args.preset, args.num_envs, args.encoder) == expected


@settings(max_examples=6, deadline=None)
@given(problem=st.sampled_from(["tsp", "cvrp", "mtvrp"]), sizes=st.lists(st.integers(5, 12), min_size=1, max_size=2),
       count=st.integers(1, 3), seed=st.integers(0, 2**16))  # fmt: skip
def test_the_ranking_draws_the_same_instances_for_a_seed_and_gives_vrp_demands_a_capacity_of_one(problem, sizes, count, seed):
    rank = bench_module("rank_checkpoints")
    distribution = {"tsp": "mixed", "cvrp": "x", "mtvrp": "solomon"}[problem]
    sets = rank.validation_sets(problem, distribution, sizes, count, seed)
    again = rank.validation_sets(problem, distribution, sizes, count, seed)
    assert [d["coords"].shape for d in sets] == [(count, n, 2) for n in sizes]
    for data, same in zip(sets, again, strict=True):
        assert all(np.array_equal(data[k], same[k]) for k in data)
        assert problem == "tsp" or data["capacity"] == 1.0


def test_the_ranking_prints_each_checkpoint_and_prior_against_the_first(monkeypatch, capsys):
    rank = bench_module("rank_checkpoints")
    argv = ["rank", "--checkpoints", "tsp20", "tsp50", "--distance-priors", "0", "3", "--sizes", "10", "15", "--instances", "3"]
    monkeypatch.setattr("sys.argv", argv)
    rank.main()
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[2:]]
    assert [(r[0], float(r[1])) for r in rows] == [("tsp20", 0), ("tsp20", 3), ("tsp50", 0), ("tsp50", 3)]
    for row in rows:
        assert float(row[4]) == pytest.approx((float(row[2]) + float(row[3])) / 2, abs=1e-4)
        assert float(row[5]) == pytest.approx(float(row[4]) / float(rows[0][4]), abs=1e-4)
    monkeypatch.setattr("sys.argv", ["rank", "--problem", "cvrp", "--checkpoints", "tsp20"])
    with pytest.raises(SystemExit):
        rank.main()
    assert "tsp20 is a tsp model, not cvrp" in capsys.readouterr().err
