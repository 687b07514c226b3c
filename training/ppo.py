"""PPO's clipped objective, shared by every trainer (routing, railway decisions, railway priorities), and
generalized advantage estimation.

The loss over the decisions of a minibatch: the clipped surrogate, the value loss (clipped or not)
where there is a critic, and the entropy bonus, with the diagnostics CleanRL logs (approx-KL in its
two estimators, http://joschu.net/blog/kl-approx.html, and the clip fraction).

Means run over the decisions that count (``mask``) and divide by ``count``. Under data parallelism
``count`` is this process's share of every process's decisions (their total / world size), so that the
averaged gradients are those of the global mean; the diagnostics are then summed over the processes.
"""

from __future__ import annotations

import numpy as np
import torch
from ppoor.training import parallel


def gae(rewards: torch.Tensor, values: torch.Tensor, dones: torch.Tensor, next_value: torch.Tensor, gamma: float,
        lam: float) -> torch.Tensor:  # fmt: skip
    """Generalized advantage estimation over a rollout: rewards, values, dones [T, M, N] (dones[t]:
    the trajectory terminated at step t), next_value [M, N] (the critic after the last step).
    Unfinished episodes are bootstrapped with next_value, not treated as terminal."""
    advantages = torch.zeros_like(rewards)
    lastgaelam = torch.zeros_like(next_value)
    for t in reversed(range(len(rewards))):
        nextvalues = next_value if t == len(rewards) - 1 else values[t + 1]
        nextnonterminal = (~dones[t]).float()
        delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
        lastgaelam = delta + gamma * lam * nextnonterminal * lastgaelam
        advantages[t] = lastgaelam
    return advantages


def gae_over_decisions(rewards, values, deciding, finished_after, last_values, gamma, lam) -> np.ndarray:
    """GAE over each agent's own decisions, for T agents that decide at different steps (the railway's
    trains) in B episodes of S steps. rewards, values [S, B, T] (rewards earned after each decision until
    the agent's next one), deciding [S, B, T] bool, finished_after [S, B, T] bool (the agent's episode
    ended before its next decision: no bootstrap), last_values [B, T] (the critic at the end, for agents
    cut off by the step limit) -> advantages [S, B, T] (0 where no decision)."""
    advantages = np.zeros_like(rewards)
    steps, envs, trains = rewards.shape
    for b in range(envs):
        for t in range(trains):
            idx = np.flatnonzero(deciding[:, b, t])
            next_value, running = last_values[b, t], 0.0
            for k in reversed(idx):
                bootstrap = 0.0 if finished_after[k, b, t] else next_value
                delta = rewards[k, b, t] + gamma * bootstrap - values[k, b, t]
                running = delta + (0.0 if finished_after[k, b, t] else gamma * lam * running)
                advantages[k, b, t] = running
                next_value = values[k, b, t]
    return advantages


def ppo_loss(
    newlogprob: torch.Tensor, logprob: torch.Tensor, advantages: torch.Tensor, entropy: torch.Tensor, *,
    clip_coef: float, ent_coef: float, mask: torch.Tensor | None = None, count: torch.Tensor | float | None = None,
    weights: torch.Tensor | None = None, value: tuple | None = None, vf_coef: float = 0.5, clip_vloss: bool = True,
) -> tuple[torch.Tensor, dict]:  # fmt: skip
    """PPO's loss and its statistics over decisions of any shape [...]: ``newlogprob`` (with gradients),
    ``logprob`` (the rollout's), ``advantages`` (normalised as the caller wishes) and ``entropy``, all [...].
    ``mask`` [...] (1 where a decision counts; None: all), ``count`` (the denominator of the means; None:
    the mask's sum), ``weights`` [...] (scales each decision's surrogate), ``value``: (new value with
    gradients, the rollout's value, the returns), each [...], or None without a critic.
    Returns (loss, {policy_loss, entropy, value_loss, old_approx_kl, approx_kl, clipfrac})."""
    mask = torch.ones_like(newlogprob) if mask is None else mask.to(newlogprob.dtype)
    count = mask.sum().clamp(min=1) if count is None else count
    world = parallel.world_size()

    def mean(x: torch.Tensor) -> torch.Tensor:
        return (x * mask).sum() / count

    def global_mean(x: torch.Tensor) -> float:
        return (parallel.all_sum((x.detach() * mask).sum()) / (count * world)).item()

    logratio = newlogprob - logprob
    ratio = logratio.exp()
    surrogate = torch.max(-advantages * ratio, -advantages * torch.clamp(ratio, 1 - clip_coef, 1 + clip_coef))
    pg_loss = mean(surrogate if weights is None else surrogate * weights)
    entropy_loss = mean(entropy)
    loss = pg_loss - ent_coef * entropy_loss
    stats = {"policy_loss": pg_loss.item() / world, "entropy": entropy_loss.item() / world}
    if value is not None:
        newvalue, oldvalue, returns = value
        v_loss = (newvalue - returns) ** 2
        if clip_vloss:
            v_clipped = oldvalue + torch.clamp(newvalue - oldvalue, -clip_coef, clip_coef)
            v_loss = torch.max(v_loss, (v_clipped - returns) ** 2)
        v_loss = 0.5 * mean(v_loss)
        loss = loss + vf_coef * v_loss
        stats["value_loss"] = v_loss.item() / world
    stats["old_approx_kl"] = global_mean(-logratio)
    stats["approx_kl"] = global_mean((ratio - 1) - logratio)
    stats["clipfrac"] = global_mean(((ratio - 1.0).abs() > clip_coef).float())
    return loss, stats


def approx_kl(newlogprob: torch.Tensor, logprob: torch.Tensor, mask: torch.Tensor | None = None) -> float:
    """The mean of (ratio - 1) - log ratio over the decisions of ``mask`` [...] (all when None), summed
    over the processes: the KL of the rollout's policy from the current one."""
    mask = torch.ones_like(newlogprob) if mask is None else mask.to(newlogprob.dtype)
    logratio = (newlogprob - logprob).detach()
    total = parallel.all_sum(((logratio.exp() - 1 - logratio) * mask).sum())
    return (total / parallel.all_sum(mask.sum()).clamp(min=1)).item()
