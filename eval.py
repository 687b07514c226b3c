"""Evaluate a checkpoint: decode a test set, report tour length, optimality gap and time.

    python eval.py --checkpoint runs/<run>/ckpt/1000.pt                        # Kool test set, greedy
    python eval.py --checkpoint ../shared/checkpoints/rlor/tsp50-v0-12000.pt --decode multi-greedy --augment 8
    python eval.py --checkpoint ckpt.pt --data ../shared/benchmarks/tsplib --references ../shared/benchmarks/tsplib/optima.csv
    python eval.py --checkpoint checkpoints/mtvrp20.pt --variant vrptw --reference-solver pyvrp --num-instances 200
    python eval.py --checkpoint checkpoints/vrptw20.pt --data ../shared/benchmarks/solomon
    python eval.py --checkpoint checkpoints/families/op20.pt --decode multi-greedy --reference-solver ortools --num-instances 200

Checkpoints written by ppo_or.py and the published RLOR state dicts are both accepted (read with
weights_only=True); the problem and size come from the checkpoint.
"""

import math
import os
import re
import sys
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
import tyro
from ppoor.data.datasets import STANDARD_SETS, DataError, Dataset, load_data
from ppoor.data.references import shipped_name, shipped_references, solve_reference
from ppoor.data.solution_files import split_routes, write_solution
from ppoor.envs import ENV_IDS, ENV_VARIANTS, VECTOR_ENVS
from ppoor.envs.vrp import MIXES, VARIANTS
from ppoor.models import CheckpointError, keep_freed_memory, latest_checkpoint, load_agent
from ppoor.models.runs import (
    MAX_SECONDS,
    MAX_SEED,
    MAX_THREADS,
    check_numbers,
    check_writable,
    fail,
    memory_problem,
    write_json,
)
from ppoor.search import decode
from ppoor.search.solutions import INTEGER_ROUNDINGS, tour_length
from tqdm import tqdm


@dataclass
class Args:
    """Evaluates a checkpoint of ppo_or.py (or the RLOR authors') by greedy, multi-greedy or sampling
    decoding on the standard test sets, .npz files or TSPLIB / CVRPLIB / Solomon files, with gaps to references.
    Examples: `python eval.py --checkpoint runs/<run> --decode multi-greedy`;
    `python eval.py --checkpoint tsp50.pt --data tsplib/ --references tsplib/optima.csv --augment 8`."""

    checkpoint: str
    """path of a ppo_or.py checkpoint (or a run folder: its latest checkpoint) or of a published RLOR agent state dict"""
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
    decode: Literal["greedy", "multi-greedy", "sampling"] = "greedy"
    """greedy (one trajectory), multi-greedy (one greedy trajectory per start node) or sampling"""
    num_starts: int | None = None
    """multi-greedy: number of start nodes; None takes every node for TSP, every customer for CVRP and VRP"""
    num_samples: int = 16
    """sampling: trajectories sampled per instance"""
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
    reencode: bool = False
    """re-run the encoder at every step (the original RLOR evaluation; for comparison only)"""
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
    "augment": (1, 8),
    "batch_size": (1, math.inf),
    "seed": (0, MAX_SEED),
    "solver_seconds": (0.01, MAX_SECONDS),
    "threads": (1, MAX_THREADS),
    "plot_instances": (1, 100),
}
"""The closed range of every numeric argument (``models.runs.check_numbers``)."""


def check_args(args: Args) -> None:
    """Every argument is checked, and every output path tried, before any work."""
    problems = check_numbers(args, LIMITS)
    if args.augment not in (1, 8) and not problems:
        problems.append(f"--augment must be 1 or 8 (all the symmetries of the square), got {args.augment}")
    if args.output and not args.output.endswith(".json"):
        problems.append(f"--output {args.output}: the results are written as JSON; name a .json file")
    if args.plot and os.path.splitext(args.plot)[1].lower() not in PLOT_FORMATS:
        problems.append(f"--plot {args.plot}: name an image file ({', '.join(PLOT_FORMATS)})")
    fail(problems)
    for name in ("output", "plot"):
        path = getattr(args, name)
        if path:
            check_writable(f"--{name}", path)
    if args.output_solutions:
        check_writable("--output-solutions", args.output_solutions, folder=True)


