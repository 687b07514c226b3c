"""What ``ppo_or.py``'s loop calls around the algorithm: the memory a run needs and how many
instances an update decodes at once, the rollout data's layout for the update's minibatches,
--init-from's weights, the checkpoint's training state and its restore, the periodic evaluation and
the iteration's log line; the rollout's record, its minibatches, the multi-start first nodes, the
learning rate's warm-up and trust-region steering. The algorithm itself (rollout, advantages, PPO
loss and update) stays in the script.

Shapes: M instances, N trajectories, T stored steps, A actions.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
from ppoor.envs import ENV_IDS, ENV_VARIANTS, KOOL_SEEDS, standard_dataset
from ppoor.envs.distributions import draw, random_size
from ppoor.envs.vrp import instance_variants, variant_group
from ppoor.models import Agent, Cache, CheckpointError, latest_checkpoint, read_checkpoint
from ppoor.search import augment, decode
from ppoor.solvers.references import kool_references
from ppoor.training import ppo
from ppoor.training.parallel import all_sum, gather
from ppoor.training.runs import Run, available_memory, memory_problem


def initial_weights(source: str, problem: str, encoder: str = "am") -> dict:
    """The checkpoint --init-from names, read (weights only) and checked to be a model of ``problem``
    with ``encoder`` layers."""
    try:
        init = read_checkpoint(latest_checkpoint(source))
    except CheckpointError as exc:
        sys.exit(f"error: --init-from: {exc}")
    if init["problem"] != problem:
        sys.exit(f"error: --init-from {source} is a {init['problem'].upper()} model, not {problem.upper()}")
    if (kind := init.get("model_config", {}).get("encoder", "am")) != encoder:
        sys.exit(f"error: --init-from {source} has {kind} encoder layers, not {encoder}: give --encoder {kind}")
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


def rollout_memory(args, actions: int, steps: int) -> float:
    """Bytes a rollout of M instances x N trajectories over A = ``actions`` and T = ``steps`` needs,
    estimated: the encoder's cache [M, A, 6d] float32 (three times while --norm-groups gathers its groups'),
    the encoder's activations over the instances it encodes at once (all M, or a minibatch with
    --norm-groups: the 512-wide feed-forward, attention and its scores [rows, 8, A, A]), a decoding
    step's attention, logits and probabilities [M, N, 8, A], the stored steps [T, M, N, A + 32]
    (twice while they are stacked) and the env's arrays [M, N, A]. Calibrated against the peak
    resident memory of one iteration (``tests/test_ppo_or.py``): 1.3-3x what it takes."""
    m, n, d = args.num_envs, args.n_traj, 128
    cache = 4.0 * m * actions * 6 * d * (3 if args.norm_groups else 1)
    rows = min(m, args.minibatch_size) if args.norm_groups else m
    encode = 4.0 * rows * actions * (512 + 4 * d + 8 * actions)
    step = 4.0 * m * n * (10 * 8 * actions + 4 * d)
    stored = 2.0 * steps * m * n * (actions + 32)
    env = 24.0 * m * n * actions
    return cache + encode + step + stored + env


def training_memory(args, actions: int, steps: int, chunk: int) -> float:
    """Bytes a run needs, estimated: the rollout over T = ``steps`` (``rollout_memory``), which the
    update keeps, plus the update of ``chunk`` instances at once over those steps (``update_memory``)."""
    return rollout_memory(args, actions, steps) + update_memory(chunk, args.n_traj, actions, steps)


def check_processes(args, ckpt: dict | None, world_size: int) -> None:
    """Exits with one line when the run cannot run in ``world_size`` processes: a resumed one in other
    than as many as wrote it."""
    if ckpt and len(ckpt["rank_rng"]) != world_size:
        sys.exit(f"error: --resume: the checkpoint was written by {len(ckpt['rank_rng'])} processes, not {world_size}")


def run_memory(args, sizes, device: torch.device) -> tuple[float, int]:
    """The bytes the run needs (``training_memory``) and the instances its update decodes at once
    (``chunk_rows``). ``sizes``: the env's ``EnvSizes``."""
    steps = args.num_steps or sizes.max_episode_steps
    chunk = chunk_rows(args, sizes.actions, steps, device)
    return training_memory(args, sizes.actions, steps, chunk), chunk


