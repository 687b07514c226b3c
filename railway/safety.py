"""Which moves a train can make without walking into a head-on conflict: the path-reservation check
of deadlock avoidance (free track ahead before the first oncoming train), per branch.

A train's path is its shortest path to its target from a cell and heading (each cell's exit with the
least remaining distance). For a train about to take a branch, the trains *oncoming* are the trains
on its path whose heading differs from the heading the path has on their cell. The move is *clear*
when, for each oncoming train, the cells of the path before the first oncoming train that are
neither switches nor on that train's own path number at least 1 + the number of oncoming trains:
enough track of its own to meet every oncoming train before their paths overlap. A move along a path
that never reaches the target (a branch with no way back) is never clear. A train stops only when
no branch is clear.

Trains that decide in the same simulator step do not see each other's choices: ``shield`` checks
their moves one after another (highest random id first), each against the cells the earlier ones
move into, and turns a move that is no longer clear into a stop. Trains entering the map are checked
the same way (``clear_to_enter``).

Two vetoes (``VETOES``): ``"path"``, the reservation check above (``clear``), and ``"segment"``
(``segment_clear``): only the head-on conflicts of the next segment, a move into track up to the
train's next choice of exit on which a train is coming the other way, which no later decision can
undo, unless the reservation check allows the move. The second leaves the trains free to break a
knot of reservations (each waiting for a train on its reserved path that waits for it), at the
risk of a deadlock further on; the moves the reservation check allows are still shielded by it, so
a policy that makes only those plays the layer exactly.

Shapes: T trains; ``ACTIONS`` of ``railway.env``: stop, left branch, right branch.
"""

from __future__ import annotations

import numpy as np
from ppoor.railway.track import LEFT, RIGHT, STOP, branches, exits, is_switch, next_cell


class PathBook:
    """Shortest paths of the trains of one map, each computed once per (train, cell, heading):
    ``path(h, cell, heading)`` -> tuple of (cell, heading) entered after ``cell``, ending on the target
    (empty when the target cannot be reached)."""

    def __init__(self, wrapper):
        self.env, self.distances = wrapper.env, wrapper.distances  # [T, H, W, 4]
        self.cache: dict = {}
        self.switches: dict = {}

    def path(self, handle: int, cell: tuple, heading: int) -> tuple:
        key = (handle, cell, heading)
        if key not in self.cache:
            self.cache[key] = self._walk(handle, cell, heading)
        return self.cache[key]

    def _walk(self, handle: int, cell: tuple, heading: int) -> tuple:
        distances = self.distances[handle]
        if not np.isfinite(distances[cell[0], cell[1], heading]):
            return ()
        targets = {cell for cell, _ in self.env.agents[handle].targets}
        out = []
        while cell not in targets and len(out) <= distances.size:
            best = min(exits(self.env, cell, heading), key=lambda e: distances[(*next_cell(cell, e), e)])
            cell, heading = next_cell(cell, best), best
            out.append((cell, heading))
        return tuple(out)

    def is_switch(self, cell: tuple) -> bool:
        if cell not in self.switches:
            self.switches[cell] = is_switch(self.env, cell)
        return self.switches[cell]


def clear(book: PathBook, handle: int, path: tuple, occupied: dict) -> bool:
    """Whether train ``handle`` may enter ``path`` ((cell, heading) from its next cell to its target) with
    the trains ``occupied`` ({cell: (train, heading)}) where they are: see the module docstring."""
    if not path:
        return False
    oncoming, walking, blocked = [], [], False
    for cell, heading in path:
        other = occupied.get(cell)
        if other is not None and other[0] != handle and other[1] != heading:
            oncoming.append((other[0], cell, other[1]))
            blocked = True
        elif not blocked:
            walking.append(cell)
    need = 1 + len(oncoming)
    for other, other_cell, other_heading in oncoming:
        theirs = {cell for cell, _ in book.path(other, other_cell, other_heading)}
        free = sum(1 for cell in walking if cell not in theirs and not book.is_switch(cell))
        if free < need:
            return False
    return True


