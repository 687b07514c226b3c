"""A railway episode drawn with matplotlib (``eval_flatland.py --render``): rails, each train's path
from start to end, targets and outcomes."""

from __future__ import annotations

import numpy as np
from ppoor.railway.env import RailDecisionEnv


def render_episode(path: str, env: RailDecisionEnv, label: str) -> None:
    """The whole episode of ``env`` (played with ``record=True``): rails grey; each train's path in
    its own colour, from its start (a circle) to where it ended (an arrow: black edge when it
    arrived, red when deadlocked, none when it was still running at the time limit); each target as a
    large cross of the train's colour outlined in black. The title names ``label`` (the rule and
    checkpoint) and the outcome."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 7.5))
    ax.imshow(env.env.rail.grid > 0, cmap="Greys", vmin=0, vmax=4, origin="upper")
    palette = plt.get_cmap("tab10" if env.trains <= 10 else "tab20")
    colors = [palette(k % palette.N) for k in range(env.trains)]
    arrows = {0: (0, -0.4), 1: (0.4, 0), 2: (0, 0.4), 3: (-0.4, 0)}
    for agent in env.env.agents:
        h, color = agent.handle, colors[agent.handle % len(colors)]
        cells = np.array([step[h] for step in env.paths or [] if step[h] is not None], dtype=float).reshape(-1, 2)
        if len(cells):
            jitter = (h % 5 - 2) * 0.06  # trains sharing a track stay apart
            ax.plot(cells[:, 1] + jitter, cells[:, 0] + jitter, "-", color=color, lw=1.6, alpha=0.85)
            ax.plot(cells[0, 1], cells[0, 0], "o", color=color, markersize=6, mec="black", mew=0.5)
        for (row, col), _ in agent.targets:
            ax.plot(col, row, "X", color=color, markersize=13, mec="black", mew=1.0, zorder=5)
        if agent.current_configuration is not None and agent.current_configuration[0] is not None:
            (row, col), heading = agent.current_configuration
            dx, dy = arrows[heading]
            edge = "red" if env.deadlocked[h] else "black"
            ax.arrow(col - dx / 2, row - dy / 2, dx, dy, width=0.3, color=color, ec=edge, zorder=6)
    ax.plot([], [], "o", color="grey", mec="black", label="start")
    ax.plot([], [], "X", color="grey", mec="black", markersize=10, label="target")
    ax.plot([], [], "-", color="grey", label="path")
    ax.legend(loc="upper right", fontsize=8, framealpha=0.8)
    ax.set_title(
        f"{label}\n{env.width}x{env.height}, {env.trains} trains, {env.simulator_steps} steps: "
        f"{env.arrived.sum()} arrived, {env.deadlocked.sum()} deadlocked",
        fontsize=10,
    )
    ax.set_xticks([])
    ax.set_yticks([])
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
