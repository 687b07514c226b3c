"""Evaluates a ppo_flatland.py checkpoint on fixed, seeded Flatland map sets against baselines.

    python eval_flatland.py                       # the shipped checkpoints/flatland/flatland35.pt
    python eval_flatland.py --checkpoint runs/<run>/ckpt --sizes 25x25x5 50x50x30 --episodes 20 --output eval.json
    python eval_flatland.py --sizes 25x25x5 --episodes 3 --render episode.png

Per size (WIDTHxHEIGHTxTRAINS) it plays --episodes maps (seeds --seed, --seed + 1, ...: the same maps
for every rule) with the greedy policy (with the release heuristic of training, --max-active trains
at once, closest to their targets first, and within the safety layer when it was trained with it)
and with the baselines: every train on its shortest path started at once; the same with the release
heuristic; random decisions; and, where flatland-baselines is installed, its deadlock-avoidance
heuristic (acting at every step on the raw simulator). The planner rules plan every train's path in
space and time (``railway.spacetime``: prioritized planning with an LNS repair of the priorities within
--planner-seconds per map, replanning where the simulator leaves the plan), the trains closest to
their targets first (``planner``), the farthest first (``planner_longest``) or random orders
(``planner_random``), or the order a priority policy learned (``planner_learned``, with --priorities: a
``ppo_priorities.py`` checkpoint); their rows add ``planning_seconds`` per map. ``oracle`` is each train alone
on its map with its own malfunctions, leaving at its earliest departure: the arrival rate the step limit
and the malfunctions allow any scheduler (only ``arrival_rate``). For a policy trained with the safety layer it
also plays that layer alone with shortest-path choices (``shortest_path_safety``, an ablation: what
the layer gives without the learned policy; reported, not counted as a baseline). ``policy_sampled``
plays the policy drawing each action from its distribution instead of taking the most likely one
(seeded from --seed: the same figures on every run): a policy trained to wait with some probability
can, played greedily, wait at a switch for ever. A checkpoint with
a learned release classifier also plays the policy with it (``policy_learned_release``: a train
starts when its predicted chance of arriving passes --threshold, by default the threshold the
training chose on its validation maps; the policy sampled when it was validated so, ppo_flatland.py
--eval-sample). ``--rules`` plays a subset (large maps take minutes per
rule). It prints the fraction of trains that arrived, the deadlock fraction, Flatland's normalized
score, seconds per simulator step (all included) beside the simulator's own step time, and train
decisions per second, then the policy's arrival-rate lead over the best baseline and over the layer
alone. ``--output`` writes them as JSON: per size ``width``, ``height``, ``trains``, ``episodes``,
the leads (``lead_over_best_baseline``, ``lead_over_safety_layer_alone``, where those rules were
played; ``learned_order_vs_best_fixed``, where ``planner_learned`` played beside fixed orders: the best
fixed order by arrival, then planning time, and ``railway.priorities.lead_over``'s arrival lead with its
95% interval over the maps and planning-time ratio) and, per rule, ``arrival_rate``, ``deadlock_rate``, ``score``, ``seconds_per_step``,
``flatland_seconds_per_step``, ``decisions_per_second``; the policy rows also count, over all maps,
their ``decisions`` and those that leave the layer's rule (the observation's prior): ``changed_to_move``,
``changed_to_stop``, ``changed_branch``.
"""

import os
import sys
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Literal

import numpy as np
import torch
import tyro
from ppoor.models import latest_checkpoint
from ppoor.models.checkpoints import CheckpointError
from ppoor.railway.env import RailDecisionEnv, rail_env
from ppoor.railway.play import (
    CHANGES,
    learned_release,
    play,
    play_deadlock_avoidance,
    policy_rule,
    random_rule,
    shortest_path_rule,
)
from ppoor.railway.plot import render_episode
from ppoor.railway.policy import load_rail_policy, load_release_classifier
from ppoor.railway.priorities import lead_over, learned_plans, load_priority_policy
from ppoor.railway.spacetime import oracle_arrival, play_planner
from ppoor.training.runs import MAX_SEED, MAX_THREADS, check_numbers, fail, write_json
from ppoor.training.runtime import keep_freed_memory

