"""``ppo_or.py``'s options around its ``Args``: the presets, the range of every number, the
combinations refused, the fields a resumed run may change, and the settings ``main`` can trust
(``resolve_args``). ``args`` is a ``ppo_or.Args``; its class is taken from the instance, so this
module never imports the script."""

from __future__ import annotations

import math
import sys
from dataclasses import replace

import torch
from ppoor.envs import ENV_IDS, ENV_VARIANTS, EnvSizes, env_sizes
from ppoor.envs.distributions import env_distributions
from ppoor.envs.instances import KOOL_SET_SIZE
from ppoor.envs.vrp import TEST_SET_SIZE
from ppoor.models import compiler_problem
from ppoor.training.routing import initial_weights
from ppoor.training.runs import (
    MAX_SECONDS,
    MAX_THREADS,
    PPO_LIMITS,
    check_numbers,
    exp_name_problem,
    fail,
    flag,
    parse_with_presets,
    resume_settings,
    wandb_problem,
)

RLOR = dict(
    preset="rlor", n_traj=50, multi_start=False, baseline="critic", train_augment=1, learning_rate=1e-3,
    minibatch_size=128, update_epochs=2, target_kl=None, ent_coef=0.01, norm_groups=False, warmup_steps=0,
    distance_prior=0.0,
)  # fmt: skip
"""The ``rlor`` preset: the paper's settings (sampled first node, critic and GAE, 50 trajectories)."""

VARIANTS_PRESET = dict(preset="variants", encoder="transformer", num_envs=64, minibatch_size=64, train_augment=1)
"""The ``variants`` preset: the VRP variants on a CPU (RouteFinder's transformer encoder, 64 distinct
instances per rollout, so that each rollout mixes many variants, in one minibatch per epoch, which keeps
a small rollout from relapsing)."""

LIMITS = {
    **PPO_LIMITS,
    "threads": (1, MAX_THREADS),
    "num_nodes": (2, 100_000),
    "max_nodes": (2, 100_000),
    "eval_nodes": (2, 100_000),
    "distance_prior": (0.0, 100.0),
    "minibatch_size": (1, math.inf),
    "update_chunk": (1, math.inf),
    "num_envs": (1, math.inf),
    "n_traj": (1, math.inf),
    "train_augment": (1, 8),
    "num_steps": (1, math.inf),
    "total_seconds": (1e-3, MAX_SECONDS),
    "checkpoint_seconds": (0.0, MAX_SECONDS),
    "eval_instances": (1, math.inf),
    "warmup_steps": (0, math.inf),
}
"""The closed range of every numeric argument (``training.runs.check_numbers``)."""

RESUME_OVERRIDES = (
    "total_timesteps", "update_chunk", "total_seconds", "checkpoint_interval", "checkpoint_seconds",
    "eval_interval", "eval_instances", "eval_nodes", "threads", "cuda", "track", "wandb_project_name",
    "wandb_entity", "amp", "compile",
)  # fmt: skip
"""The fields a resumed run may change; any other field given with --resume must equal the checkpoint's."""


CRITIC_ONLY = ("gamma", "gae_lambda", "clip_vloss", "vf_coef", "num_steps")
"""The fields only the critic baseline reads (GAE, the value loss, rollouts shorter than an episode)."""

PRESETS = {"ppo-or": {}, "rlor": RLOR, "variants": VARIANTS_PRESET}
"""Each preset's name and the fields it sets over the ``Args`` defaults (``ppo-or`` sets none); ``--preset``
chooses among these names."""


def presets(cls) -> dict:
    """The presets as instances of the ``Args`` class ``cls``."""
    return {name: cls(**fields) for name, fields in PRESETS.items()}


def parse_args(cls, argv: list[str]) -> tuple:
    """tyro's command line over the defaults of the preset ``--preset`` names, and the names of the
    fields given on it (what --resume compares with the checkpoint)."""
    return parse_with_presets(cls, presets(cls), "ppo-or", argv)


