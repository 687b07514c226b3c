"""Evaluate LLM program writing on the RLEA benchmark: baselines, RLEA with a trained planner and
its ablations; a table per problem and per method (success rate SR, runtime error rate RER,
mean gap of the successes, steps, LLM calls, tokens, seconds), and a JSON file.

    python eval_rlea.py --planner runs/<run>                         # every method, the test split
    python eval_rlea.py --planner runs/<run> --methods standard rlea --only vrp-c vrp-c-tw
    python eval_rlea.py --methods standard cot self_refine           # no planner needed
    python eval_rlea.py --llm-backend openai --llm-base-url http://localhost:11434/v1 --llm-model qwen2.5-coder:7b ...
    python eval_rlea.py --problems my_problems --only my-vrp --judge my_solver.py   # judge your own program, no LLM
"""


import copy
import json
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Literal

import numpy as np
import torch
import tyro
from ppoor.codegen.episodes import METHODS, PLANNED, allowed_actions, outcome, rollout, summarize
from ppoor.codegen.sandbox import truncate
from ppoor.codegen.settings import (
    LLM_LIMITS,
    PLANNER,
    LLMArgs,
    check_args,
    embedder_problem,
    encode,
    make_embedder,
    make_llms,
)
from ppoor.training.runs import MAX_SEED, check_writable, fail, given_fields, write_json

Method = Literal["standard", "cot", "self_refine", "rlea", "random", "fixed", "rlea_no_rag", "rlea_no_memory"]


@dataclass
class Args(LLMArgs):
    planner: str | None = None
    """an rlea.py run folder (or its planner.pt), or a shipped planner's name: the planner and its memory; needed by rlea and its ablations"""
    methods: tuple[Method, ...] = METHODS
    """the methods to run"""
    split: Literal["train", "test", "all"] | None = None
    """which problems of the folder; None: the test split of the shipped benchmark, every problem of a folder
    given with --problems"""
    only: tuple[str, ...] = ()
    """problem names to run, of any split (default: every problem of --split)"""
    judge: str | None = None
    """a program file (defining solve(instance)) to judge on the one problem --only names, exactly as a generated
    program is judged (sandbox, checker, reference), with no LLM: prints the verdict and every reason, exits 0 on
    success and 1 otherwise"""
    seed: int = 1
    """seed of the action draws and the local model's sampling"""
    online_memory: bool = False
    """keep distilling lessons into the memory during evaluation (the paper's online setting)"""
    output: str | None = None
    """the JSON file of the results, rewritten after every problem (default: runs/eval_rlea__{seed}__{time}.json)"""
    resume: str | None = None
    """the --output file of an interrupted run: it goes on in that file with that run's settings (give nothing
    else), the problems it finished kept"""


LIMITS = LLM_LIMITS | {"seed": (0, MAX_SEED)}
NEED_PLANNER = ("rlea", "rlea_no_rag", "rlea_no_memory")
SHIPPED = Path(__file__).resolve().parent / "checkpoints" / "rlea"


def planner_file(path: str) -> str:
    """The planner file ``--planner`` names: a file, a run folder (its planner.pt), or the name of a
    shipped planner (checkpoints/rlea/<name>/)."""
    if not os.path.exists(path) and (SHIPPED / path).is_dir():
        path = str(SHIPPED / path)
    return os.path.join(path, PLANNER) if os.path.isdir(path) else path


def load_planner(path: str):
    """(soft Q-network, checkpoint) of an rlea.py run."""
    from ppoor.codegen.planner import SoftQNetwork, read_checkpoint

    file = planner_file(path)
    shipped = ", ".join(sorted(p.name for p in SHIPPED.iterdir())) if SHIPPED.is_dir() else "none"
    try:
        ckpt = read_checkpoint(file)
    except ValueError as exc:
        raise ValueError(f"--planner: {exc} (give an rlea.py run folder, its {PLANNER}, or a shipped planner: "
                         f"{shipped})") from None
    q_net = SoftQNetwork(ckpt["state_dim"], ckpt["args"]["hidden"])
    q_net.load_state_dict(ckpt["q_net"])
    return q_net.eval(), ckpt


def table(rows: dict[str, dict]) -> str:
    """The totals per method as a markdown table."""
    lines = ["| method | problems | SR | RER | mean gap (successes) | steps | LLM calls | tokens | seconds |",
             "|---|---|---|---|---|---|---|---|---|"]
    for method, r in rows.items():
        gap = "-" if r["mean_gap"] is None else f"{100 * r['mean_gap']:.2f}%"
        lines.append(f"| {method} | {r['problems']} | {100 * r['success_rate']:.1f}% | {100 * r['runtime_error_rate']:.1f}% "
                     f"| {gap} | {r['mean_steps']:.2f} | {r['llm_calls']} | {r['tokens']} | {r['seconds']:.0f} |")
    return "\n".join(lines)


