"""Test data for evaluation: the standard generated sets, .npz files, TSPLIB / CVRPLIB / Solomon files.

Every source becomes one or more ``Dataset`` groups of equal-size instances in the unit square
(what the model sees), each with a way to report a tour's length in the source's own units:
unit-square Euclidean for generated and .npz data; for TSPLIB / CVRPLIB files the instance's own
coordinates with TSPLIB's EUC_2D rule (each edge rounded to the nearest integer), and for Solomon
files with the DIMACS rule of their best-known solutions (each edge truncated to one decimal), so
that gaps compare with published optima.
"""

from __future__ import annotations

import csv
import zipfile
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path

import numpy as np
from ppoor.checkers.tours import (
    COSTS,
    EDGE_WEIGHT_TYPES,
    InvalidTourError,
    distance_matrix,
    geo_radians,
    tour_length,
    vrp_cost,
)
from ppoor.data import routefinder
from ppoor.envs import VECTOR_ENVS, instance_kwargs, standard_dataset
from ppoor.envs.instances import KOOL_SEEDS, STATIC_KEYS, check_instances
from ppoor.envs.vrp import STATIC_KEYS as VRP_KEYS
from ppoor.envs.vrp import check_vrp_instances

FILE_SUFFIXES = (".tsp", ".vrp", ".txt")
STANDARD_SETS = {"kool-test": "test", "kool-val": "val", "test": "test", "val": "val"}
FAMILY_PROBLEMS = ("mrcvrp", "pdp", "op", "pctsp", "pcvrp")
"""The further constraint families: generated and .npz data only, scored by ``checkers.tours.COSTS``."""
SHIPPED = "data/reference_lengths/"  # where the shipped reference lengths live (the package's data)
REFERENCE_COLUMNS = ("distance", "cost", "value", "length", "optimal_length", "best_known_cost", "reference")


class DataError(ValueError):
    """Test data that cannot be used, with what to fix."""


@dataclass
class Dataset:
    """Instances of one size. ``instances``: static arrays [B, ...] in the unit square; ``names`` [B];
    ``references`` [B] reference lengths in reported units (NaN where unknown); ``points`` (files
    only): B arrays [A, 2] of the original coordinates indexed by action, depot first for CVRP and
    VRP; ``rounding``: how edges are reported (``checkers.tours.ROUNDINGS``); ``reference_source``:
    where the references came from (a file, the shipped lengths), when ``load_data`` attached them."""

    problem: str
    instances: dict
    names: list
    references: np.ndarray
    points: list | None = None
    rounding: str = "exact"
    reference_source: str | None = None

    @property
    def num_nodes(self) -> int:
        return self.instances["coords"].shape[1]

    def reported_length(self, index: int, tour: np.ndarray) -> float:
        """The length of ``tour`` (actions) of instance ``index`` in the data's own units."""
        if self.problem in FAMILY_PROBLEMS or (self.problem == "mtvrp" and self.rounding == "exact"):
            # the problem's own cost: not (only) a length, or free moves between depots
            return COSTS[self.problem]({key: value[index] for key, value in self.instances.items()}, tour)
        closed = self.problem == "tsp"
        nodes = tour if closed else np.concatenate([[0], tour])
        return tour_length(self.node_points(index), nodes, closed, self.rounding, self.free_returns(index))

    def free_returns(self, index: int) -> bool:
        """Whether the returns to the depot cost nothing in instance ``index`` (an open-route VRP)."""
        return self.problem == "mtvrp" and bool(self.instances["open_route"][index])

    def distance_matrix(self, index: int) -> np.ndarray:
        """Distances [A, A] between the nodes of instance ``index`` in reported units (for the
        reference solvers)."""
        return distance_matrix(self.node_points(index), self.rounding)

    def node_points(self, index: int) -> np.ndarray:
        """Coordinates [A, 2] of instance ``index`` in reported units, indexed by action."""
        if self.points is not None:
            return self.points[index]
        coords = self.instances["coords"][index]
        if self.problem == "mtvrp":  # the depots first, as the actions
            return np.concatenate([self.instances["depots"][index], coords])
        return coords if self.problem == "tsp" else np.concatenate([self.instances["depot"][index][None], coords])


