import importlib
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from checks import SHARED, check_cvrp_actions, check_tsp_actions
from ppoor.envs import kool_dataset
from ppoor.models import Agent, save_checkpoint
from ppoor.search import solver

ROOT = Path(__file__).resolve().parents[1]
RLOR = SHARED / "checkpoints" / "rlor"
REFERENCES = SHARED / "references"
BENCHMARKS = SHARED / "benchmarks"
needs_shared = pytest.mark.skipif(not RLOR.exists(), reason=f"{SHARED} is absent (not beside this clone)")
evaluator = importlib.import_module("ppoor.eval")


def run(tmp_path, *args) -> dict:
    """Runs eval.py in-process with --output and returns the JSON results."""
    output = tmp_path / "results.json"
    argv = [*args, "--output", str(output), "--threads", "1"]
    evaluator.main(evaluator.tyro.cli(evaluator.Args, args=argv))
    return json.loads(output.read_text())


def fails(*args) -> str:
    with pytest.raises(SystemExit) as exc:
        evaluator.main(evaluator.tyro.cli(evaluator.Args, args=list(args)))
    return str(exc.value.code)


@pytest.fixture(scope="module")
def small_checkpoints(tmp_path_factory):
    """Untrained TSP10 and CVRP10 agents saved as ppo_or.py checkpoints."""
    folder = tmp_path_factory.mktemp("ckpt")
    paths = {}
    for problem in ("tsp", "cvrp"):
        torch.manual_seed(0)
        paths[problem] = folder / f"{problem}.pt"
        save_checkpoint(
            {"problem": problem, "num_nodes": 10, "model_config": {}, "model": Agent(problem).state_dict()},
            paths[problem],
        )
    return paths


@pytest.mark.parametrize("problem", ["tsp", "cvrp"])
def test_tours_are_valid_and_search_never_worse(tmp_path, small_checkpoints, problem):
    ckpt = str(small_checkpoints[problem])
    common = ["--checkpoint", ckpt, "--num-instances", "40", "--batch-size", "16"]
    greedy = run(tmp_path, *common)
    again = run(tmp_path, *common)
    multi = run(tmp_path, *common, "--decode", "multi-greedy")
    sampled = run(tmp_path, *common, "--decode", "sampling", "--num-samples", "8")
    augmented = run(tmp_path, *common, "--augment", "8")
    multi_augmented = run(tmp_path, *common, "--decode", "multi-greedy", "--augment", "8")
    assert greedy["tours"] == again["tours"], "greedy decoding is not deterministic"
    data = kool_dataset(problem, 10, "test", 40)
    capacity = 20
    for result in (greedy, multi, sampled, augmented, multi_augmented):
        assert result["num_instances"] == 40
        for i, (tour, length) in enumerate(zip(result["tours"], result["lengths"], strict=True)):
            if problem == "tsp":
                expected = check_tsp_actions(tour + tour[:1], data["coords"][i])
            else:
                demand = np.rint(data["demand"][i] * capacity).astype(int)
                expected = check_cvrp_actions(tour, data["depot"][i], data["coords"][i], demand, capacity)
            assert length == pytest.approx(expected, abs=1e-9)
    lengths = {
        k: np.array(v["lengths"])
        for k, v in [("greedy", greedy), ("multi", multi), ("aug", augmented), ("multi_aug", multi_augmented)]
    }
    assert (lengths["multi"] <= lengths["greedy"] + 1e-9).all()
    assert (lengths["aug"] <= lengths["greedy"] + 1e-9).all()
    assert (lengths["multi_aug"] <= lengths["multi"] + 1e-9).all()
    assert lengths["multi"].mean() < lengths["greedy"].mean()


