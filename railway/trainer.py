"""What ``ppo_flatland.py``'s loop calls around the algorithm: the envs, the validation maps'
evaluation, the release classifier (its data from exploring releases, its training, its threshold
chosen on the validation maps), the checkpoint's training state, the behaviour cloning that may
start a run, and the options: the range of every argument, the combinations refused, what a resumed
run may change. The algorithm itself (rollout, advantages, the PPO update) stays in the script.
``args`` is a ``ppo_flatland.Args``.
"""

from __future__ import annotations

import copy
import math
import sys
from dataclasses import asdict

import numpy as np
import torch
from ppoor.railway.env import RailDecisionEnv
from ppoor.railway.play import CHANGES, learned_release, play, policy_rule, waiting_features
from ppoor.railway.policy import POLICY_INPUTS, RailPolicy, ReleaseClassifier, load_rail_policy
from ppoor.railway.tree import EDGE_FEATURES, GLOBAL_FEATURES, edge_slots
from ppoor.training.runs import (
    MAX_SECONDS,
    MAX_THREADS,
    PPO_LIMITS,
    check_numbers,
    exp_name_problem,
    fail,
    resume_settings,
    wandb_problem,
)
from ppoor.training.runtime import StopRequest

VAL_SEED = 1_000_000  # validation maps: seeds VAL_SEED, VAL_SEED + 1, ...

RELEASE_THRESHOLDS = (0.0, 0.25, 0.5, 0.75)
"""The learned release's thresholds tried on the validation maps; the best one is kept in the checkpoint."""


def make_env(args) -> RailDecisionEnv:
    return RailDecisionEnv(
        args.width, args.height, args.trains, args.max_active, args.cities, args.safety, wait=args.wait,
        veto=args.veto, flatland3=args.flatland3,
    )


def validated_rule(policy: RailPolicy, args):
    """The policy as the run validates it: its most likely actions, or with --eval-sample its draws
    (seeded with ``VAL_SEED``: the same policy draws the same actions on the same maps)."""
    if args.eval_sample:
        return policy_rule(policy, greedy=False, generator=torch.Generator().manual_seed(VAL_SEED))
    return policy_rule(policy)


def evaluate(policy: RailPolicy, args, stop: StopRequest | None = None, release_rule=None) -> dict:
    """The policy (greedy, or drawing its actions with --eval-sample) on the validation maps (with the
    training release heuristic, or ``release_rule``):
    mean arrival and deadlock rate and score (over the maps played before ``stop`` was requested, at
    least one), and the share of its decisions that leave the observation's prior (the layer's rule),
    in all (``changed_decisions``) and by kind (``railway.play.CHANGES``)."""
    env, rule = make_env(args), validated_rule(policy, args)
    results = []
    for k in range(args.eval_episodes):
        if stop is not None and stop.requested and results:
            break
        results.append(play(env, VAL_SEED + k, rule, args.tree_depth, args.comm_radius, release_rule=release_rule))
    out = {key: float(np.mean([r[key] for r in results])) for key in ("arrival_rate", "deadlock_rate", "normalized_score")}
    decisions = max(1, sum(r["decisions"] for r in results))
    for key in CHANGES:  # shares of all decisions where the policy leaves the layer's rule
        out[key] = sum(r[key] for r in results) / decisions
    out["changed_decisions"] = sum(out[key] for key in CHANGES)
    return out


def exploring_release(rng: np.random.Generator, epsilon: float, depth: int, record: list):
    """The training heuristic (closest to target first, at most max_active running) plus, each
    simulator step, an early release of each other waiting train with probability ``epsilon``;
    appends (handles, edges, globals) of every release to ``record``."""

    def rule(wrapper) -> list[int]:
        due = wrapper.due()
        others = [h for h in wrapper.queue if not wrapper.released[h] and not wrapper.finished[h] and h not in due]
        chosen = due + [h for h in others if rng.random() < epsilon]
        if chosen:
            handles, edges, globs = waiting_features(wrapper, depth)
            rows = [int(np.flatnonzero(handles == h)[0]) for h in chosen]
            record.append((chosen, edges[rows], globs[rows]))
        return chosen

    return rule


