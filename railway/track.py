"""The track geometry of a Flatland map that the railway modules share: the decision vocabulary,
the simulator's actions, where a train may go from a cell, which cells are switches, who stands
where, and which trains are deadlocked. ``railway.env`` (the decision env), ``railway.safety`` (the
safety layer) and ``railway.tree`` (the observation) all build on it; it imports none of them.

Positions are (row, column); directions 0..3 = north, east, south, west. ``env`` is a
``flatland.envs.rail_env.RailEnv``.
"""

from __future__ import annotations

from collections import deque

import numpy as np

STOP, LEFT, RIGHT = 0, 1, 2
ACTIONS = ("stop", "left branch", "right branch")
# the simulator's actions (flatland.envs.rail_env_action.RailEnvActions)
DO_NOTHING, MOVE_LEFT, MOVE_FORWARD, MOVE_RIGHT, STOP_MOVING = 0, 1, 2, 3, 4
ROW_STEP = (-1, 0, 1, 0)
COL_STEP = (0, 1, 0, -1)


def exits(env, position: tuple, direction: int) -> list[int]:
    """The directions a train at ``position`` heading ``direction`` may leave the cell in."""
    return [d for d, allowed in enumerate(env.rail.get_transitions((position, direction))) if allowed]


def rail_moves(env) -> dict:
    """{(cell, heading): [(next cell, heading there), ...]} for every rail cell and heading a train can
    leave it by: the moves of the simulator's trains, one step each."""
    moves = {}
    for row, col in zip(*np.nonzero(env.rail.grid), strict=True):
        cell = (int(row), int(col))
        for heading in range(4):
            ways = [(next_cell(cell, way), way) for way in exits(env, cell, heading)]
            ways = [(to, way) for to, way in ways if 0 <= to[0] < env.height and 0 <= to[1] < env.width]
            if ways:
                moves[cell, heading] = ways
    return moves


def distance_lists(env, moves: dict | None = None) -> tuple[list[int], list[list[float]]]:
    """(each train's target number, the distances to each distinct target as flat lists [H * W * 4]): the
    number of moves from state (row * W + column) * 4 + heading to one of the target's valid
    configurations, inf where none is reachable. One backward breadth-first search per distinct target over
    ``moves`` (``rail_moves(env)`` where not given); ``distance_maps`` gives them as Flatland does."""
    height, width = env.height, env.width
    before: dict[int, list[int]] = {}  # state -> the states one move before it
    for (cell, heading), ways in (rail_moves(env) if moves is None else moves).items():
        for to, way in ways:
            before.setdefault((to[0] * width + to[1]) * 4 + way, []).append((cell[0] * width + cell[1]) * 4 + heading)
    index, lists, searched = [], [], {}  # searched: a target's valid configurations -> its number
    for agent in env.agents:
        goals = frozenset(
            (cell, int(heading)) for cell, heading in agent.targets if env.rail.is_valid_configuration((cell, heading))
        )
        if goals not in searched:
            searched[goals] = len(lists)
            distance = [float("inf")] * (height * width * 4)
            queue = deque()
            for (row, col), heading in goals:
                distance[(row * width + col) * 4 + heading] = 0.0
                queue.append((row * width + col) * 4 + heading)
            while queue:
                state = queue.popleft()
                step = distance[state] + 1
                for earlier in before.get(state, ()):
                    if distance[earlier] > step:
                        distance[earlier] = step
                        queue.append(earlier)
            lists.append(distance)
        index.append(searched[goals])
    return index, lists


def distance_maps(env) -> np.ndarray:
    """[T, H, W, 4]: each train's number of moves from (row, column, heading) to one of its target's valid
    configurations (inf where none is reachable), as Flatland's ``env.distance_map.get()`` gives them."""
    index, flat = distance_lists(env)
    return np.asarray(flat)[index].reshape(len(env.agents), env.height, env.width, 4)


def is_switch(env, position: tuple) -> bool:
    """A cell where a train coming from some direction has more than one way to go on."""
    return any(len(exits(env, position, d)) > 1 for d in range(4))


def next_cell(position: tuple, direction: int) -> tuple:
    return position[0] + ROW_STEP[direction], position[1] + COL_STEP[direction]


def branches(env, position: tuple, direction: int) -> list[int]:
    """Exit directions ordered from the leftmost turn to the rightmost (a U-turn at a dead end counts
    as straight on)."""
    turn = {3: 0, 0: 1, 2: 1, 1: 2}  # (exit - direction) % 4 -> left, straight, right
    return sorted(exits(env, position, direction), key=lambda e: turn[(e - direction) % 4])


def decision_point(env, position: tuple, direction: int) -> tuple[bool, bool]:
    """(on a switch with a choice, on the cell before a switch) for a train at ``position`` heading
    ``direction``: where a train decides."""
    ways = exits(env, position, direction)
    return len(ways) > 1, len(ways) == 1 and is_switch(env, next_cell(position, ways[0]))


def simulator_action(direction: int, exit_direction: int) -> int:
    """The simulator's action that leaves a cell entered heading ``direction`` by ``exit_direction``."""
    return {3: MOVE_LEFT, 1: MOVE_RIGHT}.get((exit_direction - direction) % 4, MOVE_FORWARD)


def occupancy(env) -> dict:
    """{cell: (train, heading)} of the trains on the map."""
    return {
        agent.current_configuration[0]: (agent.handle, agent.current_configuration[1])
        for agent in env.agents
        if agent.current_configuration is not None
    }


def deadlocked_trains(env) -> set[int]:
    """Trains that can never move again: the largest set of trains on the map in which every cell that
    each train may enter next is occupied by a train of the set (two trains head-on on one track;
    a train behind them; a ring of trains each waiting for the next). With speed 1 and no
    malfunctions, a train of this set waits forever, and a train outside it is not stuck for good."""
    occupant = {}
    for agent in env.agents:
        if agent.current_configuration is not None:
            occupant[agent.current_configuration[0]] = agent.handle
    wants = {}
    for agent in env.agents:
        if agent.current_configuration is not None:
            position, direction = agent.current_configuration
            wants[agent.handle] = [next_cell(position, e) for e in exits(env, position, direction)]
    stuck = {handle for handle, cells in wants.items() if cells}
    changed = True
    while changed:
        changed = False
        for handle in list(stuck):
            if any(occupant.get(cell) not in stuck for cell in wants[handle]):
                stuck.discard(handle)
                changed = True
    return stuck