def load_data(
    source: str | dict,
    problem: str,
    num_nodes: int,
    num_instances: int | None = None,
    references: str | None = None,
    variant: str | None = None,
) -> list[Dataset]:
    """Loads ``source``: ``test`` / ``val`` (alias ``kool-test`` / ``kool-val``: the standard sets of
    ``num_nodes``, Kool et al.'s for TSP and CVRP, the generator's of ``variant`` for the VRP), an
    .npz file, a .tsp / .vrp / Solomon .txt file, a folder of them, or a dict of arrays in the .npz
    layout (``from_arrays``). ``references`` names a CSV (name, ..., value) or an .npy of lengths; a
    folder's own ``best_known.csv`` is read when none is given, and the standard sets take the lengths
    shipped for them (``shipped_references``), where any."""
    if isinstance(source, dict):
        groups = [from_arrays(source, problem)]
    elif source in STANDARD_SETS:
        instances = standard_dataset(problem, num_nodes, STANDARD_SETS[source], num_instances, variant)
        count = len(instances["coords"])
        label = source if problem in ("tsp", "cvrp") else f"{variant or problem}-{STANDARD_SETS[source]}"
        groups = [Dataset(problem, instances, [f"{label}-{i}" for i in range(count)], np.full(count, np.nan))]
    else:
        path = Path(source)
        if not path.exists():
            raise DataError(f"--data {source}: no such file or folder (or use test / val)")
        if path.is_dir():
            groups = load_folder(path, problem)
            if references is None and (path / "best_known.csv").is_file():
                references = str(path / "best_known.csv")
        elif path.suffix.lower() == ".npz":
            groups = [load_npz(path, problem)]
        elif path.suffix.lower() in FILE_SUFFIXES:
            groups = group_by_size([load_routing_file(path, problem)])
        else:
            raise DataError(
                f"--data {source}: expected an .npz, .tsp, .vrp or Solomon .txt file, a folder of them, or test / val"
            )
    if num_instances is not None:
        groups = take_first(groups, num_instances)
    if references is not None:
        apply_references(groups, Path(references))
        for group in groups:
            group.reference_source = str(references)
    elif isinstance(source, str) and source in STANDARD_SETS:
        split, count = STANDARD_SETS[source], len(groups[0].names)
        if (shipped := shipped_references(problem, num_nodes, split, count, variant)) is not None:
            groups[0].references = shipped
            groups[0].reference_source = SHIPPED + shipped_name(problem, num_nodes, split, variant)
    return groups


SHIPPED_SOLVERS = {"tsp": "lkh", "cvrp": "pyvrp0.5s"}
"""The solver behind the shipped reference lengths of each problem's validation sets (see
``data/reference_lengths/README.md``)."""
VRP_SHIPPED_SECONDS = {50: 1.0, 100: 2.0}
"""PyVRP's time per instance behind the shipped lengths of RouteFinder's VRP test sets, by size."""


def shipped_name(problem: str, num_nodes: int, split: str, variant: str | None = None) -> str | None:
    """The file name of the shipped reference lengths of a standard set, None where none is made."""
    if problem == "mtvrp":
        if split != "test" or num_nodes not in VRP_SHIPPED_SECONDS:
            return None
        return f"{variant}{num_nodes}_test_seed{KOOL_SEEDS[split]}_pyvrp{VRP_SHIPPED_SECONDS[num_nodes]:g}s.npy"
    if problem not in SHIPPED_SOLVERS:
        return None
    return f"{problem}{num_nodes}_{split}_seed{KOOL_SEEDS[split]}_{SHIPPED_SOLVERS[problem]}.npy"


