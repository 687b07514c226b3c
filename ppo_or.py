"""PPO for routing problems with the Attention Model, in the style of CleanRL's ppo.py.

    python ppo_or.py --env-id tsp-v0                  # TSP50: multi-start rollouts, shared baseline
    python ppo_or.py --env-id tsp-v0 --preset rlor    # TSP50 with the paper's settings
    python ppo_or.py --env-id cvrp-v0 --num-nodes 20
    python ppo_or.py --env-id vrptw-v0 --num-nodes 20  # any of the 48 VRP variants; mtvrp-v0 / mtvrp48-v0 mix them
    python ppo_or.py --env-id op-v0 --num-nodes 20     # mrcvrp, pdp, cpdp, op, pctsp, pcvrp
    python ppo_or.py --resume runs/<run>/ckpt/100.pt  # continue a stopped run
    torchrun --standalone --nproc_per_node 4 ppo_or.py --env-id tsp-v0 --num-envs 256  # 4 GPUs / processes

Each rollout steps M instances x N trajectories of the bi-level vector env. The instances are
encoded once per rollout and every step decodes from that cache, all N trajectories of an instance
against its one encoding. The update splits the instances into minibatches of --minibatch-size,
re-encodes each with gradients and decodes all stored steps of its instances (in chunks when memory
asks for it). With --target-kl a trust region keeps each update near the rollout's policy: the
update stops early once a minibatch finds the policy 2 x target_kl away, and the KL an update
reached steers the learning rate. A global step is one step of one instance (all its N
trajectories); node selections count trajectory-steps.

Two presets: ``ppo-or`` (the default) starts the N trajectories of an instance from N distinct
first nodes and scores each trajectory against the mean of its instance's trajectories (POMO's
shared baseline inside PPO's clipped objective); ``rlor`` is the paper's algorithm (sampled first
node, critic and GAE).
"""

import contextlib
import math
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, replace
from typing import Literal

import gymnasium as gym
import numpy as np
import torch
import torch.distributed as dist
from ppoor.data.references import kool_references
from ppoor.envs import ENV_IDS, ENV_VARIANTS, EnvSizes, env_sizes, standard_dataset
from ppoor.envs.instances import KOOL_SET_SIZE
from ppoor.envs.vrp import TEST_SET_SIZE
from ppoor.models import (
    Agent,
    Cache,
    StateWrapper,
    compile_step,
    compiler_problem,
)
from ppoor.models.distributed_norm import fixed_statistics, recorded_statistics
from ppoor.search import allowed_starts, augment, forced_actions
from ppoor.training.parallel import (
    all_sum,
    average_gradients,
    finish_processes,
    report_parameter_agreement,
    start_processes,
)
from ppoor.training.routing import (
    chunk_rows,
    evaluate,
    initial_weights,
    log_iteration,
    minibatch_state,
    per_instance,
    restore,
    stack_states,
    training_memory,
    training_state,
)
from ppoor.training.runs import (
    MAX_SECONDS,
    MAX_THREADS,
    PPO_LIMITS,
    Run,
    check_numbers,
    exp_name_problem,
    fail,
    memory_problem,
    parse_with_presets,
    resume_settings,
    wandb_problem,
)
from ppoor.training.runtime import keep_freed_memory


