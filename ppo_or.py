"""PPO for routing problems with the Attention Model, in the style of CleanRL's ppo.py.

    python ppo_or.py --env-id tsp-v0                  # TSP50: multi-start rollouts, shared baseline
    python ppo_or.py --env-id vrptw-v0 --num-nodes 20  # any of the 48 VRP variants; mtvrp-v0 / mtvrp48-v0 mix them
    python ppo_or.py --env-id mtvrp48-v0 --preset variants --threads 1  # one model for all 48 on a CPU
    python ppo_or.py --resume runs/<run>/ckpt/100.pt  # continue a stopped run
    torchrun --standalone --nproc_per_node 4 ppo_or.py --env-id tsp-v0 --num-envs 256  # 4 GPUs / processes

A rollout steps M instances x N trajectories, encoding each instance once and decoding every step
from that cache; the update re-encodes minibatches of instances with gradients. The default starts
the N trajectories from N distinct first nodes and scores each against its instance's mean (POMO's
shared baseline in PPO's clipped objective); ``--preset rlor`` is the paper's (critic and GAE).
"""

import math
import os
import sys
import time
from dataclasses import dataclass
from typing import Literal

import gymnasium as gym
import numpy as np
import torch
from ppoor.envs import ENV_IDS
from ppoor.models import Agent, Cache, StateWrapper, compile_step
from ppoor.models.distributed_norm import freeze_statistics
from ppoor.search import allowed_starts, only_actions
from ppoor.training import options, parallel, ppo, routing
from ppoor.training.runs import Run
from ppoor.training.runtime import seed_process


