"""Batch norm whose training statistics span every data-parallel process, and that can replay the
statistics of an earlier batch, or normalise with its running statistics in training too.

``torch.nn.SyncBatchNorm`` runs on GPUs only; this one sums its statistics with a differentiable
all-reduce, so it works with gloo on CPU and NCCL on GPU alike. In one process, or
in eval mode, it is exactly ``nn.BatchNorm1d`` (same parameters, buffers and state-dict keys).

In training mode a batch-norm network is a different function of each batch: the PPO update, which
re-encodes a rollout's instances a minibatch at a time, would score the stored actions under another
policy than the one that sampled them (on TSP20 at 16 of 256 instances per minibatch the two differ
by a KL divergence of 0.02 before any step, as much as a whole update should move). So the rollout
records the statistics it normalised with (``recorded_statistics``) and the update normalises with
them (``fixed_statistics``): every minibatch then starts from the rollout's own policy.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F


def data_parallel() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


class AllReduceSum(torch.autograd.Function):
    """y = sum of x over the processes, on every process; the gradient of x is the sum of the
    processes' gradients of y (each process's loss depends on y)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        x = x.clone()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


def all_reduce(x: torch.Tensor) -> torch.Tensor:
    return AllReduceSum.apply(x)


class DistributedBatchNorm1d(nn.BatchNorm1d):
    """x [L, d]: normalised with the mean and variance over the rows of all processes (two-pass:
    the global mean first, then the global mean squared deviation); running statistics are updated
    from those, so they stay identical on every process. Gradients flow through the statistics as
    in SyncBatchNorm. ``fixed``: (mean, variance) [d] to normalise with instead of the batch's
    (in training mode the running statistics move toward them, as they would toward a batch's, so
    that evaluation keeps up with the weights); their gradient is that of the batch's statistics, as if the
    batch had been normalised by its own (a straight-through estimate of how the statistics of the
    whole rollout move); ``recorded``: with ``record`` set, the (mean, variance) of the last
    training batch."""

    record: bool = False
    recorded: tuple[torch.Tensor, torch.Tensor] | None = None
    fixed: tuple[torch.Tensor, torch.Tensor] | None = None
    frozen: bool = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.frozen:  # the running statistics, left as they are, in training mode as in evaluation
            return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps)
        if self.fixed is not None:  # the recorded values, with the gradient of this batch's statistics
            batch_mean, batch_var = x.float().mean(0), x.float().var(0, unbiased=False)
            mean = self.fixed[0] + (batch_mean - batch_mean.detach())
            var = self.fixed[1] + (batch_var - batch_var.detach())
            if self.training and self.track_running_stats and self.momentum is not None:
                with torch.no_grad():  # evaluation's statistics follow the ones training normalises with
                    self.num_batches_tracked += 1
                    self.running_mean.lerp_(self.fixed[0].to(self.running_mean.dtype), self.momentum)
                    self.running_var.lerp_(self.fixed[1].to(self.running_var.dtype), self.momentum)
            return (x - mean) * torch.rsqrt(var + self.eps) * self.weight + self.bias
        if not (self.training and data_parallel()):
            if self.training and self.record:
                with torch.no_grad():
                    self.recorded = (x.float().mean(0), x.float().var(0, unbiased=False))
            return super().forward(x)
        x = x.float()  # statistics in float32, also under bf16 autocast
        count = all_reduce(torch.tensor([x.shape[0]], dtype=x.dtype, device=x.device))
        mean = all_reduce(x.sum(0)) / count
        var = all_reduce(((x - mean) ** 2).sum(0)) / count
        if self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked += 1
                unbiased = var * count / (count - 1).clamp(min=1)
                self.running_mean.lerp_(mean, self.momentum)
                self.running_var.lerp_(unbiased, self.momentum)
        if self.record:
            self.recorded = (mean.detach(), var.detach())
        return (x - mean) * torch.rsqrt(var + self.eps) * self.weight + self.bias


@contextlib.contextmanager
def recorded_statistics(model: nn.Module) -> Iterator[list]:
    """Within the block, each ``DistributedBatchNorm1d`` of ``model`` in training mode keeps the batch
    mean and variance it normalised with; after it, the list yielded holds them, one pair per layer
    in module order (the last batch each layer saw), for ``fixed_statistics``."""
    norms = [m for m in model.modules() if isinstance(m, DistributedBatchNorm1d)]
    stats: list = []
    for norm in norms:
        norm.record, norm.recorded = True, None
    try:
        yield stats
        stats.extend(norm.recorded for norm in norms)
    finally:
        for norm in norms:
            norm.record, norm.recorded = False, None


@contextlib.contextmanager
def fixed_statistics(model: nn.Module, stats: list) -> Iterator[None]:
    """Within the block, the batch norms of ``model`` normalise with ``stats`` (from
    ``recorded_statistics``; an empty list, or None entries, leaves them as they are)."""
    norms = [m for m in model.modules() if isinstance(m, DistributedBatchNorm1d)]
    for norm, pair in zip(norms, stats or [None] * len(norms), strict=True):
        norm.fixed = pair
    try:
        yield
    finally:
        for norm in norms:
            norm.fixed = None


def freeze_statistics(model: nn.Module) -> None:
    """Makes every ``DistributedBatchNorm1d`` of ``model`` normalise with its running statistics, unchanged,
    in training mode too: the policy a rollout samples, the one the update trains and the one evaluation
    decodes are then one function of each instance, whatever else is in its batch."""
    for norm in model.modules():
        if isinstance(norm, DistributedBatchNorm1d):
            norm.frozen = True
