import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from checks import random_allowed_actions
from ppoor.envs import VECTOR_ENVS
from ppoor.models import Agent, StateWrapper, read_checkpoint

ROOT = Path(__file__).resolve().parents[1]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]


def torchrun(tmp_path, *args, nproc=True):
    cmd = (TORCHRUN if nproc else [sys.executable]) + list(args)
    result = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_two_process_run_keeps_ranks_identical_and_logs_once(tmp_path):
    args = [str(ROOT / "ppo_or.py"), "--env-id", "cvrp-v0", "--num-nodes", "6", "--num-envs", "4", "--n-traj", "3"]
    args += ["--train-augment", "2"]
    args += ["--minibatch-size", "2", "--threads", "1", "--eval-instances", "10", "--eval-interval", "2"]
    out = torchrun(tmp_path, *args, "--total-timesteps", "250", "--checkpoint-interval", "2")
    assert "parameters identical across 2 processes: True" in out
    (run,) = (tmp_path / "runs").iterdir()
    assert len(list(run.glob("events.out.tfevents.*"))) == 1
    assert json.loads((run / "args.json").read_text())["world_size"] == 2
    ckpts = sorted((run / "ckpt").iterdir(), key=lambda p: int(p.stem))
    final = read_checkpoint(ckpts[-1])
    # each iteration adds num_envs x steps for each of the 2 processes
    lines = [
        dict(kv.split("=") for kv in line.split()[:2]) for line in out.splitlines() if line.startswith("iteration=")
    ]
    assert final["global_step"] == int(lines[-1]["global_step"]) >= 250
    assert len(ckpts) >= 2, "a checkpoint of iteration 2 to resume from, and the final one"
    assert all(
        int(b["global_step"]) - int(a["global_step"]) >= 2 * 4 * 7 for a, b in zip(lines, lines[1:], strict=False)
    )
    assert len(final["rank_rng"]) == 2 and final["world_size"] == 2
    # a distributed run resumes under torchrun
    out = torchrun(tmp_path, str(ROOT / "ppo_or.py"), "--resume", str(ckpts[0]), "--threads", "1")
    assert "parameters identical across 2 processes: True" in out
    result = subprocess.run(
        [sys.executable, str(ROOT / "ppo_or.py"), "--resume", str(ckpts[0])],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0 and "written by 2 processes, not 1" in result.stderr


def rollout_data(problem, m, n, traj, seed=0):
    """Fixed rollout tensors of m instances: real states and allowed actions, arbitrary advantages."""
    env = VECTOR_ENVS[problem](num_envs=m, num_nodes=n, n_traj=traj)
    obs, _ = env.reset(seed=seed)
    wrapper = StateWrapper(problem)
    static = wrapper.static(obs)
    rng = np.random.default_rng(seed)
    states, actions, alive = [], [], []
    while not env.terminated.all():
        states.append({k: v for k, v in wrapper.state(static, obs).items() if k not in static})
        alive.append(torch.as_tensor(~env.terminated))
        action = random_allowed_actions(obs["action_mask"], rng)
        actions.append(torch.as_tensor(action))
        obs, *_ = env.step(action)
    t = len(actions)
    gen = torch.Generator().manual_seed(seed)
    batch = {
        "actions": torch.stack(actions),
        "alive": torch.stack(alive),
        "logprobs": -torch.rand(t, m, traj, generator=gen),
        "values": torch.randn(t, m, traj, generator=gen),
        "advantages": torch.randn(t, m, traj, generator=gen),
        "returns": torch.randn(t, m, traj, generator=gen),
    }
    batch["weights"] = torch.rand(t, m, traj, generator=gen) * batch["alive"]
    steps = {key: torch.stack([s[key] for s in states]) for key in states[0]}
    return {"problem": problem, "static": static, "steps": steps, "batch": batch}


@pytest.mark.parametrize("problem", ["tsp", "cvrp"])
def test_two_processes_with_m_instances_update_like_one_with_2m(tmp_path, problem):
    """The first update of 2 processes x M instances equals that of 1 process x 2M instances on the
    same rollout data: batch-norm statistics, live-step counts and advantage normalisation span both
    processes, and gradients are averaged. (In a real run the two set-ups sample different actions,
    since each process draws from its own random stream; hence the fixed data here.)"""
    data = tmp_path / "data.pt"
    torch.save(rollout_data(problem, m=8, n=6, traj=3), data)
    worker = str(ROOT / "tests" / "ddp_update_worker.py")
    torchrun(tmp_path, worker, str(data), str(tmp_path / "two.pt"))
    torchrun(tmp_path, worker, str(data), str(tmp_path / "one.pt"), nproc=False)
    two = torch.load(tmp_path / "two.pt", weights_only=True)
    one = torch.load(tmp_path / "one.pt", weights_only=True)
    torch.manual_seed(0)
    initial = Agent(problem).state_dict()
    for key, value in one.items():
        torch.testing.assert_close(two[key], value, rtol=1e-5, atol=1e-6, msg=key)
    moved = [key for key, value in one.items() if value.is_floating_point() and not torch.equal(value, initial[key])]
    assert len(moved) > 40, "the update must change the parameters"


@pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="needs a CUDA GPU")
def test_amp_runs_on_gpu(tmp_path):
    args = [
        "--num-nodes",
        "10",
        "--num-envs",
        "8",
        "--n-traj",
        "4",
        "--minibatch-size",
        "4",
        "--total-timesteps",
        "200",
    ]
    out = torchrun(tmp_path, str(ROOT / "ppo_or.py"), *args, "--amp", "--eval-interval", "0", nproc=False)
    assert "final checkpoint" in out
