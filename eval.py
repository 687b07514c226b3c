"""Evaluate a checkpoint: decode a test set, report tour length, optimality gap and time.

    python eval.py --checkpoint runs/<run>/ckpt/1000.pt                        # Kool test set, greedy
    python eval.py --checkpoint ../shared/checkpoints/rlor/tsp50-v0-12000.pt --decode multi-greedy --augment 8
    python eval.py --checkpoint ckpt.pt --data ../shared/benchmarks/tsplib --references ../shared/benchmarks/tsplib/optima.csv
    python eval.py --checkpoint checkpoints/mtvrp20.pt --variant vrptw --reference-solver pyvrp --num-instances 200
    python eval.py --checkpoint checkpoints/vrptw20.pt --data ../shared/benchmarks/solomon
    python eval.py --data ../shared/benchmarks/cvrplib --decode multi-greedy --augment 8   # cvrp-general, polished
    python eval.py --checkpoint checkpoints/families/op20.pt --decode multi-greedy --reference-solver ortools --num-instances 200

Checkpoints written by ppo_or.py and the published RLOR state dicts are both accepted (read with
weights_only=True); the problem and size come from the checkpoint. Without --checkpoint, TSPLIB,
CVRPLIB and Solomon files are decoded by the shipped model of their kind (FILE_MODELS).
"""

import math
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch
import tyro
from ppoor.checkers.tours import COST_NAMES
from ppoor.data.datasets import SHIPPED, STANDARD_SETS, DataError
from ppoor.data.plot_routes import plot_routes
from ppoor.data.solution_files import write_solution
from ppoor.envs import ENV_VARIANTS, VECTOR_ENVS
from ppoor.envs.vrp import MIXES, VARIANTS
from ppoor.models import CheckpointError, compiler_problem
from ppoor.search.decoding import BEAM, DECODES, SAMPLED, Decoding
from ppoor.search.polish import MAX_POLISH, POLISHED, polish
from ppoor.search.solver import Model, variants_of
from ppoor.solvers.references import pyvrp
from ppoor.training.runs import (
    MAX_SECONDS,
    MAX_SEED,
    MAX_THREADS,
    check_numbers,
    check_writable,
    fail,
    write_json,
)
from ppoor.training.runtime import keep_freed_memory
from tqdm import tqdm