@dataclass
class Args:
    """PPO for routing problems (TSP, CVRP, 16 VRP variants, MRCVRP, PDP, OP, PCTSP, PCVRP, MDVRP) with the
    Attention Model, in the style of CleanRL.
    Writes tensorboard curves and checkpoints to runs/{env_id}__{exp_name}__{seed}__{time}/. Examples:
    `python ppo_or.py --env-id tsp-v0 --num-nodes 20 --num-envs 256 --total-seconds 180 --threads 2`
    (3 minutes on a CPU); `python ppo_or.py --env-id cvrp-v0 --preset rlor` (the paper's settings, for a GPU);
    `python ppo_or.py --env-id vrptw-v0 --num-nodes 20` (time windows; mtvrp-v0 mixes the 16 classic VRP
    variants, mtvrp48-v0 all 48)."""

    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """the name of this experiment"""
    seed: int = 1
    """seed of the experiment (torch, numpy and the environment's generator; data-parallel process k uses seed + k)"""
    torch_deterministic: bool = True
    """if toggled, `torch.backends.cudnn.deterministic=True`"""
    cuda: bool = True
    """if toggled, cuda is used when available"""
    threads: int | None = None
    """torch CPU threads; None leaves torch's own choice"""
    track: bool = False
    """if toggled, the run is tracked with Weights and Biases"""
    wandb_project_name: str = "ppo-or"
    """the wandb project name"""
    wandb_entity: str | None = None
    """the entity (team) of the wandb project"""

    preset: Literal["ppo-or", "rlor"] = "ppo-or"
    """ppo-or: multi-start rollouts with the shared baseline (these defaults); rlor: the paper's settings
    (sampled first node, critic + GAE, 50 trajectories); arguments given with it override the preset's values"""
    env_id: Literal[tuple(ENV_IDS)] = "tsp-v0"  # the registered ids, listed by --help
    """the environment"""
    num_nodes: int = 50
    """nodes per instance (TSP) or customers per instance (CVRP and the VRP variants, the depot is extra)"""
    total_timesteps: int = 626_688_000
    """total instance-steps of the run (the default is 12,000 rollouts of TSP50 at 1024 x 51 steps)"""
    learning_rate: float = 3e-4
    """the learning rate of the optimizer (Adam, no weight decay)"""
    num_envs: int = 1024
    """M: problem instances per rollout"""
    n_traj: int | None = None
    """N: trajectories per instance, sampled in parallel from one encoding; None means one per start node with
    --multi-start, else 50"""
    multi_start: bool = True
    """start the N trajectories of an instance from N distinct first nodes (TSP: nodes, CVRP / VRP: customers), like
    POMO: all of them if N equals their number, else a uniformly random subset per instance"""
    train_start: bool = True
    """with --multi-start: train the first-node choice too (greedy decoding uses it), with the clipped
    objective's exact expectation over the enumerated starts; otherwise the forced first step is not in the loss"""
    baseline: Literal["critic", "shared"] = "shared"
    """the advantage: shared (a trajectory's return minus the mean return of its instance's N x K trajectories:
    the shared baseline of POMO, at every step; no critic) or critic (GAE on the learned value, as in the paper)"""
    train_augment: int = 8
    """K (1..8): each sampled instance is rolled out in K symmetric copies of the unit square whose trajectories
    share one baseline (Sym-NCO); --num-envs counts the copies, so M / K instances are drawn per rollout"""
    num_steps: int | None = None
    """steps per rollout; None means the longest possible episode, n + 1 for TSP and 2n for CVRP / VRP; a rollout
    also stops when every trajectory has finished, and an unfinished episode continues in the next rollout"""
    anneal_lr: bool = True
    """toggle learning rate annealing"""
    gamma: float = 0.99
    """the discount factor gamma"""
    gae_lambda: float = 0.95
    """the lambda for the general advantage estimation"""
    minibatch_size: int = 32
    """instances per PPO minibatch, counted as --num-envs counts them (symmetric copies included): each epoch
    splits the rollout's instances into ceil(M / size) minibatches of near-equal size, one optimizer step each,
    so the size of a step's batch does not change with --num-envs (at 50 nodes and above 128 ends the relapses that batch
    norm causes in small minibatches, at a cost in speed at 20: docs/training.md)"""
    update_chunk: int | None = None
    """instances decoded at once in the update (a minibatch is encoded at once and decoded in chunks, their
    gradients accumulated: memory only, the step is the same); None: the most that fit in 1 GiB on the CPU,
    in a third of the free memory on a GPU"""
    update_epochs: int = 2
    """the K epochs to update the policy (each stored step decoded K times with gradients)"""
    step_fraction: float = 1.0
    """the share of the T stored decoding steps each minibatch trains on, drawn anew for every minibatch
    (every step equally likely, so the loss stays an unbiased estimate of the mean over all steps): the
    update's cost scales with it (0.5 halves it)"""
    norm_adv: bool = True
    """toggles advantages normalization"""
    clip_coef: float = 0.2
    """the surrogate clipping coefficient"""
    clip_vloss: bool = True
    """toggles whether or not to use a clipped loss for the value function, as per the paper"""
    ent_coef: float = 0.0
    """coefficient of the entropy bonus (0 with the shared baseline, as in POMO; the rlor preset's critic uses 0.01)"""
    vf_coef: float = 0.5
    """coefficient of the value function"""
    max_grad_norm: float = 0.5
    """the maximum norm for the gradient clipping"""
    warmup_steps: int = 100
    """the first optimizer steps of the optimizer (a new run, or one started with --init-from) raise the learning
    rate linearly from 1 / warmup_steps of its value to all of it: Adam's first steps, its moments still
    empty, move every weight by the whole learning rate whatever its gradient, which undid a trained model
    (TSP100 from tsp50: the sampled tour 9.0 -> 18.9 after the first update at 3e-4; docs/training.md);
    0: none (the rlor preset, as the paper)"""
    target_kl: float | None = None
    """a trust region: the KL divergence of the updated policy from the rollout's that the update may reach.
    An update stops before a minibatch that finds the policy more than 2 x target_kl away, and after each
    update the KL measured on a sample of the rollout steers the learning rate: divided by 1.5 above
    2 x target_kl, multiplied by 1.5 (up to --learning-rate) below target_kl / 2. None: no trust region
    (the default: 0.02 learned more slowly at TSP20 and did not stop the TSP50 relapses, docs/training.md)"""
    replay_batch_norm: bool = False
    """the update's encoder normalises with the batch-norm statistics of the rollout (their gradient taken from
    the minibatch), so that each minibatch starts from the policy that sampled its actions; False: with the
    minibatch's own statistics (a different policy in small minibatches). Stable from scratch at TSP50, but it
    diverged when started from a trained model (docs/training.md)"""
    norm_groups: bool = True
    """the rollout encodes its instances in the update's minibatches (drawn before the rollout and kept for every
    epoch), so that batch norm sees the same instances in both and each minibatch's first step starts from the
    policy that sampled its actions (stable at TSP50 with 32-instance minibatches, and no loss at TSP20); False
    (the rlor preset, as the paper): the rollout encodes all M at once and each epoch draws new minibatches,
    whose statistics differ from the rollout's (docs/training.md)"""
    encoder_cache: bool = True
    """encode each instance once per rollout; False re-encodes at every step (a baseline for benchmarks)"""
    amp: bool = False
    """bf16 autocast of the model on a CUDA GPU (losses and advantages stay float32)"""
    compile: bool = False
    """torch.compile the decode step (inductor; needs a C++ compiler; the first iteration compiles it): the
    same weights and updates; on the CPU measured no faster (docs/training.md), for other machines to try"""

    total_seconds: float | None = None
    """stop after this much training wall time (summed over resumes), with a checkpoint; the learning rate then
    anneals over whichever of total_timesteps and total_seconds runs out first"""
    checkpoint_interval: int = 100
    """write a checkpoint every this many iterations (and at the end); 0 writes only the final one"""
    checkpoint_seconds: float = 600.0
    """also write a checkpoint each time the training wall time passes a multiple of this; 0 disables"""
    eval_interval: int = 100
    """evaluate greedy and multi-greedy decoding on the validation set every this many iterations; 0 disables"""
    eval_instances: int = 1000
    """instances of the validation set (seed 4321: Kool et al.'s 10,000 for TSP and CVRP, the env's 1,000
    otherwise) used by the periodic evaluation"""
    eval_batch_size: int = 250
    """instances decoded at once by the periodic evaluation"""
    resume: str | None = None
    """path of a checkpoint to continue; its run directory and settings are used"""
    init_from: str | None = None
    """start a new run from the weights of this checkpoint of the same problem (a ppo_or.py checkpoint, a run
    folder, a shipped model such as tsp20, or an RLOR state dict), e.g. to train TSP50 from a TSP20 model"""


