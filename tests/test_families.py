"""The further constraint families (multiple resources, pickup and delivery, prize collecting; multiple
depots are an attribute of the VRP env, tests/test_vrp.py): random
solutions against independent checkers, rewards equal to costs, masks that always allow an action,
decoded solutions, reference solvers, bad input, training and evaluation end to end."""

import importlib
import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from checks import (
    check_mrcvrp_actions,
    check_op_actions,
    check_pctsp_actions,
    check_pcvrp_actions,
    check_pdp_actions,
    random_allowed_actions,
    run_random,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from ppoor.checkers.tours import COSTS, InvalidTourError
from ppoor.envs import ENV_IDS, FAMILY_ENVS, VECTOR_ENVS, standard_dataset
from ppoor.models import Agent
from ppoor.models.checkpoints import save_checkpoint
from ppoor.search import Decoding, decode

FAMILY_IDS = list(FAMILY_ENVS)
CHECKPOINTS = Path(__file__).resolve().parents[1] / "checkpoints" / "families"


def check(problem: str, actions, instance) -> float:
    """The independent checker of ``problem`` on one trajectory's padded actions; returns its cost."""
    if problem == "mrcvrp":
        return check_mrcvrp_actions(actions, instance["depot"], instance["coords"], instance["demand"])
    if problem == "pdp":
        return check_pdp_actions(actions, instance["depot"], instance["coords"], instance["load"])
    checkers = {"op": check_op_actions, "pctsp": check_pctsp_actions, "pcvrp": check_pcvrp_actions}
    return checkers[problem](actions, instance)


def make(env_id: str, m: int, n: int, traj: int):
    return gym.make_vec(env_id, num_envs=m, vectorization_mode="vector_entry_point", num_nodes=n, n_traj=traj)


@pytest.mark.parametrize("env_id", FAMILY_IDS)
@settings(max_examples=15, deadline=None)
@given(half=st.integers(1, 8), m=st.integers(1, 3), traj=st.integers(1, 4), seed=st.integers(0, 2**31))
def test_random_trajectories_are_feasible_and_rewards_are_costs(env_id, half, m, traj, seed):
    n = 2 * half + 2  # even (pickup and delivery pairs)
    env = make(env_id, m, n, traj)
    problem = ENV_IDS[env_id]
    actions, rewards, done = run_random(env.unwrapped, np.random.default_rng(seed), seed=seed)
    for b in range(m):
        instance = {k: v[b] for k, v in env.unwrapped.static.items()}
        for j in range(traj):
            cost = check(problem, actions[b, j], instance)
            assert -rewards[b, j].sum() == pytest.approx(cost, abs=1e-6)
            solution = actions[b, j, : done[b, j] + 1]  # what decoding reports
            assert COSTS[problem](instance, solution) == pytest.approx(cost, abs=1e-6)


@pytest.mark.parametrize("env_id", FAMILY_IDS)
def test_single_env_follows_the_vector_env(env_id):
    problem = ENV_IDS[env_id]
    vector = make(env_id, 2, 8, 3).unwrapped
    obs, _ = vector.reset(seed=5)
    single = gym.make(env_id, num_nodes=8, n_traj=3).unwrapped
    single_obs, _ = single.reset(options={k: v[1] for k, v in vector.static.items()})
    rng = np.random.default_rng(0)
    while not vector.terminated.all():
        actions = random_allowed_actions(obs["action_mask"], rng)
        assert np.array_equal(obs["action_mask"][1], single_obs["action_mask"]), problem
        obs, reward, _, _, _ = vector.step(actions)
        single_obs, single_reward, _, _, _ = single.step(actions[1])
        assert np.allclose(reward[1], single_reward)


def test_masks_bind():
    """The constraints are real: a two-resource customer that fits one dimension only is masked; a
    delivery before its pickup is masked; an orienteering customer beyond the budget is masked; the
    PCTSP depot waits for the minimum prize."""
    env = VECTOR_ENVS["mrcvrp"](num_envs=1, num_nodes=2)
    obs, _ = env.reset(
        options={"depot": [[0.5, 0.5]], "coords": [[[0.1, 0.1], [0.9, 0.9]]], "demand": [[[0.3, 0.8], [0.6, 0.3]]]}
    )
    obs, *_ = env.step(np.array([[1]]))
    assert not obs["action_mask"][0, 0, 2]  # 0.8 + 0.3 of resource 1 overflows, resource 0 would fit
    env = VECTOR_ENVS["pdp"](num_envs=1, num_nodes=4)
    obs, _ = env.reset(options={"depot": [[0.5, 0.5]], "coords": [[[0.1, 0.1], [0.2, 0.2], [0.3, 0.3], [0.4, 0.4]]],
                                "load": [[0.7, 0.5]]})  # fmt: skip
    assert obs["action_mask"][0, 0].tolist() == [False, True, True, False, False]
    obs, *_ = env.step(np.array([[1]]))
    assert obs["action_mask"][0, 0].tolist() == [False, False, False, True, False]  # pair 2 does not fit on top
    env = VECTOR_ENVS["op"](num_envs=1, num_nodes=2)
    obs, _ = env.reset(options={"depot": [[0.0, 0.0]], "coords": [[[0.5, 0.0], [1.0, 1.0]]], "prize": [[1.0, 5.0]],
                                "max_length": [1.5]})  # fmt: skip
    assert obs["action_mask"][0, 0].tolist() == [False, True, False]  # customer 2 is 2.83 away and back
    env = VECTOR_ENVS["pctsp"](num_envs=1, num_nodes=2)
    obs, _ = env.reset(options={"depot": [[0.0, 0.0]], "coords": [[[0.5, 0.0], [1.0, 1.0]]], "prize": [[0.4, 0.7]],
                                "penalty": [[0.1, 0.1]]})  # fmt: skip
    obs, *_ = env.step(np.array([[1]]))
    assert obs["action_mask"][0, 0].tolist() == [False, False, True]  # 0.4 < 1 collected: go on


@pytest.mark.parametrize(
    ("problem", "instance", "tour", "message"),
    [
        ("mrcvrp", {"depot": [0, 0], "coords": [[0, 1], [1, 0]], "demand": [[0.6, 0.1], [0.5, 0.1]]}, [1, 2, 0], "capacity"),
        ("mrcvrp", {"depot": [0, 0], "coords": [[0, 1], [1, 0]], "demand": [[0.1, 0.1], [0.1, 0.1]]}, [1, 0], "exactly once"),
        ("pdp", {"depot": [0, 0], "coords": [[0, 1], [1, 0]], "load": [0.0]}, [2, 1, 0], "before picking"),
        ("pdp", {"depot": [0, 0], "coords": [[0, 1], [1, 0], [1, 1], [0.5, 0.5]], "load": [0.6, 0.6]}, [1, 2, 3, 4, 0], "capacity"),
        ("op", {"depot": [0, 0], "coords": [[0, 1], [1, 0]], "prize": [1, 1], "max_length": 2.0}, [1, 2, 0], "longer"),
        ("op", {"depot": [0, 0], "coords": [[0, 1], [1, 0]], "prize": [1, 1], "max_length": 9.0}, [1, 1, 0], "twice"),
        ("pctsp", {"depot": [0, 0], "coords": [[0, 1], [1, 0]], "prize": [0.5, 0.6], "penalty": [1, 1]}, [1, 0], "below the minimum"),
        ("pcvrp", {"depot": [0, 0], "coords": [[0, 1], [1, 0]], "demand": [0.6, 0.6], "prize": [1, 1]}, [1, 2, 0], "capacity"),
        ("pcvrp", {"depot": [0, 0], "coords": [[0, 1], [1, 0]], "demand": [0.1, 0.1], "prize": [1, 1]}, [1, 0, 0, 2, 0], "empty route"),
    ],
)  # fmt: skip
def test_solution_checkers_reject_infeasible_solutions(problem, instance, tour, message):
    instance = {k: np.asarray(v, dtype=np.float64) for k, v in instance.items()}
    with pytest.raises(InvalidTourError, match=message):
        COSTS[problem](instance, np.asarray(tour))


def test_prize_costs_follow_their_definitions():
    inst = {k: np.asarray(v, dtype=np.float64) for k, v in
            {"depot": [0, 0], "coords": [[0, 1], [1, 0]], "prize": [0.7, 0.5], "penalty": [0.25, 0.5],
             "max_length": 3.0, "demand": [0.5, 0.5]}.items()}  # fmt: skip
    assert COSTS["op"](inst, np.array([1, 0])) == pytest.approx(-0.7)
    assert COSTS["pctsp"](inst, np.array([1, 2, 0])) == pytest.approx(2 + np.sqrt(2))
    pctsp_skip = {k: inst[k] for k in ("depot", "coords", "penalty")} | {"prize": np.array([1.2, 0.5])}
    assert COSTS["pctsp"](pctsp_skip, np.array([1, 0])) == pytest.approx(2 + 0.5)  # + penalty of customer 2
    assert COSTS["pcvrp"](inst, np.array([0])) == pytest.approx(1.2)  # nothing served: every prize lost
    assert COSTS["pcvrp"](inst, np.array([2, 0, 0])) == pytest.approx(2 + 0.7)


@pytest.mark.parametrize(
    ("env_id", "change", "message"),
    [
        ("op-v0", {"prize": -1.0}, "negative prize"),
        ("pctsp-v0", {"penalty": -1.0}, "negative penalty"),
        ("pcvrp-v0", {"prize": -0.5}, "negative prize"),
        ("mrcvrp-v0", {"demand": 1.5}, "above 1"),
        ("cpdp-v0", {"load": 1.5}, "more than the vehicle capacity"),
        ("op-v0", {"max_length": 0.0}, "must be positive"),
    ],
)
def test_bad_instances_fail_with_a_message(env_id, change, message):
    env = make(env_id, 2, 6, 1).unwrapped
    env.reset(seed=0)
    options = {k: v.copy() for k, v in env.static.items()}
    ((key, value),) = change.items()
    options[key].reshape(-1)[0] = value
    with pytest.raises(ValueError, match=message):
        env.reset(options=options)


def test_a_delivery_without_its_pickup_fails_with_a_message():
    with pytest.raises(ValueError, match="delivery without its pickup"):
        make("pdp-v0", 1, 7, 1)


@pytest.fixture(scope="module")
def family_agents():
    torch.manual_seed(0)
    return {problem: Agent(problem, embed_dim=32, num_heads=4, num_layers=1, ff_hidden=64).eval() for problem in
            ("mrcvrp", "pdp", "op", "pctsp", "pcvrp")}  # fmt: skip


@pytest.mark.parametrize("env_id", ["mrcvrp-v0", "cpdp-v0", "op-v0", "op-const-v0", "pctsp-v0", "pcvrp-v0"])
@pytest.mark.parametrize("how", ["greedy", "multi-greedy", "sampling"])
def test_decoded_solutions_pass_the_independent_checker(family_agents, env_id, how):
    problem = ENV_IDS[env_id]
    variant = FAMILY_ENVS[env_id][2]
    data = standard_dataset(problem, 10, "test", 6, variant)
    result = decode(family_agents[problem], data, Decoding(how, augment=8 if how == "greedy" else 1, num_samples=4))
    for b, tour in enumerate(result.tours):
        instance = {k: v[b] for k, v in data.items()}
        padded = np.concatenate([tour, tour[-1:], tour[-1:]])  # a finished trajectory repeats its last action
        assert check(problem, padded, instance) == pytest.approx(result.lengths[b], abs=1e-6)


def test_multi_greedy_is_no_worse_than_greedy(family_agents):
    data = standard_dataset("op", 10, "test", 8, "dist")
    greedy = decode(family_agents["op"], data, "greedy").lengths
    multi = decode(family_agents["op"], data, "multi-greedy").lengths
    assert (multi <= greedy + 1e-9).all()


@pytest.mark.parametrize(("problem", "variant", "solver"), [
    ("mrcvrp", None, "pyvrp"), ("pcvrp", None, "pyvrp"), ("pdp", "cpdp", "ortools"), ("op", "dist", "ortools"),
    ("pctsp", None, "ortools"),
])  # fmt: skip
def test_reference_tours_pass_the_checker_and_beat_random_ones(problem, variant, solver):
    pytest.importorskip({"pyvrp": "pyvrp", "ortools": "ortools"}[solver])
    from ppoor.solvers.references import FAMILY_SOLVERS

    data = standard_dataset(problem, 8, "test", 3, variant)
    env = VECTOR_ENVS[problem](num_envs=3, num_nodes=8, n_traj=16, **({"variant": variant} if variant else {}))
    _, rewards, _ = run_random(env, np.random.default_rng(0), options=data)
    for b in range(3):
        instance = {k: v[b] for k, v in data.items()}
        tour = FAMILY_SOLVERS[problem](instance, 0.5)
        cost = check(problem, np.concatenate([tour, tour[-1:]]), instance)
        assert cost <= (-rewards[b].sum(-1)).min() + 1e-6  # no worse than the best of 16 random solutions


def test_ppo_trains_and_eval_scores_every_family(tmp_path, monkeypatch, capsys):
    """One PPO iteration per family through ppo_or.py, then eval.py on an .npz file with references,
    --output and --plot."""
    monkeypatch.chdir(tmp_path)
    ppo_or = importlib.import_module("ppoor.ppo_or")
    eval_script = importlib.import_module("ppoor.eval")
    for env_id in ["mrcvrp-v0", "pdp-v0", "op-v0", "pctsp-v0", "pcvrp-v0", "mdvrptw-v0"]:
        ppo_or.main(ppo_or.Args(env_id=env_id, num_nodes=6, num_envs=8, total_timesteps=8, eval_interval=0,
                                checkpoint_interval=0, threads=1))  # fmt: skip
    problem_runs = sorted((tmp_path / "runs").iterdir())
    assert len(problem_runs) == 6
    op_run = next(r for r in problem_runs if r.name.startswith("op-v0"))
    data = standard_dataset("op", 6, "test", 4, "unif")
    np.savez(tmp_path / "op.npz", **data, reference=np.full(4, -6.0))  # every prize: at most 1 each
    out, plot = tmp_path / "out.json", tmp_path / "routes.png"
    eval_script.main(eval_script.Args(checkpoint=str(op_run), data=str(tmp_path / "op.npz"), decode="multi-greedy",
                                      output=str(out), plot=str(plot), cuda=False))  # fmt: skip
    result = json.loads(out.read_text())
    assert result["problem"] == "op" and len(result["tours"]) == 4 and plot.stat().st_size > 0
    prizes = [-sum(data["prize"][b][np.asarray(t[:-1]) - 1]) for b, t in enumerate(result["tours"])]
    assert result["lengths"] == pytest.approx(prizes)
    assert result["gaps"] == pytest.approx([100 * (c + 6) / 6 for c in prizes])  # (cost - ref) / |ref|


def test_family_checkpoints_round_trip(tmp_path, family_agents):
    from ppoor.models import load_agent

    config = {"embed_dim": 32, "num_heads": 4, "num_layers": 1, "ff_hidden": 64}
    payload = {"problem": "op", "num_nodes": 10, "model_config": config, "model": family_agents["op"].state_dict()}
    save_checkpoint(payload, tmp_path / "op.pt")
    agent, ckpt = load_agent(tmp_path / "op.pt")
    assert ckpt["problem"] == "op" and agent.problem == "op"


@pytest.mark.parametrize(
    ("name", "greedy", "multi_greedy"),
    [
        ("mrcvrp", 7.1603, 6.8017),
        ("pdp", 5.1889, 5.0346),
        ("cpdp", 5.9380, 5.6242),
        ("op", -4.8810, -5.2762),
        ("pctsp", 3.5401, 3.3794),
        ("pcvrp", 3.1661, 3.1453),
    ],
)
def test_shipped_family_checkpoints_reproduce_their_figures(name, greedy, multi_greedy):
    """The weights in checkpoints/families/ (README's table) decode the first 50 test instances of
    their env (size 20) to the mean costs measured when they were shipped."""
    from ppoor.models import load_agent

    torch.set_num_threads(1)
    agent, ckpt = load_agent(CHECKPOINTS / f"{name}20.pt")
    assert "optimizer" not in ckpt and ckpt["num_nodes"] == 20
    data = standard_dataset(ckpt["problem"], 20, "test", 50, FAMILY_ENVS[ckpt["args"]["env_id"]][2])
    assert decode(agent, data, "greedy").lengths.mean() == pytest.approx(greedy, rel=2e-3)
    assert decode(agent, data, "multi-greedy").lengths.mean() == pytest.approx(multi_greedy, rel=2e-3)


def test_forbidden_starts_repeat_the_first_allowed_action(family_agents):
    """An orienteering customer beyond the length budget cannot start a tour: multi-greedy (and the
    trainer's multi-start rollouts, through the same allowed_starts) starts that trajectory with the
    first allowed action instead."""
    from ppoor.search import allowed_starts

    mask = torch.tensor([[[False, True, False, True], [False, True, False, True]]])
    assert allowed_starts(torch.tensor([[2, 3]]), mask).tolist() == [[1, 3]]
    data = standard_dataset("op", 6, "test", 2, "dist")
    data["coords"][:, 0] = 1 - np.round(data["depot"])  # customer 1 in the corner farthest from the depot
    data["max_length"][:] = 2 * np.hypot(*(data["coords"][:, 0] - data["depot"]).T).min() - 0.01
    env = VECTOR_ENVS["op"](num_envs=2, num_nodes=6)
    obs, _ = env.reset(options=data)
    assert not obs["action_mask"][:, 0, 1].any()  # customer 1 is out of reach in both
    result = decode(family_agents["op"], data, "multi-greedy")
    assert all(1 not in tour for tour in result.tours)
