"""Running a generated program: never in the planner's process.

Each run is a child Python process (``python -I``) in a new, empty temporary folder, given the
program, calling its ``solve(instance)`` on each instance and printing the answers as JSON. The
limits, outermost first:

- wall clock: the whole process group is killed after ``seconds``;
- resource limits (setrlimit): address space (``memory_mb``), CPU seconds, file size, open files,
  processes, no core dumps;
- network: a new, empty network namespace (``unshare(CLONE_NEWNET)``, as root or through a user
  namespace where the kernel allows one); where neither is allowed the audit hook below still refuses
  sockets, and ``Sandbox.isolation`` says so;
- user: run as root, the child drops to the ``nobody`` user where that user can reach the Python
  installation, so the operating system itself refuses to change or delete the project's files
  (a Python installed under /root, which others cannot enter, keeps the child root);
- inside the child, before the program is read: a Python audit hook (PEP 578) that refuses sockets,
  new processes (fork, exec, spawn, subprocess, os.system), ctypes (which could undo the rest), and
  any file opened, removed, renamed or listed outside the temporary folder, except reading Python's
  own installation (the interpreter, the standard library, site-packages: OR-Tools is imported
  from there). NumPy and OR-Tools are imported before the hook (NumPy loads ctypes; every ctypes
  call after that is refused). The hook is the only file guard for a user who is not root; it cannot be removed by
  Python code.

Output is captured and truncated (head and tail) for the LLM's feedback.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass

CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000
RESULT_MARK = "\n@@RLEA-RESULT@@"
NOBODY = 65534

RUNNER = r'''
import importlib, json, os, sys
for module in ("ctypes", "numpy", "ortools.constraint_solver.pywrapcp", "ortools.sat.python.cp_model"):
    try:  # loaded before the hook: numpy imports ctypes, whose calls the hook then refuses
        importlib.import_module(module)
    except ImportError:
        pass
instances = json.load(open("instances.json"))
program = open("program.py").read()
here = os.getcwd()
readable = tuple(os.path.realpath(p) for p in json.loads(sys.argv[1])) + (here,)
def inside(path, roots):
    try:
        path = os.path.realpath(os.fsdecode(path) if not isinstance(path, int) else here)
    except (TypeError, ValueError):
        return False
    return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)
BLOCKED = ("socket.", "subprocess.", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
           "os.forkpty", "ctypes.", "os.kill", "os.killpg", "pty.", "webbrowser.", "urllib.", "http.")
WRITES = ("os.remove", "os.rmdir", "os.rename", "os.truncate", "os.chmod", "os.chown", "os.mkdir",
          "os.link", "os.symlink", "os.utime", "shutil.rmtree", "shutil.move", "shutil.copyfile")
def hook(event, args):
    if event.startswith(BLOCKED):
        raise PermissionError(f"sandbox: {event} is not allowed")
    if event in WRITES:
        for a in args[:2]:
            if isinstance(a, (str, bytes, os.PathLike)) and not inside(a, (here,)):
                raise PermissionError(f"sandbox: {event} outside the working folder is not allowed")
    elif event == "open":
        path, mode = args[0], args[1] or "r"
        if isinstance(path, int):
            return
        writing = any(c in str(mode) for c in "wax+")
        if not inside(path, (here,) if writing else readable):
            raise PermissionError(f"sandbox: opening {os.fsdecode(path)!r} is not allowed")
    elif event in ("os.listdir", "os.scandir", "os.chdir", "glob.glob"):
        if args and isinstance(args[0], (str, bytes, os.PathLike)) and not inside(args[0], readable):
            raise PermissionError(f"sandbox: {event} outside the working folder is not allowed")
sys.addaudithook(hook)
namespace = {"__name__": "solution"}
exec(compile(program, "program.py", "exec"), namespace)
solve = namespace.get("solve")
if not callable(solve):
    raise SystemExit("the program defines no function solve(instance)")
answers = []
for instance in instances:
    result = solve(instance)
    try:
        objective, routes, *times = result
        if len(times) > 1:
            raise ValueError
    except (TypeError, ValueError):
        raise SystemExit(f"solve must return (objective, routes) or (objective, routes, times), got {type(result).__name__}") from None
    if hasattr(objective, "item"):
        objective = objective.item()
    routes = [[int(v) for v in r] for r in routes]
    answer = {"objective": objective if isinstance(objective, (int, float)) else repr(objective), "routes": routes}
    if times:
        try:  # numpy scalars become Python numbers; anything else is judged as it is
            answer["times"] = json.loads(json.dumps([[t.item() if hasattr(t, "item") else t for t in pair]
                                                     for pair in times[0]]))
        except (TypeError, ValueError):
            answer["times"] = repr(times[0])[:80]
    answers.append(answer)
sys.stdout.write("\n@@RLEA-RESULT@@" + json.dumps(answers) + "\n")
'''


@dataclass
class RunResult:
    """One sandboxed run: ``answers`` (one {objective, routes} per instance) when the program
    finished; otherwise ``error`` (the reason: timeout, memory, the exception's last lines)."""

    answers: list[dict] | None
    error: str | None
    output: str
    seconds: float


def truncate(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters, its head and tail kept."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n... ({len(text) - limit} characters cut) ...\n{text[-half:]}"


def network_isolation() -> str:
    """How a child can be cut off the network here: "namespace" (root), "user namespace", or "none"."""
    libc = ctypes.CDLL(None, use_errno=True)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # try in a throwaway child, never in this process
        os.close(read)
        result = "namespace" if libc.unshare(CLONE_NEWNET) == 0 else (
            "user namespace" if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0 else "none"
        )
        os.write(write, result.encode())
        os._exit(0)
    os.close(write)
    answer = os.read(read, 64).decode()
    os.close(read)
    os.waitpid(pid, 0)
    return answer or "none"


class Sandbox:
    """Runs programs under the limits of the module's docstring. ``seconds`` wall clock per run,
    ``memory_mb`` address space, ``output_chars`` kept of the captured output."""

    def __init__(self, seconds: float = 60.0, memory_mb: int = 2048, output_chars: int = 2000):
        self.seconds, self.memory_mb, self.output_chars = seconds, memory_mb, output_chars
        self.network = network_isolation()
        self.libc = ctypes.CDLL(None, use_errno=True)
        paths = sysconfig.get_paths()
        self.drop_user = os.geteuid() == 0 and all(
            others_can_enter(p) for p in (sys.executable, paths["stdlib"], paths["purelib"], paths["platlib"])
        )
        self.isolation = (
            f"network: {self.network}; user: {'nobody' if self.drop_user else 'same as the caller'}; "
            "audit hook: sockets, processes, ctypes and files outside the folder refused"
        )
        self.readable = sorted(
            {sys.prefix, sys.base_prefix, sys.exec_prefix, paths["stdlib"], paths["platstdlib"], paths["purelib"],
             paths["platlib"], os.path.dirname(os.path.realpath(sys.executable)), "/dev/null", "/dev/urandom",
             "/proc/self", "/sys/devices/system/cpu", "/etc/localtime"}
        )

    def limits(self) -> None:
        """In the child, between fork and exec, kept to system calls (the libc handle is loaded
        beforehand): resource limits, network namespace, user."""
        megabytes = self.memory_mb * 1024 * 1024
        cpu = int(self.seconds) + 1
        resource.setrlimit(resource.RLIMIT_AS, (megabytes, megabytes))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_FSIZE, (16 << 20, 16 << 20))
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if self.network == "namespace":
            self.libc.unshare(CLONE_NEWNET)
        elif self.network == "user namespace":
            self.libc.unshare(CLONE_NEWUSER | CLONE_NEWNET)
        if self.drop_user:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
        resource.setrlimit(resource.RLIMIT_NPROC, (64, 64))

    def run(self, program: str, instances: list[dict]) -> RunResult:
        """Run ``program`` (Python source defining ``solve``) on each instance."""
        with tempfile.TemporaryDirectory(prefix="rlea-") as folder:
            for name, text in (("program.py", program), ("instances.json", json.dumps(instances))):
                with open(os.path.join(folder, name), "w") as f:
                    f.write(text)
            if self.drop_user:
                for path in (folder, *(os.path.join(folder, n) for n in os.listdir(folder))):
                    os.chown(path, NOBODY, NOBODY)
            env = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "HOME": folder, "TMPDIR": folder, "LANG": "C.UTF-8"}
            start = time.perf_counter()
            child = subprocess.Popen(
                [sys.executable, "-I", "-c", RUNNER, json.dumps(self.readable)],
                cwd=folder, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                preexec_fn=self.limits, start_new_session=True,
            )
            try:
                out, _ = child.communicate(timeout=self.seconds)
                timed_out = False
            except subprocess.TimeoutExpired:
                kill_group(child.pid)
                out, _ = child.communicate()
                timed_out = True
            seconds = time.perf_counter() - start
            kill_group(child.pid)  # anything it left behind
        text = out.decode(errors="replace")
        body, _, result = text.partition(RESULT_MARK)
        shown = truncate(body.strip(), self.output_chars)
        if timed_out:
            return RunResult(None, f"the program ran past the time limit of {self.seconds:g} s", shown, seconds)
        if child.returncode != 0 or not result:
            return RunResult(None, failure(child.returncode, body, self.memory_mb, self.output_chars), shown, seconds)
        try:
            answers = json.loads(result.splitlines()[0])
        except (json.JSONDecodeError, IndexError):
            return RunResult(None, "the program's answer could not be read", shown, seconds)
        return RunResult(answers, None, shown, seconds)


def others_can_enter(path: str) -> bool:
    """Whether a user other than the owner (``nobody``) can reach and read ``path``: every folder
    on its real path searchable by others, the file itself readable (root's home often is not)."""
    path = os.path.realpath(path)
    parts = path.split(os.sep)
    for i in range(2, len(parts) + 1):
        mode = os.stat(os.sep.join(parts[:i]) or os.sep).st_mode
        if not mode & (0o001 if i < len(parts) or os.path.isdir(path) else 0o004):
            return False
    return True


def kill_group(pid: int) -> None:
    """SIGKILL the child's whole process group (it leads its own session)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def failure(returncode: int, output: str, memory_mb: int, limit: int) -> str:
    """Why a child failed, in a line or a traceback's tail."""
    tail = truncate(output.strip(), limit)
    if returncode == -signal.SIGXCPU or returncode == -signal.SIGKILL:
        return f"the program was killed (CPU time limit) {tail[-400:]}".strip()
    if "MemoryError" in output or returncode == -signal.SIGSEGV:
        return f"the program ran out of memory (limit {memory_mb} MB): {tail[-400:]}"
    return tail or f"the program exited with status {returncode} and printed nothing"
