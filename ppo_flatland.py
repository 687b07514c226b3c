"""PPO for railway scheduling on the Flatland simulator, in the style of CleanRL's ppo.py.

    python ppo_flatland.py                                   # 25x25 maps with 5 trains, CPU, tens of minutes
    python ppo_flatland.py --width 35 --height 35 --trains 10 --imitation-episodes 160 --learning-rate 1e-4
    python ppo_flatland.py --resume runs/<run>/ckpt/50.pt    # continue a stopped run

The design of the NeurIPS 2020 Flatland RL-track winners (railway/env.py, railway/tree.py): trains
decide only on or before switches, a train's episode ends at its target or in a deadlock, the
observation is a tree over the switches ahead, and one actor-critic (railway/policy.py) serves all
trains, its actor hearing nearby trains through attention. With --safety (the default) it acts
within a safety layer (railway/safety.py) that only allows branches clear of head-on conflicts. An
iteration plays one episode on each of --num-envs fresh maps; a transition is one decision of one
train, and GAE runs over each train's own decisions.
"""

import os
import sys
import time
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
import tyro
from ppoor.railway import trainer
from ppoor.railway.env import STOP
from ppoor.railway.play import shortest_path_rule
from ppoor.railway.policy import POLICY_INPUTS, RailPolicy, mask_logits
from ppoor.railway.tree import observe
from ppoor.training import ppo
from ppoor.training.runs import Run, given_fields
from ppoor.training.runtime import seed_process


@dataclass
class Args:
    """PPO for Flatland railway scheduling, in the style of CleanRL. Writes tensorboard curves and
    checkpoints to runs/flatland-{width}x{height}-{trains}__{exp_name}__{seed}__{time}/."""

    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """the name of this experiment"""
    seed: int = 1
    """seed of the experiment (torch, numpy and the maps)"""
    threads: int = 1
    """torch CPU threads (0 = torch's default); the simulator is single-threaded Python"""
    track: bool = False
    """if toggled, this experiment will be tracked with Weights and Biases"""
    wandb_project_name: str = "ppo-or"
    """the wandb's project name"""
    wandb_entity: str | None = None
    """the entity (team) of wandb's project"""

    # Environment
    width: int = 25
    """map width in cells (at least 20)"""
    height: int = 25
    """map height in cells (at least 20)"""
    trains: int = 5
    """trains per map"""
    cities: int | None = None
    """cities per map (default: one per 4 trains, at least 2)"""
    flatland3: bool = True
    """Flatland 3's rules: four speeds, malfunctions, timetables (railway.env.FLATLAND3); --no-flatland3: speed 1
    and no malfunctions, the NeurIPS 2020 rules"""
    max_active: int | None = None
    """the most trains running at once, released closest to their targets first; None: all"""
    safety: bool = True
    """act within the safety layer (only branches clear of head-on conflicts); --no-safety: the policy alone"""
    wait: bool = False
    """with the safety layer, let a deciding train stop while a branch is clear"""
    veto: Literal["path", "segment"] = "path"
    """what the safety layer forbids: "path", a branch whose path to the target is not clear; "segment", only a
    branch whose next segment holds a train coming head-on (stopping always allowed)"""
    prior_weight: float = 0.0
    """residual policy: add this x the shortest-path rule's one-hot choice to the actor's logits (0: a plain policy)"""
    tree_depth: int = 2
    """levels of switches in the observation tree (edges: 2 + 4 + ... + 2^depth)"""
    comm_radius: int = 10
    """trains within this many cells (Manhattan) hear each other's messages"""

    # Algorithm
    total_timesteps: int = 300_000
    """total train decisions of the experiment"""
    total_seconds: float | None = None
    """stop after this many seconds of training (wall clock), whatever the decisions"""
    num_envs: int = 8
    """maps played in parallel (one episode each per iteration)"""
    learning_rate: float = 3e-4
    """the learning rate of the optimizer"""
    anneal_lr: bool = True
    """toggle learning rate annealing"""
    gamma: float = 0.99
    """the discount factor gamma (per decision)"""
    gae_lambda: float = 0.95
    """the lambda for the general advantage estimation"""
    num_minibatches: int = 4
    """the number of minibatches (of stored decision steps)"""
    update_epochs: int = 4
    """the K epochs to update the policy"""
    norm_adv: bool = True
    """toggles advantages normalization"""
    clip_coef: float = 0.2
    """the surrogate clipping coefficient"""
    clip_vloss: bool = True
    """toggles whether or not to use a clipped loss for the value function"""
    ent_coef: float = 0.01
    """coefficient of the entropy"""
    vf_coef: float = 0.5
    """coefficient of the value function"""
    max_grad_norm: float = 0.5
    """the maximum norm for the gradient clipping"""
    target_kl: float | None = None
    """the target KL divergence threshold"""
    hidden: int = 128
    """hidden size of the policy"""

    # Evaluation and checkpoints
    eval_interval: int = 10
    """evaluate the policy on --eval-episodes fixed maps every this many iterations (0 = never)"""
    eval_sample: bool = False
    """validate the policy drawing its actions (seeded) instead of taking the most likely ones (use it for a
    policy that learned to wait: greedy play may wait for ever)"""
    eval_episodes: int = 10
    """validation maps (seeds 1,000,000 + k) of the training size"""
    imitation_episodes: int = 0
    """before PPO, imitate the safety layer's shortest-path rule on this many episodes (0 = none; needs --safety)"""
    imitation_epochs: int = 60
    """passes over the imitation data"""
    imitation_learning_rate: float = 1e-3
    """the learning rate of the imitation (Adam)"""
    release_episodes: int = 100
    """episodes of release data after training, for the learned release classifier (0 = none)"""
    keep_best: bool = True
    """end with the policy of the best validation arrival rate; --no-keep-best keeps the last"""
    checkpoint_interval: int = 10
    """write a checkpoint every this many iterations (0 = only at the end)"""
    resume: str | None = None
    """a checkpoint of this script to continue from (its arguments are kept)"""
    init_from: str | None = None
    """start a new run from the weights of this ppo_flatland.py checkpoint (same --tree-depth and --hidden), e.g.
    to go on on larger maps"""


