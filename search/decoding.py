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

import time
from dataclasses import dataclass

import numpy as np
import torch
from ppoor.checkers.tours import COSTS, InvalidTourError, tour_length, validate_tour
from ppoor.envs import VECTOR_ENVS, instance_kwargs, start_count
from ppoor.models.agent import Agent, sample
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


def forced_actions(mask: np.ndarray) -> np.ndarray | None:
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
        elif (forced := forced_actions(mask)) is not None:
            action = forced
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
        elif (forced := forced_actions(mask)) is not None:
            action = forced
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
    agent: Agent,
    instances: dict,
    decode: str = "greedy",
    num_starts: int | None = None,
    num_samples: int = 16,
    augment_copies: int = 1,
    batch_size: int = 1000,
    seed: int = 0,
    reencode: bool = False,
    progress=None,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    beam_width: int = 4,
) -> DecodeResult:
    """Decodes every instance (static arrays [B, ...], unit square) and keeps its best solution.

    ``num_starts`` (multi-greedy, multi-sampling and multi-beam; default: every start node),
    ``num_samples`` (sampling) and ``beam_width`` (beam, multi-beam) set the trajectories per instance; ``temperature``, ``top_k``, ``top_p`` shape the
    sampled steps (``filter_logits``); ``augment_copies`` the symmetries (1 or up to 8). ``batch_size`` is
    the most instances rolled out at once; on a CPU the rollouts are also capped at CPU_MAX_ROWS
    instances x copies and CPU_MAX_QUERIES trajectories, which keeps them in cache (1.1-1.4x faster
    than one large rollout). Each best tour is validated and its length recomputed independently of
    the environment. ``progress`` is called
    with the number of instances done after each batch.
    """
    problem = agent.problem
    num_instances, num_nodes = instances["coords"].shape[:2]
    starts = start_count(problem, num_nodes, **instance_kwargs(problem, instances))  # distinct first actions
    if decode not in DECODES:
        raise ValueError(f"decode must be one of {DECODES}, got {decode!r}")
    if decode in MULTI_START:
        num_starts = starts if num_starts is None else num_starts
        if not 1 <= num_starts <= starts:
            raise ValueError(
                f"num_starts must be between 1 and {starts} (the start nodes of a {problem} instance), got {num_starts}"
            )
    if decode == "sampling" and num_samples < 1:
        raise ValueError(f"num_samples must be at least 1, got {num_samples}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    if isinstance(beam_width, bool) or not isinstance(beam_width, int | np.integer) or beam_width < 1:
        raise ValueError(f"beam_width must be a whole number of at least 1, got {beam_width!r}")
    if not (np.isfinite(temperature) and 1e-3 <= temperature <= 100):
        raise ValueError(f"temperature must be in 0.001..100, got {temperature}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int | np.integer) or top_k < 1):
        raise ValueError(f"top_k must be a whole number of at least 1, got {top_k!r}")
    if top_p is not None and not (np.isfinite(top_p) and 0 < top_p <= 1):
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    n_traj = trajectories(decode, num_starts, num_samples, beam_width)
    generator = torch.Generator(device=next(agent.parameters()).device).manual_seed(seed)
    lengths, tours = np.empty(num_instances), []
    start = time.perf_counter()
    if next(agent.parameters()).device.type == "cpu":  # smaller rollouts run faster there (a GPU wants them large)
        rows = CPU_MAX_ROWS // augment_copies
        batch_size = max(1, min(batch_size, rows, CPU_MAX_QUERIES // (augment_copies * n_traj)))
    for lo in range(0, num_instances, batch_size):
        batch = {key: value[lo : lo + batch_size] for key, value in instances.items()}
        size = batch["coords"].shape[0]
        if decode in BEAM:
            actions, traj_lengths, steps = beam_rollout(
                agent, augment(batch, augment_copies), beam_width, num_starts if decode in MULTI_START else None
            )
        else:
            actions, traj_lengths, steps = rollout(
                agent,
                augment(batch, augment_copies),
                n_traj,
                greedy=decode not in SAMPLED,
                num_starts=num_starts if decode in MULTI_START else None,
                reencode=reencode,
                generator=generator,
                sampling={"temperature": temperature, "top_k": top_k, "top_p": top_p},
            )
        per_instance = traj_lengths.reshape(augment_copies, size, n_traj).transpose(1, 0, 2).reshape(size, -1)
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
    seconds = time.perf_counter() - start
    check_solutions(problem, instances, tours, lengths)
    return DecodeResult(lengths=lengths, tours=tours, seconds=seconds)


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
