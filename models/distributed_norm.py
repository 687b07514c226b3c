"""Batch norm whose training statistics span every data-parallel process.

``torch.nn.SyncBatchNorm`` runs on GPUs only; this one sums its statistics with a differentiable
all-reduce, so it works with gloo on CPU and NCCL on GPU alike. In one process, or
in eval mode, it is exactly ``nn.BatchNorm1d`` (same parameters, buffers and state-dict keys).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn


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
    in SyncBatchNorm."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
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
