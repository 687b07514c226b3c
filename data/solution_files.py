"""Solutions in the formats people exchange: TSPLIB ``.tour`` files for TSP, CVRPLIB / VRPLIB
``.sol`` files (written by vrplib) for the routing problems with depots.

A tour is the decoder's actions (``search.decoding``): TSP node indices, or for the problems with
depots customers 1..n with 0 = a return to the depot. TSPLIB numbers nodes from 1, so a ``.tour``
lists action + 1. A ``.sol`` lists each route's customers by their number, the depot being 0, which
is the CVRPLIB convention (the file's node k + 1 is customer k) and the decoder's own. Multi-depot
tours (actions 0..k-1 are the depots) write each route's depot as its first entry.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np


def safe_name(name: str) -> str:
    """An instance name as a file name (path separators and odd characters become '_')."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".") or "instance"


def split_routes(tour: np.ndarray, depots: int = 1) -> list[list[int]]:
    """A tour of actions [T] -> its routes: the customers between two depot visits (actions below
    ``depots``); with several depots each route starts with its depot's action."""
    routes, current = [], []
    for action in np.asarray(tour).tolist():
        if action < depots:
            if any(a >= depots for a in current):
                routes.append(current)
            current = [action] if depots > 1 else []
        else:
            current.append(action)
    if any(a >= depots for a in current):
        routes.append(current)
    return routes


def write_tour(path: Path, name: str, tour: np.ndarray, length: float) -> None:
    """A TSPLIB tour file: node numbers from 1, closed by -1 and EOF."""
    lines = [
        f"NAME : {name}.tour",
        f"COMMENT : length {length:g} (ppo-or)",
        "TYPE : TOUR",
        f"DIMENSION : {len(tour)}",
        "TOUR_SECTION",
        *[str(int(a) + 1) for a in tour],
        "-1",
        "EOF",
    ]
    path.write_text("\n".join(lines) + "\n")


def write_solution(folder: str, group, index: int, tour: np.ndarray, cost: float) -> Path:
    """Writes instance ``index`` of the ``data.datasets.Dataset`` ``group``'s solution into ``folder``
    (``.tour`` for TSP, ``.sol`` otherwise, named after the instance) and returns the file's path."""
    import vrplib

    name = safe_name(group.names[index])
    if group.problem == "tsp":
        path = Path(folder) / f"{name}.tour"
        write_tour(path, group.names[index], tour, cost)
        return path
    depots = len(group.instances["depots"][index]) if group.problem == "mtvrp" else 1
    path = Path(folder) / f"{name}.sol"
    vrplib.write_solution(path, split_routes(tour, depots), {"Cost": f"{cost:g}"})
    return path
