"""Playing Flatland episodes with a decision rule: the trained policy or a baseline.

A decision rule maps (the ``railway.tree.observe`` dict, the ``railway.env.RailDecisionEnv``) to
actions [T] in ``railway.env.ACTIONS``; only the deciding trains' entries are read.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from ppoor.railway.policy import POLICY_INPUTS
from ppoor.railway.scores import episode_scores, normalized_score
from ppoor.railway.track import LEFT, RIGHT, STOP, occupancy
from ppoor.railway.tree import observe, train_observation


def shortest_path_rule(obs: dict, wrapper) -> np.ndarray:
    """Every deciding train takes the branch on its shortest path to its target and never stops; where
    the safety layer forbids that branch (``obs["mask"]``), the other branch if allowed and it still
    leads to the target, else it stops: the observation's ``prior`` (one-hot of
    ``railway.env.RailDecisionEnv.shortest_path_actions`` within ``obs["mask"]``), not computed again."""
    actions = np.full(wrapper.trains, LEFT)
    actions[obs["deciding"]] = obs["prior"][obs["deciding"]].argmax(-1)
    return actions


def random_rule(rng: np.random.Generator):
    """Uniform over stop, left branch, right branch."""
    return lambda obs, wrapper: rng.integers(STOP, RIGHT + 1, size=wrapper.trains)


def policy_rule(policy, greedy: bool = True, generator: torch.Generator | None = None):
    """The trained ``railway.policy.RailPolicy``: the most likely action (or a sample)."""

    @torch.no_grad()
    def rule(obs: dict, wrapper) -> np.ndarray:
        logits, _ = policy(*(torch.as_tensor(obs[k])[None] for k in POLICY_INPUTS))
        if greedy:
            return logits[0].argmax(-1).numpy()
        return torch.multinomial(torch.softmax(logits[0], -1), 1, generator=generator).squeeze(-1).numpy()

    return rule


def waiting_features(wrapper, depth: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The trains not yet released and unfinished, and their tree [N, S, F] and global [N, G] features
    seen from their start cells (random id 0.5: the release does not depend on it)."""
    waiting = np.flatnonzero(~wrapper.released & ~wrapper.finished)
    occupied = occupancy(wrapper.env)
    ids = np.full(wrapper.trains, 0.5)
    rows = [train_observation(wrapper, h, occupied, depth, ids) for h in waiting]
    if not rows:
        return waiting, np.zeros((0,)), np.zeros((0,))
    return waiting, np.stack([r[0] for r in rows]), np.stack([r[1] for r in rows])


def learned_release(classifier, depth: int, threshold: float = 0.5):
    """A release rule: start every waiting train whose predicted chance of arriving passes ``threshold``,
    at most one per simulator step (the most likely), and the most likely one whenever nothing runs."""

    @torch.no_grad()
    def rule(wrapper) -> list[int]:
        waiting, edges, globs = waiting_features(wrapper, depth)
        if len(waiting) == 0:
            return []
        chance = torch.sigmoid(classifier(torch.as_tensor(edges), torch.as_tensor(globs))).numpy()
        best = int(chance.argmax())
        idle = not (wrapper.released & ~wrapper.finished).any()
        return [int(waiting[best])] if chance[best] >= threshold or idle else []

    return rule


CHANGES = ("changed_to_move", "changed_to_stop", "changed_branch")
"""How a rule's decision can differ from the observation's ``prior`` (the layer's rule): it moves where
the prior stops, stops where the prior moves, or takes the other branch."""


def play(wrapper, seed: int, rule, depth: int, radius: int, release_order=None, release_rule=None) -> dict:
    """One episode of ``wrapper`` on map ``seed`` with ``rule``: Flatland 3's scores
    (``railway.scores.episode_scores``; the rule's seconds at a step: the decision env's work between two
    simulator steps, observation and decisions included), decisions_per_second (train decisions over the
    episode's wall time), decisions, and the rule's decisions that differ from the observation's prior, by
    kind (``CHANGES``: counts)."""
    start = time.perf_counter()
    wrapper.reset(seed, release_order, release_rule)
    first = time.perf_counter() - start
    changes = dict.fromkeys(CHANGES, 0)
    step_times = []
    while not wrapper.done:
        tick, steps, inside = time.perf_counter(), wrapper.simulator_steps, wrapper.simulator_seconds
        obs = observe(wrapper, depth, wrapper.ids, radius)
        actions = rule(obs, wrapper)
        mine, prior = actions[obs["deciding"]], obs["prior"][obs["deciding"]].argmax(-1)
        changes["changed_to_move"] += int(((prior == STOP) & (mine != STOP)).sum())
        changes["changed_to_stop"] += int(((prior != STOP) & (mine == STOP)).sum())
        changes["changed_branch"] += int(((prior != STOP) & (mine != STOP) & (mine != prior)).sum())
        wrapper.step(actions)
        taken = max(wrapper.simulator_steps - steps, 1)  # the call's work is spread over its simulator steps
        step_times += [(time.perf_counter() - tick - (wrapper.simulator_seconds - inside)) / taken] * taken
    seconds = time.perf_counter() - start
    simulator_seconds = wrapper.simulator_seconds  # before score() runs on
    normalized = wrapper.score()
    deadlocked = set(np.flatnonzero(wrapper.deadlocked))
    scores = episode_scores(wrapper.env, normalized, deadlocked, first, step_times, simulator_seconds)
    return {**scores, "decisions_per_second": wrapper.decisions / seconds, "decisions": wrapper.decisions, **changes}


def play_deadlock_avoidance(
    width: int, height: int, trains: int, seed: int, cities: int | None = None, flatland3: bool = False
) -> dict | None:
    """flatland-baselines' deadlock-avoidance heuristic (DeadLockAvoidancePolicy, default settings) on
    the raw simulator of map ``seed`` (``railway.env.rail_env``'s arguments), acting for every train at
    every step; the same figures as ``play`` (its decisions: one per train per step). None when
    flatland-baselines is not installed."""
    try:
        from flatland_baselines.deadlock_avoidance_heuristic.policy.deadlock_avoidance_policy import (
            DeadLockAvoidancePolicy,
        )
    except ImportError:
        return None
    from ppoor.railway.env import rail_env
    from ppoor.railway.track import deadlocked_trains

    start = time.perf_counter()
    env = rail_env(width, height, trains, seed, cities, flatland3)
    policy = DeadLockAvoidancePolicy(seed=seed)
    first = time.perf_counter() - start
    rewards, deadlocked, simulator_seconds, step_times = np.zeros(trains), set(), 0.0, []
    while not env.dones["__all__"]:
        tick = time.perf_counter()
        actions = policy.act_many(list(range(trains)), [env] * trains)
        step_times.append(time.perf_counter() - tick)
        tick = time.perf_counter()
        _, step_rewards, _, _ = env.step(actions)
        simulator_seconds += time.perf_counter() - tick
        rewards += np.array([step_rewards[h] for h in range(trains)])
        deadlocked |= deadlocked_trains(env)
    seconds = time.perf_counter() - start
    scores = episode_scores(env, normalized_score(env, rewards), deadlocked, first, step_times, simulator_seconds)
    decisions = len(step_times) * trains
    return {**scores, "decisions_per_second": decisions / seconds, "decisions": decisions}
