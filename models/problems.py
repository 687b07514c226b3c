"""Problem-specific parts of the Attention Model: the static node embedding and the step context.

A context has ``node_slots`` S node embeddings followed by ``context_dim - S * d`` scalar features.
Its projection is split so that the node part is projected once per instance in the cache
(``Cache.node_context`` [B, A, S, d]) and each decode step only gathers it.
"""

from __future__ import annotations

import torch
from torch import nn


def gather_nodes(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """x [B, A, d], index [B, N] -> x[b, index[b, j]] as [B, N, d]."""
    return x.gather(1, index[..., None].expand(-1, -1, x.shape[-1]))


class StaticEmbedding(nn.Module):
    """Base of the node embeddings. ``dynamic(state)`` is the hook for problems whose node features
    change during an episode: it returns additive glimpse keys, glimpse values and logit keys, each
    [B, N, A, d], or None when the nodes have no dynamic features (TSP, CVRP)."""

    def dynamic(self, state: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        return None


class TSPEmbedding(StaticEmbedding):
    """coords [B, n, 2] -> node embeddings [B, n, d]."""

    def __init__(self, embed_dim: int):
        super().__init__()
        self.node = nn.Linear(2, embed_dim)

    def forward(self, static: dict) -> torch.Tensor:
        return self.node(static["coords"])


class CVRPEmbedding(StaticEmbedding):
    """depot [B, 2], coords [B, n, 2], demand [B, n] -> node embeddings [B, n + 1, d], depot first."""

    def __init__(self, embed_dim: int):
        super().__init__()
        self.depot = nn.Linear(2, embed_dim)
        self.node = nn.Linear(3, embed_dim)

    def forward(self, static: dict) -> torch.Tensor:
        customers = self.node(torch.cat([static["coords"], static["demand"][..., None]], dim=-1))
        return torch.cat([self.depot(static["depot"])[:, None], customers], dim=1)


class TSPContext(nn.Module):
    """[first node ; last node] embeddings, or a learned placeholder before the first action."""

    node_slots = 2

    def __init__(self, embed_dim: int):
        super().__init__()
        self.context_dim = 2 * embed_dim
        self.placeholder = nn.Parameter(torch.empty(self.context_dim).uniform_(-1, 1))

    def forward(self, cache, state: dict, weight: torch.Tensor) -> torch.Tensor:
        """Projected step context [B, N, d]; ``weight`` [d, 2d] is the context projection."""
        first = gather_nodes(cache.node_context[:, :, 0], state["first_node"])
        last = gather_nodes(cache.node_context[:, :, 1], state["last_node"])
        initial = weight @ self.placeholder
        return torch.where(state["is_initial_action"][..., None], initial, first + last)


class CVRPContext(nn.Module):
    """[last node embedding ; remaining load as a fraction of capacity]."""

    node_slots = 1

    def __init__(self, embed_dim: int):
        super().__init__()
        self.context_dim = embed_dim + 1

    def forward(self, cache, state: dict, weight: torch.Tensor) -> torch.Tensor:
        """Projected step context [B, N, d]; ``weight`` [d, d + 1] is the context projection."""
        last = gather_nodes(cache.node_context[:, :, 0], state["last_node"])
        return last + state["current_load"][..., None] * weight[:, -1]


PROBLEM_MODULES = {"tsp": (TSPEmbedding, TSPContext), "cvrp": (CVRPEmbedding, CVRPContext)}
