"""PPO on the space-time planner's priority order for Flatland railway scheduling, in the style of CleanRL.

    python ppo_priorities.py --width 50 --height 50 --trains 30 --total-seconds 3000
    python ppo_priorities.py --resume runs/<run>/ckpt/50.pt    # continue a stopped run

The planner (railway/spacetime.py) plans the trains one after another, each around the reservations
of those before it, so the order decides who waits. An attention policy over the trains
(railway/priorities.py) orders them as the Attention Model orders nodes. An iteration draws
--num-envs fresh maps, samples --orders-per-map orders of each map's trains, plans each order and
rewards it by the trains its plan lands and how soon (under Flatland 3's rules: by its episode, since
a malfunction breaks plans no order foresees). An order's advantage is its reward minus the mean of
its map's orders (a shared baseline, no critic); each of its picks is a PPO decision with it.
``eval_flatland.py --methods planner_learned --priorities <checkpoint>`` plays the result.
"""

import os
import sys
import time
from dataclasses import dataclass

import numpy as np
import torch
import tyro
from ppoor.railway import priorities
from ppoor.railway.priorities import PriorityPolicy, train_features
from ppoor.training import ppo
from ppoor.training.runs import Run, given_fields
from ppoor.training.runtime import seed_process


@dataclass
class Args:
    """PPO on the planner's priority order. Writes tensorboard curves and checkpoints to
    runs/flatland-{width}x{height}-{trains}__{exp_name}__{seed}__{time}/."""

    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """the name of this experiment"""
    seed: int = 1
    """seed of the experiment (torch, numpy and the maps)"""
    threads: int = 1
    """torch CPU threads (0 = torch's default); the planner is single-threaded Python"""
    track: bool = False
    """if toggled, this experiment will be tracked with Weights and Biases"""
    wandb_project_name: str = "ppo-or"
    """the wandb's project name"""
    wandb_entity: str | None = None
    """the entity (team) of wandb's project"""

    # Environment
    width: int = 50
    """map width in cells (at least 20)"""
    height: int = 50
    """map height in cells (at least 20)"""
    trains: int = 30
    """trains per map"""
    cities: int | None = None
    """cities per map (default: one per 4 trains, at least 2)"""
    flatland3: bool = True
    """Flatland 3's rules (an order is scored by its episode); --no-flatland3: by its plan (speed 1, no malfunctions)"""

    # Algorithm
    total_timesteps: int = 10_000_000
    """total orders of the experiment (each a decision per train)"""
    total_seconds: float | None = None
    """stop after this many seconds of training (wall clock), whatever the orders"""
    num_envs: int = 8
    """maps drawn per iteration"""
    orders_per_map: int = 8
    """orders sampled per map, each scored against their mean (the shared baseline)"""
    learning_rate: float = 3e-4
    """the learning rate of the optimizer"""
    anneal_lr: bool = True
    """toggle learning rate annealing"""
    num_minibatches: int = 4
    """the number of minibatches (of orders)"""
    update_epochs: int = 4
    """the K epochs to update the policy"""
    norm_adv: bool = True
    """toggles advantages normalization"""
    clip_coef: float = 0.2
    """the surrogate clipping coefficient"""
    ent_coef: float = 0.01
    """coefficient of the entropy"""
    max_grad_norm: float = 0.5
    """the maximum norm for the gradient clipping"""
    hidden: int = 128
    """hidden size of the policy"""

    # Evaluation and checkpoints
    eval_interval: int = 10
    """score the policy's most likely orders on --eval-episodes fixed maps every this many iterations (0 = never)"""
    eval_episodes: int = 10
    """validation maps (seeds 1,000,000 + k) of the training size"""
    checkpoint_interval: int = 10
    """write a checkpoint every this many iterations (0 = only at the end)"""
    resume: str | None = None
    """a checkpoint of this script to continue from (its arguments are kept)"""