@dataclass
class Args:
    """PPO with the Attention Model for TSP, CVRP, the 48 VRP variants, MRCVRP, PDP, OP, PCTSP and
    PCVRP. Writes tensorboard curves and checkpoints to runs/{env_id}__{exp_name}__{seed}__{time}/.
    On a CPU: `python ppo_or.py --env-id tsp-v0 --num-nodes 20 --num-envs 256 --total-seconds 180 --threads 2`."""

    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """the name of this experiment"""
    seed: int = 1
    """seed of torch, numpy and the env's generator (data-parallel process k uses seed + k)"""
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

    preset: Literal[tuple(options.PRESETS)] = "ppo-or"
    """ppo-or: multi-start rollouts, shared baseline; rlor: the paper's (critic + GAE); variants: ppo-or with the
    transformer encoder and 64 distinct instances in one minibatch (the VRP variants on a CPU); given arguments
    override it"""
    env_id: Literal[tuple(ENV_IDS)] = "tsp-v0"  # the registered ids, listed by --help
    """the environment"""
    num_nodes: int = 50
    """nodes per instance (TSP) or customers per instance (the depots are extra); with --max-nodes the smallest"""
    max_nodes: int | None = None
    """TSP, CVRP: draw each rollout's size from --num-nodes..--max-nodes (models for files of many sizes)"""
    distribution: Literal["uniform", "clustered", "mixed", "x", "solomon"] = "uniform"
    """the training instances (envs.distributions): TSP, CVRP clustered / mixed; CVRP x; vrptw-v0 solomon"""
    total_timesteps: int = 626_688_000
    """total instance-steps of the run (12,000 rollouts of TSP50 at 1024 x 51 steps)"""
    learning_rate: float | None = None
    """the learning rate of the optimizer (Adam); None: 1e-3 below 50 nodes, 3e-4 from 50"""
    num_envs: int = 1024
    """M: problem instances per rollout"""
    n_traj: int | None = None
    """N: trajectories per instance; None: one per start node with --multi-start, else 50"""
    multi_start: bool = True
    """start the N trajectories from N distinct first nodes (POMO); a random subset when N is below their number"""
    baseline: Literal["critic", "shared"] = "shared"
    """shared: each trajectory's return minus its instance's mean (POMO, no critic); critic: GAE on a learned value"""
    train_augment: int = 8
    """K (1..8): roll each drawn instance out in K symmetric copies sharing one baseline; --num-envs counts the copies"""
    num_steps: int | None = None
    """critic baseline: steps per rollout; None: the longest episode (n + 1 for TSP, 2n for CVRP)"""
    anneal_lr: bool = True
    """toggle learning rate annealing"""
    gamma: float = 0.99
    """critic baseline: the discount factor gamma"""
    gae_lambda: float = 0.95
    """critic baseline: the lambda for the general advantage estimation"""
    minibatch_size: int = 32
    """instances per PPO minibatch (copies included), one optimizer step each; at or above --num-envs: the whole rollout"""
    update_chunk: int | None = None
    """instances decoded at once in the update (memory only); None: what fits in 1 GiB (a third of a GPU's free memory)"""
    update_epochs: int = 2
    """the K epochs to update the policy"""
    norm_adv: bool = True
    """toggles advantages normalization (the shared baseline's: divided by their RMS, already centred per instance)"""
    clip_coef: float = 0.2
    """the surrogate clipping coefficient"""
    clip_vloss: bool = True
    """critic baseline: toggles whether or not to use a clipped loss for the value function, as per the paper"""
    ent_coef: float = 0.0
    """coefficient of the entropy bonus"""
    vf_coef: float = 0.5
    """critic baseline: coefficient of the value function"""
    max_grad_norm: float = 0.5
    """the maximum norm for the gradient clipping"""
    warmup_steps: int = 100
    """raise the learning rate linearly over a new optimizer's first steps (for a trained model's); 0: none"""
    target_kl: float | None = None
    """a trust region: stop an update at 2 x target_kl and steer the learning rate by the KL reached; None: none"""
    norm_groups: bool = True
    """encode the rollout in the update's minibatches, so each minibatch starts from the policy that sampled
    it (batch norm makes the encoding depend on the batch); False: all instances at once (the rlor preset)"""
    batch_norm: Literal["batch", "frozen"] = "batch"
    """the am encoder's batch norm: batch (each batch's statistics) or frozen (--init-from's running statistics,
    in rollout, update and evaluation alike: fine-tuning on a mix of unlike instances, such as the 48 variants)"""
    distance_prior: float | None = None
    """beta of the decoder's prior toward near nodes (models.attention_model.distance_bias); None: 3 for TSP, CVRP"""
    encoder: Literal["am", "transformer"] = "am"
    """the encoder's layers: am (Kool et al.'s, batch norm) or transformer (RouteFinder's, RMSNorm and SwiGLU)"""
    amp: bool = False
    """bf16 autocast of the model on a CUDA GPU"""
    compile: bool = False
    """torch.compile the decode step (needs a C++ compiler)"""

    total_seconds: float | None = None
    """stop after this much training wall time (summed over resumes); the learning rate anneals over it"""
    checkpoint_interval: int = 100
    """write a checkpoint every this many iterations (and at the end); 0: only the final one"""
    checkpoint_seconds: float = 600.0
    """also write a checkpoint each time the training time passes a multiple of this; 0 disables"""
    eval_interval: int = 100
    """evaluate greedy and multi-greedy decoding on the validation set every this many iterations; 0 disables"""
    eval_instances: int = 1000
    """instances of the validation set (seed 4321; drawn from --distribution where it is not uniform) the periodic evaluation decodes"""
    eval_nodes: int | None = None
    """size of the validation instances (and the model's default test size); None: --num-nodes"""
    resume: str | None = None
    """path of a checkpoint (or run folder) to continue; its settings are used"""
    init_from: str | None = None
    """start a new run from these weights of the problem (a checkpoint, run folder, shipped name, RLOR state dict)"""


def parse_args(argv: list[str] | None = None) -> tuple[Args, set[str]]:
    """The command line over the defaults of the preset ``--preset`` names, and the fields given on it."""
    return options.parse_args(Args, sys.argv[1:] if argv is None else argv)


