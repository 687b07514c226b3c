"""The multi-task VRP (16 variants): the env's solutions against an independent checker, rewards equal
to costs, solvable masks, agreement with the single env and with the CVRP env, bad input; evaluation
on generated sets, .npz files and Solomon files; PyVRP references."""

import importlib
import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from checks import SHARED, check_vrp_actions, random_allowed_actions, run_random
from hypothesis import given, settings
from hypothesis import strategies as st
from ppoor.data.datasets import load_data
from ppoor.data.references import pyvrp_vrp_tour, solve_reference
from ppoor.envs import ENV_IDS, ENV_VARIANTS, CVRPVectorEnv, VRPVectorEnv
from ppoor.envs.vrp import VARIANTS, check_vrp_instances, instance_variants, vrp_dataset, vrp_instances
from ppoor.models import Agent, load_agent, save_checkpoint
from ppoor.search import decode
from ppoor.search.solutions import InvalidTourError, vrp_cost


def one(static, b):
    return {k: v[b] for k, v in static.items()}


def test_sixteen_registered_variants():
    vrp_ids = {env_id for env_id in ENV_VARIANTS if ENV_IDS[env_id] == "mtvrp"}
    assert len(VARIANTS) == 16 and len(vrp_ids) == 16  # 15 + cvrp-v0 of its own, + mtvrp-v0
    assert vrp_ids == {f"{v}-v0" for v in VARIANTS if v != "cvrp"} | {"mtvrp-v0"}
    env = gym.make_vec("ovrpbltw-v0", num_envs=3, vectorization_mode="vector_entry_point", num_nodes=6, n_traj=2)
    assert env.unwrapped.variant == "ovrpbltw"


@pytest.mark.parametrize("variant", list(VARIANTS))
@settings(max_examples=12, deadline=None)
@given(n=st.integers(2, 14), m=st.integers(1, 3), traj=st.integers(1, 4), seed=st.integers(0, 2**31))
def test_random_trajectories_are_feasible_and_rewards_are_costs(variant, n, m, traj, seed):
    env = VRPVectorEnv(num_envs=m, num_nodes=n, n_traj=traj, variant=variant)
    actions, rewards, _ = run_random(env, np.random.default_rng(seed), seed=seed)
    without_backhauls = variant.replace("vrpb", "vrp") if variant != "vrpb" else "cvrp"  # none drawn
    assert set(instance_variants(env.static)) <= {variant, without_backhauls}
    for b in range(m):
        for j in range(traj):
            cost = check_vrp_actions(actions[b, j], one(env.static, b))
            assert -rewards[b, j].sum() == pytest.approx(cost, rel=1e-9, abs=1e-9)
            steps = int(np.flatnonzero(actions[b, j])[-1]) + 2
            assert vrp_cost(one(env.static, b), actions[b, j, :steps]) == pytest.approx(cost, rel=1e-9)


@settings(max_examples=15, deadline=None)
@given(n=st.integers(2, 12), m=st.integers(1, 6), seed=st.integers(0, 2**31))
def test_mixed_variant_trajectories_are_feasible(n, m, seed):
    env = VRPVectorEnv(num_envs=m, num_nodes=n, n_traj=3, variant="all")
    actions, rewards, _ = run_random(env, np.random.default_rng(seed), seed=seed)
    for b in range(m):
        for j in range(3):
            assert -rewards[b, j].sum() == pytest.approx(check_vrp_actions(actions[b, j], one(env.static, b)))


def test_mixed_variant_draws_each_attribute_with_probability_half():
    static = vrp_instances(np.random.default_rng(0), 4000, 10, "all")
    counts = {v: 0 for v in VARIANTS}
    for v in instance_variants(static):
        counts[v] += 1
    assert all(180 < c < 320 for c in counts.values()), counts  # 250 expected each


@pytest.mark.parametrize("variant", ["cvrp", "vrptw", "ovrpbltw", "all"])
def test_vector_env_equals_single_envs(variant):
    m, n, traj = 3, 9, 4
    vec = VRPVectorEnv(num_envs=m, num_nodes=n, n_traj=traj, variant=variant)
    obs, _ = vec.reset(seed=5)
    singles = [
        gym.make(f"{'mtvrp' if variant in ('all', 'cvrp') else variant}-v0", num_nodes=n, n_traj=traj) for _ in range(m)
    ]
    single_obs = [s.reset(options=one(vec.static, b))[0] for b, s in enumerate(singles)]
    rng = np.random.default_rng(1)
    while not vec.terminated.all():
        a = random_allowed_actions(obs["action_mask"], rng)
        obs, r, term, _, _ = vec.step(a)
        for b, s in enumerate(singles):
            single_obs[b], rs, ts, _, _ = s.step(a[b])
            np.testing.assert_array_equal(rs, r[b])
            np.testing.assert_array_equal(ts, term[b])
            for key, value in single_obs[b].items():
                np.testing.assert_array_equal(value, obs[key][b])