def test_npz_data_with_references_gives_gaps(tmp_path, small_checkpoints):
    rng = np.random.default_rng(0)
    depot, coords = rng.uniform(size=(5, 2)), rng.uniform(size=(5, 12, 2))
    demand = rng.integers(1, 10, size=(5, 12))
    path = tmp_path / "cvrp.npz"
    np.savez(path, depot=depot, coords=coords, demand=demand, capacity=np.full(5, 25.0), reference=np.full(5, 4.0))
    result = run(
        tmp_path,
        "--checkpoint",
        str(small_checkpoints["cvrp"]),
        "--data",
        str(path),
        "--plot",
        str(tmp_path / "routes.png"),
    )
    lengths = np.array(result["lengths"])
    np.testing.assert_allclose(result["gaps"], 100 * (lengths / 4.0 - 1))
    assert result["mean_gap"] == pytest.approx(np.mean(result["gaps"]))
    for i, tour in enumerate(result["tours"]):
        assert lengths[i] == pytest.approx(check_cvrp_actions(tour, depot[i], coords[i], demand[i], 25), abs=1e-9)
    assert (tmp_path / "routes.png").stat().st_size > 0
    assert {"mean_length", "lengths", "mean_gap", "gaps", "seconds", "decode", "checkpoint", "tours"} <= set(result)


def test_reference_solvers_on_the_fly(tmp_path, small_checkpoints):
    pytest.importorskip("elkai", reason="elkai is an optional extra")
    pytest.importorskip("pyvrp", reason="pyvrp is an optional extra")
    tsp = run(
        tmp_path, "--checkpoint", str(small_checkpoints["tsp"]), "--num-instances", "3", "--reference-solver", "lkh"
    )
    assert all(g >= -1e-9 for g in tsp["gaps"])
    cvrp = run(
        tmp_path, "--checkpoint", str(small_checkpoints["cvrp"]), "--num-instances", "2",
        "--reference-solver", "pyvrp", "--solver-seconds", "0.2",
    )  # fmt: skip
    assert all(g >= -1e-6 for g in cvrp["gaps"])
    assert "solves TSP" in fails("--checkpoint", str(small_checkpoints["cvrp"]), "--reference-solver", "lkh")


def test_validation_references_are_computed_once_and_cached(tmp_path):
    """The trainer's gap references: LKH on the first Kool instances, cached as an .npy where none
    ships (TSP10); at a shipped size (TSP20) the shipped lengths, nothing computed, equal to the
    shared LKH lengths of the test set (LKH is optimal there)."""
    pytest.importorskip("elkai", reason="elkai is an optional extra")
    from ppoor.solvers.references import kool_references, reference_lengths

    lengths = kool_references("tsp", 10, "test", 20, str(tmp_path))
    cached = tmp_path / "tsp10_test_seed1234_first20_lkh.npy"
    assert cached.exists() and np.array_equal(np.load(cached), lengths)
    np.testing.assert_allclose(lengths[:3], reference_lengths("tsp", 10, "test", 3, "lkh", 0.0), rtol=1e-9)
    shipped = kool_references("tsp", 20, "test", 20, str(tmp_path))
    assert not list(tmp_path.glob("tsp20_*")) and shipped.shape == (20,)
    shared = SHARED / "references" / "tsp20_test_seed1234_lkh.npy"
    if shared.exists():
        np.testing.assert_allclose(shipped, np.load(shared)[:20], rtol=1e-6)
    np.save(cached, np.arange(20.0))  # a second call reads the cache instead of solving again
    assert np.array_equal(kool_references("tsp", 10, "test", 20, str(tmp_path)), np.arange(20.0))
    cached.write_bytes(b"broken")  # an unreadable cache is computed again
    assert np.array_equal(kool_references("tsp", 10, "test", 20, str(tmp_path)), lengths)
    assert kool_references("cvrp", 10, "val", 20, str(tmp_path)) is None  # no CVRP reference ships at 10


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        ({"coords": np.zeros((2, 5, 2)), "depot": np.zeros((2, 2)), "capacity": 10}, "missing ['demand']"),
        (
            {"coords": np.zeros((2, 5)), "depot": np.zeros((2, 2)), "demand": np.ones((2, 5)), "capacity": 10},
            "shape [M, n, 2]",
        ),
        (
            {
                "coords": np.full((2, 5, 2), np.nan),
                "depot": np.zeros((2, 2)),
                "demand": np.ones((2, 5)),
                "capacity": 10,
            },
            "NaN",
        ),
        (
            {"coords": np.zeros((2, 5, 2)), "depot": np.zeros((2, 2)), "demand": -np.ones((2, 5)), "capacity": 10},
            "positive",
        ),
        (
            {"coords": np.zeros((2, 5, 2)), "depot": np.zeros((2, 2)), "demand": np.ones((2, 5)), "capacity": -1},
            "'capacity' must be positive",
        ),
    ],
)
def test_bad_npz_files_fail_with_a_message(tmp_path, small_checkpoints, arrays, message):
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    assert message in fails("--checkpoint", str(small_checkpoints["cvrp"]), "--data", str(path))


