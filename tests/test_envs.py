import gymnasium as gym
import numpy as np
import pytest
from checks import SHARED, check_cvrp_actions, check_tsp_actions, random_allowed_actions
from hypothesis import given, settings
from hypothesis import strategies as st
from ppoor import envs
from ppoor.envs import CVRPVectorEnv, TSPVectorEnv, cvrp_capacity, kool_dataset


def make_vec(problem, m, n, traj):
    return gym.make_vec(f"{problem}-v0", num_envs=m, vectorization_mode="vector_entry_point", num_nodes=n, n_traj=traj)


def run_random(env, rng, options=None, seed=None):
    """Drives env with random allowed actions to the end; returns actions [M, N, T], rewards [M, N, T]."""
    obs, _ = env.reset(seed=seed, options=options)
    actions, rewards = [], []
    terminated = np.zeros((env.num_envs, env.n_traj), dtype=bool)
    for _ in range(env.max_episode_steps):
        a = random_allowed_actions(obs["action_mask"], rng)
        before = terminated.copy()
        obs, r, terminated, truncated, _ = env.step(a)
        assert not truncated.any()
        assert (r[before] == 0).all(), "a terminated trajectory earned a reward"
        assert (terminated | ~before).all(), "a terminated trajectory came back to life"
        actions.append(a)
        rewards.append(r)
        if terminated.all():
            break
    assert terminated.all(), "episode did not finish within max_episode_steps"
    return np.stack(actions, -1), np.stack(rewards, -1), obs


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 12), m=st.integers(1, 4), traj=st.integers(1, 5), seed=st.integers(0, 2**31))
def test_tsp_random_trajectories_are_tours(n, m, traj, seed):
    env = make_vec("tsp", m, n, traj)
    actions, rewards, obs = run_random(env, np.random.default_rng(seed), seed=seed)
    assert actions.shape[-1] == n + 1
    for i in range(m):
        for j in range(traj):
            length = check_tsp_actions(actions[i, j], obs["coords"][i])
            assert -rewards[i, j].sum() == pytest.approx(length, abs=1e-9)
            assert obs["action_mask"][i, j].sum() == 1 and obs["action_mask"][i, j, actions[i, j, 0]]


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 12), m=st.integers(1, 4), traj=st.integers(1, 5), seed=st.integers(0, 2**31))
def test_cvrp_random_trajectories_are_feasible(n, m, traj, seed):
    rng = np.random.default_rng(seed)
    capacity = int(rng.integers(9, 20))
    demand = rng.integers(1, 10, size=(m, n))
    options = {"depot": rng.uniform(size=(m, 2)), "coords": rng.uniform(size=(m, n, 2)), "demand": demand / capacity}
    env = make_vec("cvrp", m, n, traj)
    actions, rewards, obs = run_random(env, rng, options=options)
    for i in range(m):
        for j in range(traj):
            length = check_cvrp_actions(actions[i, j], options["depot"][i], options["coords"][i], demand[i], capacity)
            assert -rewards[i, j].sum() == pytest.approx(length, abs=1e-9)
            assert obs["action_mask"][i, j].tolist() == [True] + [False] * n


@pytest.mark.parametrize("problem", ["tsp", "cvrp"])
def test_vector_env_equals_loop_of_single_envs(problem):
    m, n, traj = 3, 7, 4
    vec = make_vec(problem, m, n, traj)
    obs, _ = vec.reset(seed=5)
    static = {k: obs[k] for k in envs.instances.STATIC_KEYS[problem]}
    singles = [gym.make(f"{problem}-v0", num_nodes=n, n_traj=traj) for _ in range(m)]
    single_obs = [e.reset(options={k: v[i] for k, v in static.items()})[0] for i, e in enumerate(singles)]
    rng = np.random.default_rng(0)
    for _ in range(vec.max_episode_steps):
        for i in range(m):
            assert obs.keys() == single_obs[i].keys()
            for key in obs:
                np.testing.assert_array_equal(obs[key][i], single_obs[i][key], err_msg=key)
        a = random_allowed_actions(obs["action_mask"], rng)
        obs, r, term, _, _ = vec.step(a)
        results = [e.step(a[i]) for i, e in enumerate(singles)]
        single_obs = [res[0] for res in results]
        np.testing.assert_array_equal(r, np.stack([res[1] for res in results]))
        np.testing.assert_array_equal(term, np.stack([res[2] for res in results]))


