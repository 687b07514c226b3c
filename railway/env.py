"""Railway scheduling on the Flatland simulator (flatland-rl), met the way the NeurIPS 2020 RL-track
winners met it: trains decide only where it matters, each train's episode ends at its target or in
a deadlock, and a scheduler releases a few trains at a time.

``RailDecisionEnv`` wraps one ``flatland.envs.rail_env.RailEnv``:
- **Decisions only where they matter.** A train on the map chooses among ``ACTIONS`` (stop, take
  the left branch, take the right branch) only when it stands on a switch with a choice in its
  direction of travel or on the cell before a switch cell; everywhere else it moves forward along
  the only path (the simulator's MOVE_FORWARD) without asking. ``step`` runs the simulator until
  some train must decide again, so an episode has far fewer decisions than simulator steps.
- **Per-train episodes.** A train is finished when it reaches its target or is deadlocked: it and
  every train it waits for can never move again (``deadlocked_trains``). The simulator runs on
  until every train is finished or its step limit is reached.
- **Reward per train**: 0.01 x (decrease of the shortest-path distance to the target since the
  train's previous decision) - 5 when it becomes deadlocked + 10 on arrival.
- **Release scheduling.** At most ``max_active`` trains are on the map (or waiting to enter it) at
  once; when one finishes, the next is released. ``release_order`` is the training heuristic: the
  trains closest to their targets first.
- **Safety layer** (``safety=True``, ``railway.safety``): a deciding train may only take a branch
  whose path to its target is clear of head-on conflicts, and stops only when no branch is
  (``action_mask``); moves of trains deciding
  in the same step are checked one after another and a move no longer clear becomes a stop; a
  released train enters the map only when its path is clear.
  With ``wait=True`` the layer is a veto only: a deciding train may also stop while a branch is
  clear (waiting for a train to pass is then the policy's choice, not the layer's). With
  ``veto="segment"`` it vetoes only head-on conflicts of the next segment (up to the train's next
  choice of exit) and a train may always stop; the reservation check of the whole path then only proposes
  (``reservation_mask``, the prior of a residual policy), so a policy may break a knot of
  reservations. Trains enter the map under the reservation check either way.
- Each train draws a random id in [0, 1] per episode (``ids``): it orders the safety checks and
  enters the observation (it lets trains settle who yields).

Shapes: T trains. Positions are (row, column); directions 0..3 = north, east, south, west.
"""

from __future__ import annotations

import time
import warnings

import numpy as np
from ppoor.railway.safety import VETOES, PathBook, clear_to_enter, safe_actions, shield
from ppoor.railway.track import (
    ACTIONS,
    DO_NOTHING,
    LEFT,
    MOVE_FORWARD,
    RIGHT,
    STOP,
    STOP_MOVING,
    branches,
    deadlocked_trains,
    decision_point,
    distance_maps,
    next_cell,
    occupancy,
    simulator_action,
)

__all__ = ["ACTIONS", "LEFT", "RIGHT", "STOP", "RailDecisionEnv", "check_map", "deadlocked_trains", "rail_env"]
DISTANCE_REWARD, DEADLOCK_PENALTY, ARRIVAL_REWARD = 0.01, -5.0, 10.0


