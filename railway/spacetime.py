"""Prioritized planning in space and time for Flatland, with a large-neighbourhood repair of the
priorities (the approach of the Flatland 3 winner, MAPF-LNS, in its plainest complete form).

Every train's path is planned as a sequence of (cell, heading) per simulator step, one train after
another in a priority order, by safe-interval path planning (SIPP: A* over (cell, heading, safe
interval), ``search``) with the shortest-path distance map as its heuristic. A planned path reserves
its cells at its steps; a later train may not:
- stand on a cell another train holds at that step (two trains wanting one cell);
- swap cells with another train in one step (a head-on pass);
while following a train that leaves a cell in the same step is allowed, as the simulator allows it.
Trains wait before departing (off the map, reserving nothing) and on the track. A train enters the
map on its start cell at the earliest one step after its earliest departure, moves one cell per
step and leaves the map on the step it reaches its target (``Track``'s model of the simulator, which
the tests check against the simulator itself). Paths end within the episode's step limit; a train no
path fits waits off the map, and is tried again whenever a train arrives.

The repair (``Planner.repair``) takes a train that found no path with a few trains whose reservations
lie on its way, plans them again with the failed train first, and keeps the result when more trains
arrive (or as many, sooner), until its time is spent. ``play_planner`` runs an episode: it plans,
steps the simulator by the plans, and replans the trains the simulator moved otherwise than planned
(malfunctions, where the env has them); where a replan would strand a train on the map, it carries the
plans out in order instead of on time (``Precedence``) until all trains can be planned afresh.

Positions are (row, column); headings 0..3 = north, east, south, west; a step t is the simulator's
state after its t-th step (t = 0 at reset).
"""

from __future__ import annotations

import heapq
import itertools
import time
from dataclasses import dataclass

import numpy as np
from ppoor.railway.scores import episode_scores, normalized_score
from ppoor.railway.track import (
    DO_NOTHING,
    MOVE_FORWARD,
    STOP_MOVING,
    distance_lists,
    rail_moves,
    simulator_action,
)

INF = float("inf")
RESYNC_STEPS = 10  # while plans run in order (``Precedence``), every train is planned again from scratch this often
ORDERINGS = ("closest", "longest", "random")
"""The fixed priority orders: the trains closest to their targets first, the farthest first, or random
orders (restarted while the planning time lasts, the best kept)."""


@dataclass
class Plan:
    """One train's path: (cell, heading) at steps ``start``, ``start`` + 1, ..., the last on its target
    (the step it arrives and leaves the map). ``enters``: the train is off the map before ``start`` and
    enters on its start cell at that step."""

    handle: int
    start: int
    path: list
    enters: bool

    @property
    def arrival(self) -> int:
        return self.start + len(self.path) - 1

    def at(self, t: int):
        """(cell, heading) at step t, or None while off the map (before entering, after arriving)."""
        return self.path[t - self.start] if self.start <= t <= self.arrival else None


class Track:
    """What the planner knows of one map: each train's start, target, earliest entering step and
    distances to its target (``distance_lists``), the moves from each (cell, heading), and the step limit."""

    def __init__(self, env):
        self.env = env
        self.trains = len(env.agents)
        self.max_steps = int(env._max_episode_steps)
        self.ways = rail_moves(env)
        self.target_index, self.target_distances = distance_lists(env, self.ways)  # flat [H * W * 4] each
        self.starts = [agent.initial_configuration for agent in env.agents]
        self.targets = [next(iter(agent.targets))[0] for agent in env.agents]
        # ready to depart after the step that reaches the earliest departure (step 1 at the soonest), on the
        # map one step later
        self.earliest = [max(int(agent.earliest_departure), 1) + 1 for agent in env.agents]
        self.latest = [int(agent.latest_arrival) for agent in env.agents]
        self.cell_steps = [steps_per_cell(agent.speed_counter.max_speed) for agent in env.agents]

    def moves(self, cell: tuple, heading: int) -> list:
        """[(next cell, heading there)] of the exits from ``cell`` entered heading ``heading``."""
        return self.ways.get((cell, heading), [])

    def flat_distances(self, handle: int) -> list:
        """The train's distances as a flat list: state (row * W + column) * 4 + heading (``distance_lists``)."""
        return self.target_distances[self.target_index[handle]]

    def distance(self, handle: int, cell: tuple, heading: int) -> float:
        return self.flat_distances(handle)[(cell[0] * self.env.width + cell[1]) * 4 + heading]

    def alone_arrival(self, handle: int) -> float:
        """The step the train would arrive alone on the map, leaving at its earliest (inf: never)."""
        (cell, heading), enter = self.starts[handle], self.earliest[handle]
        return enter + self.cell_steps[handle] * self.distance(handle, cell, heading)


