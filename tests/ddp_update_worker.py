"""One PPO update on a slice of fixed rollout data, as a data-parallel process (under torchrun) or
alone. Used by test_distributed.py: ``python ddp_update_worker.py DATA OUT``."""

import os
import sys

import torch
import torch.distributed as dist
from ppoor import ppo_or  # noqa: E402
from ppoor.models import Agent  # noqa: E402
from ppoor.training.parallel import average_gradients  # noqa: E402


def main(data_path: str, out_path: str) -> None:
    world, rank = int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("RANK", 0))
    if world > 1:
        dist.init_process_group("gloo")
    torch.set_num_threads(1)
    data = torch.load(data_path, weights_only=True)
    total = data["static"]["coords"].shape[0]
    share = slice(rank * total // world, (rank + 1) * total // world)
    static = {k: v[share] for k, v in data["static"].items()}
    steps = {k: v[:, share] for k, v in data["steps"].items()}
    batch = {k: v[:, share] for k, v in data["batch"].items()}
    torch.manual_seed(0)
    agent = Agent(data["problem"])
    optimizer = torch.optim.Adam(agent.parameters(), lr=1e-3, eps=1e-5)
    args = ppo_or.Args(num_envs=total, minibatch_size=total, baseline="critic")  # every loss term: weights, value
    loss, _ = ppo_or.ppo_loss(agent, static, steps, batch, torch.arange(static["coords"].shape[0]), args)
    optimizer.zero_grad()
    loss.backward()
    average_gradients(agent)
    torch.nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
    optimizer.step()
    if rank == 0:
        torch.save(agent.state_dict(), out_path)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
