"""RouteFinder's files (ai4co/routefinder): its test sets regenerated without a download, and its
instance and solution layouts read as they are.

Its ``scripts/generate_data.py`` writes ``{data_dir}/{variant}/{test,val}/{n}.npz`` for the 48
variants at n = 50 and 100 with ``routefinder/data/generate.py`` (NumPy's legacy generator seeded
once per file: 1234 for 1,000 test instances, 4321 for 128 validation ones); ``envs.vrp`` draws the
same values (``variant_instances``), so this module writes the same arrays. Its solvers write
``{n}_sol_{solver}.npz`` beside them (``actions``: giant tours, ``costs``: minus the cost).

    python -m ppoor.data.routefinder --out data/routefinder [--sizes 50 100] [--variants cvrp vrptw ...]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from ppoor.envs.instances import KOOL_SEEDS
from ppoor.envs.vrp import TEST_SET_SIZE, VARIANTS, variant_instances

VALIDATION_SIZE = 128  # RouteFinder's --val_data_size
KEYS = (
    *("locs", "num_depots", "demand_linehaul", "demand_backhaul", "backhaul_class", "vehicle_capacity"),
    *("capacity_original", "open_route", "distance_limit", "time_windows", "service_time", "speed"),
)
"""Every array of RouteFinder's and RL4CO's multi-task VRP files (``MTVRPGenerator.save_data`` adds
``capacity_original``)."""


def routefinder_file(variant: str, num_nodes: int, split: str) -> dict:
    """The arrays of RouteFinder's file ``{variant}/{split}/{num_nodes}.npz`` as its generator writes
    them (float32; only the arrays of the variant's attributes)."""
    v = VARIANTS[variant]
    size = TEST_SET_SIZE if split == "test" else VALIDATION_SIZE
    s = variant_instances(np.random.RandomState(KOOL_SEEDS[split]), size, num_nodes, variant)
    column = lambda x: np.asarray(x).reshape(size, 1)  # noqa: E731
    data = {
        "locs": np.concatenate([s["depots"], s["coords"]], axis=1).astype(np.float32),
        "demand_linehaul": s["demand_linehaul"].astype(np.float32),
        "vehicle_capacity": np.ones((size, 1), dtype=np.float32),
        "speed": np.ones((size, 1), dtype=np.float32),
        "num_depots": np.full((size, 1), s["depots"].shape[1], dtype=np.int32),
    }
    if v.backhaul:
        data["demand_backhaul"] = s["demand_backhaul"].astype(np.float32)
        data["backhaul_class"] = column(s["backhaul_class"]).astype(np.float32)
    if v.open_route:
        data["open_route"] = column(s["open_route"])
    if v.windows:
        data["time_windows"] = s["time_windows"].astype(np.float32)
        data["service_time"] = s["service_time"].astype(np.float32)
    if v.limit:
        data["distance_limit"] = column(s["distance_limit"]).astype(np.float32)
    return data


def read_arrays(data: dict) -> dict:
    """RouteFinder's / RL4CO's arrays in ppo-or's .npz layout (``data.datasets.load_vrp_npz``), the
    demands still in units of ``capacity``: ``locs`` [B, k + n, 2] split at ``num_depots`` [B, 1] (1
    without it), per-instance columns [B, 1] flattened, and every time multiplied by ``speed`` (so
    that travel time equals distance, as the env has it). Raises ``ValueError`` naming the key."""
    unknown = [k for k in data if k not in (*KEYS, "reference")]
    if unknown:
        raise ValueError(f"unknown keys {unknown} for RouteFinder's layout, which has {list(KEYS)}")
    locs = np.asarray(data["locs"], dtype=np.float64)
    if locs.ndim != 3 or locs.shape[2] != 2:
        raise ValueError(f"'locs' must have shape [B, k + n, 2] (depots first), got {list(locs.shape)}")
    m = len(locs)
    columns = {}
    for key in ("num_depots", "backhaul_class", "vehicle_capacity", "open_route", "distance_limit", "speed"):
        if key in data:
            value = np.asarray(data[key])
            if value.size != m:
                raise ValueError(f"'{key}' must hold one value per instance ([{m}, 1]), got {list(value.shape)}")
            columns[key] = value.reshape(m)
    depots = columns.get("num_depots", np.ones(m, dtype=int))
    if (depots != depots[0]).any() or not 1 <= depots[0] < locs.shape[1]:
        raise ValueError("'num_depots' must be one count for the whole file, from 1 to the locations less one")
    k = int(depots[0])
    speed = columns.get("speed", np.ones(m)).astype(np.float64)
    if not np.isfinite(speed).all() or (speed <= 0).any():
        raise ValueError("'speed' must be positive")
    out = {"depots": locs[:, :k], "coords": locs[:, k:], "capacity": columns.get("vehicle_capacity", np.ones(m))}
    for key in ("demand_linehaul", "demand_backhaul", "reference"):
        if key in data:
            out[key] = np.asarray(data[key], dtype=np.float64)
    if "time_windows" in data:  # travel time = distance / speed: every time x speed keeps the schedule
        out["time_windows"] = np.asarray(data["time_windows"], dtype=np.float64) * speed[:, None, None]
    if "service_time" in data:
        out["service_time"] = np.asarray(data["service_time"], dtype=np.float64) * speed[:, None]
    for key in ("backhaul_class", "open_route", "distance_limit"):
        if key in columns:
            out[key] = columns[key]
    return out


def giant_tour_actions(actions: np.ndarray, num_depots: int) -> np.ndarray:
    """A RouteFinder giant tour (each route its start depot then its customers, the return left
    out; padded with 0) as ppo-or's actions: from depot 0, a move to each route's depot where it
    differs, its customers, its return."""
    tour, here, depot, customers = [], 0, 0, []
    for action in [*np.asarray(actions).reshape(-1).tolist(), 0]:
        if action >= num_depots:
            customers.append(int(action))
            continue
        if customers:
            tour += ([depot] if depot != here else []) + customers + [depot]
            here, customers = depot, []
        depot = int(action)
    return np.asarray(tour, dtype=np.int64)


def write_test_sets(out: Path, sizes: list[int], variants: list[str], splits: list[str]) -> list[Path]:
    """Writes RouteFinder's files under ``out`` (its folder layout); returns their paths."""
    paths = []
    for variant in variants:
        for split in splits:
            for size in sizes:
                path = out / variant / split / f"{size}.npz"
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(".tmp.npz")
                np.savez(tmp, **routefinder_file(variant, size, split))
                tmp.replace(path)
                paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="RouteFinder's test and validation sets, regenerated (no download)")
    parser.add_argument("--out", type=Path, required=True, help="folder to write {variant}/{split}/{n}.npz under")
    parser.add_argument("--sizes", type=int, nargs="+", default=[50, 100], help="customers per instance (>= 3)")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS), metavar="VARIANT")
    parser.add_argument("--splits", nargs="+", default=["test", "val"], choices=["test", "val"])
    args = parser.parse_args(argv)
    if any(size < 3 for size in args.sizes):
        parser.error("--sizes: every size must be at least 3 (multi-depot instances have 3 depots)")
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        parser.error(f"--out {args.out}: cannot be created ({exc.strerror})")
    paths = write_test_sets(args.out, args.sizes, args.variants, args.splits)
    print(
        f"wrote {len(paths)} files under {args.out} ({paths[0].relative_to(args.out)} ... {paths[-1].relative_to(args.out)})"
    )


if __name__ == "__main__":
    main()
