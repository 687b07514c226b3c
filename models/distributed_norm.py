"""Batch norm whose training statistics span every data-parallel process, and that can normalise with
its running statistics in training too.

``torch.nn.SyncBatchNorm`` runs on GPUs only; this one sums its statistics with a differentiable
all-reduce, so it works with gloo on CPU and NCCL on GPU alike. In one process, or
in eval mode, it is exactly ``nn.BatchNorm1d`` (same parameters, buffers and state-dict keys).

In training mode a batch-norm network is a different function of each batch: the PPO update, which
re-encodes a rollout's instances a minibatch at a time, would score the stored actions under another
policy than the one that sampled them, unless the rollout encoded them in the same minibatches
(``ppo_or.py --norm-groups``) or the statistics are frozen (``freeze_statistics``).
"""

from __future__ import annotations

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
    in SyncBatchNorm. ``frozen``: normalise with the running statistics, in training mode too."""

    frozen: bool = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.frozen:  # the running statistics, left as they are, in training mode as in evaluation
            return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps)
        if not (self.training and data_parallel()):
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
        return (x - mean) * torch.rsqrt(var + self.eps) * self.weight + self.bias


def freeze_statistics(model: nn.Module) -> None:
    """Makes every ``DistributedBatchNorm1d`` of ``model`` normalise with its running statistics, unchanged,
    in training mode too: the policy a rollout samples, the one the update trains and the one evaluation
    decodes are then one function of each instance, whatever else is in its batch."""
    for norm in model.modules():
        if isinstance(norm, DistributedBatchNorm1d):
            norm.frozen = True
