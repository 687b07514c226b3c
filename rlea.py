"""RLEA: a soft Q-learning planner that chooses how an LLM writes and repairs OR-Tools programs for
VRP variants (Refine, RAG, MLEM), trained on the benchmark's train split.

    python rlea.py --episodes 40                      # the local CPU model (Qwen2.5-Coder-0.5B)
    python rlea.py --llm-backend openai --llm-base-url http://localhost:8000/v1 --llm-model NAME
    python rlea.py --resume runs/<run>                # continue a stopped run
    tensorboard --logdir runs

Each episode: a train problem; the executor writes a program directly; if it does not succeed,
the planner picks actions from pi(a|s) = softmax(Q(s, .) / alpha) until success (valid on the
instance and the probing instance, within 5% of the reference) or --t-max steps. Transitions go to
the replay buffer; the soft Bellman residual against a target network trains Q; the memory model
distils each trajectory into lessons for MLEM. The pieces live in codegen/ (problems, sandbox,
checker, LLM backends, retrieval, memory, planner); this file is the algorithm.
"""

import math
import os
import random
import sys
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
import tyro
from ppoor.codegen.records import CHECKPOINT, log_episode, resolve_args, save_run
from ppoor.codegen.settings import LLM_LIMITS, LLMArgs, embedder_problem, encode, make_embedder, make_llms
from ppoor.training.runs import MAX_SEED, Run, fail, given_fields


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
    wandb_entity: str | None = None
    """the entity (team) of the Weights and Biases project"""
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


def learn(learner, args: Args, alpha: float, rng: np.random.Generator) -> float:
    """--updates-per-episode soft Q-learning steps on minibatches of the replay buffer (none before
    --learning-starts transitions), the target network following each by Polyak averaging (--tau);
    returns their mean loss (NaN without any)."""
    from ppoor.codegen.planner import soft_q_update

    losses = []
    for _ in range(args.updates_per_episode if learner.buffer.size >= max(1, args.learning_starts) else 0):
        batch = learner.buffer.sample(args.batch_size, rng)
        losses.append(soft_q_update(learner.q_net, learner.target_net, learner.optimizer, batch, alpha, args.gamma,
                                    args.max_grad_norm))  # fmt: skip
        learner.gradient_steps += 1
        with torch.no_grad():
            for p, tp in zip(learner.q_net.parameters(), learner.target_net.parameters(), strict=True):
                tp.mul_(1 - args.tau).add_(args.tau * p)
    return float(np.mean(losses)) if losses else math.nan


def main(args: Args, given: set[str] | None = None) -> None:
    """Trains the planner; ``given``: the fields given on the command line (``training.runs.given_fields``)."""
    args, ckpt = resolve_args(args, given, LIMITS)
    from ppoor.codegen.benchmark import load_problems, shipped_problems
    from ppoor.codegen.episodes import rollout
    from ppoor.codegen.executor import Executor
    from ppoor.codegen.memory import Memory
    from ppoor.codegen.planner import Learner, alpha_at, sample_action
    from ppoor.codegen.rag import Retriever
    from ppoor.codegen.sandbox import sandbox_or_exit

    try:
        problems = load_problems(args.problems or shipped_problems(), args.split)
    except ValueError as exc:
        fail([str(exc)])
    run = Run(args, f"{args.exp_name}__{args.seed}", ckpt, total_field="episodes", file_name=CHECKPOINT)
    print(f"run: {run.dir} ({len(problems)} {args.split} problems)", flush=True)

    # seeding
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed if ckpt is None else [args.seed, ckpt["episode"]])

    embed = make_embedder(args, os.path.join(run.dir, "embeddings.json"))
    if ckpt is not None and (problem := embedder_problem(ckpt, embed, f"--resume {args.resume}")):
        fail([problem])
    learner = Learner(2 * len(embed("dimension probe")), args.hidden, args.learning_rate, args.buffer_size)
    memory = Memory.load(os.path.join(run.dir, "memory.json"))
    totals = {"tokens": 0, "calls": 0}
    if ckpt is not None:
        learner.load_state_dict(ckpt)
        totals = dict(ckpt["totals"])
        print(f"resuming {run.dir} at episode {run.global_step}", flush=True)
    sandbox = sandbox_or_exit(args.sandbox_seconds, args.sandbox_memory_mb)  # before the model loads
    action_llm, memory_llm = make_llms(args)
    executor = Executor(action_llm, memory_llm, sandbox, Retriever.default(args.rag_docs), memory, args.max_tokens,
                        args.temperature, rag_k=args.rag_k)  # fmt: skip
    print(f"action model: {action_llm.name}; memory model: {memory_llm.name}; sandbox: {sandbox.isolation}", flush=True)

    recent = []
    while run.going():
        alpha = alpha_at(run.global_step, args.alpha_start, args.alpha_end, args.alpha_decay_episodes)
        problem = problems[int(rng.integers(len(problems)))]
        used = executor.usage.calls, executor.usage.prompt_tokens + executor.usage.completion_tokens

        def choose(texts, step, alpha=alpha):  # the Boltzmann policy of the soft Q-network
            return sample_action(learner.q_net, encode(embed, texts), alpha, rng)

        result = rollout(executor, problem, "rlea", args.t_max, choose, learn_memory=True)
        for state, action, reward, next_state, done in result.transitions:
            learner.buffer.add(encode(embed, state), action, reward, encode(embed, next_state), done)

        # soft Q-learning on the replay buffer, the target network following by Polyak averaging
        loss = learn(learner, args, alpha, rng)

        run.iteration = run.global_step = run.global_step + 1
        run.tick()
        totals["calls"] += executor.usage.calls - used[0]
        totals["tokens"] += executor.usage.prompt_tokens + executor.usage.completion_tokens - used[1]
        recent = (recent + [result])[-20:]
        print(log_episode(run, result, recent, alpha, loss, totals, len(memory.lessons), args), flush=True)
        if run.checkpoint_due():
            save_run(run, learner, args, totals, embed, memory)

    if run.stop.requested:
        run.stopped(save_run(run, learner, args, totals, embed, memory))
    path = save_run(run, learner, args, totals, embed, memory)
    run.close()
    print(f"planner: {path}; memory: {os.path.join(run.dir, 'memory.json')} ({len(memory.lessons)} lessons)", flush=True)


def cli() -> None:
    """The ``ppo-or-rlea`` console command."""
    main(tyro.cli(Args), given_fields(Args, sys.argv[1:]))


if __name__ == "__main__":
    cli()
