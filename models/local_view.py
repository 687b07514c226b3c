"""A learned local view: a score for the K nearest allowed actions of each trajectory's current node.

The decoder sees the whole instance; the local view sees only the K nearest allowed candidates,
placed relative to the current node in units of the farthest of them. What it learns therefore does
not depend on the instance's size, scale or density, which is what carries a policy to instances
unlike its training set (the local policy of ELG, Gao et al. 2024; INViT's nearest-neighbour views,
Fang et al. 2024). Its scores are added to the decoder's logits; its last layer starts at zero, so a
model given a local view decodes exactly as before until training changes it.

Shapes: B instances, N queries per instance, A actions (the depot(s) first, then the customers), K
neighbours, F = ``FEATURES`` features per neighbour, h the hidden width.
"""

from __future__ import annotations

import torch
from torch import nn

FEATURES = 6
"""Per neighbour: distance, x and y offsets (in units of the farthest neighbour's distance), rank / K,
is a depot, its demand as a share of the remaining load (problems with ``demand`` and ``current_load``;
else 0)."""


class LocalView(nn.Module):
    """Scores [B, N, A] for the ``k`` nearest allowed actions of each query (0 elsewhere and before a
    TSP tour's first node): one hidden layer of ``hidden`` ReLU units on each neighbour's features and
    their mean over the K (the neighbourhood's shape) gives one score per neighbour (small: the update
    decodes every stored step of every trajectory through it)."""

    def __init__(self, k: int, hidden: int = 16):
        super().__init__()
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"local_view must be a whole number of neighbours >= 1, got {k!r}")
        self.k = k
        self.embed = nn.Linear(2 * FEATURES, hidden)  # a neighbour's features and the neighbourhood's mean
        self.score = nn.Linear(hidden, 1)
        nn.init.zeros_(self.score.weight)
        nn.init.zeros_(self.score.bias)

    def forward(self, state: dict, distance: torch.Tensor | None = None) -> torch.Tensor:
        """``distance``: from each query's current node to every action [B, N, A], where the caller
        has it (``current_distance``)."""
        points = action_points(state)  # [B, A, 2]
        if distance is None:
            distance = current_distance(state, points)
        k = min(self.k, points.shape[1])
        chosen, index = distance.masked_fill(~state["action_mask"], float("inf")).topk(k, dim=-1, largest=False)
        valid = torch.isfinite(chosen)  # [B, N, K], nearest first; fewer than K allowed: the rest invalid
        b, n = index.shape[:2]
        neighbours = points.gather(1, index.view(b, -1, 1).expand(-1, -1, 2)).view(b, n, k, 2)
        offset = (neighbours - current_point(state, points)[:, :, None]).float() * valid[..., None]
        # the features' distances from the exact offsets: cdist's may put a coincident point a rounding
        # error away, which a scale as small would blow up
        near = offset.norm(dim=-1)
        scale = near.amax(-1, keepdim=True).clamp_min(1e-9)  # the farthest allowed neighbour
        shift = offset / scale[..., None]
        rank = torch.arange(k, device=near.device, dtype=near.dtype).expand_as(near) / k
        depots = points.shape[1] - state["coords"].shape[1]
        extra = torch.stack([rank, (index < depots).to(near.dtype), load_share(state, index, depots)], -1)
        features = torch.cat([(near / scale)[..., None], shift, extra], -1) * valid[..., None]
        # the neighbourhood's shape: the mean of the allowed neighbours' features [B, N, F]
        mean = features.sum(-2) / valid.sum(-1, keepdim=True).clamp_min(1)
        h = torch.relu_(self.embed(torch.cat([features, mean[..., None, :].expand_as(features)], -1)))  # [B, N, K, h]
        scores = self.score(h).squeeze(-1) * valid  # [B, N, K]
        if "is_initial_action" in state:
            scores = scores.masked_fill(state["is_initial_action"][..., None], 0.0)
        return torch.zeros(distance.shape, dtype=scores.dtype, device=scores.device).scatter(-1, index, scores)


def current_point(state: dict, points: torch.Tensor) -> torch.Tensor:
    """Each query's current point [B, N, 2] (``last_node`` [B, N] into ``points`` [B, A, 2])."""
    return points.gather(1, state["last_node"][..., None].expand(-1, -1, 2))


def current_distance(state: dict, points: torch.Tensor | None = None) -> torch.Tensor:
    """Euclidean distance from each query's current node to every action's point [B, N, A] (float32)."""
    points = action_points(state) if points is None else points
    return torch.cdist(current_point(state, points).float(), points.float())


def action_points(state: dict) -> torch.Tensor:
    """Every action's point [B, A, 2]: the depot(s) first (``depots`` [B, D, 2] or ``depot`` [B, 2]),
    then ``coords`` [B, n, 2]."""
    depots = state.get("depots", state["depot"][:, None] if "depot" in state else None)
    return state["coords"] if depots is None else torch.cat([depots, state["coords"]], dim=1)


def load_share(state: dict, index: torch.Tensor, depots: int) -> torch.Tensor:
    """Each neighbour's demand as a share of its query's remaining load [B, N, K] (0 for depots, and
    for problems without ``demand`` [B, n] and ``current_load`` [B, N])."""
    if "demand" not in state or "current_load" not in state:
        return torch.zeros(index.shape, device=index.device)
    demand = torch.cat([state["demand"].new_zeros(state["demand"].shape[0], depots), state["demand"]], dim=1)
    picked = demand[:, None].expand(-1, index.shape[1], -1).gather(-1, index)
    return (picked / state["current_load"][..., None].clamp_min(1e-6)).clamp(max=1.0)
