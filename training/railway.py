"""What ``ppo_flatland.py``'s loop calls around the algorithm: the envs, the validation maps'
evaluation, the release classifier (its data from exploring releases, its training, its threshold
chosen on the validation maps) and the checkpoint's training state. The algorithm itself (rollout,
advantages, imitation, the PPO update) stays in the script. ``args`` is ``ppo_flatland.Args``.
"""

from __future__ import annotations

from dataclasses import asdict

import numpy as np
import torch
from ppoor.envs.rail import RailDecisionEnv
from ppoor.envs.rail_tree import EDGE_FEATURES, GLOBAL_FEATURES, edge_slots
from ppoor.models.rail import RailPolicy, ReleaseClassifier
from ppoor.search.rail import CHANGES, learned_release, play, policy_rule, waiting_features
from ppoor.training.runtime import StopRequest

VAL_SEED = 1_000_000  # validation maps: seeds VAL_SEED, VAL_SEED + 1, ...

RELEASE_THRESHOLDS = (0.0, 0.25, 0.5, 0.75)
"""The learned release's thresholds tried on the validation maps; the best one is kept in the checkpoint."""


def make_env(args) -> RailDecisionEnv:
    return RailDecisionEnv(
        args.width, args.height, args.trains, args.max_active, args.cities, args.safety, wait=args.wait, veto=args.veto
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
    in all (``changed_decisions``) and by kind (``search.rail.CHANGES``)."""
    env, rule = make_env(args), validated_rule(policy, args)
    results = []
    for k in range(args.eval_episodes):
        if stop is not None and stop.requested and results:
            break
        results.append(play(env, VAL_SEED + k, rule, args.tree_depth, args.comm_radius, release_rule=release_rule))
    out = {key: float(np.mean([r[key] for r in results])) for key in ("arrival_rate", "deadlock_rate", "score")}
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
