"""Host-device traffic of one training rollout step, counted with torch.profiler.

Runs the real trainer in-process for one iteration and counts, per rollout step (the interval
between the ends of two consecutive env steps: store the last step's results, copy the
observation to the device, decode, copy the actions back, step the env):
- host_to_device / device_to_host: the copies made by ``models.StateWrapper`` (profiler labels);
- syncs: calls that make the host wait for the device: reading a tensor's value
  (``aten::_local_scalar_dense``: .item(), bool(), int()), ``aten::nonzero``, ``aten::is_nonzero``,
  plus the device-to-host copies;
- on a GPU also the CUDA runtime calls: cudaMemcpyAsync, cudaStreamSynchronize, cudaDeviceSynchronize.

On the CPU no copy moves data (tensors share the NumPy arrays), but the same calls run, so the
counts are what a GPU run does. ``tests/test_ppo_or.py`` holds them: one device-to-host copy and no
other synchronisation per step.

    python bench/host_traffic.py [--env-id tsp-v0] [--num-nodes 20] [--num-envs 16] [--cuda]
"""

import argparse
import contextlib
from collections import Counter

import torch
from inprocess import trainer_run
from ppoor.envs import ENV_IDS, VECTOR_ENVS  # noqa: E402

COPIES = ("host_to_device", "device_to_host")
SYNCS = ("aten::_local_scalar_dense", "aten::nonzero", "aten::is_nonzero", "device_to_host")
CUDA_CALLS = ("cudaMemcpyAsync", "cudaStreamSynchronize", "cudaDeviceSynchronize")


@contextlib.contextmanager
def labelled_env_steps(env_cls):
    """Runs every ``env_cls.step`` under the profiler label ``env.step``."""
    original = env_cls.step

    def step(self, action):
        with torch.profiler.record_function("env.step"):
            return original(self, action)

    env_cls.step = step
    try:
        yield
    finally:
        env_cls.step = original


def traffic_per_step(env_id: str, num_nodes: int, num_envs: int, cuda: bool = False) -> dict:
    """Mean count per rollout step of each copy, sync and CUDA call (keys of COPIES, SYNCS,
    CUDA_CALLS), over the steps of one rollout of ``ppo_or.py`` (rlor preset, one iteration)."""
    argv = ["--env-id", env_id, "--num-nodes", str(num_nodes), "--num-envs", str(num_envs), "--n-traj", "8"]
    argv += ["--total-timesteps", "1", "--eval-interval", "0", "--checkpoint-interval", "0", "--preset", "rlor"]
    argv += ["--cuda" if cuda else "--no-cuda"]
    activities = [torch.profiler.ProfilerActivity.CPU]
    if cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    profiler = torch.profiler.profile(activities=activities)
    with labelled_env_steps(VECTOR_ENVS[ENV_IDS[env_id]]), trainer_run(argv, profiler):
        pass
    events = [e for e in profiler.events() if e.device_type == torch.autograd.DeviceType.CPU]
    ends = sorted(e.time_range.end for e in events if e.name == "env.step")
    counts = Counter()
    for name in {*COPIES, *SYNCS, *CUDA_CALLS}:
        counts[name] = sum(1 for e in events if e.name == name and ends[0] < e.time_range.end <= ends[-1])
    steps = len(ends) - 1
    return {name: counts[name] / steps for name in (*COPIES, *SYNCS, *CUDA_CALLS)} | {"steps": steps}


def report(env_id: str, num_nodes: int, num_envs: int, cuda: bool) -> str:
    """One printed line of ``traffic_per_step``."""
    counts = traffic_per_step(env_id, num_nodes, num_envs, cuda)
    syncs = sum(counts[name] for name in SYNCS)
    text = (
        f"{env_id} n={num_nodes}, M={num_envs}, {'CUDA' if cuda else 'CPU'}, over {counts['steps']} rollout steps, "
        f"per step: {counts['host_to_device']:g} host-to-device copies, {counts['device_to_host']:g} "
        f"device-to-host, {syncs:g} synchronisations (" + ", ".join(f"{name} {counts[name]:g}" for name in SYNCS) + ")"
    )
    if cuda:
        text += "; CUDA runtime: " + ", ".join(f"{name} {counts[name]:g}" for name in CUDA_CALLS)
    return text


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-id", nargs="+", default=["tsp-v0", "cvrp-v0", "vrptw-v0"])
    parser.add_argument("--num-nodes", type=int, default=20)
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--cuda", action="store_true", help="train on the GPU (counts the CUDA runtime calls too)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for env_id in args.env_id:
        print(report(env_id, args.num_nodes, args.num_envs, args.cuda and torch.cuda.is_available()), flush=True)


if __name__ == "__main__":
    main()