def segment_clear(book: PathBook, handle: int, path: tuple, occupied: dict) -> bool:
    """Whether train ``handle`` may enter ``path`` under the segment veto: the reservation check allows
    it (``clear``: the layer's own moves stay allowed, so this veto is the weaker one), or the path
    reaches the target and no train stands on its next segment heading the other way with its own
    path through the cell entered (``path[0]``) or ending on the segment before it (its target there:
    whichever train reaches that cell first blocks the other; a train that turns off before it is no
    conflict, one that cannot reach its target is). The next segment: the path's cells up to and
    including the first where the train has a choice of exit (a switch merging into its track does
    not end it: the train cannot leave there).
    The reservation check may allow what the second test forbids (a loop that brings the train back
    onto its segment past trains with track of its own to meet them)."""
    if not path:
        return False
    if clear(book, handle, path, occupied):
        return True
    entered, behind = path[0][0], set()  # behind: the segment's cells between the train and ``cell``
    for cell, heading in path:
        other = occupied.get(cell)
        if other is not None and other[0] != handle and other[1] != heading:
            theirs = book.path(other[0], cell, other[1])
            if cell == entered or not theirs or theirs[-1][0] in behind or entered in {c for c, _ in theirs}:
                return False  # it comes through the cell entered, or ends on this track before it
        behind.add(cell)
        if book.is_switch(cell) and len(exits(book.env, cell, heading)) > 1:
            return True
    return True


VETOES = {"path": clear, "segment": segment_clear}
"""The moves a layer forbids: the reservation check of the whole path, or head-on conflicts of the next
segment only."""


def move_path(book: PathBook, handle: int, action: int) -> tuple:
    """The path (from the next cell) of a train on the map taking ``action`` (left / right branch);
    empty when the target cannot be reached that way (then no veto lets the move through)."""
    env = book.env
    position, heading = env.agents[handle].current_configuration
    ways = branches(env, position, heading)
    way = ways[0] if action == LEFT else ways[-1]
    cell = next_cell(position, way)
    if not np.isfinite(book.distances[handle][(*cell, way)]):
        return ()
    return ((cell, way),) + book.path(handle, cell, way)


def safe_actions(
    book: PathBook, deciding: np.ndarray, occupied: dict, wait: bool = False, veto: str = "path"
) -> np.ndarray:
    """bool [T, 3]: the allowed actions of each deciding train: left / right branch when the path
    through that branch is clear (``VETOES[veto]``), stop only when neither is (a train keeps moving
    while it can: in a time-limited episode every step stood still is lost), or always with ``wait``
    (the layer only vetoes moves); every action for the other trains."""
    out = np.ones((len(deciding), 3), dtype=bool)
    for handle in np.flatnonzero(deciding):
        for action in (LEFT, RIGHT):
            out[handle, action] = VETOES[veto](book, handle, move_path(book, handle, action), occupied)
        out[handle, STOP] = wait or not out[handle, [LEFT, RIGHT]].any()
    return out


def shield(
    book: PathBook,
    actions: np.ndarray,
    deciding: np.ndarray,
    occupied: dict,
    ids: np.ndarray,
    veto: str = "path",
    proposed: np.ndarray | None = None,
) -> np.ndarray:
    """``actions`` [T] with every deciding train's move that is not clear, given the moves of the
    deciding trains before it (by decreasing ``ids`` [T]), turned into STOP. ``occupied`` gains the
    cells the moving trains enter (a cell listed already keeps its train, which may not leave it). A
    move is checked by ``VETOES[veto]``, except that under the segment veto a move the reservation
    check allowed when the trains decided (``proposed`` [T, 3]) keeps that check: the layer's own
    moves are shielded as the layer shields them, and only the moves it would not make get the
    weaker veto."""
    out = np.array(actions, copy=True)
    for handle in sorted(np.flatnonzero(deciding), key=lambda h: -ids[h]):
        if out[handle] == STOP:
            continue
        path = move_path(book, handle, int(out[handle]))
        check = clear if proposed is None or proposed[handle, out[handle]] else VETOES[veto]
        if check(book, handle, path, occupied):
            occupied.setdefault(path[0][0], (handle, path[0][1]))  # a train listed there keeps the cell
        else:
            out[handle] = STOP
    return out


def clear_to_enter(book: PathBook, handle: int, occupied: dict) -> bool:
    """Whether a train ready to depart may enter its start cell now: the cell is free and its path
    from there is clear."""
    cell, heading = book.env.agents[handle].initial_configuration
    if cell in occupied:
        return False
    return clear(book, handle, ((cell, heading),) + book.path(handle, cell, heading), occupied)
