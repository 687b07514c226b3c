"""The multi-task VRP (RouteFinder's 48 variants): the env's solutions against an independent checker,
rewards equal to costs, solvable and exact masks, agreement with the single env and with the CVRP env,
RouteFinder's generator, bad input; evaluation on generated sets, .npz files (ours and RouteFinder's,
with its solution files) and Solomon files; PyVRP references."""

import importlib
import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from checks import SHARED, check_vrp_actions, random_allowed_actions, run_random
from hypothesis import example, given, settings
from hypothesis import strategies as st
from ppoor.checkers.tours import InvalidTourError, vrp_cost
from ppoor.data.datasets import load_data
from ppoor.envs import ENV_IDS, ENV_VARIANTS, CVRPVectorEnv, VRPVectorEnv
from ppoor.envs.vrp import (
    CLASSIC,
    GROUPS,
    VARIANTS,
    check_vrp_instances,
    instance_variants,
    variant_group,
    variant_instances,
    variant_name,
    vehicle_capacity,
    vrp_dataset,
    vrp_instances,
)
from ppoor.models import Agent, load_agent, save_checkpoint
from ppoor.search import decode
from ppoor.solvers.references import pyvrp_vrp_tour, solve_reference
from ppoor.training import routing


def one(static, b):
    return {k: v[b] for k, v in static.items()}


def test_48_registered_variants():
    vrp_ids = {env_id for env_id in ENV_VARIANTS if ENV_IDS[env_id] == "mtvrp"}
    assert len(VARIANTS) == 48 and len(CLASSIC) == 16 and list(VARIANTS)[:16] == list(CLASSIC)
    assert sum(v.mixed for v in VARIANTS.values()) == 16 and sum(v.multi_depot for v in VARIANTS.values()) == 24
    # 47 + cvrp-v0 of its own, the mixes mtvrp-v0 (16) and mtvrp48-v0 (48), mdvrp-v0 = mdcvrp-v0
    assert vrp_ids == {f"{v}-v0" for v in VARIANTS if v != "cvrp"} | {"mtvrp-v0", "mtvrp48-v0", "mdvrp-v0"}
    assert ENV_VARIANTS["mtvrp-v0"] == "classic" and ENV_VARIANTS["mtvrp48-v0"] == "all"
    env = gym.make_vec("ovrpbltw-v0", num_envs=3, vectorization_mode="vector_entry_point", num_nodes=6, n_traj=2)
    assert env.unwrapped.variant == "ovrpbltw" and env.unwrapped.num_depots == 1
    env = gym.make_vec("mdovrpmbltw-v0", num_envs=2, vectorization_mode="vector_entry_point", num_nodes=6)
    assert env.unwrapped.num_depots == 3 and env.unwrapped.num_actions == 9
    assert {variant_name(v) for v in VARIANTS.values()} == set(VARIANTS)


def test_variant_groups_are_routefinders():
    groups = [variant_group(name) for name in VARIANTS]
    assert [groups.count(g) for g in GROUPS] == [16, 8, 24]
    assert {variant_group(name) for name in CLASSIC} == {"classic"}
    assert variant_group("mdovrpmbltw") == "multi_depot" and variant_group("vrpmb") == "mixed_backhaul"


@given(seed=st.integers(0, 2**16))
@settings(max_examples=3, deadline=None)
def test_periodic_evaluation_logs_each_group_of_a_mixed_set(seed):
    torch.manual_seed(seed)
    agent = Agent("mtvrp")
    mixed = vrp_instances(np.random.default_rng(seed), 24, 8, "all")
    names = instance_variants(mixed)
    references = np.random.default_rng(seed).uniform(1.0, 3.0, len(names))
    out = routing.evaluate(agent, mixed, references)
    present = sorted({variant_group(name) for name in names})
    assert sorted(k.split("/")[1].removesuffix("_multi_greedy_length") for k in out if "_multi_greedy_length" in k and
                  k != "eval/multi_greedy_length") == (present if len(present) > 1 else [])  # fmt: skip
    lengths = decode(agent.eval(), mixed, "multi-greedy").lengths
    weights = {g: sum(variant_group(n) == g for n in names) for g in present}
    if len(present) > 1:  # the groups' means recombine to the whole set's
        whole = sum(out[f"eval/{g}_multi_greedy_length"] * w for g, w in weights.items()) / len(names)
        assert whole == pytest.approx(out["eval/multi_greedy_length"]) == pytest.approx(lengths.mean())
        gaps = sum(out[f"eval/{g}_multi_greedy_gap"] * w for g, w in weights.items()) / len(names)
        assert gaps == pytest.approx(out["eval/multi_greedy_gap"])
    classic = vrp_instances(np.random.default_rng(seed), 8, 8, "classic")
    assert not any(
        k.startswith(("eval/classic", "eval/multi_depot")) for k in routing.evaluate(agent, classic, None)
    )