def train_release_classifier(
    policy: RailPolicy, args, rng: np.random.Generator, stop: StopRequest
) -> tuple[ReleaseClassifier, dict] | None:
    """Release data from the trained policy (as validated) with the training heuristic and random early
    releases (--release-episodes maps), each release labelled by whether that train arrived; a
    classifier fitted to it (binary cross-entropy). Returns it and its training figures; None when
    ``stop`` was requested before any release was recorded."""
    env, policy_moves = make_env(args), validated_rule(policy, args)
    edges, globs, labels = [], [], []
    for _ in range(args.release_episodes):
        if stop.requested:
            break
        record = []
        rule = exploring_release(rng, 0.05, args.tree_depth, record)
        play(env, int(rng.integers(2**31)), policy_moves, args.tree_depth, args.comm_radius, release_rule=rule)
        for handles, e, g in record:
            edges.append(e)
            globs.append(g)
            labels.extend(env.arrived[h] for h in handles)
    if not labels:
        return None
    x_edges, x_globs = torch.as_tensor(np.concatenate(edges)), torch.as_tensor(np.concatenate(globs))
    y = torch.as_tensor(np.array(labels, dtype=np.float32))
    classifier = ReleaseClassifier(edge_slots(args.tree_depth), len(EDGE_FEATURES), len(GLOBAL_FEATURES))
    optimizer = torch.optim.Adam(classifier.parameters(), lr=1e-3)
    for _ in range(300):
        loss = torch.nn.functional.binary_cross_entropy_with_logits(classifier(x_edges, x_globs), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        accuracy = float(((classifier(x_edges, x_globs) > 0).float() == y).float().mean())
    return classifier.eval(), {
        "samples": len(y),
        "arrived_share": float(y.mean()),
        "loss": loss.item(),
        "accuracy": accuracy,
    }


def choose_threshold(policy: RailPolicy, classifier: ReleaseClassifier, args, stop: StopRequest) -> dict:
    """The threshold of ``RELEASE_THRESHOLDS`` with the best validation arrival rate of the policy
    with the learned release (the validation maps are disjoint from eval_flatland.py's test maps): its
    figures and ``threshold``; the first ties win."""
    best = {"arrival_rate": -1.0}
    for threshold in RELEASE_THRESHOLDS:
        if stop.requested:
            break
        result = evaluate(policy, args, stop, learned_release(classifier, args.tree_depth, threshold))
        print(f"release threshold {threshold:g}: validation arrival rate {result['arrival_rate']:.3f}", flush=True)
        if result["arrival_rate"] > best["arrival_rate"]:
            best = {**result, "threshold": threshold}
    return best


def learn_release(policy: RailPolicy, args, rng: np.random.Generator, stop: StopRequest) -> dict:
    """Trains the release classifier on --release-episodes of the final policy and chooses its threshold on
    the validation maps; returns what the checkpoint keeps of it (nothing when stopped)."""
    kept = {}
    if trained := train_release_classifier(policy, args, rng, stop):
        classifier, figures = trained
        print(
            f"release classifier: {figures['samples']} releases from {args.release_episodes} episodes "
            f"({figures['arrived_share']:.0%} arrived), training accuracy {figures['accuracy']:.3f}",
            flush=True,
        )
        kept.update(release_model=classifier.state_dict(), release_config=classifier.shape)
        if args.eval_episodes and "threshold" in (chosen := choose_threshold(policy, classifier, args, stop)):
            kept["release_threshold"] = chosen["threshold"]
            print(f"release threshold {chosen['threshold']:g} kept (chosen on the validation maps)", flush=True)
    return kept


def training_state(policy: RailPolicy, optimizer, model_config: dict, rng, args, extra: dict) -> dict:
    """What a checkpoint holds beside the run's state: the policy, the optimizer, the settings, the RNG
    states and ``extra`` (episodes played, the best policy so far, the release classifier)."""
    return {
        "problem": "rail",
        "num_nodes": args.trains,
        "model_config": model_config,
        "model": policy.state_dict(),
        "optimizer": optimizer.state_dict(),
        "args": asdict(args),
        "rng": {"torch": torch.get_rng_state(), "numpy": rng.bit_generator.state},
        **extra,
    }


LIMITS = {
    **PPO_LIMITS,
    "num_minibatches": (1, math.inf),
    "threads": (0, MAX_THREADS),
    "width": (20, 1_000),
    "height": (20, 1_000),
    "trains": (1, 10_000),
    "cities": (2, 1_000),
    "max_active": (1, 10_000),
    "prior_weight": (0.0, 100.0),
    "tree_depth": (1, 6),
    "comm_radius": (0, 10_000),
    "total_seconds": (1.0, MAX_SECONDS),
    "num_envs": (1, 1_000),
    "hidden": (1, 4096),
    "eval_episodes": (0, 100_000),
    "imitation_episodes": (0, 100_000),
    "imitation_epochs": (1, 100_000),
    "imitation_learning_rate": (1e-10, 10.0),
    "release_episodes": (0, 100_000),
}
"""The closed range of every numeric argument (``training.runs.check_numbers``)."""


def check_args(args) -> None:
    """Fails early, in one line, on arguments that cannot work."""
    problems = check_numbers(args, LIMITS)
    if problem := exp_name_problem(args.exp_name):
        problems.append(problem)
    if args.imitation_episodes and not args.safety:
        problems.append("--imitation-episodes imitates the safety layer's rule: drop --no-safety")
    if args.wait and not args.safety:
        problems.append("--wait lets the safety layer's trains stop while a move is clear: drop --no-safety")
    if args.veto != "path" and not args.safety:
        problems.append("--veto is a setting of the safety layer: drop --no-safety")
    fail(problems)
    try:
        make_env(args)
    except ValueError as exc:
        sys.exit(f"error: {exc}")


def policy_batch(observations: list, keys=POLICY_INPUTS) -> list:
    """Per-environment observation dicts -> tensors [B, T, ...] of ``keys``."""
    return [torch.as_tensor(np.stack([o[key] for o in observations])) for key in keys]


def model_config(args) -> dict:
    """The policy's shape and prior weight (``RailPolicy``'s arguments), as the checkpoint records them."""
    return {"edge_slots": edge_slots(args.tree_depth), "edge_features": len(EDGE_FEATURES),
            "global_features": len(GLOBAL_FEATURES), "hidden": args.hidden, "prior_weight": args.prior_weight}  # fmt: skip


def imitate(policy: RailPolicy, demonstrations: list, args, stop: StopRequest) -> dict:
    """Behaviour cloning before PPO on ``demonstrations``, a list of (rollout, returns [S, B, T]) of the
    safety layer's shortest-path rule (``railway.play.shortest_path_rule``) played by ``ppo_flatland.rollout``:
    the actor is fitted to the rule's actions (cross-entropy over the allowed actions of the deciding
    trains) and the critic to the discounted returns of each train's decisions, --imitation-epochs passes
    (fewer when ``stop`` is requested). Returns the fitted figures."""
    rows = [(stored, roll["actions"][k], torch.as_tensor(roll["deciding"][k]), returns[k])
            for roll, returns in demonstrations for k, stored in enumerate(roll["stored"])]  # fmt: skip
    data = {key: torch.cat([r[0][key] for r in rows]) for key in POLICY_INPUTS}
    target = torch.cat([r[1] for r in rows])
    deciding = torch.cat([r[2] for r in rows]).float()
    returns = torch.as_tensor(np.concatenate([r[3] for r in rows]), dtype=torch.float32)
    optimizer = torch.optim.Adam(policy.parameters(), lr=args.imitation_learning_rate)
    size = max(1, len(target) // args.num_minibatches)
    for _ in range(args.imitation_epochs):
        if stop.requested:
            break
        for idx in torch.randperm(len(target)).split(size):
            logits, value = policy(*(data[key][idx] for key in POLICY_INPUTS))
            count = deciding[idx].sum().clamp(min=1)
            actor = (torch.nn.functional.cross_entropy(logits.transpose(1, 2), target[idx], reduction="none")
                     * deciding[idx]).sum() / count  # fmt: skip
            critic = (((value - returns[idx]) ** 2) * deciding[idx]).sum() / count
            optimizer.zero_grad()
            (actor + args.vf_coef * critic).backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), args.max_grad_norm)
            optimizer.step()
    with torch.no_grad():
        logits, _ = policy(*(data[key] for key in POLICY_INPUTS))
        agree = ((logits.argmax(-1) == target).float() * deciding).sum() / deciding.sum().clamp(min=1)
    print(f"imitation: {int(deciding.sum()):,} decisions of the shortest-path rule from {args.imitation_episodes} "
          f"episodes, greedy agreement {float(agree):.3f}", flush=True)  # fmt: skip
    return {"decisions": int(deciding.sum()), "agreement": float(agree), "value_loss": critic.item()}