def shipped_references(
    problem: str, num_nodes: int, split: str, count: int, variant: str | None = None
) -> np.ndarray | None:
    """The first ``count`` reference lengths of a standard set shipped with ppo-or
    (``data/reference_lengths``: Kool et al.'s validation sets, RouteFinder's VRP test sets of one
    ``variant``), None when none ships for it or it holds fewer."""
    name = shipped_name(problem, num_nodes, split, variant)
    resource = resources.files("ppoor.data.reference_lengths").joinpath(name) if name else None
    if resource is None or not resource.is_file():
        return None
    with resource.open("rb") as f:
        lengths = np.load(f, allow_pickle=False)
    return lengths[:count] if len(lengths) >= count else None


def load_npz(path: Path, problem: str) -> Dataset:
    """An .npz file of ``problem``'s instances (``from_arrays`` gives the layout)."""
    if not zipfile.is_zipfile(path):
        raise DataError(f"{path}: not an .npz archive (numpy.savez writes one; this file is not a zip archive)")
    try:
        with np.load(path, allow_pickle=False) as archive:
            data = dict(archive)
    except Exception as exc:
        raise DataError(f"{path}: not a readable .npz file ({exc})") from exc
    return from_arrays(data, problem, path)


def from_arrays(data: dict, problem: str, path: Path = Path("instances")) -> Dataset:
    """Instances given as arrays, in an .npz file's layout. TSP: ``coords`` [B, n, 2]; CVRP: ``depot``
    [B, 2], ``coords`` [B, n, 2], integer ``demand`` [B, n], ``capacity`` (scalar or [B]); the VRP
    ``load_vrp_npz``, the further families ``load_family_npz``; optional ``reference`` [B]. ``path``
    names the source in errors, its stem the instances (``instances-0``, ...)."""
    data = {key: np.asarray(value) for key, value in data.items()}
    for key, value in data.items():
        if value.dtype.kind not in "biuf":
            raise DataError(f"{path}: '{key}' holds {value.dtype} values; every array must be numeric")
    coords = data.get("coords")
    if coords is not None and coords.ndim >= 1 and len(coords) == 0:
        raise DataError(f"{path}: holds no instances ('coords' has shape {list(coords.shape)})")
    if problem == "mtvrp":
        return load_vrp_npz(path, data)
    if problem not in ("tsp", "cvrp"):
        return load_family_npz(path, problem, data)
    keys = {"tsp": ["coords"], "cvrp": ["depot", "coords", "demand", "capacity"]}[problem]
    missing = [k for k in keys if k not in data]
    if missing:
        raise DataError(
            f"{path}: a {problem} .npz file needs the keys {keys} (+ optional 'reference'); missing {missing}"
        )
    unknown = [k for k in data if k not in (*keys, "reference")]
    if unknown:
        raise DataError(
            f"{path}: unknown keys {unknown} for a {problem.upper()} model, which reads {keys} (+ optional "
            "'reference'); is it a file of another problem?"
        )
    instances = {k: data[k] for k in keys if k != "capacity"}
    if problem == "cvrp":
        instances["demand"] = per_capacity(path, data["demand"], data["capacity"])
    try:
        instances = check_instances(problem, instances)
    except ValueError as exc:
        raise DataError(f"{path}: {exc}") from exc
    return npz_dataset(path, problem, instances, data)


def per_capacity(path: Path, demand, capacity) -> np.ndarray:
    """Integer demands [B, n] divided by the ``capacity`` (a scalar or one per instance [B])."""
    demand, capacity = np.asarray(demand, dtype=np.float64), np.asarray(capacity, dtype=np.float64)
    if capacity.ndim > 1 or (capacity.ndim == 1 and capacity.shape != demand.shape[:1]):
        raise DataError(
            f"{path}: 'capacity' must be a scalar or one value per instance [B], got {list(capacity.shape)}"
        )
    if not np.isfinite(capacity).all() or (capacity <= 0).any():
        raise DataError(f"{path}: 'capacity' must be positive")
    return demand / (capacity.reshape(-1, *[1] * (demand.ndim - 1)) if capacity.ndim else capacity)


def npz_dataset(path: Path, problem: str, instances: dict, data: dict) -> Dataset:
    count = len(instances["coords"])
    references = np.full(count, np.nan)
    if "reference" in data:
        references = np.asarray(data["reference"], dtype=np.float64)
        if references.shape != (count,):
            raise DataError(f"{path}: 'reference' must have shape [{count}], got {list(references.shape)}")
        check_references(f"{path}: 'reference'", problem, references)
    return Dataset(problem, instances, [f"{path.stem}-{i}" for i in range(count)], references)