def steps_per_cell(speed) -> int:
    """The steps a train of ``speed`` (Flatland's fraction of a cell per step: 1, 1/2, 1/3, ...) spends in
    each cell it passes. Raises ValueError for a speed that is not 1/k: its steps per cell would vary."""
    k = round(1 / float(speed))
    if k < 1 or abs(float(speed) * k - 1) > 1e-9:
        raise ValueError(f"a train's speed must be 1/k for a whole k (Flatland 3's 1, 1/2, 1/3, 1/4), got {speed}")
    return k


class Reservations:
    """Who holds which cell at which step: the planned paths, and the parked trains (on the map with
    no path: they hold their cell from a step on, for good)."""

    def __init__(self):
        self.by_cell: dict = {}  # cell -> {t: handle}: the planned paths' reservations
        self.parked: dict = {}  # cell -> (handle, from step)

    def holder(self, cell: tuple, t: int):
        park = self.parked.get(cell)
        if park is not None and t >= park[1]:
            return park[0]
        return self.by_cell.get(cell, {}).get(t)

    def free(self, cell: tuple, t: int, handle: int) -> bool:
        return self.holder(cell, t) in (None, handle)

    def swap(self, cell: tuple, to: tuple, t: int, handle: int) -> bool:
        """Another train moves from ``to`` into ``cell`` between steps t and t + 1."""
        other = self.by_cell.get(to, {}).get(t)
        return other is not None and other != handle and self.by_cell.get(cell, {}).get(t + 1) == other

    def safe_intervals(self, cell: tuple, handle: int) -> list[tuple[int, float]]:
        """The maximal runs (first, last) of steps at which ``cell`` is free for ``handle``, in order
        (the last run's end is inf when nobody holds the cell for good)."""
        park = self.parked.get(cell)
        end = park[1] - 1 if park is not None and park[0] != handle else INF
        taken = sorted(t for t, h in self.by_cell.get(cell, {}).items() if h != handle and t <= end)
        runs, first = [], 0
        for t in taken:
            if t > first:
                runs.append((first, t - 1))
            first = t + 1
        if first <= end:
            runs.append((first, end))
        return runs

    def holders(self, cells) -> set:
        """The trains whose paths hold any of ``cells`` at some step (parked trains not included)."""
        return {h for cell in cells for h in self.by_cell.get(cell, {}).values()}

    def add(self, plan: Plan) -> None:
        for k, (cell, _) in enumerate(plan.path):
            self.by_cell.setdefault(cell, {})[plan.start + k] = plan.handle

    def remove(self, plan: Plan) -> None:
        for k, (cell, _) in enumerate(plan.path):
            if self.by_cell[cell].get(plan.start + k) == plan.handle:
                del self.by_cell[cell][plan.start + k]


def first_states(track: Track, handle: int, t0: int, at, ready: int, safe) -> tuple[list, tuple | None]:
    """``search``'s first states, as (state, step, estimate to go), and the origin state of a train on the
    map (None off it): off the map, its start cell in each safe interval (``safe``: cell -> intervals) that
    ends after it may enter; on it, its cell's interval around t0, where it holds its cell until ``ready``."""
    k, row = track.cell_steps[handle], 4 * track.env.width
    dist = track.flat_distances(handle)
    if at is None:
        (cell, heading), enter_from = track.starts[handle], max(ready, track.earliest[handle])
        h = k * dist[cell[0] * row + cell[1] * 4 + heading]
        return [((cell, heading, first, last), max(first, enter_from), h)
                for first, last in safe(cell) if last >= enter_from], None  # fmt: skip
    (cell, heading), h = at, k * dist[at[0][0] * row + at[0][1] * 4 + at[1]]
    # t0 itself may be taken (a replan after the simulator departed from the plan): then it may wait
    # on only into a run of free steps from t0 + 1, or move on; it must hold its cell until ``ready``
    first, last = next(((a, b) for a, b in safe(cell) if a <= t0 + 1 and t0 <= b), (t0, t0))
    origin = (cell, heading, first, last)
    return ([(origin, t0, max(h + ready - t0 - k, 0))] if ready - 1 <= last else []), origin


