"""Running a generated program: never in the planner's process.

Each run is a child Python process (``python -I``) in a new, empty temporary folder, given the
program, calling its ``solve(instance)`` on each instance and printing the answers as JSON. The
limits, outermost first:

- wall clock: the whole process group is killed after ``seconds``;
- resource limits (setrlimit): address space (``memory_mb``), CPU seconds, file size, open files,
  processes, no core dumps;
- the operating system's guard (``codegen.guard``), which the child applies to itself before it reads
  the program, and which nothing in the program can lift: Landlock (writes only in the folder, reads
  only Python's installation and the system's libraries, no file executed, no TCP) and a seccomp
  filter (no new process, socket, ptrace, mount or namespace; threads allowed). Where the kernel
  offers neither, ``Sandbox`` refuses to run anything unless the user opts in
  (``PPOOR_UNGUARDED_SANDBOX=1``); ``Sandbox.isolation`` says what holds;
- network: a new, empty network namespace as well (``unshare(CLONE_NEWNET)``, as root or through a
  user namespace where the kernel allows one);
- user: run as root, the child drops to the ``nobody`` user where that user can reach the Python
  installation (a Python installed under /root, which others cannot enter, keeps the child root);
- inside the child, a second line behind the OS guard: a Python audit hook (PEP 578) that refuses
  sockets, new processes (fork, exec, spawn, subprocess, os.system), ctypes, and any file opened,
  removed, renamed or listed outside the temporary folder, except reading Python's own installation.
  NumPy and OR-Tools are imported before it (NumPy loads ctypes; every ctypes call after that is
  refused). A hook written in Python can be got around by the Python code it watches (PEP 578 says
  so): it narrows what a program reaches before the kernel refuses it, and words the refusal.

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
from pathlib import Path

from ppoor.codegen import guard

CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000
RESULT_MARK = "\n@@RLEA-RESULT@@"
GUARD = Path(guard.__file__).read_text()
"""The OS guard's source, run by the child before the program is read (``codegen.guard.apply``)."""
NOBODY = 65534

