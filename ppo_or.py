"""PPO for routing problems with the Attention Model, in the style of CleanRL's ppo.py.

    python ppo_or.py --env-id tsp-v0                  # TSP50 with the paper's settings
    python ppo_or.py --env-id cvrp-v0 --num-nodes 20
    python ppo_or.py --resume runs/<run>/ckpt/100.pt  # continue a stopped run
    torchrun --standalone --nproc_per_node 4 ppo_or.py --env-id tsp-v0 --num-envs 256  # 4 GPUs / processes

Each rollout steps M instances x N trajectories of the bi-level vector env. The instances are
encoded once per rollout and every step decodes from that cache, all N trajectories of an instance
against its one encoding. The update splits the instances into minibatches, re-encodes each with
gradients and decodes all stored steps of its instances in one batch. A global step is one step of
one instance (all its N trajectories); node selections count trajectory-steps.
"""

import json
import os
import random
import signal
import sys
import time
from dataclasses import asdict, dataclass, fields

import gymnasium as gym
import numpy as np
import torch
import torch.distributed as dist
import tyro
from torch.utils.tensorboard import SummaryWriter

from envs import ENV_IDS, kool_dataset
from models import Agent, StateWrapper, read_checkpoint, save_checkpoint
from search import decode


@dataclass
class Args:
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """the name of this experiment"""
    seed: int = 1
    """seed of the experiment (torch, numpy and the environment's generator; data-parallel process k uses seed + k)"""
    torch_deterministic: bool = True
    """if toggled, `torch.backends.cudnn.deterministic=True`"""
    cuda: bool = True
    """if toggled, cuda is used when available"""
    threads: int | None = None
    """torch CPU threads (default: torch's own choice)"""
    track: bool = False
    """if toggled, the run is tracked with Weights and Biases"""
    wandb_project_name: str = "ppo-or"
    """the wandb project name"""
    wandb_entity: str | None = None
    """the entity (team) of the wandb project"""

    env_id: str = "tsp-v0"
    """the environment: tsp-v0 or cvrp-v0"""
    num_nodes: int = 50
    """nodes per instance (TSP) or customers per instance (CVRP, the depot is extra)"""
    total_timesteps: int = 626_688_000
    """total instance-steps of the run (the default is 12,000 rollouts of TSP50 at 1024 x 51 steps)"""
    learning_rate: float = 1e-3
    """the learning rate of the optimizer (Adam, no weight decay)"""
    num_envs: int = 1024
    """M: problem instances per rollout"""
    n_traj: int = 50
    """N: trajectories per instance, sampled in parallel from one encoding"""
    num_steps: int | None = None
    """steps per rollout (default: the longest possible episode, n + 1 for TSP and 2n for CVRP); a rollout
    also stops when every trajectory has finished, and an unfinished episode continues in the next rollout"""
    anneal_lr: bool = True
    """toggle learning rate annealing"""
    gamma: float = 0.99
    """the discount factor gamma"""
    gae_lambda: float = 0.95
    """the lambda for the general advantage estimation"""
    num_minibatches: int = 8
    """the number of minibatches; they split the instances, so it must divide num_envs"""
    update_epochs: int = 2
    """the K epochs to update the policy"""
    norm_adv: bool = True
    """toggles advantages normalization"""
    clip_coef: float = 0.2
    """the surrogate clipping coefficient"""
    clip_vloss: bool = True
    """toggles whether or not to use a clipped loss for the value function, as per the paper"""
    ent_coef: float = 0.01
    """coefficient of the entropy"""
    vf_coef: float = 0.5
    """coefficient of the value function"""
    max_grad_norm: float = 0.5
    """the maximum norm for the gradient clipping"""
    target_kl: float | None = None
    """the target KL divergence threshold (stops the update epochs early)"""
    encoder_cache: bool = True
    """encode each instance once per rollout; False re-encodes at every step (a baseline for benchmarks)"""
    amp: bool = False
    """bf16 autocast of the model on a CUDA GPU (losses and advantages stay float32)"""

    checkpoint_interval: int = 100
    """write a checkpoint every this many iterations (and at the end); 0 writes only the final one"""
    eval_interval: int = 100
    """evaluate greedy and multi-greedy decoding on the validation set every this many iterations; 0 disables"""
    eval_instances: int = 1000
    """instances of the Kool et al. validation set (seed 4321) used by the periodic evaluation"""
    eval_batch_size: int = 250
    """instances decoded at once by the periodic evaluation"""
    resume: str | None = None
    """path of a checkpoint to continue; its run directory and settings are used"""