@settings(max_examples=20, deadline=None)
@given(n=st.integers(2, 12), m=st.integers(1, 4), seed=st.integers(0, 2**31))
def test_cvrp_variant_steps_like_the_cvrp_env(n, m, seed):
    """The multi-task env without attributes is the CVRP env: same masks and rewards."""
    static = vrp_instances(np.random.default_rng(seed), m, n, "cvrp")
    vrp = VRPVectorEnv(num_envs=m, num_nodes=n, n_traj=3)
    cvrp = CVRPVectorEnv(num_envs=m, num_nodes=n, n_traj=3)
    obs, _ = vrp.reset(options=static)
    old, _ = cvrp.reset(options={k: static[k] for k in ("depot", "coords")} | {"demand": static["demand_linehaul"]})
    rng = np.random.default_rng(seed)
    while not vrp.terminated.all():
        np.testing.assert_array_equal(obs["action_mask"], old["action_mask"])
        a = random_allowed_actions(obs["action_mask"], rng)
        obs, r, _, _, _ = vrp.step(a)
        old, r_old, _, _, _ = cvrp.step(a)
        np.testing.assert_allclose(r, r_old, rtol=0, atol=1e-12)
        np.testing.assert_allclose(obs["remaining_linehaul"], old["current_load"], atol=1e-12)
    assert cvrp.terminated.all()


def test_generator_follows_rl4co():
    static = vrp_instances(np.random.default_rng(3), 2000, 50, "ovrpbltw")
    lines, backs = static["demand_linehaul"] * 40, static["demand_backhaul"] * 40  # capacity 40 at n = 50
    assert set(np.unique(lines[lines > 0])) == set(range(1, 10)) == set(np.unique(backs[backs > 0]))
    assert abs((backs > 0).mean() - 0.2) < 0.01
    windows, service = static["time_windows"], static["service_time"]
    assert (windows[:, 0] == [0.0, 4.6]).all() and (service[:, 0] == 0).all()
    assert 0.15 <= service[:, 1:].min() and service[:, 1:].max() <= 0.18
    width = windows[:, 1:, 1] - windows[:, 1:, 0]
    assert 0.18 <= width.min() and width.max() <= 0.2
    d0 = np.linalg.norm(static["coords"] - static["depot"][:, None], axis=-1)
    assert (windows[:, 1:, 0] >= d0 - 1e-12).all()  # reachable
    assert (windows[:, 1:, 1] + service[:, 1:] + d0 <= 4.6 + 1e-9).all()  # and back in time
    assert (static["distance_limit"] == 3.0).all() and static["open_route"].all()
    check_vrp_instances(static)  # solvable
    plain = vrp_instances(np.random.default_rng(3), 5, 50, "cvrp")
    assert np.isinf(plain["distance_limit"]).all() and (plain["demand_backhaul"] == 0).all()
    assert np.isinf(plain["time_windows"][..., 1]).all() and not plain["open_route"].any()
    np.testing.assert_array_equal(plain["coords"], vrp_instances(np.random.default_rng(3), 5, 50, "vrptw")["coords"])


def test_checker_rejects_infeasible_tours():
    static = vrp_instances(np.random.default_rng(0), 1, 6, "vrpbltw")
    inst = one(static, 0)
    inst["demand_backhaul"] = np.array([0.0, 0.0, 0.0, 0.0, 0.1, 0.1])
    inst["demand_linehaul"] = np.array([0.1, 0.1, 0.1, 0.1, 0.0, 0.0])
    inst["time_windows"][1:] = [0.0, 10.0]
    inst["time_windows"][0, 1] = 10.0
    inst["distance_limit"] = 100.0
    vrp_cost(inst, np.array([1, 2, 3, 4, 5, 6, 0]))
    with pytest.raises(InvalidTourError, match="after a backhaul"):
        vrp_cost(inst, np.array([1, 5, 2, 3, 4, 6, 0]))
    with pytest.raises(InvalidTourError, match="exactly once"):
        vrp_cost(inst, np.array([1, 2, 3, 4, 5, 0]))
    inst["time_windows"][3] = [0.0, 0.01]
    with pytest.raises(InvalidTourError, match="window closes"):
        vrp_cost(inst, np.array([1, 2, 3, 4, 5, 6, 0]))