@dataclass
class Args:
    """Evaluates a checkpoint of ppo_or.py (or the RLOR authors') by greedy, multi-greedy or sampling
    decoding on the standard test sets, .npz files or TSPLIB / CVRPLIB / Solomon files, with gaps to references.
    Examples: `python eval.py --checkpoint runs/<run> --decode multi-greedy`;
    `python eval.py --checkpoint tsp50.pt --data tsplib/ --references tsplib/optima.csv --augment 8`."""

    checkpoint: str | None = None
    """path of a ppo_or.py checkpoint (or a run folder: its latest checkpoint), a shipped model's name (tsp50) or a
    published RLOR agent state dict; None: for files, the shipped model for their kind (FILE_MODELS)"""
    data: str = "test"
    """test / val (the standard sets: Kool et al.'s for TSP and CVRP, regenerated bit-exactly; the multi-task
    RouteFinder's for VRP variants; kool-test / kool-val are aliases), an .npz file, a .tsp / .vrp / Solomon .txt
    file or a folder of them"""
    problem: Literal[tuple(VECTOR_ENVS)] | None = None
    """the problem; None takes the checkpoint's (a given one must match it)"""
    variant: Literal[tuple(dict.fromkeys([*VARIANTS, *MIXES, *ENV_VARIANTS.values()]))] | None = None
    """the variant of the test / val set where the problem has several: VRP models one of the 48 VRP variants
    (RouteFinder's test sets) or a mix (all: one of the 48 per instance, classic: one of the 16), pickup and delivery pdp / cpdp, orienteering the prize type const / unif /
    dist; None takes the checkpoint's training variant"""
    num_nodes: int | None = None
    """size of the test / val instances; None takes the checkpoint's training size"""
    num_instances: int | None = None
    """evaluate only the first K instances; None evaluates all (the Kool sets hold 10,000, the VRP sets 1,000)"""
    decode: Literal[DECODES] = "greedy"
    """greedy (one trajectory), multi-greedy (one greedy trajectory per start node), sampling, multi-sampling
    (one sampled trajectory per start node), beam (beam search of --beam-width) or multi-beam (a beam of
    --beam-width per start node)"""
    num_starts: int | None = None
    """multi-greedy, multi-sampling and multi-beam: number of start nodes; None takes every node for TSP, every
    customer for CVRP and VRP"""
    beam_width: int = 4
    """beam and multi-beam: the partial solutions each beam keeps"""
    num_samples: int = 16
    """sampling: trajectories sampled per instance"""
    temperature: float = 1.0
    """sampling and multi-sampling: the policy's logits are divided by this (below 1 sharper, above flatter)"""
    top_k: int | None = None
    """sampling and multi-sampling: draw only among the k most probable actions; None: all"""
    top_p: float | None = None
    """sampling and multi-sampling: draw only among the most probable actions whose probability reaches p
    (nucleus sampling); None: all"""
    augment: int = 1
    """decode each instance under this many of the 8 symmetries of the unit square (1 or 8); best kept"""
    batch_size: int = 256
    """instances decoded at once"""
    seed: int = 0
    """seed of the sampling decoder"""
    references: str | None = None
    """reference lengths: a CSV (first column instance name, last column value, a header row) or an .npy;
    without it (and --reference-solver) the standard sets take the lengths shipped for them, where any
    (data/reference_lengths: Kool's TSP / CVRP validation sets and the first 1,000 / 200 of their test sets,
    RouteFinder's VRP test sets at 50 and 100)"""
    reference_solver: Literal["lkh", "pyvrp", "ortools"] | None = None
    """compute references on the fly: lkh (elkai, TSP), pyvrp (CVRP, every VRP variant, MRCVRP, PCVRP) or ortools
    (PDP by OR-Tools routing, OP and PCTSP by CP-SAT); optional extras"""
    solver_seconds: float = 1.0
    """pyvrp and ortools: time limit per instance"""
    polish: Literal["files", "all", "none"] = "files"
    """polish the decoded solutions (search.polish: TSP by 2-opt and or-opt; CVRP, the VRP variants, MRCVRP and
    PCVRP by PyVRP's local search) and print them as a row of their own, so that the network's own solutions
    stay visible: files (TSPLIB / CVRPLIB / Solomon files, not generated or .npz data), all, or none"""
    polish_seconds: float | None = 1.0
    """the polish's iterated local search per instance, in seconds per 200 nodes (from the decoded solution:
    2-opt and or-opt after double-bridge kicks for TSP, PyVRP's iterated local search for the others);
    None: stop at the first local optimum"""
    distance_prior: float | None = None
    """beta of the decoder's prior toward near nodes (models.attention_model.distance_bias; 0 turns it off);
    None: the model's own"""
    compile: bool = False
    """torch.compile the decode step (inductor; needs a C++ compiler): the same solutions; each new batch shape
    compiles first (seconds); on the CPU some decodes ran up to 60% faster, others up to 20% slower"""
    cuda: bool = True
    """use cuda when available"""
    threads: int | None = None
    """torch CPU threads; None leaves torch's own choice"""
    output: str | None = None
    """write the results (lengths, gaps, tours, time) to this JSON file"""
    plot: str | None = None
    """draw the routes of the first instances into this image file (matplotlib)"""
    plot_instances: int = 4
    """how many instances --plot draws"""
    output_solutions: str | None = None
    """write each instance's solution into this folder: a TSPLIB .tour for TSP, a CVRPLIB / VRPLIB .sol
    (vrplib's writer: routes of customer numbers, depot 0, and the cost) for the others"""


LIMITS = {
    "num_nodes": (2, 100_000),
    "num_instances": (1, math.inf),
    "num_starts": (1, math.inf),
    "num_samples": (1, 100_000),
    "beam_width": (1, 100_000),
    "temperature": (1e-3, 100.0),
    "top_k": (1, math.inf),
    "top_p": (1e-9, 1.0),
    "augment": (1, 8),
    "batch_size": (1, math.inf),
    "seed": (0, MAX_SEED),
    "solver_seconds": (0.01, MAX_SECONDS),
    "polish_seconds": (0.001, MAX_POLISH),
    "distance_prior": (0.0, 100.0),
    "threads": (1, MAX_THREADS),
    "plot_instances": (1, 100),
}
"""The closed range of every numeric argument (``training.runs.check_numbers``)."""


def check_args(args: Args) -> None:
    """Every argument is checked, and every output path tried, before any work."""
    problems = check_numbers(args, LIMITS)
    if args.augment not in (1, 8) and not problems:
        problems.append(f"--augment must be 1 or 8 (all the symmetries of the square), got {args.augment}")
    if args.output and not args.output.endswith(".json"):
        problems.append(f"--output {args.output}: the results are written as JSON; name a .json file")
    if args.compile and (problem := compiler_problem()):
        problems.append(f"--compile: {problem}")
    if args.plot and os.path.splitext(args.plot)[1].lower() not in PLOT_FORMATS:
        problems.append(f"--plot {args.plot}: name an image file ({', '.join(PLOT_FORMATS)})")
    fail(problems)
    for name in ("output", "plot"):
        path = getattr(args, name)
        if path:
            check_writable(f"--{name}", path)
    if args.output_solutions:
        check_writable("--output-solutions", args.output_solutions, folder=True)