def main(args: Args, given: set[str] | None = None) -> None:
    """Trains; ``given``: the fields given on the command line (``training.runs.given_fields``)."""
    args, ckpt = priorities.resolve_args(args, given)
    seed_process(args.seed, args.threads)
    rng = np.random.default_rng(args.seed)
    policy = PriorityPolicy(hidden=args.hidden)
    optimizer = torch.optim.Adam(policy.parameters(), lr=args.learning_rate, eps=1e-5)
    if ckpt:
        priorities.restore(ckpt, policy, optimizer, rng)
    run = Run(args, f"flatland-{args.width}x{args.height}-{args.trains}__{args.exp_name}__{args.seed}", ckpt)
    validation = priorities.Validation(args)  # the validation maps, and the fixed orders' figures on them
    print(f"ppo_priorities: {args.width}x{args.height} maps, {args.trains} trains, {args.num_envs} maps x "
          f"{args.orders_per_map} orders per iteration; run {run.dir}; {validation.baselines()}", flush=True)  # fmt: skip

    while run.going():
        run.iteration += 1
        optimizer.param_groups[0]["lr"] = run.learning_rate()

        # rollout: sample orders of each map's trains, plan each, reward each by its plan (or episode)
        rollout_start = time.time()
        seeds = [priorities.random_seed(rng) for _ in range(args.num_envs)]
        tracks = [priorities.map_of(args, seed) for seed in seeds]
        features = torch.as_tensor(np.stack([train_features(t) for t in tracks]))
        features = features.repeat_interleave(args.orders_per_map, 0)  # [M x K, T, F]
        with torch.no_grad():
            orders, old_logprobs, _ = policy(features)  # [M x K, T] each
        rewards, arrivals = priorities.order_rewards(args, seeds, tracks, orders, rng)
        rewards = rewards.view(args.num_envs, args.orders_per_map)

        # advantages: each order's reward against the mean of its map's orders
        advantages = (rewards - rewards.mean(1, keepdim=True)).flatten()
        if args.norm_adv:
            advantages = advantages / (advantages.std() + 1e-8)
        rollout_time = time.time() - rollout_start
        run.global_step += orders.numel()

        # optimizing the policy: every pick of an order is a decision with its order's advantage
        update_start = time.time()
        clipfracs = []
        for _epoch in range(args.update_epochs):
            for mb in np.array_split(rng.permutation(len(orders)), args.num_minibatches):
                _, logprobs, entropy = policy(features[mb], orders[mb])
                loss, stats = ppo.ppo_loss(logprobs, old_logprobs[mb], advantages[mb][:, None].expand_as(logprobs),
                                           entropy, clip_coef=args.clip_coef, ent_coef=args.ent_coef)  # fmt: skip
                optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(policy.parameters(), args.max_grad_norm)
                optimizer.step()
                clipfracs.append(stats["clipfrac"])
        update_time = time.time() - update_start
        run.tick()

        stats["clipfrac"] = float(np.mean(clipfracs))
        line = priorities.log_iteration(run, arrivals, rewards, stats, optimizer.param_groups[0]["lr"],
                                        (rollout_time, update_time))  # fmt: skip
        if args.eval_interval and run.iteration % args.eval_interval == 0:
            line += validation.log(run, policy)
        print(line + run.progress(), flush=True)
        if run.checkpoint_due():
            run.save(priorities.training_state(policy, optimizer, rng, args))

    if run.stop.requested:
        run.stopped(run.save(priorities.training_state(policy, optimizer, rng, args)))
    path = run.save(priorities.training_state(policy, optimizer, rng, args))
    print(f"final: {validation.log(run, policy).strip()}; checkpoint {path}", flush=True)
    run.close()


def cli() -> None:
    """The ``ppo-or-priorities`` console command."""
    main(tyro.cli(Args), given_fields(Args, sys.argv[1:]))


if __name__ == "__main__":
    cli()
