"""The executor: prompts the action LLM, runs its program in the sandbox, checks the answers on
the problem's instance and its probe (or renumbered copy), and turns the verdict into feedback and reward.

Reward (the signed gap delta = (y - y*) / |y*| on the problem's instance):

    r = 1 / (1 + max(0, delta))   every answer valid: in (0, 1], 1 at or below the reference
    r = -0.5                      the program ran but an answer breaks a constraint or misreports its objective
    r = -1                        the program did not run, timed out, or returned nothing readable

1 / (1 + delta) is bounded, equals 1 at the optimum and falls smoothly with the gap (a gap of 5%
gives 0.952), never reaching 0, so every valid program outranks every failure; a runtime error is
penalised more than a wrong answer because a program that runs is closer to a correct one.
"""

from __future__ import annotations

import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from ppoor.checkers.programs import OBJECTIVE_TOLERANCE, SUCCESS_GAP, check_answer
from ppoor.codegen.benchmark import judged_instances
from ppoor.codegen.llm import extract_code
from ppoor.codegen.memory import Memory, format_lessons, parse_lessons
from ppoor.codegen.rag import Retriever, format_passages
from ppoor.codegen.sandbox import Sandbox

PROMPTS = Path(__file__).with_name("prompts.toml")
REWARD_RUNTIME_ERROR = -1.0
REWARD_INVALID = -0.5


def load_prompts(path: str | Path = PROMPTS) -> dict[str, str]:
    """The prompt templates (``codegen/prompts.toml``)."""
    with open(path, "rb") as f:
        return tomllib.load(f)


def shape_of(value) -> str:
    """``3`` -> ``int``, ``[[1, 2], [3, 4]]`` -> ``list[list[int]]``: how a program reads a key (no sizes:
    the same program also runs on the probe, another size)."""
    if isinstance(value, list):
        return f"list[{shape_of(value[0]) if value else 'int'}]"
    return type(value).__name__


IMPORTS = "from ortools.constraint_solver import pywrapcp, routing_enums_pb2"
"""The program's first line, part of the contract (a model left it out, taking the system prompt's mention as given)."""


def contract(problem: dict) -> str:
    """The program to write: its imports, then the problem's ``solve`` signature with the keys of its
    instance stated in the docstring, so that a program reads the data it is given instead of guessing
    key names."""
    keys = "; ".join(f"instance[{k!r}]: {shape_of(v)}" for k, v in problem["instance"].items())
    line = f"The instance has exactly these keys: {keys}."
    if problem["signature"].count('"""') < 2:  # no docstring to hold it
        return f"{IMPORTS}\n\n{problem['signature']}\n# {line}"
    head, close = problem["signature"].rsplit('"""', 1)
    return f'{IMPORTS}\n\n{head.rstrip()}\n\n    {line}\n    """{close}'


def reward(valid: bool, ran: bool, gap: float | None) -> float:
    """The step reward of the module's docstring (an answer below the reference earns 1, as at it)."""
    if not ran:
        return REWARD_RUNTIME_ERROR
    if not valid or gap is None:
        return REWARD_INVALID
    return 1.0 / (1.0 + max(0.0, gap))


@dataclass
class Attempt:
    """One program and what became of it."""

    action: str
    code: str
    ran: bool = False
    valid: bool = False
    success: bool = False
    gap: float | None = None
    objective: float | None = None
    reward: float = REWARD_RUNTIME_ERROR
    feedback: str = ""
    violations: list[str] = field(default_factory=list)
    """every broken constraint, on each judged instance"""
    alarm: str = ""
    """set when a valid answer beats a proven optimum (a bug in the checker or the reference)"""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0


