"""Run plumbing shared by the trainers (ppo_or.py, ppo_flatland.py): argument checks, the run
folder, the memory a run needs, the progress text, Weights and Biases and the hyperparameter log.

The trainers keep the algorithm; what every run does around it lives here, written once.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import tempfile
import time
from dataclasses import asdict, fields
from pathlib import Path

import torch

MAX_SEED = 2**32 - 1  # numpy's seeds are 32-bit
MAX_SECONDS = 10 * 365 * 86_400.0  # a time budget is finite: ten years at most
MAX_THREADS = 1024
PPO_LIMITS = {
    "seed": (0, MAX_SEED),
    "total_timesteps": (1, math.inf),
    "learning_rate": (1e-10, 10.0),
    "gamma": (0.0, 1.0),
    "gae_lambda": (0.0, 1.0),
    "update_epochs": (1, math.inf),
    "clip_coef": (1e-6, 10.0),
    "ent_coef": (0.0, 10.0),
    "vf_coef": (0.0, 100.0),
    "max_grad_norm": (1e-6, 1e6),
    "target_kl": (0.0, 100.0),
    "checkpoint_interval": (0, math.inf),
    "eval_interval": (0, math.inf),
}
"""The ranges of the PPO arguments both trainers have (``check_numbers``)."""
EXP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def flag(name: str) -> str:
    """The command-line flag of a field name: ``num_envs`` -> ``--num-envs``."""
    return "--" + name.replace("_", "-")


def check_numbers(args, limits: dict[str, tuple[float, float]]) -> list[str]:
    """One line per numeric field of the dataclass ``args`` outside its closed range in ``limits``
    (field name -> (low, high); a field left unset, None, is not checked). Every numeric field must
    have a range: a field without one is a programming error (KeyError), which the table-driven test
    of every script's arguments catches. NaN never passes; infinity only where the range allows it."""
    problems = []
    for f in fields(args):
        value = getattr(args, f.name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        low, high = limits[f.name]
        if math.isnan(value) or not low <= value <= high:
            problems.append(f"{flag(f.name)} must be {describe_range(low, high)}, got {number(value)}")
    return problems


def describe_range(low: float, high: float) -> str:
    """``at least 1``, ``between 0 and 1``, ``a finite number >= 0`` ... for a message."""
    if high == math.inf:
        return f"at least {number(low)}"
    if high == MAX_SECONDS:
        return f"a finite number of at least {number(low)}"
    return f"between {number(low)} and {number(high)}"


def number(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


def fail(problems: list[str]) -> None:
    """Exits with every problem found, one per line, when there are any."""
    if problems:
        sys.exit("error: " + "\n       ".join(problems))


def exp_name_problem(name: str) -> str | None:
    """Why ``--exp-name`` cannot name a folder inside runs/ (a path, spaces, a leading dot); None if it can."""
    if EXP_NAME.fullmatch(name):
        return None
    return (
        f"--exp-name {name!r} must be a plain folder name: letters, digits, '.', '_' and '-' (100 at most), "
        "starting with a letter or digit"
    )


def new_run_dir(stem: str, root: str = "runs") -> tuple[str, str]:
    """Creates a run folder ``root/{stem}__{unix time}`` of its own and returns (run name, folder).
    The folder is made with ``exist_ok=False``, so two runs started in the same second never share
    one: the second gets the suffix ``-2`` (then ``-3``, ...)."""
    base = f"{stem}__{int(time.time())}"
    os.makedirs(root, exist_ok=True)
    for k in range(1, 10_000):
        name = base if k == 1 else f"{base}-{k}"
        try:
            os.mkdir(os.path.join(root, name))
        except FileExistsError:
            continue
        return name, os.path.join(root, name)
    raise RuntimeError(f"no free run folder for {base} in {root}")


def available_memory(device: torch.device) -> int:
    """Bytes free for a run's tensors: the GPU's free memory on CUDA, else the host's available memory
    (MemAvailable where /proc/meminfo has it, else the free pages)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 62  # unknown: nothing is refused


def memory_problem(needed: float, device: torch.device, what: str) -> str | None:
    """A line saying that ``what`` needs ``needed`` bytes (an estimate) and how much is free, when it
    does not fit; None when it does."""
    free = available_memory(device)
    if needed <= free:
        return None
    where = "GPU" if device.type == "cuda" else "memory"
    return f"{what} needs about {gib(needed)} of {where}, {gib(free)} is available"


def gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB" if n >= 2**30 else f"{n / 2**20:,.0f} MiB"


def progress(
    done: int, iteration: int, steps_done: int, steps_left: int, seconds_done: float, elapsed: float,
    total_seconds: float | None, reserve: float = 0.0,
) -> str:  # fmt: skip
    """`` | k/K iterations, hh:mm:ss elapsed, ETA hh:mm:ss``, the end of a trainer's iteration line:
    K from the steps and seconds per iteration of the ``done`` iterations of this session
    (``steps_done`` steps in ``seconds_done`` s), the ``steps_left`` to the step budget and the time
    left of ``total_seconds`` (less ``reserve`` s kept for the end of the run), ``elapsed`` s so far."""
    seconds = seconds_done / done
    total = iteration + math.ceil(max(0, steps_left) / max(steps_done / done, 1e-9))
    if total_seconds is not None:
        total = min(total, iteration + math.ceil(max(0.0, total_seconds - elapsed - reserve) / seconds))
    clock = [
        time.strftime("%H:%M:%S", time.gmtime(max(0.0, min(t, 359_999.0))))
        for t in (elapsed, seconds * (total - iteration))
    ]
    return f" | {iteration}/{total} iterations, {clock[0]} elapsed, ETA {clock[1]}"


def wandb_problem() -> str | None:
    """Why --track cannot log, checked before any work so that a run never stops at wandb's
    interactive login prompt; None when it can (a login, WANDB_API_KEY, or an offline mode)."""
    try:
        import wandb  # noqa: F401
    except ImportError:
        return "wandb is not installed: pip install wandb"
    if os.environ.get("WANDB_MODE") in ("offline", "disabled", "dryrun") or os.environ.get("WANDB_API_KEY"):
        return None
    netrc = os.path.expanduser("~/.netrc")
    if os.path.exists(netrc) and "api.wandb.ai" in open(netrc, errors="replace").read():
        return None
    return "no wandb login: run `wandb login` (or set WANDB_API_KEY), or log offline with WANDB_MODE=offline"


def start_wandb(args, run_name: str) -> None:
    """Mirrors the run to Weights and Biases (tensorboard synced); one line and exit when it cannot start."""
    import wandb

    try:
        wandb.init(
            project=args.wandb_project_name,
            entity=args.wandb_entity,
            sync_tensorboard=True,
            config=vars(args),
            name=run_name,
            id=run_name.replace("/", "_"),
            resume="allow",
            save_code=True,
            settings=wandb.Settings(init_timeout=30),
        )
    except Exception as exc:  # wandb raises its own kinds for login, network and server errors
        sys.exit(f"error: --track: wandb could not start ({exc}); log offline with WANDB_MODE=offline")


def log_hyperparameters(writer, run_dir: str, args, **extra) -> None:
    """CleanRL's hyperparameter table in tensorboard and ``args.json`` (with ``extra``) in the run folder."""
    writer.add_text(
        "hyperparameters",
        "|param|value|\n|-|-|\n{}".format("\n".join([f"|{key}|{value}|" for key, value in vars(args).items()])),
    )
    with open(os.path.join(run_dir, "args.json"), "w") as f:
        json.dump({**asdict(args), **extra}, f, indent=2)


def given_fields(cls, argv: list[str]) -> set[str]:
    """The fields of the dataclass ``cls`` that ``argv`` gives (``--num-envs 8``, ``--no-cuda``, ...)."""
    given = set()
    for f in fields(cls):
        dashed = f.name.replace("_", "-")
        flags = {f"--{f.name}", f"--{dashed}", f"--no-{dashed}", f"--no_{f.name}"}
        if any(arg.split("=", 1)[0] in flags for arg in argv):
            given.add(f.name)
    return given


def parse_with_presets(cls, presets: dict, default: str, argv: list[str]) -> tuple:
    """tyro's command line ``argv`` over the defaults of the preset that ``--preset`` names (``default``
    when none is), and the fields given (``given_fields``)."""
    import tyro

    name = default
    for i, arg in enumerate(argv):
        if arg == "--preset" and i + 1 < len(argv):
            name = argv[i + 1]
        elif arg.startswith("--preset="):
            name = arg.split("=", 1)[1]
    return tyro.cli(cls, default=presets.get(name, presets[default]), args=argv), given_fields(cls, argv)


SCRIPT_OF = {"rail": "ppo_flatland.py", "rail-priorities": "ppo_priorities.py"}
"""The trainer of a checkpoint by its ``problem`` (the routing problems': ppo_or.py; rlea.py's checkpoints
name their ``script``)."""


def resume_settings(
    args, given: set[str], overrides: tuple[str, ...], script: str,
    budget: tuple[str, str] = ("global_step", "total_timesteps"), file_name: str | None = None,
) -> tuple:  # fmt: skip
    """Loads the checkpoint that ``args.resume`` names (a file, or a run folder: its latest checkpoint,
    or its ``file_name`` where the script writes one file) and returns (its settings as ``type(args)``
    with --resume kept, the checkpoint). Fields ``given`` on the command line that are in
    ``overrides`` replace the saved ones (e.g. a longer --total-timesteps); any other field given must
    equal the checkpoint's, whatever its default. A checkpoint that lacks one of today's settings (an
    older ppo-or's) is refused with the way on (--init-from its weights), as are a weights-only file, and a run that already reached its budget (``budget``: the
    checkpoint's count of what was done and the field that bounds it; and --total-seconds where the
    script has it), are refused before anything is written."""
    from ppoor.models.checkpoints import latest_checkpoint, read_checkpoint

    try:
        folder = os.path.isdir(args.resume)
        path = Path(args.resume, file_name) if folder and file_name else latest_checkpoint(args.resume)
        ckpt = read_checkpoint(path)
    except ValueError as exc:
        sys.exit(f"error: --resume: {exc}")
    if folder:
        print(f"resuming from {path} (the latest checkpoint of {args.resume})", flush=True)
    if "args" not in ckpt or "optimizer" not in ckpt:
        sys.exit(f"error: --resume: {args.resume} holds weights only, not a {script} training state")
    owner = ckpt.get("script") or SCRIPT_OF.get(ckpt.get("problem"), "ppo_or.py")
    if owner != script:
        sys.exit(f"error: --resume: {args.resume} is a {owner} checkpoint; resume it with {owner}")
    names = [f.name for f in fields(args)]
    if missing := [name for name in names if name not in ckpt["args"] and name != "resume"]:
        sys.exit(f"error: --resume: {args.resume} was written by an older {script} without {', '.join(map(flag, missing))};"
                 f" start a new run from its weights with --init-from {args.resume}")  # fmt: skip
    saved = {k: ckpt["args"][k] for k in names if k in ckpt["args"]}
    for name in sorted(given - {"resume"}):
        value = getattr(args, name)
        if value == saved.get(name):
            continue
        if name not in overrides:
            sys.exit(f"error: {flag(name)} cannot change when resuming (the checkpoint has {saved.get(name)!r})")
        saved[name] = value
    resumed = type(args)(**{**saved, "resume": str(path)})
    done, total = ckpt.get(budget[0], 0), getattr(resumed, budget[1])
    seconds = getattr(resumed, "total_seconds", None)
    if done >= total or (seconds is not None and ckpt.get("elapsed_seconds", 0.0) >= seconds):
        sys.exit(
            f"error: --resume: the run already finished at {budget[0].replace('_', ' ')} {done:,} of "
            f"{flag(budget[1])} {total:,}"
            + (f" or after --total-seconds {seconds:g}" if seconds else "")
            + f"; raise {flag(budget[1])}"
            + (" (or --total-seconds)" if seconds else "")
            + " to continue it"
        )
    return resumed, ckpt


def check_writable(flag: str, path: str, folder: bool = False) -> None:
    """Fails now, before any decoding, if ``path`` (a file, or with ``folder`` a folder to write files
    into) cannot be written; the folder is made if missing."""
    if folder and os.path.exists(path) and not os.path.isdir(path):
        sys.exit(f"error: {flag} {path} is a file; name a folder for the solution files")
    if not folder and os.path.isdir(path):
        sys.exit(f"error: {flag} {path} is a folder; name a file in it")
    target = path if folder else os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(target, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=target):
            pass
    except OSError as exc:
        sys.exit(f"error: {flag} {path}: cannot write there ({exc.strerror or exc})")


def write_json(path: str, data, indent: int | None = 1) -> None:
    """Writes ``data`` as JSON to ``path`` atomically (a temporary file beside it, then renamed), so a
    crash never leaves half a results file."""
    with open(path + ".tmp", "w") as f:
        json.dump(data, f, indent=indent)
    os.replace(path + ".tmp", path)


class Run:
    """A training run's plumbing, so that a trainer's ``main`` holds the algorithm and little else.

    Opens the run folder (``runs/{stem}__{time}``, or the resumed run's), the tensorboard writer, wandb
    (``--track``) and the hyperparameter log (``extra`` joins ``args.json``); holds the training state
    every checkpoint carries (``iteration``, ``global_step``, ``elapsed`` seconds over all sessions,
    ``lr_scale`` of the trust region) restored from ``ckpt``; anneals the learning rate; says when the
    budget is spent, when a checkpoint is due (every --checkpoint-interval iterations and
    --checkpoint-seconds of training) and whether the run goes on; saves checkpoints atomically; and
    ends the run on a stop request (Ctrl-C, SIGTERM) or at the budget. In data-parallel runs every
    process holds one (the same state); only ``rank`` 0 writes files. ``reserve``: seconds of
    --total-seconds kept for work after the loop (ppo_flatland.py's release data); ``total_field``: the
    setting that bounds ``global_step`` (rlea.py counts episodes); ``file_name``: one checkpoint file
    in the run folder, rewritten each time, instead of ``ckpt/{iteration}.pt``."""

    def __init__(self, args, stem: str, ckpt: dict | None = None, rank: int = 0, world_size: int = 1,
                 device: torch.device | None = None, reserve: float = 0.0, total_field: str = "total_timesteps",
                 file_name: str | None = None, **extra):  # fmt: skip
        from ppoor.training.runtime import StopRequest
        from torch.utils.tensorboard import SummaryWriter

        self.args, self.rank, self.world_size, self.device, self.reserve = args, rank, world_size, device, reserve
        self.total: int = getattr(args, total_field)
        self.total_seconds: float | None = getattr(args, "total_seconds", None)
        self.file_name = file_name
        self.is_main = rank == 0
        state = ckpt or {}
        self.iteration: int = state.get("iteration", 0)
        self.global_step: int = state.get("global_step", 0)
        self.elapsed: float = state.get("elapsed_seconds", 0.0)
        self.lr_scale: float = state.get("lr_scale", 1.0)
        self.first_iteration, self.start_step = self.iteration, self.global_step
        if ckpt and file_name:  # a run of one checkpoint file goes on in the folder that holds it
            self.name = os.path.basename(os.path.dirname(os.path.abspath(args.resume)))
        elif ckpt:
            self.name = ckpt["run_name"]
        else:
            self.name = new_run_dir(stem)[0] if self.is_main else None
            if world_size > 1:  # every process writes into the main process's folder
                import torch.distributed as dist

                shared = [self.name]
                dist.broadcast_object_list(shared, src=0)
                self.name = shared[0]
        self.dir = os.path.dirname(args.resume) if ckpt and file_name else os.path.join("runs", self.name)
        self.writer = None
        if self.is_main:
            if args.track:
                start_wandb(args, self.name)
            self.writer = SummaryWriter(self.dir, purge_step=self.global_step if ckpt else None)
            if not ckpt:
                log_hyperparameters(self.writer, self.dir, args, world_size=world_size, **extra)
        self.stop = StopRequest()
        self.start_time = time.time()
        self.clock = self.start_time - self.elapsed
        self.next_wall_checkpoint = self.next_wall_mark(self.elapsed)

    def log(self, tag: str, value, step: int | None = None) -> None:
        """A tensorboard scalar at the current global step (the main process only)."""
        if self.writer is not None:
            self.writer.add_scalar(tag, value, self.global_step if step is None else step)

    def log_all(self, scalars: dict) -> dict:
        """``log`` of every tag -> value of ``scalars``; returns them."""
        for tag, value in scalars.items():
            self.log(tag, value)
        return scalars

    def learning_rate(self) -> float:
        """--learning-rate x the trust region's scale, annealed linearly to 0 over the budget (the larger
        of the steps and the seconds done) with --anneal-lr."""
        rate = self.args.learning_rate * self.lr_scale
        if not getattr(self.args, "anneal_lr", False):
            return rate
        done = self.global_step / self.total
        if self.total_seconds is not None:
            done = max(done, self.elapsed / self.total_seconds)
        return max(0.0, 1.0 - done) * rate

    def out_of_time(self) -> bool:
        """--total-seconds (less the reserve) is spent."""
        return self.total_seconds is not None and self.elapsed + self.reserve >= self.total_seconds

    def going(self) -> bool:
        """Whether another iteration runs: steps and seconds left, and no stop requested."""
        return self.global_step < self.total and not self.out_of_time() and not self.stop.requested

    def tick(self) -> None:
        """Ends an iteration's timing: ``elapsed`` is the largest over the processes."""
        from ppoor.training.parallel import synced

        self.elapsed = synced(time.time() - self.clock, self.device)

    def next_wall_mark(self, seconds: float) -> float:
        """The first multiple of --checkpoint-seconds after ``seconds`` (never with 0)."""
        step = getattr(self.args, "checkpoint_seconds", 0.0)
        return (seconds // step + 1) * step if step else float("inf")

    def checkpoint_due(self) -> bool:
        """After an iteration: every --checkpoint-interval iterations, or once --checkpoint-seconds
        passed since the last; never at the end of the run (which writes its own). Synchronizes the
        processes' stop requests."""
        if self.device is not None:
            self.stop.synchronize(self.device)
        wall = self.elapsed >= self.next_wall_checkpoint
        if wall:
            self.next_wall_checkpoint = self.next_wall_mark(self.elapsed)
        interval = self.args.checkpoint_interval and self.iteration % self.args.checkpoint_interval == 0
        return bool(interval or wall) and self.going()

    def progress(self) -> str:
        """The end of the iteration line: k/K iterations, elapsed, ETA."""
        return progress(
            self.iteration - self.first_iteration, self.iteration, self.global_step - self.start_step,
            self.total - self.global_step, time.time() - self.start_time, self.elapsed, self.total_seconds,
            self.reserve,
        )  # fmt: skip

    def save(self, payload: dict) -> str | None:
        """Writes ``payload`` with the run's state as ``ckpt/{iteration}.pt`` (or the run's one
        ``file_name``) atomically (the main process); returns its path (None elsewhere)."""
        if not self.is_main:
            return None
        from ppoor.models.checkpoints import save_checkpoint

        path = os.path.join(self.dir, self.file_name or os.path.join("ckpt", f"{self.iteration}.pt"))
        save_checkpoint({**payload, **self.state()}, path)
        return path

    def state(self) -> dict:
        return {
            "run_name": self.name,
            "global_step": self.global_step,
            "iteration": self.iteration,
            "elapsed_seconds": self.elapsed,
            "lr_scale": self.lr_scale,
            "world_size": self.world_size,
        }

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()

    def stopped(self, path: str | None) -> None:
        """Ends a run asked to stop: says where its checkpoint is, exit status 130."""
        from ppoor.training.parallel import finish_processes

        if self.is_main:
            print(f"stopped: checkpoint {path}; continue with --resume", flush=True)
        self.close()
        finish_processes(self.world_size)
        sys.exit(130)