def search(
    track: Track, book: Reservations, handle: int, t0: int, at, limit: int, ready: int | None = None
) -> Plan | None:
    """Safe-interval path planning (SIPP) for train ``handle`` from step ``t0``: ``at`` its (cell,
    heading) on the map at t0, or None when it is off the map (it enters at the earliest at max(t0 + 1,
    its earliest step, ``ready``)). ``ready``: the first step it may be in its next cell (on the map) or
    enter (off it); default t0 + 1 (the train at the end of its cell, not broken). A train of speed 1/k
    stays k steps in each cell (``Track.cell_steps``). Returns a path that arrives soonest within the step
    limit without breaking a reservation, or None when there is none (or ``limit`` states were expanded first).

    A* over (cell, heading, safe interval of the cell) instead of over every step: each state is
    reached at its earliest step, waiting inside a safe interval is free, so a move leaves at the
    first step from which it enters a safe interval of the next cell and swaps with nobody. Its
    arrival step equals that of A* over every (cell, heading, step) (the tests compare the two)."""
    target, horizon, k = track.targets[handle], track.max_steps, track.cell_steps[handle]
    dist, row = track.flat_distances(handle), 4 * track.env.width  # Python floats: the inner loop reads them
    ready = t0 + 1 if ready is None else max(ready, t0 + 1)
    intervals: dict = {}  # cell -> its safe intervals for this train

    def safe(cell):
        runs = intervals.get(cell)
        if runs is None:
            runs = intervals[cell] = book.safe_intervals(cell, handle)
        return runs

    tie = itertools.count()
    reached: dict = {}  # (cell, heading, safe interval's first, last step) -> (step reached, parent state, step left)
    frontier: list = []

    def push(state, t, h, parent, left):
        if t + h <= horizon and t < reached.get(state, (INF,))[0]:
            reached[state] = (t, parent, left)
            heapq.heappush(frontier, (t + h, -t, next(tie), state, t))

    starts, origin = first_states(track, handle, t0, at, ready, safe)
    for state, t, h in starts:
        push(state, t, h, None, None)
    expanded = 0
    while frontier and expanded < limit:
        _, _, _, state, t = heapq.heappop(frontier)
        if t > reached[state][0]:
            continue  # reached sooner since it was pushed
        expanded += 1
        cell, heading, _, last = state  # it may wait here up to step ``last``
        if cell == target:
            return unroll(handle, state, reached, at is None)
        first_leave = ready - 1 if state == origin and t == t0 else t + k - 1  # k steps in a cell, moving
        for to, way in track.moves(cell, heading):
            h = dist[to[0] * row + to[1] * 4 + way]
            if h == INF:
                continue
            h *= k
            for start, end in safe(to):
                if start > last + 1 or max(first_leave + 1, start) + h > horizon:
                    break
                leave = max(first_leave, start - 1)
                while leave <= min(last, end - 1):  # the first step to leave on that swaps with nobody
                    if not book.swap(cell, to, leave, handle):
                        push((to, way, start, end), leave + 1, h, state, leave)
                        break
                    leave += 1
    return None


def unroll(handle: int, goal: tuple, reached: dict, enters: bool) -> Plan:
    """The per-step path of the search states that lead to ``goal``: each state's (cell, heading) from
    the step it was reached to the step it was left."""
    path, state, until = [], goal, None
    while state is not None:
        t, parent, left = reached[state]
        path += [(state[0], state[1])] * ((t if until is None else until) - t + 1)
        state, until = parent, left
    path.reverse()
    return Plan(handle, t, path, enters)


def free_path_cells(track: Track, handle: int, at) -> set:
    """The cells of the train's shortest path from ``at`` (or its start) to its target, ignoring the others."""
    cell, heading = at or track.starts[handle]
    cells = {cell}
    while cell != track.targets[handle]:
        options = [(track.distance(handle, to, way), to, way) for to, way in track.moves(cell, heading)]
        if not options or not np.isfinite(min(options)[0]):
            break
        _, cell, heading = min(options)
        cells.add(cell)
    return cells


class Allowance:
    """What one planning phase may spend, counted from its creation: wall-clock ``seconds`` (Flatland 3's
    limits), or, with ``searches``, that many train searches (``search`` calls) instead: the same plans on
    every run whatever else the machine runs, for comparisons (the seconds then are measured, not bounded)."""

    def __init__(self, seconds: float, searches: int | None = None):
        self.seconds, self.searches = seconds, searches
        self.start, self.used = time.perf_counter(), 0

    def spent(self, share: float = 1.0) -> bool:
        """Whether ``share`` of the allowance is spent."""
        if self.searches is None:
            return time.perf_counter() - self.start >= share * self.seconds
        return self.used >= share * self.searches