def rollout(policy: RailPolicy, envs: list, rng: np.random.Generator, args: Args, teacher=None) -> dict:
    """One episode on a fresh map in each of ``envs``, all maps through the policy together at each
    decision step: actions sampled from the policy, or chosen by ``teacher`` (a ``railway.play`` rule)
    when given. Per decision step (lists of S entries): stored observations (tensors [B, T, ...]),
    actions and log-probabilities [B, T] of the actions carried out (the safety layer may turn a move
    into a stop), values [B, T], rewards [B, T] (each train's rewards until its next decision),
    deciding and finished_after [B, T] bool; last_values [B, T]; decisions (count)."""
    ids = rng.random((len(envs), args.trains))  # each train's random id for this episode
    for b, env in enumerate(envs):
        env.reset(int(rng.integers(2**31)), ids=ids[b])
    obs = [observe(env, args.tree_depth, ids[b], args.comm_radius) for b, env in enumerate(envs)]
    out = {key: [] for key in ("stored", "actions", "logprobs", "values", "rewards", "deciding", "finished_after")}
    last_decision = np.full((len(envs), args.trains), -1)
    decisions = 0
    with torch.no_grad():
        while not all(env.done for env in envs):
            edges, globs, neighbors, allowed, prior = trainer.policy_batch(obs)
            logits, value = policy(edges, globs, neighbors, None, prior)
            dist = torch.distributions.Categorical(logits=mask_logits(logits, allowed))
            if teacher is None:
                action = dist.sample()  # [B, T]
            else:
                action = torch.as_tensor(np.stack([teacher(o, env) for o, env in zip(obs, envs, strict=True)]))
            step_deciding = np.stack([o["deciding"] for o in obs]) & ~np.array(
                [[env.done] * args.trains for env in envs]
            )
            out["stored"].append(
                {"edges": edges, "globals": globs, "neighbors": neighbors, "mask": allowed, "prior": prior}
            )
            out["values"].append(value)
            out["deciding"].append(step_deciding)
            out["rewards"].append(np.zeros((len(envs), args.trains)))
            out["finished_after"].append(np.zeros((len(envs), args.trains), dtype=bool))
            step = len(out["stored"]) - 1
            last_decision[step_deciding] = step
            decisions += int(step_deciding.sum())
            for b, env in enumerate(envs):
                if env.done:
                    continue
                reward, finished, info = env.step(action[b].numpy())
                action[b] = torch.as_tensor(info["actions"])
                allowed[b, action[b] == STOP, STOP] = True  # a move the safety layer stopped: stored as a stop
                for t in range(args.trains):
                    k = last_decision[b, t]
                    if k >= 0 and not out["finished_after"][k][b, t]:
                        out["rewards"][k][b, t] += reward[t]
                        out["finished_after"][k][b, t] = finished[t]
                obs[b] = observe(env, args.tree_depth, ids[b], args.comm_radius)
            out["actions"].append(action)
            out["logprobs"].append(
                torch.distributions.Categorical(logits=mask_logits(logits, allowed)).log_prob(action)
            )
        out["last_values"] = policy(*trainer.policy_batch(obs))[1].numpy()
    out["decisions"] = decisions
    return out