def judge(args: Args, problem: dict) -> int:
    """Judge the program file ``args.judge`` on ``problem`` as a generated one is judged; print the
    verdict, the recomputed objective and every reason. Returns the exit status (0: success)."""
    from ppoor.codegen.benchmark import protection
    from ppoor.codegen.executor import Executor
    from ppoor.codegen.memory import Memory
    from ppoor.codegen.sandbox import sandbox_or_exit

    try:
        code = Path(args.judge).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        fail([f"--judge {args.judge}: cannot read it ({exc})"])
    executor = Executor(None, None, sandbox_or_exit(args.sandbox_seconds, args.sandbox_memory_mb), None, Memory())
    attempt = executor.evaluate(problem, code)
    verdict = "success" if attempt.success else "valid, too far from the reference" if attempt.valid else (
        "wrong answer" if attempt.ran else "the program failed")
    print(f"problem {problem['name']} ({', '.join(problem['families'])}); judged on its instance and a "
          f"second one ({protection(problem)})")
    print(f"verdict: {verdict}")
    if attempt.objective is not None:
        reference = problem["reference"]
        gap = "" if attempt.gap is None else f", gap {100 * attempt.gap:+.2f}%"
        print(f"objective: {attempt.objective:g} (reference {reference['objective']:g}"
              f"{', proven optimal' if reference.get('optimal') else ''}{gap})")
    for line in attempt.violations:
        print(f"violated: {line}")
    print(attempt.feedback)
    return 0 if attempt.success else 1


