"""The Attention Model (Kool et al., 2019) as RLOR refactors it: encoder, cached decoder, heads.

Shapes: B instances, A nodes (= actions: n for TSP, n + 1 with the depot first for CVRP), N
queries per instance (trajectories, or trajectories x stored steps in the PPO update), d the
embedding size, H heads of size d / H.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from ppoor.models.distributed_norm import DistributedBatchNorm1d
from ppoor.models.embeddings import PROBLEM_MODULES
from torch import nn


class Cache(NamedTuple):
    """What the encoder computes once per instance and every decode step reuses.

    graph_context [B, 1, d] (projected mean node embedding); glimpse_key, glimpse_value
    [B, H, A, d/H]; logit_key [B, A, d] (already multiplied by the glimpse's output projection and by
    1 / sqrt(d), so logits need no projection per query); node_context [B, A', S, d] (each node's
    embedding projected by the S node slots of the step context; A' >= A when the context adds
    virtual rows, such as TSP's placeholder).
    """

    graph_context: torch.Tensor
    glimpse_key: torch.Tensor
    glimpse_value: torch.Tensor
    logit_key: torch.Tensor
    node_context: torch.Tensor


class MultiHeadAttention(nn.Module):
    """Self-attention over the nodes of each instance: [B, A, d] -> [B, A, d]."""

    def __init__(self, embed_dim: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.query = nn.Linear(embed_dim, embed_dim, bias=False)
        self.key = nn.Linear(embed_dim, embed_dim, bias=False)
        self.value = nn.Linear(embed_dim, embed_dim, bias=False)
        self.out = nn.Linear(embed_dim, embed_dim, bias=False)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        weight = torch.cat([self.query.weight, self.key.weight, self.value.weight])  # one product for q, k, v
        q, k, v = (split_heads(x, self.num_heads) for x in F.linear(h, weight).chunk(3, dim=-1))
        return self.out(merge_heads(F.scaled_dot_product_attention(q, k, v)))


class EncoderLayer(nn.Module):
    """h = BN(h + MHA(h)); h = BN(h + FF(h)), batch norm over all nodes of all instances (of every
    data-parallel process, see ``models.distributed_norm``)."""

    def __init__(self, embed_dim: int, num_heads: int, ff_hidden: int):
        super().__init__()
        self.attention = MultiHeadAttention(embed_dim, num_heads)
        self.norm1 = DistributedBatchNorm1d(embed_dim)
        self.feed_forward = nn.Sequential(
            nn.Linear(embed_dim, ff_hidden), nn.ReLU(inplace=True), nn.Linear(ff_hidden, embed_dim)
        )
        self.norm2 = DistributedBatchNorm1d(embed_dim)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = batch_norm(self.norm1, h + self.attention(h))
        return batch_norm(self.norm2, h + self.feed_forward(h))


class TransformerLayer(nn.Module):
    """RouteFinder's encoder layer: h = h + MHA(RMSNorm(h)); h = h + SwiGLU(RMSNorm(h)) (pre-norm, no
    batch statistics: an instance's encoding does not depend on the others in its batch)."""

    def __init__(self, embed_dim: int, num_heads: int, ff_hidden: int):
        super().__init__()
        self.norm1 = nn.RMSNorm(embed_dim)
        self.attention = MultiHeadAttention(embed_dim, num_heads)
        self.norm2 = nn.RMSNorm(embed_dim)
        self.gate_up = nn.Linear(embed_dim, 2 * ff_hidden, bias=False)
        self.down = nn.Linear(ff_hidden, embed_dim, bias=False)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = h + self.attention(self.norm1(h))
        gate, up = self.gate_up(self.norm2(h)).chunk(2, dim=-1)
        return h + self.down(F.silu(gate) * up)


ENCODERS = ("am", "transformer")
"""The encoder layers: ``am`` Kool et al.'s (post-norm, batch norm, ReLU), ``transformer`` RouteFinder's
(pre-norm RMSNorm, SwiGLU, a final RMSNorm)."""


def make_encoder(kind: str, embed_dim: int, num_heads: int, num_layers: int, ff_hidden: int) -> nn.Sequential:
    """The stack of ``num_layers`` encoder layers of ``kind`` (one of ``ENCODERS``): [B, A, d] -> [B, A, d]."""
    if kind == "am":
        return nn.Sequential(*(EncoderLayer(embed_dim, num_heads, ff_hidden) for _ in range(num_layers)))
    if kind == "transformer":  # SwiGLU's three matrices at 2/3 of the width hold as many weights as two
        layers = [TransformerLayer(embed_dim, num_heads, 2 * ff_hidden // 3) for _ in range(num_layers)]
        return nn.Sequential(*layers, nn.RMSNorm(embed_dim))
    raise ValueError(f"encoder must be one of {', '.join(ENCODERS)}, got {kind!r}")


class Decoder(nn.Module):
    """One decode step for N queries per instance against the cached encoding.

    query = graph context + projected step context; one masked multi-head glimpse
    g = glimpse_out(heads); logits C * tanh(g . logit_key / sqrt(d)), infeasible actions -inf.
    Since g . k = heads . (k W_out), the cache holds k W_out and no query is ever projected by W_out.
    """

    def __init__(self, embed_dim: int, num_heads: int, context_dim: int, tanh_clipping: float):
        super().__init__()
        self.num_heads = num_heads
        self.tanh_clipping = tanh_clipping
        self.project_node = nn.Linear(embed_dim, 3 * embed_dim, bias=False)
        self.project_graph = nn.Linear(embed_dim, embed_dim, bias=False)
        self.project_context = nn.Linear(context_dim, embed_dim, bias=False)
        self.glimpse_out = nn.Linear(embed_dim, embed_dim, bias=False)

    def precompute(self, h: torch.Tensor, node_context: torch.Tensor) -> Cache:
        """Builds the cache from node embeddings h [B, A, d] and the context's node rows."""
        glimpse_key, glimpse_value, logit_key = self.project_node(h).chunk(3, dim=-1)
        return Cache(
            graph_context=self.project_graph(h.mean(1, keepdim=True)),
            # contiguous per head, so that each decode step reads them without a copy
            glimpse_key=split_heads(glimpse_key, self.num_heads).contiguous(),
            glimpse_value=split_heads(glimpse_value, self.num_heads).contiguous(),
            logit_key=logit_key @ (self.glimpse_out.weight / math.sqrt(h.shape[-1])),
            node_context=node_context,
        )

    def forward(
        self, cache: Cache, query: torch.Tensor, mask: torch.Tensor, dynamic: tuple | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """query [B, N, d], mask [B, N, A] (True = allowed) -> logits [B, N, A], heads [B, N, d]
        (the glimpse before its output projection: g = glimpse_out(heads)).

        ``dynamic``: optional additive (glimpse key, glimpse value, logit key), each [B, N, A, d],
        from the embedding's dynamic hook; then every query attends to keys of its own.
        """
        q = split_heads(query, self.num_heads)
        # one additive mask (0 allowed, -inf masked) serves the glimpse and the logits
        bias = torch.where(mask, 0.0, float("-inf")).to(query.dtype)
        if dynamic is None:
            attention = single_query_attention if query.shape[1] == 1 else F.scaled_dot_product_attention
            heads = merge_heads(attention(q, cache.glimpse_key, cache.glimpse_value, attn_mask=bias[:, None]))
            scores = heads @ cache.logit_key.transpose(1, 2)
        else:
            key, value = (
                base[:, :, None] + split_query_heads(extra, self.num_heads)
                for base, extra in ((cache.glimpse_key, dynamic[0]), (cache.glimpse_value, dynamic[1]))
            )
            heads = F.scaled_dot_product_attention(q[..., None, :], key, value, attn_mask=bias[:, None, :, None])
            heads = merge_heads(heads.squeeze(-2))
            logit_key = cache.logit_key[:, None] + dynamic[2] @ (self.glimpse_out.weight / math.sqrt(heads.shape[-1]))
            scores = (heads[:, :, None] @ logit_key.transpose(-1, -2)).squeeze(-2)
        return torch.add(bias, torch.tanh(scores), alpha=self.tanh_clipping), heads


class AttentionModel(nn.Module):
    """Encoder, decoder and critic for one problem ("tsp" or "cvrp").

    ``encode(static)`` runs the encoder once per instance and returns a ``Cache``;
    ``forward(cache, state)`` decodes one step for every query: logits [B, N, A], values [B, N].
    Gradients reach the encoder through the cache.
    """

    def __init__(
        self,
        problem: str,
        embed_dim: int = 128,
        num_heads: int = 8,
        num_layers: int = 3,
        ff_hidden: int = 512,
        tanh_clipping: float = 10.0,
        distance_prior: float = 0.0,
        encoder: str = "am",
    ):
        """``distance_prior``: beta of ``distance_bias`` (0: none), a setting of the model that decoding may change;
        ``encoder``: the kind of encoder layers (``ENCODERS``)."""
        super().__init__()
        if problem not in PROBLEM_MODULES:
            raise ValueError(f"problem must be one of {sorted(PROBLEM_MODULES)}, got {problem!r}")
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} must be divisible by num_heads {num_heads}")
        self.problem, self.distance_prior, self.encoder_kind = problem, check_prior(distance_prior), encoder
        embedding_cls, context_cls = PROBLEM_MODULES[problem]
        self.embedding = embedding_cls(embed_dim)
        self.encoder = make_encoder(encoder, embed_dim, num_heads, num_layers, ff_hidden)
        self.context = context_cls(embed_dim)
        self.decoder = Decoder(embed_dim, num_heads, self.context.context_dim, tanh_clipping)
        self.critic = nn.Sequential(nn.Linear(embed_dim, embed_dim), nn.ReLU(), nn.Linear(embed_dim, 1))

    @property
    def config(self) -> dict:
        """The settings a checkpoint's ``model_config`` records to build this model again (those that
        differ from the defaults, so that older readers still read a default model's checkpoint)."""
        config = {"distance_prior": self.distance_prior} if self.distance_prior else {}
        return config | ({"encoder": self.encoder_kind} if self.encoder_kind != "am" else {})

    def encode(self, static: dict, groups: list[torch.Tensor] | None = None) -> Cache:
        """static: the problem's static tensors with instance axis B (see ``models.state``). ``groups``:
        a partition of the B instances (index tensors); the encoder then runs on each group alone, so
        that batch norm (in training mode) normalises each over its own instances."""
        if groups is not None:
            parts = [self.encode({key: value[group] for key, value in static.items()}) for group in groups]
            order = torch.cat(groups).argsort()
            return Cache(*(torch.cat(rows)[order] for rows in zip(*parts, strict=True)))
        h = self.encoder(self.embedding(static))
        return self.decoder.precompute(h, self.context.node_rows(h, self.decoder.project_context.weight))

    def forward(self, cache: Cache, state: dict, with_value: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
        """state: dynamic tensors [B, N, ...] -> logits [B, N, A], values [B, N] (None unless
        ``with_value``)."""
        query = cache.graph_context + self.context(cache, state, self.decoder.project_context.weight)
        logits, heads = self.decoder(cache, query, state["action_mask"], self.embedding.dynamic(state))
        if self.distance_prior:
            logits = logits + distance_bias(state, self.distance_prior).to(logits.dtype)
        return logits, self.value(heads) if with_value else None

    def value(self, heads: torch.Tensor) -> torch.Tensor:
        """The critic MLP on the glimpse g = glimpse_out(heads) [B, N, d] -> [B, N]; the glimpse's
        output projection is folded into the critic's first layer (one matmul per query, not two)."""
        first, _, last = self.critic
        hidden = F.relu(F.linear(heads, first.weight @ self.decoder.glimpse_out.weight, first.bias))
        return last(hidden).squeeze(-1)


def check_prior(beta: float) -> float:
    """``beta`` as a float, refused unless finite and at least 0."""
    if isinstance(beta, bool) or not isinstance(beta, int | float) or not math.isfinite(beta) or beta < 0:
        raise ValueError(f"distance_prior must be a finite number >= 0, got {beta!r}")
    return float(beta)


def current_distance(state: dict) -> torch.Tensor:
    """Euclidean distance from each query's current node (``last_node`` [B, N]) to every action's point
    [B, N, A] (float32): the depot(s) first (``depots`` [B, D, 2] or ``depot`` [B, 2]), then ``coords`` [B, n, 2]."""
    depots = state.get("depots", state["depot"][:, None] if "depot" in state else None)
    points = state["coords"] if depots is None else torch.cat([depots, state["coords"]], dim=1)  # [B, A, 2]
    current = points.gather(1, state["last_node"][..., None].expand(-1, -1, 2))  # [B, N, 2]
    return torch.cdist(current.float(), points.float())


def distance_bias(state: dict, beta: float, distance: torch.Tensor | None = None) -> torch.Tensor:
    """A prior toward near nodes, added to the logits: -beta * log(d * sqrt(A) + 1e-3) [B, N, A], with d
    the distance from each trajectory's current node (``last_node`` [B, N]) to every action's point
    (the depot(s) first, then ``coords``; ``distance`` [B, N, A] where the caller has it), in units of
    the mean spacing of A points in the unit square; 0 before a TSP tour's first node. Locality that
    does not depend on the size: it carries a model to instances larger and more clustered than its
    training set (as distance-aware attention reshaping does, Wang et al. 2024)."""
    distance = current_distance(state) if distance is None else distance
    bias = -beta * torch.log(distance * math.sqrt(distance.shape[-1]) + 1e-3)
    if "is_initial_action" in state:
        bias = bias.masked_fill(state["is_initial_action"][..., None], 0.0)
    return bias


def single_query_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor) -> torch.Tensor:
    """scaled_dot_product_attention for one query per instance and head (greedy decoding): q
    [B, H, 1, d/H], k, v [B, H, A, d/H], attn_mask [B, 1, 1, A] additive -> [B, H, 1, d/H]. Two
    batched products with the mask added in the first; on one CPU thread about 1.3x faster than the
    fused kernel, which is built for many queries."""
    b, heads, _, dk = q.shape
    flat = b * heads
    scores = torch.baddbmm(
        attn_mask.expand(b, heads, 1, -1).reshape(flat, 1, -1),
        q.reshape(flat, 1, dk),
        k.transpose(-1, -2).reshape(flat, dk, -1),
        alpha=dk**-0.5,
    )
    return (torch.softmax(scores, -1) @ v.reshape(flat, -1, dk)).view(b, heads, 1, dk)


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """[B, L, d] -> [B, H, L, d/H] (head j holds dims j*d/H .. (j+1)*d/H - 1)."""
    b, length, d = x.shape
    return x.view(b, length, num_heads, d // num_heads).transpose(1, 2)


def split_query_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """[B, N, A, d] -> [B, H, N, A, d/H]."""
    b, n, a, d = x.shape
    return x.view(b, n, a, num_heads, d // num_heads).permute(0, 3, 1, 2, 4)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """[B, H, L, d/H] -> [B, L, d]."""
    b, heads, length, dk = x.shape
    return x.transpose(1, 2).reshape(b, length, heads * dk)


def batch_norm(norm: nn.BatchNorm1d, h: torch.Tensor) -> torch.Tensor:
    """Batch norm over all nodes of all instances of h [B, A, d]."""
    return norm(h.reshape(-1, h.shape[-1])).view_as(h)
