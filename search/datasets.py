"""Test data for evaluation: the Kool et al. sets, .npz files, TSPLIB / CVRPLIB files.

Every source becomes one or more ``Dataset`` groups of equal-size instances in the unit square
(what the model sees), each with a way to report a tour's length in the source's own units:
unit-square Euclidean for generated and .npz data, and for TSPLIB / CVRPLIB files the instance's
own coordinates with TSPLIB's EUC_2D rule (each edge rounded to the nearest integer), so that gaps
compare with published optima.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from envs.instances import check_instances, kool_dataset
from search.solutions import tour_length

FILE_SUFFIXES = {".tsp": "tsp", ".vrp": "cvrp"}


class DataError(ValueError):
    """Test data that cannot be used, with what to fix."""


@dataclass
class Dataset:
    """Instances of one size. ``instances``: static arrays [B, ...] in the unit square; ``names`` [B];
    ``references`` [B] reference lengths in reported units (NaN where unknown); ``points`` (files
    only): B arrays [A, 2] of the original coordinates indexed by action, depot first for CVRP."""

    problem: str
    instances: dict
    names: list
    references: np.ndarray
    points: list | None = None
    rounded: bool = False

    @property
    def num_nodes(self) -> int:
        return self.instances["coords"].shape[1]

    def reported_length(self, index: int, tour: np.ndarray) -> float:
        """The length of ``tour`` (actions) of instance ``index`` in the data's own units."""
        closed = self.problem == "tsp"
        nodes = tour if closed else np.concatenate([[0], tour])
        return tour_length(self.node_points(index), nodes, closed=closed, rounded=self.rounded)

    def distance_matrix(self, index: int) -> np.ndarray:
        """Distances [A, A] between the nodes of instance ``index`` in reported units (for the
        reference solvers)."""
        points = self.node_points(index)
        dist = np.sqrt(((points[:, None] - points[None]) ** 2).sum(-1))
        return np.rint(dist) if self.rounded else dist

    def node_points(self, index: int) -> np.ndarray:
        """Coordinates [A, 2] of instance ``index`` in reported units, indexed by action."""
        if self.points is not None:
            return self.points[index]
        coords = self.instances["coords"][index]
        return coords if self.problem == "tsp" else np.concatenate([self.instances["depot"][index][None], coords])


def load_data(
    source: str, problem: str, num_nodes: int, num_instances: int | None = None, references: str | None = None
) -> list[Dataset]:
    """Loads ``source``: ``kool-test`` / ``kool-val`` (of ``num_nodes``), an .npz file, a .tsp or .vrp
    file, or a folder of them. ``references`` names a CSV (name, ..., value) or an .npy of lengths."""
    if source in ("kool-test", "kool-val"):
        instances = kool_dataset(problem, num_nodes, source[5:], num_instances)
        count = len(instances["coords"])
        groups = [Dataset(problem, instances, [f"{source}-{i}" for i in range(count)], np.full(count, np.nan))]
    else:
        path = Path(source)
        if not path.exists():
            raise DataError(f"--data {source}: no such file or folder (or use kool-test / kool-val)")
        if path.is_dir():
            groups = load_folder(path, problem)
        elif path.suffix == ".npz":
            groups = [load_npz(path, problem)]
        elif path.suffix in FILE_SUFFIXES:
            groups = group_by_size([load_routing_file(path, problem)])
        else:
            raise DataError(
                f"--data {source}: expected an .npz, .tsp or .vrp file, a folder of them, or kool-test / kool-val"
            )
        if num_instances is not None:
            groups = take_first(groups, num_instances)
    if references is not None:
        apply_references(groups, Path(references))
    return groups


