"""A learned priority order for the space-time planner (``railway.spacetime``): an attention policy over
the trains orders them as the Attention Model orders nodes, one train after another, and the planner
plans them in that order. ``ppo_priorities.py`` trains it with PPO, each order
rewarded by the share of trains its plan lands and how soon (``order_reward``): without malfunctions
plans are carried out by the simulator as planned (``tests/test_spacetime.py``), so a plan's arrivals
are the episode's. Under Flatland 3's rules a malfunction breaks plans that no order foresees, so an
order is rewarded by its episode instead (``episode_reward``): the order that holds up best when the
replanning has to mend it.

Shapes: B orders (maps x orders per map), T trains, F = len(FEATURES) features per train, d the
embedding size.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from ppoor.railway.spacetime import Allowance, Planner, Track, best_plans, free_path_cells, play_planner
from ppoor.training.runs import MAX_SECONDS, MAX_SEED, MAX_THREADS, check_numbers, exp_name_problem, fail
from torch import nn

FEATURES = (
    "start_row", "start_col", "target_row", "target_col", "path_length", "earliest", "latest_arrival", "slack",
    "sharing_start", "sharing_target", "congestion",
)  # fmt: skip
"""Per train, scaled to about [0, 1]: its start and target cells over the map's size; its free path's
length, earliest entering step, latest arrival and slack (steps left after arriving alone) over the
step limit; the share of trains starting on its start cell or ending on its target; and the mean
number of other trains whose free paths cross the cells of its own, over the trains."""

DELAY_WEIGHT = 0.1
"""``order_reward``'s weight of the mean delay (arrival step after the train's alone arrival, over the
step limit) beside the share of trains landed; ``episode_reward``'s weight of Flatland's normalized score."""

EPISODE_STEP_SECONDS = 0.1
"""The planner's repair budget a step in the episodes that score orders under Flatland 3's rules."""


def train_features(track: Track) -> np.ndarray:
    """The ``FEATURES`` of every train of a map: [T, F] float32."""
    env, steps, count = track.env, track.max_steps, track.trains
    paths = [free_path_cells(track, h, None) for h in range(count)]
    crossing: dict = {}
    for cells in paths:
        for cell in cells:
            crossing[cell] = crossing.get(cell, 0) + 1
    starts = [start[0] for start in track.starts]
    rows = []
    for h, agent in enumerate(env.agents):
        (row, col), target = track.starts[h][0], track.targets[h]
        length = track.alone_arrival(h) - track.earliest[h]
        length = length if math.isfinite(length) else 2.0 * steps
        rows.append([
            row / env.height, col / env.width, target[0] / env.height, target[1] / env.width,
            length / steps, track.earliest[h] / steps, float(agent.latest_arrival) / steps,
            max(-1.0, (steps - track.earliest[h] - length) / steps),
            starts.count((row, col)) / count, track.targets.count(target) / count,
            sum(crossing[cell] - 1 for cell in paths[h]) / max(1, len(paths[h])) / count,
        ])  # fmt: skip
    return np.asarray(rows, dtype=np.float32)


class PriorityPolicy(nn.Module):
    """Encodes the trains with self-attention, then picks them one after another: the query is the
    mean embedding and the last pick's, the logits 10 tanh(q.k / sqrt(d)) over the trains not yet
    picked. ``forward(features [B, T, F], order=None, greedy=False, generator=None)`` -> order [B, T]
    (sampled, with ``generator`` where given, the most likely, or the one given), its log-probabilities [B, T] and entropies [B, T] per pick."""

    def __init__(self, features: int = len(FEATURES), hidden: int = 64, heads: int = 4, layers: int = 2):
        super().__init__()
        self.embed = nn.Linear(features, hidden)
        layer = nn.TransformerEncoderLayer(hidden, heads, 2 * hidden, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.query = nn.Linear(2 * hidden, hidden)
        self.key = nn.Linear(hidden, hidden, bias=False)
        self.first = nn.Parameter(torch.zeros(hidden))  # the "last pick" before the first

    def forward(
        self,
        features: torch.Tensor,
        order: torch.Tensor | None = None,
        greedy: bool = False,
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = self.encoder(self.embed(features))  # [B, T, d]
        keys = self.key(h)
        batch, trains, hidden = h.shape
        mean, last = h.mean(1), self.first.expand(batch, hidden)
        picked = torch.zeros(batch, trains, dtype=torch.bool, device=h.device)
        picks, logps, entropies = [], [], []
        rows = torch.arange(batch, device=h.device)
        for k in range(trains):
            q = self.query(torch.cat([mean, last], -1))  # [B, d]
            logits = 10 * torch.tanh((keys @ q[:, :, None]).squeeze(-1) / math.sqrt(hidden))
            logp = torch.log_softmax(logits.masked_fill(picked, -math.inf), -1)  # [B, T]
            if order is not None:
                pick = order[:, k]
            elif greedy:
                pick = logp.argmax(-1)
            else:
                pick = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(-1)
            picks.append(pick)
            logps.append(logp[rows, pick])
            entropies.append(-(logp.exp() * logp.masked_fill(picked, 0.0)).sum(-1))
            picked = picked.clone()
            picked[rows, pick] = True
            last = h[rows, pick]
        return torch.stack(picks, 1), torch.stack(logps, 1), torch.stack(entropies, 1)


def plan_in_order(track: Track, order, rng: np.random.Generator | None = None, limit: int = 20_000) -> Planner:
    """The planner's plans from step 0 with the trains in ``order`` (no repair; ``rng``: the repair's)."""
    planner = Planner(track, rng or np.random.default_rng(0), limit)
    planner.plan([int(h) for h in order], 0, {})
    return planner


def greedy_order(policy: PriorityPolicy, features: torch.Tensor) -> list[int]:
    """The policy's most likely order of one map's trains, from their ``train_features`` [1, T, F]."""
    with torch.no_grad():
        return policy(features, greedy=True)[0][0].tolist()


def order_reward(planner: Planner) -> float:
    """The share of trains planned to arrive, minus ``DELAY_WEIGHT`` x their mean delay over the step
    limit (a delay: the planned arrival step after the train's arrival alone)."""
    track = planner.track
    delays = [plan.arrival - track.alone_arrival(h) for h, plan in planner.plans.items()]
    delay = float(np.mean(delays)) / track.max_steps if delays else 0.0
    return planner.planned_share - DELAY_WEIGHT * delay


def learned_plans(
    policy: PriorityPolicy, track: Track, allowance: Allowance, rng: np.random.Generator, samples: int = 8
) -> Planner:
    """The planner's plans in the policy's most likely order; while trains stay unplanned, for a quarter
    of ``allowance`` at most, orders drawn from the policy (``samples`` at a time), the best plan kept (as
    ``initial_plans`` restarts random orders); then repaired for the rest of it (the policy's own time
    counted; ``spacetime.best_plans``): ``play_planner``'s ``initial``, with the policy bound."""
    features = torch.as_tensor(train_features(track))[None]

    def orders():  # no_grad around each call only: a generator's context would outlive its yields
        yield greedy_order(policy, features)
        draws = torch.Generator().manual_seed(int(rng.integers(2**31)))
        while True:
            with torch.no_grad():
                sampled = policy(features.expand(samples, -1, -1), generator=draws)[0].tolist()
            yield from sampled

    return best_plans(track, orders(), allowance, rng)


def lead_over(learned: list[dict], fixed: list[dict], seed: int = 0, resamples: int = 10_000) -> dict:
    """The learned order's episodes beside a fixed order's on the same maps (``play_planner``'s dicts, map
    by map): ``arrival_lead``, the mean of the per-map arrival differences, with its 95% paired bootstrap
    interval (``arrival_lead_low``, ``arrival_lead_high``; ``resamples`` draws of the maps, seeded), and
    ``planning_ratio``, the learned order's mean planning seconds over the fixed order's."""
    if not learned or len(learned) != len(fixed):
        raise ValueError(f"the two orders need the same maps, got {len(learned)} and {len(fixed)} episodes")
    diff = np.array([a["arrival_rate"] - b["arrival_rate"] for a, b in zip(learned, fixed, strict=True)])
    draws = np.random.default_rng(seed).integers(len(diff), size=(resamples, len(diff)))
    low, high = np.quantile(diff[draws].mean(1), [0.025, 0.975])
    seconds = [float(np.mean([p["planning_seconds"] for p in played])) for played in (learned, fixed)]
    return {
        "arrival_lead": float(diff.mean()),
        "arrival_lead_low": float(min(low, diff.mean())),
        "arrival_lead_high": float(max(high, diff.mean())),
        "planning_ratio": seconds[0] / seconds[1] if seconds[1] > 0 else float("inf"),
    }


def load_priority_policy(path) -> tuple[PriorityPolicy, dict]:
    """The priority policy of a ``ppo_priorities.py`` checkpoint, in eval mode, and the
    checkpoint; raises ``CheckpointError`` (one line) for anything else."""
    from ppoor.models.checkpoints import CheckpointError, read_checkpoint

    ckpt = read_checkpoint(path)
    if ckpt.get("problem") != "rail-priorities":
        raise CheckpointError(
            f"checkpoint {path} is not a planner priority policy (ppo_priorities.py)"
        )
    try:
        policy = PriorityPolicy(**ckpt["model_config"])
        policy.load_state_dict(ckpt["model"])
    except (RuntimeError, TypeError, ValueError) as exc:
        raise CheckpointError(
            f"checkpoint {path} does not fit the priority policy: {str(exc).splitlines()[0]}"
        ) from exc
    return policy.eval(), ckpt


def map_of(args, seed: int) -> Track:
    """The run's map of ``seed`` (its size, cities and rules), just reset."""
    from ppoor.railway.env import rail_env

    return Track(rail_env(args.width, args.height, args.trains, seed, args.cities, args.flatland3))


def random_seed(rng: np.random.Generator) -> int:
    """A fresh training map's seed (the validation maps' ``trainer.VAL_SEED`` + k and the test maps'
    2,000,000 + k are never drawn: 2,000,001 and up)."""
    return int(rng.integers(2_000_001, 2**31 - 1))


def episode_reward(track: Track, order, step_seconds: float = EPISODE_STEP_SECONDS) -> tuple[float, float]:
    """(reward, arrival rate) of an episode of ``track``'s map (just reset) played by the planner from its
    plans in ``order`` (no repair at step 0), replanned as ``spacetime.play_planner`` replans when a
    malfunction or a slow train breaks them: the reward is the arrival rate plus ``DELAY_WEIGHT`` x
    Flatland's normalized score."""
    played = play_planner(
        track.env, initial=lambda _, __, rng: plan_in_order(track, order, rng), step_seconds=step_seconds
    )
    return played["arrival_rate"] + DELAY_WEIGHT * played["normalized_score"], played["arrival_rate"]


def order_rewards(args, seeds: list[int], tracks: list[Track], orders, rng: np.random.Generator) -> tuple:
    """The rewards [len(orders)] and arrival rates of ``orders`` [M x K, T] (K per map of ``seeds`` in
    turn, ``tracks`` their maps): with --flatland3 each order's episode (``episode_reward``, on the map
    drawn again), else its plan (``order_reward``: the simulator carries a plan out as planned)."""
    per_map, rewards, arrivals = len(orders) // len(seeds), [], []
    for b, order in enumerate(orders.tolist()):
        if args.flatland3:
            reward, arrival = episode_reward(map_of(args, seeds[b // per_map]), order)
        else:
            planner = plan_in_order(tracks[b // per_map], order, rng)
            reward, arrival = order_reward(planner), planner.planned_share
        rewards.append(reward)
        arrivals.append(arrival)
    return torch.tensor(rewards), arrivals


class Validation:
    """The run's validation maps (seeds ``trainer.VAL_SEED`` + k, k < --eval-episodes): the policy's most
    likely order, scored as the training scores orders (``order_rewards``), beside the fixed orders'
    (computed once)."""

    def __init__(self, args):
        from ppoor.railway.trainer import VAL_SEED

        self.args, self.seeds = args, [VAL_SEED + k for k in range(max(1, args.eval_episodes))]
        self.tracks = [map_of(args, seed) for seed in self.seeds]
        self.fixed = {}
        for ordering in ("closest", "longest"):
            orders = torch.tensor([Planner(t, np.random.default_rng(0)).order(ordering, range(t.trains)) for t in self.tracks])
            self.fixed[ordering] = float(np.mean(self.score(orders)[1]))

    def score(self, orders: torch.Tensor) -> tuple:
        return order_rewards(self.args, self.seeds, self.tracks, orders, np.random.default_rng(0))

    def baselines(self) -> str:
        return "validation arrival of fixed orders: " + ", ".join(f"{k} first {v:.3f}" for k, v in self.fixed.items())

    def log(self, run, policy: PriorityPolicy) -> str:
        """Logs eval/arrival_rate and eval/reward of the policy's greedy orders (and the fixed orders'
        arrival) and returns their text."""
        with torch.no_grad():
            features = torch.as_tensor(np.stack([train_features(t) for t in self.tracks]))
            orders, _, _ = policy(features, greedy=True)
        rewards, arrivals = self.score(orders)
        arrival, reward = float(np.mean(arrivals)), rewards.mean().item()
        run.log("eval/arrival_rate", arrival)
        run.log("eval/reward", reward)
        for ordering, value in self.fixed.items():
            run.log(f"eval/{ordering}_first_arrival_rate", value)
        return f" eval/arrival_rate={arrival:.3f} eval/reward={reward:.4f}"


def log_iteration(run, arrivals: list, rewards: torch.Tensor, stats: dict, lr: float, times: tuple) -> str:
    """Logs an iteration's charts (the sampled orders' arrival rates and rewards, ``lr``, the rollout
    and update ``times``) and ``stats`` as losses; returns its line."""
    arrival = float(np.mean(arrivals))
    for tag, value in (
        ("charts/learning_rate", lr), ("charts/arrival_rate", arrival), ("charts/reward", rewards.mean().item()),
        ("charts/rollout_seconds", times[0]), ("charts/update_seconds", times[1]),
        *((f"losses/{name}", value) for name, value in stats.items()),
    ):  # fmt: skip
        run.log(tag, value)
    return (
        f"iteration={run.iteration} orders={run.global_step} arrival={arrival:.3f} reward={rewards.mean():.4f} "
        f"rollout={times[0]:.2f}s update={times[1]:.2f}s"
    )


LIMITS = {
    "seed": (0, MAX_SEED),
    "threads": (0, MAX_THREADS),
    "width": (20, 1_000),
    "height": (20, 1_000),
    "trains": (1, 10_000),
    "cities": (2, 1_000),
    "total_timesteps": (1, math.inf),
    "total_seconds": (1.0, MAX_SECONDS),
    "num_envs": (1, 1_000),
    "orders_per_map": (2, 10_000),
    "learning_rate": (1e-10, 10.0),
    "num_minibatches": (1, math.inf),
    "update_epochs": (1, math.inf),
    "clip_coef": (1e-6, 10.0),
    "ent_coef": (0.0, 10.0),
    "max_grad_norm": (1e-6, 1e6),
    "hidden": (1, 4096),
    "eval_interval": (0, math.inf),
    "eval_episodes": (0, 100_000),
    "checkpoint_interval": (0, math.inf),
}
"""The closed range of every numeric argument of ``ppo_priorities.py`` (``training.runs.check_numbers``)."""


def check_args(args) -> None:
    """Fails early, in one line, on ``ppo_priorities.py`` arguments that cannot work."""
    import sys

    from ppoor.railway.trainer import VAL_SEED

    problems = check_numbers(args, LIMITS)
    if problem := exp_name_problem(args.exp_name):
        problems.append(problem)
    fail(problems)
    try:
        map_of(args, VAL_SEED)
    except ValueError as exc:
        sys.exit(f"error: {exc}")


def resolve_args(args, given: set[str] | None = None) -> tuple:
    """``ppo_priorities.py``'s settings it can trust and the checkpoint resumed from (``trainer.resolve_args``)."""
    from ppoor.railway import trainer

    return trainer.resolve_args(args, given, "ppo_priorities.py", check_args)


def training_state(policy: PriorityPolicy, optimizer, rng: np.random.Generator, args) -> dict:
    """A checkpoint of ``ppo_priorities.py``: the policy, the optimizer, the settings and the
    random states."""
    from dataclasses import asdict

    return {
        "problem": "rail-priorities",
        "num_nodes": args.trains,
        "model_config": {"hidden": args.hidden},
        "model": policy.state_dict(),
        "optimizer": optimizer.state_dict(),
        "args": asdict(args),
        "rng": {"torch": torch.get_rng_state(), "numpy": rng.bit_generator.state},
    }


def restore(ckpt: dict, policy: PriorityPolicy, optimizer, rng: np.random.Generator) -> None:
    """Puts a resumed run's policy, optimizer and random states back."""
    policy.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    torch.set_rng_state(ckpt["rng"]["torch"])
    rng.bit_generator.state = ckpt["rng"]["numpy"]