PLOT_FORMATS = (".png", ".pdf", ".svg", ".jpg", ".jpeg")


FILE_MODELS = {".tsp": "tsp-general", ".vrp": "cvrp-general", ".txt": "vrptw-solomon"}
"""The shipped model eval.py decodes a file with when no --checkpoint is given, by the file's kind: TSPLIB,
CVRPLIB, Solomon."""


def file_model(data: str) -> str:
    """The shipped model for the files ``data`` names (``FILE_MODELS``); ValueError where they are not files of
    one kind."""
    path = Path(data)
    if not path.exists():
        raise ValueError(f"--data {data}: no such file or folder (or use test / val)")
    kinds = {path.suffix.lower()} if path.is_file() else set()
    if path.is_dir():
        kinds = {f.suffix.lower() for f in path.iterdir() if f.is_file()} & FILE_MODELS.keys()
    if len(kinds & FILE_MODELS.keys()) != 1:
        raise ValueError(
            f"--checkpoint is needed for --data {data}: without it, a TSPLIB .tsp or CVRPLIB .vrp file (or a folder "
            "of one kind) is decoded by the shipped model for its kind"
        )
    return FILE_MODELS[kinds.pop()]


def files(data: str) -> bool:
    """Whether ``data`` names TSPLIB / CVRPLIB / Solomon files (one, or a folder), which are polished by default."""
    return data not in STANDARD_SETS and not data.lower().endswith(".npz")


def benchmark_class(name: str) -> str | None:
    """The class of a Solomon instance (C1, C2, R1, R2, RC1, RC2), None for other names."""
    match = re.fullmatch(r"(RC|C|R)([12])\d\d", name.upper())
    return match.group(1) + match.group(2) if match else None


def print_classes(names: list, gaps: np.ndarray) -> None:
    """Mean gap per Solomon class, where the instances have Solomon names and gaps."""
    classes: dict[str, list] = {}
    for name, gap in zip(names, gaps, strict=True):
        if (kind := benchmark_class(name)) and np.isfinite(gap):
            classes.setdefault(kind, []).append(gap)
    if classes:
        print(
            "  mean gap per class: "
            + ", ".join(f"{k} {np.mean(v):.2f}% ({len(v)})" for k, v in sorted(classes.items()))
        )


def decoding_of(args: Args) -> Decoding:
    """The decoding the flags describe."""
    return Decoding(
        args.decode, augment=args.augment, num_starts=args.num_starts, num_samples=args.num_samples,
        beam_width=args.beam_width, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed,
        batch_size=args.batch_size, distance_prior=args.distance_prior,
    )  # fmt: skip


def load_model(args: Args) -> tuple[Model, bool]:
    """The model to decode with (the shipped one for the files' kind where --checkpoint is left out) and
    whether its solutions are polished (--polish, where the polish's solver is installed)."""
    checkpoint = args.checkpoint or file_model(args.data)
    device = "cuda" if torch.cuda.is_available() and args.cuda else "cpu"
    model = Model(checkpoint, problem=args.problem, device=device, compile=args.compile)
    if os.path.isdir(checkpoint):
        print(f"using {model.path} (the latest checkpoint of {checkpoint})", flush=True)
    if args.polish == "all" and model.problem not in POLISHED:
        raise ValueError(
            f"--polish all: the polish takes {', '.join(p.upper() for p in POLISHED)} solutions; this is a "
            f"{model.problem.upper()} model"
        )
    polishing = args.polish == "all" or (args.polish == "files" and files(args.data) and model.problem in POLISHED)
    if polishing and model.problem != "tsp":
        try:
            pyvrp()  # the local search's solver, before any decoding (an ImportError that says how to install it)
        except ImportError as exc:
            if args.polish == "all":
                raise
            print(f"not polished: {exc} (--polish none silences this)")
            polishing = False
    return model, polishing