def decode_memory(args: Args, nodes: int, instances: int) -> float:
    """Bytes decoding needs, estimated: the encoder's self-attention over A = ``nodes`` + 1 actions
    (8 heads, scores and softmax of three layers' worth at once, float32) and the decoder's attention of
    every trajectory (N starts or samples) over the actions, for a batch of min(--batch-size, instances)
    instances in --augment copies."""
    actions = nodes + 1
    batch = min(args.batch_size, instances) * args.augment
    trajectories = {"greedy": 1, "multi-greedy": args.num_starts or actions, "sampling": args.num_samples}[args.decode]
    return 4.0 * 8 * batch * (3 * actions**2 + 4 * trajectories * actions)


COST_NAMES = {"op": "mean -prize", "pctsp": "mean cost", "pcvrp": "mean cost"}
"""The column of the mean cost where it is not a length: minus the collected prize (OP), length +
penalties of skipped customers (PCTSP), length + uncollected prizes (PCVRP)."""


def variants_of(problem: str) -> set:
    """The variants of a problem's test sets (the VRP's 48 and its mixes)."""
    if problem == "mtvrp":
        return {*VARIANTS, *MIXES}
    return {v for env_id, v in ENV_VARIANTS.items() if ENV_IDS[env_id] == problem}


PLOT_FORMATS = (".png", ".pdf", ".svg", ".jpg", ".jpeg")
IMPLAUSIBLE_GAP = 5.0  # percent below the reference on most instances: the references are for other data


def check_memory(args: Args, nodes: int, instances: int, device: torch.device) -> None:
    if problem := memory_problem(decode_memory(args, nodes, instances), device, f"decoding {nodes}-node instances"):
        sys.exit(f"error: {problem} (lower --batch-size, --num-starts or --augment, or evaluate smaller instances)")


def evaluate_group(agent, group: Dataset, args: Args, progress) -> dict:
    """Decodes one group of equal-size instances; lengths and references in reported units."""
    result = decode(
        agent,
        group.instances,
        args.decode,
        num_starts=args.num_starts,
        num_samples=args.num_samples,
        augment_copies=args.augment,
        batch_size=args.batch_size,
        seed=args.seed,
        reencode=args.reencode,
        progress=progress.update,
    )
    lengths = np.array([group.reported_length(i, tour) for i, tour in enumerate(result.tours)])
    references = group.references.copy()
    if args.reference_solver:
        references = np.array(
            [solve_reference(group, i, args.reference_solver, args.solver_seconds) for i in range(len(lengths))]
        )
    return {"lengths": lengths, "references": references, "tours": result.tours, "seconds": result.seconds}


