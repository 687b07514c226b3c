"""Problem-specific parts of the Attention Model: the static node embedding and the step context.

A context has ``node_slots`` S node embeddings followed by ``context_dim - S * d`` scalar features.
Its projection is split so that the node part is projected once per instance in the cache
(``Cache.node_context`` [B, A, S, d], from ``node_rows``) and each decode step only gathers it.
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import nn


def project_slots(h: torch.Tensor, weight: torch.Tensor, slots: int) -> torch.Tensor:
    """Node embeddings h [B, A, d] projected by each node slot of the context projection ``weight``
    [d, context_dim] -> [B, A, S, d]."""
    d = h.shape[-1]
    return torch.einsum("bad,esd->base", h, weight[:, : slots * d].reshape(d, slots, d))


def sum_slot_rows(node_context: torch.Tensor, nodes: torch.Tensor) -> torch.Tensor:
    """Sum over the slots s of node_context[b, nodes[b, j, s], s]: node_context [B, A', S, d],
    nodes [B, N, S] -> [B, N, d]. One fused embedding_bag (about 3x faster than a gather per slot,
    forward and backward)."""
    b, rows, slots, d = node_context.shape
    base = torch.arange(b, device=nodes.device).view(b, 1, 1) * (rows * slots)
    index = nodes * slots + base + torch.arange(slots, device=nodes.device)
    return F.embedding_bag(index.view(-1, slots), node_context.reshape(-1, d), mode="sum").view(*nodes.shape[:2], d)


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


class TSPContext(nn.Module):
    """[first node ; last node] embeddings, or a learned placeholder before the first action.

    The placeholder is held as a virtual node after the n real ones (its two halves projected like
    the two node slots), so the first step gathers it like any other node.
    """

    node_slots = 2

    def __init__(self, embed_dim: int):
        super().__init__()
        self.context_dim = 2 * embed_dim
        self.placeholder = nn.Parameter(torch.empty(self.context_dim).uniform_(-1, 1))

    def node_rows(self, h: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """[B, n + 1, 2, d]: the nodes' projected slots, then the placeholder's."""
        d = h.shape[-1]
        virtual = (weight.view(d, 2, d) * self.placeholder.view(1, 2, d)).sum(-1).T
        rows = project_slots(h, weight, self.node_slots)
        return torch.cat([rows, virtual.expand(h.shape[0], 1, 2, d)], dim=1)

    def forward(self, cache, state: dict, weight: torch.Tensor) -> torch.Tensor:
        """Projected step context [B, N, d]; ``weight`` [d, 2d] is the context projection."""
        placeholder = cache.node_context.shape[1] - 1
        nodes = torch.stack([state["first_node"], state["last_node"]], dim=-1)
        return sum_slot_rows(cache.node_context, nodes.masked_fill(state["is_initial_action"][..., None], placeholder))


class DepotEmbedding(StaticEmbedding):
    """The depot problems whose nodes carry fixed features (CVRP: the demand): depot [B, 2] -> one
    linear map; each customer's [coords ; the static arrays ``keys``] ([B, n] or [B, n, R] each,
    ``features`` columns in all) -> another. -> node embeddings [B, n + 1, d], depot first."""

    def __init__(self, embed_dim: int, keys: tuple, features: int):
        super().__init__()
        self.keys = keys
        self.depot = nn.Linear(2, embed_dim)
        self.node = nn.Linear(features, embed_dim)

    def forward(self, static: dict) -> torch.Tensor:
        columns = [static["coords"]] + [x if x.dim() == 3 else x[..., None] for x in (static[k] for k in self.keys)]
        return torch.cat([self.depot(static["depot"])[:, None], self.node(torch.cat(columns, dim=-1))], dim=1)


class LastNodeContext(nn.Module):
    """[last node embedding ; the dynamic arrays ``keys`` ([B, N] or [B, N, R] each, ``features``
    columns in all)]: e.g. CVRP's remaining load."""

    node_slots = 1

    def __init__(self, embed_dim: int, keys: tuple, features: int):
        super().__init__()
        self.keys, self.num_features = keys, features
        self.context_dim = embed_dim + features

    def node_rows(self, h: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """[B, n + 1, 1, d]: the nodes' projected embeddings."""
        return project_slots(h, weight, self.node_slots)

    def forward(self, cache, state: dict, weight: torch.Tensor) -> torch.Tensor:
        """Projected step context [B, N, d]; ``weight`` [d, d + features] is the context projection."""
        last = sum_slot_rows(cache.node_context, state["last_node"][..., None])
        features = torch.cat([x if x.dim() == 3 else x[..., None] for x in (state[k] for k in self.keys)], dim=-1)
        return last + features @ weight[:, -self.num_features :].T


def _family(keys: tuple, features: int, context: tuple, context_features: int) -> tuple:
    return (
        partial(DepotEmbedding, keys=keys, features=features),
        partial(LastNodeContext, keys=context, features=context_features),
    )


PROBLEM_MODULES = {"tsp": (TSPEmbedding, TSPContext), "cvrp": _family(("demand",), 3, ("current_load",), 1)}


def finite_or_zero(x: torch.Tensor) -> torch.Tensor:
    """Infinite entries (an absent window closing or length limit) become the neutral 0."""
    return torch.where(torch.isfinite(x), x, torch.zeros((), dtype=x.dtype, device=x.device))


class VRPEmbedding(StaticEmbedding):
    """The multi-task VRP (``envs.vrp``): one embedding for all 48 variants, as in RouteFinder.

    Customers [B, n, 7]: x, y, linehaul demand, backhaul demand, window opening and closing, service
    time. Each of the k depots [B, k, 8]: x, y, the instance's attributes (open, distance limit,
    backhauls present, time windows present), its window's closing, mixed backhauls. An absent
    attribute's features are 0 (infinite closings and limits included), so one model reads every
    variant. -> node embeddings [B, k + n, d], depots first (the action order).
    """

    depot_features = 8

    def __init__(self, embed_dim: int):
        super().__init__()
        self.depot = nn.Linear(self.depot_features, embed_dim)
        self.node = nn.Linear(7, embed_dim)

    def forward(self, static: dict) -> torch.Tensor:
        k = static["depots"].shape[1]
        windows = finite_or_zero(static["time_windows"])  # [B, k + n, 2]
        customers = torch.cat(
            [
                static["coords"],
                static["demand_linehaul"][..., None],
                static["demand_backhaul"][..., None],
                windows[:, k:],
                static["service_time"][:, k:, None],
            ],
            dim=-1,
        )
        flags = instance_flags(static)[:, None].expand(-1, k, -1)
        mixed = (static["backhaul_class"] == 2).to(flags.dtype)[:, None, None].expand(-1, k, 1)
        depots = torch.cat([static["depots"], flags, windows[:, :k, 1:], mixed], dim=-1)
        return torch.cat([self.depot(depots), self.node(customers)], dim=1)


def instance_flags(static: dict) -> torch.Tensor:
    """[B, 4]: open route, distance limit (0 if none), backhauls present, time windows present."""
    dtype = static["coords"].dtype
    return torch.stack(
        [
            static["open_route"].to(dtype),
            finite_or_zero(static["distance_limit"]),
            (static["demand_backhaul"] > 0).any(-1).to(dtype),
            torch.isfinite(static["time_windows"][:, 0, 1]).to(dtype),
        ],
        dim=-1,
    )


class VRPContext(nn.Module):
    """[last node embedding ; the current route's depot embedding (where it returns) ; remaining
    linehaul and backhaul capacity, current time (0 without time windows), route length and length
    left (0 without a limit), open route]."""

    node_slots = 2
    num_features = 6

    def __init__(self, embed_dim: int):
        super().__init__()
        self.context_dim = 2 * embed_dim + self.num_features

    def node_rows(self, h: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """[B, k + n, 2, d]: the nodes' embeddings projected by both node slots."""
        return project_slots(h, weight, self.node_slots)

    def forward(self, cache, state: dict, weight: torch.Tensor) -> torch.Tensor:
        """Projected step context [B, N, d]; ``weight`` [d, 2d + 6] is the context projection."""
        nodes = sum_slot_rows(cache.node_context, torch.stack([state["last_node"], state["route_depot"]], dim=-1))
        timed = torch.isfinite(state["time_windows"][:, 0, 1])[:, None]  # [B, 1]
        limit = state["distance_limit"][:, None]
        limited = torch.isfinite(limit)
        zero = torch.zeros((), dtype=nodes.dtype, device=nodes.device)
        length = torch.where(limited, state["route_length"], zero)
        features = torch.stack(
            [
                state["remaining_linehaul"],
                state["remaining_backhaul"],
                torch.where(timed, state["current_time"], zero),
                length,
                torch.where(limited, limit - length, zero),
                state["open_route"].to(nodes.dtype)[:, None].expand_as(length),
            ],
            dim=-1,
        )
        return nodes + features @ weight[:, -self.num_features :].T


def upgrade_vrp_weights(model: dict) -> dict:
    """Weights of a multi-task VRP model from before multiple depots and mixed backhauls (7 depot
    features, one node slot in the context) in today's layout: the new inputs get zero weights, so
    the model computes what it computed on the 16 classic variants."""
    depot = model.get("embedding.depot.weight")
    if depot is None or depot.shape[1] != VRPEmbedding.depot_features - 1:
        return model
    context = model["decoder.project_context.weight"]
    d = context.shape[0]
    return model | {
        "embedding.depot.weight": torch.cat([depot, depot.new_zeros(d, 1)], dim=1),
        "decoder.project_context.weight": torch.cat([context[:, :d], context.new_zeros(d, d), context[:, d:]], dim=1),
    }


PROBLEM_MODULES["mtvrp"] = (VRPEmbedding, VRPContext)


class PDPEmbedding(StaticEmbedding):
    """Pickup and delivery (``envs.pdp``): depot [B, 2]; each pickup [its coords ; its delivery's
    coords ; the pair's load] and each delivery [its coords ; its pickup's coords ; the load], by two
    linear maps, so that a node knows its partner (as in RL4CO's PDP embedding). -> [B, n + 1, d]."""

    def __init__(self, embed_dim: int):
        super().__init__()
        self.depot = nn.Linear(2, embed_dim)
        self.pickup = nn.Linear(5, embed_dim)
        self.delivery = nn.Linear(5, embed_dim)

    def forward(self, static: dict) -> torch.Tensor:
        pickups, deliveries = static["coords"].chunk(2, dim=1)
        load = static["load"][..., None]
        return torch.cat(
            [
                self.depot(static["depot"])[:, None],
                self.pickup(torch.cat([pickups, deliveries, load], dim=-1)),
                self.delivery(torch.cat([deliveries, pickups, load], dim=-1)),
            ],
            dim=1,
        )


PROBLEM_MODULES |= {
    "mrcvrp": _family(("demand",), 4, ("current_load",), 2),  # two resources
    "pdp": (PDPEmbedding, partial(LastNodeContext, keys=("current_load",), features=1)),
    "op": _family(("prize",), 3, ("remaining_length",), 1),
    "pctsp": _family(("prize", "penalty"), 4, ("remaining_prize",), 1),
    "pcvrp": _family(("demand", "prize"), 4, ("current_load",), 1),
}