class Planner:
    """Plans and repairs the paths of every train of one map (``Track``) from some step on.

    ``plans``: handle -> Plan of the trains with a path; ``failed``: the trains still to run that have
    none. ``limit``: the search states expanded per train and search at most."""

    def __init__(self, track: Track, rng: np.random.Generator, limit: int = 20_000):
        self.track, self.rng, self.limit = track, rng, limit
        self.book = Reservations()
        self.plans: dict[int, Plan] = {}
        self.failed: list[int] = []
        self.ready: dict[int, int] = {}  # handle -> the first step it may move on (a broken or slow train)
        self.searches = 0

    def order(self, ordering: str, handles) -> list[int]:
        """``handles`` in the priority order ``ordering`` (one of ``ORDERINGS``)."""
        handles = list(handles)
        if ordering == "random":
            return [handles[i] for i in self.rng.permutation(len(handles))]
        key = {h: self.track.alone_arrival(h) - self.track.earliest[h] for h in handles}  # the path's length
        return sorted(handles, key=lambda h: (key[h], h), reverse=ordering == "longest")

    def plan(self, order: list[int], t0: int, at: dict) -> None:
        """Plans the trains of ``order`` one after another from step ``t0`` (``at``: handle -> (cell,
        heading) of those on the map, absent for those off it), each around those planned before. A
        train on the map that no path fits is parked: it holds its cell from t0 on."""
        for handle in order:
            self.searches += 1
            plan = search(self.track, self.book, handle, t0, at.get(handle), self.limit, self.ready.get(handle))
            if plan is None:
                self.failed.append(handle)
                if handle in at:
                    self.book.parked[at[handle][0]] = (handle, t0)
            else:
                self.plans[handle] = plan
                self.book.add(plan)

    def drop(self, handles) -> None:
        """Forgets the plans of ``handles`` (and their parking): they are to be planned again."""
        handles = set(handles)
        for handle in handles:
            if handle in self.plans:
                self.book.remove(self.plans.pop(handle))
            if handle in self.failed:
                self.failed.remove(handle)
        self.book.parked = {cell: park for cell, park in self.book.parked.items() if park[0] not in handles}

    def snapshot(self) -> tuple:
        """The plans, the failed trains and the reservations, for ``restore``."""
        book = self.book
        return dict(self.plans), list(self.failed), {c: dict(v) for c, v in book.by_cell.items()}, dict(book.parked)

    def restore(self, saved: tuple) -> None:
        self.plans, self.failed, self.book.by_cell, self.book.parked = saved

    def stranded(self, on_map: dict) -> bool:
        """Whether a train on the map has no path (it would hold its cell for good)."""
        return any(h in on_map for h in self.failed)

    def replan_all(self, t: int, on_map: dict, done: set) -> bool:
        """Every train still to run planned again from step t: those on the map first, a train with fewer of
        them on its way ahead sooner; then those off it in the order they were to depart. Kept, and True,
        when every train on the map gets a path and no more trains lack one than before; else undone."""
        saved, track = self.snapshot(), self.track
        departs = {h: plan.start for h, plan in self.plans.items()}
        todo = [h for h in range(track.trains) if h not in done]
        self.drop(todo)
        on = [h for h in todo if h in on_map]
        ways = {h: free_path_cells(track, h, on_map[h]) for h in on}
        ahead = {h: sum(on_map[a][0] in ways[h] for a in on if a != h) for h in on}
        off = sorted((h for h in todo if h not in on_map), key=lambda h: (departs.get(h, INF), h))
        self.plan(sorted(on, key=lambda h: (ahead[h], h)) + off, t, on_map)
        if self.stranded(on_map) or len(self.failed) > len(saved[1]):
            self.restore(saved)
            return False
        return True

    def crossing_parked(self) -> set:
        """The trains whose planned paths enter a parked train's cell while it is parked there."""
        return {
            h for cell, (parker, since) in self.book.parked.items()
            for s, h in self.book.by_cell.get(cell, {}).items() if s >= since and h != parker
        }  # fmt: skip

    @property
    def planned_share(self) -> float:
        """The share of the map's trains with a path (each arrives: the simulator carries plans out)."""
        return len(self.plans) / self.track.trains

    def objective(self) -> tuple[int, int, int]:
        """(trains planned to arrive, minus the steps they arrive after their latest arrival, minus the sum
        of their arrival steps): larger is better. The lateness is what Flatland 3's score charges an
        arrived train."""
        latest = self.track.latest
        late = sum(max(plan.arrival - latest[plan.handle], 0) for plan in self.plans.values())
        return len(self.plans), -late, -sum(plan.arrival for plan in self.plans.values())

    def repair(self, t0: int, at: dict, allowance: Allowance, size: int = 4) -> int:
        """Large-neighbourhood search over the priorities until ``allowance`` is spent: a failed
        train and up to ``size`` trains holding cells of its free path, planned again with it first
        (the others in random order); kept when the objective improves, else undone. Returns the
        repairs kept."""
        kept = 0
        while self.failed and not allowance.spent():
            handle = self.failed[int(self.rng.integers(len(self.failed)))]
            cells = free_path_cells(self.track, handle, at.get(handle))
            holders = sorted(h for h in self.book.holders(cells) if h in self.plans and h != handle)
            chosen = [holders[i] for i in self.rng.permutation(len(holders))[:size]]
            before, saved, parked = self.objective(), {h: self.plans[h] for h in chosen}, dict(self.book.parked)
            self.drop([handle, *chosen])
            searched = self.searches
            self.plan([handle, *chosen], t0, at)
            allowance.used += self.searches - searched
            if self.objective() > before and not self.crossing_parked():
                kept += 1
                continue
            self.drop([handle, *chosen])  # undo: the old plans back, the train failed again
            for plan in saved.values():
                self.plans[plan.handle] = plan
                self.book.add(plan)
            self.failed.append(handle)
            self.book.parked = parked
        return kept


