"""The train's view of the rail network ahead: a tree whose nodes are switches and whose edges are the
track segments between them, plus features not tied to a segment.

From the train's cell and heading, each way on (left branch first, then right) starts an edge; an
edge follows the only way on until a cell where the heading has a choice (a switch: the edge's end
node), the train's target, or a dead end. At a switch the tree branches again, down to ``depth``
levels: 2 + 4 + ... + 2^depth edge slots in breadth-first order (slot 0 / 1 = the left / right
branch from the train, 2 / 3 = the left / right branches after slot 0, ...). A train with one way on
fills slot 0 only; missing branches are all-zero rows.

Edge features (``EDGE_FEATURES``, distances divided by the map's width + height):
  exists, segment length, distance from the edge's end to the target, target on the segment,
  trains on the segment heading the same way, heading the opposite way (each / 5), distance to the
  first train ahead, distance to the first train coming the other way, an oncoming train whose
  random id is above the train's own (it would expect us to yield), a deadlocked train on the
  segment, the end switch occupied.
Global features (``GLOBAL_FEATURES``): shortest distance to the target, on a switch with a choice,
before a switch, deadlocked, the train's random id (drawn in [0, 1] per episode), the share of trains
running, the share of the simulator's step limit used.
"""

from __future__ import annotations

import numpy as np
from ppoor.railway.track import branches, decision_point, exits, next_cell, occupancy

EDGE_FEATURES = (
    "exists",
    "length",
    "end_to_target",
    "target_on_segment",
    "same_direction_trains",
    "opposite_direction_trains",
    "to_train_ahead",
    "to_oncoming_train",
    "oncoming_with_higher_id",
    "deadlocked_on_segment",
    "end_switch_occupied",
)
GLOBAL_FEATURES = (
    "to_target",
    "on_switch",
    "before_switch",
    "deadlocked",
    "random_id",
    "running_share",
    "time_share",
)


def edge_slots(depth: int) -> int:
    """Edges of a full binary tree of ``depth`` levels below the train: 2 + 4 + ... + 2^depth."""
    return 2 ** (depth + 1) - 2


def walk(env, position: tuple, heading: int, limit: int) -> tuple[list, tuple | None, int]:
    """Follows the track from ``position`` leaving by ``heading`` until a cell with a choice for the
    current heading (returned as the end, with the heading on entering it) or a dead end / ``limit``
    cells. Returns the cells entered [(cell, heading)], the end switch configuration (None if the
    segment ends without one) and its length."""
    cells = []
    cell, direction = next_cell(position, heading), heading
    while len(cells) < limit:
        cells.append((cell, direction))
        ways = exits(env, cell, direction)
        if len(ways) != 1:
            return cells, ((cell, direction) if len(ways) > 1 else None), len(cells)
        cell, direction = next_cell(cell, ways[0]), ways[0]
    return cells, None, len(cells)


def train_observation(wrapper, handle: int, occupied: dict, depth: int, ids: np.ndarray) -> tuple:
    """Edge features [edge_slots(depth), len(EDGE_FEATURES)] and global features
    [len(GLOBAL_FEATURES)] of train ``handle`` of a ``railway.env.RailDecisionEnv``; ``occupied`` from
    ``occupancy``, ``ids`` [T] the trains' random ids."""
    env = wrapper.env
    scale = float(env.width + env.height)
    agent = env.agents[handle]
    edges = np.zeros((edge_slots(depth), len(EDGE_FEATURES)), dtype=np.float32)
    position, heading = agent.current_configuration or agent.initial_configuration
    targets = {cell for cell, _ in agent.targets}
    distances = wrapper.distances[handle]
    frontier = [(0, position, heading)]  # (first slot of this node's children, cell, heading)
    level_start, level = 0, 0
    while frontier and level < depth:
        next_frontier = []
        for slot_base, cell, direction in frontier:
            ordered = branches(env, cell, direction)
            for k, way in enumerate(ordered[:2]):
                slot = slot_base + k
                cells, end, length = walk(env, cell, way, int(scale) * 2)
                edges[slot] = edge_features(
                    wrapper, handle, cells, end, length, occupied, ids, targets, distances, scale
                )
                if end is not None:
                    child_base = level_start + 2 ** (level + 1) + 2 * (slot - level_start)
                    next_frontier.append((child_base, end[0], end[1]))
        frontier = next_frontier
        level_start += 2 ** (level + 1)
        level += 1
    own = wrapper.distance(handle) / scale
    on_map = agent.current_configuration is not None
    on_switch, before = decision_point(env, position, heading) if on_map else (False, False)
    running = float((wrapper.released & ~wrapper.finished).sum()) / wrapper.trains
    time_share = env._elapsed_steps / max(env._max_episode_steps, 1)
    glob = np.array(
        [min(own, 2.0), on_switch, before, wrapper.deadlocked[handle], ids[handle], running, time_share],
        dtype=np.float32,
    )
    return edges, glob


