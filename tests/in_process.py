"""A script run as `python SCRIPT ARGS` would run it, in this interpreter: for the tests of bad
arguments, which stop in the script's checks, so that each does not pay a fresh interpreter's
import of torch (about 1.3 s, 65 tests). The runs that do real work stay in subprocesses."""

import contextlib
import io
import os
import random
import runpy
import signal
import subprocess
import sys
import traceback
from pathlib import Path

import numpy as np
import torch


def run_script(script: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """Runs ``script`` as __main__ with ``args`` from ``cwd``: its exit status as the interpreter
    gives it (a SystemExit's message written to stderr, status 1; an uncaught exception's traceback,
    status 1) and what it printed. The interpreter's state the script may touch (argv, working
    folder, torch's threads, the random generators, signal handlers) is put back afterwards."""
    saved = (sys.argv, os.getcwd(), torch.get_num_threads(), torch.get_rng_state(), np.random.get_state(),
             random.getstate(), {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)})  # fmt: skip
    out, err = io.StringIO(), io.StringIO()
    argv = [str(script), *args]
    sys.argv = list(argv)
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                runpy.run_path(str(script), run_name="__main__")
                code = 0
            except SystemExit as stop:
                if stop.code is None or isinstance(stop.code, int):
                    code = stop.code or 0
                else:
                    print(stop.code, file=sys.stderr)
                    code = 1
            except Exception:
                traceback.print_exc()
                code = 1
    finally:
        sys.argv, cwd_before, threads, torch_rng, numpy_rng, python_rng, handlers = saved
        os.chdir(cwd_before)
        torch.set_num_threads(threads)
        torch.set_rng_state(torch_rng)
        np.random.set_state(numpy_rng)
        random.setstate(python_rng)
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())