def check_args(args: Args) -> None:
    """Rejects impossible settings before anything starts; the message names the argument."""
    problems = []
    if args.env_id not in ENV_IDS:
        problems.append(f"--env-id must be one of {sorted(ENV_IDS)}, got {args.env_id!r}")
    if args.num_nodes < 2:
        problems.append(f"--num-nodes must be at least 2, got {args.num_nodes}")
    for name in (
        "num_envs",
        "n_traj",
        "num_minibatches",
        "update_epochs",
        "total_timesteps",
        "eval_instances",
        "eval_batch_size",
    ):
        if getattr(args, name) < 1:
            problems.append(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.num_steps is not None and args.num_steps < 1:
        problems.append(f"--num-steps must be at least 1, got {args.num_steps}")
    if args.num_minibatches >= 1 and args.num_envs % args.num_minibatches:
        problems.append(
            f"--num-minibatches {args.num_minibatches} does not divide --num-envs {args.num_envs} "
            "(minibatches split the instances)"
        )
    if args.learning_rate <= 0:
        problems.append(f"--learning-rate must be positive, got {args.learning_rate}")
    if not 0 <= args.gamma <= 1 or not 0 <= args.gae_lambda <= 1:
        problems.append("--gamma and --gae-lambda must lie in [0, 1]")
    if args.eval_instances > 10_000:
        problems.append(f"--eval-instances must be at most 10000 (the validation set), got {args.eval_instances}")
    if args.checkpoint_interval < 0 or args.eval_interval < 0:
        problems.append("--checkpoint-interval and --eval-interval must be >= 0")
    if problems:
        sys.exit("error: " + "\n       ".join(problems))


RESUME_OVERRIDES = (
    "total_timesteps",
    "checkpoint_interval",
    "eval_interval",
    "eval_instances",
    "eval_batch_size",
    "threads",
    "cuda",
    "track",
    "wandb_project_name",
    "wandb_entity",
    "amp",
)


def resumed_args(args: Args) -> tuple[Args, dict]:
    """Loads the checkpoint named by --resume and returns its settings with --resume kept. Arguments
    in RESUME_OVERRIDES given with a non-default value override the saved ones (e.g. a longer
    --total-timesteps); any other argument given must not differ from the checkpoint's."""
    try:
        ckpt = read_checkpoint(args.resume)
    except ValueError as exc:
        sys.exit(f"error: --resume: {exc}")
    if "args" not in ckpt or "optimizer" not in ckpt:
        sys.exit(f"error: --resume: {args.resume} holds weights only, not a training state (use it with eval.py)")
    saved = {f.name: ckpt["args"][f.name] for f in fields(Args) if f.name in ckpt["args"]}
    defaults = Args()
    for f in fields(Args):
        value = getattr(args, f.name)
        if f.name == "resume" or value == getattr(defaults, f.name) or value == saved.get(f.name):
            continue
        if f.name not in RESUME_OVERRIDES:
            sys.exit(
                f"error: --{f.name.replace('_', '-')} cannot change when resuming (the checkpoint has {saved.get(f.name)!r})"
            )
        saved[f.name] = value
    return Args(**{**saved, "resume": args.resume}), ckpt


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


def all_sum(x: torch.Tensor) -> torch.Tensor:
    """Sum over the data-parallel processes (x itself in a single process); no gradient."""
    if dist.is_initialized():
        x = x.detach().clone()
        dist.all_reduce(x)
    return x


def average_gradients(agent: Agent) -> None:
    """Averages the gradients over the data-parallel processes with one all-reduce (CleanRL's
    multi-GPU pattern), so every process takes the same optimizer step."""
    if not dist.is_initialized():
        return
    params = [p for p in agent.parameters() if p.requires_grad]
    grads = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for p in params])
    dist.all_reduce(grads)
    grads /= dist.get_world_size()
    offset = 0
    for p in params:
        p.grad = grads[offset : offset + p.numel()].view_as(p).clone()
        offset += p.numel()