def edge_features(wrapper, handle, cells, end, length, occupied, ids, targets, distances, scale) -> np.ndarray:
    """The EDGE_FEATURES row of one segment (see the module docstring)."""
    same = opposite = 0
    ahead = oncoming = scale
    higher = deadlocked = on_target = 0.0
    for step, (cell, direction) in enumerate(cells, start=1):
        if cell in targets:
            on_target = 1.0
        if cell in occupied:
            other, other_heading = occupied[cell]
            if other == handle:
                continue
            if wrapper.deadlocked[other]:
                deadlocked = 1.0
            if other_heading == direction:
                same += 1
                ahead = min(ahead, step)
            else:
                opposite += 1
                oncoming = min(oncoming, step)
                higher = max(higher, float(ids[other] > ids[handle]))
    if end is not None:
        (row, col), direction = end
        to_target = distances[row, col, direction]
        end_occupied = float(end[0] in occupied)
    else:
        row, col = cells[-1][0]
        to_target = distances[row, col, cells[-1][1]] if cells else np.inf
        end_occupied = 0.0
    to_target = min(float(to_target) / scale, 2.0) if np.isfinite(to_target) else 2.0
    return np.array(
        [1.0, length / scale, to_target, on_target, same / 5, opposite / 5, ahead / scale, oncoming / scale,
         higher, deadlocked, end_occupied],
        dtype=np.float32,
    )  # fmt: skip


def observe(wrapper, depth: int, ids: np.ndarray, radius: int) -> dict:
    """Every train's observation in one env: edges [T, S, len(EDGE_FEATURES)], globals
    [T, len(GLOBAL_FEATURES)], deciding [T] bool (must act now), mask [T, 3] bool (the actions the
    safety layer allows), prior [T, 3] float (one-hot: the action of the shortest-path rule within that
    mask, ``RailDecisionEnv.shortest_path_actions``, or within the reservation check's mask under the
    segment veto: the layer's own rule either way; zeros for trains not deciding), active [T] bool
    (released and unfinished) and neighbors [T, T] bool (active trains whose cells, or start cells
    while off the map, lie within ``radius`` cells (Manhattan) of each other, self included: the
    trains whose messages each train receives)."""
    env = wrapper.env
    occupied = occupancy(env)
    trains = wrapper.trains
    edges = np.zeros((trains, edge_slots(depth), len(EDGE_FEATURES)), dtype=np.float32)
    globs = np.zeros((trains, len(GLOBAL_FEATURES)), dtype=np.float32)
    active = wrapper.released & ~wrapper.finished
    for handle in np.flatnonzero(active):
        edges[handle], globs[handle] = train_observation(wrapper, handle, occupied, depth, ids)
    where = np.array(
        [(a.current_configuration or a.initial_configuration)[0] for a in env.agents], dtype=np.int64
    ).reshape(trains, 2)
    near = np.abs(where[:, None] - where[None]).sum(-1) <= radius
    deciding = wrapper.deciding()
    mask = wrapper.action_mask(deciding)
    proposed = mask if wrapper.veto == "path" else wrapper.reservation_mask(deciding)
    prior = np.zeros((trains, 3), dtype=np.float32)
    prior[deciding, wrapper.shortest_path_actions(proposed, deciding)[deciding]] = 1.0
    return {
        "edges": edges,
        "globals": globs,
        "deciding": deciding,
        "mask": mask.copy(),  # the env keeps its own (read-only) for the step
        "prior": prior,
        "active": active,
        "neighbors": near & active[:, None] & active[None],
    }
