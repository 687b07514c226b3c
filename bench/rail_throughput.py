"""Decisions per second of the Flatland wrapper (railway/env.py) against the raw simulator.

Random decisions on generated maps (25x25 with 5 trains by default), all trains released: the
wrapper asks only trains on or before a switch and moves the others itself, so an episode has fewer
decisions than train-steps. Prints, per map size, the wrapper's decisions/s and simulator steps/s,
and the raw simulator stepped with one action per train per step (what a policy would be asked
without the wrapper): train-steps/s, and the ratio of decisions to train-steps (the share of
choices the wrapper leaves to the policy). Both sides' times include drawing the map (the wrapper's
reset draws it), after one warm-up draw per size. Then the same seeds and random draws through the
wrapper with the safety layer on (railway/safety.py: path checks at every decision and map entry;
the episodes differ, as the layer turns some moves into stops), its simulator steps/s and the ratio
to the plain wrapper's. One process, no model.

    python bench/rail_throughput.py [--sizes 25x25x5 35x35x10] [--episodes 5]
"""

import argparse
import time

import numpy as np
from ppoor.railway.env import RailDecisionEnv, rail_env  # noqa: E402


def random_episodes(env: RailDecisionEnv, args) -> tuple[float, int, int, list[int]]:
    """--episodes episodes (seeds 0, 1, ...) of random decisions: seconds, simulator steps, decisions and
    the simulator steps of each episode."""
    rng = np.random.default_rng(0)
    seconds, decisions, per_seed = 0.0, 0, []
    for seed in range(args.episodes):
        start = time.perf_counter()
        env.reset(seed)
        while not env.done:
            env.step(rng.integers(0, 3, size=env.trains))
        seconds += time.perf_counter() - start
        decisions += env.decisions
        per_seed.append(env.simulator_steps)
    return seconds, sum(per_seed), decisions, per_seed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["25x25x5", "35x35x10"], help="WIDTHxHEIGHTxTRAINS")
    parser.add_argument("--episodes", type=int, default=5)
    args = parser.parse_args()
    for size in args.sizes:
        width, height, trains = (int(x) for x in size.split("x"))
        rail_env(width, height, trains, args.episodes)  # warm-up: the first map of a size is slower to draw
        wrapper_seconds, sim_steps, decisions, per_seed = random_episodes(RailDecisionEnv(width, height, trains), args)
        rng = np.random.default_rng(1)
        train_steps = raw_steps = 0
        raw_seconds = 0.0
        for seed, wrapper_steps in enumerate(per_seed):
            start = time.perf_counter()
            raw = rail_env(width, height, trains, seed)  # drawn inside the timing, as the wrapper's reset draws it
            steps = 0
            while not raw.dones["__all__"] and steps < wrapper_steps:
                raw.step({h: int(a) for h, a in enumerate(rng.integers(1, 4, size=trains))})
                steps += 1
            raw_seconds += time.perf_counter() - start
            train_steps += steps * trains
            raw_steps += steps
        safe_seconds, safe_steps, _, _ = random_episodes(RailDecisionEnv(width, height, trains, safety=True), args)
        print(
            f"{width}x{height}, {trains} trains, {args.episodes} episodes: wrapper {decisions / wrapper_seconds:,.0f} "
            f"decisions/s ({sim_steps / wrapper_seconds:,.0f} simulator steps/s, {decisions:,} decisions over "
            f"{sim_steps:,} steps); raw simulator {train_steps / raw_seconds:,.0f} train-steps/s "
            f"({raw_steps / raw_seconds:,.0f} steps/s); the policy is asked {decisions / (sim_steps * trains):.0%} "
            f"of the train-steps; simulator steps/s through the wrapper vs raw "
            f"{(sim_steps / wrapper_seconds) / (raw_steps / raw_seconds):.2f}x; with the safety layer "
            f"{safe_steps / safe_seconds:,.0f} simulator steps/s, "
            f"{(safe_steps / safe_seconds) / (sim_steps / wrapper_seconds):.2f}x the plain wrapper's",
            flush=True,
        )


if __name__ == "__main__":
    main()
