"""Flatland 3's scores of one finished episode, the same for every rule that plays it (the planner, the
decision env's policies and baselines, flatland-baselines' heuristic).

- ``arrival_rate``: the share of trains at their targets when the episode ends.
- ``on_time_rate``: the share that arrived by their latest arrival (the timetable's).
- ``normalized_score``: Flatland's normalized return, 1 + the trains' summed rewards (each capped at minus
  the step limit) over step limit x trains; the rewards are flatland-rl's default ones, Flatland 3's: an
  arrived train pays its lateness, one still running its projected delay, one never started its
  shortest-path travel time.
- ``seconds_before_first_step``, ``seconds_per_step`` and ``max_seconds_per_step``: the rule's computing
  before the first step and at each step (the simulator's own step not included), what Flatland 3 limited
  (10 minutes before the first step, 10 s a step).
"""

from __future__ import annotations

import numpy as np


def normalized_score(env, rewards) -> float:
    """Flatland's normalized score of the RailEnv ``env`` from each train's summed ``rewards`` [T]."""
    trains = len(env.agents)
    return float(env.rewards.normalize(*rewards, num_agents=trains, max_episode_steps=int(env._max_episode_steps)))


def episode_scores(
    env, normalized: float, deadlocked, first: float, step_times: list, simulator_seconds: float
) -> dict:
    """The scores of the finished episode of the RailEnv ``env`` (module docstring): ``normalized`` its
    normalized score, ``deadlocked`` the trains that deadlocked, ``first`` the seconds before the first step,
    ``step_times`` the rule's seconds at each step; with deadlock_rate (deadlocked and not arrived),
    flatland_seconds_per_step (``simulator_seconds`` per step) and simulator_steps."""
    from flatland.envs.step_utils.states import TrainState

    trains, steps = len(env.agents), max(len(step_times), 1)
    done = {a.handle for a in env.agents if a.state == TrainState.DONE}
    on_time = [a for a in env.agents if a.handle in done and a.arrival_time <= a.latest_arrival]
    return {
        "arrival_rate": len(done) / trains,
        "on_time_rate": len(on_time) / trains,
        "deadlock_rate": len(set(deadlocked) - done) / trains,
        "normalized_score": normalized,
        "seconds_before_first_step": first,
        "seconds_per_step": float(np.sum(step_times)) / steps,
        "max_seconds_per_step": float(max(step_times, default=0.0)),
        "flatland_seconds_per_step": simulator_seconds / steps,
        "simulator_steps": len(step_times),
    }