def check_map(width: int, height: int, trains: int, cities: int | None = None, flatland3: bool = False) -> int:
    """Checks a map's arguments without drawing it; returns the number of cities (default: one per 4
    trains, at least 2: each city has up to 4 station tracks). Raises ValueError with one line when
    the map is too small or, without Flatland 3's timetables (``flatland3``: trains leave a station track one
    after another, so Flatland 3's tests put up to 17 trains in a city), the cities' station tracks cannot
    hold the trains."""
    if min(width, height) < 20:
        raise ValueError(f"map {width}x{height}: Flatland's sparse generator needs at least 20x20 cells")
    cities = cities if cities is not None else max(2, -(-trains // 4))
    if trains < 1:
        raise ValueError(f"trains must be at least 1, got {trains}")
    if trains > 4 * cities and not flatland3:  # the generator's station tracks: 2 x max_rail_pairs_in_city per city
        raise ValueError(
            f"{trains} trains do not fit {cities} cities of 4 station tracks each: use at most {4 * cities} trains "
            "or more cities"
        )
    return cities


FLATLAND3 = {
    "speeds": {1.0: 0.25, 1 / 2: 0.25, 1 / 3: 0.25, 1 / 4: 0.25},
    "malfunction_interval": 540,
    "malfunction_duration": (20, 50),
}
"""Flatland 3's rules as its tests set them (flatland-rl's ``env_generation.env_generator`` defaults, from
Flatland 3's Test_00): a quarter of the trains at each speed 1, 1/2, 1/3 and 1/4 (a train at speed 1/k needs k
steps per cell), and malfunctions at a rate of one per ``malfunction_interval`` steps a train, each stopping the
train for 20 to 50 steps. The timetable (earliest departure, latest arrival, step limit) is flatland-rl's own."""


def rail_env(width: int, height: int, trains: int, seed: int, cities: int | None = None, flatland3: bool = False):
    """A Flatland RailEnv on a sparse generated map (the challenge's generator), ``cities`` as ``check_map``
    says; under Flatland 3's rules (``FLATLAND3``: four speeds, malfunctions) with ``flatland3``, else speed 1
    and no malfunctions. Raises ValueError with one line on impossible arguments."""
    from flatland.envs.line_generators import sparse_line_generator
    from flatland.envs.malfunction_generators import MalfunctionParameters, ParamMalfunctionGen
    from flatland.envs.rail_env import RailEnv
    from flatland.envs.rail_generators import sparse_rail_generator

    cities = check_map(width, height, trains, cities, flatland3)
    forget_maps()  # the maps drawn before live on in Flatland's method caches otherwise
    rules = {}
    if flatland3:
        low, high = FLATLAND3["malfunction_duration"]
        rate = 1.0 / FLATLAND3["malfunction_interval"]
        parameters = MalfunctionParameters(malfunction_rate=rate, min_duration=low, max_duration=high)
        rules = {"malfunction_generator": ParamMalfunctionGen(parameters)}
    env = RailEnv(
        width=width,
        height=height,
        rail_generator=sparse_rail_generator(
            max_num_cities=cities, grid_mode=False, max_rails_between_cities=2, max_rail_pairs_in_city=2
        ),
        line_generator=sparse_line_generator(FLATLAND3["speeds"] if flatland3 else None),
        number_of_agents=trains,
        **rules,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env.reset(random_seed=seed)
    if len(env.agents) != trains:
        raise ValueError(f"the {width}x{height} map with {cities} cities holds {len(env.agents)} trains, not {trains}")
    return env


def forget_maps() -> None:
    """Empties the ``functools.lru_cache`` of Flatland's RailEnv and rail map methods (flatland-rl 4:
    ``RailEnv._is_speed_zero``, ``_fast_state_position_sync_check``; the grid's transitions,
    predecessors and validity checks, up to 4,000,000 entries each): their keys hold ``self``, so
    finished maps stayed alive, simulator, rails and all (9 GB after a few hundred iterations of 50x50
    maps with 30 trains; 8 GB in an hour of 35x35 maps with 10 trains through the rail maps alone).
    ``rail_env`` calls it before drawing each map; the maps still in play refill theirs."""
    from flatland.envs.rail_env import RailEnv
    from flatland.envs.rail_grid_transition_map import RailGridTransitionMap

    for klass in {*RailEnv.__mro__, *RailGridTransitionMap.__mro__}:
        for attribute in vars(klass).values():
            if hasattr(attribute, "cache_clear"):
                attribute.cache_clear()


def cell(agent) -> tuple[int, int] | None:
    """A train's (row, col) on the map, None while it is off it."""
    configuration = agent.current_configuration
    return None if configuration is None else configuration[0]


class RailDecisionEnv:
    """Flatland with decisions at switches, per-train episodes, shaped rewards and release scheduling.

    ``reset(seed)`` draws a map; ``deciding()`` -> bool [T], the trains that must act now;
    ``action_mask()`` -> bool [T, 3], the actions the safety layer allows; ``step(actions)`` (actions
    [T] in ``ACTIONS``, read for the deciding trains only) runs the simulator until a train must
    decide again and returns (rewards [T] float, finished [T] bool, info) with the rewards summed
    since the previous call; ``info["actions"]`` [T] holds the actions carried out (a shielded move
    becomes STOP).
    """

    def __init__(
        self,
        width: int = 25,
        height: int = 25,
        trains: int = 5,
        max_active: int | None = None,
        cities: int | None = None,
        safety: bool = False,
        record: bool = False,
        wait: bool = False,
        veto: str = "path",
        flatland3: bool = False,
    ):
        if max_active is not None and max_active < 1:
            raise ValueError(f"max_active must be at least 1, got {max_active}")
        if veto not in VETOES:
            raise ValueError(f"veto must be one of {sorted(VETOES)}, got {veto!r}")
        if veto != "path" and not safety:
            raise ValueError(f"veto {veto!r} is a setting of the safety layer: it needs safety=True")
        self.width, self.height, self.trains, self.cities = width, height, trains, cities
        self.flatland3 = flatland3  # Flatland 3's rules (``rail_env``)
        self.max_active = max_active or trains
        self.safety, self.veto = safety, veto
        self.wait = wait or veto == "segment"  # under the segment veto stopping is always the policy's choice
        self.record = record  # keep every train's cell after each simulator step in ``paths`` (for pictures)
        self.paths = None
        check_map(width, height, trains, cities, flatland3)  # fails early on impossible arguments
        self.env, self.release_rule = None, None

    # -- episode -------------------------------------------------------------------------------
    def reset(self, seed: int, release_order: list[int] | None = None, release_rule=None, ids=None) -> None:
        """A new map from ``seed``; trains are released in ``release_order`` (default: the closest to
        their targets first), at most ``max_active`` running; or, with ``release_rule`` (a callable
        (this env) -> the trains to release now, asked after every simulator step), as it says.
        ``ids`` [T]: the trains' random ids (default: drawn from ``seed``)."""

        self.release_rule = release_rule
        self.paths = [] if self.record else None  # per simulator step: each train's (row, col) or None
        self.env = rail_env(self.width, self.height, self.trains, seed, self.cities, self.flatland3)
        self.distances = distance_maps(self.env)  # [T, H, W, 4]
        self.ids = np.random.default_rng(seed).random(self.trains) if ids is None else np.asarray(ids, dtype=float)
        self.book = PathBook(self)
        self.masks, self.masks_step = {}, -1  # the decision's masks (``per_decision``), at that simulator step
        self.arrived = np.zeros(self.trains, dtype=bool)
        self.deadlocked = np.zeros(self.trains, dtype=bool)
        self.released = np.zeros(self.trains, dtype=bool)
        self.queue = list(self.release_order() if release_order is None else release_order)
        self.last_distance = np.array([self.distance(h) for h in range(self.trains)], dtype=np.float64)
        self.decisions = self.simulator_steps = 0
        self.simulator_seconds = 0.0  # wall time inside the simulator's own step
        self.pending = np.zeros(self.trains)  # rewards earned before the first decision
        self.flatland_return = np.zeros(self.trains)  # the simulator's own rewards, for its score
        self.release()
        self.advance(self.pending)

    @property
    def finished(self) -> np.ndarray:
        return self.arrived | self.deadlocked

    @property
    def done(self) -> bool:
        return bool(self.finished.all()) or self.env.dones["__all__"]

    def score(self) -> float:
        """Flatland's normalized score of the episode (1 + the simulator's summed rewards, each train's
        capped at minus the step limit, over step limit x trains), after running the simulator to its
        end; call it once ``done``."""
        while not self.env.dones["__all__"]:
            self.simulate(self.simulator_actions(np.zeros(self.trains, dtype=bool), None), self.pending)
        return float(
            self.env.rewards.normalize(
                *self.flatland_return, num_agents=self.trains, max_episode_steps=self.env._max_episode_steps
            )
        )

    def release_order(self) -> list[int]:
        """The training heuristic: trains by increasing shortest-path distance from start to target."""
        return sorted(range(self.trains), key=lambda h: (self.distance(h), h))

    def due(self) -> list[int]:
        """The trains the heuristic starts now: the next waiting ones of the queue, while fewer than
        ``max_active`` are released and unfinished."""
        waiting = [h for h in self.queue if not self.released[h] and not self.finished[h]]
        return waiting[: max(0, self.max_active - int((self.released & ~self.finished).sum()))]

    def release(self) -> None:
        """Releases the trains that the heuristic starts now (``due``), or those the release rule names."""
        for handle in self.due() if self.release_rule is None else self.release_rule(self):
            self.released[handle] = True

    def distance(self, handle: int) -> float:
        """Shortest-path distance (cells) from the train's cell (its start if off the map) to its target."""
        agent = self.env.agents[handle]
        position, direction = agent.current_configuration or agent.initial_configuration
        value = self.distances[handle, position[0], position[1], direction]
        return float(value) if np.isfinite(value) else float(self.width * self.height)

    # -- decisions -----------------------------------------------------------------------------
    def deciding(self) -> np.ndarray:
        """bool [T]: released, unfinished trains on the map standing on a switch with a choice or on
        the cell before a switch."""
        need = np.zeros(self.trains, dtype=bool)
        for agent in self.env.agents:
            h = agent.handle
            if self.finished[h] or not self.released[h] or agent.current_configuration is None:
                continue
            need[h] = any(decision_point(self.env, *agent.current_configuration))
        return need

    def action_mask(self, deciding: np.ndarray | None = None) -> np.ndarray:
        """bool [T, 3]: the actions each deciding train may take (all of them without the safety
        layer, and for trains not deciding); ``deciding`` [T]: ``deciding()`` when the caller has it.
        Computed once per decision (``per_decision``) and read-only."""

        if not self.safety:
            return np.ones((self.trains, 3), dtype=bool)
        return self.per_decision("veto", deciding, self.wait, self.veto)

    def reservation_mask(self, deciding: np.ndarray | None = None) -> np.ndarray:
        """bool [T, 3]: the moves the reservation check of the whole path allows (stop only when none
        is): the layer's own choices, which ``shortest_path_actions`` turns into its rule whatever the
        veto (``action_mask`` without the safety layer). Computed once per decision and read-only."""
        if not self.safety:
            return self.action_mask(deciding)
        return self.per_decision("reservation", deciding)

    def per_decision(self, kind: str, deciding: np.ndarray | None, *veto) -> np.ndarray:
        """``safe_actions`` of the trains deciding now (``veto``: its wait and veto arguments), kept
        until the simulator steps: the observation and the step of one decision ask for the same
        masks of the same state."""
        if self.masks_step != self.simulator_steps:
            self.masks, self.masks_step = {}, self.simulator_steps
        if kind not in self.masks:
            deciding = self.deciding() if deciding is None else deciding
            self.masks[kind] = safe_actions(self.book, deciding, occupancy(self.env), *veto)
            self.masks[kind].flags.writeable = False  # shared by the observation and the step
        return self.masks[kind]

    def shortest_path_actions(self, mask: np.ndarray, deciding: np.ndarray) -> np.ndarray:
        """actions [T]: each deciding train (``deciding`` [T] bool) takes the branch on its shortest path
        to its target if ``mask`` [T, 3] allows it, else the other branch if allowed and it still leads
        to the target, else it stops; LEFT for the other trains. With the safety layer's mask, this is
        the layer's own rule (it never stops while a move is clear)."""
        actions = np.full(self.trains, LEFT)
        for handle in np.flatnonzero(deciding):
            position, heading = self.env.agents[handle].current_configuration
            ways = branches(self.env, position, heading)
            to_target = [self.distances[handle][(*next_cell(position, way), way)] for way in (ways[0], ways[-1])]
            best, other = (LEFT, RIGHT) if to_target[0] <= to_target[1] else (RIGHT, LEFT)
            if mask[handle, best]:
                actions[handle] = best
            elif mask[handle, other] and np.isfinite(to_target[other - LEFT]):
                actions[handle] = other
            else:
                actions[handle] = STOP
        return actions

    def step(self, actions) -> tuple[np.ndarray, np.ndarray, dict]:
        """Applies ``actions`` [T] of the deciding trains (through the safety layer when on), then runs
        forced moves until a train must decide or the episode ends. Returns rewards [T] since the last
        call, finished [T] and info (``simulator_steps`` taken, ``actions`` carried out)."""

        deciding = self.deciding()
        self.decisions += int(deciding.sum())
        rewards, self.pending = self.pending, np.zeros(self.trains)
        steps = self.simulator_steps
        actions = np.asarray(actions)
        occupied = None
        if self.safety:  # the cells the moves enter join ``occupied``, for the trains entering the map
            chosen = self.action_mask(deciding)[np.arange(self.trains), actions]
            actions = np.where(deciding & (actions != STOP) & ~chosen, STOP, actions)  # a masked move stops
            proposed = self.reservation_mask(deciding) if self.veto == "segment" else None
            occupied = occupancy(self.env)
            actions = shield(self.book, actions, deciding, occupied, self.ids, self.veto, proposed)
        self.simulate(self.simulator_actions(deciding, actions, occupied), rewards)
        self.advance(rewards)
        # distance progress is paid at each decision: since this train's previous decision
        for h in np.flatnonzero(deciding | self.finished):
            now = 0.0 if self.arrived[h] else self.distance(h)
            rewards[h] += DISTANCE_REWARD * (self.last_distance[h] - now)
            self.last_distance[h] = now
        return rewards, self.finished.copy(), {"simulator_steps": self.simulator_steps - steps, "actions": actions}

    def advance(self, rewards: np.ndarray) -> None:
        """Forced moves (and waits for trains not yet on the map) until a train must decide."""
        while not self.done and not self.deciding().any():
            self.simulate(self.simulator_actions(np.zeros(self.trains, dtype=bool), None), rewards)

    def simulator_actions(self, deciding: np.ndarray, actions, occupied: dict | None = None) -> dict:
        """The simulator's action per train: the decision's translation for deciding trains, MOVE_FORWARD
        for released trains elsewhere (entering the map when their start cell is free and, with the
        safety layer, their path clear), DO_NOTHING for trains not released or finished. ``occupied``:
        the trains' cells with those the shielded moves of this step enter (``shield``), so that a
        train entering the map sees where the deciding trains go; None reads the trains' cells."""
        from flatland.envs.step_utils.states import TrainState

        out = {}
        for agent in self.env.agents:
            h = agent.handle
            if self.finished[h] or not self.released[h]:
                out[h] = DO_NOTHING
            elif self.safety and agent.state == TrainState.READY_TO_DEPART:
                occupied = occupancy(self.env) if occupied is None else occupied
                enter = clear_to_enter(self.book, h, occupied)
                if enter:
                    occupied[agent.initial_configuration[0]] = (h, agent.initial_configuration[1])
                out[h] = MOVE_FORWARD if enter else DO_NOTHING
            elif deciding[h]:
                position, direction = agent.current_configuration
                ways = branches(self.env, position, direction)
                action = int(actions[h])
                if action == STOP:
                    out[h] = STOP_MOVING
                else:
                    out[h] = simulator_action(direction, ways[0] if action == LEFT else ways[-1])
            else:
                out[h] = MOVE_FORWARD
        return out

    def simulate(self, actions: dict, rewards: np.ndarray) -> None:
        """One simulator step; arrival and deadlock rewards go to ``rewards`` [T]."""
        from flatland.envs.step_utils.states import TrainState

        start = time.perf_counter()
        _, flatland_rewards, _, _ = self.env.step(actions)
        self.simulator_seconds += time.perf_counter() - start
        self.flatland_return += np.array([flatland_rewards[h] for h in range(self.trains)], dtype=np.float64)
        self.simulator_steps += 1
        if self.paths is not None:
            self.paths.append([cell(agent) for agent in self.env.agents])
        for agent in self.env.agents:
            h = agent.handle
            if not self.arrived[h] and agent.state == TrainState.DONE:
                self.arrived[h] = True
                rewards[h] += ARRIVAL_REWARD
        for h in deadlocked_trains(self.env):
            if not self.deadlocked[h]:
                self.deadlocked[h] = True
                rewards[h] += DEADLOCK_PENALTY
        self.release()
