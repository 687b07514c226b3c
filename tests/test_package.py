"""`pip install .` gives a working product: the wheel holds one import package, ppoor (no generic
top-level names), the console commands run from outside the checkout, and the shipped checkpoints
and reference lengths are read from inside the installed package."""

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SKIP = shutil.ignore_patterns(
    ".git", ".venv*", "runs", "build", "dist", "wandb", "*.egg-info", "__pycache__", ".*cache"
)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The wheel built from a copy of the checkout, installed (without dependencies: they are this
    environment's) into a folder of its own; returns (that folder, the wheel)."""
    base = tmp_path_factory.mktemp("package")
    source = base / "source"
    shutil.copytree(ROOT, source, ignore=SKIP)
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation", "-q", "-w",
         str(base / "dist")], capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    (wheel,) = (base / "dist").glob("ppo_or-*.whl")
    target = base / "site"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr
    return target, wheel


def outside(installed, tmp_path, *command, timeout=600):
    target, _ = installed
    env = {**os.environ, "PYTHONPATH": str(target)}
    return subprocess.run(list(command), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_wheel_holds_one_import_package(installed):
    _, wheel = installed
    names = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert names == {"ppoor", wheel.name.split("-py3")[0] + ".dist-info"}
    files = set(zipfile.ZipFile(wheel).namelist())
    for shipped in ("ppoor/checkpoints/tsp20.pt", "ppoor/checkpoints/mtvrp20.pt", "ppoor/ppo_or.py",
                    "ppoor/data/reference_lengths/tsp20_val_seed4321_lkh.npy", "ppoor/codegen/prompts.toml",
                    "ppoor/codegen/problems/vrp-c-tw.json", "ppoor/codegen/corpus/notes.md", "ppoor/rlea.py",
                    "ppoor/checkpoints/rlea/qwen2.5-coder-0.5b/planner.pt",
                    "ppoor/checkpoints/rlea/qwen2.5-coder-0.5b/memory.json",
                    "ppoor/__init__.py", "ppoor/search/solver.py"):  # fmt: skip
        assert shipped in files


def test_the_console_commands_run_from_outside_the_checkout(installed, tmp_path):
    target, _ = installed
    result = outside(installed, tmp_path, str(target / "bin" / "ppo-or-eval"), "--checkpoint", "tsp20",
                     "--num-instances", "4", "--threads", "1")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"checkpoint {target / 'ppoor' / 'checkpoints' / 'tsp20.pt'} (TSP)" in result.stdout
    result = outside(installed, tmp_path, str(target / "bin" / "ppo-or"), "--num-nodes", "20", "--num-envs", "16",
                     "--total-timesteps", "400", "--eval-instances", "8", "--eval-interval", "1", "--threads", "1")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "final evaluation: " in result.stdout and "eval/greedy_gap=" in result.stdout  # the shipped references
    assert not (tmp_path / "runs" / "references").exists()  # nothing computed: they came with the package
    assert len(list((tmp_path / "runs").iterdir())) == 1
    probe = "import ppoor.envs, ppoor.models, ppoor.search, ppoor.data, ppoor.eval; print(ppoor.envs.__file__)"
    result = outside(installed, tmp_path, sys.executable, "-c", probe)
    assert result.returncode == 0 and result.stdout.startswith(str(target)), result.stderr
    probe = ("import ppoor; r = ppoor.solve('val', checkpoint='tsp20', num_instances=3, device='cpu'); "
             "print(ppoor.__file__, r.reference_source, len(r.tours))")  # fmt: skip
    result = outside(installed, tmp_path, sys.executable, "-c", probe)
    assert result.returncode == 0, result.stderr
    init, source, count = result.stdout.split()[:3]
    assert init == str(target / "ppoor" / "__init__.py") and source.startswith("data/reference_lengths/tsp20_val")
    assert count == "3"


def test_the_rlea_benchmark_loads_installed(installed, tmp_path):
    target, _ = installed
    probe = ("from ppoor.codegen.benchmark import load_problems, shipped_problems; from ppoor.codegen.executor import "
             "load_prompts; from ppoor.codegen.rag import NOTES; print(len(load_problems(shipped_problems())), "
             "len(load_prompts()), NOTES.is_file(), shipped_problems())")
    result = outside(installed, tmp_path, sys.executable, "-c", probe)
    assert result.returncode == 0, result.stderr
    count, prompts, notes, folder = result.stdout.split()
    assert int(count) >= 48 and int(prompts) >= 8 and notes == "True" and folder.startswith(str(target))


def test_the_railway_scripts_are_importable_installed(installed, tmp_path):
    pytest.importorskip("flatland", reason="flatland-rl is an optional extra")
    target, _ = installed
    result = outside(installed, tmp_path, str(target / "bin" / "ppo-or-flatland-eval"), "--sizes", "25x25x5",
                     "--episodes", "1", "--threads", "1")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"policy {target / 'ppoor' / 'checkpoints' / 'flatland' / 'flatland35.pt'}" in result.stdout