def actions_at(track: Track, plans: dict, t: int, on_map: dict, at_exit: set | None = None) -> dict:
    """The simulator's action of every train for step t + 1: along its plan (MOVE_FORWARD to enter, a
    move to its next cell, STOP_MOVING to wait on the track), STOP_MOVING for a train on the map with
    no plan, DO_NOTHING off the map. A slow train planned to stay in its cell moves on through it
    (towards its next planned cell) while it is not at the cell's end (``at_exit``: the trains that would
    leave their cell if they moved at t + 1; default all), so that it waits at the end."""
    out = {}
    for handle in range(track.trains):
        plan = plans.get(handle)
        now, then = (plan.at(t), plan.at(t + 1)) if plan else (None, None)
        if then is None or (now is None and not (plan.enters and plan.start == t + 1)):
            out[handle] = STOP_MOVING if handle in on_map else DO_NOTHING
        elif now is None:
            out[handle] = MOVE_FORWARD
        elif then[0] == now[0]:
            if at_exit is None or handle in at_exit:
                out[handle] = STOP_MOVING
                continue
            step = t + 1
            while step < plan.arrival and plan.at(step)[0] == now[0]:
                step += 1
            out[handle] = move_action(track, now, plan.at(step))
        else:
            out[handle] = move_action(track, now, then)
    return out


def move_action(track: Track, now: tuple, then: tuple) -> int:
    """The simulator's action that takes a train at (cell, heading) ``now`` into ``then``'s cell."""
    return MOVE_FORWARD if len(track.moves(*now)) == 1 else simulator_action(now[1], then[1])


def moving_state(env, t: int) -> tuple[dict, set]:
    """({handle: the first step it may be in its next cell (on the map) or enter (off it)} of the trains
    that cannot move at t + 1 as a train at the end of its cell would: broken (Flatland's malfunction
    down counter: it holds its cell for that many steps) or part way through a cell at speed 1/k, the
    trains at the end of their cell, as ``actions_at`` reads them)."""
    from flatland.envs.step_utils.states import TrainState

    ready, at_exit = {}, set()
    for agent in env.agents:
        if agent.state == TrainState.DONE:
            continue
        broken = agent.malfunction_handler.malfunction_down_counter
        counter = agent.speed_counter
        left = 1
        if agent.current_configuration is not None:
            left = round((1 - counter.distance) / counter.max_speed)  # moving steps to the cell's end
            if left == 1:
                at_exit.add(agent.handle)
        if broken or left > 1:
            ready[agent.handle] = t + broken + left
    return ready, at_exit


def positions(env) -> tuple[dict, set]:
    """({handle: (cell, heading)} of the trains on the map, the handles of the trains done)."""
    from flatland.envs.step_utils.states import TrainState

    on_map = {a.handle: a.current_configuration for a in env.agents if a.current_configuration is not None}
    done = {a.handle for a in env.agents if a.state == TrainState.DONE}
    return on_map, done