RESUME_OVERRIDES = ("total_timesteps", "total_seconds", "checkpoint_interval", "eval_interval", "threads", "track",
                    "wandb_project_name", "wandb_entity")  # fmt: skip
"""The arguments a resumed run may change; any other one given must equal the checkpoint's."""


def initial_policy(args) -> dict:
    """The weights of --init-from, checked against this run's policy shape; exits with one line otherwise."""
    from ppoor.models.checkpoints import CheckpointError, latest_checkpoint

    try:
        _, ckpt = load_rail_policy(latest_checkpoint(args.init_from))
    except (CheckpointError, ValueError) as exc:
        sys.exit(f"error: --init-from: {exc}")
    mine = {"edge_slots": edge_slots(args.tree_depth), "edge_features": len(EDGE_FEATURES),
            "global_features": len(GLOBAL_FEATURES), "hidden": args.hidden}  # fmt: skip
    theirs = {key: ckpt["model_config"].get(key) for key in mine}
    if theirs != mine:
        sys.exit(f"error: --init-from: {args.init_from} has policy shape {theirs}, this run needs {mine} "
                 "(--tree-depth and --hidden must match)")  # fmt: skip
    return ckpt["model"]


def resolve_args(args, given: set[str] | None = None, script: str = "ppo_flatland.py", check=None) -> tuple:
    """The settings ``main`` can trust (a resumed run's own; ``given``: the fields given on the command
    line) and the checkpoint resumed from; exits with one line naming the argument otherwise. ``script``
    and ``check``: the railway trainer's name and its arguments' check (``check_args`` by default;
    ``priorities.check_args`` for ppo_priorities.py)."""
    ckpt = None
    if args.resume:
        args, ckpt = resume_settings(args, given or set(), RESUME_OVERRIDES, script)
    (check or check_args)(args)
    if args.track and (problem := wandb_problem()):
        sys.exit(f"error: --track: {problem}")
    return args, ckpt


