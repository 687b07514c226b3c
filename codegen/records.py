"""What ``rlea.py``'s loop calls around the algorithm: the episode's curves and line, and the run's
files (the training state, the planner alone, the memory, the embedding cache), and the settings a
run can trust (``resolve_args``). ``args`` is ``rlea.Args``.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict

import numpy as np
from ppoor.codegen.settings import PLANNER, check_args
from ppoor.training.runs import Run, fail, resume_settings, wandb_problem

CHECKPOINT = "rlea.pt"  # the training state: networks, optimizer, replay buffer


def log_episode(run: Run, result, recent: list, alpha: float, loss: float, totals: dict, lessons: int, args) -> str:
    """Logs an episode's charts (success over the ``recent`` episodes, the actions chosen, LLM use)
    and returns its line."""
    from ppoor.codegen.episodes import outcome, summarize
    from ppoor.codegen.planner import ACTIONS

    stats = summarize([outcome(e) for e in recent])
    for tag, value in (
        ("charts/success_rate", stats["success_rate"]), ("charts/runtime_error_rate", stats["runtime_error_rate"]),
        ("charts/mean_gap", stats["mean_gap"]), ("charts/alpha", alpha),
        ("charts/episode_reward", sum(t[2] for t in result.transitions)),
        ("charts/episode_steps", len(result.attempts)), ("charts/llm_calls", totals["calls"]),
        ("charts/llm_tokens", totals["tokens"]), ("charts/memory_lessons", lessons), ("losses/soft_q_loss", loss),
        *((f"charts/action_{name}", np.mean([t[1] == i for t in result.transitions]) if result.transitions else 0.0)
          for i, name in enumerate(ACTIONS)),
    ):  # fmt: skip
        if value is not None and not (isinstance(value, float) and math.isnan(value)):
            run.log(tag, value)
    last = result.attempts[-1]
    return (
        f"episode={run.global_step}/{args.episodes} problem={result.problem} steps={len(result.attempts)} "
        f"actions={','.join(a.action for a in result.attempts)} success={last.success} ran={last.ran} "
        f"reward={last.reward:.3f} alpha={alpha:.3f} loss={loss:.4f} sr20={stats['success_rate']:.2f} "
        f"llm_calls={totals['calls']} tokens={totals['tokens']} elapsed={run.elapsed:.0f}s"
    )


def save_run(run: Run, learner, args, totals: dict, embed, memory) -> str:
    """The training state (``rlea.pt``: the learner, the LLM totals), the planner alone (``planner.pt``,
    what eval_rlea.py reads), the memory and the embedding cache, all in the run folder."""
    from ppoor.models.checkpoints import save_checkpoint

    planner = {"script": "rlea.py", "args": asdict(args), "episode": run.global_step,
               "q_net": learner.q_net.state_dict(), "state_dim": learner.state_dim, "embedder": embed.name}  # fmt: skip
    save_checkpoint(planner, os.path.join(run.dir, PLANNER))
    memory.save(os.path.join(run.dir, "memory.json"))
    embed.save()
    return run.save({**planner, **learner.state_dict(), "totals": totals})



def resolve_args(args, given: set[str] | None, limits: dict) -> tuple:
    """The settings ``main`` can trust (a resumed run's own: only --episodes may change; ``given``: the
    fields given on the command line; ``limits``: rlea.py's ranges) and the checkpoint resumed from;
    exits with one line otherwise."""
    fail(check_args(args, limits))
    ckpt = None
    if args.resume:
        args, ckpt = resume_settings(args, given or set(), ("episodes",), "rlea.py", ("episode", "episodes"),
                                     CHECKPOINT)  # fmt: skip
        ckpt.setdefault("global_step", ckpt.get("episode", 0))  # the shipped checkpoints/rlea/*/planner.pt count episodes only
    if args.track and (problem := wandb_problem()):
        fail([f"--track: {problem}"])
    return args, ckpt
