"""Where the space-time planner's time goes on a map, per priority order (railway.spacetime).

For each of --episodes test maps (seeds --seed, --seed + 1, ...: eval_flatland.py's) and each order
(closest, longest, random restarts, and the learned order of --priorities), one thread:
- track: building the planner's view of the map (``Track``: the distance maps, the trains);
- first pass: planning every train once in the order (for random and learned, their first order)
  and the trains it leaves without a path;
- planning: the whole episode's planning as eval_flatland.py counts it (``play_planner``'s
  planning_seconds: the track, the orders tried, the repair, the replanning while the trains run),
  with --planner-seconds for the orders and the repair, and the episode's arrival rate.
First, the distance tables alone: ``railway.track.distance_maps`` against Flatland's own
``distance_map.get()`` on each map (the same tables), and their ratio. Prints the means per map (the planning time's median and largest map too: a map whose repair spends
the whole --planner-seconds carries the mean) and each order's mean planning time over the best fixed
order's (the most arrivals, then the least planning).

    python bench/rail_planning.py [--size 80x80x80] [--episodes 10] [--priorities flatland/priorities80]
"""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import time  # noqa: E402
from functools import partial  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from ppoor.models import latest_checkpoint  # noqa: E402
from ppoor.railway.env import check_map, rail_env  # noqa: E402
from ppoor.railway.priorities import greedy_order, learned_plans, load_priority_policy, plan_in_order, train_features  # noqa: E402
from ppoor.railway.spacetime import ORDERINGS, Planner, Track, play_planner  # noqa: E402
from ppoor.railway.track import distance_maps  # noqa: E402


def first_pass(env, order_of) -> tuple[float, float, int]:
    """(track seconds, first-pass seconds, trains left without a path) of the order ``order_of(track)``."""
    start = time.perf_counter()
    track = Track(env)
    built = time.perf_counter()
    planner = plan_in_order(track, order_of(track))
    return built - start, time.perf_counter() - built, len(planner.failed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="80x80x80", help="WIDTHxHEIGHTxTRAINS")
    parser.add_argument("--episodes", type=int, default=10, help="maps (test seeds from --seed)")
    parser.add_argument("--seed", type=int, default=2_000_000, help="the first map's seed")
    parser.add_argument("--planner-seconds", type=float, default=10.0, help="the orders' and repair's time per map")
    parser.add_argument("--priorities", default="flatland/priorities80", help="a priority policy; '' leaves it out")
    args = parser.parse_args()
    try:
        width, height, trains = (int(x) for x in args.size.split("x"))
        check_map(width, height, trains)
    except ValueError as exc:
        parser.error(f"--size {args.size}: {exc} (WIDTHxHEIGHTxTRAINS, e.g. 80x80x80)")
    if args.episodes < 1 or not args.planner_seconds > 0:
        parser.error("--episodes must be at least 1 and --planner-seconds positive")
    torch.set_num_threads(1)
    policy = load_priority_policy(latest_checkpoint(args.priorities))[0] if args.priorities else None

    orders = {name: (lambda track, name=name: Planner(track, np.random.default_rng(0)).order(name, range(track.trains)))
              for name in ORDERINGS}  # fmt: skip
    if policy is not None:
        orders["learned"] = lambda track: greedy_order(policy, torch.as_tensor(train_features(track))[None])
    rows = {name: [] for name in orders}
    ours, flatlands = [], []  # the distance tables: distance_maps against Flatland's own, on the same maps
    for k in range(args.episodes):
        seed = args.seed + k
        env = rail_env(width, height, trains, seed)
        start = time.perf_counter()
        distance_maps(env)
        ours.append(time.perf_counter() - start)
        env.distance_map.get()
        flatlands.append(time.perf_counter() - start - ours[-1])
        for name, order_of in orders.items():
            built, passed, left = first_pass(rail_env(width, height, trains, seed), order_of)
            initial = partial(learned_plans, policy) if name == "learned" else None
            played = play_planner(rail_env(width, height, trains, seed), "closest" if initial else name,
                                  args.planner_seconds, seed, initial=initial)  # fmt: skip
            rows[name].append((built, passed, left, played["planning_seconds"], played["arrival_rate"]))
    means = {name: np.mean(np.array(values), axis=0) for name, values in rows.items()}
    best = max(ORDERINGS, key=lambda n: (means[n][4], -means[n][3]))
    print(f"{width}x{height}, {trains} trains, {args.episodes} maps from seed {args.seed}, "
          f"--planner-seconds {args.planner_seconds}, one thread; means per map")  # fmt: skip
    print(f"distance tables: {np.mean(ours):.3f} s per map (railway.track.distance_maps) against Flatland's "
          f"distance_map.get() {np.mean(flatlands):.3f} s: {np.mean(flatlands) / np.mean(ours):.1f}x")  # fmt: skip
    print(f"{'order':<10} {'track s':>8} {'first pass s':>13} {'left out':>9} {'planning s':>11} {'median':>7} {'max':>6} "
          f"{'arrival':>8}  vs {best}")  # fmt: skip
    for name, (built, passed, left, planning, arrival) in means.items():
        each = [row[3] for row in rows[name]]
        print(f"{name:<10} {built:8.3f} {passed:13.3f} {left:9.2f} {planning:11.3f} {np.median(each):7.3f} {max(each):6.2f} "
              f"{arrival:8.4f}  {planning / means[best][3]:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
