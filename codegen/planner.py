"""RLEA's planner: a soft Q-network over (problem, code) embeddings, its Boltzmann policy, the
soft Bellman target against a target network, and the replay buffer.

    pi(a | s) = softmax(Q(s, .) / alpha)
    V(s')     = alpha * logsumexp(Q_target(s', .) / alpha)
    y         = r + gamma * (1 - d) * V(s')
    loss      = mean (Q(s, a) - y)^2 over a batch of the buffer
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

ACTIONS = ("refine", "rag", "mlem")


class SoftQNetwork(nn.Module):
    """Q(s, a) for the three actions: states [B, state_dim] -> [B, 3]."""

    def __init__(self, state_dim: int, hidden: int = 128):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(state_dim, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, len(ACTIONS)),
        )

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        return self.net(states)


def soft_value(q: torch.Tensor, alpha: float) -> torch.Tensor:
    """alpha * logsumexp(q / alpha) over the last axis: [B, A] -> [B]."""
    return alpha * torch.logsumexp(q / alpha, dim=-1)


def boltzmann(q: torch.Tensor, alpha: float, allowed: torch.Tensor | None = None) -> torch.Tensor:
    """pi(a|s) proportional to exp(Q(s, a) / alpha): [B, A] -> [B, A]; actions not ``allowed``
    (a bool mask [A], e.g. no RAG in an ablation) get probability 0."""
    logits = q / alpha
    if allowed is not None:
        logits = logits.masked_fill(~allowed, float("-inf"))
    return torch.softmax(logits, dim=-1)


def sample_action(
    q_net: nn.Module, state: np.ndarray, alpha: float, rng: np.random.Generator, allowed: torch.Tensor | None = None
) -> int:
    """An action drawn from the Boltzmann policy of ``q_net`` at one state [state_dim]."""
    with torch.no_grad():
        p = boltzmann(q_net(torch.from_numpy(state)[None]), alpha, allowed)[0].double().numpy()
    return int(rng.choice(len(p), p=p / p.sum()))


def soft_target(
    rewards: torch.Tensor, dones: torch.Tensor, next_q_target: torch.Tensor, alpha: float, gamma: float
) -> torch.Tensor:
    """The soft Bellman target y = r + gamma (1 - d) alpha logsumexp(Q_target(s', .) / alpha): [B]."""
    return rewards + gamma * (1.0 - dones) * soft_value(next_q_target, alpha)


def soft_q_update(q_net, target_net, optimizer, batch: dict, alpha: float, gamma: float, max_grad_norm: float) -> float:
    """One gradient step on the soft Bellman residual of ``batch`` (tensors states [B, D],
    actions [B], rewards [B], next_states [B, D], dones [B]); returns the loss."""
    with torch.no_grad():
        y = soft_target(batch["rewards"], batch["dones"], target_net(batch["next_states"]), alpha, gamma)
    q = q_net(batch["states"]).gather(1, batch["actions"][:, None]).squeeze(1)
    loss = torch.mean((q - y) ** 2)
    optimizer.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(q_net.parameters(), max_grad_norm)
    optimizer.step()
    return float(loss.detach())


def alpha_at(step: int, start: float, end: float, decay_steps: int) -> float:
    """The temperature, decayed linearly from ``start`` (memory sparse: explore) to ``end``."""
    if step >= decay_steps:
        return end
    return start + (end - start) * step / decay_steps


def read_checkpoint(path: str) -> dict:
    """An rlea.py checkpoint (rlea.pt or planner.pt), read weights-only; ValueError with one line
    when the file is missing, unreadable or of another script."""
    import os

    if not os.path.isfile(path):
        raise ValueError(f"{path} does not exist")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many kinds for corrupt or foreign files
        raise ValueError(f"{path} cannot be read ({type(exc).__name__})") from None
    if not isinstance(ckpt, dict) or ckpt.get("script") != "rlea.py":
        raise ValueError(f"{path} is not an rlea.py checkpoint")
    return ckpt


class ReplayBuffer:
    """Transitions (s, a, r, s', d) in a ring of ``capacity``; states are float32 [state_dim]."""

    def __init__(self, capacity: int, state_dim: int):
        self.states = np.zeros((capacity, state_dim), dtype=np.float32)
        self.next_states = np.zeros((capacity, state_dim), dtype=np.float32)
        self.actions = np.zeros(capacity, dtype=np.int64)
        self.rewards = np.zeros(capacity, dtype=np.float32)
        self.dones = np.zeros(capacity, dtype=np.float32)
        self.capacity, self.size, self.position = capacity, 0, 0

    def add(self, state, action: int, reward: float, next_state, done: bool) -> None:
        i = self.position
        self.states[i], self.actions[i], self.rewards[i] = state, action, reward
        self.next_states[i], self.dones[i] = next_state, float(done)
        self.position = (i + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def sample(self, batch_size: int, rng: np.random.Generator) -> dict:
        idx = rng.integers(0, self.size, size=batch_size)
        return {
            "states": torch.from_numpy(self.states[idx]),
            "actions": torch.from_numpy(self.actions[idx]),
            "rewards": torch.from_numpy(self.rewards[idx]),
            "next_states": torch.from_numpy(self.next_states[idx]),
            "dones": torch.from_numpy(self.dones[idx]),
        }

    def state_dict(self) -> dict:
        n = self.size
        return {
            "states": torch.from_numpy(self.states[:n].copy()),
            "actions": torch.from_numpy(self.actions[:n].copy()),
            "rewards": torch.from_numpy(self.rewards[:n].copy()),
            "next_states": torch.from_numpy(self.next_states[:n].copy()),
            "dones": torch.from_numpy(self.dones[:n].copy()),
            "position": self.position,
        }

    def load_state_dict(self, data: dict) -> None:
        n = len(data["actions"])
        for key in ("states", "actions", "rewards", "next_states", "dones"):
            getattr(self, key)[:n] = data[key].numpy()
        self.size, self.position = n, int(data["position"])


class Learner:
    """What rlea.py trains and checkpoints: the soft Q-network, its target network (a copy at the
    start), Adam over the Q-network and the replay buffer, for states of ``state_dim`` (two embeddings)."""

    KEYS = ("q_net", "target_net", "optimizer", "buffer")

    def __init__(self, state_dim: int, hidden: int, learning_rate: float, buffer_size: int):
        self.state_dim = state_dim
        self.q_net, self.target_net = SoftQNetwork(state_dim, hidden), SoftQNetwork(state_dim, hidden)
        self.target_net.load_state_dict(self.q_net.state_dict())
        self.optimizer = torch.optim.Adam(self.q_net.parameters(), lr=learning_rate)
        self.buffer = ReplayBuffer(buffer_size, state_dim)
        self.gradient_steps = 0

    def state_dict(self) -> dict:
        return {key: getattr(self, key).state_dict() for key in self.KEYS} | {"gradient_steps": self.gradient_steps}

    def load_state_dict(self, ckpt: dict) -> None:
        for key in self.KEYS:
            getattr(self, key).load_state_dict(ckpt[key])
        self.gradient_steps = ckpt["gradient_steps"]