def plot_routes(path: str, groups: list, results: list, count: int, label: str) -> None:
    """Draws the first ``count`` solutions into ``path``: one panel per instance titled with its name
    and cost, each route in its own colour with a legend entry (route number, load where the problem
    has one, length), the depot(s) as red squares and a TSP tour's start as a red star, backhaul
    customers and pickups as triangles, time windows as labels (20 customers or fewer), prizes as
    marker areas; the figure's title names ``label`` (the checkpoint and the decoding)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    items = [(g, r, i) for g, r in zip(groups, results, strict=True) for i in range(len(g.names))][:count]
    fig, axes = plt.subplots(1, len(items), figsize=(5 * len(items), 6.5), squeeze=False)
    for ax, (group, result, i) in zip(axes[0], items, strict=True):
        points = group.node_points(i)
        tour = result["tours"][i]
        depots = len(group.instances["depots"][i]) if group.problem == "mtvrp" else 0 if group.problem == "tsp" else 1
        paths = route_paths(group, i, tour, depots)
        colours = plt.get_cmap("tab10" if len(paths) <= 10 else "tab20")
        for k, (nodes, text) in enumerate(paths):
            free = group.free_returns(i)
            for a, b in zip(nodes[:-1], nodes[1:], strict=True):  # an open route's free return is dotted
                style = ":" if free and b == 0 else "-"
                ax.plot(points[[a, b], 0], points[[a, b], 1], style, lw=1.2, color=colours(k % colours.N))
            ax.plot([], [], "-", color=colours(k % colours.N), label=text)
        draw_nodes(ax, group, i, points, tour, max(depots, 0))
        if depots:
            ax.scatter(
                points[:depots, 0], points[:depots, 1], s=70, marker="s", color="tab:red", zorder=5, label="depot"
            )
        else:
            ax.scatter(*points[tour[0]], s=120, marker="*", color="tab:red", zorder=5, label="start")
        decimals = 0 if group.rounding in INTEGER_ROUNDINGS else 1 if group.rounding == "tenth-down" else 4
        cost = COST_NAMES.get(group.problem, "length").removeprefix("mean ")
        ax.set_title(f"{group.names[i]}: {cost} {result['lengths'][i]:,.{decimals}f}", fontsize=10)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.01), ncol=2, frameon=False)
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(f"{label}: {items[0][0].problem.upper()} {', '.join(g.names[i] for g, _, i in items)}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def route_paths(group: Dataset, i: int, tour: np.ndarray, depots: int) -> list[tuple[np.ndarray, str]]:
    """The node sequences [L] of instance ``i``'s routes (depot to depot; a TSP tour closed) and each
    one's legend text: route number, load (demand as a share of the capacity) and length."""
    points = group.node_points(i)
    if group.problem == "tsp":
        nodes = np.concatenate([tour, tour[:1]])
        return [(nodes, f"tour, {len(tour)} nodes")]
    demand = route_demand(group, i)
    paths = []
    for k, route in enumerate(split_routes(tour, depots)):
        depot = route[0] if depots > 1 else 0
        customers = route[1:] if depots > 1 else route
        nodes = np.array([depot, *customers, depot])
        edges = tour_length(points, nodes[:-1] if group.free_returns(i) else nodes, closed=False, rounding=group.rounding)
        text = f"route {k + 1}: {len(customers)} stops"
        if demand is not None:
            text += f", load {demand[np.array(customers) - depots].sum():.0%}"
        paths.append((nodes, f"{text}, length {edges:,.{0 if group.rounding in INTEGER_ROUNDINGS else 2}f}"))
    return paths


def route_demand(group: Dataset, i: int) -> np.ndarray | None:
    """Each customer's demand as a share of the capacity [n] (linehaul plus backhaul; all resources
    summed for MRCVRP), None where the problem has no loads."""
    inst = group.instances
    if "demand" in inst:
        demand = inst["demand"][i]
        return demand.sum(-1) if demand.ndim > 1 else demand
    if "demand_linehaul" in inst:
        return inst["demand_linehaul"][i] + inst["demand_backhaul"][i]
    return None