def demonstrations(policy: RailPolicy, envs: list, rng: np.random.Generator, args: Args, stop) -> list:
    """--imitation-episodes episodes of the safety layer's shortest-path rule, as (rollout, discounted
    returns [S, B, T] of each train's decisions: GAE with no critic and lambda 1), for ``trainer.imitate``."""
    found = []
    for _ in range(-(-args.imitation_episodes // len(envs))):
        if stop.requested and found:
            break
        roll = rollout(policy, envs, rng, args, teacher=shortest_path_rule)
        rewards = np.stack(roll["rewards"])
        returns = ppo.gae_over_decisions(rewards, np.zeros_like(rewards), np.stack(roll["deciding"]),
                                   np.stack(roll["finished_after"]), np.zeros_like(roll["last_values"]), args.gamma, 1.0)  # fmt: skip
        found.append((roll, returns))
    return found


def training_batch(roll: dict, args: Args) -> dict:
    """A rollout's decision steps as flat tensors [S * B, trains] (``obs``: the policy's inputs), with
    the advantages over each train's own decisions and the returns the value head learns."""
    deciding = np.stack(roll["deciding"])
    values = torch.stack(roll["values"]).numpy()
    advantages = ppo.gae_over_decisions(
        np.stack(roll["rewards"]), values, deciding, np.stack(roll["finished_after"]), roll["last_values"],
        args.gamma, args.gae_lambda,
    )  # fmt: skip
    b = {
        "obs": {key: torch.cat([s[key] for s in roll["stored"]]) for key in POLICY_INPUTS},  # [S * B, T, ...]
        "mask": torch.as_tensor(deciding.reshape(-1, args.trains)),
        "actions": torch.stack(roll["actions"]).reshape(-1, args.trains),
        "logprobs": torch.stack(roll["logprobs"]).reshape(-1, args.trains),
        "values": torch.as_tensor(values.reshape(-1, args.trains)),
        "advantages": torch.as_tensor(advantages.reshape(-1, args.trains), dtype=torch.float32),
    }
    b["returns"] = b["advantages"] + b["values"]
    return b


def ppo_update(policy: RailPolicy, optimizer, b: dict, args: Args) -> dict:
    """--update-epochs passes over the decision steps in --num-minibatches minibatches, PPO's clipped
    objective over the trains that decide (``b["mask"]``); stops after an epoch whose last minibatch
    moved the policy more than --target-kl. Returns the last minibatch's losses and the mean clip fraction."""
    rows = len(b["mask"])
    minibatch = max(1, rows // args.num_minibatches)
    clipfracs, stats = [], {}
    for _epoch in range(args.update_epochs):
        order = torch.randperm(rows)
        for start in range(0, rows, minibatch):
            idx = order[start : start + minibatch]
            mask = b["mask"][idx].float()
            count = mask.sum().clamp(min=1)
            logits, newvalue = policy(*(b["obs"][key][idx] for key in POLICY_INPUTS))
            dist = torch.distributions.Categorical(logits=logits)
            mb_advantages = b["advantages"][idx]
            if args.norm_adv:
                mean = (mb_advantages * mask).sum() / count
                std = ((((mb_advantages - mean) ** 2) * mask).sum() / count).sqrt()
                mb_advantages = (mb_advantages - mean) / (std + 1e-8)
            loss, stats = ppo.ppo_loss(
                dist.log_prob(b["actions"][idx]), b["logprobs"][idx], mb_advantages, dist.entropy(),
                clip_coef=args.clip_coef, ent_coef=args.ent_coef, mask=mask, count=count,
                value=(newvalue, b["values"][idx], b["returns"][idx]), vf_coef=args.vf_coef, clip_vloss=args.clip_vloss,
            )  # fmt: skip
            clipfracs.append(stats["clipfrac"])
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), args.max_grad_norm)
            optimizer.step()
        if args.target_kl is not None and stats["approx_kl"] > args.target_kl:
            break
    return {**stats, "clipfrac": float(np.mean(clipfracs))}


def main(args: Args, given: set[str] | None = None) -> None:
    """Trains; ``given``: the fields given on the command line (``training.runs.given_fields``)."""
    args, ckpt = trainer.resolve_args(args, given)
    initial = trainer.initial_policy(args) if args.init_from and not ckpt else None  # fails in one line before any writing

    seed_process(args.seed, args.threads)
    rng = np.random.default_rng(args.seed)  # the maps' generator

    # env setup: one simulator per map, each playing one episode per iteration
    envs = [trainer.make_env(args) for _ in range(args.num_envs)]
    config = trainer.model_config(args)
    policy = RailPolicy(**config)
    optimizer = torch.optim.Adam(policy.parameters(), lr=args.learning_rate, eps=1e-5)
    # episodes played, the policy with the best validation arrival rate so far (--keep-best), the release classifier
    kept = {"episodes": 0, "best": {"arrival_rate": -1.0, "iteration": 0, "model": None}}
    if initial is not None:
        policy.load_state_dict(initial)
    if ckpt:
        trainer.restore(ckpt, policy, optimizer, kept, rng)
    run = Run(args, f"flatland-{args.width}x{args.height}-{args.trains}__{args.exp_name}__{args.seed}", ckpt)
    trainer.announce(run, args)
    if args.imitation_episodes and not ckpt:  # behaviour cloning of the layer's shortest-path rule
        figures = trainer.imitate(policy, demonstrations(policy, envs, rng, args, run.stop), args, run.stop)
        run.log("charts/imitation_agreement", figures["agreement"], step=0)
    if not ckpt:  # the imitated, residual or initial policy is kept if nothing beats it
        trainer.validate_start(policy, args, run, kept["best"])

    while run.going():
        run.iteration += 1
        optimizer.param_groups[0]["lr"] = run.learning_rate()

        # rollout: one episode per map, all maps through the policy together at each decision step
        rollout_start = time.time()
        roll = rollout(policy, envs, rng, args)
        b = training_batch(roll, args)  # advantages over each train's own decisions
        rollout_time = time.time() - rollout_start
        run.reserve = rollout_time / args.num_envs * trainer.final_episodes(args)  # --total-seconds leaves their time
        run.global_step += roll["decisions"]
        kept["episodes"] += args.num_envs

        # optimizing the policy and value network over minibatches of decision steps
        update_start = time.time()
        stats = ppo_update(policy, optimizer, b, args)
        update_time = time.time() - update_start
        run.tick()

        lr = optimizer.param_groups[0]["lr"]
        line = trainer.log_iteration(run, args, envs, roll, stats, lr, (rollout_time, update_time))
        if args.eval_interval and run.iteration % args.eval_interval == 0 and not run.stop.requested:
            line += trainer.validate(policy, args, run, kept["best"])
        print(line + run.progress(), flush=True)
        if run.checkpoint_due():
            run.save(trainer.training_state(policy, optimizer, config, rng, args, kept))

    trainer.finish(run, policy, optimizer, config, rng, args, kept)


def cli() -> None:
    """The ``ppo-or-flatland`` console command."""
    main(tyro.cli(Args), given_fields(Args, sys.argv[1:]))


if __name__ == "__main__":
    cli()
