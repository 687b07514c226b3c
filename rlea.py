"""RLEA: a soft Q-learning planner that chooses how an LLM writes and repairs OR-Tools programs for
VRP variants (Refine, RAG, MLEM), trained on the benchmark's train split.

    python rlea.py --episodes 40                      # the local CPU model (SmolLM2-135M)
    python rlea.py --llm-backend openai --llm-base-url http://localhost:8000/v1 --llm-model NAME
    python rlea.py --resume runs/<run>                # continue a stopped run
    tensorboard --logdir runs

Each episode: a train problem; the executor writes a program directly; if it does not succeed,
the planner picks actions from pi(a|s) = softmax(Q(s, .) / alpha) until success (valid on the
instance and the probing instance, within 5% of the reference) or --t-max steps. Transitions go to
the replay buffer; the soft Bellman residual against a target network trains Q; the memory model
distils each trajectory into lessons for MLEM. The pieces live in agents/ (problems, sandbox,
checker, LLM backends, retrieval, memory, planner); this file is the algorithm.
"""


import math
import os
import random
import sys
import time
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np
import torch
import tyro
from ppoor.agents.settings import LLM_LIMITS, PLANNER, LLMArgs, check_args, encode, make_embedder, make_llms
from ppoor.models.runs import (
    MAX_SEED,
    fail,
    flag,
    given_fields,
    log_hyperparameters,
    new_run_dir,
    start_wandb,
)


@dataclass
class Args(LLMArgs):
    exp_name: str = "rlea"
    """the name of this experiment (runs/{exp_name}__{seed}__{time})"""
    seed: int = 1
    """seed of the planner, the problem order, the action draws and the local model's sampling"""
    track: bool = False
    """log to Weights and Biases"""
    wandb_project_name: str = "ppo-or"
    """the Weights and Biases project"""
    split: Literal["train", "test", "all"] = "train"
    """which problems of the folder to train on"""
    episodes: int = 40
    """training episodes (one train problem each)"""
    gamma: float = 0.9
    """the discount factor"""
    learning_rate: float = 1e-3
    """Adam's learning rate of the soft Q-network"""
    hidden: int = 128
    """width of the soft Q-network's two hidden layers"""
    buffer_size: int = 10_000
    """the replay buffer's capacity (transitions)"""
    batch_size: int = 32
    """transitions per gradient step"""
    updates_per_episode: int = 16
    """gradient steps after each episode"""
    learning_starts: int = 8
    """transitions in the buffer before the first gradient step"""
    tau: float = 0.05
    """the target network's soft-update rate after each gradient step"""
    alpha_start: float = 1.0
    """the temperature at the start (memory sparse: explore)"""
    alpha_end: float = 0.1
    """the temperature after --alpha-decay-episodes"""
    alpha_decay_episodes: int = 30
    """episodes over which alpha decays linearly"""
    max_grad_norm: float = 10.0
    """the gradient-norm clip"""
    checkpoint_interval: int = 5
    """write a checkpoint every this many episodes (0: only at the end)"""
    resume: str | None = None
    """a run folder (or its rlea.pt) to continue; --episodes may be raised"""