def draw_nodes(ax, group: Dataset, i: int, points: np.ndarray, tour: np.ndarray, depots: int) -> None:
    """The nodes of instance ``i`` after its ``depots`` (TSP: all of them): visited ones black, skipped
    ones (prize collecting) hollow grey, with marker areas by prize; backhaul customers green
    triangles; pickups green triangles and deliveries purple upside-down triangles with a thin dashed
    line to their partner (pickup and delivery); time windows as [open, close] labels when there are
    20 customers or fewer."""
    customers = np.arange(depots, len(points))
    skipped = np.setdiff1d(customers, tour) if group.problem in ("op", "pctsp", "pcvrp") else np.array([], int)
    shown = np.setdiff1d(customers, skipped)
    sizes = np.full(len(points), 10.0)
    if "prize" in group.instances:
        prize = group.instances["prize"][i]
        sizes[depots:] = 10 + 60 * prize / max(prize.max(), 1e-9)
        ax.scatter([], [], s=40, color="black", label="marker area: prize")
    ax.scatter(points[shown, 0], points[shown, 1], s=sizes[shown], color="black", zorder=3)
    if len(skipped):
        ax.scatter(points[skipped, 0], points[skipped, 1], s=sizes[skipped], facecolors="none", edgecolors="grey",
                   zorder=3, label="skipped")  # fmt: skip
    if group.problem == "mtvrp":
        backhauls = np.flatnonzero(group.instances["demand_backhaul"][i] > 0) + 1
        if len(backhauls):
            ax.scatter(points[backhauls, 0], points[backhauls, 1], s=28, marker="^", color="tab:green", zorder=4,
                       label="backhaul")  # fmt: skip
    if group.problem == "pdp":
        half = (len(points) - 1) // 2
        pickups, deliveries = np.arange(1, half + 1), np.arange(half + 1, 2 * half + 1)
        for a, b in zip(pickups, deliveries, strict=True):
            ax.plot(points[[a, b], 0], points[[a, b], 1], "--", lw=0.4, color="grey")
        ax.scatter(
            points[pickups, 0], points[pickups, 1], s=28, marker="^", color="tab:green", zorder=4, label="pickup"
        )
        ax.scatter(points[deliveries, 0], points[deliveries, 1], s=28, marker="v", color="tab:purple", zorder=4,
                   label="delivery")  # fmt: skip
    windows = group.instances.get("time_windows")
    if windows is not None and len(customers) <= 20 and np.isfinite(windows[i][depots:, 1]).any():
        scale = 1.0 if group.points is None else (points.max(0) - points.min(0)).max()
        for node in customers:
            row = node if len(windows[i]) == len(points) else node - depots  # depot rows first, or customers only
            low, high = windows[i][row] * scale
            if np.isfinite(high):
                ax.annotate(f"[{low:.1f}, {high:.1f}]", points[node], fontsize=6, color="tab:blue",
                            xytext=(3, 3), textcoords="offset points")  # fmt: skip


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