RUNNER = r'''
import importlib, json, os, sys
for module in ("ctypes", "numpy", "ortools.constraint_solver.pywrapcp", "ortools.sat.python.cp_model"):
    try:  # loaded before the hook: numpy imports ctypes, whose calls the hook then refuses
        importlib.import_module(module)
    except ImportError:
        pass
here = os.getcwd()
settings = json.loads(sys.argv[1])
applied = apply(here, settings["guarded"])  # the OS guard (codegen/guard.py, above): for good, threads and all
if not (isinstance(applied["landlock"], int) and applied["seccomp"] is True) and not settings["unguarded"]:
    raise SystemExit(f"sandbox: the operating system's guard could not be applied ({applied}); nothing was run")
instances = json.load(open("instances.json"))
program = open("program.py").read()
def guarded(readable):
    """The audit hook, a second line behind the OS guard: its lists live in this closure, not in globals."""
    readable = tuple(os.path.realpath(p) for p in readable) + (here,)
    blocked = ("socket.", "subprocess.", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
               "os.forkpty", "ctypes.", "os.kill", "os.killpg", "pty.", "webbrowser.", "urllib.", "http.")
    writes = ("os.remove", "os.rmdir", "os.rename", "os.truncate", "os.chmod", "os.chown", "os.mkdir",
              "os.link", "os.symlink", "os.utime", "shutil.rmtree", "shutil.move", "shutil.copyfile")
    realpath, fsdecode, sep = os.path.realpath, os.fsdecode, os.sep
    def inside(path, roots):
        try:
            path = realpath(fsdecode(path) if not isinstance(path, int) else here)
        except (TypeError, ValueError):
            return False
        return any(path == r or path.startswith(r.rstrip(sep) + sep) for r in roots)
    def hook(event, args):
        if event.startswith(blocked):
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event in writes:
            for a in args[:2]:
                if isinstance(a, (str, bytes, os.PathLike)) and not inside(a, (here,)):
                    raise PermissionError(f"sandbox: {event} outside the working folder is not allowed")
        elif event == "open":
            path, mode = args[0], args[1] or "r"
            if isinstance(path, int):
                return
            writing = any(c in str(mode) for c in "wax+")
            if not inside(path, (here,) if writing else readable):
                raise PermissionError(f"sandbox: opening {fsdecode(path)!r} is not allowed")
        elif event in ("os.listdir", "os.scandir", "os.chdir", "glob.glob"):
            if args and isinstance(args[0], (str, bytes, os.PathLike)) and not inside(args[0], readable):
                raise PermissionError(f"sandbox: {event} outside the working folder is not allowed")
    return hook
sys.addaudithook(guarded(settings["readable"]))
del guarded, settings, applied
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


class SandboxUnavailable(RuntimeError):
    """This machine offers no operating-system guard (Landlock and seccomp) and the user did not opt in
    to running generated programs without one (``UNGUARDED_VARIABLE``)."""


UNGUARDED_VARIABLE = "PPOOR_UNGUARDED_SANDBOX"
"""Set to 1 to run generated programs where the OS offers no guard, behind the audit hook alone."""

SYSTEM_LIBRARIES = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib", "/etc/ld.so.cache")
"""Read-only for the child under Landlock: the shared libraries an extension module may load late."""


class Sandbox:
    """Runs programs under the limits of the module's docstring. ``seconds`` wall clock per run,
    ``memory_mb`` address space, ``output_chars`` kept of the captured output. Raises
    ``SandboxUnavailable`` where the OS offers no guard, unless ``unguarded`` (default: the environment
    variable ``PPOOR_UNGUARDED_SANDBOX`` set to 1). ``isolation`` says what holds on this machine."""

    def __init__(self, seconds: float = 60.0, memory_mb: int = 2048, output_chars: int = 2000,
                 unguarded: bool | None = None):  # fmt: skip
        self.seconds, self.memory_mb, self.output_chars = seconds, memory_mb, output_chars
        self.unguarded = os.environ.get(UNGUARDED_VARIABLE) == "1" if unguarded is None else unguarded
        offered = guard.available()
        self.guarded = offered["landlock"] >= 1 and offered["seccomp"]
        if not self.guarded and not self.unguarded:
            raise SandboxUnavailable(
                f"this machine offers no operating-system guard for generated programs (Landlock ABI "
                f"{offered['landlock']}, seccomp {'yes' if offered['seccomp'] else 'no'}; Linux 5.13 or later is "
                f"needed): set {UNGUARDED_VARIABLE}=1 to run them behind Python's audit hook alone, which a "
                "program can get around"
            )
        self.network = network_isolation()
        self.libc = ctypes.CDLL(None, use_errno=True)
        paths = sysconfig.get_paths()
        self.drop_user = os.geteuid() == 0 and all(
            others_can_enter(p) for p in (sys.executable, paths["stdlib"], paths["purelib"], paths["platlib"])
        )
        files = (
            f"Landlock ABI {offered['landlock']}: writes only in the run's folder, reads only Python's installation "
            "and the system's libraries, no file executed; seccomp: no process, socket, ptrace, mount or namespace"
            if self.guarded else "no operating-system guard (opted in)"
        )
        self.isolation = (
            f"{files}; network: {self.network}; user: {'nobody' if self.drop_user else 'same as the caller'}; "
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
            settings = {"readable": self.readable, "guarded": [*self.readable, *SYSTEM_LIBRARIES],
                        "unguarded": not self.guarded}  # fmt: skip
            env = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "HOME": folder, "TMPDIR": folder, "LANG": "C.UTF-8"}
            start = time.perf_counter()
            child = subprocess.Popen(
                [sys.executable, "-I", "-c", GUARD + RUNNER, json.dumps(settings)],
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


def sandbox_or_exit(seconds: float, memory_mb: int) -> Sandbox:
    """``Sandbox(seconds, memory_mb)`` for a script, made before any long work: exits with its one line
    where this machine offers no guard and the user did not opt in."""
    try:
        return Sandbox(seconds, memory_mb)
    except SandboxUnavailable as exc:
        sys.exit(f"error: {exc}")


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