def load_npz(path: Path, problem: str) -> Dataset:
    """TSP: ``coords`` [B, n, 2]; CVRP: ``depot`` [B, 2], ``coords`` [B, n, 2], integer ``demand``
    [B, n], ``capacity`` (scalar or [B]); optional ``reference`` [B]."""
    try:
        data = dict(np.load(path, allow_pickle=False))
    except Exception as exc:
        raise DataError(f"{path}: not a readable .npz file ({exc})") from exc
    keys = {"tsp": ["coords"], "cvrp": ["depot", "coords", "demand", "capacity"]}[problem]
    missing = [k for k in keys if k not in data]
    if missing:
        raise DataError(
            f"{path}: a {problem} .npz file needs the keys {keys} (+ optional 'reference'); missing {missing}"
        )
    instances = {k: data[k] for k in keys if k != "capacity"}
    if problem == "cvrp":
        demand, capacity = np.asarray(data["demand"], dtype=np.float64), np.asarray(data["capacity"], dtype=np.float64)
        if capacity.ndim > 1 or (capacity.ndim == 1 and capacity.shape != demand.shape[:1]):
            raise DataError(
                f"{path}: 'capacity' must be a scalar or one value per instance [B], got {list(capacity.shape)}"
            )
        if not np.isfinite(capacity).all() or (capacity <= 0).any():
            raise DataError(f"{path}: 'capacity' must be positive")
        instances["demand"] = demand / (capacity[:, None] if capacity.ndim else capacity)
    try:
        instances = check_instances(problem, instances)
    except ValueError as exc:
        raise DataError(f"{path}: {exc}") from exc
    count = len(instances["coords"])
    references = np.full(count, np.nan)
    if "reference" in data:
        references = np.asarray(data["reference"], dtype=np.float64)
        if references.shape != (count,):
            raise DataError(f"{path}: 'reference' must have shape [{count}], got {list(references.shape)}")
    return Dataset(problem, instances, [f"{path.stem}-{i}" for i in range(count)], references)


def load_routing_file(path: Path, problem: str) -> Dataset:
    """One TSPLIB .tsp or CVRPLIB .vrp instance (EUC_2D), normalised into the unit square."""
    import vrplib

    if FILE_SUFFIXES[path.suffix] != problem:
        raise DataError(f"{path}: a {FILE_SUFFIXES[path.suffix].upper()} file, but the model solves {problem.upper()}")
    try:
        raw = vrplib.read_instance(path, compute_edge_weights=False)
    except Exception as exc:
        raise DataError(f"{path}: cannot be read as a TSPLIB/CVRPLIB instance ({exc})") from exc
    if raw.get("edge_weight_type") != "EUC_2D" or "node_coord" not in raw:
        raise DataError(
            f"{path}: only EUC_2D instances with NODE_COORD_SECTION are supported, got {raw.get('edge_weight_type')}"
        )
    try:
        points = np.asarray(raw["node_coord"], dtype=np.float64)
    except ValueError:
        points = None
    if points is None or points.ndim != 2 or points.shape[1] != 2:
        raise DataError(f"{path}: malformed NODE_COORD_SECTION (x y per node), or a misspelt section after it")
    low, span = points.min(0), (points.max(0) - points.min(0)).max()
    unit = (points - low) / (span if span > 0 else 1.0)
    if problem == "tsp":
        instances = {"coords": unit[None]}
    else:
        missing = [key.upper() for key in ("capacity", "depot", "demand") if key not in raw]
        if missing:
            raise DataError(
                f"{path}: no {' / '.join(missing)} (a CVRPLIB file needs CAPACITY, DEPOT_SECTION, DEMAND_SECTION)"
            )
        try:
            depots = np.atleast_1d(np.asarray(raw["depot"], dtype=np.int64))
            demand = np.asarray(raw["demand"], dtype=np.float64).reshape(-1)
            capacity = float(raw["capacity"])
        except (TypeError, ValueError) as exc:
            raise DataError(f"{path}: malformed CAPACITY, DEPOT_SECTION or DEMAND_SECTION ({exc})") from exc
        if len(depots) != 1 or depots[0] != 0:
            raise DataError(f"{path}: exactly one depot, the first node, is supported")
        if len(demand) != len(points):
            raise DataError(f"{path}: DEMAND_SECTION has {len(demand)} entries for {len(points)} nodes")
        instances = {"depot": unit[:1], "coords": unit[None, 1:], "demand": demand[None, 1:] / capacity}
    try:
        instances = check_instances(problem, instances)
    except ValueError as exc:
        raise DataError(f"{path}: {exc}") from exc
    name = str(raw.get("name", path.stem))
    return Dataset(
        problem, instances, [name], np.array([file_reference(path, problem, points)]), [points], rounded=True
    )