def valid_options(m=2, n=4):
    return vrp_instances(np.random.default_rng(0), m, n, "vrpbltw")


def changed(key, fn):
    def change(options):
        options[key] = fn(options[key].copy())
        return options

    return change


def set_at(index, value):
    def fn(a):
        a[index] = value
        return a

    return fn


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (changed("time_windows", set_at((0, 2), [2.0, 1.0])), "opens after it closes"),
        (changed("service_time", set_at((1, 3), -0.1)), "'service_time' must not be negative"),
        (changed("distance_limit", set_at(0, 0.01)), "longer than the distance limit"),
        (changed("time_windows", set_at((0, 0), [0.0, 0.3])), "back at the depot"),
        (
            lambda o: o | {"demand_backhaul": np.concatenate([np.full((2, 1), 0.1), o["demand_backhaul"]], axis=1)},
            "the depot has none",
        ),
        (changed("demand_linehaul", lambda a: a + 0.1), "both a linehaul and a backhaul|neither"),
        (changed("demand_linehaul", set_at((0, 0), 1.5)), "capacity"),
        (changed("coords", lambda a: a + 2), "unit square"),
        (lambda o: {k: v for k, v in o.items() if k != "open_route"}, "missing"),
    ],
)
def test_invalid_vrp_options_raise(change, message):
    options = valid_options()
    options["demand_linehaul"][:, :] = np.where(options["demand_backhaul"] > 0, 0.0, 0.1)
    with pytest.raises(ValueError, match=message):
        VRPVectorEnv(num_envs=2, num_nodes=4).reset(options=change(options))


def test_bad_variant_raises():
    with pytest.raises(ValueError, match="variant must be one of"):
        VRPVectorEnv(num_envs=1, num_nodes=4, variant="vrpx")


# ---- evaluation: test sets, .npz files, Solomon files, PyVRP references ----

SOLOMON = SHARED / "benchmarks" / "solomon"
evaluator = importlib.import_module("ppoor.eval")


@pytest.fixture(scope="module")
def vrp_checkpoint(tmp_path_factory):
    """An untrained VRP agent (size 8) saved as a vrptw-v0 checkpoint of ppo_or.py."""
    path = tmp_path_factory.mktemp("ckpt") / "vrptw.pt"
    torch.manual_seed(0)
    payload = {"problem": "mtvrp", "num_nodes": 8, "model_config": {}, "model": Agent("mtvrp").state_dict()}
    save_checkpoint(payload | {"args": {"env_id": "vrptw-v0"}}, path)
    return path


def evaluate(tmp_path, *args) -> dict:
    output = tmp_path / "results.json"
    evaluator.main(evaluator.tyro.cli(evaluator.Args, args=[*args, "--output", str(output), "--threads", "1"]))
    return json.loads(output.read_text())


@pytest.mark.parametrize("decode", [[], ["--decode", "multi-greedy", "--augment", "8"], ["--decode", "sampling"]])
def test_eval_npz_tours_pass_the_checker(tmp_path, vrp_checkpoint, decode):
    """The .npz contract in raw units with absent attributes left out (no limit, closed routes);
    the tours written by --output are feasible for the file's instances and cost what is reported."""
    rng = np.random.default_rng(0)
    m, n = 6, 8
    drawn = vrp_instances(rng, m, n, "vrpbtw")
    capacity = np.full(m, 30)
    data = {
        "depot": drawn["depot"],
        "coords": drawn["coords"],
        "demand_linehaul": np.rint(drawn["demand_linehaul"] * 30).astype(int),
        "demand_backhaul": np.rint(drawn["demand_backhaul"] * 30).astype(int),
        "capacity": capacity,
        "time_windows": drawn["time_windows"],
        "service_time": drawn["service_time"],
    }
    path = tmp_path / "vrpbtw8.npz"
    np.savez(path, **data)
    out = evaluate(tmp_path, "--checkpoint", str(vrp_checkpoint), "--data", str(path), *decode)
    for b, tour in enumerate(out["tours"]):
        instance = {k: v[b] for k, v in drawn.items()}
        assert check_vrp_actions(tour, instance) == pytest.approx(out["lengths"][b], rel=1e-9)


