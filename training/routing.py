"""What ``ppo_or.py``'s loop calls around the algorithm: the memory a run needs and how many
instances an update decodes at once, the rollout data's layout for the update's minibatches,
--init-from's weights, the checkpoint's training state and its restore, the periodic evaluation and
the iteration's log line. The algorithm itself (rollout, advantages, PPO loss and update) stays in
the script.

Shapes: M instances, N trajectories, T stored steps, A actions.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict

import numpy as np
import torch
from ppoor.models import Agent, CheckpointError, latest_checkpoint, read_checkpoint
from ppoor.search import decode
from ppoor.training.parallel import gather
from ppoor.training.runs import Run, available_memory


def initial_weights(source: str, problem: str) -> dict:
    """The checkpoint --init-from names, read (weights only) and checked to be a model of ``problem``."""
    try:
        init = read_checkpoint(latest_checkpoint(source))
    except CheckpointError as exc:
        sys.exit(f"error: --init-from: {exc}")
    if init["problem"] != problem:
        sys.exit(f"error: --init-from {source} is a {init['problem'].upper()} model, not {problem.upper()}")
    return init


def update_memory(rows: int, n_traj: int, actions: int, steps: int) -> float:
    """Bytes the PPO update needs to decode all T = ``steps`` stored steps of ``rows`` instances at
    once, N = ``n_traj`` trajectories each, over A = ``actions`` with 8 attention heads (logits,
    softmax, glimpses and their gradients: about 28 bytes per element of [rows, T, N, 8A + 128],
    calibrated on TSP50 at 128 instances x 50 trajectories x 50 steps: 5 GB)."""
    return 28.0 * rows * steps * n_traj * (8 * actions + 128)


def chunk_rows(args, actions: int, steps: int, device: torch.device) -> int:
    """The instances the update decodes at once: --update-chunk, else the most whose
    ``update_memory`` fits in 1 GiB on the CPU (a third of the free memory on a GPU); at least 1, at
    most a minibatch."""
    size = min(args.minibatch_size, args.num_envs)
    if args.update_chunk is not None:
        return min(args.update_chunk, size)
    budget = available_memory(device) / 3 if device.type == "cuda" else 2**30
    return int(max(1, min(size, budget // update_memory(1, args.n_traj, actions, steps))))


def training_memory(args, actions: int, steps: int, chunk: int) -> float:
    """Bytes a run needs, estimated: the update of ``chunk`` instances at once (``update_memory``)
    plus the rollout's stored masks and states [T, M, N, A]."""
    rollout = 1.0 * steps * args.num_envs * args.n_traj * (actions + 32)
    return update_memory(chunk, args.n_traj, actions, steps) + rollout


def stack_states(states: list) -> dict:
    """Per-step dynamic states [M, N, ...] -> one dict of [T, M, N, ...] tensors."""
    return {key: torch.stack([s[key] for s in states]) for key in states[0]}


def per_instance(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Rollout data [T, M, N, ...] of instances ``index`` [B] -> [B, T * N, ...] (queries step-major)."""
    return x[:, index].transpose(0, 1).flatten(1, 2)


def minibatch_state(static: dict, steps: dict, index: torch.Tensor) -> dict:
    """The state of instances ``index`` [B] at all T stored steps: queries [B, T * N, ...]."""
    return {
        **{key: value[index] for key, value in static.items()},
        **{key: per_instance(value, index) for key, value in steps.items()},
    }


def training_state(run: Run, agent: Agent, optimizer, envs, args) -> dict:
    """What a checkpoint holds beside the run's state: the model, the optimizer, the settings and
    every process's RNG states (gathered from all of them: call it on every process)."""
    rng = {"torch": torch.get_rng_state(), "env": envs.unwrapped.rng.bit_generator.state}
    if run.device is not None and run.device.type == "cuda":
        rng["cuda"] = torch.cuda.get_rng_state(run.device)
    return {
        "problem": agent.problem,
        "num_nodes": args.num_nodes,
        "model_config": {},
        "model": agent.state_dict(),
        "optimizer": optimizer.state_dict(),
        "args": asdict(args),
        "rank_rng": gather(rng, run.world_size),
    }


def restore(ckpt: dict, agent: Agent, optimizer, envs, rank: int, device: torch.device) -> None:
    """Loads a checkpoint's model, optimizer and this process's RNG states."""
    agent.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    rng = ckpt["rank_rng"][rank]
    torch.set_rng_state(rng["torch"])
    if device.type == "cuda" and "cuda" in rng:
        torch.cuda.set_rng_state(rng["cuda"], device)
    envs.unwrapped.rng.bit_generator.state = rng["env"]


def evaluate(agent: Agent, data: dict, batch_size: int, references: np.ndarray | None) -> dict:
    """Mean greedy and multi-greedy tour lengths on ``data`` (the periodic evaluation), and their
    mean gaps in percent against ``references`` [B] where there are any."""
    agent.eval()
    results = {"greedy": decode(agent, data, "greedy", batch_size=batch_size)}
    results["multi_greedy"] = decode(agent, data, "multi-greedy", batch_size=batch_size)
    agent.train()
    out = {}
    for name, result in results.items():
        out[f"eval/{name}_length"] = result.lengths.mean()
        if references is not None:
            out[f"eval/{name}_gap"] = 100 * (result.lengths / references - 1).mean()
    return out


def log_iteration(run: Run, args, data, episode: dict, stats: dict, lr: float, times: tuple) -> str:
    """Logs an iteration's charts (``lr``: its learning rate; ``times``: rollout and update seconds) and
    losses; returns its line."""
    sps = int((run.global_step - run.start_step) / (time.time() - run.start_time))
    run.log("charts/learning_rate", lr)
    for name, value in stats.items():
        run.log(f"losses/{name}", value)
    if args.baseline == "critic":
        live = data.batch["alive"].flatten()
        y_pred, y_true = data.batch["values"].flatten()[live], data.batch["returns"].flatten()[live]
        var_y = y_true.var()
        run.log("losses/explained_variance", np.nan if var_y == 0 else (1 - (y_true - y_pred).var() / var_y).item())
    run.log("charts/SPS", sps)
    run.log("charts/node_selections_per_second", sps * args.n_traj)
    run.log("charts/rollout_seconds", times[0])
    run.log("charts/update_seconds", times[1])
    line = (
        f"iteration={run.iteration} global_step={run.global_step} SPS={sps} node_selections/s={sps * args.n_traj} "
        f"rollout={times[0]:.2f}s update={times[1]:.2f}s"
    )
    if episode["done"]:
        tour_length = -episode["return"]
        line += f" tour_length={tour_length.mean():.4f} best_tour_length={tour_length.min(1).mean():.4f}"
    return line
