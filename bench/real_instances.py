"""Routes for real instances: the shipped models on TSPLIB, CVRPLIB X and Solomon files beside classical solvers.

For each benchmark folder (TSPLIB's 29 EUC_2D instances of 51-200 nodes against their optima,
CVRPLIB X's 33 of 101-251 nodes and Solomon's 56 VRPTW instances against the best known), every
model given (by default the model eval.py uses for files, and for TSP and CVRP the uniform-trained
100-node model before it) is decoded by multi-greedy with x8 augmentation, then polished
(search.polish, --polish-seconds per 200 nodes). Beside them, measured in the same run: PyVRP's
iterated local search from scratch on CVRP and VRPTW given the seconds per instance the first
model's decoding and polish took together (the same seconds), and
LKH (elkai, optional; it takes no time limit, its own seconds are printed). Each row prints its mean
gap, its seconds per instance (a polished row's include its decoding), and its gap's ratio to the
first model's decoded gap. Last, the published per-instance costs of other neural solvers in
bench/published.csv (each with its paper), scored on the same instances against the same references.

    python bench/real_instances.py                                   # ../shared/benchmarks, both tables
    python bench/real_instances.py --benchmarks tsplib --limit 5     # the first 5 TSPLIB files only
    python bench/real_instances.py --tsp-models tsp-general tsp100 --polish-seconds 0.5
"""

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
from ppoor.data.datasets import DataError
from ppoor.search import Decoding
from ppoor.search.polish import polish
from ppoor.search.solver import Model, Solutions
from ppoor.solvers.references import integer_distances, lkh_tour, pyvrp_tour, pyvrp_vrp_tour

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "benchmarks"
FOLDERS = {
    "tsplib": ("tsp", "optima.csv"),
    "cvrplib": ("cvrp", "best_known.csv"),
    "solomon": ("mtvrp", "best_known.csv"),
}
PUBLISHED = Path(__file__).with_name("published.csv")


def published_costs() -> dict[tuple[str, str], dict[str, float]]:
    """The costs of bench/published.csv: (method, benchmark) -> {instance: cost}."""
    costs: dict[tuple[str, str], dict[str, float]] = {}
    for line in PUBLISHED.read_text().splitlines():
        if not line.startswith(("#", "method,")):
            method, bench, instance, cost = line.rsplit(",", 3)
            costs.setdefault((method, bench), {})[instance] = float(cost)
    return costs


def published_rows(bench: str, names: list, references: np.ndarray) -> list[tuple[str, float, float]]:
    """(label, mean gap, NaN seconds) of each method in bench/published.csv that reports every one of
    ``names`` (the run's instances, in order) on ``bench``; gaps against the run's ``references``."""
    rows = []
    for (method, where), found in published_costs().items():
        if where == bench and all(name in found for name in names):
            gaps = 100 * (np.array([found[name] for name in names]) / references - 1)
            rows.append((f"{method} (published)", float(gaps.mean()), float("nan")))
    return rows


def model_rows(name: str, data: str, references: str, polish_seconds: float, limit: int | None) -> list:
    """(label, solutions) for one model: its decoded and its polished row (whose seconds count both)."""
    model = Model(name)
    decoded = model.solve(data, Decoding("multi-greedy", augment=8), references=references, num_instances=limit)
    return [
        (f"{name} multi-greedy x8", decoded),
        (f"{name} + polish {polish_seconds:g} s/200", polish(decoded, polish_seconds)),
    ]


def solver_row(problem: str, groups, references: np.ndarray, seconds: float) -> tuple[str, float, float] | None:
    """(label, mean gap, seconds per instance) of the classical solver at ``seconds`` per instance, or None
    where it is not installed."""
    start, lengths = time.perf_counter(), []
    try:
        for group in groups:
            for i in range(len(group.names)):
                if problem == "tsp":
                    tour = lkh_tour(integer_distances(group, i))
                elif problem == "cvrp":
                    tour = pyvrp_tour(group, i, seconds)
                else:
                    tour = pyvrp_vrp_tour(group, i, seconds, benchmark=True)
                lengths.append(group.reported_length(i, tour))
    except ImportError as exc:
        print(f"  ({exc})")
        return None
    gaps = 100 * (np.asarray(lengths) / references - 1)
    label = "LKH (elkai, 10 runs)" if problem == "tsp" else f"PyVRP from scratch, {seconds:.2f} s"
    return label, float(gaps.mean()), (time.perf_counter() - start) / len(lengths)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shared", default=str(SHARED), help="the folder holding tsplib/, cvrplib/ and solomon/")
    parser.add_argument("--benchmarks", nargs="+", default=list(FOLDERS), choices=list(FOLDERS))
    parser.add_argument("--tsp-models", nargs="+", default=["tsp-general", "tsp100"])
    parser.add_argument("--cvrp-models", nargs="+", default=["cvrp-general", "cvrp100"])
    parser.add_argument("--vrptw-models", nargs="+", default=["vrptw-solomon"])
    parser.add_argument("--polish-seconds", type=float, default=1.0, help="the polish's budget per 200 nodes")
    parser.add_argument("--limit", type=int, default=None, help="only the first K files of each folder")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    if not 0 < args.polish_seconds <= 3600 or (args.limit is not None and args.limit < 1) or args.threads < 1:
        sys.exit("error: --polish-seconds must be in (0, 3600], --limit and --threads at least 1")
    torch.set_num_threads(args.threads)
    for bench in args.benchmarks:
        problem, csv = FOLDERS[bench]
        folder = Path(args.shared) / bench
        if not folder.is_dir():
            sys.exit(f"error: {folder} is missing: give --shared, the folder that holds {bench}/")
        data, references = str(folder), str(folder / csv)
        rows: list[tuple[str, float, float]] = []
        first: Solutions | None = None
        try:
            models = {"tsp": args.tsp_models, "cvrp": args.cvrp_models, "mtvrp": args.vrptw_models}[problem]
            for name in models:
                decoded, polished = model_rows(name, data, references, args.polish_seconds, args.limit)
                first = first or decoded[1]
                spent = decoded[1].seconds / len(first.lengths)
                rows.append((decoded[0], decoded[1].mean_gap, spent))
                rows.append((polished[0], polished[1].mean_gap, spent + polished[1].seconds / len(first.lengths)))
        except (DataError, ValueError) as exc:
            sys.exit(f"error: {exc}")
        general = rows[1][2]  # the first model's seconds per instance, decoding and polish
        if row := solver_row(problem, first.groups, first.references, general):
            rows.append(row)
        rows += published_rows(bench, first.names, first.references)
        kind = "VRPTW" if bench == "solomon" else problem.upper()
        print(f"\n{bench}: {len(first.lengths)} instances ({kind}), {os.cpu_count()} cores, "
              f"{args.threads} thread(s); gap to {csv}")  # fmt: skip
        print(f"{'':<52} {'mean gap':>9} {'s / inst.':>10} {'gap / first':>12}")
        for label, gap, seconds in rows:
            timing = "-" if np.isnan(seconds) else f"{seconds:.2f}"  # a published row's seconds are not ours
            print(f"{label:<52} {gap:>8.2f}% {timing:>10} {gap / rows[0][1]:>12.2f}")


if __name__ == "__main__":
    main()