class Precedence:
    """The plans carried out in order rather than on time: each cell's visits in the order the plans make
    them, and each train's progress through its own. A train enters its next cell once every train planned
    there before it has left that cell, or leaves it in the same step (a ring of trains moves as one), and
    not before its plan says. Plans free of conflicts stay so however late trains run, with no deadlock (the
    minimal communication policy of Ma, Kumar and Koenig, 2017, which the Flatland 2020 winners carried their
    plans out by): what ``play_planner`` falls back on when replanning would leave a train on the map
    without a path."""

    def __init__(self, plans: dict):
        self.visits: dict[int, list] = {}  # handle -> [(cell, heading, planned entering step)], distinct cells
        self.by_cell: dict = {}  # cell -> [(planned entering step, handle, visit index)] of its visits
        self.progress: dict[int, int] = {}  # handle -> the visit it is in (-1: not entered; len: arrived)
        for plan in plans.values():
            self.add(plan)

    def add(self, plan: Plan) -> None:
        """A train's plan (it has not entered the map yet, or is where its plan starts)."""
        visits = []
        for k, (cell, heading) in enumerate(plan.path):
            if not visits or visits[-1][0] != cell:
                visits.append((cell, heading, plan.start + k))
        self.visits[plan.handle], self.progress[plan.handle] = visits, -1 if plan.enters else 0
        for j, (cell, _, step) in enumerate(visits):
            self.by_cell.setdefault(cell, []).append((step, plan.handle, j))

    def update(self, on_map: dict, done: set) -> None:
        """Each train's progress from where the simulator has it."""
        for handle, visits in self.visits.items():
            if handle in done:
                self.progress[handle] = len(visits)
            elif handle in on_map:
                j = max(self.progress[handle], 0)
                while j < len(visits) and visits[j][0] != on_map[handle][0]:
                    j += 1
                if j < len(visits):
                    self.progress[handle] = j

    def moving(self, t: int, on_map: dict, at_exit: set, ready: dict) -> set:
        """The trains that enter their next planned cell at t + 1: the largest set in which each train may
        leave its cell (off the map, or at the cell's end and not broken), is due by its plan, and finds each
        earlier visitor of its next cell gone from it or in it and moving at t + 1 too."""
        waits: dict[int, set] = {}
        for handle, visits in self.visits.items():
            j = self.progress[handle] + 1
            if j >= len(visits) or t + 1 < visits[j][2]:
                continue
            if handle in on_map and (handle not in at_exit or ready.get(handle, t + 1) > t + 1):
                continue
            key = (visits[j][2], handle, j)
            before = [(g, k) for step, g, k in self.by_cell[visits[j][0]] if (step, g, k) < key and self.progress[g] <= k]
            if all(self.progress[g] == k and g in on_map for g, k in before):
                waits[handle] = {g for g, _ in before}
        moving, changed = set(waits), True
        while changed:
            stuck = {h for h in moving if not waits[h] <= moving}
            moving, changed = moving - stuck, bool(stuck)
        return moving

    def actions(self, track: Track, t: int, on_map: dict, at_exit: set, ready: dict) -> dict:
        """The simulator's action of every train for step t + 1 (``actions_at``'s, in order instead of on time)."""
        moving, out = self.moving(t, on_map, at_exit, ready), {}
        for handle in range(track.trains):
            visits = self.visits.get(handle)
            j = self.progress.get(handle, 0) + 1
            if visits is None or j >= len(visits):
                out[handle] = STOP_MOVING if handle in on_map else DO_NOTHING
            elif handle not in on_map:
                out[handle] = MOVE_FORWARD if handle in moving else DO_NOTHING
            elif handle in moving or handle not in at_exit:  # a slow train moves on through its cell
                out[handle] = move_action(track, on_map[handle], visits[j][:2])
            else:
                out[handle] = STOP_MOVING
        return out


def best_plans(track: Track, orders, allowance: Allowance, rng: np.random.Generator) -> Planner:
    """The plans from step 0 of the priority orders ``orders`` yields (the first always planned; more
    while trains stay unplanned and a quarter of ``allowance`` lasts), the best kept, then repaired for
    the rest of it."""
    best = None
    for order in orders:
        planner = Planner(track, rng)
        planner.plan(list(order), 0, {})
        allowance.used += planner.searches
        if best is None or planner.objective() > best.objective():
            best = planner
        if not best.failed or allowance.spent(0.25):
            break
    best.repair(0, {}, allowance)
    return best


def initial_plans(track: Track, ordering: str, allowance: Allowance, rng: np.random.Generator) -> Planner:
    """The plans from step 0 in the order ``ordering`` (random: new random orders while a quarter of
    ``allowance`` lasts, the best kept), then repaired for the rest of it (``best_plans``)."""
    orderer = Planner(track, rng)

    def orders():
        yield orderer.order(ordering, range(track.trains))
        while ordering == "random":
            yield orderer.order(ordering, range(track.trains))

    return best_plans(track, orders(), allowance, rng)


def check_budget(ordering: str, seconds: float, step_seconds: float, searches: int | None) -> None:
    """``play_planner``'s ordering and planning budget, refused in one line (ValueError) where they cannot work."""
    if ordering not in ORDERINGS:
        raise ValueError(f"ordering must be one of {', '.join(ORDERINGS)}, got {ordering!r}")
    if not seconds > 0:
        raise ValueError(f"the planning time must be positive, got {seconds}")
    if not step_seconds > 0:
        raise ValueError(f"the planning time per step must be positive, got {step_seconds}")
    if searches is not None and searches < 10:
        raise ValueError(f"the planning searches must be at least 10 (a tenth of them a step), got {searches}")