def ppo_loss(
    agent: Agent, static: dict, steps: dict, batch: dict, index: torch.Tensor, args: Args, totals: dict | None = None,
    cache: Cache | None = None,
) -> tuple[torch.Tensor, dict]:  # fmt: skip
    """The clipped PPO loss of instances ``index`` [B] over their stored steps, and its statistics. ``batch``:
    rollout tensors [T, M, N] (with --multi-start the weights that make the forced first step the expectation
    over the first-node policy); means run over the live steps of every process. ``totals``: the minibatch's
    ``minibatch_totals``; ``cache``: this chunk's rows of the minibatch's encoding (None encodes them here)."""
    totals = totals or routing.minibatch_totals(batch, index, args)
    mb = {key: routing.per_instance(value, index) for key, value in batch.items()}
    critic = args.baseline == "critic"
    _, newlogprob, entropy, newvalue = agent.get_action_and_value(
        routing.minibatch_state(static, steps, index), mb["actions"], cache=cache, with_value=critic,
        entropy_grad=args.ent_coef != 0)  # fmt: skip
    advantages = mb["advantages"]
    if args.norm_adv:
        advantages = (advantages - totals["mean"]) / (totals["std"] + 1e-8)
    value = (newvalue.float(), mb["values"], mb["returns"]) if critic else None
    return ppo.ppo_loss(
        newlogprob.float(), mb["logprobs"], advantages, entropy.float(), clip_coef=args.clip_coef,
        ent_coef=args.ent_coef, mask=mb["alive"], count=totals["count"] / parallel.world_size(),
        weights=mb.get("weights"), value=value, vf_coef=args.vf_coef, clip_vloss=args.clip_vloss,
    )  # fmt: skip


def ppo_update(
    agent: Agent, optimizer: torch.optim.Optimizer, data: routing.Rollout, args: Args, chunk: int, autocast,
) -> dict:  # fmt: skip
    """--update-epochs passes over minibatches of instances (with --norm-groups the rollout's), one step each
    over the stored steps; a minibatch is encoded at once and decoded in chunks of ``chunk`` instances. With --target-kl it stops before a minibatch 2 x target_kl away. Returns the last
    step's statistics, the mean clip fraction and the optimizer steps taken."""
    static, steps, batch, groups = data.static, data.steps, data.batch, data.groups
    num_envs = batch["actions"].shape[1]
    rate = optimizer.param_groups[0]["lr"]  # the iteration's learning rate (annealed), before any warm-up
    clipfracs, taken, last = [], 0, {}
    for _epoch in range(args.update_epochs):
        for mb_inds in groups or routing.minibatches(num_envs, args.minibatch_size, batch["actions"].device):
            totals = routing.minibatch_totals(batch, mb_inds, args)
            optimizer.zero_grad()
            with autocast:
                cache = agent.encode({key: value[mb_inds] for key, value in static.items()})
            # the chunks' gradients gather here (none where the encoder is frozen)
            held = Cache(*(x.detach().requires_grad_(x.requires_grad) for x in cache))
            stats = {}
            for part in torch.arange(len(mb_inds)).to(mb_inds.device).tensor_split(math.ceil(len(mb_inds) / chunk)):
                with autocast:
                    rows = Cache(*(x[part] for x in held))
                    loss, part_stats = ppo_loss(agent, static, steps, batch, mb_inds[part], args, totals, rows)
                loss.backward()
                stats = {key: stats.get(key, 0.0) + value for key, value in part_stats.items()}
            if reached := [(x, h.grad) for x, h in zip(cache, held, strict=True) if h.grad is not None]:
                torch.autograd.backward([x for x, _ in reached], [g for _, g in reached])  # the encoder, once
            if args.target_kl is not None and taken and stats["approx_kl"] > 2 * args.target_kl:
                return {**last, "clipfrac": float(np.mean(clipfracs)), "optimizer_steps": taken}
            parallel.average_gradients(agent)
            torch.nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
            routing.warm_up(optimizer, rate, args.warmup_steps)
            optimizer.step()
            clipfracs.append(stats["clipfrac"])
            taken, last = taken + 1, stats
    return {**last, "clipfrac": float(np.mean(clipfracs)), "optimizer_steps": taken}


