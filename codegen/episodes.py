"""One problem solved by one method: the executor's direct attempt, then the planner's (or a
baseline's) actions until success or ``t_max`` steps; and the per-method totals.

Methods (eval_rlea.py's names):
    standard        one direct generation
    cot             one chain-of-thought generation
    self_refine     direct, then the model reviews its own program (no execution feedback), t_max times
    rlea            direct, then actions drawn from the trained planner's Boltzmann policy
    random          direct, then uniformly random actions
    fixed           direct, then refine, rag, mlem, refine, ... in turn
    rlea_no_rag     rlea with the RAG action removed (the policy renormalised over the others)
    rlea_no_memory  rlea with the MLEM action removed
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from ppoor.codegen.executor import Attempt, Episode, Executor
from ppoor.codegen.planner import ACTIONS

METHODS = ("standard", "cot", "self_refine", "rlea", "random", "fixed", "rlea_no_rag", "rlea_no_memory")
PLANNED = ("rlea", "random", "fixed", "rlea_no_rag", "rlea_no_memory")


def allowed_actions(method: str) -> np.ndarray:
    """The actions a method may take: bool [3] over ACTIONS."""
    allowed = np.ones(len(ACTIONS), dtype=bool)
    if method == "rlea_no_rag":
        allowed[ACTIONS.index("rag")] = False
    if method == "rlea_no_memory":
        allowed[ACTIONS.index("mlem")] = False
    return allowed


def state_text(problem: dict, attempt: Attempt) -> tuple[str, str]:
    """The two texts the planner's state embeds: the problem description and the current code."""
    return problem["description"], attempt.code


def rollout(
    executor: Executor,
    problem: dict,
    method: str,
    t_max: int,
    choose: Callable[[tuple[str, str], int], int] | None = None,
    learn_memory: bool = False,
) -> Episode:
    """Solve ``problem`` with ``method``. ``choose(state texts, step) -> action index`` picks the
    planner's actions (the planned methods); the episode's transitions keep the state texts.
    ``learn_memory``: distil the finished trajectory into the memory (training, --online-memory)."""
    episode = Episode(problem["name"], method)
    first = executor.write(problem, "chain_of_thought" if method == "cot" else "direct", None)
    episode.attempts.append(first)
    if method in ("standard", "cot") or first.success:
        return episode
    attempt = first
    for step in range(t_max):
        if method == "self_refine":
            attempt = executor.write(problem, "self_refine", attempt)
            episode.attempts.append(attempt)
        else:
            state = state_text(problem, attempt)
            action = choose(state, step)
            attempt = executor.write(problem, ACTIONS[action], attempt)
            episode.attempts.append(attempt)
            done = attempt.success or step == t_max - 1
            episode.transitions.append((state, action, attempt.reward, state_text(problem, attempt), done))
        if attempt.success:
            break
    if learn_memory and method in PLANNED:
        executor.distill(problem, episode.attempts)
    return episode


def outcome(episode: Episode) -> dict:
    """What the totals read of one episode (eval_rlea.py's rows hold the same keys): success, runtime error, the
    gap of its last attempt, its steps (attempts)."""
    return {"success": episode.success, "runtime_error": episode.runtime_error, "gap": episode.attempts[-1].gap,
            "steps": len(episode.attempts)}


def summarize(outcomes: list[dict]) -> dict:
    """SR, RER, mean gap of the successes, steps (attempts), over the ``outcomes`` (``outcome``'s dicts)."""
    n = len(outcomes)
    gaps = [o["gap"] for o in outcomes if o["success"]]
    return {
        "problems": n,
        "success_rate": sum(o["success"] for o in outcomes) / n if n else 0.0,
        "runtime_error_rate": sum(o["runtime_error"] for o in outcomes) / n if n else 0.0,
        "mean_gap": float(np.mean(gaps)) if gaps else None,
        "mean_steps": float(np.mean([o["steps"] for o in outcomes])) if n else 0.0,
    }