def play_planner(
    env,
    ordering: str = "random",
    seconds: float = 10.0,
    seed: int = 0,
    disturb=None,
    initial=None,
    step_seconds: float = 1.0,
    searches: int | None = None,
) -> dict:
    """One episode of the RailEnv ``env`` (just reset) run by the planner: plans with ``ordering`` (by
    default random restarts, the best fixed order on the test maps) and the repair within ``seconds``
    (``initial``: a callable (track, Allowance, rng) -> Planner that plans instead, such as a learned
    order's, ``railway.priorities.learned_plans``), then steps the simulator along the plans (``replan``:
    the trains it moved otherwise, those a malfunction stopped and those they block; ``disturb``: an
    optional callable (step, actions) -> actions that overrides some, as an outside fault would),
    retrying the trains without a path whenever a train arrives (one on the map with no path holds its
    cell meanwhile) and repairing for at most ``step_seconds`` a step. When a replan would leave a train on the
    map without a path (it would hold its cell for good, and the trains behind it fail in turn), the plans of
    the step before are carried out in order instead (``Precedence``: late, without conflicts or deadlocks)
    until every train can be planned again from scratch (tried every ``RESYNC_STEPS``). (``searches``: instead of seconds, that
    many train searches before the first step and a tenth of them a step, ``Allowance``). Returns ``episode_scores`` with
    planning_seconds (the episode's planning: initial, repair and replanning), replans (trains replanned
    after leaving their plan or broken), planned (trains with a path at step 0)."""
    check_budget(ordering, seconds, step_seconds, searches)
    from ppoor.railway.track import deadlocked_trains

    start = time.perf_counter()
    track = Track(env)
    rng = np.random.default_rng(seed)
    allowance = Allowance(seconds, searches)
    planner = initial(track, allowance, rng) if initial else initial_plans(track, ordering, allowance, rng)
    planned, replans, first = len(planner.plans), 0, time.perf_counter() - start
    rewards, simulator_seconds, arrived_before = np.zeros(track.trains), 0.0, 0
    step_times: list[float] = []
    deadlocked: set = set()
    precedence, since = None, 0  # the plans carried out in order since step ``since`` (a replan stranded a train)
    while not env.dones["__all__"]:
        tick = time.perf_counter()
        t = env._elapsed_steps
        on_map, done = positions(env)
        planner.ready, at_exit = moving_state(env, t)
        arrived, arrived_before = len(done) > arrived_before, len(done)
        if precedence is not None and (t - since) % RESYNC_STEPS == 0 and planner.replan_all(t, on_map, done):
            precedence = None  # every train has a path from here again: back to replanning on time
        if precedence is None:
            replanned, stranded = replan(planner, t, on_map, done, arrived, Allowance(step_seconds, searches and searches // 10))
            replans += replanned
            if stranded:  # in order instead: the plans before this step, late where they must be
                precedence, since = Precedence(planner.plans), t
        if precedence is None:
            actions = actions_at(track, planner.plans, t, on_map, at_exit)
        else:
            actions = in_order(planner, precedence, t, on_map, done, at_exit, arrived)
        if disturb is not None:
            actions = disturb(t + 1, actions)
        step_times.append(time.perf_counter() - tick)
        tick = time.perf_counter()
        _, step_rewards, _, _ = env.step(actions)
        simulator_seconds += time.perf_counter() - tick
        rewards += np.array([step_rewards[h] for h in range(track.trains)])
        deadlocked |= deadlocked_trains(env)
    scores = episode_scores(env, normalized_score(env, rewards), deadlocked, first, step_times, simulator_seconds)
    return {**scores, "planning_seconds": first + sum(step_times), "replans": replans, "planned": planned}


def in_order(planner: Planner, precedence: Precedence, t: int, on_map: dict, done: set, at_exit: set, arrived: bool) -> dict:
    """The actions for step t + 1 with the plans carried out in order (``Precedence``); when a train ``arrived``,
    the trains off the map without a path are planned again (a new plan fits the order wherever it is put:
    the train holds no cell yet)."""
    precedence.update(on_map, done)
    if arrived and (waiting := [h for h in planner.failed if h not in on_map and h not in done]):
        planner.drop(waiting)
        planner.plan(waiting, t, {})
        for handle in waiting:
            if handle in planner.plans:
                precedence.add(planner.plans[handle])
    return precedence.actions(planner.track, t, on_map, at_exit, planner.ready)


def replan(planner: Planner, t: int, on_map: dict, done: set, arrived: bool, allowance: Allowance) -> tuple[int, bool]:
    """Brings the plans in line with the simulator at step t: replans the trains it moved otherwise than
    planned, the broken ones whose plans move before they can (``Planner.ready``), the trains whose
    reservations a broken train's held cell now blocks, and (when a train ``arrived``) the trains with
    no path; a broken train first, then those on the map. A train on the map left without a path holds
    its cell; the repair runs on while trains lack one, until ``allowance`` (which the replanning's searches
    count towards) is spent. Returns (the trains replanned, whether a train on the map was left without a
    path: then the whole replan is undone, the plans of before kept)."""
    plans, ready = planner.plans, planner.ready

    def broken(h):
        plan, hold = plans.get(h), ready[h]
        if plan is None:
            return False
        if h not in on_map:
            return plan.start < hold
        return plan.at(hold - 1) is None or plan.at(hold - 1)[0] != on_map[h][0]

    off_plan = {h for h, plan in plans.items() if h not in done and on_map.get(h) != plan.at(t)}
    stopped = {h for h in ready if h not in done and h not in off_plan and broken(h)}
    moved = stopped | off_plan  # the trains whose plans the simulator broke, planned first
    blocked = set()
    for h in moved:
        if h in on_map:
            held = planner.book.by_cell.get(on_map[h][0], {})
            blocked |= {other for s, other in held.items() if s >= t and other != h}
    retry = {h for h in planner.failed if h not in done} if arrived else set()
    chosen = (off_plan | stopped | blocked | retry) - done
    if not chosen:
        return 0, False
    saved, first, retried, searched = planner.snapshot(), set(moved), set(), planner.searches
    while chosen:
        planner.drop(chosen)
        planner.plan(sorted(chosen, key=lambda h: (h not in first, h not in on_map, h)), t, on_map)
        chosen = planner.crossing_parked()  # a train parked on the way of another's plan: that one again
        if chosen:  # and the parked trains once more, first, now that the plans in their way are gone
            first = {h for h in planner.failed if h in on_map} - retried
            retried |= first
            chosen |= first
    allowance.used += planner.searches - searched
    planner.repair(t, on_map, allowance)
    if planner.stranded(on_map):
        planner.restore(saved)
        return len(moved), True
    return len(moved), False


def malfunction_steps(env) -> list[set[int]]:
    """[T]: the steps at which each train of the RailEnv ``env`` (just reset) is broken, read by stepping
    ``env`` to its end with every train left off the map. Flatland draws each train's malfunctions at every
    step whatever the trains do, so a map's malfunctions are the same for every rule that plays it. A
    malfunction of one step is not seen (Flatland 3's last 20 to 50); none without a malfunction generator."""
    from flatland.envs.malfunction_generators import ParamMalfunctionGen

    trains = len(env.agents)
    broken: list[set[int]] = [set() for _ in range(trains)]
    if not isinstance(getattr(env.effects_generator, "malfunction_generator", None), ParamMalfunctionGen):
        return broken
    before = [0] * trains  # the down counter after the previous step: 1 means broken during this one too
    while not env.dones["__all__"]:
        env.step(dict.fromkeys(range(trains), DO_NOTHING))
        for agent in env.agents:
            counter = agent.malfunction_handler.malfunction_down_counter
            if counter > 0 or before[agent.handle] == 1:
                broken[agent.handle].add(env._elapsed_steps)
            before[agent.handle] = counter
    return broken


def alone_arrivals(env) -> list[float]:
    """[T]: the step each train of the RailEnv ``env`` (just reset; stepped to its end here) would arrive if
    it ran alone on the map with its own malfunctions, leaving at its earliest departure (inf: never): it
    enters at the first step from its earliest at which it is not broken, then needs k steps a cell of its
    shortest path at speed 1/k, none of them while broken."""
    track = Track(env)
    broken = malfunction_steps(env)
    arrivals = []
    for handle in range(track.trains):
        need = track.cell_steps[handle] * track.distance(handle, *track.starts[handle])
        t = track.earliest[handle]
        while t in broken[handle]:
            t += 1
        while need > 0 and t <= track.max_steps:
            t += 1
            need -= t not in broken[handle]
        arrivals.append(t if need == 0 else INF)
    return arrivals


def oracle_arrival(env) -> float:
    """The fraction of trains of the RailEnv ``env`` (just reset; stepped to its end here) that would arrive
    within the step limit if each ran alone on the map with its own malfunctions, leaving at its earliest
    departure (``alone_arrivals``): the bound the timetable and the malfunctions allow any scheduler."""
    limit = int(env._max_episode_steps)
    return float(np.mean([arrival <= limit for arrival in alone_arrivals(env)]))