PRESETS = {
    "ppo-or": Args(),
    "rlor": Args(
        preset="rlor",
        n_traj=50,
        multi_start=False,
        baseline="critic",
        train_augment=1,
        learning_rate=1e-3,
        minibatch_size=128,
        update_epochs=2,
        target_kl=None,
        ent_coef=0.01,
        norm_groups=False,
        warmup_steps=0,
    ),  # fmt: skip
}


def parse_args(argv: list[str] | None = None) -> tuple[Args, set[str]]:
    """tyro's command line over the defaults of the preset that ``--preset`` names, and the names of
    the fields given on it (what --resume compares with the checkpoint)."""
    return parse_with_presets(Args, PRESETS, "ppo-or", sys.argv[1:] if argv is None else argv)


def env_size(args: Args) -> EnvSizes:
    """The sizes of --env-id at --num-nodes, read off one instance of the registered env (its variant
    and depots included: ``envs.env_sizes``); a size below 2, which ``check_args`` refuses, is not
    probed. Exits with one line when the env cannot take the size (an odd pickup-and-delivery size)."""
    if args.num_nodes < 2:
        return EnvSizes(args.num_nodes, args.num_nodes + 1, args.num_nodes + 1)
    try:
        return env_sizes(args.env_id, args.num_nodes)
    except ValueError as exc:
        sys.exit(f"error: --env-id {args.env_id} --num-nodes {args.num_nodes}: {exc}")


def with_defaults(args: Args, starts: int) -> Args:
    """Fills the settings whose default depends on others: N is one trajectory per start node
    (``starts``, from ``env_size``) with --multi-start, else 50."""
    if args.n_traj is None:
        if not args.multi_start or args.num_nodes < 2:  # (a size below 2 is refused by check_args)
            return replace(args, n_traj=50)
        return replace(args, n_traj=starts)
    return args


LIMITS = {
    **PPO_LIMITS,
    "threads": (1, MAX_THREADS),
    "num_nodes": (2, 100_000),
    "minibatch_size": (1, math.inf),
    "update_chunk": (1, math.inf),
    "num_envs": (1, math.inf),
    "n_traj": (1, math.inf),
    "train_augment": (1, 8),
    "step_fraction": (1e-6, 1.0),
    "num_steps": (1, math.inf),
    "total_seconds": (1e-3, MAX_SECONDS),
    "checkpoint_seconds": (0.0, MAX_SECONDS),
    "eval_instances": (1, math.inf),
    "eval_batch_size": (1, math.inf),
    "warmup_steps": (0, math.inf),
}
"""The closed range of every numeric argument (``training.runs.check_numbers``)."""


def check_args(args: Args, starts: int) -> None:
    """Rejects impossible settings before anything starts; the message names the argument.
    ``starts``: the env's distinct first actions (``env_size``)."""
    problems = check_numbers(args, LIMITS)
    if problem := exp_name_problem(args.exp_name):
        problems.append(problem)
    fail(problems)  # the checks below assume numbers in range
    if args.multi_start and args.n_traj > starts:
        problems.append(
            f"--n-traj {args.n_traj} exceeds the {starts} start nodes of --multi-start "
            f"(use --n-traj <= {starts} or --no-multi-start)"
        )
    if args.num_envs % args.train_augment:
        problems.append(
            f"--train-augment {args.train_augment} does not divide --num-envs {args.num_envs} (it counts the copies)"
        )
    if args.compile and (problem := compiler_problem()):
        problems.append(f"--compile: {problem}")
    if args.norm_groups and args.replay_batch_norm:
        problems.append("--norm-groups and --replay-batch-norm are two cures of the same mismatch: choose one")
    if args.baseline == "shared" and args.n_traj * args.train_augment < 2:
        problems.append("--baseline shared needs at least 2 trajectories per instance (--n-traj x --train-augment)")
    val_size = KOOL_SET_SIZE if ENV_IDS[args.env_id] in ("tsp", "cvrp") else TEST_SET_SIZE
    if args.eval_instances > val_size:
        problems.append(f"--eval-instances must be in 1..{val_size} (the validation set), got {args.eval_instances}")
    fail(problems)


KL_SAMPLE = 32
"""Instances of a rollout on which the KL divergence an update reached is measured (--target-kl)."""