def ppo_loss(
    agent: Agent, static: dict, steps: dict, batch: dict, index: torch.Tensor, args: Args
) -> tuple[torch.Tensor, dict]:
    """The clipped PPO loss of instances ``index`` [B] over their stored steps, and its statistics.

    ``batch`` holds rollout tensors [T, M, N] (actions, logprobs, values, advantages, returns, alive).
    Means run over the live steps (trajectories not finished yet) of every process: counts and
    advantage statistics are summed across processes, and each process's loss is scaled so that the
    averaged gradient equals that of one process holding all the instances.
    """
    mb = {key: per_instance(value, index) for key, value in batch.items()}
    _, newlogprob, entropy, newvalue = agent.get_action_and_value(minibatch_state(static, steps, index), mb["actions"])
    newlogprob, entropy, newvalue = newlogprob.float(), entropy.float(), newvalue.float()
    alive = mb["alive"].float()
    count = all_sum(alive.sum()).clamp(min=1)
    world = dist.get_world_size() if dist.is_initialized() else 1

    def loss_mean(x: torch.Tensor) -> torch.Tensor:
        return (x * alive).sum() * world / count

    def global_mean(x: torch.Tensor) -> float:
        return (all_sum((x.detach() * alive).sum()) / count).item()

    logratio = newlogprob - mb["logprobs"]
    ratio = logratio.exp()
    advantages = mb["advantages"]
    if args.norm_adv:
        mean = all_sum((advantages * alive).sum()) / count
        std = (all_sum(((advantages - mean) ** 2 * alive).sum()) / count).sqrt()
        advantages = (advantages - mean) / (std + 1e-8)

    # policy loss
    pg_loss1 = -advantages * ratio
    pg_loss2 = -advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
    pg_loss = loss_mean(torch.max(pg_loss1, pg_loss2))

    # value loss
    if args.clip_vloss:
        v_loss_unclipped = (newvalue - mb["returns"]) ** 2
        v_clipped = mb["values"] + torch.clamp(newvalue - mb["values"], -args.clip_coef, args.clip_coef)
        v_loss_clipped = (v_clipped - mb["returns"]) ** 2
        v_loss = 0.5 * loss_mean(torch.max(v_loss_unclipped, v_loss_clipped))
    else:
        v_loss = 0.5 * loss_mean((newvalue - mb["returns"]) ** 2)

    entropy_loss = loss_mean(entropy)
    loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef
    stats = {
        "policy_loss": pg_loss.item() / world,
        "value_loss": v_loss.item() / world,
        "entropy": entropy_loss.item() / world,
        # calculate approx_kl http://joschu.net/blog/kl-approx.html
        "old_approx_kl": global_mean(-logratio),
        "approx_kl": global_mean((ratio - 1) - logratio),
        "clipfrac": global_mean(((ratio - 1.0).abs() > args.clip_coef).float()),
    }
    return loss, stats


class StopRequest:
    """Ctrl-C or SIGTERM asks the run to stop after the current iteration and write a checkpoint;
    a second Ctrl-C stops at once."""

    def __init__(self):
        self.requested = False
        signal.signal(signal.SIGINT, self.handle)
        signal.signal(signal.SIGTERM, self.handle)

    def handle(self, signum, frame):
        if self.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.requested = True
        print("stopping after this iteration to write a checkpoint (Ctrl-C again to abort)", flush=True)

    def synchronize(self, device: torch.device) -> None:
        """All processes stop together once any of them was asked to."""
        if dist.is_initialized():
            self.requested = bool(all_sum(torch.tensor([float(self.requested)], device=device)).item())