def test_bad_inputs_fail_with_a_message(tmp_path, small_checkpoints):
    tsp = str(small_checkpoints["tsp"])
    assert "does not exist" in fails("--checkpoint", str(tmp_path / "none.pt"))
    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(b"\x00garbage")
    assert "cannot be read" in fails("--checkpoint", str(corrupt))
    assert "is a TSP model, but a CVRP model was asked for" in fails("--checkpoint", tsp, "--problem", "cvrp")
    assert "--num-starts 11 exceeds the 10 start nodes" in fails(
        "--checkpoint", tsp, "--decode", "multi-greedy", "--num-starts", "11"
    )
    assert "no such file" in fails("--checkpoint", tsp, "--data", str(tmp_path / "missing.npz"))
    text = tmp_path / "notes.md"
    text.write_text("hello")
    assert "expected an .npz" in fails("--checkpoint", tsp, "--data", str(text))
    text = text.rename(tmp_path / "notes.txt")
    assert "read as a Solomon VRPTW instance, but the model solves TSP" in fails(
        "--checkpoint", tsp, "--data", str(text)
    )
    assert "--variant vrptw does not fit this TSP model" in fails("--checkpoint", tsp, "--variant", "vrptw")
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"not a zip")
    assert "not an .npz archive" in fails("--checkpoint", tsp, "--data", str(garbage))
    assert "--augment must be between 1 and 8" in fails("--checkpoint", tsp, "--augment", "9")


def test_a_run_folder_means_its_latest_checkpoint(tmp_path, small_checkpoints, capsys):
    ckpt = tmp_path / "run" / "ckpt"
    ckpt.mkdir(parents=True)
    for iteration in (2, 10):
        shutil.copy(small_checkpoints["tsp"], ckpt / f"{iteration}.pt")
    result = run(tmp_path, "--checkpoint", str(tmp_path / "run"), "--num-instances", "2")
    assert result["checkpoint"] == str(ckpt / "10.pt")
    assert f"using {ckpt / '10.pt'}" in capsys.readouterr().out
    (tmp_path / "empty").mkdir()
    assert "holds no checkpoint" in fails("--checkpoint", str(tmp_path / "empty"))


