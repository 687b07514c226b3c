"""RL4CO as a peer for the benchmarks: its envs and policies (its POMO on its multi-task VRP env is
RouteFinder's MTPOMO baseline), fed our instances, their tours scored by our checker.

RL4CO (``pip install -e ".[bench]"``) holds instances as TensorDicts. TSP: ``locs``
[B, n, 2]. CVRP: ``locs`` [B, n, 2] (customers), ``depot`` [B, 2], ``demand`` [B, n] (fractions of
the capacity), ``capacity`` [B, 1]. Multi-task VRP: ``locs`` [B, n + 1, 2] (depot first), demands
[B, n + 1] (the depot's 0), ``time_windows`` [B, n + 1, 2], ``service_time`` [B, n + 1],
``distance_limit``, ``open_route``, ``vehicle_capacity``, ``capacity_original``, ``speed`` [B, 1];
only classic backhauls and one depot exist there (RL4CO 0.7). Its actions are TSP permutations, or
customers 1..n with 0 for the depot, the start implied, padded with 0: our one-depot actions once the
repeats are dropped and the final return added.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from ppoor.envs.vrp import vehicle_capacity

PPO_OR = Path(__file__).resolve().parents[1] / "ppo_or.py"


def rl4co_instances(problem: str, instances: dict):
    """Our arrays of ``problem`` (tsp, cvrp, mtvrp with one depot) -> RL4CO's TensorDict."""
    from tensordict import TensorDict

    m = len(instances["coords"])
    as_tensor = lambda x: torch.as_tensor(np.asarray(x), dtype=torch.float32)  # noqa: E731
    if problem == "tsp":
        return TensorDict({"locs": as_tensor(instances["coords"])}, batch_size=[m])
    if problem == "cvrp":
        arrays = {"locs": instances["coords"], "depot": instances["depot"], "demand": instances["demand"]}
        return TensorDict({k: as_tensor(v) for k, v in arrays.items()} | {"capacity": torch.ones(m, 1)}, batch_size=[m])
    if instances["depots"].shape[1] != 1 or (instances["backhaul_class"] != 1).any():
        raise ValueError("RL4CO's multi-task VRP has one depot and classic backhauls only")
    zero = np.zeros((m, 1))
    return TensorDict(
        {
            "locs": as_tensor(np.concatenate([instances["depots"], instances["coords"]], axis=1)),
            "demand_linehaul": as_tensor(np.concatenate([zero, instances["demand_linehaul"]], axis=1)),
            "demand_backhaul": as_tensor(np.concatenate([zero, instances["demand_backhaul"]], axis=1)),
            "distance_limit": as_tensor(instances["distance_limit"][:, None]),
            "time_windows": as_tensor(instances["time_windows"]),
            "service_time": as_tensor(instances["service_time"]),
            "vehicle_capacity": torch.ones(m, 1),
            "capacity_original": torch.full((m, 1), float(vehicle_capacity(instances["coords"].shape[1]))),
            "open_route": torch.as_tensor(np.asarray(instances["open_route"])[:, None], dtype=torch.bool),
            "speed": torch.ones(m, 1),
        },
        batch_size=[m],
    )


def our_tour(actions: np.ndarray) -> np.ndarray:
    """RL4CO's action row -> our actions (no repeated depot, ending at the depot)."""
    tour = [int(a) for a in actions]
    tour = [a for i, a in enumerate(tour) if a != 0 or (i > 0 and tour[i - 1] != 0)]
    if tour and tour[0] == 0:
        tour = tour[1:]
    return np.asarray(tour + ([0] if not tour or tour[-1] != 0 else []), dtype=np.int64)


def rl4co_env(problem: str, num_nodes: int):
    """RL4CO's TSP or CVRP env drawing instances like Kool et al.'s at ``num_nodes`` nodes / customers."""
    from rl4co.envs import CVRPEnv, TSPEnv

    return {"tsp": TSPEnv, "cvrp": CVRPEnv}[problem](generator_params={"num_loc": num_nodes})


def rl4co_policy(problem: str, num_nodes: int):
    """RL4CO's env and its Attention Model policy (untrained: for speed) for tsp or cvrp."""
    from rl4co.models import AttentionModelPolicy

    return rl4co_env(problem, num_nodes), AttentionModelPolicy(env_name=problem).eval()


@torch.no_grad()
def rl4co_decode(
    policy,
    env,
    instances: dict,
    multi: bool,
    copies: int,
    batch_size: int = 100,
    problem: str = "mtvrp",
    beam_width: int | None = None,
) -> list[np.ndarray]:
    """The best tour per instance of RL4CO's decoding: greedy (``multi`` False) or POMO's multi-start
    greedy from every node (TSP) or customer, over ``copies`` dihedral augmentations (1 or 8), in
    batches; as our actions. ``beam_width``: RL4CO's beam search instead (W distinct start nodes,
    then one beam of W; the best of its W solutions), without augmentation."""
    from rl4co.data.transforms import StateAugmentation
    from rl4co.utils.ops import unbatchify

    n = instances["coords"].shape[1]
    augment = StateAugmentation(num_augment=copies, augment_fn="dihedral8") if copies > 1 else None
    tours = []
    for start in range(0, len(instances["coords"]), batch_size):
        part = {key: value[start : start + batch_size] for key, value in instances.items()}
        td = env.reset(rl4co_instances(problem, part))
        if augment is not None:
            td = augment(td)
        if beam_width:
            out = policy(td, env, decode_type="beam_search", beam_width=beam_width)  # the best beam per instance
        else:
            out = policy(td, env, decode_type="multistart_greedy" if multi else "greedy", num_starts=n if multi else 0)
        shape = (copies, n) if multi and copies > 1 else n if multi else copies
        reward = unbatchify(out["reward"], shape).reshape(len(part["coords"]), -1)
        actions = unbatchify(out["actions"], shape).reshape(len(part["coords"]), reward.shape[1], -1)
        best = reward.argmax(1)
        rows = [actions[b, best[b]].numpy() for b in range(len(best))]
        tours += rows if problem == "tsp" else [our_tour(row) for row in rows]
    return tours