def restore(ckpt: dict, policy: RailPolicy, optimizer, kept: dict, rng: np.random.Generator) -> None:
    """Puts a resumed run's policy, optimizer, episode count, best policy and random states back."""
    policy.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    kept.update(episodes=ckpt["episodes"], best=ckpt.get("best", kept["best"]))
    torch.set_rng_state(ckpt["rng"]["torch"])
    rng.bit_generator.state = ckpt["rng"]["numpy"]


def final_episodes(args) -> int:
    """The episodes played after training (the release data, its thresholds' validation, the final
    evaluation): --total-seconds keeps their estimated time in reserve so the whole run fits it."""
    release = args.release_episodes + len(RELEASE_THRESHOLDS) * args.eval_episodes if args.release_episodes else 0
    return args.eval_episodes + release


def validate(policy: RailPolicy, args, run, best: dict) -> str:
    """Validates the policy (``evaluate``), logs eval/ tags, keeps it in ``best`` (arrival_rate, iteration,
    model) where it beats the best so far; returns the iteration line's text."""
    result = evaluate(policy, args, run.stop)
    for name, value in result.items():
        run.log(f"eval/{name}", value)
    if result["arrival_rate"] > best["arrival_rate"]:
        best.update(arrival_rate=result["arrival_rate"], iteration=run.iteration,
                    model=copy.deepcopy(policy.state_dict()))  # fmt: skip
    return (f" eval/arrival_rate={result['arrival_rate']:.3f} eval/deadlock_rate={result['deadlock_rate']:.3f}"
            f" eval/changed_decisions={result['changed_decisions']:.4f}")  # fmt: skip