@dataclass
class Usage:
    """LLM calls and tokens of an episode."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


def feedback_of(verdicts: list, cases: list[tuple[str, dict, dict]]) -> tuple[bool, bool, float | None, str, str]:
    """Validity, success (every answer valid and at most 5% above its reference), the signed gap on
    the problem's instance, the text fed back to the LLM and an alarm (empty unless a valid answer
    beats a proven optimum: then the checker or the reference is wrong) for the answers on the
    judged instances (``problems.judged_instances``)."""
    lines, gaps, alarms = [], [], []
    for (name, _, reference), verdict in zip(cases, verdicts, strict=True):
        if not verdict.valid:
            lines.append(f"On {name} the answer is wrong: " + "; ".join(verdict.violations[:4]))
            continue
        ref = reference["objective"]
        gap = verdict.gap(ref)
        gaps.append(gap)
        if gap > SUCCESS_GAP:
            lines.append(
                f"On {name} the routes are valid but cost {verdict.objective:g}, {100 * gap:.1f}% above the best "
                f"known {ref:g}: improve the model or the search."
            )
        elif gap < -OBJECTIVE_TOLERANCE:
            lines.append(f"On {name} the routes are valid and cost {verdict.objective:g}, {-100 * gap:.2f}% below "
                         f"the best known {ref:g}.")
            if reference.get("optimal"):
                alarms.append(f"CHECKER ALARM: on {name} a valid answer ({verdict.objective:g}) beats the proven "
                              f"optimum {ref:g}: the checker misses a constraint or the optimum is wrong")
    valid = all(v.valid for v in verdicts)
    success = valid and all(g <= SUCCESS_GAP for g in gaps)
    if success:
        lines.insert(0, "Correct: every constraint holds and the cost is at most 5% above the best known.")
    return valid, success, gaps[0] if valid else None, "\n".join(lines), "\n".join(alarms)


class Executor:
    """The LLM side of RLEA: one method per prompt, ``evaluate`` for the sandbox and the checker."""

    def __init__(self, action_llm, memory_llm, sandbox: Sandbox, retriever: Retriever | None, memory: Memory,
                 max_tokens: int = 1024, temperature: float = 0.2, prompts: dict | None = None, rag_k: int = 4):
        self.action_llm, self.memory_llm = action_llm, memory_llm
        self.sandbox, self.retriever, self.memory = sandbox, retriever, memory
        self.max_tokens, self.temperature, self.rag_k = max_tokens, temperature, rag_k
        self.prompts = prompts or load_prompts()
        self.usage = Usage()

    def ask(self, llm, template: str, max_tokens: int, system: str = "system", **values) -> tuple[str, object]:
        messages = [
            {"role": "system", "content": self.prompts[system]},
            {"role": "user", "content": self.prompts[template].format(**values)},
        ]
        reply = llm.chat(messages, max_tokens, self.temperature)
        self.usage.calls += 1
        self.usage.prompt_tokens += reply.prompt_tokens
        self.usage.completion_tokens += reply.completion_tokens
        return reply.text, reply

    def write(self, problem: dict, action: str, previous: Attempt | None) -> Attempt:
        """A new program by ``action``: direct, chain_of_thought, self_refine, refine, rag, mlem."""
        start = time.perf_counter()
        values = {
            "description": problem["description"],
            "signature": contract(problem),
            "code": previous.code.strip() if previous else "",
            "feedback": previous.feedback if previous else "(none yet)",
        }
        if action == "rag":
            query = problem["description"] + " " + " ".join(problem["families"]) + " " + values["feedback"]
            values["passages"] = format_passages(self.retriever.search(query, self.rag_k))
        if action == "mlem":
            values["lessons"] = format_lessons(self.memory.retrieve(problem["families"]))
        text, reply = self.ask(self.action_llm, action, self.max_tokens, **values)
        attempt = self.evaluate(problem, extract_code(text), action)
        attempt.prompt_tokens, attempt.completion_tokens = reply.prompt_tokens, reply.completion_tokens
        attempt.seconds = time.perf_counter() - start
        return attempt

    def evaluate(self, problem: dict, code: str, action: str = "given") -> Attempt:
        """Run ``code`` on every judged instance (the problem's, and its probe or its renumbered
        copy) and check each answer; success needs every answer valid and at most 5% above its reference."""
        attempt = Attempt(action, code)
        cases = judged_instances(problem)
        result = self.sandbox.run(code, [instance for _, instance, _ in cases])
        if result.answers is None or len(result.answers) != len(cases):
            attempt.feedback = "The program failed:\n" + (result.error or "no answer")
            return attempt
        attempt.ran = True
        verdicts = [check_answer(instance, problem["families"], a["routes"], a["objective"], a.get("times"))
                    for (_, instance, _), a in zip(cases, result.answers, strict=True)]
        attempt.valid, attempt.success, attempt.gap, attempt.feedback, attempt.alarm = feedback_of(verdicts, cases)
        attempt.objective = verdicts[0].objective
        attempt.violations = [f"{name}: {v}" for (name, _, _), verdict in zip(cases, verdicts, strict=True)
                              for v in verdict.violations]
        attempt.reward = reward(attempt.valid, attempt.ran, attempt.gap)
        if attempt.alarm:
            print(attempt.alarm, file=sys.stderr, flush=True)
        return attempt

    def distill(self, problem: dict, attempts: list[Attempt]) -> list[str]:
        """Ask the memory model for lessons from a finished trajectory and store them."""
        trajectory = "\n".join(f"{i + 1}. {a.action}: {a.feedback[:300]}" for i, a in enumerate(attempts))
        outcome = "solved" if attempts[-1].success else "not solved"
        text, _ = self.ask(self.memory_llm, "distill", 200, "memory_system", families=", ".join(problem["families"]),
                           trajectory=trajectory, outcome=outcome)
        lessons = parse_lessons(text)
        steps = [{"action": a.action, "code": a.code[:2000], "feedback": a.feedback[:500]} for a in attempts]
        self.memory.add(problem, steps, outcome, lessons)
        return lessons


@dataclass
class Episode:
    """A problem's attempts under one method, and the planner's transitions (state texts)."""

    problem: str
    method: str
    attempts: list[Attempt] = field(default_factory=list)
    transitions: list[tuple] = field(default_factory=list)  # (state, action index, reward, next state, done)

    @property
    def success(self) -> bool:
        return bool(self.attempts) and self.attempts[-1].success

    @property
    def runtime_error(self) -> bool:
        """The paper's RER: the final program does not run."""
        return bool(self.attempts) and not self.attempts[-1].ran