def load_vrp_npz(path: Path, data: dict) -> Dataset:
    """A multi-task VRP .npz in either layout.

    RouteFinder's / RL4CO's (``locs`` present; what ``routefinder/data/generate.py`` and RL4CO's
    ``MTVRPGenerator`` save, read as they are): ``locs`` [B, k + n, 2] with the ``num_depots`` [B, 1]
    depots first (1 without it); ``demand_linehaul`` / ``demand_backhaul`` [B, n] in units of
    ``vehicle_capacity`` [B, 1] (1 without it); ``backhaul_class`` [B, 1] (1 classic, 2 mixed);
    ``open_route``, ``distance_limit`` [B, 1]; ``time_windows`` [B, k + n, 2], ``service_time``
    [B, k + n]; ``speed`` [B, 1] (times are scaled by it, so that travel time equals distance);
    ``capacity_original`` is ignored.

    Ours: ``depot`` [B, 2] or ``depots`` [B, k, 2], ``coords`` [B, n, 2] (unit square), integer
    ``demand_linehaul`` and ``demand_backhaul`` [B, n] (a customer has one or the other),
    ``capacity`` (scalar or [B]), ``backhaul_class`` [B], ``time_windows`` [B, k + n, 2] and
    ``service_time`` [B, k + n] (depots first), ``distance_limit`` [B], ``open_route`` [B] (bool).
    ``demand`` is read as ``demand_linehaul`` (a CVRP file is a VRP file without attributes).

    Both: optional ``reference`` [B]; an absent attribute may be left out (no backhauls, windows
    [0, inf] and no service, no limit, closed routes)."""
    if "locs" in data:
        try:
            data = routefinder.read_arrays(data)
        except ValueError as exc:
            raise DataError(f"{path}: {exc}") from exc
    if "demand_linehaul" not in data and "demand" in data:
        data["demand_linehaul"] = data.pop("demand")
    if "depot" in data and "depots" not in data:
        data["depots"] = np.asarray(data.pop("depot"))[:, None]
    required = ["depots", "coords", "demand_linehaul", "capacity"]
    missing = [k for k in required if k not in data]
    if missing:
        raise DataError(
            f"{path}: a VRP .npz file needs the keys {required} ('depot' for one depot; + optional demand_backhaul, "
            f"backhaul_class, time_windows, service_time, distance_limit, open_route, reference), or RouteFinder's "
            f"'locs' layout; missing {missing}"
        )
    unknown = [k for k in data if k not in (*VRP_KEYS, "capacity", "reference")]
    if unknown:
        raise DataError(f"{path}: unknown keys {unknown}; a VRP .npz file has {[*VRP_KEYS, 'capacity', 'reference']}")
    coords, depots = np.asarray(data["coords"]), np.asarray(data["depots"])
    if coords.ndim != 3 or depots.ndim != 3:
        raise DataError(f"{path}: 'coords' must have shape [B, n, 2] and 'depots' [B, k, 2]")
    (m, n), k = coords.shape[:2], depots.shape[1]
    windows = np.zeros((m, k + n, 2))
    windows[..., 1] = np.inf
    defaults = {
        "demand_backhaul": np.zeros(np.shape(data["demand_linehaul"])),
        "backhaul_class": np.ones(m),
        "time_windows": windows,
        "service_time": np.zeros((m, k + n)),
        "distance_limit": np.full(m, np.inf),
        "open_route": np.zeros(m, dtype=bool),
    }
    instances = {key: data.get(key, defaults.get(key)) for key in VRP_KEYS}
    for key in ("demand_linehaul", "demand_backhaul"):
        instances[key] = per_capacity(path, instances[key], data["capacity"])
    try:
        instances = check_vrp_instances(instances)
    except ValueError as exc:
        raise DataError(f"{path}: {exc}") from exc
    return npz_dataset(path, "mtvrp", instances, data)