def env_size(args, num_nodes: int | None = None) -> EnvSizes:
    """The sizes of --env-id at ``num_nodes`` (default --num-nodes; ``envs.env_sizes``); a size below
    2, which ``check_args`` refuses, is not probed. Exits with one line when the env cannot take the size."""
    num_nodes = args.num_nodes if num_nodes is None else num_nodes
    if num_nodes < 2:
        return EnvSizes(num_nodes, num_nodes + 1, num_nodes + 1)
    try:
        return env_sizes(args.env_id, num_nodes)
    except ValueError as exc:
        sys.exit(f"error: --env-id {args.env_id} --num-nodes {num_nodes}: {exc}")


LARGE = 50
"""From this many nodes the default learning rate is 3e-4, which keeps the training at 50 and 100
nodes stable; below it 1e-3, which learns more in a short budget."""


PRIORS = {"tsp": 3.0, "cvrp": 3.0}
"""The default --distance-prior by problem: with it a model starts near the nearest-neighbour rule and
learns from there; the problems not listed were not measured with it and start without."""


def with_defaults(args, starts: int):
    """Fills the settings whose default depends on others: N is one trajectory per start node
    (``starts``) with --multi-start, else 50; the learning rate by size (``LARGE``); the distance prior by
    problem (``PRIORS``)."""
    if args.n_traj is None:
        args = replace(args, n_traj=starts if args.multi_start and args.num_nodes >= 2 else 50)
    if args.learning_rate is None:
        args = replace(args, learning_rate=3e-4 if args.num_nodes >= LARGE else 1e-3)
    if args.distance_prior is None:
        args = replace(args, distance_prior=PRIORS.get(ENV_IDS[args.env_id], 0.0))
    return args


def check_args(args, starts: int) -> None:
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
    if args.batch_norm == "frozen" and args.encoder != "am":
        problems.append(f"--batch-norm frozen: the {args.encoder} encoder has no batch norm")
    elif args.batch_norm == "frozen" and not (args.init_from or args.resume):
        problems.append("--batch-norm frozen keeps trained weights' statistics: give --init-from (or --resume)")
    if args.baseline == "shared" and args.n_traj * args.train_augment < 2:
        problems.append("--baseline shared needs at least 2 trajectories per instance (--n-traj x --train-augment)")
    problem = ENV_IDS[args.env_id]
    val_size = KOOL_SET_SIZE if problem in ("tsp", "cvrp") else TEST_SET_SIZE
    if args.distribution not in (known := env_distributions(problem, ENV_VARIANTS.get(args.env_id))):
        problems.append(f"--distribution {args.distribution}: --env-id {args.env_id} draws {' / '.join(known)}")
    if args.max_nodes is not None and problem not in ("tsp", "cvrp"):
        problems.append(f"--max-nodes: mixed sizes are drawn for tsp and cvrp, not --env-id {args.env_id}")
    elif args.max_nodes is not None and args.max_nodes < args.num_nodes:
        problems.append(f"--max-nodes {args.max_nodes} is below --num-nodes {args.num_nodes} (the smallest size)")
    if args.eval_instances > val_size:
        problems.append(f"--eval-instances must be in 1..{val_size} (the validation set), got {args.eval_instances}")
    fail(problems)


def resolve_args(args, given: set[str] | None = None) -> tuple:
    """The settings ``main`` can trust: a resumed run's own (``given``: the fields given on the command
    line), defaults that depend on the env filled in, every range and combination checked. Returns
    (settings, the checkpoint resumed from or None, the env's sizes at the largest size, --init-from's
    weights or None);
    exits with one line naming the argument otherwise."""
    ckpt = None
    if args.resume:
        args, ckpt = resume_settings(args, given or set(), RESUME_OVERRIDES, "ppo_or.py")
    sizes = env_size(args)
    args = with_defaults(args, sizes.starts)
    check_args(args, sizes.starts)
    if args.max_nodes:  # the memory and the episode length of the largest instances
        sizes = env_size(args, args.max_nodes)
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
    elif args.baseline == "shared" and (idle := [name for name in CRITIC_ONLY if name in (given or set())]):
        problems.append(f"{', '.join(map(flag, idle))} {'belongs' if len(idle) == 1 else 'belong'} to the critic "
                        "baseline (--preset rlor or --baseline critic); the shared baseline has no value function, "
                        "discount or truncated rollouts")  # fmt: skip
    fail(problems)
    init = (
        initial_weights(args.init_from, ENV_IDS[args.env_id], args.encoder)
        if args.init_from and not ckpt
        else None
    )
    return args, ckpt, sizes, init