@pytest.mark.parametrize("problem", ["tsp", "cvrp"])
def test_observations_match_space_and_static_arrays_are_not_copied(problem):
    env = make_vec(problem, 2, 5, 3)
    obs, _ = env.reset(seed=1)
    assert env.observation_space.contains(obs)
    single = gym.make(f"{problem}-v0", num_nodes=5, n_traj=3)
    assert single.observation_space.contains(single.reset(seed=1)[0])
    nxt, *_ = env.step(random_allowed_actions(obs["action_mask"], np.random.default_rng(0)))
    assert nxt["coords"] is obs["coords"]
    assert obs["action_mask"].dtype == bool


def test_reset_seed_is_reproducible_and_per_env():
    a, b = TSPVectorEnv(num_envs=2, num_nodes=5), TSPVectorEnv(num_envs=2, num_nodes=5)
    np.testing.assert_array_equal(a.reset(seed=3)[0]["coords"], b.reset(seed=3)[0]["coords"])
    assert not np.array_equal(a.reset()[0]["coords"], b.reset(seed=4)[0]["coords"])


def test_cvrp_demands_follow_kool():
    env = CVRPVectorEnv(num_envs=200, num_nodes=20)
    obs, _ = env.reset(seed=0)
    units = obs["demand"] * 30
    np.testing.assert_allclose(units, np.round(units))
    assert units.min() == 1 and units.max() == 9
    assert [cvrp_capacity(n) for n in (10, 20, 50, 100)] == [20, 30, 40, 50]
    assert [cvrp_capacity(n) for n in (5, 30, 75, 150, 200)] == [20, 33, 45, 60, 70]


def test_kool_test_set_first_instance():
    coords = kool_dataset("tsp", 50, "test", 2)["coords"]
    assert coords.shape == (2, 50, 2)
    assert coords[0, 0].tolist() == [0.1915194503788923, 0.6221087710398319]
    cvrp = kool_dataset("cvrp", 20, "val", 3)
    assert cvrp["depot"].shape == (3, 2) and cvrp["demand"].shape == (3, 20)
    rs = np.random.RandomState(4321)
    np.testing.assert_array_equal(cvrp["depot"], rs.uniform(size=(10000, 2))[:3])


def test_kool_references_reproduced_by_lkh():
    elkai = pytest.importorskip("elkai", reason="elkai (LKH) is an optional extra: pip install -e '.[solvers]'")
    path = SHARED / "references" / "tsp50_test_seed1234_lkh.npy"
    if not path.exists():
        pytest.skip(f"{path} is absent (the shared folder is not beside this clone)")
    reference = np.load(path)
    coords = kool_dataset("tsp", 50, "test", 4)["coords"]
    for i, xy in enumerate(coords):
        dist = np.sqrt(((xy[:, None] - xy[None]) ** 2).sum(-1))
        tour = elkai.DistanceMatrix(np.rint(dist * 1e6).astype(int).tolist()).solve_tsp(runs=5)
        length = check_tsp_actions(tour[:-1] + tour[:1], xy)
        assert length == pytest.approx(reference[i], abs=1e-6)


@pytest.mark.parametrize("problem", ["tsp", "cvrp"])
def test_invalid_actions_raise_naming_instance_and_trajectory(problem):
    env = make_vec(problem, 2, 4, 3)
    obs, _ = env.reset(seed=0)
    a = random_allowed_actions(obs["action_mask"], np.random.default_rng(0))
    bad = a.copy()
    bad[1, 2] = 99
    with pytest.raises(ValueError, match="instance 1, trajectory 2 is outside"):
        env.step(bad)
    if problem == "cvrp":
        bad = a.copy()
        bad[0, 1] = 0  # the depot right at the start
        with pytest.raises(ValueError, match="instance 0, trajectory 1 is forbidden"):
            env.step(bad)
    env.step(a)
    with pytest.raises(ValueError, match="forbidden by its action mask"):
        env.step(a)  # the node just visited
    with pytest.raises(ValueError, match="shape"):
        env.step(a[0])
    with pytest.raises(ValueError, match="integers"):
        env.step(a.astype(float))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"coords": np.full((2, 4, 2), np.nan)}, "NaN"),
        ({"coords": np.full((2, 4, 2), 1.5)}, "unit square"),
        ({"coords": np.zeros((2, 4, 3))}, r"shape \[M, n, 2\]"),
        ({"coords": np.zeros((3, 4, 2))}, "expected 2"),
        ({"coords": np.zeros((2, 5, 2))}, "num_nodes=4"),
        ({"points": np.zeros((2, 4, 2))}, "missing"),
    ],
)
def test_invalid_tsp_options_raise(options, message):
    with pytest.raises(ValueError, match=message):
        TSPVectorEnv(num_envs=2, num_nodes=4).reset(options=options)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"demand": np.zeros((2, 4))}, "positive"),
        ({"demand": np.full((2, 4), -0.1)}, "positive"),
        ({"demand": np.full((2, 4), 1.5)}, "capacity"),
        ({"depot": np.zeros((2, 3))}, "'depot' must have shape"),
        ({"demand": np.full((2, 4), np.nan)}, "NaN"),
    ],
)
def test_invalid_cvrp_options_raise(change, message):
    options = {"depot": np.zeros((2, 2)), "coords": np.zeros((2, 4, 2)), "demand": np.full((2, 4), 0.1)}
    with pytest.raises(ValueError, match=message):
        CVRPVectorEnv(num_envs=2, num_nodes=4).reset(options={**options, **change})


