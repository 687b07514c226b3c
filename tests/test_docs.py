"""Every code snippet of README.md and docs/ runs as written from a clone.

- ```python blocks run in a fresh interpreter from the checkout's root.
- ```bash blocks run as written, line by line, in a folder that looks like a clone (the checkout's
  files linked into it, ../shared beside it when the team's folder exists), with this
  environment's python first on PATH; the files they write stay there.
- ```bash slow blocks (long trainings, GPU runs, placeholders such as runs/RUN) are checked, not
  run: each command's script exists and its arguments pass the script's own parsing and checks
  (a bench script answers --help).
- ```bash install blocks are the install commands that CI itself runs: not repeated here.
"""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from checks import SHARED

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.M | re.S)
SCRIPTS = ("ppo_or.py", "eval.py", "ppo_flatland.py", "ppo_priorities.py", "eval_flatland.py", "rlea.py", "eval_rlea.py")
ANSWERED: set[tuple[str, ...]] = set()  # the bench scripts and modules whose --help has run


def snippets() -> list:
    found = []
    for path in DOCS:
        text = path.read_text()
        for match in FENCE.finditer(text):
            lang, tags, body = match.group(1), match.group(2).split(), match.group(3)
            line = text[: match.start()].count("\n") + 1
            found.append(pytest.param(lang, tags, body, id=f"{path.relative_to(ROOT)}:{line}"))
    return found


def commands(body: str) -> list[str]:
    """The command lines of a bash block: continuation lines joined, comments dropped."""
    joined = body.replace("\\\n", " ")
    return [line for line in (raw.split(" #")[0].strip() for raw in joined.splitlines()) if line]


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """A folder laid out like a clone: the checkout's top-level entries linked, ../shared beside it."""
    base = tmp_path_factory.mktemp("docs")
    folder = base / "main"
    folder.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in (".git", "runs", "build", "dist") and not entry.name.startswith(".venv"):
            (folder / entry.name).symlink_to(entry)
    if SHARED.exists():
        (base / "shared").symlink_to(SHARED)
    return folder


def needs_shared(command: str) -> bool:
    return "../shared" in command and not SHARED.exists()


def check_only(argv: list[str], cwd: Path, monkeypatch) -> None:
    """Runs a slow command's parsing and argument checks, not its work."""
    if argv[0] == "torchrun":
        argv = ["python", *argv[next(i for i, a in enumerate(argv) if a.endswith(".py")) :]]
    assert argv[0] == "python", argv
    script, args = argv[1], argv[2:]
    if script.startswith("bench/") or script == "-m":  # a bench script or a module: it answers --help
        target = ("-m", args[0]) if script == "-m" else (str(ROOT / script),)
        if target not in ANSWERED:  # each script is asked once, however many pages name it
            result = subprocess.run([sys.executable, *target, "--help"], capture_output=True, text=True, timeout=300,
                                    cwd=ROOT)  # fmt: skip
            assert result.returncode == 0, result.stderr
            ANSWERED.add(target)
        return
    assert script in SCRIPTS, script
    monkeypatch.chdir(cwd)
    import tyro

    if script == "ppo_or.py":
        from ppoor import ppo_or
        from ppoor.training import options

        parsed, _ = ppo_or.parse_args(args)
        if parsed.resume is None:
            starts = options.env_size(parsed).starts
            options.check_args(options.with_defaults(parsed, starts), starts)
    elif script == "eval.py":
        from ppoor import eval as evaluator
        from ppoor.models.checkpoints import latest_checkpoint

        parsed = tyro.cli(evaluator.Args, args=args)
        evaluator.check_args(parsed)
        checkpoint = parsed.checkpoint or evaluator.file_model(parsed.data)  # files: the shipped model of their kind
        if "RUN" not in checkpoint:
            assert latest_checkpoint(checkpoint).is_file(), checkpoint
    elif script in ("rlea.py", "eval_rlea.py"):
        from ppoor import eval_rlea, rlea
        from ppoor.codegen.settings import check_args

        module = rlea if script == "rlea.py" else eval_rlea
        assert check_args(tyro.cli(module.Args, args=args), module.LIMITS) == [], script
    else:
        pytest.importorskip("flatland", reason="flatland-rl is an optional extra")
        from ppoor import eval_flatland, ppo_flatland, ppo_priorities
        from ppoor.railway import priorities, trainer

        if script == "ppo_flatland.py":
            trainer.check_args(tyro.cli(ppo_flatland.Args, args=args))
        elif script == "ppo_priorities.py":
            priorities.check_args(tyro.cli(ppo_priorities.Args, args=args))
        else:
            eval_flatland.check_args(tyro.cli(eval_flatland.Args, args=args))


@pytest.mark.parametrize(("lang", "tags", "body"), snippets())
def test_snippet_runs_as_written(lang, tags, body, clone, monkeypatch):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    if lang == "python":
        result = subprocess.run([sys.executable, "-c", body], cwd=ROOT, env=env, capture_output=True, text=True,
                                timeout=900)  # fmt: skip
        assert result.returncode == 0, result.stderr
    elif lang == "bash" and "install" in tags:
        pytest.skip("the install commands are what CI itself runs")
    elif lang == "bash":
        for command in commands(body):
            if needs_shared(command):
                continue  # the team's folder is not beside this checkout
            if "slow" in tags:
                check_only(shlex.split(command), clone, monkeypatch)
            else:
                result = subprocess.run(["bash", "-c", command], cwd=clone, env=env, capture_output=True, text=True,
                                        timeout=1800)  # fmt: skip
                assert result.returncode == 0, f"{command}\n{result.stderr[-2000:]}"