def print_table(args: Args, model: Model, rows: list) -> None:
    """The results' table: one line per (label, ``Solutions``) of ``rows`` (decoded, then polished), then
    each named instance of files with its reference and gap, and the Solomon classes' mean gaps."""
    solutions, problem, variant = rows[0][1], model.problem, args.variant or model.variant
    if (solutions.reference_source or "").startswith(SHIPPED):
        print(f"references: {solutions.reference_source} (shipped)")
    what = {"mtvrp": "VRP"}.get(problem, problem.upper())
    if variant in variants_of(problem) and args.data in STANDARD_SETS:
        what += f", variant {variant}"
    print(f"checkpoint {model.path} ({what}), data {args.data}")
    print(
        f"{'instances':>10} {'decode':>28} {COST_NAMES.get(problem, 'mean length'):>12} {'mean gap':>9} {'time':>9} {'per inst.':>10}"
    )
    for label, row in rows:
        gap_text = f"{row.mean_gap:8.3f}%" if row.mean_gap is not None else f"{'-':>9}"
        print(
            f"{len(row.lengths):>10} {label:>28} {row.lengths.mean():>12.4f} {gap_text} {row.seconds:>8.2f}s "
            f"{1000 * row.seconds / len(row.lengths):>8.2f}ms"
        )
    known = np.isfinite(solutions.gaps)
    if known.any() and not known.all():
        print(f"(gap over the {known.sum()} instances with a reference)")
    groups = solutions.groups
    if len(groups) > 1 or groups[0].points is not None:
        for name, length, ref, gap in zip(solutions.names, solutions.lengths, solutions.references, solutions.gaps,
                                          strict=True):  # fmt: skip
            print(f"  {name:<16} {length:>12.2f}" + (f" {ref:>12.2f} {gap:7.2f}%" if np.isfinite(ref) else ""))
        print_classes(solutions.names, solutions.gaps)


def results_json(args: Args, model: Model, solutions, polished) -> dict:
    """What --output writes: the settings, every length, gap, reference and tour, and the polished ones."""
    lengths, gaps = solutions.lengths, solutions.gaps
    out = {
        "checkpoint": str(model.path),
        "data": args.data,
        "problem": model.problem,
        "decode": args.decode,
        "augment": args.augment,
        **({"temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p} if args.decode in SAMPLED else {}),
        **({"beam_width": args.beam_width} if args.decode in BEAM else {}),
        "num_instances": len(lengths),
        "mean_length": float(lengths.mean()),
        "lengths": lengths.tolist(),
        "names": solutions.names,
        "seconds": solutions.seconds,
        "tours": [t.tolist() for t in solutions.tours],
    }
    if solutions.mean_gap is not None:
        out.update(mean_gap=solutions.mean_gap, gaps=[float(g) if np.isfinite(g) else None for g in gaps])
        out["references"] = [float(r) if np.isfinite(r) else None for r in solutions.references]
    if polished is not None:
        out["polished"] = {"lengths": polished.lengths.tolist(), "mean_gap": polished.mean_gap,
                           "seconds": polished.seconds, "tours": [t.tolist() for t in polished.tours]}  # fmt: skip
    return out


def main(args: Args, given: set[str] | None = None) -> None:
    """Evaluates (``given``, the fields given on the command line, is unused: nothing resumes)."""
    check_args(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    keep_freed_memory()
    try:
        decoding = decoding_of(args)
        model, polishing = load_model(args)
        total = args.num_instances if args.data in STANDARD_SETS and args.num_instances else None
        with tqdm(total=total, desc=f"{args.decode} x{args.augment}", unit="inst", disable=None) as progress:
            solutions = model.solve(
                args.data, decoding, num_instances=args.num_instances, num_nodes=args.num_nodes, variant=args.variant,
                references=args.references, reference_solver=args.reference_solver,
                solver_seconds=args.solver_seconds, progress=progress.update,
            )  # fmt: skip
    except (CheckpointError, DataError, ValueError, ImportError) as exc:
        sys.exit(f"error: {exc}")
    label = decoding.label()
    rows, polished = [(label, solutions)], None
    if polishing:
        polished = polish(solutions, args.polish_seconds, args.seed)
        rows.append((label + polished.decode.removeprefix(solutions.decode), polished))
    print_table(args, model, rows)
    if args.output:
        write_json(args.output, results_json(args, model, solutions, polished), indent=None)
        print(f"wrote {args.output}")
    if args.plot:
        plot_routes(args.plot, solutions, args.plot_instances, f"{model.path.name}, {label}")
        print(f"wrote {args.plot}")
    if args.output_solutions:
        written = [write_solution(args.output_solutions, *item) for item in solutions.items()]
        print(f"wrote {len(written)} solution files to {args.output_solutions} (e.g. {written[0].name})")


def cli() -> None:
    """The ``ppo-or-eval`` console command."""
    try:
        main(tyro.cli(Args))
    except KeyboardInterrupt:
        sys.exit("interrupted: nothing was written")


if __name__ == "__main__":
    cli()
