"""Running ppo_or.py inside a bench script: one run in a temporary folder, and its iteration lines."""

import contextlib
import io
import os
import re
import tempfile
from pathlib import Path

from ppoor import ppo_or  # noqa: E402


@contextlib.contextmanager
def trainer_run(argv: list[str], mode=None):
    """Runs ``python ppo_or.py *argv`` in-process in a temporary folder, under ``mode`` when given (a
    context manager such as FlopCounterMode or the profiler); yields its printed output and its run
    folder, which exists until the block ends."""
    args, given = ppo_or.parse_args(argv)
    cwd, out = os.getcwd(), io.StringIO()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        try:
            with mode or contextlib.nullcontext(), contextlib.redirect_stdout(out):
                ppo_or.main(args, given)
            (run,) = [p for p in Path(tmp, "runs").iterdir() if p.name != "references"]
            yield out.getvalue(), run
        finally:
            os.chdir(cwd)


def iteration_rows(output: str) -> list[dict]:
    """The name=value figures of each ``iteration=`` line that ppo_or.py printed."""
    lines = [line for line in output.splitlines() if line.startswith("iteration=")]
    return [dict(re.findall(r"([\w/]+)=([\d.]+)", line)) for line in lines]
