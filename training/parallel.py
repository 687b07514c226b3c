"""Data-parallel helpers of ppo_or.py (torchrun: one process per GPU or CPU worker): sums and
maxima over the processes, averaged gradients, the processes' random states for a checkpoint,
and the end-of-run agreement check. In a single process each is the identity (or a no-op)."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist


def start_processes(use_cuda: bool) -> tuple[int, int, torch.device]:
    """(world size, rank, device) of this process: torchrun sets WORLD_SIZE, RANK and LOCAL_RANK (the
    process group is started here: NCCL on GPUs, gloo on CPUs); a plain run is rank 0 of 1."""
    world_size, rank = int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("RANK", 0))
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if use_cuda else "cpu")
    if world_size > 1:
        if use_cuda:
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if use_cuda else "gloo")
    return world_size, rank, device


def world_size() -> int:
    """The number of data-parallel processes (1 in a plain run)."""
    return dist.get_world_size() if dist.is_initialized() else 1


def all_sum(x: torch.Tensor) -> torch.Tensor:
    """Sum over the data-parallel processes (x itself in a single process); no gradient."""
    if dist.is_initialized():
        x = x.detach().clone()
        dist.all_reduce(x)
    return x


def average_gradients(agent: torch.nn.Module) -> None:
    """Averages the gradients over the data-parallel processes with one all-reduce (CleanRL's
    multi-GPU pattern), so every process takes the same optimizer step."""
    if not dist.is_initialized():
        return
    params = [p for p in agent.parameters() if p.requires_grad]
    grads = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for p in params])
    dist.all_reduce(grads)
    grads /= dist.get_world_size()
    offset = 0
    for p in params:
        p.grad = grads[offset : offset + p.numel()].view_as(p).clone()
        offset += p.numel()


def report_parameter_agreement(agent: torch.nn.Module, is_main: bool) -> None:
    """Checks that every process ends with the same parameters (the data-parallel invariant)."""
    flat = torch.cat([p.detach().flatten() for p in agent.state_dict().values() if p.is_floating_point()])
    spread = flat.clone()
    dist.all_reduce(spread, op=dist.ReduceOp.MAX)
    lowest = flat.clone()
    dist.all_reduce(lowest, op=dist.ReduceOp.MIN)
    difference = (spread - lowest).abs().max().item()
    if is_main:
        print(
            f"parameters identical across {dist.get_world_size()} processes: {difference == 0} (max difference {difference:g})",
            flush=True,
        )


def finish_processes(world_size: int) -> None:
    if world_size > 1:
        dist.barrier()
        dist.destroy_process_group()


def synced(value: float, device: torch.device) -> float:
    """The largest of ``value`` over the data-parallel processes, so that they all take the same
    time-based decisions."""
    if not dist.is_initialized():
        return value
    x = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(x, op=dist.ReduceOp.MAX)
    return x.item()


def gather(value, world_size: int) -> list:
    """``value`` of every process, in rank order (``[value]`` in a single process)."""
    if world_size == 1:
        return [value]
    values = [None] * world_size
    dist.all_gather_object(values, value)
    return values