LIMITS = LLM_LIMITS | {
    "seed": (0, MAX_SEED),
    "episodes": (1, 1_000_000),
    "gamma": (0.0, 1.0),
    "learning_rate": (1e-8, 1.0),
    "hidden": (1, 4096),
    "buffer_size": (1, 10_000_000),
    "batch_size": (1, 65_536),
    "updates_per_episode": (0, 100_000),
    "learning_starts": (0, 10_000_000),
    "tau": (0.0, 1.0),
    "alpha_start": (1e-4, 100.0),
    "alpha_end": (1e-4, 100.0),
    "alpha_decay_episodes": (0, 1_000_000),
    "max_grad_norm": (1e-6, 1e6),
    "checkpoint_interval": (0, 1_000_000),
}
CHECKPOINT = "rlea.pt"  # the training state: networks, optimizer, replay buffer


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = tyro.cli(Args, args=argv)
    fail(check_args(args, LIMITS))

    from ppoor.agents.episodes import rollout, summarize
    from ppoor.agents.executor import Executor
    from ppoor.agents.memory import Memory
    from ppoor.agents.planner import (
        ACTIONS,
        ReplayBuffer,
        SoftQNetwork,
        alpha_at,
        read_checkpoint,
        sample_action,
        soft_q_update,
    )
    from ppoor.agents.problems import load_problems, shipped_problems
    from ppoor.agents.rag import Retriever
    from ppoor.agents.sandbox import Sandbox
    from ppoor.models.checkpoints import save_checkpoint
    from ppoor.models.runtime import StopRequest

    ckpt = None
    if args.resume:
        path = os.path.join(args.resume, CHECKPOINT) if os.path.isdir(args.resume) else args.resume
        try:
            ckpt = read_checkpoint(path)
        except ValueError as exc:
            fail([f"--resume: {exc} (give a run folder of rlea.py or its {CHECKPOINT})"])
        if "optimizer" not in ckpt:
            fail([f"--resume: {path} holds the planner only; resume from the run's {CHECKPOINT}"])
        changed = [flag(f) for f in sorted(given_fields(Args, argv) - {"resume", "episodes"})
                   if getattr(args, f) != ckpt["args"].get(f)]
        if changed:
            fail([f"--resume: {', '.join(changed)} cannot change when resuming (only --episodes can)"])
        saved = Args(**{**ckpt["args"], "episodes": args.episodes, "resume": args.resume})
        if ckpt["episode"] >= saved.episodes:
            fail([f"--resume: the run already finished {ckpt['episode']} of --episodes {saved.episodes}; raise --episodes"])
        args = saved
    try:
        problems = load_problems(args.problems or shipped_problems(), args.split)
    except ValueError as exc:
        fail([str(exc)])
    if ckpt is not None:
        run_dir = os.path.dirname(path)
        run_name = os.path.basename(run_dir)
    else:
        run_name, run_dir = new_run_dir(f"{args.exp_name}__{args.seed}")
    if args.track:
        start_wandb(args, run_name)
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(run_dir)
    log_hyperparameters(writer, run_dir, args)
    print(f"run: {run_dir} ({len(problems)} {args.split} problems)", flush=True)

    # seeding
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)

    embed = make_embedder(args, os.path.join(run_dir, "embeddings.json"))
    state_dim = 2 * len(embed("dimension probe"))
    q_net = SoftQNetwork(state_dim, args.hidden)
    target_net = SoftQNetwork(state_dim, args.hidden)
    target_net.load_state_dict(q_net.state_dict())
    optimizer = torch.optim.Adam(q_net.parameters(), lr=args.learning_rate)
    buffer = ReplayBuffer(args.buffer_size, state_dim)
    memory_path = os.path.join(run_dir, "memory.json")
    memory = Memory.load(memory_path)
    start_episode, gradient_steps, totals = 0, 0, {"tokens": 0, "calls": 0}
    if ckpt is not None:
        q_net.load_state_dict(ckpt["q_net"])
        target_net.load_state_dict(ckpt["target_net"])
        optimizer.load_state_dict(ckpt["optimizer"])
        buffer.load_state_dict(ckpt["buffer"])
        start_episode, gradient_steps, totals = ckpt["episode"], ckpt["gradient_steps"], dict(ckpt["totals"])
        rng = np.random.default_rng([args.seed, start_episode])
        print(f"resuming {run_dir} at episode {start_episode}", flush=True)

    action_llm, memory_llm = make_llms(args)
    executor = Executor(action_llm, memory_llm, Sandbox(args.sandbox_seconds, args.sandbox_memory_mb),
                        Retriever.default(args.rag_docs), memory, args.max_tokens, args.temperature, rag_k=args.rag_k)
    print(f"action model: {action_llm.name}; memory model: {memory_llm.name}; sandbox: {executor.sandbox.isolation}",
          flush=True)

    def write_checkpoint(episode: int) -> str:
        path = os.path.join(run_dir, CHECKPOINT)
        save_checkpoint({"script": "rlea.py", "args": asdict(args), "episode": episode, "gradient_steps": gradient_steps,
                         "totals": totals, "q_net": q_net.state_dict(), "target_net": target_net.state_dict(),
                         "optimizer": optimizer.state_dict(), "buffer": buffer.state_dict(),
                         "state_dim": state_dim, "embedder": embed.name}, path)
        save_checkpoint({"script": "rlea.py", "args": asdict(args), "episode": episode, "q_net": q_net.state_dict(),
                         "state_dim": state_dim, "embedder": embed.name}, os.path.join(run_dir, PLANNER))
        memory.save(memory_path)
        embed.save()
        return path

    stop = StopRequest()
    recent = []
    start_time = time.time()
    for episode in range(start_episode, args.episodes):
        alpha = alpha_at(episode, args.alpha_start, args.alpha_end, args.alpha_decay_episodes)
        problem = problems[int(rng.integers(len(problems)))]
        calls_before = executor.usage.calls
        tokens_before = executor.usage.prompt_tokens + executor.usage.completion_tokens

        def choose(texts, step, alpha=alpha):
            return sample_action(q_net, encode(embed, texts), alpha, rng)

        result = rollout(executor, problem, "rlea", args.t_max, choose, learn_memory=True)
        for state, action, reward, next_state, done in result.transitions:
            buffer.add(encode(embed, state), action, reward, encode(embed, next_state), done)

        loss = math.nan
        if buffer.size >= max(1, args.learning_starts):
            losses = []
            for _ in range(args.updates_per_episode):
                batch = buffer.sample(args.batch_size, rng)
                losses.append(soft_q_update(q_net, target_net, optimizer, batch, alpha, args.gamma, args.max_grad_norm))
                gradient_steps += 1
                with torch.no_grad():
                    for p, tp in zip(q_net.parameters(), target_net.parameters(), strict=True):
                        tp.mul_(1 - args.tau).add_(args.tau * p)
            loss = float(np.mean(losses)) if losses else math.nan

        recent = (recent + [result])[-20:]
        stats = summarize(recent)
        calls = executor.usage.calls - calls_before
        tokens = executor.usage.prompt_tokens + executor.usage.completion_tokens - tokens_before
        totals["calls"] += calls
        totals["tokens"] += tokens
        step = episode + 1
        writer.add_scalar("charts/success_rate", stats["success_rate"], step)
        writer.add_scalar("charts/runtime_error_rate", stats["runtime_error_rate"], step)
        if stats["mean_gap"] is not None:
            writer.add_scalar("charts/mean_gap", stats["mean_gap"], step)
        writer.add_scalar("charts/alpha", alpha, step)
        writer.add_scalar("charts/episode_reward", sum(t[2] for t in result.transitions), step)
        writer.add_scalar("charts/episode_steps", len(result.attempts), step)
        writer.add_scalar("charts/llm_calls", totals["calls"], step)
        writer.add_scalar("charts/llm_tokens", totals["tokens"], step)
        writer.add_scalar("charts/memory_lessons", len(memory.lessons), step)
        for i, name in enumerate(ACTIONS):
            share = np.mean([t[1] == i for t in result.transitions]) if result.transitions else 0.0
            writer.add_scalar(f"charts/action_{name}", share, step)
        if not math.isnan(loss):
            writer.add_scalar("losses/soft_q_loss", loss, step)
        last = result.attempts[-1]
        print(
            f"episode={step}/{args.episodes} problem={problem['name']} steps={len(result.attempts)} "
            f"actions={','.join(a.action for a in result.attempts)} success={last.success} ran={last.ran} "
            f"reward={last.reward:.3f} alpha={alpha:.3f} loss={loss:.4f} sr20={stats['success_rate']:.2f} "
            f"llm_calls={totals['calls']} tokens={totals['tokens']} elapsed={time.time() - start_time:.0f}s",
            flush=True,
        )
        if stop.requested:
            path = write_checkpoint(step)
            print(f"stopped: checkpoint {path}; continue with --resume {run_dir}", flush=True)
            writer.close()
            sys.exit(130)
        if args.checkpoint_interval and step % args.checkpoint_interval == 0:
            write_checkpoint(step)

    path = write_checkpoint(args.episodes)
    writer.close()
    print(f"planner: {path}; memory: {memory_path} ({len(memory.lessons)} lessons)", flush=True)


def cli() -> None:
    main()


if __name__ == "__main__":
    main()