def main(args: Args) -> None:
    check_args(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    keep_freed_memory()
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
    try:
        checkpoint = latest_checkpoint(args.checkpoint)
        if os.path.isdir(args.checkpoint):
            print(f"using {checkpoint} (the latest checkpoint of {args.checkpoint})", flush=True)
        agent, ckpt = load_agent(checkpoint, problem=args.problem, device=device)
        problem = ckpt["problem"]
        variants = variants_of(problem)
        if args.variant and args.variant not in variants:
            raise ValueError(
                f"--variant {args.variant} does not fit this {problem.upper()} model"
                + (f" (its variants: {', '.join(sorted(variants))})" if variants else " (it has no variants)")
            )
        variant = args.variant or ENV_VARIANTS.get(
            ckpt.get("args", {}).get("env_id"), "classic" if problem == "mtvrp" else None
        )
        size = args.num_nodes or ckpt["num_nodes"]
        if args.data in STANDARD_SETS:  # before drawing the set: the size and count are known
            check_memory(args, size, args.num_instances or 1, device)
        groups = load_data(args.data, problem, size, args.num_instances, args.references, variant)
        if args.data in STANDARD_SETS and args.references is None and args.reference_solver is None:
            split = STANDARD_SETS[args.data]
            shipped = shipped_references(problem, size, split, len(groups[0].names), variant)
            if shipped is not None:
                groups[0].references = shipped
                print(f"references: data/reference_lengths/{shipped_name(problem, size, split, variant)} (shipped)")
        for group in groups:
            check_memory(args, group.num_nodes, len(group.names), device)
        for group in groups:
            if args.decode == "multi-greedy" and args.num_starts and args.num_starts > group.num_nodes:
                raise ValueError(
                    f"--num-starts {args.num_starts} exceeds the {group.num_nodes} start nodes of {group.names[0]}"
                    f" ({'nodes' if problem == 'tsp' else 'customers'})"
                )
        total = sum(len(g.names) for g in groups)
        with tqdm(total=total, desc=f"{args.decode} x{args.augment}", unit="inst", disable=None) as progress:
            results = [evaluate_group(agent, g, args, progress) for g in groups]
    except (CheckpointError, DataError, ValueError, ImportError) as exc:
        sys.exit(f"error: {exc}")

    names = [n for g in groups for n in g.names]
    lengths = np.concatenate([r["lengths"] for r in results])
    references = np.concatenate([r["references"] for r in results])
    gaps = 100 * (lengths - references) / np.abs(references)  # costs may be negative (orienteering: minus the prize)
    seconds = sum(r["seconds"] for r in results)
    known = np.isfinite(gaps)
    mean_gap = float(gaps[known].mean()) if known.any() else None
    if known.any() and (gaps[known] < -IMPLAUSIBLE_GAP).mean() > 0.5:
        sys.exit(
            f"error: the references do not fit these instances: {(gaps[known] < -IMPLAUSIBLE_GAP).sum()} of "
            f"{known.sum()} tours are over {IMPLAUSIBLE_GAP:g}% shorter than their reference (mean gap {mean_gap:.2f}%); "
            "are they for another size or data set?"
        )

    decoding = args.decode + (f" x{args.augment} aug" if args.augment > 1 else "")
    what = {"mtvrp": "VRP"}.get(problem, problem.upper())
    if variant in variants_of(problem) and args.data in STANDARD_SETS:
        what += f", variant {variant}"
    print(f"checkpoint {checkpoint} ({what}), data {args.data}")
    print(
        f"{'instances':>10} {'decode':>22} {COST_NAMES.get(problem, 'mean length'):>12} {'mean gap':>9} {'time':>9} {'per inst.':>10}"
    )
    gap_text = f"{mean_gap:8.3f}%" if mean_gap is not None else f"{'-':>9}"
    print(
        f"{len(lengths):>10} {decoding:>22} {lengths.mean():>12.4f} {gap_text} {seconds:>8.2f}s {1000 * seconds / len(lengths):>8.2f}ms"
    )
    if known.any() and not known.all():
        print(f"(gap over the {known.sum()} instances with a reference)")
    if len(groups) > 1 or groups[0].points is not None:
        for name, length, ref, gap in zip(names, lengths, references, gaps, strict=True):
            print(f"  {name:<16} {length:>12.2f}" + (f" {ref:>12.2f} {gap:7.2f}%" if np.isfinite(ref) else ""))
        print_classes(names, gaps)

    if args.output:
        out = {
            "checkpoint": str(checkpoint),
            "data": args.data,
            "problem": problem,
            "decode": args.decode,
            "augment": args.augment,
            "num_instances": len(lengths),
            "mean_length": float(lengths.mean()),
            "lengths": lengths.tolist(),
            "names": names,
            "seconds": seconds,
            "tours": [t.tolist() for r in results for t in r["tours"]],
        }
        if mean_gap is not None:
            out.update(mean_gap=mean_gap, gaps=[float(g) if np.isfinite(g) else None for g in gaps])
            out["references"] = [float(r) if np.isfinite(r) else None for r in references]
        write_json(args.output, out, indent=None)
        print(f"wrote {args.output}")
    if args.plot:
        plot_routes(args.plot, groups, results, args.plot_instances, f"{checkpoint.name}, {decoding}")
        print(f"wrote {args.plot}")
    if args.output_solutions:
        written = [
            write_solution(args.output_solutions, group, i, result["tours"][i], result["lengths"][i])
            for group, result in zip(groups, results, strict=True)
            for i in range(len(group.names))
        ]
        print(f"wrote {len(written)} solution files to {args.output_solutions} (e.g. {written[0].name})")


def cli() -> None:
    """The ``ppo-or-eval`` console command."""
    try:
        main(tyro.cli(Args))
    except KeyboardInterrupt:
        sys.exit("interrupted: nothing was written")


if __name__ == "__main__":
    cli()