RESUME_OVERRIDES = (
    "total_timesteps",
    "update_chunk",
    "total_seconds",
    "checkpoint_interval",
    "checkpoint_seconds",
    "eval_interval",
    "eval_instances",
    "eval_batch_size",
    "threads",
    "cuda",
    "track",
    "wandb_project_name",
    "wandb_entity",
    "amp",
    "compile",
)


def compute_gae(
    rewards: torch.Tensor, values: torch.Tensor, dones: torch.Tensor, next_value: torch.Tensor, gamma: float, lam: float
) -> torch.Tensor:
    """Generalized advantage estimation over a rollout: rewards, values, dones [T, M, N] (dones[t]:
    the trajectory terminated at step t), next_value [M, N] (the critic after the last step).
    Unfinished episodes are bootstrapped with next_value, not treated as terminal."""
    advantages = torch.zeros_like(rewards)
    lastgaelam = torch.zeros_like(next_value)
    for t in reversed(range(len(rewards))):
        nextvalues = next_value if t == len(rewards) - 1 else values[t + 1]
        nextnonterminal = (~dones[t]).float()
        delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
        lastgaelam = delta + gamma * lam * nextnonterminal * lastgaelam
        advantages[t] = lastgaelam
    return advantages


def first_nodes(start_actions: torch.Tensor, num_envs: int, n_traj: int) -> torch.Tensor:
    """Distinct first actions [M, N] for a multi-start rollout from the S ``start_actions`` [S]:
    all of them in order when N = S, else a uniformly random subset per instance (every start is
    then trained equally often, and the sum over a subset, scaled by S / N, is an unbiased
    estimate of the sum over all starts)."""
    if n_traj == len(start_actions):
        return start_actions.expand(num_envs, -1)
    order = torch.rand(num_envs, len(start_actions), device=start_actions.device).argsort(-1)
    return start_actions[order[:, :n_traj]]