def test_cli_prints_a_summary_table(small_checkpoints):
    result = subprocess.run(
        [sys.executable, str(ROOT / "eval.py"), "--checkpoint", str(small_checkpoints["tsp"]), "--num-instances", "5"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "mean length" in result.stdout and "greedy" in result.stdout


@needs_shared
def test_tsplib_and_cvrplib_files_report_lengths_in_their_units(tmp_path):
    tsp = run(
        tmp_path, "--checkpoint", str(RLOR / "tsp50-v0-12000.pt"), "--data", str(BENCHMARKS / "tsplib" / "st70.tsp"),
        "--references", str(BENCHMARKS / "tsplib" / "optima.csv"),
    )  # fmt: skip
    points = [tuple(map(float, line.split()[1:])) for line in _section(BENCHMARKS / "tsplib" / "st70.tsp")]
    tour = tsp["tours"][0]
    expected = sum(round(math.dist(points[a], points[b])) for a, b in zip(tour, tour[1:] + tour[:1], strict=True))
    assert sorted(tour) == list(range(70))
    assert tsp["lengths"][0] == expected and tsp["references"][0] == 675
    assert tsp["gaps"][0] == pytest.approx(100 * (expected / 675 - 1))

    cvrp = run(
        tmp_path,
        "--checkpoint",
        str(RLOR / "cvrp50-v0-12000.pt"),
        "--data",
        str(BENCHMARKS / "cvrplib" / "X-n101-k25.vrp"),
    )
    assert cvrp["references"][0] == 27591  # from the .sol file beside it
    assert cvrp["lengths"][0] >= 27591 and cvrp["lengths"][0] == int(cvrp["lengths"][0])


def _section(path):
    lines = path.read_text().splitlines()
    start = lines.index("NODE_COORD_SECTION") + 1
    return [line for line in lines[start:] if line.strip() and line.strip() != "EOF"]


@needs_shared
def test_rlor_gaps_on_a_slice(tmp_path):
    """Fast slice of the published figures: first 200 TSP50 test instances."""
    refs = str(REFERENCES / "tsp50_test_seed1234_lkh.npy")
    result = run(
        tmp_path, "--checkpoint", str(RLOR / "tsp50-v0-12000.pt"), "--num-instances", "200", "--references", refs
    )
    reference = np.load(refs)[:200]
    assert result["mean_gap"] == pytest.approx(np.mean(100 * (np.array(result["lengths"]) / reference - 1)))
    assert 0.5 < result["mean_gap"] < 4


@needs_shared
@pytest.mark.slow
@pytest.mark.parametrize(
    ("problem", "decode", "count", "mean", "references", "gap"),
    [
        ("tsp", "greedy", 1000, 5.7956, "tsp50_test_seed1234_lkh.npy", 1.91),
        ("tsp", "multi-greedy", 1000, 5.7089, "tsp50_test_seed1234_lkh.npy", 0.39),
        ("cvrp", "greedy", 1000, 11.3571, None, None),
        ("cvrp", "multi-greedy", 1000, 10.9236, None, None),
        ("cvrp", "multi-greedy", 100, None, "cvrp50_test_seed1234_first100_pyvrp10s.npy", 4.46),
    ],
)
def test_rlor_published_figures_through_eval(tmp_path, problem, decode, count, mean, references, gap):
    args = ["--checkpoint", str(RLOR / f"{problem}50-v0-12000.pt"), "--num-instances", str(count), "--decode", decode]
    if references:
        args += ["--references", str(REFERENCES / references)]
    result = run(tmp_path, *args)
    if mean is not None:
        assert result["mean_length"] == pytest.approx(mean, abs=1e-3)
    if gap is not None:
        assert result["mean_gap"] == pytest.approx(gap, abs=0.01)


def test_bad_output_paths_fail_before_decoding(tmp_path, small_checkpoints, monkeypatch):
    tsp = str(small_checkpoints["tsp"])
    monkeypatch.setattr(solver, "decode_instances", lambda *a, **k: pytest.fail("decoding started"))
    assert "name a .json file" in fails("--checkpoint", tsp, "--output", str(tmp_path / "results.txt"))
    assert "name an image file" in fails("--checkpoint", tsp, "--plot", str(tmp_path / "routes.xyz"))
    assert "--plot-instances must be between 1 and 100, got 0" in fails("--checkpoint", tsp, "--plot-instances", "0")
    folder = tmp_path / "out.json"
    folder.mkdir()
    assert "is a folder" in fails("--checkpoint", tsp, "--output", str(folder))
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert "cannot write there" in fails("--checkpoint", tsp, "--plot", str(blocker / "sub" / "routes.png"))


def test_references_that_do_not_fit_fail(tmp_path, small_checkpoints):
    tsp = str(small_checkpoints["tsp"])
    far = tmp_path / "other.npy"
    np.save(far, np.full(10, 100.0))  # as if for much larger instances
    assert "the references do not fit these instances" in fails(
        "--checkpoint", tsp, "--num-instances", "10", "--references", str(far)
    )
    nameless = tmp_path / "refs.csv"
    nameless.write_text("name,value\nberlin52,7542\n")
    assert "no name in its first column matches" in fails(
        "--checkpoint", tsp, "--num-instances", "3", "--references", str(nameless)
    )
    broken = tmp_path / "broken.csv"
    broken.write_bytes(b"name,value\n\xff\xfe\x00,abc\n")
    assert "not a CSV" in fails("--checkpoint", tsp, "--num-instances", "3", "--references", str(broken))


CVRPLIB = """NAME : tiny
TYPE : CVRP
DIMENSION : 4
EDGE_WEIGHT_TYPE : EUC_2D
CAPACITY : 10
NODE_COORD_SECTION
1 0 0
2 10 0
3 0 10
4 10 10
DEMAND_SECTION
1 0
2 3
3 4
4 5
DEPOT_SECTION
1
-1
EOF
"""


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("CAPACITY : 10", "CAPACTY : 10"),
        ("CAPACITY : 10", "CAPACITY : abc"),
        ("DEMAND_SECTION", "DEMAND_SECTON"),
        ("DEPOT_SECTION", "DEPOT_SECTON"),
    ],
)
def test_malformed_cvrplib_files_fail_with_one_line(tmp_path, old, new):
    cvrp = tmp_path / "cvrp.pt"
    torch.manual_seed(0)
    save_checkpoint({"problem": "cvrp", "num_nodes": 3, "model_config": {}, "model": Agent("cvrp").state_dict()}, cvrp)
    good = tmp_path / "tiny.vrp"
    good.write_text(CVRPLIB)
    assert run(tmp_path, "--checkpoint", str(cvrp), "--data", str(good))["num_instances"] == 1
    bad = tmp_path / "bad.vrp"
    bad.write_text(CVRPLIB.replace(old, new))
    message = fails("--checkpoint", str(cvrp), "--data", str(bad))
    assert message.startswith("error: ") and str(bad) in message and "\n" not in message


