"""The railway policy: an actor-critic shared by all trains, the actor with a communication module.

Shapes: B environments, T trains, S tree edge slots, F edge features, G global features, d the
hidden size. Each train encodes its observation (the tree's edges, flattened, and its global
features) into h [B, T, d] and emits a message m = W_m h. It receives the messages of its neighbours
(``neighbors`` [B, T, T], itself included) and averages them with attention weights: query W_q h_i,
keys W_k m_j, softmax over the neighbours j. The actor reads [h ; averaged message] and returns
logits over (stop, left branch, right branch), with the actions the safety layer forbids
(``mask`` [B, T, 3] False) pushed to probability 0; the critic reads h. Gradients flow through the
messages into the encoders of the trains that sent them. With ``prior_weight`` w > 0 the actor is
residual: its logits gain w x ``prior`` [B, T, 3], the one-hot choice of the safety layer's
shortest-path rule, so an untrained policy already plays that rule (greedy) and learning moves it
only where the rule's choice loses.
"""

from __future__ import annotations

import math

import torch
from torch import nn

POLICY_INPUTS = ("edges", "globals", "neighbors", "mask", "prior")  # the observation keys forward reads, in its order


class RailPolicy(nn.Module):
    """``forward(edges [B, T, S, F], globals [B, T, G], neighbors [B, T, T] bool, mask [B, T, 3] bool
    or None, prior [B, T, 3] or None)`` -> logits [B, T, 3], values [B, T]."""

    def __init__(
        self, edge_slots: int, edge_features: int, global_features: int, hidden: int = 128, prior_weight: float = 0.0
    ):
        super().__init__()
        self.shape = {"edge_slots": edge_slots, "edge_features": edge_features, "global_features": global_features}
        self.prior_weight = prior_weight
        inputs = edge_slots * edge_features + global_features
        self.encoder = nn.Sequential(nn.Linear(inputs, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.message = nn.Linear(hidden, hidden)
        self.query = nn.Linear(hidden, hidden, bias=False)
        self.key = nn.Linear(hidden, hidden, bias=False)
        self.actor = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.ReLU(), nn.Linear(hidden, 3))
        self.critic = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(
        self,
        edges: torch.Tensor,
        globals_: torch.Tensor,
        neighbors: torch.Tensor,
        mask: torch.Tensor | None = None,
        prior: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.encoder(torch.cat([edges.flatten(-2), globals_], dim=-1))  # [B, T, d]
        messages = self.message(h)
        scores = self.query(h) @ self.key(messages).transpose(1, 2) / math.sqrt(h.shape[-1])  # [B, T, T]
        eye = torch.eye(neighbors.shape[-1], dtype=torch.bool, device=neighbors.device)
        scores = scores.masked_fill(~(neighbors | eye), float("-inf"))  # a train always hears itself
        received = torch.softmax(scores, dim=-1) @ messages
        logits = self.actor(torch.cat([h, received], dim=-1))
        if self.prior_weight and prior is not None:
            logits = logits + self.prior_weight * prior
        return mask_logits(logits, mask), self.critic(h).squeeze(-1)


def mask_logits(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``logits`` [..., 3] with the actions ``mask`` [..., 3] forbids (False) pushed to probability 0 (a
    large finite value keeps the entropy finite); unchanged without a mask."""
    return logits if mask is None else logits.masked_fill(~mask, -1e9)


class ReleaseClassifier(nn.Module):
    """For a train not yet started: the probability that it reaches its target if started now.
    ``forward(edges [N, S, F], globals [N, G])`` -> logits [N] (its tree and global features seen
    from its start cell)."""

    def __init__(self, edge_slots: int, edge_features: int, global_features: int, hidden: int = 64):
        super().__init__()
        self.shape = {"edge_slots": edge_slots, "edge_features": edge_features, "global_features": global_features}
        inputs = edge_slots * edge_features + global_features
        self.net = nn.Sequential(
            nn.Linear(inputs, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1)
        )

    def forward(self, edges: torch.Tensor, globals_: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([edges.flatten(-2), globals_], dim=-1)).squeeze(-1)


def load_rail_policy(path) -> tuple[RailPolicy, dict]:
    """The policy of a ppo_flatland.py checkpoint (or exported weights), in eval mode, and the checkpoint."""
    from ppoor.models.checkpoints import CheckpointError, read_checkpoint

    ckpt = read_checkpoint(path)
    if ckpt.get("problem") != "rail":
        raise CheckpointError(f"checkpoint {path} is a {str(ckpt.get('problem')).upper()} model, not a railway policy")
    policy = RailPolicy(**ckpt["model_config"])
    try:
        policy.load_state_dict(ckpt["model"])
    except RuntimeError as exc:
        raise CheckpointError(f"checkpoint {path} does not fit the railway policy: {str(exc).splitlines()[0]}") from exc
    return policy.eval(), ckpt


def load_release_classifier(ckpt: dict) -> ReleaseClassifier | None:
    """The learned release classifier a checkpoint holds (None if it has none)."""
    if "release_model" not in ckpt:
        return None
    classifier = ReleaseClassifier(**ckpt["release_config"])
    classifier.load_state_dict(ckpt["release_model"])
    return classifier.eval()