def load_family_npz(path: Path, problem: str, data: dict) -> Dataset:
    """An .npz of the further families (multiple resources, pickup and delivery, prize collecting,
    multiple depots): exactly the env's static arrays (``envs.instances.STATIC_KEYS[problem]``, unit
    square, demands and loads as fractions of the capacity), optional ``reference`` [B]."""
    keys = STATIC_KEYS[problem]
    missing = [k for k in keys if k not in data]
    unknown = [k for k in data if k not in (*keys, "reference")]
    if missing or unknown:
        raise DataError(
            f"{path}: a {problem} .npz file holds the keys {list(keys)} (+ optional 'reference'); "
            f"missing {missing}, unknown {unknown}"
        )
    coords = np.asarray(data["coords"])
    if coords.ndim != 3:
        raise DataError(f"{path}: 'coords' must have shape [B, n, 2], got {list(coords.shape)}")
    try:
        instances = {k: data[k] for k in keys}
        env = VECTOR_ENVS[problem](
            num_envs=coords.shape[0], num_nodes=coords.shape[1], **instance_kwargs(problem, instances)
        )
        instances = env.check_instances(instances)
    except ValueError as exc:
        raise DataError(f"{path}: {exc}") from exc
    return npz_dataset(path, problem, instances, data)


def unit_square(points: np.ndarray) -> tuple[np.ndarray, float]:
    """``points`` [A, 2] shifted to the origin and divided by their larger side: the coordinates for
    the model, and that side (the span, 1 for a single point)."""
    low, span = points.min(0), (points.max(0) - points.min(0)).max()
    span = span if span > 0 else 1.0
    return (points - low) / span, span


def file_problem(path: Path, problem: str) -> None:
    """Refuses a file the model does not solve: a .tsp for a TSP model, a .vrp for a CVRP model or a
    multi-task VRP model (as its cvrp variant), a Solomon .txt for a VRP model."""
    readers = {".tsp": ("tsp",), ".vrp": ("cvrp", "mtvrp"), ".txt": ("mtvrp",)}[path.suffix.lower()]
    if problem not in readers:
        kind = {".tsp": "a TSP file", ".vrp": "a CVRP file", ".txt": "a .txt file is read as a Solomon VRPTW instance"}
        raise DataError(f"{path}: {kind[path.suffix.lower()]}, but the model solves {problem.upper()}")


def model_coordinates(points: np.ndarray, rounding: str) -> np.ndarray:
    """The coordinates [A, 2] the model sees, in the unit square: the file's own for planar types;
    for GEO (latitude, longitude in degrees.minutes) an equirectangular projection, x = longitude x
    cos(mean latitude), y = latitude (radians), which keeps distances within a few percent over the
    span of a TSPLIB GEO instance."""
    if rounding == "geo":
        lat, lon = geo_radians(points).T
        points = np.stack([lon * np.cos(lat.mean()), lat], axis=1)
    return unit_square(points)[0]