SCORES = (
    "arrival_rate", "on_time_rate", "deadlock_rate", "normalized_score", "seconds_per_step", "max_seconds_per_step",
    "seconds_before_first_step", "flatland_seconds_per_step",
)  # fmt: skip
"""Flatland 3's scores of every row (``railway.scores``), averaged over the maps (the largest step's seconds:
the largest over them)."""
METRICS = (*SCORES, "decisions_per_second")
PLANNER_METRICS = (*SCORES, "planning_seconds", "replans")
SUITES = {
    "flatland3": (
        (30, 30, 7, 2), (30, 30, 10, 2), (30, 30, 20, 3), (30, 35, 50, 3), (35, 30, 80, 5), (45, 35, 80, 7),
        (40, 60, 80, 9), (60, 40, 80, 13), (60, 60, 80, 17), (80, 120, 100, 21), (100, 80, 100, 25),
        (100, 100, 200, 29), (150, 150, 200, 33), (150, 150, 400, 37), (158, 158, 425, 41),
    ),
}  # fmt: skip
"""The named suites (``--suite``): per test (width, height, trains, cities). ``flatland3``: Flatland 3's 15
tests (its Round 1 environment configurations, Test_00 to Test_14)."""
RULES = (
    "policy",
    "policy_sampled",
    "policy_learned_release",
    "shortest_path",
    "shortest_path_release",
    "random",
    "shortest_path_safety",
    "deadlock_avoidance",
    "planner",
    "planner_longest",
    "planner_random",
    "planner_learned",
    "oracle",
)
"""Every rule eval_flatland.py can play (``--rules``)."""
PLANNERS = {"planner": "closest", "planner_longest": "longest", "planner_random": "random"}
"""The planner rules and their priority orders (``railway.spacetime.ORDERINGS``)."""
ABLATION = "shortest_path_safety"  # the safety layer with shortest-path choices, no learned policy
SHIPPED = "flatland/flatland35"  # found by models.checkpoints.shipped_checkpoint, in a checkout or installed


@dataclass
class Args:
    """Evaluates a Flatland policy checkpoint against baselines on seeded map sets."""

    checkpoint: str | None = None
    """a ppo_flatland.py checkpoint, exported weights, or a run's ckpt folder (its latest checkpoint);
    default: the shipped checkpoints/flatland/flatland35.pt"""
    sizes: tuple[str, ...] = ("25x25x5", "35x35x10", "50x50x30")
    """map sizes WIDTHxHEIGHTxTRAINS, or WIDTHxHEIGHTxTRAINSxCITIES (default cities: one per 4 trains)"""
    suite: Literal["flatland3"] | None = None
    """play a named suite instead of --sizes: flatland3, Flatland 3's 15 tests (30x30 with 7 trains to 158x158
    with 425, their cities)"""
    flatland3: bool = True
    """Flatland 3's rules: four speeds, malfunctions (railway.env.FLATLAND3); --no-flatland3: speed 1 and no
    malfunctions, the NeurIPS 2020 rules"""
    episodes: int = 10
    """maps per size"""
    seed: int = 2_000_000
    """the first map's seed (maps seed, seed + 1, ...)"""
    max_active: int | None = None
    """trains running at once for the policy and the release baseline (default: the checkpoint's training value;
    the release baseline: 5 when that was all trains)"""
    threshold: float | None = None
    """the learned release classifier starts a train when its predicted chance of arriving reaches this (default:
    the threshold the checkpoint chose on its validation maps, else 0.5)"""
    rules: tuple[str, ...] = RULES
    """the rules to play (a subset saves time on large maps): policy, policy_sampled, policy_learned_release, shortest_path,
    shortest_path_release, random, shortest_path_safety, deadlock_avoidance, planner, planner_longest, planner_random,
    oracle"""
    planner_seconds: float = 10.0
    """the planner's time per map for its plan and its repair (seconds, on one thread; then 1 s a step)"""
    planner_searches: int | None = None
    """instead of seconds, a budget of train searches (that many before the first step, a tenth of them a step):
    the same plans on every run however loaded the machine is, for comparing planner changes"""
    priorities: str | None = None
    """a ppo_priorities.py checkpoint (or its run's ckpt folder): plays planner_learned"""
    output: str | None = None
    """write the results as JSON to this file"""
    render: str | None = None
    """draw the policy's first episode of the first size (every train's path, start, target and end) into this
    .png file"""
    threads: int = 1
    """torch CPU threads"""