def file_reference(path: Path, problem: str, points: np.ndarray) -> float:
    """The optimal / best-known length from a ``.sol`` (CVRPLIB) or ``.opt.tour`` (TSPLIB) file beside
    the instance, NaN if there is none."""
    if problem == "cvrp" and path.with_suffix(".sol").exists():
        import vrplib

        return float(vrplib.read_solution(path.with_suffix(".sol"))["cost"])
    tour_file = path.with_suffix(".opt.tour")
    if problem == "tsp" and tour_file.exists():
        lines = tour_file.read_text().split("TOUR_SECTION", 1)[-1].split()
        tour = [int(x) - 1 for x in lines if x.lstrip("-").isdigit() and int(x) > 0]
        return tour_length(points, tour, closed=True, rounded=True)
    return float("nan")


def load_folder(folder: Path, problem: str) -> list[Dataset]:
    suffix = {"tsp": ".tsp", "cvrp": ".vrp"}[problem]
    files = sorted(folder.glob(f"*{suffix}"))
    if not files:
        raise DataError(f"{folder}: no {suffix} files for a {problem.upper()} model")
    return group_by_size([load_routing_file(f, problem) for f in files])


def group_by_size(datasets: list[Dataset]) -> list[Dataset]:
    """Merges single-instance datasets into one dataset per instance size (order kept within)."""
    groups: dict[int, list[Dataset]] = {}
    for d in datasets:
        groups.setdefault(d.num_nodes, []).append(d)
    return [
        replace(
            members[0],
            instances={k: np.concatenate([m.instances[k] for m in members]) for k in members[0].instances},
            names=[n for m in members for n in m.names],
            references=np.concatenate([m.references for m in members]),
            points=[p for m in members for p in m.points],
        )
        for members in groups.values()
    ]


def take_first(groups: list[Dataset], count: int) -> list[Dataset]:
    """The first ``count`` instances over the groups."""
    taken = []
    for g in groups:
        k = min(count, len(g.names))
        if k <= 0:
            break
        taken.append(
            replace(
                g,
                instances={key: value[:k] for key, value in g.instances.items()},
                names=g.names[:k],
                references=g.references[:k],
                points=g.points[:k] if g.points is not None else None,
            )
        )
        count -= k
    return taken


def apply_references(groups: list[Dataset], path: Path) -> None:
    """Fills references from an .npy of lengths (in instance order) or a CSV whose first column is
    the instance name and last column the value (one header row)."""
    if not path.is_file():
        raise DataError(f"--references {path}: no such file")
    if path.suffix == ".npy":
        values = np.load(path, allow_pickle=False).astype(np.float64)
        total = sum(len(g.names) for g in groups)
        if values.ndim != 1 or len(values) < total:
            raise DataError(f"--references {path}: needs at least {total} lengths, has {values.shape}")
        offset = 0
        for g in groups:
            g.references = values[offset : offset + len(g.names)].copy()
            offset += len(g.names)
        return
    try:
        with open(path, newline="") as f:
            rows = list(csv.reader(f))[1:]
        table = {row[0].strip(): float(row[-1]) for row in rows if row}
    except (ValueError, UnicodeDecodeError, csv.Error) as exc:
        raise DataError(
            f"--references {path}: not a CSV of name, ..., value rows with a header (or an .npy) ({exc})"
        ) from exc
    matched = 0
    for g in groups:
        for i, name in enumerate(g.names):
            if name in table:
                g.references[i] = table[name]
                matched += 1
    if not matched:
        names = [n for g in groups for n in g.names][:3]
        raise DataError(
            f"--references {path}: no name in its first column matches an instance ({', '.join(names)}, ...)"
        )