def shared_advantages(returns: torch.Tensor, copies: int) -> torch.Tensor:
    """POMO's shared baseline: returns [M, N] of whole episodes -> advantages [M, N], each
    trajectory's return minus the mean return of the N x K trajectories of its instance (the K
    symmetric copies of an instance lie at m, m + M / K, ..., as ``search.augment`` orders them)."""
    num_envs, n_traj = returns.shape
    grouped = returns.view(copies, num_envs // copies, n_traj)
    return (grouped - grouped.mean((0, 2), keepdim=True)).view(num_envs, n_traj)


@dataclass
class Rollout:
    """One rollout of M instances x N trajectories over T stored steps (steps where every trajectory
    had one allowed action are not stored). ``static``: the encoder's inputs [M, ...]; ``steps``: the
    dynamic states [T, M, N, ...]; ``batch``: ``actions``, ``logprobs``, ``alive`` (the step counts in
    the loss) [T, M, N], with --multi-start ``weights``, with the critic ``values``, ``rewards``,
    ``dones`` [T, M, N] and ``next_value`` [M, N]; ``norms``: the batch-norm statistics the rollout's
    encoding used (--replay-batch-norm); ``groups``: the update's minibatches of instance indices
    (--norm-groups: the rollout encoded each alone; else None, each epoch draws its own);
    ``env_steps``: steps the env took (stored or not)."""

    static: dict
    steps: dict
    batch: dict
    norms: list
    groups: list | None
    env_steps: int


def minibatches(num_envs: int, size: int, device: torch.device) -> list[torch.Tensor]:
    """A random partition of the ``num_envs`` instances into ceil(num_envs / size) minibatches of
    near-equal size (index tensors)."""
    size = math.ceil(num_envs / math.ceil(num_envs / size))
    return list(torch.randperm(num_envs).to(device).split(size))


def minibatch_totals(batch: dict, index: torch.Tensor, args: Args) -> dict:
    """What the loss of a minibatch's chunks shares: the count of live steps of instances ``index``
    [B] (over every process) and, with --norm-adv, the mean and standard deviation of their
    advantages, so that chunks accumulate exactly the gradient of the whole minibatch."""
    alive = batch["alive"][:, index].float()
    count = all_sum(alive.sum()).clamp(min=1)
    totals = {"count": count}
    if args.norm_adv:
        advantages = batch["advantages"][:, index]
        mean = all_sum((advantages * alive).sum()) / count
        totals["mean"] = mean
        totals["std"] = (all_sum(((advantages - mean) ** 2 * alive).sum()) / count).sqrt()
    return totals


def ppo_loss(
    agent: Agent, static: dict, steps: dict, batch: dict, index: torch.Tensor, args: Args, totals: dict | None = None,
    cache: Cache | None = None,
) -> tuple[torch.Tensor, dict]:  # fmt: skip
    """The clipped PPO loss of instances ``index`` [B] over their stored steps, and its statistics.

    ``batch`` holds rollout tensors [T, M, N]: actions, logprobs, advantages, alive (the steps in the
    loss), with the critic values and returns, and with --multi-start weights (each live step's weight
    in the policy loss: 1, and for a forced first step S x its old probability, S the number of start
    nodes, which turns the sum over the enumerated starts into the expectation over the first-node
    policy). Means run over the live steps of every process: counts and advantage statistics are
    summed across processes, and each process's loss is scaled so that the averaged gradient equals
    that of one process holding all the instances. ``totals``: the ``minibatch_totals`` of the
    minibatch that ``index`` is a chunk of (None: ``index`` is the whole minibatch); the losses of a
    minibatch's chunks then sum to the minibatch's loss, and their statistics are weighted by their
    share of its live steps. ``cache``: the encoding of instances ``index`` (the chunk's rows of the
    minibatch's encoding, so that batch norm sees the whole minibatch); None encodes them here.
    """
    totals = totals or minibatch_totals(batch, index, args)
    mb = {key: per_instance(value, index) for key, value in batch.items()}
    critic = args.baseline == "critic"
    _, newlogprob, entropy, newvalue = agent.get_action_and_value(
        minibatch_state(static, steps, index),
        mb["actions"],
        cache=cache,
        with_value=critic,
        entropy_grad=args.ent_coef != 0,
    )
    newlogprob, entropy = newlogprob.float(), entropy.float()
    alive = mb["alive"].float()
    count = totals["count"]
    world = dist.get_world_size() if dist.is_initialized() else 1

    def loss_mean(x: torch.Tensor) -> torch.Tensor:
        return (x * alive).sum() * world / count

    def global_mean(x: torch.Tensor) -> float:
        return (all_sum((x.detach() * alive).sum()) / count).item()

    logratio = newlogprob - mb["logprobs"]
    ratio = logratio.exp()
    advantages = mb["advantages"]
    if args.norm_adv:
        advantages = (advantages - totals["mean"]) / (totals["std"] + 1e-8)

    # policy loss
    pg_loss1 = -advantages * ratio
    pg_loss2 = -advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
    pg_loss = torch.max(pg_loss1, pg_loss2)
    pg_loss = loss_mean(pg_loss * mb["weights"] if "weights" in mb else pg_loss)
    entropy_loss = loss_mean(entropy)
    loss = pg_loss - args.ent_coef * entropy_loss
    stats = {"policy_loss": pg_loss.item() / world, "entropy": entropy_loss.item() / world}

    # value loss
    if critic:
        newvalue = newvalue.float()
        if args.clip_vloss:
            v_loss_unclipped = (newvalue - mb["returns"]) ** 2
            v_clipped = mb["values"] + torch.clamp(newvalue - mb["values"], -args.clip_coef, args.clip_coef)
            v_loss_clipped = (v_clipped - mb["returns"]) ** 2
            v_loss = 0.5 * loss_mean(torch.max(v_loss_unclipped, v_loss_clipped))
        else:
            v_loss = 0.5 * loss_mean((newvalue - mb["returns"]) ** 2)
        loss = loss + v_loss * args.vf_coef
        stats["value_loss"] = v_loss.item() / world

    stats.update(
        {
            # calculate approx_kl http://joschu.net/blog/kl-approx.html
            "old_approx_kl": global_mean(-logratio),
            "approx_kl": global_mean((ratio - 1) - logratio),
            "clipfrac": global_mean(((ratio - 1.0).abs() > args.clip_coef).float()),
        }
    )
    return loss, stats


def ppo_update(
    agent: Agent, optimizer: torch.optim.Optimizer, data: Rollout, args: Args, chunk: int, autocast,
) -> dict:  # fmt: skip
    """--update-epochs passes over the rollout's M instances in minibatches of about --minibatch-size
    (each epoch draws its own, or with --norm-groups the rollout's ``groups``, in the same order),
    one optimizer step each, on a random --step-fraction of the stored steps. A minibatch is encoded at
    once (batch norm over all its instances) and decoded in chunks of at most ``chunk`` instances; each chunk's backward pass stops at the encoding
    (freeing its decoding), and the encoder's backward pass runs once on the gradients they gathered:
    the accumulated gradient is the minibatch's.
    With --target-kl the update stops before a minibatch on which the policy has already moved more
    than 2 x target_kl from the rollout's (never before the first step). Returns the statistics of
    the last minibatch stepped (``ppo_loss``), the mean clip fraction and the number of optimizer
    steps taken."""
    static, steps, batch, groups = data.static, data.steps, data.batch, data.groups
    num_envs = batch["actions"].shape[1]
    rate = optimizer.param_groups[0]["lr"]  # the iteration's learning rate (annealed), before any warm-up
    clipfracs, taken, last = [], 0, {}
    stored = batch["actions"].shape[0]
    sampled = max(1, math.ceil(args.step_fraction * stored))
    full_steps, full_batch = steps, batch
    for _epoch in range(args.update_epochs):
        for mb_inds in groups or minibatches(num_envs, args.minibatch_size, batch["actions"].device):
            if sampled < stored:  # --step-fraction: this minibatch's share of the stored steps
                at = torch.randperm(stored)[:sampled].sort().values.to(mb_inds.device)
                steps = {key: value.index_select(0, at) for key, value in full_steps.items()}
                batch = {key: value.index_select(0, at) for key, value in full_batch.items()}
            totals = minibatch_totals(batch, mb_inds, args)
            optimizer.zero_grad()
            with autocast:
                cache = agent.encode({key: value[mb_inds] for key, value in static.items()})
            held = Cache(*(x.detach().requires_grad_() for x in cache))  # the chunks' gradients gather here
            stats = {}
            for part in torch.arange(len(mb_inds)).to(mb_inds.device).tensor_split(math.ceil(len(mb_inds) / chunk)):
                with autocast:
                    rows = Cache(*(x[part] for x in held))
                    loss, part_stats = ppo_loss(agent, static, steps, batch, mb_inds[part], args, totals, rows)
                loss.backward()
                stats = {key: stats.get(key, 0.0) + value for key, value in part_stats.items()}
            reached = [(x, h.grad) for x, h in zip(cache, held, strict=True) if h.grad is not None]
            torch.autograd.backward([x for x, _ in reached], [g for _, g in reached])  # the encoder, once
            if args.target_kl is not None and taken and stats["approx_kl"] > 2 * args.target_kl:
                return {**last, "clipfrac": float(np.mean(clipfracs)), "optimizer_steps": taken}
            average_gradients(agent)
            torch.nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
            warm_up(optimizer, rate, args.warmup_steps)
            optimizer.step()
            clipfracs.append(stats["clipfrac"])
            taken, last = taken + 1, stats
    return {**last, "clipfrac": float(np.mean(clipfracs)), "optimizer_steps": taken}


def warm_up(optimizer: torch.optim.Optimizer, rate: float, warmup: int) -> None:
    """Sets the learning rate of the optimizer's next step: ``rate`` x (steps taken + 1) / ``warmup``,
    at most ``rate`` (--warmup-steps; the steps are counted in Adam's state, so a resumed run goes on
    where it was)."""
    state = optimizer.state.get(optimizer.param_groups[0]["params"][0], {})
    taken = int(state["step"]) if "step" in state else 0
    optimizer.param_groups[0]["lr"] = rate * min(1.0, (taken + 1) / warmup) if warmup else rate


def sample_kl(agent: Agent, data: Rollout, args: Args, size: int) -> float:
    """approx-KL between the rollout's policy and the agent's on ``size`` of the rollout's instances,
    encoded as the update encodes them (with --norm-groups: within their minibatch)."""
    if data.groups is None:
        sample = torch.randperm(args.num_envs)[:size].to(data.batch["actions"].device)
        return ppo_loss(agent, data.static, data.steps, data.batch, sample, args)[1]["approx_kl"]
    group = data.groups[0]
    cache = agent.encode({key: value[group] for key, value in data.static.items()})
    rows = Cache(*(x[:size] for x in cache))
    return ppo_loss(agent, data.static, data.steps, data.batch, group[:size], args, cache=rows)[1]["approx_kl"]


def steer_learning_rate(scale: float, kl: float, target: float) -> float:
    """The trust region's step control (the adaptive schedule of rl_games): the factor on the learning
    rate after an update whose measured KL divergence was ``kl``: / 1.5 above 2 x ``target``, x 1.5
    (at most 1) below ``target`` / 2, unchanged between; never below 1e-3."""
    if kl > 2 * target:
        return max(scale / 1.5, 1e-3)
    if kl < target / 2:
        return min(scale * 1.5, 1.0)
    return scale


def resolve_args(args: Args, given: set[str] | None = None) -> tuple[Args, dict | None, EnvSizes, dict | None]:
    """The settings ``main`` can trust: a resumed run's own (``given``: the fields given on the command
    line), defaults that depend on the env filled in, every range and combination checked. Returns
    (settings, the checkpoint resumed from or None, the env's sizes, --init-from's weights or None);
    exits with one line naming the argument otherwise."""
    ckpt = None
    if args.resume:
        # checkpoints written before the presets existed were trained with the rlor settings
        args, ckpt = resume_settings(args, given or set(), RESUME_OVERRIDES, asdict(PRESETS["rlor"]), "ppo_or.py")
        if ckpt["problem"] == "rail":
            sys.exit(f"error: --resume: {args.resume} is a ppo_flatland.py checkpoint; resume it with ppo_flatland.py")
        if "minibatch_size" not in ckpt["args"]:  # written when minibatches were counted: the same split
            args = replace(args, minibatch_size=args.num_envs // ckpt["args"].get("num_minibatches", 8))
    sizes = env_size(args)
    args = with_defaults(args, sizes.starts)
    check_args(args, sizes.starts)
    problems = []
    if args.track and (problem := wandb_problem()):
        problems.append(f"--track: {problem}")
    if args.amp and not (torch.cuda.is_available() and args.cuda):
        problems.append("--amp (bf16 autocast) needs a CUDA device; drop --amp or use --cuda on a GPU machine")
    if args.baseline == "shared" and args.num_steps and args.num_steps < sizes.max_episode_steps:
        problems.append(
            f"--baseline shared needs whole episodes in a rollout: --num-steps {args.num_steps} is below the "
            f"{sizes.max_episode_steps} steps an episode may take (drop --num-steps or use --baseline critic)"
        )
    fail(problems)
    init = initial_weights(args.init_from, ENV_IDS[args.env_id]) if args.init_from and not ckpt else None
    return args, ckpt, sizes, init


def rollout(
    agent: Agent,
    envs,
    wrapper: StateWrapper,
    obs: dict,
    episode: dict,
    start_actions: torch.Tensor,
    args: Args,
    autocast,
) -> tuple[Rollout, dict]:
    """Steps the envs from ``obs`` for --num-steps steps or to the end of their episodes, encoding
    each instance once and decoding every step from that cache; adds the rewards to ``episode``'s
    ``return`` and ``length`` [M, N]. Returns the rollout and the next observation."""
    critic = args.baseline == "critic"
    env = envs.unwrapped
    static = wrapper.static(obs)
    states, actions, logprobs, values, rewards, dones, alive, weights = ([] for _ in range(8))
    env_steps = 0
    replay = recorded_statistics(agent) if args.replay_batch_norm else contextlib.nullcontext([])
    groups = minibatches(args.num_envs, args.minibatch_size, start_actions.device) if args.norm_groups else None
    with torch.no_grad(), autocast, replay as norms:  # with --replay-batch-norm the update normalises alike
        cache = agent.encode(static, groups) if args.encoder_cache else None
        for _ in range(args.num_steps or env.max_episode_steps):
            running = ~env.terminated
            if not running.any():
                break
            env_steps += 1
            no_choice = None if critic else forced_actions(obs["action_mask"])
            if no_choice is not None:  # nothing to learn (TSP's last two steps): only its reward counts
                obs, reward, _, _, _ = envs.step(no_choice)
                episode["return"] += reward
                episode["length"] += running
                continue
            state = wrapper.state(static, obs)
            forced = args.multi_start and env.steps == 0
            first = first_nodes(start_actions, args.num_envs, args.n_traj) if forced else None
            action, logprob, _, value = agent.get_action_and_value(
                state,
                allowed_starts(first, state["action_mask"]) if forced else None,
                cache=cache if args.encoder_cache else agent.encode(static, groups),  # the baseline re-encodes
                with_value=critic,
            )
            obs, reward, terminations, _, _ = envs.step(wrapper.numpy(action))
            episode["return"] += reward
            episode["length"] += running
            states.append({k: v for k, v in state.items() if k not in static})
            actions.append(action)
            logprobs.append(logprob.float())
            if critic:
                values.append(value.float())
                rewards.append(wrapper.tensor(reward))
                dones.append(wrapper.tensor(terminations))
            live = wrapper.tensor(running)
            alive.append(live & args.train_start if forced else live)
            if args.multi_start:
                weights.append(len(start_actions) * logprob.float().exp() if forced else torch.ones_like(logprob))
        batch = {"actions": torch.stack(actions), "logprobs": torch.stack(logprobs), "alive": torch.stack(alive)}
        if args.multi_start:
            batch["weights"] = torch.stack(weights) * batch["alive"]
        if critic:
            batch.update(values=torch.stack(values), rewards=torch.stack(rewards), dones=torch.stack(dones))
            batch["next_value"] = agent.get_value(wrapper.state(static, obs), cache=cache).float()
    return Rollout(static, stack_states(states), batch, norms, groups, env_steps), obs


def add_advantages(batch: dict, episode_return: np.ndarray, args: Args) -> None:
    """The advantages [T, M, N] of the rollout's ``batch``: GAE over the critic's values (and the
    returns it learns), or with the shared baseline each trajectory's return ``episode_return``
    [M, N] (the rollout holds whole episodes) against the mean of its instance's trajectories."""
    if args.baseline == "critic":
        values, next_value = batch["values"], batch.pop("next_value")
        advantages = compute_gae(
            batch.pop("rewards"), values, batch.pop("dones"), next_value, args.gamma, args.gae_lambda
        )
        batch["advantages"], batch["returns"] = advantages, advantages + values
    else:
        returns = torch.as_tensor(episode_return, dtype=torch.float32, device=batch["actions"].device)
        batch["advantages"] = shared_advantages(returns, args.train_augment).expand(len(batch["actions"]), -1, -1)


def main(args: Args, given: set[str] | None = None) -> None:
    """Trains; ``given``: the fields given on the command line (see ``parse_args``)."""
    args, ckpt, sizes, init = resolve_args(args, given)
    problem = ENV_IDS[args.env_id]
    # data-parallel setup: torchrun sets WORLD_SIZE, RANK and LOCAL_RANK; a plain run is rank 0 of 1
    world_size, rank, device = start_processes(torch.cuda.is_available() and args.cuda)
    if ckpt and len(ckpt["rank_rng"]) != world_size:
        sys.exit(f"error: --resume: the checkpoint was written by {len(ckpt['rank_rng'])} processes, not {world_size}")
    if world_size > 1 and not args.encoder_cache:
        sys.exit("error: --no-encoder-cache is a single-process benchmark baseline; it cannot run data-parallel")
    chunk = chunk_rows(args, sizes.actions, args.num_steps or sizes.max_episode_steps, device)
    needed = training_memory(args, sizes.actions, args.num_steps or sizes.max_episode_steps, chunk)
    if too_big := memory_problem(needed, device, "this run"):
        sys.exit(f"error: {too_big} (--num-envs {args.num_envs} x --n-traj {args.n_traj} at --num-nodes "
                 f"{args.num_nodes}, updates of {chunk} instances at once: lower --num-envs or --update-chunk)")  # fmt: skip

    # seeding: the same initial weights everywhere, then a stream of its own per process
    random.seed(args.seed + rank)
    np.random.seed(args.seed + rank)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    if args.threads:
        torch.set_num_threads(args.threads)
    keep_freed_memory()  # glibc reuses freed host memory instead of page-faulting fresh pages

    # env setup: each process steps num_envs instances of its own
    envs = gym.make_vec(
        args.env_id,
        num_envs=args.num_envs,
        vectorization_mode="vector_entry_point",
        num_nodes=args.num_nodes,
        n_traj=args.n_traj,
    )
    wrapper = StateWrapper(problem, device)
    val_data, val_references = None, None
    if args.eval_interval and rank == 0:
        val_data = standard_dataset(problem, args.num_nodes, "val", args.eval_instances, ENV_VARIANTS.get(args.env_id))
        val_references = kool_references(problem, args.num_nodes, "val", args.eval_instances, "runs/references")
    start_actions = torch.as_tensor(envs.unwrapped.start_actions, device=device)

    def new_episodes() -> dict:
        """Resets the envs on fresh instances: M / K drawn ones in K symmetric copies each."""
        if args.train_augment == 1:
            return envs.reset()[0]
        drawn = envs.unwrapped.random_instances(args.num_envs // args.train_augment)
        return envs.reset(options=augment(drawn, args.train_augment))[0]

    agent = Agent(problem).to(device)
    if init:
        agent.load_state_dict(init["model"])
    if args.compile:
        compile_step(agent)
    torch.manual_seed(args.seed + rank)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    next_obs, _ = envs.reset(seed=args.seed + rank)  # seeds the env's generator
    if args.train_augment > 1:
        next_obs = new_episodes()
    if ckpt:
        restore(ckpt, agent, optimizer, envs, rank, device)
        next_obs = new_episodes()  # the episode in progress at the checkpoint starts afresh
    run = Run(args, f"{args.env_id}__{args.exp_name}__{args.seed}", ckpt, rank, world_size, device)
    if run.is_main:
        estimate = run.iteration + math.ceil(
            max(0, args.total_timesteps - run.global_step) / (args.num_envs * world_size * sizes.max_episode_steps)
        )
        budget = f", at most {args.total_seconds:g} s" if args.total_seconds else ""
        print(
            f"ppo_or: {args.env_id} n={args.num_nodes}, preset {args.preset}, {args.num_envs} instances x "
            f"{args.n_traj} trajectories per rollout x {world_size} process(es), {device}, "
            f"{torch.get_num_threads()} threads\nrun {run.dir}: {args.total_timesteps:,} steps (up to {estimate:,} "
            f"iterations{budget}); checkpoints every {args.checkpoint_interval} iterations and "
            f"{args.checkpoint_seconds:g} s; evaluation every {args.eval_interval} iterations (0 = never)",
            flush=True,
        )
        if ckpt:
            print(f"resuming from {args.resume} at iteration {run.iteration}", flush=True)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.amp)
    episode = {"return": np.zeros((args.num_envs, args.n_traj)), "length": np.zeros((args.num_envs, args.n_traj), int)}

    while run.going():
        run.iteration += 1
        optimizer.param_groups[0]["lr"] = run.learning_rate()

        # rollout: encode each instance once, decode every step from the cache
        rollout_start = time.time()
        if envs.unwrapped.terminated.all():
            next_obs = new_episodes()
            episode["return"][:], episode["length"][:] = 0, 0
        data, next_obs = rollout(agent, envs, wrapper, next_obs, episode, start_actions, args, autocast)
        # instance-steps of every process (CVRP rollouts end at different steps on each)
        run.global_step += int(all_sum(torch.tensor(data.env_steps * args.num_envs, device=device)).item())
        episode["done"] = envs.unwrapped.terminated.all()
        if episode["done"]:
            tour_length = -episode["return"]
            run.log("charts/episodic_return", episode["return"].mean())
            run.log("charts/episodic_length", episode["length"].mean())
            run.log("charts/tour_length", tour_length.mean())
            run.log("charts/best_tour_length", tour_length.min(1).mean())
            for tag, value in envs.unwrapped.episode_statistics().items():  # e.g. VRP: early_return_fraction
                run.log(f"charts/{tag}", value)
        add_advantages(data.batch, episode["return"], args)
        rollout_time = time.time() - rollout_start

        # optimizing the policy and value network over minibatches of instances
        update_start = time.time()
        with fixed_statistics(agent, data.norms):  # empty without --replay-batch-norm: the minibatch's own statistics
            stats = ppo_update(agent, optimizer, data, args, chunk, autocast)
            if args.target_kl is not None:  # the KL the update reached, on a sample of the rollout
                with torch.no_grad(), autocast:
                    stats["update_kl"] = sample_kl(agent, data, args, min(chunk, KL_SAMPLE))
                run.lr_scale = steer_learning_rate(run.lr_scale, stats["update_kl"], args.target_kl)
        update_time = time.time() - update_start
        run.tick()

        lr = optimizer.param_groups[0]["lr"]
        line = log_iteration(run, args, data, episode, stats, lr, (rollout_time, update_time))
        if run.is_main and args.eval_interval and run.iteration % args.eval_interval == 0:
            for tag, value in evaluate(agent, val_data, args.eval_batch_size, val_references).items():
                run.log(tag, value)
                line += f" {tag}={value:.4f}"
        if run.is_main:
            print(line + run.progress(), flush=True)
        if run.checkpoint_due():
            run.save(training_state(run, agent, optimizer, envs, args))

    if run.stop.requested:
        run.stopped(run.save(training_state(run, agent, optimizer, envs, args)))
    if run.is_main and args.eval_interval:
        results = evaluate(agent, val_data, args.eval_batch_size, val_references)
        for tag, value in results.items():
            run.log(tag, value)
        print("final evaluation: " + " ".join(f"{tag}={value:.4f}" for tag, value in results.items()), flush=True)
    path = run.save(training_state(run, agent, optimizer, envs, args))
    if world_size > 1:
        report_parameter_agreement(agent, run.is_main)
    if run.is_main:
        print(f"final checkpoint: {path}", flush=True)
    run.close()
    envs.close()
    finish_processes(world_size)


def cli() -> None:
    """The ``ppo-or`` console command."""
    main(*parse_args())


if __name__ == "__main__":
    cli()