def report_parameter_agreement(agent: Agent, is_main: bool) -> None:
    """Checks that every process ends with the same parameters (the data-parallel invariant)."""
    flat = torch.cat([p.detach().flatten() for p in agent.state_dict().values() if p.is_floating_point()])
    spread = flat.clone()
    dist.all_reduce(spread, op=dist.ReduceOp.MAX)
    lowest = flat.clone()
    dist.all_reduce(lowest, op=dist.ReduceOp.MIN)
    difference = (spread - lowest).abs().max().item()
    if is_main:
        print(
            f"parameters identical across {dist.get_world_size()} processes: {difference == 0} (max difference {difference:g})",
            flush=True,
        )


def finish_processes(world_size: int) -> None:
    if world_size > 1:
        dist.barrier()
        dist.destroy_process_group()


def evaluate(agent: Agent, data: dict, batch_size: int) -> dict:
    """Mean greedy and multi-greedy tour lengths on ``data`` (the periodic evaluation)."""
    agent.eval()
    greedy = decode(agent, data, "greedy", batch_size=batch_size)
    multi = decode(agent, data, "multi-greedy", batch_size=batch_size)
    agent.train()
    return {"eval/greedy_length": greedy.lengths.mean(), "eval/multi_greedy_length": multi.lengths.mean()}