def test_polish_prints_its_own_row_and_writes_its_tours(tmp_path, small_checkpoints, capsys):
    """eval.py --polish: the decoded row and the 2-opt row, both in the JSON; the polished tours are
    valid tours never longer than the decoded ones; a PDP model (no polish) is refused before decoding."""
    result = run(tmp_path, "--checkpoint", str(small_checkpoints["tsp"]), "--num-instances", "12", "--polish", "all")
    out = capsys.readouterr().out
    assert "greedy + 2-opt + or-opt" in out
    data = kool_dataset("tsp", 10, "test", 12)
    polished = result["polished"]
    for i, (tour, length) in enumerate(zip(polished["tours"], polished["lengths"], strict=True)):
        assert length == pytest.approx(check_tsp_actions(tour + tour[:1], data["coords"][i]), abs=1e-9)
        assert length <= result["lengths"][i] + 1e-9
    with pytest.raises(SystemExit, match="--polish all: the polish takes TSP, CVRP, MTVRP, MRCVRP, PCVRP solutions; this is a PDP"):
        run(tmp_path, "--checkpoint", "families/pdp20", "--num-instances", "2", "--polish", "all")


def test_compile_without_a_cxx_compiler_fails_in_one_line_before_loading(small_checkpoints):
    from torch._inductor import config

    with config.patch({"cpp.cxx": ("/nonexistent/g++",)}):
        message = fails("--checkpoint", str(small_checkpoints["tsp"]), "--compile")
    assert message.startswith("error: --compile: compiling the decode step needs a C++ compiler")
    assert "\n" not in message


def test_the_vrp_polish_without_pyvrp_fails_in_one_line_before_decoding(small_checkpoints, monkeypatch):
    """The installed wheel without PyVRP printed a traceback after decoding; now one line, first."""
    monkeypatch.setitem(sys.modules, "pyvrp", None)  # import pyvrp raises ImportError
    message = fails("--checkpoint", str(small_checkpoints["cvrp"]), "--num-instances", "2", "--polish", "all")
    assert message.startswith("error: PyVRP is needed here") and "pip install pyvrp" in message
    assert "\n" not in message


def test_a_file_too_large_to_decode_in_memory_fails_in_one_line_before_decoding(tmp_path):
    """A 30,000-node TSPLIB file: multi-greedy needs terabytes; one line says so and what to lower."""
    rng = np.random.default_rng(0)
    points = "\n".join(f"{i + 1} {x:.3f} {y:.3f}" for i, (x, y) in enumerate(rng.random((30_000, 2)) * 1000))
    big = tmp_path / "big.tsp"
    big.write_text(f"NAME : big\nTYPE : TSP\nDIMENSION : 30000\nEDGE_WEIGHT_TYPE : EUC_2D\nNODE_COORD_SECTION\n{points}\nEOF\n")
    message = fails("--checkpoint", "tsp20", "--data", str(big), "--decode", "multi-greedy")
    assert message.startswith("error: decoding 30000-node instances needs about") and "\n" not in message
    assert "lower --batch-size, --num-starts or --augment" in message
    message = fails("--data", str(tmp_path / "nothing.vrp"))
    assert message == f"error: --data {tmp_path / 'nothing.vrp'}: no such file or folder (or use test / val)"
    (tmp_path / "points.csv").write_text("1,2\n")
    message = fails("--data", str(tmp_path / "points.csv"))
    assert message.startswith("error: --checkpoint is needed for --data") and "\n" not in message