def rollout(
    agent: Agent, envs, wrapper: StateWrapper, obs: dict, episode: dict, args: Args, autocast,
) -> tuple[routing.Rollout, dict]:  # fmt: skip
    """Steps the envs from ``obs`` for --num-steps steps or to the end of their episodes, decoding from one
    encoding; adds the rewards to ``episode``'s ``return`` and ``length`` [M, N]. Returns (rollout, next obs)."""
    critic = args.baseline == "critic"
    env = envs.unwrapped
    start_actions = wrapper.tensor(env.start_actions)  # (with --max-nodes, of this rollout's size)
    static = wrapper.static(obs)
    states, actions, logprobs, values, rewards, dones, alive, weights = ([] for _ in range(8))
    env_steps = 0
    groups = routing.minibatches(args.num_envs, args.minibatch_size, start_actions.device) if args.norm_groups else None
    with torch.no_grad(), autocast:
        cache = agent.encode(static, groups)
        for _ in range(args.num_steps or env.max_episode_steps):
            running = ~env.terminated
            if not running.any():
                break
            env_steps += 1
            no_choice = None if critic else only_actions(obs["action_mask"])
            if no_choice is not None:  # nothing to learn (TSP's last two steps): only its reward counts
                obs, reward, _, _, _ = envs.step(no_choice)
                episode["return"] += reward
                episode["length"] += running
                continue
            state = wrapper.state(static, obs)
            starting = args.multi_start and env.steps == 0  # the first step: forced to the chosen starts
            first = routing.first_nodes(start_actions, args.num_envs, args.n_traj) if starting else None
            action, logprob, _, value = agent.get_action_and_value(
                state,
                allowed_starts(first, state["action_mask"]) if starting else None,
                cache=cache,
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
            alive.append(live)
            if args.multi_start:
                weights.append(len(start_actions) * logprob.float().exp() if starting else torch.ones_like(logprob))
        batch = {"actions": torch.stack(actions), "logprobs": torch.stack(logprobs), "alive": torch.stack(alive)}
        if args.multi_start:
            batch["weights"] = torch.stack(weights) * batch["alive"]
        if critic:
            batch.update(values=torch.stack(values), rewards=torch.stack(rewards), dones=torch.stack(dones))
            batch["next_value"] = agent.get_value(wrapper.state(static, obs), cache=cache).float()
    return routing.Rollout(static, routing.stack_states(states), batch, groups, env_steps), obs


def add_advantages(batch: dict, episode_return: np.ndarray, args: Args) -> None:
    """The advantages [T, M, N] of the rollout's ``batch``: GAE over the critic's values (and the
    returns it learns), or with the shared baseline each trajectory's return ``episode_return``
    [M, N] (the rollout holds whole episodes) against the mean of its instance's trajectories."""
    if args.baseline == "critic":
        values, next_value = batch["values"], batch.pop("next_value")
        advantages = ppo.gae(batch.pop("rewards"), values, batch.pop("dones"), next_value, args.gamma, args.gae_lambda)
        batch["advantages"], batch["returns"] = advantages, advantages + values
    else:
        returns = torch.as_tensor(episode_return, dtype=torch.float32, device=batch["actions"].device)
        advantages = routing.shared_advantages(returns, args.train_augment)
        batch["advantages"] = advantages.expand(len(batch["actions"]), -1, -1)


def build_agent(args: Args, problem: str, init: dict | None, device: torch.device) -> Agent:
    """The model to train: --init-from's weights where given, its batch norm frozen with --batch-norm frozen
    (a resumed run's statistics are its checkpoint's, restored afterwards), its decode step compiled with --compile."""
    agent = Agent(problem, distance_prior=args.distance_prior, encoder=args.encoder).to(device)
    if init:
        agent.load_state_dict(init["model"])
    if args.batch_norm == "frozen":
        freeze_statistics(agent)
    if args.compile:
        compile_step(agent)
    return agent


def finish(run: Run, agent: Agent, optimizer, envs, args: Args, validation: tuple) -> None:
    """The end of a run: a stopped run's state, the final evaluation on ``validation`` (data, references),
    the final checkpoint, and the data-parallel processes' agreement."""
    if run.stop.requested:
        run.stopped(run.save(routing.training_state(run, agent, optimizer, envs, args)))
    if run.is_main and args.eval_interval:
        results = run.log_all(routing.evaluate(agent, *validation))
        print("final evaluation: " + " ".join(f"{tag}={value:.4f}" for tag, value in results.items()), flush=True)
    path = run.save(routing.training_state(run, agent, optimizer, envs, args))
    if run.world_size > 1:
        parallel.report_parameter_agreement(agent, run.is_main)
    if run.is_main:
        print(f"final checkpoint: {path}", flush=True)
    run.close()
    envs.close()
    parallel.finish_processes(run.world_size)


def main(args: Args, given: set[str] | None = None) -> None:
    """Trains; ``given``: the fields given on the command line (see ``parse_args``)."""
    args, ckpt, sizes, init = options.resolve_args(args, given)
    problem = ENV_IDS[args.env_id]
    # data-parallel setup: torchrun sets WORLD_SIZE, RANK and LOCAL_RANK; a plain run is rank 0 of 1
    world_size, rank, device = parallel.start_processes(torch.cuda.is_available() and args.cuda)
    routing.check_processes(args, ckpt, world_size)
    chunk = routing.update_chunk(args, sizes, device)  # exits with one line if the run cannot fit in memory

    seed_process(args.seed, args.threads, rank, args.torch_deterministic)  # the same initial weights everywhere

    # env setup: each process steps num_envs instances of its own
    envs = gym.make_vec(args.env_id, vectorization_mode="vector_entry_point", **routing.env_options(args))
    wrapper = StateWrapper(problem, device)
    val_data, val_references = routing.validation_set(args) if args.eval_interval and rank == 0 else (None, None)

    agent = build_agent(args, problem, init, device)
    torch.manual_seed(args.seed + rank)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    next_obs, _ = envs.reset(seed=args.seed + rank)  # seeds the env's generator
    if args.train_augment > 1:
        next_obs = routing.new_episodes(envs, args)
    if ckpt:
        routing.restore(ckpt, agent, optimizer, envs, rank, device)
        next_obs = routing.new_episodes(envs, args)  # the episode in progress at the checkpoint starts afresh
    run = Run(args, f"{args.env_id}__{args.exp_name}__{args.seed}", ckpt, rank, world_size, device)
    routing.announce(run, args, sizes, world_size, device)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.amp)
    episode = {"return": np.zeros((args.num_envs, args.n_traj)), "length": np.zeros((args.num_envs, args.n_traj), int)}

    while run.going():
        run.iteration += 1
        optimizer.param_groups[0]["lr"] = run.learning_rate()

        # rollout: encode each instance once, decode every step from the cache
        rollout_start = time.time()
        if envs.unwrapped.terminated.all():
            next_obs = routing.new_episodes(envs, args)
            episode["return"][:], episode["length"][:] = 0, 0
        data, next_obs = rollout(agent, envs, wrapper, next_obs, episode, args, autocast)
        # instance-steps of every process (CVRP rollouts end at different steps on each)
        run.global_step += int(parallel.all_sum(torch.tensor(data.env_steps * args.num_envs, device=device)).item())
        episode["done"] = envs.unwrapped.terminated.all()
        if episode["done"]:
            routing.log_episodes(run, episode, envs.unwrapped.episode_statistics())
        add_advantages(data.batch, episode["return"], args)
        rollout_time = time.time() - rollout_start

        # optimizing the policy and value network over minibatches of instances
        update_start = time.time()
        stats = ppo_update(agent, optimizer, data, args, chunk, autocast)
        if args.target_kl is not None:  # the KL the update reached, on a sample of the rollout
            with torch.no_grad(), autocast:
                stats["update_kl"] = routing.sample_kl(agent, data, args.num_envs, min(chunk, routing.KL_SAMPLE))
            run.lr_scale = routing.steer_learning_rate(run.lr_scale, stats["update_kl"], args.target_kl)
        update_time = time.time() - update_start
        run.tick()

        lr = optimizer.param_groups[0]["lr"]
        line = routing.log_iteration(run, args, data, episode, stats, lr, (rollout_time, update_time))
        if run.is_main and args.eval_interval and run.iteration % args.eval_interval == 0:
            scalars = run.log_all(routing.evaluate(agent, val_data, val_references))
            line += "".join(f" {tag}={value:.4f}" for tag, value in scalars.items())
        if run.is_main:
            print(line + run.progress(), flush=True)
        if run.checkpoint_due():
            run.save(routing.training_state(run, agent, optimizer, envs, args))

    finish(run, agent, optimizer, envs, args, (val_data, val_references))


def cli() -> None:
    """The ``ppo-or`` console command."""
    main(*parse_args())


if __name__ == "__main__":
    cli()