def parse_size(text: str) -> tuple[int, int, int, int | None]:
    """(width, height, trains, cities or None) of a --sizes entry; exits with one line when malformed."""
    try:
        numbers = [int(x) for x in text.lower().split("x")]
        if len(numbers) not in (3, 4):
            raise ValueError
    except ValueError:
        sys.exit(f"error: --sizes {text!r}: give WIDTHxHEIGHTxTRAINS or WIDTHxHEIGHTxTRAINSxCITIES, e.g. 25x25x5")
    return (*numbers, None) if len(numbers) == 3 else tuple(numbers)


LIMITS = {
    "episodes": (1, 100_000),
    "seed": (0, MAX_SEED),
    "max_active": (1, 10_000),
    "threshold": (0.0, 1.0),
    "threads": (1, MAX_THREADS),
    "planner_seconds": (1e-3, 86_400.0),
    "planner_searches": (10, 10**9),
}
"""The closed range of every numeric argument (``training.runs.check_numbers``)."""


def check_args(args: Args) -> list[tuple[int, int, int]]:
    """Fails early, in one line: numbers out of range, bad sizes, output or render paths."""
    fail(check_numbers(args, LIMITS))
    if not args.rules:
        sys.exit(f"error: --rules: name at least one of {', '.join(RULES)}")
    if unknown := [name for name in args.rules if name not in RULES]:
        sys.exit(f"error: --rules {' '.join(unknown)}: unknown; choose from {', '.join(RULES)}")
    if "planner_learned" in args.rules and args.priorities is None and args.rules != RULES:
        sys.exit("error: --rules planner_learned plays a learned priority order: give --priorities CHECKPOINT")
    sizes = list(SUITES[args.suite]) if args.suite else [parse_size(size) for size in args.sizes]
    for width, height, trains, cities in sizes:
        try:
            RailDecisionEnv(width, height, trains, cities=cities, flatland3=args.flatland3)
        except ValueError as exc:
            sys.exit(f"error: --sizes {width}x{height}x{trains}: {exc}")
    for name, path, suffix in (("--output", args.output, ".json"), ("--render", args.render, ".png")):
        if path is None:
            continue
        folder = os.path.dirname(os.path.abspath(path))
        if os.path.isdir(path):
            sys.exit(f"error: {name} {path} is a folder; name a {suffix} file in it")
        if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
            sys.exit(f"error: {name} {path}: the folder {folder} does not exist or is not writable")
        if not path.endswith(suffix):
            sys.exit(f"error: {name} {path}: give a {suffix} file")
    return sizes