def load_routing_file(path: Path, problem: str) -> Dataset:
    """One TSPLIB .tsp or CVRPLIB .vrp instance with coordinates (EUC_2D, CEIL_2D, ATT or GEO) or a
    Solomon .txt instance, normalised into the unit square; lengths are reported by the file's own
    distance function. A .vrp file given to a multi-task VRP model is its cvrp variant."""
    import vrplib

    file_problem(path, problem)
    if path.suffix.lower() == ".txt":
        return load_solomon(path)
    try:
        raw = vrplib.read_instance(path, compute_edge_weights=False)
    except Exception as exc:
        raise DataError(f"{path}: cannot be read as a TSPLIB/CVRPLIB instance ({exc})") from exc
    kind = str(raw.get("edge_weight_type", "")).upper()
    if kind not in EDGE_WEIGHT_TYPES or "node_coord" not in raw:
        raise DataError(
            f"{path}: EDGE_WEIGHT_TYPE {kind or '(none)'}: supported are instances with a NODE_COORD_SECTION "
            f"and {' / '.join(EDGE_WEIGHT_TYPES)}"
        )
    rounding = EDGE_WEIGHT_TYPES[kind]
    try:
        points = np.asarray(raw["node_coord"], dtype=np.float64)
    except ValueError:
        points = None
    if points is None or points.ndim != 2 or points.shape[1] != 2 or not np.isfinite(points).all():
        raise DataError(f"{path}: malformed NODE_COORD_SECTION (x y per node), or a misspelt section after it")
    if "dimension" in raw and int(raw["dimension"]) != len(points):
        raise DataError(f"{path}: DIMENSION is {raw['dimension']} but NODE_COORD_SECTION lists {len(points)} nodes")
    unit = model_coordinates(points, rounding)
    if path.suffix.lower() == ".tsp":
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
        if not np.isfinite(capacity) or capacity <= 0:
            raise DataError(f"{path}: CAPACITY must be positive, got {raw['capacity']}")
        instances = {"depot": unit[:1], "coords": unit[None, 1:], "demand": demand[None, 1:] / capacity}
        if problem == "mtvrp":
            instances = vrp_attributes(instances)
    try:
        instances = check_vrp_instances(instances) if problem == "mtvrp" else check_instances(problem, instances)
    except ValueError as exc:
        raise DataError(f"{path}: {exc}") from exc
    name = str(raw.get("name", path.stem))
    return Dataset(
        problem, instances, [name], np.array([file_reference(path, problem, points, rounding)]), [points], rounding
    )


def vrp_attributes(cvrp: dict) -> dict:
    """A CVRP instance (``depot`` [1, 2], ``coords`` [1, n, 2], ``demand`` [1, n]) as the multi-task
    VRP's cvrp variant: no backhauls, windows [0, inf], no service, no length limit, closed routes."""
    n = cvrp["coords"].shape[1]
    windows = np.zeros((1, n + 1, 2))
    windows[..., 1] = np.inf
    return {
        "depots": cvrp["depot"][:, None],
        "coords": cvrp["coords"],
        "demand_linehaul": cvrp["demand"],
        "demand_backhaul": np.zeros((1, n)),
        "backhaul_class": np.ones(1),
        "time_windows": windows,
        "service_time": np.zeros((1, n + 1)),
        "distance_limit": np.array([np.inf]),
        "open_route": np.array([False]),
    }


def load_solomon(path: Path) -> Dataset:
    """One Solomon VRPTW instance (Solomon's text format, read by vrplib), scaled into the unit
    square: coordinates and times (travel time = distance) divided by the coordinates' span,
    demands by the capacity. Lengths are reported in the file's units with each edge truncated to
    one decimal, the rule of the best-known solutions (a solution feasible with exact distances is
    feasible under it)."""
    import vrplib

    try:
        raw = vrplib.read_instance(path, instance_format="solomon", compute_edge_weights=False)
        points = np.asarray(raw["node_coord"], dtype=np.float64)
        demand = np.asarray(raw["demand"], dtype=np.float64)
        windows = np.asarray(raw["time_window"], dtype=np.float64)
        service = np.asarray(raw["service_time"], dtype=np.float64)
        capacity = float(raw["capacity"])
    except Exception as exc:
        raise DataError(f"{path}: cannot be read as a Solomon VRPTW instance ({exc})") from exc
    count = len(points)
    if (
        points.shape != (count, 2)
        or demand.shape != (count,)
        or windows.shape != (count, 2)
        or service.shape != (count,)
    ):
        raise DataError(f"{path}: malformed CUSTOMER table (7 columns per node, the depot first)")
    unit, span = unit_square(points)
    instances = {
        "depot": unit[None, 0],
        "coords": unit[None, 1:],
        "demand_linehaul": demand[None, 1:] / capacity,
        "demand_backhaul": np.zeros((1, count - 1)),
        "time_windows": windows[None] / span,
        "service_time": service[None] / span,
        "distance_limit": np.array([np.inf]),
        "open_route": np.array([False]),
    }
    try:
        instances = check_vrp_instances(instances)
    except ValueError as exc:
        raise DataError(f"{path}: {exc}") from exc
    reference = file_reference(path, "mtvrp", points)
    name = str(raw.get("name", path.stem))
    return Dataset("mtvrp", instances, [name], np.array([reference]), [points], rounding="tenth-down")