def test_eval_generated_variants_and_pyvrp_references(tmp_path, vrp_checkpoint):
    pytest.importorskip("pyvrp")
    for variant in ("ovrpltw", "vrpb"):
        out = evaluate(
            tmp_path,
            *("--checkpoint", str(vrp_checkpoint), "--variant", variant, "--num-instances", "3"),
            *("--reference-solver", "pyvrp", "--solver-seconds", "0.2", "--decode", "multi-greedy"),
        )
        data = vrp_dataset(variant, 8, "test", 3)
        assert out["names"][0] == f"{variant}-test-0"
        for b, tour in enumerate(out["tours"]):
            assert check_vrp_actions(tour, one(data, b)) == pytest.approx(out["lengths"][b])
        assert all(g > -1e-6 for g in out["gaps"]), "an untrained model beat PyVRP"


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_pyvrp_reference_tours_pass_the_checker(variant):
    pytest.importorskip("pyvrp")
    (data,) = load_data("test", "mtvrp", 10, 2, variant=variant)
    for b in range(2):
        tour = pyvrp_vrp_tour(data, b, 0.1)
        assert solve_reference(data, b, "pyvrp", 0.1) > 0
        assert check_vrp_actions(tour, one(data.instances, b)) == pytest.approx(data.reported_length(b, tour))


@pytest.mark.skipif(not SOLOMON.exists(), reason=f"{SOLOMON} is absent (not beside this clone)")
def test_solomon_files_reproduce_every_best_known_cost():
    """All 56 instances read and scaled; each best-known .sol, measured by the benchmark's rule (edges
    truncated to one decimal), costs exactly the listed distance, which is the reference."""
    import vrplib

    (group,) = load_data(str(SOLOMON), "mtvrp", 100)
    assert len(group.names) == 56 and group.names[0] == "C101"
    table = {
        row.split(",")[0]: float(row.split(",")[2]) for row in (SOLOMON / "best_known.csv").read_text().split()[1:]
    }
    for i, name in enumerate(group.names):
        routes = vrplib.read_solution(SOLOMON / f"{name}.sol")["routes"]
        tour = np.array([c for route in routes for c in [*route, 0]])
        assert group.reported_length(i, tour) == pytest.approx(table[name], abs=1e-6)
        assert group.references[i] == table[name]
    span = (group.points[0].max(0) - group.points[0].min(0)).max()
    assert group.instances["time_windows"][0, 0, 1] == pytest.approx(1236 / span)  # C101's horizon, scaled


@pytest.mark.skipif(not SOLOMON.exists(), reason=f"{SOLOMON} is absent (not beside this clone)")
def test_eval_solomon_table(tmp_path, vrp_checkpoint, capsys):
    out = evaluate(tmp_path, "--checkpoint", str(vrp_checkpoint), "--data", str(SOLOMON), "--num-instances", "2")
    assert out["names"] == ["C101", "C102"] and out["references"] == [827.3, 827.3]
    assert "mean gap per class: C1" in capsys.readouterr().out


CHECKPOINTS = Path(__file__).resolve().parents[1] / "checkpoints"


@pytest.mark.parametrize(
    ("name", "variant", "greedy", "multi_greedy"),
    [("vrptw20", "vrptw", 9.4316, 9.0597), ("mtvrp20", "ovrpbltw", 6.4702, 6.2664), ("mtvrp20", "all", 6.7034, 6.3683)],
)
def test_shipped_checkpoints_reproduce_their_figures(name, variant, greedy, multi_greedy):
    """The weights in checkpoints/ (README's tables) decode the first 100 test instances of a
    variant to the mean costs measured when they were shipped (PyVRP: 8.7672 on these VRPTW20)."""
    torch.set_num_threads(1)
    agent, ckpt = load_agent(CHECKPOINTS / f"{name}.pt", problem="mtvrp")
    assert "optimizer" not in ckpt and ckpt["num_nodes"] == 20
    data = vrp_dataset(variant, 20, "test", 100)
    assert decode(agent, data, "greedy").lengths.mean() == pytest.approx(greedy, rel=2e-3)
    assert decode(agent, data, "multi-greedy").lengths.mean() == pytest.approx(multi_greedy, rel=2e-3)