def without_backhauls(variant: str) -> str:
    """The variant an instance of ``variant`` reads as when no customer was drawn a backhaul."""
    return variant_name(VARIANTS[variant]._replace(backhaul=False, mixed=False))


@pytest.mark.parametrize("variant", list(VARIANTS))
@settings(max_examples=5, deadline=None)
@given(n=st.integers(3, 14), m=st.integers(1, 3), traj=st.integers(1, 4), seed=st.integers(0, 2**31))
def test_random_trajectories_are_feasible_and_rewards_are_costs(variant, n, m, traj, seed):
    env = VRPVectorEnv(num_envs=m, num_nodes=n, n_traj=traj, variant=variant)
    actions, rewards, done = run_random(env, np.random.default_rng(seed), seed=seed)
    assert set(instance_variants(env.static)) <= {variant, without_backhauls(variant)}
    for b in range(m):
        for j in range(traj):
            cost = check_vrp_actions(actions[b, j], one(env.static, b))
            assert -rewards[b, j].sum() == pytest.approx(cost, rel=1e-9, abs=1e-9)
            assert vrp_cost(one(env.static, b), actions[b, j, : done[b, j] + 1]) == pytest.approx(cost, rel=1e-9)


@pytest.mark.parametrize("variant", ["all", "classic"])
@settings(max_examples=10, deadline=None)
@given(n=st.integers(3, 12), m=st.integers(1, 6), seed=st.integers(0, 2**31))
def test_mixed_variant_trajectories_are_feasible(variant, n, m, seed):
    env = VRPVectorEnv(num_envs=m, num_nodes=n, n_traj=3, variant=variant)
    actions, rewards, _ = run_random(env, np.random.default_rng(seed), seed=seed)
    for b in range(m):
        for j in range(3):
            assert -rewards[b, j].sum() == pytest.approx(check_vrp_actions(actions[b, j], one(env.static, b)))


@pytest.mark.parametrize(("mix", "count", "low", "high"), [("classic", 4000, 180, 320), ("all", 4800, 60, 140)])
def test_mixes_draw_each_variant_uniformly(mix, count, low, high):
    static = vrp_instances(np.random.default_rng(0), count, 30, mix)
    names = instance_variants(static)
    counts = {v: names.count(v) for v in (CLASSIC if mix == "classic" else VARIANTS)}
    assert set(names) <= set(counts) and all(low < c < high for c in counts.values()), counts  # 250 / 100 expected


@pytest.mark.parametrize("variant", ["vrpmb", "vrpb", "mdovrpmbltw", "vrpmbltw", "mdvrpl", "mdvrptw", "vrpl", "mdovrpl"])
@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 2**31))
@example(seed=1065)  # mdvrpl: a route 1.3e-5 over its limit, refused by the mask, passed the checker's old 1e-4 tolerance
def test_mask_offers_exactly_the_feasible_customers(variant, seed):
    """At every step of random rollouts, a customer is allowed if and only if the route so far, that
    customer and the return pass the independent checker (the other customers then served alone)."""
    rng = np.random.default_rng(seed)
    m, n, traj = 3, 9, 2
    env = VRPVectorEnv(num_envs=m, num_nodes=n, n_traj=traj, variant=variant)
    obs, _ = env.reset(seed=seed)
    k = env.num_depots
    history = [[[] for _ in range(traj)] for _ in range(m)]
    while not env.terminated.all():
        for b in range(m):
            instance = one(env.static, b)
            for j in range(traj):
                if env.terminated[b, j]:
                    continue
                depot = int(env.route_depot[b, j])
                for c in np.flatnonzero(env.unvisited[b, j]):
                    tour, here = [*history[b][j], int(c), depot], depot
                    for rest in np.flatnonzero(env.unvisited[b, j]):
                        if rest != c:  # each remaining customer alone, from a depot that can serve it
                            alone = next(d for d in range(k) if env._alone[b, d, rest])
                            tour += ([alone] if alone != here else []) + [int(rest), alone]
                            here = alone
                    try:
                        check_vrp_actions(tour, instance)
                        feasible = True
                    except AssertionError:
                        feasible = False
                    assert feasible == bool(obs["action_mask"][b, j, c]), (variant, tour)
        actions = random_allowed_actions(obs["action_mask"], rng)
        for b in range(m):
            for j in range(traj):
                if not env.terminated[b, j]:
                    history[b][j].append(int(actions[b, j]))
        obs, *_ = env.step(actions)