def resumed(args: Args, given: set[str]) -> tuple[Args, dict]:
    """The settings and the finished rows (method -> rows) of the interrupted run whose results file
    ``args.resume`` names; exits with one line when it cannot go on."""
    try:
        with open(args.resume) as f:
            report = json.load(f)
        names = {f.name for f in fields(Args)}
        saved = {k: tuple(v) if isinstance(v, list) else v for k, v in report["args"].items() if k in names}
        done = dict(report["per_problem"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        fail([f"--resume {args.resume}: not an eval_rlea.py results file ({type(exc).__name__}: {exc})"])
    if extra := sorted(given - {"resume"}):
        fail([f"--resume goes on with the run's own settings: drop {' '.join('--' + e.replace('_', '-') for e in extra)}"])
    if report.get("finished", True):
        fail([f"--resume {args.resume}: that run finished; its totals are in the file"])
    return Args(**{**saved, "resume": args.resume, "output": args.resume}), done


def check_all(args: Args) -> str:
    """Every argument checked before work (one line each, then exit); returns the results file's path."""
    problems_found = check_args(args, LIMITS)
    needs_planner = [m for m in args.methods if m in NEED_PLANNER and not args.judge]
    if args.judge is not None:
        if len(args.only) != 1:
            problems_found.append("--judge needs the one problem to judge it on: --only NAME")
        if not os.path.isfile(args.judge):
            problems_found.append(f"--judge {args.judge} is not a file (give the path of a program defining solve)")
    if needs_planner and not args.planner:
        problems_found.append(f"--methods {' '.join(needs_planner)} need --planner (an rlea.py run folder)")
    fail(problems_found)
    output = args.output or os.path.join("runs", f"eval_rlea__{args.seed}__{int(time.time())}.json")
    check_writable("--output", output)
    return output


def selected(args: Args, problems: list[dict], folder) -> list[dict]:
    """The problems --only names, else those of --split (default: the shipped benchmark's test split,
    every problem of a folder of one's own); exits with one line where none is left."""
    if args.only:
        unknown = sorted(set(args.only) - {p["name"] for p in problems})
        if unknown:
            fail([f"--only: no problem {', '.join(unknown)} in {folder}"])
        kept = [p for p in problems if p["name"] in args.only]
        print(f"--only: {len(kept)} of the {len(problems)} problems of {folder}", flush=True)
        return kept
    split = args.split or ("all" if args.problems else "test")
    kept = [p for p in problems if split in ("all", p["split"])]
    if len(kept) < len(problems):
        print(f"--split {split}: {len(kept)} of the {len(problems)} problems of {folder} "
              f"({len(problems) - len(kept)} of other splits left out)", flush=True)
    if not kept:
        fail([f"{folder} has no problem of split {split!r} (--split all runs every one)"])
    return kept


def planner_state(args: Args, ckpt: dict | None) -> tuple:
    """(memory, embedder, alpha) of the planner --planner names: its memory, the embedder its states were
    made with (refused where it is not the one it was trained on) and its final temperature; without a
    planner an empty memory, no embedder and alpha 1."""
    from ppoor.codegen.memory import Memory

    if ckpt is None:
        return Memory(), None, 1.0
    planner_dir = os.path.dirname(planner_file(args.planner))
    planner_args = copy.copy(args)
    planner_args.embedder = ckpt["args"]["embedder"]
    embed = make_embedder(planner_args, os.path.join(planner_dir, "embeddings.json"))
    if problem := embedder_problem(ckpt, embed, f"--planner {args.planner}"):
        fail([problem])
    return Memory.load(os.path.join(planner_dir, "memory.json")), embed, ckpt["args"]["alpha_end"]


def main(args: Args, given: set[str] | None = None) -> None:
    """Evaluates the methods; ``given``: the fields given on the command line (with --resume, none other)."""
    done, finished_runs = {}, 0
    if args.resume:
        args, done = resumed(args, given or set())
        finished_runs = sum(len(rows) for rows in done.values())
        print(f"resuming {args.resume}: {finished_runs} problem runs finished", flush=True)
    output = check_all(args)

    from ppoor.codegen.benchmark import load_problems, shipped_problems
    from ppoor.codegen.executor import Executor
    from ppoor.codegen.memory import Memory
    from ppoor.codegen.planner import sample_action
    from ppoor.codegen.rag import Retriever
    from ppoor.codegen.sandbox import sandbox_or_exit

    folder = args.problems or shipped_problems()
    try:
        problems = load_problems(folder, "all")
        q_net, ckpt = load_planner(args.planner) if args.planner and not args.judge else (None, None)
    except ValueError as exc:
        fail([str(exc)])
    problems = selected(args, problems, folder)
    if args.judge:
        sys.exit(judge(args, problems[0]))

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng([args.seed, finished_runs])  # resumed: new draws
    base_memory, embed, alpha = planner_state(args, ckpt)
    sandbox = sandbox_or_exit(args.sandbox_seconds, args.sandbox_memory_mb)  # before the model loads
    action_llm, memory_llm = make_llms(args)
    retriever = Retriever.default(args.rag_docs)
    print(f"{len(problems)} problems x {len(args.methods)} methods; action model {action_llm.name}; "
          f"sandbox: {sandbox.isolation}", flush=True)

    results, totals = {}, {}
    for method in args.methods:
        allowed = torch.from_numpy(allowed_actions(method))

        def choose(texts, step, method=method, allowed=allowed):
            if method == "random":
                return int(rng.integers(3))
            if method == "fixed":
                return step % 3
            return sample_action(q_net, encode(embed, texts), alpha, rng, allowed)

        def save(finished: bool) -> None:
            write_json(output, report(args, action_llm, memory_llm, problems, totals, results, finished=finished))

        memory_file = os.path.splitext(output)[0] + f".memory.{method}.json"
        memory = copy.deepcopy(base_memory)
        if args.online_memory and args.planner and done and os.path.exists(memory_file):
            memory = Memory.load(memory_file)  # the lessons the interrupted run had distilled
        executor = Executor(action_llm, memory_llm, sandbox, retriever, memory, args.max_tokens, args.temperature,
                            rag_k=args.rag_k)  # fmt: skip
        results[method] = list(done.get(method, []))
        run_method(args, executor, method, problems, results[method], choose, memory_file, save)
        rows = results[method]
        totals[method] = summarize(rows) | {key: sum(r[key] for r in rows) for key in ("llm_calls", "tokens", "seconds")}

    write_json(output, report(args, action_llm, memory_llm, problems, totals, results, finished=True))
    print(table(totals))
    print(f"results: {output}", flush=True)


def run_method(args: Args, executor, method: str, problems: list[dict], rows: list, choose, memory_file: str,
               save) -> None:  # fmt: skip
    """Runs ``method`` on each problem that ``rows`` (its rows so far) lacks, appending a row per problem
    and saving the results (``save``) after each, so that --resume goes on from there."""
    finished = {row["problem"] for row in rows}
    for i, problem in enumerate(problems):
        if problem["name"] in finished:
            continue
        start = time.perf_counter()
        calls, tokens = executor.usage.calls, executor.usage.prompt_tokens + executor.usage.completion_tokens
        episode = rollout(executor, problem, method, args.t_max, choose if method in PLANNED else None,
                          learn_memory=args.online_memory)  # fmt: skip
        last = episode.attempts[-1]
        row = {"problem": problem["name"], **outcome(episode), "actions": [a.action for a in episode.attempts],
               "llm_calls": executor.usage.calls - calls,
               "tokens": executor.usage.prompt_tokens + executor.usage.completion_tokens - tokens,
               "seconds": time.perf_counter() - start, "feedback": truncate(last.feedback, 600)}  # fmt: skip
        rows.append(row)
        gap = "-" if last.gap is None else f"{100 * last.gap:.1f}%"
        print(f"[{method} {i + 1}/{len(problems)}] {problem['name']}: success={episode.success} "
              f"ran={last.ran} gap={gap} steps={row['steps']} ({','.join(row['actions'])}) "
              f"{row['seconds']:.0f}s", flush=True)  # fmt: skip
        if args.online_memory and args.planner:
            executor.memory.save(memory_file)
        save(finished=False)


def report(args: Args, action_llm, memory_llm, problems: list[dict], totals: dict, results: dict, finished: bool) -> dict:
    """The results file: the settings, the models, the problems, the totals of the methods done and every row;
    ``finished`` false while the run goes on (--resume reads it then)."""
    return {"args": asdict(args), "action_model": action_llm.name, "memory_model": memory_llm.name,
            "problems": [p["name"] for p in problems], "finished": finished, "totals": totals, "per_problem": results}


def cli() -> None:
    """The ``ppo-or-rlea-eval`` console command."""
    main(tyro.cli(Args), given_fields(Args, sys.argv[1:]))


if __name__ == "__main__":
    cli()
