"""The routes of solved instances drawn with matplotlib (``eval.py --plot``): one panel per instance,
each route in its own colour, depots, starts, backhauls, pickups, windows and prizes marked."""

from __future__ import annotations

import numpy as np
from ppoor.checkers.tours import COST_NAMES, INTEGER_ROUNDINGS, tour_length
from ppoor.data.datasets import Dataset
from ppoor.data.solution_files import split_routes


def plot_routes(path: str, solutions, count: int, label: str) -> None:
    """Draws the first ``count`` of ``solutions`` (``search.solver.Solutions``) into ``path``: one panel per instance titled with its name
    and cost, each route in its own colour with a legend entry (route number, load where the problem
    has one, length), the depot(s) as red squares and a TSP tour's start as a red star, backhaul
    customers and pickups as triangles, time windows as labels (20 customers or fewer), prizes as
    marker areas; the figure's title names ``label`` (the checkpoint and the decoding)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    items = list(solutions.items())[:count]
    fig, axes = plt.subplots(1, len(items), figsize=(5 * len(items), 6.5), squeeze=False)
    for ax, (group, i, tour, length) in zip(axes[0], items, strict=True):
        points = group.node_points(i)
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
        ax.set_title(f"{group.names[i]}: {cost} {length:,.{decimals}f}", fontsize=10)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.01), ncol=2, frameon=False)
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(f"{label}: {items[0][0].problem.upper()} {', '.join(g.names[i] for g, i, _, _ in items)}", fontsize=11)
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