def test_mixed_backhaul_overflow_mid_route_is_refused():
    """Capacity 1; deliveries 0.5 and 0.3, a pickup of 0.4. Picking up first, then delivering 0.5,
    leaves no room for the 0.3 delivery: it rode from the depot, so the load after the pickup would be
    1.2. RouteFinder's rule (each delivery against the room left by pickups) would allow it; the
    checker refuses the route and the mask never offers it."""
    instance = {
        "depots": np.array([[0.5, 0.5]]),
        "coords": np.array([[0.4, 0.5], [0.6, 0.5], [0.5, 0.6]]),
        "demand_linehaul": np.array([0.5, 0.3, 0.0]),
        "demand_backhaul": np.array([0.0, 0.0, 0.4]),
        "backhaul_class": np.array(2.0),
        "time_windows": np.array([[0.0, np.inf]] * 4),
        "service_time": np.zeros(4),
        "distance_limit": np.array(np.inf),
        "open_route": np.array(False),
    }
    with pytest.raises(InvalidTourError, match="exceeds the vehicle capacity"):
        vrp_cost(instance, np.array([3, 1, 2, 0]))
    with pytest.raises(AssertionError, match="above capacity"):
        check_vrp_actions([3, 1, 2, 0], instance)
    assert vrp_cost(instance, np.array([1, 3, 2, 0])) > 0  # deliver 0.5 first: 0.8, 0.3, 0.7, 0.4 on board
    env = VRPVectorEnv(num_envs=1, num_nodes=3, n_traj=1, variant="vrpmb")
    obs, _ = env.reset(options={key: np.asarray(v)[None] for key, v in instance.items()})
    obs, *_ = env.step(np.array([[3]]))
    obs, *_ = env.step(np.array([[1]]))
    assert not obs["action_mask"][0, 0, 2] and obs["action_mask"][0, 0, 0]
    np.testing.assert_allclose(obs["remaining_linehaul"], [[0.1]])  # 0.9 was on board after the pickup