def update_chunk(args, sizes, device: torch.device) -> int:
    """The instances the update decodes at once, after checking that the whole run fits in memory
    (``run_memory``); exits with one line that says what to lower otherwise."""
    needed, chunk = run_memory(args, sizes, device)
    if too_big := memory_problem(needed, device, "this run"):
        sys.exit(f"error: {too_big} (--num-envs {args.num_envs} x --n-traj {args.n_traj} at "
                 f"{args.max_nodes or args.num_nodes} nodes, updates of {chunk} instances at once: lower --num-envs or --update-chunk)")  # fmt: skip
    return chunk


def announce(run: Run, args, sizes, world_size: int, device: torch.device) -> None:
    """Prints the run's first lines: the problem, the rollout's shape, the budget, what is resumed."""
    if not run.is_main:
        return
    per_rollout = args.num_envs * world_size * sizes.max_episode_steps
    estimate = run.iteration + math.ceil(max(0, args.total_timesteps - run.global_step) / per_rollout)
    budget = f", at most {args.total_seconds:g} s" if args.total_seconds else ""
    print(
        f"ppo_or: {args.env_id} n={args.num_nodes}, preset {args.preset}, {args.num_envs} instances x "
        f"{args.n_traj} trajectories per rollout x {world_size} process(es), {device}, "
        f"{torch.get_num_threads()} threads\nrun {run.dir}: {args.total_timesteps:,} steps (up to {estimate:,} "
        f"iterations{budget}); checkpoints every {args.checkpoint_interval} iterations and "
        f"{args.checkpoint_seconds:g} s; evaluation every {args.eval_interval} iterations (0 = never)",
        flush=True,
    )
    if args.resume:
        print(f"resuming from {args.resume} at iteration {run.iteration}", flush=True)


def validation_set(args) -> tuple[dict, np.ndarray | None]:
    """The periodic evaluation's instances, of --eval-nodes nodes, and their reference lengths: the first
    --eval-instances of the validation set (seed 4321) with theirs (shipped, or solved once into
    runs/references; None where no solver is installed); for a run with another --distribution than
    uniform, --eval-instances drawn from that distribution (seed 4321), as it trains, without
    references (its curves are lengths)."""
    problem, size = ENV_IDS[args.env_id], eval_size(args)
    if args.distribution != "uniform":
        return draw(problem, np.random.default_rng(KOOL_SEEDS["val"]), args.eval_instances, size, args.distribution), None
    data = standard_dataset(problem, size, "val", args.eval_instances, ENV_VARIANTS.get(args.env_id))
    return data, kool_references(problem, size, "val", args.eval_instances, "runs/references")


def eval_size(args) -> int:
    """The size the run is validated at, and its model's default size for the standard sets: --eval-nodes,
    else --num-nodes."""
    return args.eval_nodes or args.num_nodes


def env_options(args) -> dict:
    """The arguments of ``gymnasium.make_vec`` for --env-id: M, the size, N, and --distribution where given."""
    chosen = {"distribution": args.distribution} if args.distribution != "uniform" else {}
    return {"num_envs": args.num_envs, "num_nodes": args.num_nodes, "n_traj": args.n_traj, **chosen}