def file_reference(path: Path, problem: str, points: np.ndarray, rounding: str = "nearest") -> float:
    """The optimal / best-known length from a ``.sol`` (CVRPLIB) or ``.opt.tour`` (TSPLIB, measured
    by the instance's ``rounding``) file beside the instance, NaN if there is none."""
    if problem in ("cvrp", "mtvrp") and path.with_suffix(".sol").exists():
        import vrplib

        return float(vrplib.read_solution(path.with_suffix(".sol"))["cost"])
    tour_file = path.with_suffix(".opt.tour")
    if problem == "tsp" and tour_file.exists():
        lines = tour_file.read_text().split("TOUR_SECTION", 1)[-1].split()
        tour = [int(x) - 1 for x in lines if x.lstrip("-").isdigit() and int(x) > 0]
        return tour_length(points, tour, closed=True, rounding=rounding)
    return float("nan")


def load_folder(folder: Path, problem: str) -> list[Dataset]:
    """Every instance file of the model's kind in ``folder`` (.tsp; .vrp; Solomon .txt and .vrp for
    VRP models). A file that cannot be read is skipped with a line naming it and why, and the rest
    are evaluated; a folder in which no file can be read is an error."""
    suffixes = {"tsp": (".tsp",), "cvrp": (".vrp",), "mtvrp": (".txt", ".vrp")}[problem]
    files = sorted(f for f in folder.iterdir() if f.suffix.lower() in suffixes and f.is_file())
    if not files:
        kind = {"tsp": "TSP", "cvrp": "CVRP", "mtvrp": "VRP (Solomon or CVRPLIB)"}[problem]
        raise DataError(f"{folder}: no {' / '.join(suffixes)} files for a {kind} model")
    datasets, skipped = [], []
    for f in files:
        try:
            datasets.append(load_routing_file(f, problem))
        except DataError as exc:
            skipped.append(str(exc))
    if not datasets:
        raise DataError(f"{folder}: none of its {len(files)} files could be read; the first: {skipped[0]}")
    for line in skipped:
        print(f"skipped {line}", flush=True)
    if skipped:
        print(f"skipped {len(skipped)} of {len(files)} files in {folder}", flush=True)
    return group_by_size(datasets)


def group_by_size(datasets: list[Dataset]) -> list[Dataset]:
    """Merges single-instance datasets into one dataset per instance size and distance function
    (order kept within)."""
    groups: dict[tuple[int, str], list[Dataset]] = {}
    for d in datasets:
        groups.setdefault((d.num_nodes, d.rounding), []).append(d)
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


SOLUTION_TOLERANCE = 0.003
"""How far a solution file's tour may overrun a window, the distance limit or the capacity and still
give its reference: RouteFinder's PyVRP solutions are found on data rounded to 1e-3."""