def train_rl4co(out: Path, env, minutes: float, seed: int) -> None:
    """RL4CO's POMO on ``env`` for ``minutes`` on one thread, with POMO's own settings (batch 64, Adam
    1e-4, every node or customer a start, the shared baseline); the policy's weights each minute in
    out/ckpt/{k}.pt with their training seconds."""
    import lightning.pytorch as pl
    from rl4co.models import POMO
    from rl4co.utils.trainer import RL4COTrainer

    torch.set_num_threads(1)
    pl.seed_everything(seed)
    (out / "ckpt").mkdir(parents=True, exist_ok=True)

    class EveryMinute(pl.Callback):
        def __init__(self):
            self.start, self.saved = time.perf_counter(), 0

        def on_train_batch_end(self, trainer, module, *args):
            elapsed = time.perf_counter() - self.start
            if elapsed >= 60 * (self.saved + 1) or elapsed >= 60 * minutes:
                self.saved += 1
                torch.save({"policy": module.policy.state_dict(), "elapsed_seconds": elapsed,
                            "step": trainer.global_step}, out / "ckpt" / f"{self.saved}.pt")  # fmt: skip

    model = POMO(env, batch_size=64, train_data_size=64 * 100, val_data_size=64, optimizer_kwargs={"lr": 1e-4})
    trainer = RL4COTrainer(
        max_epochs=10**6, max_time={"minutes": minutes}, accelerator="cpu", devices=1, precision="32",
        logger=False, enable_checkpointing=False, callbacks=[EveryMinute()], enable_progress_bar=False,
        limit_val_batches=0, num_sanity_val_steps=0,
    )  # fmt: skip
    trainer.fit(model)


def pomo_policy(env):
    """The policy network of RL4CO's POMO for ``env`` (its architecture: 6 encoder layers, instance
    norm), untrained; load a ``train_rl4co`` checkpoint's ``policy`` into it."""
    from rl4co.models import POMO

    return POMO(env).policy


def ppo_or_command(
    env_id: str, num_nodes: int, minutes: float, seed: int, exp_name: str, shape: tuple = ("--num-envs", "256")
) -> list[str]:
    """ppo_or.py with its defaults at the CPU shape ``shape`` of the peer benchmarks (--num-envs 256, or a
    preset), one thread, the budget in wall time, a checkpoint each minute, no periodic evaluation."""
    cmd = [sys.executable, str(PPO_OR), "--env-id", env_id, "--num-nodes", str(num_nodes), *shape]
    cmd += ["--threads", "1", "--seed", str(seed), "--total-timesteps", str(10**12)]
    cmd += ["--total-seconds", str(minutes * 60), "--exp-name", exp_name, "--eval-interval", "0"]
    return cmd + ["--checkpoint-interval", "0", "--checkpoint-seconds", "60"]


def run_side_by_side(commands: dict[str, list[str]], out: Path, jobs: int) -> None:
    """Runs each trainer's command in ``out`` (its output in out/{name}.log), all at once with
    ``jobs`` 2 (each on one thread), else one after the other; exits with one line if any fails."""
    started, children, codes = time.perf_counter(), [], []
    for name, cmd in commands.items():
        print(f"[{name}] {' '.join(cmd[1:])}", flush=True)
        log = open(out / f"{name}.log", "w")
        children.append(subprocess.Popen(cmd, cwd=out, stdout=log, stderr=subprocess.STDOUT))
        if jobs == 1:
            codes.append(children.pop().wait())
    codes += [child.wait() for child in children]
    if any(codes):
        sys.exit(f"error: a trainer failed (exit codes {codes}); see the logs in {out}")
    print(f"trained in {(time.perf_counter() - started) / 60:.1f} min", flush=True)


def save_results(out: Path, rows: list[dict], marks: list[float], keep: bool) -> list[dict]:
    """Writes out/results.json: ``rows`` (the scored ``marks``) and, with ``keep`` (an --evaluate run),
    the rows of other marks already there (scored by another --evaluate, e.g. at once on the other
    core); returns all rows written, by mark."""
    results = out / "results.json"
    earlier = json.loads(results.read_text()) if keep and results.is_file() else []
    rows = sorted([r for r in earlier if r["mark"] not in marks] + rows, key=lambda r: r["mark"])
    results.write_text(json.dumps(rows, indent=1))
    return rows


def latest_run(out: Path, prefix: str) -> Path:
    """The ckpt folder of the latest ppo-or run in out/runs named ``prefix``...; exits with one line if none."""
    runs = sorted(out.glob(f"runs/{prefix}*"))
    if not runs:
        sys.exit(f"error: {out} holds no ppo-or run {prefix}*: train first (without --evaluate), or give its --out")
    return runs[-1] / "ckpt"


def mark_checkpoints(folder: Path, marks: list[float], elapsed) -> list[tuple[float, Path]]:
    """For each mark (minutes), the first checkpoint of ``folder`` written at or after it (else the
    last), as (its training seconds, its path); ``elapsed``: path -> training seconds."""
    found = sorted((elapsed(p), p) for p in folder.glob("*.pt"))
    if not found:
        sys.exit(f"error: {folder} holds no checkpoint")
    return [next((c for c in found if c[0] >= 60 * m - 1e-6), found[-1]) for m in marks]