def main(args: Args) -> None:
    ckpt = None
    if args.resume:
        args, ckpt = resumed_args(args)
    check_args(args)
    problem = ENV_IDS[args.env_id]

    # data-parallel setup: torchrun sets WORLD_SIZE, RANK and LOCAL_RANK; a plain run is rank 0 of 1
    world_size, rank = int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("RANK", 0))
    use_cuda = torch.cuda.is_available() and args.cuda
    if args.amp and not use_cuda:
        sys.exit("error: --amp (bf16 autocast) needs a CUDA device; drop --amp or use --cuda on a GPU machine")
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if use_cuda else "cpu")
    if world_size > 1:
        if use_cuda:
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if use_cuda else "gloo")
    if ckpt and len(ckpt["rank_rng"]) != world_size:
        sys.exit(f"error: --resume: the checkpoint was written by {len(ckpt['rank_rng'])} processes, not {world_size}")
    if world_size > 1 and not args.encoder_cache:
        sys.exit("error: --no-encoder-cache is a single-process benchmark baseline; it cannot run data-parallel")
    is_main = rank == 0
    run_name = ckpt["run_name"] if ckpt else f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"
    if world_size > 1:
        shared = [run_name]
        dist.broadcast_object_list(shared, src=0)
        run_name = shared[0]
    run_dir = os.path.join("runs", run_name)

    # seeding: the same initial weights everywhere, then a stream of its own per process
    random.seed(args.seed + rank)
    np.random.seed(args.seed + rank)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    if args.threads:
        torch.set_num_threads(args.threads)

    # env setup: each process steps num_envs instances of its own
    envs = gym.make_vec(
        args.env_id,
        num_envs=args.num_envs,
        vectorization_mode="vector_entry_point",
        num_nodes=args.num_nodes,
        n_traj=args.n_traj,
    )
    num_steps = args.num_steps or envs.max_episode_steps
    wrapper = StateWrapper(problem, device)
    val_data = (
        kool_dataset(problem, args.num_nodes, "val", args.eval_instances) if args.eval_interval and is_main else None
    )

    agent = Agent(problem).to(device)
    torch.manual_seed(args.seed + rank)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    global_step, iteration = 0, 0
    next_obs, _ = envs.reset(seed=args.seed + rank)
    if ckpt:
        agent.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        global_step, iteration = ckpt["global_step"], ckpt["iteration"]
        rng = ckpt["rank_rng"][rank]
        torch.set_rng_state(rng["torch"])
        if use_cuda and "cuda" in rng:
            torch.cuda.set_rng_state(rng["cuda"], device)
        envs.unwrapped.rng.bit_generator.state = rng["env"]
        next_obs, _ = envs.reset()  # the episode in progress at the checkpoint starts afresh

    writer = None
    if is_main:
        if args.track:
            import wandb

            wandb.init(
                project=args.wandb_project_name,
                entity=args.wandb_entity,
                sync_tensorboard=True,
                config=vars(args),
                name=run_name,
                id=run_name.replace("/", "_"),
                resume="allow",
                save_code=True,
            )
        writer = SummaryWriter(run_dir, purge_step=global_step if ckpt else None)
        if not ckpt:
            writer.add_text(
                "hyperparameters",
                "|param|value|\n|-|-|\n{}".format("\n".join([f"|{key}|{value}|" for key, value in vars(args).items()])),
            )
            with open(os.path.join(run_dir, "args.json"), "w") as f:
                json.dump({**asdict(args), "world_size": world_size}, f, indent=2)

    def write_checkpoint() -> str | None:
        """Every process hands in its RNG states; the main process writes the file."""
        rng = {"torch": torch.get_rng_state(), "env": envs.unwrapped.rng.bit_generator.state}
        if use_cuda:
            rng["cuda"] = torch.cuda.get_rng_state(device)
        rank_rng = [None] * world_size
        if world_size > 1:
            dist.all_gather_object(rank_rng, rng)
        else:
            rank_rng = [rng]
        if not is_main:
            return None
        path = os.path.join(run_dir, "ckpt", f"{iteration}.pt")
        payload = {
            "problem": problem,
            "num_nodes": args.num_nodes,
            "model_config": {},
            "model": agent.state_dict(),
            "optimizer": optimizer.state_dict(),
            "args": asdict(args),
            "run_name": run_name,
            "global_step": global_step,
            "iteration": iteration,
            "world_size": world_size,
            "rank_rng": rank_rng,
        }
        save_checkpoint(payload, path)
        return path

    def log(tag: str, value) -> None:
        if writer is not None:
            writer.add_scalar(tag, value, global_step)

    stop = StopRequest()
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.amp)
    episode_return = np.zeros((args.num_envs, args.n_traj))
    episode_length = np.zeros((args.num_envs, args.n_traj), dtype=np.int64)
    start_time, start_step = time.time(), global_step
    while global_step < args.total_timesteps and not stop.requested:
        iteration += 1
        if args.anneal_lr:
            frac = max(0.0, 1.0 - global_step / args.total_timesteps)
            optimizer.param_groups[0]["lr"] = frac * args.learning_rate

        # rollout: encode each instance once, decode every step from the cache
        rollout_start = time.time()
        if envs.unwrapped.terminated.all():
            next_obs, _ = envs.reset()
            episode_return[:], episode_length[:] = 0, 0
        static = wrapper.static(next_obs)
        states, actions, logprobs, values, rewards, dones, alive = [], [], [], [], [], [], []
        with torch.no_grad(), autocast:
            cache = agent.encode(static) if args.encoder_cache else None
            for _ in range(num_steps):
                running = ~envs.unwrapped.terminated
                if not running.any():
                    break
                state = wrapper.state(static, next_obs)
                action, logprob, _, value = agent.get_action_and_value(state, cache=cache)
                next_obs, reward, terminations, _, _ = envs.step(action.cpu().numpy())
                episode_return += reward
                episode_length += running
                states.append({k: v for k, v in state.items() if k not in static})
                actions.append(action)
                logprobs.append(logprob.float())
                values.append(value.float())
                rewards.append(torch.as_tensor(reward, dtype=torch.float32, device=device))
                dones.append(torch.as_tensor(terminations, device=device))
                alive.append(torch.as_tensor(running, device=device))
            next_value = agent.get_value(wrapper.state(static, next_obs), cache=cache).float()
        # instance-steps of every process (CVRP rollouts end at different steps on each)
        global_step += int(all_sum(torch.tensor(len(states) * args.num_envs, device=device)).item())
        episode_done = envs.unwrapped.terminated.all()
        if episode_done:
            tour_length = -episode_return
            log("charts/episodic_return", episode_return.mean())
            log("charts/episodic_length", episode_length.mean())
            log("charts/tour_length", tour_length.mean())
            log("charts/best_tour_length", tour_length.min(1).mean())
        steps = stack_states(states)
        batch = {"actions": torch.stack(actions), "logprobs": torch.stack(logprobs), "values": torch.stack(values)}
        batch["alive"], rewards, dones = torch.stack(alive), torch.stack(rewards), torch.stack(dones)

        advantages = compute_gae(rewards, batch["values"], dones, next_value, args.gamma, args.gae_lambda)
        batch["advantages"], batch["returns"] = advantages, advantages + batch["values"]
        rollout_time = time.time() - rollout_start

        # optimizing the policy and value network over minibatches of instances
        update_start = time.time()
        minibatch_size = args.num_envs // args.num_minibatches
        clipfracs = []
        for _epoch in range(args.update_epochs):
            b_inds = torch.randperm(args.num_envs)
            for start in range(0, args.num_envs, minibatch_size):
                mb_inds = b_inds[start : start + minibatch_size].to(device)
                with autocast:
                    loss, stats = ppo_loss(agent, static, steps, batch, mb_inds, args)
                clipfracs.append(stats["clipfrac"])
                optimizer.zero_grad()
                loss.backward()
                average_gradients(agent)
                torch.nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()

            if args.target_kl is not None and stats["approx_kl"] > args.target_kl:
                break
        update_time = time.time() - update_start

        live = batch["alive"].flatten()
        y_pred, y_true = batch["values"].flatten()[live], batch["returns"].flatten()[live]
        var_y = y_true.var()
        explained_var = np.nan if var_y == 0 else (1 - (y_true - y_pred).var() / var_y).item()

        sps = int((global_step - start_step) / (time.time() - start_time))
        log("charts/learning_rate", optimizer.param_groups[0]["lr"])
        for name in ("value_loss", "policy_loss", "entropy", "old_approx_kl", "approx_kl"):
            log(f"losses/{name}", stats[name])
        log("losses/clipfrac", np.mean(clipfracs))
        log("losses/explained_variance", explained_var)
        log("charts/SPS", sps)
        log("charts/node_selections_per_second", sps * args.n_traj)
        log("charts/rollout_seconds", rollout_time)
        log("charts/update_seconds", update_time)
        line = (
            f"iteration={iteration} global_step={global_step} SPS={sps} node_selections/s={sps * args.n_traj} "
            f"rollout={rollout_time:.2f}s update={update_time:.2f}s"
        )
        if episode_done:
            line += f" tour_length={tour_length.mean():.4f} best_tour_length={tour_length.min(1).mean():.4f}"

        if is_main and args.eval_interval and iteration % args.eval_interval == 0:
            for tag, value in evaluate(agent, val_data, args.eval_batch_size).items():
                log(tag, value)
                line += f" {tag}={value:.4f}"
        if is_main:
            print(line, flush=True)
        stop.synchronize(device)
        if args.checkpoint_interval and iteration % args.checkpoint_interval == 0 and not stop.requested:
            write_checkpoint()

    if stop.requested:
        path = write_checkpoint()
        if is_main:
            print(f"stopped: checkpoint {path}; continue with --resume", flush=True)
            writer.close()
        finish_processes(world_size)
        sys.exit(130)
    if is_main and args.eval_interval and iteration % args.eval_interval:
        for tag, value in evaluate(agent, val_data, args.eval_batch_size).items():
            log(tag, value)
    path = write_checkpoint()
    if world_size > 1:
        report_parameter_agreement(agent, is_main)
    if is_main:
        print(f"final checkpoint: {path}", flush=True)
        writer.close()
    envs.close()
    finish_processes(world_size)


if __name__ == "__main__":
    main(tyro.cli(Args))