def solution_references(groups: list[Dataset], path: Path) -> None:
    """References from a solution file of RouteFinder's (``actions`` [B, T] giant tours, ``costs``
    [B], which it stores negated): every tour is re-scored by our checker (``checkers.tours``) and
    its recomputed cost is the reference. A tour that overruns a bound by at most
    ``SOLUTION_TOLERANCE`` still counts (reported: they come from rounded data); one that breaks the
    problem otherwise is an error."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            actions, costs = np.asarray(archive["actions"]), np.asarray(archive["costs"], dtype=np.float64)
    except (KeyError, ValueError, OSError, zipfile.BadZipFile) as exc:
        raise DataError(
            f"--references {path}: not a solution .npz with 'actions' [B, T] and 'costs' [B] ({exc})"
        ) from exc
    total = sum(len(g.names) for g in groups)
    if any(g.problem != "mtvrp" for g in groups):
        raise DataError(f"--references {path}: solution files are for VRP models (RouteFinder's format)")
    if actions.ndim != 2 or len(actions) < total or costs.shape != (len(actions),) or actions.dtype.kind not in "iu":
        raise DataError(
            f"--references {path}: needs integer 'actions' [B, T] and 'costs' [B] for at least {total} instances"
        )
    offset, overruns, worst, drift = 0, 0, 0.0, 0.0
    for g in groups:
        k = g.instances["depots"].shape[1]
        for i in range(len(g.names)):
            instance = {key: value[i] for key, value in g.instances.items()}
            tour = routefinder.giant_tour_actions(actions[offset + i], k)
            try:
                cost = vrp_cost(instance, tour)
            except InvalidTourError:
                try:
                    cost = vrp_cost(instance, tour, tolerance=SOLUTION_TOLERANCE)
                except InvalidTourError as exc:
                    raise DataError(
                        f"--references {path}: solution {offset + i} is not a solution of {g.names[i]}: {exc}"
                    ) from exc
                overruns += 1
                worst = max(worst, overrun(instance, tour))
            g.references[i] = cost
            drift = max(drift, abs(cost - abs(costs[offset + i])))
        offset += len(g.names)
    print(
        f"references from {path}: {total} solutions re-scored by the checker; {overruns} overrun a window, the"
        f" distance limit or the capacity by at most {worst:.4f} (found on data rounded to 1e-3), kept with their"
        f" recomputed cost; the file's costs differ from the recomputed ones by at most {drift:.4f}",
        flush=True,
    )


def overrun(instance: dict, tour: np.ndarray) -> float:
    """The smallest tolerance under which ``tour`` passes the checker (to 1e-5)."""
    low, high = 0.0, SOLUTION_TOLERANCE
    while high - low > 1e-5:
        middle = (low + high) / 2
        try:
            vrp_cost(instance, tour, tolerance=middle)
            high = middle
        except InvalidTourError:
            low = middle
    return high


def check_references(what: str, problem: str, references: np.ndarray) -> None:
    """Reference costs must be finite where known (NaN: unknown) and have the sign of the problem's
    costs: positive lengths, negative for orienteering (minus the prize)."""
    known = references[~np.isnan(references)]
    bad = ~np.isfinite(known) | ((known >= 0) if problem == "op" else (known <= 0))
    if bad.any():
        sign = "negative (minus the collected prize)" if problem == "op" else "positive"
        raise DataError(f"{what}: references must be finite and {sign}; found {known[bad][0]:g}")


def apply_references(groups: list[Dataset], path: Path) -> None:
    """Fills references from an .npy of lengths (in instance order), a solution .npz (RouteFinder's
    ``actions`` and ``costs``, ``solution_references``) or a CSV whose first column is the instance
    name and whose value column is the one headed distance / cost / value / length / optimal_length /
    best_known_cost / reference, else the last (one header row)."""
    if not path.is_file():
        raise DataError(f"--references {path}: no such file")
    if path.suffix.lower() == ".npz":
        solution_references(groups, path)
        return
    if path.suffix.lower() == ".npy":
        try:
            values = np.load(path, allow_pickle=False).astype(np.float64)
        except (ValueError, OSError, EOFError) as exc:
            raise DataError(f"--references {path}: not an .npy array of lengths ({exc})") from exc
        total = sum(len(g.names) for g in groups)
        if values.ndim != 1 or len(values) < total:
            raise DataError(f"--references {path}: needs at least {total} lengths, has {values.shape}")
        offset = 0
        for g in groups:
            g.references = values[offset : offset + len(g.names)].copy()
            check_references(f"--references {path}", g.problem, g.references)
            offset += len(g.names)
        return
    try:
        with open(path, newline="") as f:
            header, *rows = list(csv.reader(f)) or [[]]
        named = [i for i, h in enumerate(header) if h.strip().lower() in REFERENCE_COLUMNS]
        column = named[0] if named else -1
        table = {row[0].strip(): float(row[column]) for row in rows if row}
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
        check_references(f"--references {path}", g.problem, g.references)
    if not matched:
        names = [n for g in groups for n in g.names][:3]
        raise DataError(
            f"--references {path}: no name in its first column matches an instance ({', '.join(names)}, ...)"
        )