def test_bad_constructor_arguments_raise():
    with pytest.raises(ValueError, match="num_nodes must be an integer >= 2"):
        TSPVectorEnv(num_envs=1, num_nodes=1)
    with pytest.raises(ValueError, match="n_traj"):
        gym.make("cvrp-v0", num_nodes=5, n_traj=0)
    with pytest.raises(RuntimeError, match="reset"):
        TSPVectorEnv(num_envs=1, num_nodes=3).step(np.zeros((1, 1), dtype=int))


@pytest.mark.parametrize("env_id", sorted(envs.ENV_IDS))
def test_the_trainers_sizes_are_the_envs_own(env_id):
    """ppo_or.py took the start count without the variant and computed its own steps
    bound and action count, wrong for several depots (mdvrp-v0 at n = 20: 20 starts for the env's
    22, 40 steps for episodes of 81, 21 actions for 23). Every size now comes from the env: here
    checked against random episodes of the registered env with the trainer's own arguments."""
    from ppoor import ppo_or
    from ppoor.training import options

    n = 20
    args = ppo_or.Args(env_id=env_id, num_nodes=n, num_envs=64)
    sizes = options.env_size(args)
    env = gym.make_vec(env_id, num_envs=4, vectorization_mode="vector_entry_point", num_nodes=n, n_traj=2)
    obs, _ = env.reset(seed=0)
    assert sizes.actions == obs["action_mask"].shape[-1] and sizes.starts == len(env.start_actions)
    rng = np.random.default_rng(0)
    steps = 0
    while not env.terminated.all():
        obs, *_ = env.step(random_allowed_actions(obs["action_mask"], rng))
        steps += 1
    assert steps <= sizes.max_episode_steps
    full = options.with_defaults(args, sizes.starts)
    assert full.n_traj == sizes.starts  # one trajectory per start by default, and that many are accepted
    options.check_args(full, sizes.starts)


@pytest.mark.parametrize("env_id", sorted(envs.ENV_IDS))
@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 2**16), at=st.floats(0.15, 0.5))
def test_select_copies_trajectories_as_a_replay_would(env_id, seed, at):
    """``select`` (beam search's step) makes trajectory j a copy of its parent: after random steps,
    a random selection and more random steps, every observation, reward and termination equals
    that of a fresh env replaying each selected trajectory's actions from the start, so no piece of
    a trajectory's state is left behind (or shared between copies), on every registered env."""
    rng = np.random.default_rng(seed)
    m, n, traj = 3, 8, 4

    def make():
        return gym.make_vec(env_id, num_envs=m, vectorization_mode="vector_entry_point", num_nodes=n, n_traj=traj)

    env = make()
    obs, _ = env.reset(seed=seed)
    instances = dict(env.unwrapped.static)
    history, returns, t, seen = [], np.zeros((m, traj)), 0, {}
    cut = int(at * env.unwrapped.max_episode_steps)
    selected = False
    while not env.unwrapped.terminated.all():
        if t == cut and not selected:
            parents = rng.integers(0, traj, (m, traj))
            env.unwrapped.select(parents)
            history = [np.take_along_axis(a, parents, 1) for a in history]
            returns = np.take_along_axis(returns, parents, 1)
            obs = env.unwrapped._observation()
            selected = True
        action = random_allowed_actions(obs["action_mask"], rng)
        obs, reward, terminated, _, _ = env.step(action)
        history.append(action)
        returns += reward
        t += 1
        if selected:  # what the replay must see after the same steps
            seen[t] = ({key: value.copy() for key, value in obs.items()}, returns.copy(), terminated)
    replay = make()
    replay.reset(options=instances)
    again = np.zeros((m, traj))
    for step, action in enumerate(history, 1):
        got, reward, ended, _, _ = replay.step(action)
        again += reward
        if step in seen:
            want, want_returns, want_ended = seen[step]
            for key, value in want.items():
                np.testing.assert_array_equal(got[key], value, err_msg=f"{key} after step {step}")
            np.testing.assert_allclose(again, want_returns, rtol=0, atol=1e-9)
            np.testing.assert_array_equal(ended, want_ended)
    assert selected or cut >= t
