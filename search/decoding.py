"""Decoding strategies over the bi-level env, with the cached encoder and parallel trajectories.

- greedy: one trajectory per instance, the most probable action at every step (the first node
  included).
- multi-greedy (POMO-style): K greedy trajectories per instance, trajectory i forced to start at
  the i-th most probable first node; K = every start node by default (the env's ``start_actions``:
  TSP all nodes; CVRP, VRP, MRCVRP and the prize-collecting problems all customers; PDP the pickups;
  MDVRP the customers and the other depots), which is "trajectory i starts at node i" up to order; a
  start the mask forbids repeats the first allowed action.
- sampling: K trajectories sampled from the policy, optionally sharpened or truncated
  (``temperature``, ``top_k``, ``top_p``: ``filter_logits``).
- multi-sampling (POMO-style starts, then sampling): K trajectories per instance, trajectory i forced
  to start at the i-th start node as in multi-greedy, every later step sampled.
- beam: beam search of width W per instance: at every step each of the W partial solutions of
  highest summed log-probability is extended by every allowed action and the W best of the
  extensions are kept (the first step is searched too).
- multi-beam: one beam of width W per start node (K x W trajectories; K = every start node by
  default, or the K most probable), each beam forced to its start.
Each can run on the 8 symmetries of the unit square (``augment=8``). The best trajectory of an
instance is kept. Every rollout runs until every trajectory has finished.
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from ppoor.checkers.tours import COSTS, InvalidTourError, tour_length, validate_tour
from ppoor.envs import VECTOR_ENVS, instance_kwargs, start_count
from ppoor.models.agent import Agent, sample
from ppoor.models.attention_model import check_prior
from ppoor.models.state import StateWrapper

DECODES = ("greedy", "multi-greedy", "sampling", "multi-sampling", "beam", "multi-beam")
MULTI_START = ("multi-greedy", "multi-sampling", "multi-beam")
SAMPLED = ("sampling", "multi-sampling")
BEAM = ("beam", "multi-beam")


def trajectories(decode: str, num_starts: int, num_samples: int, beam_width: int = 1) -> int:
    """Trajectories per instance copy of a decode: one (greedy), one per start (multi-greedy,
    multi-sampling), ``num_samples`` (sampling), ``beam_width`` (beam) or ``beam_width`` per start
    (multi-beam)."""
    count = num_starts if decode in MULTI_START else num_samples if decode in SAMPLED else 1
    return count * beam_width if decode in BEAM else count


def whole(value, low: int) -> bool:
    """Whether ``value`` is a whole number (not a bool) of at least ``low``."""
    return not isinstance(value, bool) and isinstance(value, int | np.integer) and value >= low


@dataclass(frozen=True)
class Decoding:
    """How a trained policy decodes (the strategies of the module's docstring), passed whole to
    ``decode`` and ``Model.solve``; ``Decoding("multi-greedy", augment=8)``.

    ``strategy``: one of ``DECODES``; ``augment``: 1 or 8 symmetries of the unit square (the best kept);
    ``num_starts``: the start nodes of the multi- strategies (None: every one); ``num_samples``: sampling's
    trajectories per instance; ``beam_width``: the partial solutions a beam keeps; ``temperature``,
    ``top_k``, ``top_p``: the sampled steps' shaping (``filter_logits``); ``seed``: the sampling's seed;
    ``batch_size``: the most instances decoded at once; ``distance_prior``: beta of the decoder's prior
    toward near nodes for this decoding (None: the model's own)."""

    strategy: str = "greedy"
    augment: int = 1
    num_starts: int | None = None
    num_samples: int = 16
    beam_width: int = 4
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int = 0
    batch_size: int = 256
    distance_prior: float | None = None

    def __post_init__(self):
        """Refuses a setting that cannot decode, in one line naming it (ValueError)."""
        checks = (
            (self.strategy in DECODES, f"decode must be one of {', '.join(DECODES)}, got {self.strategy!r}"),
            (self.augment in (1, SYMMETRIES) and not isinstance(self.augment, bool),
             f"--augment must be 1 or 8 (all the symmetries of the square), got {self.augment!r}"),
            (self.num_starts is None or whole(self.num_starts, 1),
             f"num_starts must be a whole number of at least 1, got {self.num_starts!r}"),
            (whole(self.num_samples, 1), f"num_samples must be a whole number of at least 1, got {self.num_samples!r}"),
            (whole(self.beam_width, 1), f"beam_width must be a whole number of at least 1, got {self.beam_width!r}"),
            (finite(self.temperature) and 1e-3 <= self.temperature <= 100,
             f"temperature must be in 0.001..100, got {self.temperature!r}"),
            (self.top_k is None or whole(self.top_k, 1), f"top_k must be a whole number of at least 1, got {self.top_k!r}"),
            (self.top_p is None or (finite(self.top_p) and 0 < self.top_p <= 1), f"top_p must be in (0, 1], got {self.top_p!r}"),
            (whole(self.seed, 0), f"seed must be a whole number of at least 0, got {self.seed!r}"),
            (whole(self.batch_size, 1), f"batch_size must be a whole number of at least 1, got {self.batch_size!r}"),
        )  # fmt: skip
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        if self.distance_prior is not None:
            check_prior(self.distance_prior)

    def label(self) -> str:
        """How a table names it: ``multi-sampling T=0.5,k=3 x8 aug``, ``beam W=4``."""
        controls = [f"T={self.temperature:g}"] if self.temperature != 1.0 else []
        controls += [f"k={self.top_k}"] if self.top_k is not None else []
        controls += [f"p={self.top_p:g}"] if self.top_p is not None else []
        text = self.strategy + (f" {','.join(controls)}" if self.strategy in SAMPLED and controls else "")
        text += f" W={self.beam_width}" if self.strategy in BEAM else ""
        return text + (f" x{self.augment} aug" if self.augment > 1 else "")


def finite(value) -> bool:
    """Whether ``value`` is a finite real number (not a bool)."""
    return not isinstance(value, bool) and isinstance(value, int | float | np.number) and math.isfinite(value)


SYMMETRIES = 8
CPU_MAX_ROWS = 256  # on a CPU, instances x symmetric copies per rollout: the encoder's work stays in cache
CPU_MAX_QUERIES = 4096  # on a CPU, rows x trajectories per decode step (measured best, TSP50, 1 thread)


@dataclass
class DecodeResult:
    """Best solution per instance: ``lengths`` [B] (unit-square Euclidean), ``tours`` (B arrays of
    actions: TSP the n nodes in visiting order, CVRP and VRP the actions after the depot start, ending
    at the depot) and ``seconds`` spent decoding."""

    lengths: np.ndarray
    tours: list
    seconds: float


def augment(instances: dict, copies: int) -> dict:
    """The first ``copies`` (1..8) symmetries of the unit square applied to every instance: arrays
    [copies * B, ...], symmetry-major (copy k of instance b at index k * B + b)."""
    if not 1 <= copies <= SYMMETRIES:
        raise ValueError(f"augment must be between 1 and {SYMMETRIES}, got {copies}")

    def transforms(xy: np.ndarray) -> list:
        x, y = xy[..., :1], xy[..., 1:]
        variants = [(x, y), (y, x), (1 - x, y), (1 - y, x), (x, 1 - y), (y, 1 - x), (1 - x, 1 - y), (1 - y, 1 - x)]
        return [np.concatenate(v, axis=-1) for v in variants[:copies]]

    points = ("coords", "depot", "depots")
    out = {key: np.concatenate(transforms(instances[key])) for key in points if key in instances}
    for key, value in instances.items():  # demands, windows, ...: distances are kept, so they repeat
        if key not in points:
            out[key] = np.concatenate([value] * copies)
    return out


def only_actions(mask: np.ndarray) -> np.ndarray | None:
    """The actions [M, N] of a step where every trajectory has a single allowed action (mask
    [M, N, A]; TSP's last two steps), else None. One trajectory is tested first, which is cheap."""
    if mask[0, 0].sum() == 1 and (mask.sum(-1) == 1).all():
        return mask.argmax(-1)
    return None


def allowed_starts(actions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Forced first actions [M, N], each replaced by the first allowed action where the mask [M, N, A]
    forbids it (an orienteering customer too far for a tour of its own, or fewer allowed start nodes
    than trajectories): such a trajectory repeats another start. On the tensors' device, without a
    sync (ppo_or.py's multi-start rollouts use it too)."""
    allowed = mask.gather(-1, actions[..., None]).squeeze(-1)
    return torch.where(allowed, actions, mask.to(torch.uint8).argmax(-1))


def filter_logits(
    logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None
) -> torch.Tensor:
    """The logits [B, N, A] a sampled step draws from: divided by ``temperature`` (below 1 sharper,
    above flatter), then only the ``top_k`` most probable actions kept, then only the smallest set of
    most probable actions whose probability reaches ``top_p`` (nucleus sampling; the most probable
    action always stays). Removed actions get -inf, as infeasible ones have."""
    if temperature != 1.0:
        logits = logits / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        ordered, order = logits.sort(dim=-1, descending=True)
        before = ordered.softmax(-1).cumsum(-1) - ordered.softmax(-1)  # probability of the better actions
        drop = torch.zeros_like(before, dtype=torch.bool).scatter(-1, order, before >= top_p)  # unsorted
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def open_env(agent: Agent, instances: dict, n_traj: int) -> tuple:
    """The problem's vector env on ``instances`` (static arrays [M, ...]) with ``n_traj``
    trajectories each, reset: (env, first observation, the state wrapper on the agent's device, the
    static tensors)."""
    problem = agent.problem
    num_envs, num_nodes = instances["coords"].shape[:2]
    env = VECTOR_ENVS[problem](
        num_envs=num_envs, num_nodes=num_nodes, n_traj=n_traj, **instance_kwargs(problem, instances)
    )
    obs, _ = env.reset(options=instances)
    wrapper = StateWrapper(problem, next(agent.parameters()).device)
    return env, obs, wrapper, wrapper.static(obs)


@torch.no_grad()
def rollout(
    agent: Agent,
    instances: dict,
    n_traj: int,
    greedy: bool = True,
    num_starts: int | None = None,
    reencode: bool = False,
    generator: torch.Generator | None = None,
    sampling: dict | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Runs M instances x ``n_traj`` trajectories until all have terminated.

    ``num_starts`` = ``n_traj`` forces the first actions: with every start node (``start_actions``),
    trajectory i starts at start node i (TSP node i, CVRP customer i + 1); with fewer, at the i-th most
    probable start node (a forbidden start: the first allowed action). A step where every trajectory has a single allowed action (TSP's return) is taken
    without the model. ``reencode`` re-runs the encoder at every step (the uncached baseline).
    ``sampling``: ``filter_logits``'s temperature, top_k and top_p for the sampled steps.
    Returns actions [M, N, T], lengths [M, N] (minus the summed rewards: the costs) and the number of steps of
    each trajectory [M, N].
    """
    problem, num_envs = agent.problem, instances["coords"].shape[0]
    env, obs, wrapper, static = open_env(agent, instances, n_traj)
    cache = None if reencode else agent.encode(static)
    actions, lengths = [], np.zeros((num_envs, n_traj))
    steps = np.zeros((num_envs, n_traj), dtype=np.int64)
    while not env.terminated.all():
        if len(actions) >= env.max_episode_steps:
            raise RuntimeError(f"{problem} rollout did not finish within {env.max_episode_steps} steps")
        mask = obs["action_mask"]
        if num_starts == len(env.start_actions) and not actions:
            starts = torch.as_tensor(env.start_actions).expand(num_envs, n_traj)
            action = allowed_starts(starts, torch.from_numpy(mask)).numpy()
        elif (only := only_actions(mask)) is not None:
            action = only
        else:
            state = wrapper.state(static, obs)
            logits, _ = agent(agent.encode(static) if reencode else cache, state, with_value=False)
            if num_starts is not None and not actions:
                action = allowed_starts(logits[:, 0].topk(num_starts, dim=-1).indices, state["action_mask"])
            elif greedy:
                action = logits.argmax(-1)
            else:
                action = sample(torch.log_softmax(filter_logits(logits, **(sampling or {})), -1), generator)
            action = wrapper.numpy(action)
        steps += ~env.terminated
        obs, reward, _, _, _ = env.step(action)
        lengths -= reward
        actions.append(env.last_node)
    return np.stack(actions, axis=-1), lengths, steps


@torch.no_grad()
def beam_rollout(
    agent: Agent, instances: dict, width: int, num_starts: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Beam search on M instances: ``num_starts`` beams per instance (None: one beam, whose first
    step is searched like the others; every start node: beam s starts at start node s; fewer: at
    the s-th most probable start node), each keeping the ``width`` partial solutions of highest
    summed log-probability. The N = beams x width trajectories live in one env of N trajectories
    (trajectory s * width + w is slot w of beam s): at every step each slot's allowed actions are
    scored, the ``width`` best (slot, action) pairs of each beam are kept, the env copies the chosen
    slots (``select``) and steps them. Until a beam has ``width`` distinct candidates its other
    slots are copies of its best one at score -inf (never preferred to a real candidate); a
    finished solution competes on with its final score (its only allowed action costs nothing).
    A step where every trajectory has a single allowed action is taken without the model.
    Returns, as ``rollout`` does, actions [M, N, T], lengths [M, N] and steps [M, N]."""
    problem, num_envs = agent.problem, instances["coords"].shape[0]
    device = next(agent.parameters()).device
    beams = num_starts or 1
    n_traj = beams * width
    env, obs, wrapper, static = open_env(agent, instances, n_traj)
    cache = agent.encode(static)
    score = torch.full((num_envs, beams, width), float("-inf"), device=device)
    score[..., 0] = 0.0  # the slots of a beam are copies until its first choice
    slot_base = (torch.arange(beams, device=device) * width)[:, None]  # [beams, 1]
    visited, chosen = [], []  # per step: the node each trajectory moved to, and the slots it was copied from
    lengths = np.zeros((num_envs, n_traj))
    steps = np.zeros((num_envs, n_traj), dtype=np.int64)
    while not env.terminated.all():
        if len(visited) >= env.max_episode_steps:
            raise RuntimeError(f"{problem} beam search did not finish within {env.max_episode_steps} steps")
        mask = obs["action_mask"]
        first, parents = not visited, None
        if first and num_starts == len(env.start_actions):
            starts = torch.as_tensor(env.start_actions).repeat_interleave(width).expand(num_envs, n_traj)
            action = allowed_starts(starts, torch.from_numpy(mask)).numpy()
        elif (only := only_actions(mask)) is not None:
            action = only
        else:
            state = wrapper.state(static, obs)
            logits, _ = agent(cache, state, with_value=False)
            logp = torch.log_softmax(logits, -1)  # [M, N, A]
            if first and num_starts is not None:  # beam s starts at the s-th most probable start
                starts = logp[:, 0].topk(beams, dim=-1).indices.repeat_interleave(width, dim=1)
                action = wrapper.numpy(allowed_starts(starts, state["action_mask"]))
            else:
                a = logp.shape[-1]
                extended = (score[..., None] + logp.view(num_envs, beams, width, a)).view(num_envs, beams, -1)
                best = extended.topk(width, dim=-1)  # [M, beams, width], best first
                slot, choice = best.indices // a, best.indices % a
                empty = torch.isinf(best.values)  # fewer candidates than slots: copy the best one
                slot = torch.where(empty, slot[..., :1], slot)
                choice = torch.where(empty, choice[..., :1], choice)
                score = best.values
                parents = wrapper.numpy((slot_base + slot).view(num_envs, n_traj))
                env.select(parents)
                lengths = np.take_along_axis(lengths, parents, axis=1)
                steps = np.take_along_axis(steps, parents, axis=1)
                action = wrapper.numpy(choice.view(num_envs, n_traj))
        steps += ~env.terminated
        obs, reward, _, _, _ = env.step(action)
        lengths -= reward
        visited.append(env.last_node.copy())
        chosen.append(parents)
    # each final trajectory's actions, traced back through the slots it was copied from
    actions = np.empty((num_envs, n_traj, len(visited)), dtype=np.int64)
    rows, trace = np.arange(num_envs)[:, None], np.broadcast_to(np.arange(n_traj), (num_envs, n_traj))
    for t in range(len(visited) - 1, -1, -1):
        actions[..., t] = visited[t][rows, trace]
        if chosen[t] is not None:
            trace = chosen[t][rows, trace]
    return actions, lengths, steps


def decode(
    agent: Agent, instances: dict, decoding: Decoding | str = "greedy", progress=None, reencode: bool = False
) -> DecodeResult:
    """Decodes every instance (static arrays [B, ...], unit square) as ``decoding`` says (a ``Decoding``,
    or a strategy's name with the defaults) and keeps its best solution.

    On a CPU the rollouts are also capped at CPU_MAX_ROWS instances x copies and CPU_MAX_QUERIES
    trajectories, which keeps them in cache (1.1-1.4x faster than one large rollout). Each best tour is
    validated and its length recomputed independently of the environment. ``progress`` is called with
    the number of instances done after each batch. ``reencode`` re-runs the encoder at every step (the
    uncached baseline of ``bench/``; the same solutions).
    """
    decoding = Decoding(decoding) if isinstance(decoding, str) else decoding
    problem = agent.problem
    num_instances, num_nodes = instances["coords"].shape[:2]
    starts = start_count(problem, num_nodes, **instance_kwargs(problem, instances))  # distinct first actions
    strategy, num_starts = decoding.strategy, None
    if strategy in MULTI_START:
        num_starts = starts if decoding.num_starts is None else decoding.num_starts
        if not 1 <= num_starts <= starts:
            raise ValueError(
                f"num_starts must be between 1 and {starts} (the start nodes of a {problem} instance), got {num_starts}"
            )
    n_traj = trajectories(strategy, num_starts, decoding.num_samples, decoding.beam_width)
    lengths, tours = np.empty(num_instances), []
    start = time.perf_counter()
    with prior(agent, decoding.distance_prior):
        decode_batches(agent, instances, decoding, num_starts, n_traj, tours, lengths, progress, reencode)
    seconds = time.perf_counter() - start
    check_solutions(problem, instances, tours, lengths)
    return DecodeResult(lengths=lengths, tours=tours, seconds=seconds)


@contextmanager
def prior(agent: Agent, beta: float | None):
    """``agent`` decodes with the distance prior ``beta`` inside the block (None: its own), its own after it."""
    own = agent.distance_prior
    agent.distance_prior = own if beta is None else float(beta)
    try:
        yield agent
    finally:
        agent.distance_prior = own


def decode_batches(
    agent: Agent, instances: dict, decoding: Decoding, num_starts: int | None, n_traj: int, tours: list,
    lengths: np.ndarray, progress, reencode: bool,
) -> None:  # fmt: skip
    """``decode``'s batches: appends each instance's best tour to ``tours`` and writes its length into
    ``lengths`` [B]."""
    problem, strategy, copies = agent.problem, decoding.strategy, decoding.augment
    num_instances, num_nodes = instances["coords"].shape[:2]
    generator = torch.Generator(device=next(agent.parameters()).device).manual_seed(decoding.seed)
    sampling = {"temperature": decoding.temperature, "top_k": decoding.top_k, "top_p": decoding.top_p}
    batch_size = decoding.batch_size
    if next(agent.parameters()).device.type == "cpu":  # smaller rollouts run faster there (a GPU wants them large)
        rows = CPU_MAX_ROWS // copies
        batch_size = max(1, min(batch_size, rows, CPU_MAX_QUERIES // (copies * n_traj)))
    for lo in range(0, num_instances, batch_size):
        batch = {key: value[lo : lo + batch_size] for key, value in instances.items()}
        size = batch["coords"].shape[0]
        if strategy in BEAM:
            actions, traj_lengths, steps = beam_rollout(agent, augment(batch, copies), decoding.beam_width, num_starts)
        else:
            actions, traj_lengths, steps = rollout(
                agent, augment(batch, copies), n_traj, greedy=strategy not in SAMPLED, num_starts=num_starts,
                reencode=reencode, generator=generator, sampling=sampling,
            )  # fmt: skip
        per_instance = traj_lengths.reshape(copies, size, n_traj).transpose(1, 0, 2).reshape(size, -1)
        best = per_instance.argmin(1)
        copy, traj = np.divmod(best, n_traj)
        rows = copy * size + np.arange(size)
        for b in range(size):
            row, j = rows[b], traj[b]
            tour = actions[row, j, : steps[row, j]]
            tours.append(tour[:num_nodes] if problem == "tsp" else tour)
        lengths[lo : lo + size] = per_instance[np.arange(size), best]
        if progress is not None:
            progress(size)


def check_solutions(problem: str, instances: dict, tours: list, lengths: np.ndarray) -> None:
    """Validates every tour and checks its independently computed length against ``lengths``."""
    num_nodes = instances["coords"].shape[1]
    for b, tour in enumerate(tours):
        if problem == "tsp":
            validate_tour(problem, tour, num_nodes)
            length = tour_length(instances["coords"][b], tour, closed=True)
        elif problem in COSTS:
            length = COSTS[problem]({key: value[b] for key, value in instances.items()}, tour)
        else:
            validate_tour(problem, tour, num_nodes, instances["demand"][b])
            points = np.concatenate([instances["depot"][b][None], instances["coords"][b]])
            length = tour_length(points, np.concatenate([[0], tour]), closed=False)
        if abs(length - lengths[b]) > 1e-6 * max(1.0, length):
            raise InvalidTourError(f"instance {b}: decoded length {lengths[b]} differs from the tour's length {length}")