def validate_start(policy: RailPolicy, args, run, best: dict) -> None:
    """A new run that starts from a policy of its own (imitated, residual or --init-from) validates it first:
    it is kept unless training beats it."""
    started = args.imitation_episodes or args.prior_weight or args.init_from
    if started and args.eval_interval and not run.stop.requested:
        result = evaluate(policy, args, run.stop)
        best.update(arrival_rate=result["arrival_rate"], iteration=0, model=copy.deepcopy(policy.state_dict()))
        print(f"start: validation arrival rate {result['arrival_rate']:.3f}", flush=True)


def finish(run, policy: RailPolicy, optimizer, config: dict, rng: np.random.Generator, args, kept: dict) -> None:
    """The end of a run: a stopped run's state; the best validated policy kept (--keep-best); the release
    classifier learned (--release-episodes); the final checkpoint and evaluation."""
    best = kept["best"]
    if run.stop.requested:
        run.stopped(run.save(training_state(policy, optimizer, config, rng, args, kept)))
    if args.keep_best and best["model"] is not None:
        policy.load_state_dict(best["model"])
        print(f"kept the policy of iteration {best['iteration']} (validation arrival {best['arrival_rate']:.3f})")
    if args.release_episodes:
        kept.update(learn_release(policy, args, rng, run.stop))
    path = run.save(training_state(policy, optimizer, config, rng, args, kept))
    result = evaluate(policy, args, run.stop) if args.eval_episodes and not run.stop.requested else {}
    if result:
        print(f"final: {'sampled' if args.eval_sample else 'greedy'} policy on {args.eval_episodes} validation maps: "
              f"arrival rate {result['arrival_rate']:.3f}, deadlock rate {result['deadlock_rate']:.3f}, normalized "
              f"score {result['normalized_score']:.3f}; checkpoint {path}", flush=True)  # fmt: skip
    else:
        print(f"final checkpoint: {path}", flush=True)
    run.close()


def announce(run, args) -> None:
    """Prints the run's first lines: the maps, the trains, the layer, the budget."""
    print(
        f"ppo_flatland: {args.width}x{args.height} maps, {args.trains} trains (at most {args.max_active or args.trains} "
        f"running{', safety layer' if args.safety else ''}), {args.num_envs} maps per iteration, tree depth "
        f"{args.tree_depth}\nrun {run.dir}: {args.total_timesteps:,} "
        f"decisions" + (f", at most {args.total_seconds:g} s" if args.total_seconds else ""),
        flush=True,
    )


def log_iteration(run, args, envs: list, roll: dict, stats: dict, lr: float, times: tuple) -> str:
    """Logs an iteration's charts (the episodes' arrival, deadlock and score on its maps, ``lr``, the
    rollout and update ``times`` in seconds) and ``stats`` as losses; returns its line."""
    arrival = float(np.mean([env.arrived.mean() for env in envs]))
    deadlock = float(np.mean([env.deadlocked.mean() for env in envs]))
    score = float(np.mean([env.score() for env in envs]))
    for tag, value in (
        ("charts/learning_rate", lr), ("charts/arrival_rate", arrival),
        ("charts/deadlock_rate", deadlock), ("charts/normalized_score", score),
        ("charts/episodic_return", float(np.stack(roll["rewards"]).sum() / (args.num_envs * args.trains))),
        ("charts/decisions_per_second", roll["decisions"] / times[0]),
        ("charts/SPS", int(roll["decisions"] / sum(times))),
        *((f"losses/{name}", value) for name, value in stats.items()),
    ):  # fmt: skip
        run.log(tag, value)
    return (
        f"iteration={run.iteration} decisions={run.global_step} arrival={arrival:.3f} deadlock={deadlock:.3f} "
        f"score={score:.3f} rollout={times[0]:.2f}s update={times[1]:.2f}s"
    )