def attempt(play_one, *args, **kwargs) -> dict | str | None:
    """``play_one(*args, **kwargs)``: one map's figures, or the error it ended in (one line), so that a rule
    that fails on a map is a row that says so and the other rules and maps play on."""
    try:
        return play_one(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 (a baseline's own assertion is one of them)
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")


def plan_map(draw, seed: int, ordering: str, seconds: float, initial, searches: int | None = None) -> dict:
    """The planner's episode on the map ``draw(seed)`` (``railway.spacetime.play_planner``)."""
    return play_planner(draw(seed), ordering, seconds, seed, initial=initial, searches=searches)


QUALITY = ("arrival_rate", "on_time_rate", "normalized_score")
"""The scores a map that a rule failed on counts as 0 for (the other figures: over the maps it played)."""


def averaged(played: list, seeds, keys) -> dict:
    """The mean of each of ``keys`` over the maps of ``seeds`` (``max_seconds_per_step``: the largest); a map
    ``played`` holds an error for (``attempt``) scores 0 in ``QUALITY`` and is listed in ``failed_maps``."""
    done = [p for p in played if isinstance(p, dict)]
    row = {}
    for key in keys:
        values = [p[key] if isinstance(p, dict) else 0.0 for p in played] if key in QUALITY else [p[key] for p in done]
        row[key] = float(max(values) if key == "max_seconds_per_step" else np.mean(values)) if values else float("nan")
    row["failed_maps"] = [
        {"seed": seed, "error": p} for seed, p in zip(seeds, played, strict=True) if isinstance(p, str)
    ]
    return row


@dataclass
class Policies:
    """What eval_flatland plays beside the fixed rules: the decision policy of ``checkpoint`` (``ckpt``: its
    checkpoint, whose ``args`` are its training settings), its release classifier (None without one) and the
    learned priority order of --priorities (None without it)."""

    checkpoint: Path
    policy: object
    ckpt: dict
    classifier: object | None
    learned: object | None

    @property
    def settings(self) -> dict:
        """The decision policy's training settings its rules play with."""
        train = self.ckpt["args"]
        return {"depth": train["tree_depth"], "radius": train["comm_radius"], "safety": train.get("safety", False),
                "wait": train.get("wait", False), "veto": train.get("veto", "path"),
                "sampled": train.get("eval_sample", False), "max_active": train["max_active"]}  # fmt: skip


def load_policies(args: Args) -> Policies:
    """The policies --checkpoint and --priorities name; exits with one line where one cannot be read."""
    try:
        checkpoint = latest_checkpoint(args.checkpoint or SHIPPED)
        policy, ckpt = load_rail_policy(checkpoint)
    except CheckpointError as exc:
        sys.exit(f"error: --checkpoint: {exc}")
    try:
        learned = load_priority_policy(latest_checkpoint(args.priorities))[0] if args.priorities else None
    except CheckpointError as exc:
        sys.exit(f"error: --priorities: {exc}")
    return Policies(checkpoint, policy, ckpt, load_release_classifier(ckpt), learned)


def decision_rules(args: Args, policies: Policies, threshold: float) -> dict:
    """The rules asked for that play one decision at a time: name -> (rule, trains at once, release rule,
    safety layer, waiting allowed, veto)."""
    s, policy = policies.settings, policies.policy
    max_active = args.max_active or s["max_active"]
    sampler = torch.Generator().manual_seed(args.seed)  # the same draws for a size whatever the others
    guard = (s["safety"], s["wait"], s["veto"])
    rules = {
        "policy": (policy_rule(policy), max_active, None, *guard),
        "policy_sampled": (policy_rule(policy, False, sampler), max_active, None, *guard),
        "shortest_path": (shortest_path_rule, None, None, False, False, "path"),
        "shortest_path_release": (shortest_path_rule, max_active or 5, None, False, False, "path"),
        "random": (random_rule(np.random.default_rng(args.seed)), None, None, False, False, "path"),
    }
    if policies.classifier is not None:
        release, draws = learned_release(policies.classifier, s["depth"], threshold), torch.Generator().manual_seed(args.seed)
        rules["policy_learned_release"] = (policy_rule(policy, not s["sampled"], draws), None, release, *guard)
    if s["safety"]:  # the layer alone: the reservation check over the whole path, whatever the policy's veto
        rules[ABLATION] = (shortest_path_rule, max_active, None, True, False, "path")
    return {name: rule for name, rule in rules.items() if name in args.rules}


def play_rules(args: Args, policies: Policies, rules: dict, size: tuple, row: dict, render: bool) -> None:
    """Plays each of ``rules`` on the size's maps and puts its averages in ``row`` (the policy's also the
    decisions where it left the layer's rule); ``render`` draws the policy's first map."""
    (width, height, trains, cities), s = size, policies.settings
    seeds = range(args.seed, args.seed + args.episodes)
    for name, (rule, active, release, guarded, waits, vetoes) in rules.items():
        drawn = name == "policy" and render
        env = RailDecisionEnv(
            width, height, trains, max_active=min(active, trains) if active else None, cities=cities, safety=guarded,
            record=drawn, wait=waits, veto=vetoes, flatland3=args.flatland3,
        )  # fmt: skip
        played = []
        for seed in seeds:
            played.append(attempt(play, env, seed, rule, s["depth"], s["radius"], release_rule=release))
            if drawn and seed == args.seed and isinstance(played[0], dict):
                render_episode(args.render, env, f"policy {policies.checkpoint.name}, map seed {args.seed}")
            env.record = False
        row[name] = averaged(played, seeds, METRICS)
        if name.startswith("policy"):  # the decisions where it leaves the layer's rule, summed over the maps
            done = [p for p in played if isinstance(p, dict)]
            row[name].update({key: sum(p[key] for p in done) for key in ("decisions", *CHANGES)})


def play_planners(args: Args, learned, draw, rules: dict, row: dict) -> dict:
    """Plays the planner rules asked for (``learned``: the learned order's policy, or None) on the maps
    ``draw`` makes, adds them to ``rules`` and ``row`` with the learned order's lead over the best fixed
    one; returns the planner rules' names and orderings."""
    seeds = range(args.seed, args.seed + args.episodes)
    planners = {**PLANNERS, **({"planner_learned": "learned"} if learned is not None else {})}
    episodes = {}  # planner rule -> its play_planner dicts (or errors), map by map
    for name, ordering in planners.items():
        if name in args.rules:
            learned_order = ordering == "learned"  # the learned order replaces the fixed one (unused then)
            initial = partial(learned_plans, learned) if learned_order else None
            ordering = "closest" if learned_order else ordering
            episodes[name] = [
                attempt(plan_map, draw, seed, ordering, args.planner_seconds, initial, args.planner_searches)
                for seed in seeds
            ]
            rules[name], row[name] = None, averaged(episodes[name], seeds, PLANNER_METRICS)
    whole = {name for name, maps in episodes.items() if all(isinstance(p, dict) for p in maps)}  # none failed
    fixed = [name for name in PLANNERS if name in whole]
    if "planner_learned" in whole and fixed:  # the best fixed order: most arrivals, then least planning
        best = max(fixed, key=lambda n: (row[n]["arrival_rate"], -row[n]["planning_seconds"]))
        row["learned_order_vs_best_fixed"] = {"fixed": best, **lead_over(episodes["planner_learned"], episodes[best])}
    return planners


def main(args: Args, given: set[str] | None = None) -> None:
    """Evaluates (``given``, the fields given on the command line, is unused: nothing resumes)."""
    sizes = check_args(args)
    torch.set_num_threads(args.threads)
    keep_freed_memory()
    policies = load_policies(args)
    train, s = policies.ckpt["args"], policies.settings
    max_active = args.max_active or s["max_active"]
    threshold = args.threshold if args.threshold is not None else policies.ckpt.get("release_threshold", 0.5)
    has_release = policies.classifier is not None
    print(
        f"policy {policies.checkpoint} (trained on {train['width']}x{train['height']} with {train['trains']} "
        f"trains{', safety layer' if s['safety'] else ''}{', waiting allowed' if s['wait'] else ''}"
        f"{', segment veto' if s['veto'] == 'segment' else ''}), {args.episodes} maps per "
        f"size from seed {args.seed}, release {max_active or 'all'} at a time"
        + (f", learned release threshold {threshold:g}" if has_release else "")
        + (" (chosen with sampled actions, as the learned release plays)" if has_release and s["sampled"] else "")
    )
    results = []
    for width, height, trains, cities in sizes:
        rules = decision_rules(args, policies, threshold)
        row = {"width": width, "height": height, "trains": trains, "cities": cities, "episodes": args.episodes}
        play_rules(args, policies, rules, (width, height, trains, cities), row, bool(args.render) and not results)
        seeds = range(args.seed, args.seed + args.episodes)
        draw = partial(rail_env, width, height, trains, cities=cities, flatland3=args.flatland3)
        if "deadlock_avoidance" in args.rules:
            dla = [attempt(play_deadlock_avoidance, width, height, trains, seed, cities, args.flatland3) for seed in seeds]
            if dla[0] is not None:  # flatland-baselines installed
                rules["deadlock_avoidance"], row["deadlock_avoidance"] = None, averaged(dla, seeds, METRICS)
        planners = play_planners(args, policies.learned, draw, rules, row)
        if "oracle" in args.rules:
            rules["oracle"] = None
            row["oracle"] = {"arrival_rate": float(np.mean([oracle_arrival(draw(seed)) for seed in seeds]))}
        results.append(row)
        report(row, rules, planners)
    if args.output:
        write_json(args.output, results, indent=2)
        print(f"wrote {args.output}")
    if args.render:
        print(f"wrote {args.render}")


def report(row: dict, rules, planners) -> None:
    """Prints one size's rows (``rules``: the rules played, in order; ``planners``: the planner rules) and
    the policy's leads, which it adds to ``row``."""
    print(f"{row['width']}x{row['height']}, {row['trains']} trains:")
    for name in rules:
        r = row[name]
        if name == "oracle":
            print(f"  {name:<22} arrived {r['arrival_rate']:.3f}  (each train alone with its own malfunctions)")
            continue
        line = (
            f"  {name:<22} arrived {r['arrival_rate']:.3f}  on time {r['on_time_rate']:.3f}  deadlocked "
            f"{r['deadlock_rate']:.3f}  normalized score {r['normalized_score']:.3f}  computing "
            f"{r['seconds_before_first_step']:.2f} s before the first step, {1000 * r['seconds_per_step']:.1f} ms a "
            f"step (largest {r['max_seconds_per_step']:.2f} s)  Flatland's step {1000 * r['flatland_seconds_per_step']:.1f} ms"
        )
        if name not in planners:
            line += f"  {r['decisions_per_second']:,.0f} decisions/s"
        print(line)
        for failure in r["failed_maps"]:
            print(f"  {'':<22} failed on map {failure['seed']} (scored 0): {failure['error']}")
        if "decisions" in r:
            print(
                f"  {'':<22} left the layer's rule at {sum(r[key] for key in CHANGES):,} of {r['decisions']:,} "
                f"decisions: moved where it stops {r['changed_to_move']:,}, stopped where it moves "
                f"{r['changed_to_stop']:,}, took the other branch {r['changed_branch']:,}"
            )
    if "learned_order_vs_best_fixed" in row:
        c = row["learned_order_vs_best_fixed"]
        print(
            f"  planner_learned vs the best fixed order ({c['fixed']}): {c['arrival_lead']:+.3f} arrival rate "
            f"(95% CI {c['arrival_lead_low']:+.3f} to {c['arrival_lead_high']:+.3f} over the maps), "
            f"{c['planning_ratio']:.2f}x its planning time"
        )
    mine = [n for n in rules if n.startswith("policy")]
    if not mine:
        return
    mine = max(mine, key=lambda n: row[n]["arrival_rate"])
    baselines = [n for n in rules if not n.startswith("policy") and n not in (ABLATION, "oracle")]
    if baselines:
        best = max(baselines, key=lambda n: row[n]["arrival_rate"])
        row["lead_over_best_baseline"] = row[mine]["arrival_rate"] - row[best]["arrival_rate"]
        print(f"  {mine} vs the best baseline ({best}): {row['lead_over_best_baseline']:+.3f} arrival rate", flush=True)
    if ABLATION in rules:
        row["lead_over_safety_layer_alone"] = row[mine]["arrival_rate"] - row[ABLATION]["arrival_rate"]
        print(f"  {mine} vs the safety layer alone: {row['lead_over_safety_layer_alone']:+.3f} arrival rate")


def cli() -> None:
    """The ``ppo-or-flatland-eval`` console command."""
    main(tyro.cli(Args))


if __name__ == "__main__":
    cli()