def new_episodes(envs, args) -> dict:
    """Resets the vector env ``envs`` on fresh instances: M / --train-augment drawn ones in as many
    symmetric copies each (``search.augment``), with --max-nodes of a size drawn from --num-nodes..
    --max-nodes (by the env's generator); returns the first observation."""
    copies = args.train_augment
    if args.max_nodes:
        envs.unwrapped.resize(random_size(envs.unwrapped.rng, args.num_nodes, args.max_nodes))
    if copies == 1:
        return envs.reset()[0]
    drawn = envs.unwrapped.random_instances(envs.unwrapped.num_envs // copies)
    return envs.reset(options=augment(drawn, copies))[0]


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
        "num_nodes": eval_size(args),
        "model_config": agent.config,
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


def evaluate(agent: Agent, data: dict, references: np.ndarray | None) -> dict:
    """Mean greedy and multi-greedy tour lengths on ``data`` (the periodic evaluation), and their
    mean gaps in percent against ``references`` [B] where there are any; for a set that mixes the
    groups of VRP variants (``envs.vrp.GROUPS``), each group's multi-greedy mean too."""
    agent.eval()
    results = {"greedy": decode(agent, data, "greedy"), "multi_greedy": decode(agent, data, "multi-greedy")}
    agent.train()
    out = {}
    for name, result in results.items():
        out[f"eval/{name}_length"] = result.lengths.mean()
        if references is not None:
            out[f"eval/{name}_gap"] = 100 * (result.lengths / references - 1).mean()
    if "open_route" in data:  # the VRP variants: each group's curve where the set mixes groups
        groups = np.array([variant_group(name) for name in instance_variants(data)])
        present, lengths = np.unique(groups), results["multi_greedy"].lengths
        for group in present if len(present) > 1 else ():
            out[f"eval/{group}_multi_greedy_length"] = lengths[groups == group].mean()
            if references is not None:
                gaps = lengths[groups == group] / references[groups == group] - 1
                out[f"eval/{group}_multi_greedy_gap"] = 100 * gaps.mean()
    return out


def log_episodes(run: Run, episode: dict, statistics: dict) -> None:
    """Logs the charts of the episodes a rollout finished: ``episode``'s ``return`` and ``length`` [M, N]
    and the env's own ``statistics`` (e.g. VRP: early_return_fraction)."""
    tour_length = -episode["return"]
    run.log("charts/episodic_return", episode["return"].mean())
    run.log("charts/episodic_length", episode["length"].mean())
    run.log("charts/tour_length", tour_length.mean())
    run.log("charts/best_tour_length", tour_length.min(1).mean())
    for tag, value in statistics.items():
        run.log(f"charts/{tag}", value)


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


KL_SAMPLE = 32
"""Instances of a rollout on which the KL divergence an update reached is measured (--target-kl)."""


def shared_advantages(returns: torch.Tensor, copies: int) -> torch.Tensor:
    """POMO's shared baseline: returns [M, N] of whole episodes -> advantages [M, N], each
    trajectory's return minus the mean return of the N x K trajectories of its instance (the K
    symmetric copies of an instance lie at m, m + M / K, ..., as ``search.augment`` orders them)."""
    num_envs, n_traj = returns.shape
    grouped = returns.view(copies, num_envs // copies, n_traj)
    return (grouped - grouped.mean((0, 2), keepdim=True)).view(num_envs, n_traj)


def first_nodes(start_actions: torch.Tensor, num_envs: int, n_traj: int) -> torch.Tensor:
    """Distinct first actions [M, N] for a multi-start rollout from the S ``start_actions`` [S]:
    all of them in order when N = S, else a uniformly random subset per instance (every start is
    then trained equally often, and the sum over a subset, scaled by S / N, is an unbiased
    estimate of the sum over all starts)."""
    if n_traj == len(start_actions):
        return start_actions.expand(num_envs, -1)
    order = torch.rand(num_envs, len(start_actions), device=start_actions.device).argsort(-1)
    return start_actions[order[:, :n_traj]]


@dataclass
class Rollout:
    """One rollout of M instances x N trajectories over T stored steps (steps where every trajectory
    had one allowed action are not stored). ``static``: the encoder's inputs [M, ...]; ``steps``: the
    dynamic states [T, M, N, ...]; ``batch``: ``actions``, ``logprobs``, ``alive`` (the step counts in
    the loss) [T, M, N], with --multi-start ``weights``, with the critic ``values``, ``rewards``,
    ``dones`` [T, M, N] and ``next_value`` [M, N]; ``groups``: the update's minibatches of instance indices
    (--norm-groups: the rollout encoded each alone; else None, each epoch draws its own);
    ``env_steps``: steps the env took (stored or not)."""

    static: dict
    steps: dict
    batch: dict
    groups: list | None
    env_steps: int


def minibatches(num_envs: int, size: int, device: torch.device) -> list[torch.Tensor]:
    """A random partition of the ``num_envs`` instances into ceil(num_envs / size) minibatches of
    near-equal size (index tensors)."""
    size = math.ceil(num_envs / math.ceil(num_envs / size))
    return list(torch.randperm(num_envs).to(device).split(size))


def minibatch_totals(batch: dict, index: torch.Tensor, args) -> dict:
    """What the loss of a minibatch's chunks shares: the count of live steps of instances ``index``
    [B] (over every process) and, with --norm-adv, the mean and standard deviation of their
    advantages over those steps, so that chunks accumulate exactly the gradient of the whole
    minibatch. With the shared baseline the mean is 0: its advantages are centred per instance
    already, and their mean over steps is not 0 where trajectories differ in length (VRP's depot
    returns): subtracting it gave every step of a worse-than-average trajectory a share of a positive
    advantage, and fine-tuning drifted to ever more routes."""
    alive = batch["alive"][:, index].float()
    count = all_sum(alive.sum()).clamp(min=1)
    totals = {"count": count}
    if args.norm_adv:
        advantages = batch["advantages"][:, index]
        mean = all_sum((advantages * alive).sum()) / count if args.baseline == "critic" else count.new_zeros(())
        totals["mean"] = mean
        totals["std"] = (all_sum(((advantages - mean) ** 2 * alive).sum()) / count).sqrt()
    return totals


def warm_up(optimizer: torch.optim.Optimizer, rate: float, warmup: int) -> None:
    """Sets the learning rate of the optimizer's next step: ``rate`` x (steps taken + 1) / ``warmup``,
    at most ``rate`` (--warmup-steps; the steps are counted in Adam's state, so a resumed run goes on
    where it was)."""
    state = optimizer.state.get(optimizer.param_groups[0]["params"][0], {})
    taken = int(state["step"]) if "step" in state else 0
    optimizer.param_groups[0]["lr"] = rate * min(1.0, (taken + 1) / warmup) if warmup else rate


def sample_kl(agent: Agent, data: Rollout, num_envs: int, size: int) -> float:
    """approx-KL between the rollout's policy and the agent's on ``size`` of the rollout's ``num_envs``
    instances, encoded as the update encodes them (with --norm-groups: within their minibatch)."""
    if data.groups is None:
        index, cache = torch.randperm(num_envs)[:size].to(data.batch["actions"].device), None
    else:
        index = data.groups[0][:size]
        cache = agent.encode({key: value[data.groups[0]] for key, value in data.static.items()})
        cache = Cache(*(x[:size] for x in cache))
    actions, logprobs, alive = (per_instance(data.batch[key], index) for key in ("actions", "logprobs", "alive"))
    _, newlogprob, _, _ = agent.get_action_and_value(minibatch_state(data.static, data.steps, index), actions,
                                                     cache=cache)  # fmt: skip
    return ppo.approx_kl(newlogprob.float(), logprobs, alive)


def steer_learning_rate(scale: float, kl: float, target: float) -> float:
    """The trust region's step control (the adaptive schedule of rl_games): the factor on the learning
    rate after an update whose measured KL divergence was ``kl``: / 1.5 above 2 x ``target``, x 1.5
    (at most 1) below ``target`` / 2, unchanged between; never below 1e-3."""
    if kl > 2 * target:
        return max(scale / 1.5, 1e-3)
    if kl < target / 2:
        return min(scale * 1.5, 1.0)
    return scale