@pytest.mark.parametrize("variant", ["cvrp", "vrptw", "ovrpbltw", "all", "mdovrpmbltw"])
def test_vector_env_equals_single_envs(variant):
    m, n, traj = 3, 9, 4
    vec = VRPVectorEnv(num_envs=m, num_nodes=n, n_traj=traj, variant=variant)
    obs, _ = vec.reset(seed=5)
    singles = [
        gym.make({"cvrp": "mtvrp-v0", "all": "mtvrp48-v0"}.get(variant, f"{variant}-v0"), num_nodes=n, n_traj=traj)
        for _ in range(m)
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
    old, _ = cvrp.reset(
        options={"depot": static["depots"][:, 0], "coords": static["coords"], "demand": static["demand_linehaul"]}
    )
    rng = np.random.default_rng(seed)
    while not vrp.terminated.all():
        np.testing.assert_array_equal(obs["action_mask"], old["action_mask"])
        a = random_allowed_actions(obs["action_mask"], rng)
        obs, r, _, _, _ = vrp.step(a)
        old, r_old, _, _, _ = cvrp.step(a)
        np.testing.assert_allclose(r, r_old, rtol=0, atol=1e-12)
        np.testing.assert_allclose(obs["remaining_linehaul"], old["current_load"], atol=1e-12)
    assert cvrp.terminated.all()


ROUTEFINDER_VALUES = [  # printed by RouteFinder's generate_mtvrp_data (routefinder/data/generate.py) after np.random.seed
    # (variant, n, seed, instance, key, index, value)
    ("cvrp", 50, 1234, 0, "depots", (0, 0), 0.191519454),
    ("cvrp", 50, 1234, 0, "coords", (1, 1), 0.272592604),
    ("cvrp", 50, 1234, 0, "demand_linehaul", 1, 0.075000003),
    ("vrpbltw", 100, 1234, 999, "coords", (0, 0), 0.707880855),
    ("vrpbltw", 100, 1234, 999, "demand_backhaul", 4, 0.019999999552965164),
    ("vrpbltw", 100, 1234, 999, "time_windows", (1, 0), 2.382740259),
    ("vrpbltw", 100, 1234, 999, "time_windows", (-1, 1), 1.2963100671768188),
    ("vrpbltw", 100, 1234, 999, "service_time", -1, 0.17352211475372314),
    ("vrpbltw", 100, 1234, 999, "distance_limit", (), 2.676519394),
    ("mdovrpmbltw", 50, 1234, 7, "depots", (2, 1), 0.953409731),
    ("mdovrpmbltw", 50, 1234, 7, "demand_backhaul", 0, 0.050000001),
    ("mdovrpmbltw", 50, 1234, 7, "time_windows", (-1, 0), 1.164298176765442),
    ("mdovrpmbltw", 50, 1234, 7, "distance_limit", (), 2.762718916),
    ("mdovrpmbltw", 50, 1234, 7, "backhaul_class", (), 2.0),
    ("ovrpmbl", 20, 4321, 127, "demand_linehaul", 0, 0.266666681),
    ("ovrpmbl", 20, 4321, 127, "distance_limit", (), 2.451242685),
]


def test_test_sets_are_routefinders():
    """Values printed by RouteFinder's own generator at its seeds are those of our test sets (seed
    1234, 1,000 instances) and of a 128-instance draw from seed 4321 (its validation files)."""
    for variant, n, seed, index, key, at, value in ROUTEFINDER_VALUES:
        if seed == 1234:
            data = vrp_dataset(variant, n, "test")
        else:
            data = variant_instances(np.random.RandomState(seed), 128, n, variant)
        assert data[key][index][at] == pytest.approx(value, abs=5e-9), (variant, key)
    mdtw = vrp_dataset("mdovrpmbltw", 50, "test", 8)
    assert mdtw["depots"].shape == (8, 3, 2) and mdtw["open_route"].all() and (mdtw["backhaul_class"] == 2).all()


def test_generator_follows_routefinder():
    assert [vehicle_capacity(n) for n in (10, 20, 21, 50, 100, 1000, 2000)] == [30, 30, 34, 40, 50, 230, 260]
    static = vrp_dataset("ovrpbltw", 50, "test")
    lines, backs = static["demand_linehaul"] * 40, static["demand_backhaul"] * 40  # capacity 40 at n = 50
    assert set(np.unique(np.rint(lines[lines > 0]))) == set(range(1, 10)) == set(np.unique(np.rint(backs[backs > 0])))
    assert abs((backs > 0).mean() - 0.2) < 0.01
    windows, service = static["time_windows"], static["service_time"]
    assert np.allclose(windows[:, 0], [0.0, 4.6]) and (service[:, 0] == 0).all()
    assert 0.15 - 1e-7 <= service[:, 1:].min() and service[:, 1:].max() <= 0.18 + 1e-7
    width = windows[:, 1:, 1] - windows[:, 1:, 0]
    assert 0.18 - 1e-6 <= width.min() and width.max() <= 0.2 + 1e-6
    d0 = np.linalg.norm(static["coords"] - static["depots"][:, :1], axis=-1)
    assert (windows[:, 1:, 0] >= d0 - 1e-6).all()  # reachable
    assert (windows[:, 1:, 1] + service[:, 1:] + d0 <= 4.6 + 1e-5).all()  # and back in time
    lower = 2 * d0.max(1)
    limit = static["distance_limit"]
    assert (
        (limit >= lower - 1e-6).all() and (limit <= np.maximum(2.8, lower) + 1e-5).all() and static["open_route"].all()
    )
    assert (limit < 2.79).mean() > 0.5  # drawn per instance: the limit binds, unlike a fixed 3.0
    check_vrp_instances(static)  # solvable
    plain = vrp_dataset("cvrp", 50, "test", 5)
    assert np.isinf(plain["distance_limit"]).all() and (plain["demand_backhaul"] == 0).all()
    assert np.isinf(plain["time_windows"][..., 1]).all() and not plain["open_route"].any()
    np.testing.assert_array_equal(plain["coords"], vrp_dataset("vrptw", 50, "test", 5)["coords"])
    md = vrp_dataset("mdvrptw", 50, "test", 200)  # windows from the first depot (RouteFinder's rule)
    d_first = np.linalg.norm(md["coords"] - md["depots"][:, :1], axis=-1)
    assert (md["time_windows"][:, 3:, 0] >= d_first - 1e-6).all() and np.allclose(md["time_windows"][:, :3, 1], 4.6)


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
    assert vrp_cost(inst | {"backhaul_class": np.array(2.0)}, np.array([1, 5, 2, 3, 4, 6, 0])) > 0  # mixed: any order
    with pytest.raises(InvalidTourError, match="exactly once"):
        vrp_cost(inst, np.array([1, 2, 3, 4, 5, 0]))
    with pytest.raises(InvalidTourError, match="empty route"):
        vrp_cost(inst, np.array([1, 2, 3, 0, 0, 4, 5, 6, 0]))
    inst["time_windows"][3] = [0.0, 0.01]
    with pytest.raises(InvalidTourError, match="window closes"):
        vrp_cost(inst, np.array([1, 2, 3, 4, 5, 6, 0]))


def test_checker_reads_routes_of_several_depots():
    md = one(vrp_dataset("mdcvrp", 6, "test", 1), 0)  # depots 0..2, customers 3..8
    points = np.concatenate([md["depots"], md["coords"]])
    leg = lambda a, b: float(np.hypot(*(points[a] - points[b])))  # noqa: E731
    cost = vrp_cost(md, np.array([1, 3, 4, 1, 2, 5, 6, 7, 8, 2]))  # to depot 1 free, a route, to depot 2, a route
    assert cost == pytest.approx(
        leg(1, 3) + leg(3, 4) + leg(4, 1) + leg(2, 5) + leg(5, 6) + leg(6, 7) + leg(7, 8) + leg(8, 2)
    )
    with pytest.raises(InvalidTourError, match="from depot 1 ends at depot 2"):
        vrp_cost(md, np.array([1, 3, 4, 5, 6, 7, 8, 2]))
    with pytest.raises(InvalidTourError, match="end at a depot"):
        vrp_cost(md, np.array([3, 4, 5, 6, 7, 8]))
    with pytest.raises(InvalidTourError, match="empty route"):
        vrp_cost(md, np.array([1, 1, 3, 4, 5, 6, 7, 8, 1]))
    with pytest.raises(InvalidTourError, match="capacity"):
        vrp_cost(md | {"demand_linehaul": np.full(6, 0.4)}, np.array([3, 4, 5, 0, 6, 7, 8, 0]))
    late = md["time_windows"].copy()
    late[4] = [0.0, 0.05]
    with pytest.raises(InvalidTourError, match="window closes"):
        vrp_cost(md | {"time_windows": late}, np.array([1, 3, 4, 1, 2, 5, 6, 7, 8, 2]))
    opened = md | {"open_route": np.array(True)}
    assert vrp_cost(opened, np.array([1, 3, 4, 1, 2, 5, 6, 7, 8, 2])) == pytest.approx(
        leg(1, 3) + leg(3, 4) + leg(2, 5) + leg(5, 6) + leg(6, 7) + leg(7, 8)
    )


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
        (changed("distance_limit", set_at(0, 0.01)), "route of its own from any depot"),
        (changed("time_windows", set_at((0, 0), [0.0, 0.3])), "route of its own from any depot"),
        (
            lambda o: o | {"demand_backhaul": np.concatenate([np.full((2, 1), 0.1), o["demand_backhaul"]], axis=1)},
            "depots have none",
        ),
        (changed("backhaul_class", set_at(0, 3.0)), "'backhaul_class' must be 1"),
        (lambda o: o | {"depots": np.repeat(o["depots"], 5, axis=1)}, "more depots than customers"),
        (changed("demand_backhaul", lambda a: a + 0.1), "both a linehaul and a backhaul"),
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


def test_more_depots_than_customers_and_unservable_customers_fail_with_a_message():
    with pytest.raises(ValueError, match="more depots than customers"):
        gym.make_vec("mdvrp-v0", num_envs=1, vectorization_mode="vector_entry_point", num_nodes=2)
    with pytest.raises(ValueError, match="num_depots must be at least 2"):
        VRPVectorEnv(num_envs=1, num_nodes=4, variant="mdvrptw", num_depots=1)
    env = VRPVectorEnv(num_envs=1, num_nodes=4, variant="mdvrptw")
    env.reset(seed=0)
    options = {k: v.copy() for k, v in env.static.items()}
    options["time_windows"][0, 3] = [0.0, 0.0]  # customer 1 closes at once: nobody can reach it
    with pytest.raises(ValueError, match="customer 1 of instance 0 cannot be served"):
        env.reset(options=options)
    with pytest.raises(ValueError, match="the instances have 3 depots, the env 1"):
        VRPVectorEnv(num_envs=1, num_nodes=4).reset(options=dict(env.static))


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
        "depot": drawn["depots"][:, 0],
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
    for variant in ("ovrpltw", "vrpb", "mdovrpmbltw"):
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


@settings(max_examples=5, deadline=None)
@given(n=st.integers(3, 12), seed=st.integers(0, 2**16))
def test_the_polish_models_a_solomon_file_as_our_checker_does(tmp_path_factory, n, seed):
    """A Solomon-format file (coordinates and times in the file's units, 0-100): every customer on a
    route of its own is feasible for our checker and for PyVRP's model that the polish searches (it
    read the file's coordinates against the unit square's windows once), and its local search's result
    passes our checker, as does PyVRP's solution from scratch."""
    from ppoor.search.polish import pyvrp_search, routes_of
    from ppoor.solvers.references import pyvrp, pyvrp_model

    rng = np.random.default_rng(seed)
    xy = rng.integers(0, 101, (n + 1, 2))
    ready = rng.integers(0, 400, n + 1)
    rows = [f"{i:5d} {x:5d} {y:5d} {0 if i == 0 else rng.integers(1, 20):5d} {0 if i == 0 else ready[i]:5d} "
            f"{1000 if i == 0 else ready[i] + 200:5d} {0 if i == 0 else 10:5d}" for i, (x, y) in enumerate(xy)]  # fmt: skip
    path = tmp_path_factory.mktemp("solomon") / "R999.txt"
    path.write_text("R999\n\nVEHICLE\nNUMBER     CAPACITY\n  25         200\n\nCUSTOMER\n"
                    "CUST NO.  XCOORD.   YCOORD.    DEMAND   READY TIME  DUE DATE   SERVICE TIME\n\n" + "\n".join(rows) + "\n")  # fmt: skip
    (data,) = load_data(str(path), "mtvrp", n)
    instance = {key: value[0] for key, value in data.instances.items()}
    tour = np.array([a for c in range(1, n + 1) for a in (c, 0)])  # depot 0, customer c, back
    assert vrp_cost(instance, tour) > 0  # feasible for our checker
    vrp = pyvrp()
    model, k = pyvrp_model(data, 0, search=True)
    model_data = model.data()
    routes = [vrp.Route(model_data, [vrp.Activity(vrp.ActivityType.CLIENT, c - k) for c in customers], depot)
              for depot, customers in routes_of(tour, k)]  # fmt: skip
    assert vrp.Solution(model_data, routes).is_feasible()
    better = pyvrp_search(data, 0, tour)
    assert vrp_cost(instance, better) > 0
    # PyVRP from scratch on the file (bench/real_instances.py's solver row), never as its reference
    scratch = pyvrp_vrp_tour(data, 0, 0.05, benchmark=True)
    assert check_vrp_actions(scratch, instance) == pytest.approx(vrp_cost(instance, scratch))
    with pytest.raises(ValueError, match="benchmark files carry their best-known costs"):
        pyvrp_vrp_tour(data, 0, 0.05)


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
    # without --checkpoint: the shipped Solomon model, at the costs measured when it was shipped
    out = evaluate(tmp_path, "--data", str(SOLOMON), "--num-instances", "3", "--decode", "multi-greedy",
                   "--augment", "8", "--polish", "none")  # fmt: skip
    assert out["checkpoint"].endswith("vrptw-solomon.pt") and out["lengths"] == pytest.approx([827.3, 969.1, 972.0])


CHECKPOINTS = Path(__file__).resolve().parents[1] / "checkpoints"


@pytest.mark.parametrize(
    ("name", "variant", "num_nodes", "count", "greedy", "multi_greedy"),
    [
        ("vrptw20", "vrptw", 20, 100, 9.2265, 8.8771),
        ("mtvrp20", "ovrpbltw", 20, 100, 6.2972, 6.1283),
        ("mtvrp20", "classic", 20, 100, 6.717, 6.3984),
        ("families/mdvrp20", "mdcvrp", 20, 50, 5.8294, 5.3491),
        ("families/mdvrptw20", "mdvrptw", 20, 50, 8.1148, 7.4352),
        ("mtvrp50", "vrpbtw", 50, 20, 20.7427, 19.9110),
        ("mtvrp50", "mdovrpmbl", 50, 20, 6.3873, 6.0096),
        ("mtvrp50-classic", "vrptw", 50, 20, 17.8565, 17.1887),
        ("mtvrp50-classic", "ovrpb", 50, 20, 8.1449, 7.7164),
    ],
)
def test_shipped_checkpoints_reproduce_their_figures(name, variant, num_nodes, count, greedy, multi_greedy):
    """The weights in checkpoints/ (README's tables) decode the first ``count`` test instances of a
    variant (RouteFinder's sets since multiple depots came; the weights loaded through
    ``upgrade_vrp_weights``) to the mean costs measured then."""
    torch.set_num_threads(1)
    agent, ckpt = load_agent(CHECKPOINTS / f"{name}.pt", problem="mtvrp")
    assert "optimizer" not in ckpt and ckpt["num_nodes"] == num_nodes
    data = vrp_dataset(variant, num_nodes, "test", count)
    assert decode(agent, data, "greedy").lengths.mean() == pytest.approx(greedy, rel=2e-3)
    assert decode(agent, data, "multi-greedy").lengths.mean() == pytest.approx(multi_greedy, rel=2e-3)


# ---- RouteFinder's files: its layouts read as they are, its test sets regenerated ----

routefinder = importlib.import_module("ppoor.data.routefinder")


def routefinder_solution(tours, k: int) -> list:
    """Giant tours of ours (``search.decoding``'s actions) with each route's start depot before it."""
    solutions = []
    for tour in tours:
        giant, depot, fresh = [], 0, True
        for action in np.asarray(tour).tolist():
            if action >= k:
                if fresh:
                    giant.append(depot)
                    fresh = False
                giant.append(action)
            else:
                depot, fresh = action, True
        solutions.append(giant)
    width = max(map(len, solutions))
    return [s + [0] * (width - len(s)) for s in solutions]


def test_regenerated_files_load_and_equal_the_test_sets(tmp_path):
    routefinder.main(["--out", str(tmp_path), "--sizes", "10", "--variants", "cvrp", "mdovrpmbltw", "--splits", "test"])
    with np.load(tmp_path / "cvrp" / "test" / "10.npz") as f:
        assert set(f) == {"locs", "demand_linehaul", "vehicle_capacity", "speed", "num_depots"}  # as RouteFinder's
        assert f["locs"].dtype == np.float32 and f["locs"].shape == (1000, 11, 2)
    with np.load(tmp_path / "mdovrpmbltw" / "test" / "10.npz") as f:
        assert f["num_depots"][0, 0] == 3 and f["backhaul_class"][0, 0] == 2 and f["open_route"].all()
    for variant in ("cvrp", "mdovrpmbltw"):
        (group,) = load_data(str(tmp_path / variant / "test" / "10.npz"), "mtvrp", 10)
        expected = vrp_dataset(variant, 10, "test")
        for key, value in expected.items():
            np.testing.assert_array_equal(group.instances[key], value, err_msg=key)
    with pytest.raises(SystemExit):
        routefinder.main(["--out", str(tmp_path), "--sizes", "2"])


def test_rl4co_layout_with_speed_and_capacity_loads(tmp_path):
    """RL4CO's MTVRPGenerator writes every array (absent attributes as defaults), no num_depots, raw
    capacities; a speed of 2 halves every travel time, which the reader folds into the times."""
    data = vrp_dataset("vrpbltw", 8, "test", 5)
    layout = {
        "locs": np.concatenate([data["depots"], data["coords"]], axis=1),
        "demand_linehaul": data["demand_linehaul"] * 30,
        "demand_backhaul": data["demand_backhaul"] * 30,
        "vehicle_capacity": np.full((5, 1), 30.0),
        "capacity_original": np.full((5, 1), 30.0),
        "backhaul_class": np.ones((5, 1)),
        "open_route": np.zeros((5, 1), dtype=bool),
        "distance_limit": data["distance_limit"][:, None],
        "time_windows": data["time_windows"] / 2,
        "service_time": data["service_time"] / 2,
        "speed": np.full((5, 1), 2.0),
    }
    np.savez(tmp_path / "rl4co.npz", **layout)
    (group,) = load_data(str(tmp_path / "rl4co.npz"), "mtvrp", 8)
    for key, value in data.items():
        np.testing.assert_allclose(group.instances[key], value, rtol=1e-12, err_msg=key)
    np.savez(tmp_path / "bad.npz", **layout | {"num_depots": np.array([[1], [1], [2], [1], [1]])})
    with pytest.raises(ValueError, match="'num_depots' must be one count"):
        load_data(str(tmp_path / "bad.npz"), "mtvrp", 8)
    np.savez(tmp_path / "odd.npz", **layout | {"weight": np.ones(5)})
    with pytest.raises(ValueError, match="unknown keys \\['weight'\\]"):
        load_data(str(tmp_path / "odd.npz"), "mtvrp", 8)


def test_solution_files_are_rescored_by_the_checker(tmp_path, vrp_checkpoint, capsys):
    """A solution file in RouteFinder's format (giant tours without the returns, costs negated): each
    tour is re-scored by the checker and its recomputed cost is the reference; a tour that overruns a
    window by less than the rounding tolerance is counted and kept; a wrong tour is an error."""
    routefinder.write_test_sets(tmp_path, [8], ["mdvrptw"], ["test"])
    path = tmp_path / "mdvrptw" / "test" / "8.npz"
    (group,) = load_data(str(path), "mtvrp", 8, 6)
    agent, _ = load_agent(vrp_checkpoint)
    result = decode(agent, group.instances, "greedy")
    solutions = routefinder_solution(result.tours, 3)
    for b, giant in enumerate(solutions):  # the giant tour reads back to our tour
        np.testing.assert_array_equal(routefinder.giant_tour_actions(giant, 3), result.tours[b])
    costs = -(result.lengths + 1e-4)  # RouteFinder's costs: negated, from data rounded to 1e-3
    actions = np.asarray(solutions + [[0] * len(solutions[0])] * 994)  # the file holds all 1,000
    np.savez(tmp_path / "sol.npz", actions=actions, costs=np.concatenate([costs, -np.ones(994)]), time=np.array(1.0))
    (scored,) = load_data(str(path), "mtvrp", 8, 6, references=str(tmp_path / "sol.npz"))
    np.testing.assert_allclose(scored.references, result.lengths, rtol=1e-9)
    assert "6 solutions re-scored by the checker; 0 overrun" in capsys.readouterr().out
    # shrink the window of a customer of instance 0 below its arrival by 0.001: kept, counted
    tour = result.tours[0]
    instance = {k: v[0] for k, v in group.instances.items()}
    points = np.concatenate([instance["depots"], instance["coords"]])
    first = int(tour[tour >= 3][0])
    start = int(tour[0]) if tour[0] < 3 else 0
    arrival = max(instance["time_windows"][start, 0] + np.hypot(*(points[first] - points[start])), 0.0)
    shrunk = group.instances["time_windows"].copy()
    shrunk[0, first] = [min(shrunk[0, first, 0], arrival - 0.01), arrival - 0.001]
    np.savez(tmp_path / "shrunk.npz", **{**routefinder.routefinder_file("mdvrptw", 8, "test")})
    data = dict(np.load(tmp_path / "shrunk.npz"))
    data["time_windows"][0, first] = shrunk[0, first]
    np.savez(tmp_path / "shrunk.npz", **data)
    load_data(str(tmp_path / "shrunk.npz"), "mtvrp", 8, 6, references=str(tmp_path / "sol.npz"))
    assert "6 solutions re-scored by the checker; 1 overrun" in capsys.readouterr().out
    wrong = actions.copy()
    wrong[0, np.flatnonzero(wrong[0] >= 3)[0]] = wrong[0, np.flatnonzero(wrong[0] >= 3)[1]]  # a customer twice
    np.savez(tmp_path / "wrong.npz", actions=wrong, costs=np.concatenate([costs, -np.ones(994)]))
    with pytest.raises(ValueError, match="solution 0 is not a solution"):
        load_data(str(path), "mtvrp", 8, 6, references=str(tmp_path / "wrong.npz"))
    out = evaluate(tmp_path, "--checkpoint", str(vrp_checkpoint), "--data", str(path), "--num-instances", "6",
                   "--references", str(tmp_path / "sol.npz"))  # fmt: skip
    assert out["references"] == pytest.approx(list(result.lengths)) and out["gaps"] == pytest.approx(
        [0.0] * 6, abs=1e-6
    )
