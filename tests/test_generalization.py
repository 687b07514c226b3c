"""Training and decoding for instances unlike the training set: the instance distributions
(envs.distributions), mixed sizes, the decoder's distance prior and the timed polish."""

from pathlib import Path

import gymnasium as gym
import numpy as np
import ppoor
import pytest
from checks import check_cvrp_actions, check_tsp_actions
from hypothesis import given, settings
from hypothesis import strategies as st
from ppoor.envs.distributions import DISTRIBUTIONS, draw
from ppoor.envs.instances import check_instances
from ppoor.search import Decoding


@settings(max_examples=30, deadline=None)
@given(
    problem=st.sampled_from(["tsp", "cvrp"]),
    distribution=st.sampled_from(["uniform", "clustered", "mixed", "x"]),
    count=st.integers(1, 6),
    nodes=st.integers(2, 60),
    seed=st.integers(0, 2**32 - 1),
)
def test_every_distribution_draws_valid_reproducible_instances(problem, distribution, count, nodes, seed):
    """Instances of every distribution pass the env's own checks (shapes, the unit square, demands in
    (0, 1]); the same seed draws the same instances; a distribution a problem lacks is refused."""
    if distribution not in DISTRIBUTIONS[problem]:
        with pytest.raises(ValueError, match="can be drawn from"):
            draw(problem, np.random.default_rng(seed), count, nodes, distribution)
        return
    first = draw(problem, np.random.default_rng(seed), count, nodes, distribution)
    again = draw(problem, np.random.default_rng(seed), count, nodes, distribution)
    check_instances(problem, first, count, nodes)
    for key, value in first.items():
        np.testing.assert_array_equal(value, again[key])
    if distribution != "uniform":  # stretched into the square: every instance spans it along one side
        points = first["coords"] if problem == "tsp" else np.concatenate([first["depot"][:, None], first["coords"]], 1)
        span = (points.max(1) - points.min(1)).max(1)
        assert np.allclose(span[span > 0], 1.0) and np.allclose(points.min(1).min(1), 0.0)


@settings(max_examples=20, deadline=None)
@given(count=st.integers(1, 8), nodes=st.integers(10, 120), seed=st.integers(0, 2**32 - 1))
def test_x_instances_keep_their_route_sizes_and_demand_laws(count, nodes, seed):
    """The X generator's capacity is ceil(r x mean demand) for a route size r in 3..25 (or the largest
    demand, where that is more): an instance's load, in vehicles, is at most n / 3 and at least n / 26
    (or n x mean / largest demand); its demands are integers 1..100 in proportion."""
    x = draw("cvrp", np.random.default_rng(seed), count, nodes, "x")
    load = x["demand"].sum(1)  # in vehicles
    assert (load <= nodes / 3 + 1e-9).all()
    largest_first = x["demand"].max(1)
    ratio = x["demand"] / largest_first[:, None]  # demand / largest demand: j / k for integers 1..100
    for row in ratio:
        assert any(np.allclose(row * k, np.round(row * k), atol=1e-6) for k in range(1, 101))
    assert (load >= np.minimum(nodes / 26, nodes * x["demand"].mean(1) / largest_first) - 1e-9).all()


def test_clustered_points_lie_closer_together_than_uniform_ones():
    """Gaussian clusters: each point's nearest neighbour is nearer than in uniform instances of the size."""
    rng = np.random.default_rng(3)

    def nearest(points):
        d = np.linalg.norm(points[:, :, None] - points[:, None], axis=-1) + np.eye(points.shape[1]) * 9
        return d.min(-1).mean()

    uniform = nearest(draw("tsp", rng, 50, 100, "uniform")["coords"])
    assert nearest(draw("tsp", rng, 50, 100, "clustered")["coords"]) < 0.7 * uniform
    assert nearest(draw("tsp", rng, 50, 100, "mixed")["coords"]) < uniform


@pytest.mark.parametrize("env_id", ["tsp-v0", "cvrp-v0"])
def test_a_resized_env_draws_and_steps_instances_of_the_new_size(env_id):
    """resize: the next reset draws the new size, spaces and start actions follow, episodes run to the end."""
    env = gym.make_vec(env_id, num_envs=3, vectorization_mode="vector_entry_point", num_nodes=8, n_traj=2,
                       distribution="clustered")  # fmt: skip
    env.reset(seed=0)
    for size in (13, 5):
        env.unwrapped.resize(size)
        obs, _ = env.reset()
        assert obs["coords"].shape == (3, size, 2) and env.unwrapped.observation_space["coords"].shape == (3, size, 2)
        assert len(env.unwrapped.start_actions) == size
        rng = np.random.default_rng(size)
        while not env.unwrapped.terminated.all():
            mask = obs["action_mask"]
            obs, *_ = env.step(np.array([[rng.choice(np.flatnonzero(m)) for m in row] for row in mask]))
    with pytest.raises(ValueError, match="distribution must be one of uniform, clustered, mixed for tsp"):
        gym.make_vec("tsp-v0", num_envs=1, vectorization_mode="vector_entry_point", distribution="x")


def test_mixed_sizes_are_drawn_in_the_range_the_run_gives():
    from ppoor import ppo_or
    from ppoor.training.routing import new_episodes

    env = gym.make_vec("tsp-v0", num_envs=8, vectorization_mode="vector_entry_point", num_nodes=6, n_traj=3)
    env.reset(seed=1)
    args = ppo_or.Args(num_nodes=6, max_nodes=9, train_augment=2)
    sizes = {new_episodes(env, args)["coords"].shape[1] for _ in range(40)}
    assert sizes == {6, 7, 8, 9}


@settings(max_examples=10, deadline=None)
@given(nodes=st.integers(4, 30), beta=st.sampled_from([100.0, 1000.0]), seed=st.integers(0, 2**16))
def test_a_strong_distance_prior_steps_to_the_nearest_unvisited_node(nodes, beta, seed):
    """The prior adds -beta x log(d x sqrt(n) + 1e-3) to logits that lie within 20 of each other, so each
    greedy step goes to a node whose scaled distance is within exp(20 / beta) of the nearest unvisited
    one's (checked here from the coordinates, step by step). The model's own beta is back after the call."""
    model = ppoor.Model("tsp20")
    points = np.random.default_rng(seed).random((nodes, 2))
    result = model.solve(points[None], Decoding("greedy", distance_prior=beta))
    assert model.agent.distance_prior == 0.0
    tour = list(result.tours[0])
    assert sorted(tour) == list(range(nodes))

    def scaled(a, b):
        return np.linalg.norm(points[a] - points[b]) * np.sqrt(nodes) + 1e-3

    for step in range(1, nodes):
        here, left = tour[step - 1], tour[step:]
        nearest = min(scaled(here, j) for j in left)
        assert scaled(here, tour[step]) <= np.exp(20 / beta) * nearest + 1e-9


@settings(max_examples=20, deadline=None)
@given(problem=st.sampled_from(["tsp", "cvrp", "mtvrp"]), b=st.integers(1, 3), n=st.integers(2, 9),
       traj=st.integers(1, 4), beta=st.floats(0.1, 10.0), seed=st.integers(0, 2**16))  # fmt: skip
def test_the_distance_bias_is_minus_beta_log_of_the_scaled_distance(problem, b, n, traj, beta, seed):
    """distance_bias against the formula computed here from the points: the depot(s) first, then the
    customers; the current node from last_node; zero at a TSP tour's first step."""
    import torch
    from ppoor.models.attention_model import distance_bias

    rng = np.random.default_rng(seed)
    coords = rng.random((b, n, 2))
    state = {"coords": torch.tensor(coords)}
    points = coords
    if problem == "cvrp":
        depot = rng.random((b, 2))
        state["depot"], points = torch.tensor(depot), np.concatenate([depot[:, None], coords], 1)
    elif problem == "mtvrp":
        depots = rng.random((b, 2, 2))
        state["depots"], points = torch.tensor(depots), np.concatenate([depots, coords], 1)
    actions = points.shape[1]
    last = rng.integers(0, actions, (b, traj))
    state["last_node"] = torch.tensor(last)
    if problem == "tsp":
        initial = rng.random((b, traj)) < 0.3
        state["is_initial_action"] = torch.tensor(initial)
    bias = distance_bias(state, beta).numpy()
    for i in range(b):
        for j in range(traj):
            d = np.linalg.norm(points[i] - points[i, last[i, j]], axis=1)
            expected = -beta * np.log(d * np.sqrt(actions) + 1e-3)
            if problem == "tsp" and initial[i, j]:
                expected = np.zeros(actions)
            np.testing.assert_allclose(bias[i, j], expected, rtol=1e-5, atol=1e-4)


def test_the_distance_prior_is_refused_when_not_a_finite_non_negative_number():
    model = ppoor.Model("tsp20")
    for beta in (-1.0, float("nan"), float("inf"), "2"):
        with pytest.raises(ValueError, match="distance_prior must be a finite number >= 0"):
            model.solve(np.random.default_rng(0).random((1, 5, 2)), Decoding(distance_prior=beta))
    assert model.agent.distance_prior == 0.0


@settings(max_examples=15, deadline=None)
@given(n=st.integers(8, 40), seed=st.integers(0, 2**16))
def test_the_iterated_tsp_search_returns_a_tour_never_longer_than_the_local_search(n, seed):
    """Double-bridge kicks keep a permutation; the iterated search's tour is a permutation of the nodes,
    never longer than the first local optimum it starts from."""
    from ppoor.search.polish import double_bridge, tsp_iterated_search, tsp_local_search

    rng = np.random.default_rng(seed)
    points = rng.random((n, 2))
    dist = np.linalg.norm(points[:, None] - points[None], axis=-1)
    tour = rng.permutation(n)
    kicked = double_bridge(tour, rng)
    assert sorted(kicked.tolist()) == list(range(n)) and not np.array_equal(kicked, tour)
    first = tsp_local_search(dist, tour)
    better = tsp_iterated_search(dist, tour, 0.05, np.random.default_rng(seed))
    assert sorted(better.tolist()) == list(range(n))
    assert check_tsp_actions([*better, better[0]], points) <= check_tsp_actions([*first, first[0]], points) + 1e-9


def test_the_timed_polish_is_feasible_never_costlier_and_names_its_budget():
    """polish(seconds=...): TSP by the iterated search, CVRP by PyVRP's iterated local search from the
    decoded routes; every solution passes the tests' checkers at its reported cost; bad budgets refused."""
    from ppoor.search.polish import polish

    rng = np.random.default_rng(5)
    coords = rng.random((2, 40, 2))
    decoded = ppoor.Model("tsp20").solve(coords)
    polished = polish(decoded, seconds=0.5)
    assert polished.decode == "greedy + 2-opt + or-opt ILS 0.5 s/200 nodes"
    assert (polished.lengths <= decoded.lengths + 1e-9).all()
    for tour, length, points in zip(polished.tours, polished.lengths, coords, strict=True):
        assert check_tsp_actions([*tour, tour[0]], points) == pytest.approx(length, rel=1e-9)
    data = {"depot": rng.random((2, 2)), "coords": rng.random((2, 30, 2)), "demand": rng.integers(1, 10, (2, 30)),
            "capacity": 30}  # fmt: skip
    decoded = ppoor.Model("cvrp20").solve(data)
    polished = polish(decoded, seconds=0.5)
    assert (polished.lengths <= decoded.lengths + 1e-9).all()
    for b, (tour, length) in enumerate(zip(polished.tours, polished.lengths, strict=True)):
        assert check_cvrp_actions(tour, data["depot"][b], data["coords"][b], data["demand"][b], 30) == pytest.approx(
            length, rel=1e-6
        )
    for seconds in (0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="seconds per 200 nodes must be in"):
            polish(decoded, seconds=seconds)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"env_id": "tsp-v0", "distribution": "x"}, "--distribution x: --env-id tsp-v0 draws uniform / clustered / mixed"),
        ({"env_id": "vrptw-v0", "distribution": "mixed"}, "--env-id vrptw-v0 draws uniform / solomon"),
        ({"env_id": "vrpb-v0", "distribution": "solomon"}, "--env-id vrpb-v0 draws uniform"),
        ({"env_id": "cvrp-v0", "distribution": "solomon"}, "--env-id cvrp-v0 draws uniform / clustered / mixed / x"),
        ({"env_id": "vrptw-v0", "max_nodes": 30}, "--max-nodes: mixed sizes are drawn for tsp and cvrp"),
        ({"env_id": "cvrp-v0", "max_nodes": 10}, "--max-nodes 10 is below --num-nodes 20"),
    ],
)
def test_ppo_or_refuses_distributions_and_sizes_its_env_cannot_draw(given, message):
    from ppoor import ppo_or
    from ppoor.training import options

    args = ppo_or.Args(num_nodes=20, num_envs=64, **given)
    starts = options.env_size(args).starts
    with pytest.raises(SystemExit, match=message):
        options.check_args(options.with_defaults(args, starts), starts)


def test_a_mixed_size_clustered_run_trains_and_records_its_prior(tmp_path, monkeypatch):
    """A short ppo_or.py run over sizes 6..10 of clustered instances with the distance prior: its
    checkpoint records the prior and the validation size, and loads with it."""
    from ppoor import ppo_or
    from ppoor.models import load_agent

    monkeypatch.chdir(tmp_path)
    args, given = ppo_or.parse_args(
        "--env-id tsp-v0 --num-nodes 6 --max-nodes 10 --distribution clustered --distance-prior 2 --num-envs 16 "
        "--total-timesteps 1500 --eval-interval 0 --eval-nodes 8 --threads 1 --exp-name mixed".split()
    )
    ppo_or.main(args, given)
    (path,) = tmp_path.glob("runs/*/ckpt/*.pt")
    agent, ckpt = load_agent(path)
    assert ckpt["model_config"] == {"distance_prior": 2.0} and agent.distance_prior == 2.0
    assert ckpt["num_nodes"] == 8 and ckpt["args"]["max_nodes"] == 10


def test_an_exported_model_keeps_the_prior_it_is_given(tmp_path):
    """export_weights --distance-prior: the weights-only file decodes with that prior, and the model loads
    its weights unchanged; a bad prior writes nothing."""
    import torch
    from ppoor.models.checkpoints import export_weights, shipped_checkpoint

    source = shipped_checkpoint(Path("tsp20"))
    export_weights(source, tmp_path / "near.pt", distance_prior=4)
    model = ppoor.Model(tmp_path / "near.pt")
    assert model.agent.distance_prior == 4.0
    original = torch.load(source, weights_only=True)["model"]
    assert all(torch.equal(value, model.agent.state_dict()[key]) for key, value in original.items())
    with pytest.raises(ValueError, match="distance_prior must be a finite number >= 0"):
        export_weights(source, tmp_path / "bad.pt", distance_prior=float("nan"))
    assert not (tmp_path / "bad.pt").exists()


@settings(max_examples=15, deadline=None)
@given(count=st.integers(1, 4), nodes=st.integers(5, 60), seed=st.integers(0, 2**32 - 1))
def test_solomon_like_instances_are_valid_and_one_route_per_customer_is_feasible(count, nodes, seed):
    """The Solomon-like VRPTW instances pass the VRP env's checks, and serving each customer on a route of
    its own is feasible by the tests' own checker (every window reachable, with time to return); other
    variants refuse the distribution."""
    from checks import check_vrp_actions
    from ppoor.envs.vrp import check_vrp_instances

    instances = check_vrp_instances(draw("mtvrp", np.random.default_rng(seed), count, nodes, "solomon"))
    for b in range(count):
        instance = {key: value[b] for key, value in instances.items()}
        alone = [a for c in range(1, nodes + 1) for a in (c, 0)]
        assert np.isfinite(check_vrp_actions(alone, instance))
        assert (instance["demand_linehaul"] <= 1).all() and (instance["demand_linehaul"] > 0).all()
    env = gym.make_vec("vrptw-v0", num_envs=2, vectorization_mode="vector_entry_point", num_nodes=nodes,
                       distribution="solomon")  # fmt: skip
    assert env.reset(seed=seed)[0]["coords"].shape == (2, nodes, 2)
    with pytest.raises(ValueError, match="the solomon distribution draws VRPTW instances"):
        gym.make_vec("vrpb-v0", num_envs=1, vectorization_mode="vector_entry_point",
                     distribution="solomon")  # fmt: skip


@given(nodes=st.integers(1, 40), clusters=st.integers(1, 8), seed=st.integers(0, 2**32 - 1))
def test_the_cluster_routing_behind_solomon_like_c_windows_is_feasible_at_its_start_times(nodes, clusters, seed):
    """The routing the C windows are centred on serves every customer once within the capacity and the
    horizon, each by the service start it reports (the tests' checker, with each window shrunk to that
    start): so every window of a C instance holds a feasible routing's visit."""
    from checks import check_vrp_actions
    from ppoor.envs.distributions import cluster_routes

    rng = np.random.default_rng(seed)
    depot, points = rng.uniform(0, 100, 2), rng.uniform(0, 100, (nodes, 2))
    demand = rng.integers(1, 51, nodes).astype(float)
    capacity, service = rng.uniform(demand.max(), demand.sum() + 1), rng.uniform(0, 90)
    horizon = (2 * np.linalg.norm(points - depot, axis=1).max() + service) * rng.uniform(1, 5)
    routes, starts = cluster_routes(depot, points, rng.integers(0, clusters, nodes), demand, capacity, horizon, service)
    instance = {
        "depots": depot[None], "coords": points, "demand_linehaul": demand / capacity,
        "demand_backhaul": np.zeros(nodes), "backhaul_class": 1.0, "distance_limit": np.inf, "open_route": False,
        "time_windows": np.concatenate([[[0.0, horizon]], np.stack([starts, starts], axis=1)]),
        "service_time": np.concatenate([[0.0], np.full(nodes, service)]),
    }  # fmt: skip
    assert np.isfinite(check_vrp_actions([a for route in routes for a in (*(c + 1 for c in route), 0)], instance))
    assert all(route for route in routes)


@pytest.mark.parametrize(("env_id", "distribution"), [("tsp-v0", "mixed"), ("cvrp-v0", "x"), ("vrptw-v0", "solomon")])
def test_a_run_on_another_distribution_is_validated_on_that_distribution(env_id, distribution):
    """The periodic evaluation of a --distribution run decodes instances of that distribution (seed 4321,
    --eval-nodes), not the uniform validation set, and has no references; a uniform run keeps the set."""
    from ppoor import ppo_or
    from ppoor.envs import ENV_IDS, ENV_VARIANTS, standard_dataset
    from ppoor.training.routing import validation_set

    common = ["--env-id", env_id, "--num-nodes", "20", "--eval-nodes", "30", "--eval-instances", "6"]
    args, _ = ppo_or.parse_args([*common, "--distribution", distribution])
    data, references = validation_set(args)
    problem = ENV_IDS[env_id]
    drawn = draw(problem, np.random.default_rng(4321), 6, 30, distribution)
    uniform = standard_dataset(problem, 30, "val", 6, ENV_VARIANTS.get(env_id))
    assert references is None and data.keys() == drawn.keys()
    assert all(np.array_equal(data[key], drawn[key]) for key in drawn)
    assert not np.array_equal(data["coords"], uniform["coords"])
    uniform_data, _ = validation_set(ppo_or.parse_args(common)[0])
    assert all(np.array_equal(uniform_data[key], uniform[key]) for key in uniform)


@pytest.mark.parametrize(("env_id", "preset", "beta"), [("tsp-v0", "ppo-or", 3.0), ("cvrp-v0", "ppo-or", 3.0),
                                                        ("vrptw-v0", "ppo-or", 0.0), ("tsp-v0", "rlor", 0.0)])  # fmt: skip
def test_the_default_distance_prior_is_by_problem_and_the_rlor_preset_has_none(env_id, preset, beta):
    from ppoor import ppo_or
    from ppoor.training import options

    args, _ = ppo_or.parse_args(["--preset", preset, "--env-id", env_id, "--num-nodes", "10"])
    assert options.with_defaults(args, options.env_size(args).starts).distance_prior == beta


def test_a_checkpoint_lacking_a_setting_is_refused_with_the_way_on(tmp_path, monkeypatch):
    """A checkpoint whose settings lack one of today's (--distance-prior: an older ppo-or's) is not resumed
    with a default it was not trained with: one line says to start from its weights instead."""
    import torch
    from ppoor import ppo_or
    from ppoor.models.checkpoints import save_checkpoint
    from ppoor.training import options

    monkeypatch.chdir(tmp_path)
    args, given = ppo_or.parse_args("--env-id tsp-v0 --num-nodes 6 --num-envs 16 --total-timesteps 400 "
                                    "--eval-interval 0 --threads 1 --exp-name old".split())  # fmt: skip
    ppo_or.main(args, given)
    (path,) = tmp_path.glob("runs/*/ckpt/*.pt")
    ckpt = torch.load(path, weights_only=True)
    del ckpt["args"]["distance_prior"]
    ckpt["model_config"] = {}
    ckpt["args"]["total_timesteps"] = 10_000
    save_checkpoint({k: v for k, v in ckpt.items() if k != "format"}, tmp_path / "old.pt")
    with pytest.raises(SystemExit) as exc:
        options.resolve_args(*ppo_or.parse_args(["--resume", str(tmp_path / "old.pt")]))
    assert str(exc.value.code) == (f"error: --resume: {tmp_path / 'old.pt'} was written by an older ppo_or.py without "
                                   f"--distance-prior; start a new run from its weights with --init-from {tmp_path / 'old.pt'}")  # fmt: skip
    resumed, _, _, _ = options.resolve_args(*ppo_or.parse_args(["--resume", str(path), "--total-timesteps", "10000"]))  # today's resumes
    assert resumed.distance_prior == 3.0


@pytest.mark.parametrize(
    ("folder", "lengths"), [("tsplib", [7543.0, 123984.0, 6288.0]), ("cvrplib", [28354.0, 26960.0, 15566.0])]
)
def test_the_models_for_files_reproduce_their_benchmark_figures(tmp_path, folder, lengths):
    """eval.py without --checkpoint on the first three files of a benchmark folder decodes them with the
    shipped model for their kind (tsp-general, cvrp-general), multi-greedy x8, to the lengths measured
    when those weights were shipped (docs/results' tables come from them)."""
    import json

    from checks import SHARED
    from ppoor import eval as evaluator

    if not (SHARED / "benchmarks" / folder).is_dir():
        pytest.skip(f"{SHARED / 'benchmarks' / folder} is absent (not beside this clone)")
    output = tmp_path / "out.json"
    args = ["--data", str(SHARED / "benchmarks" / folder), "--num-instances", "3", "--decode", "multi-greedy",
            "--augment", "8", "--polish", "none", "--threads", "1", "--output", str(output)]  # fmt: skip
    evaluator.main(evaluator.tyro.cli(evaluator.Args, args=args))
    out = json.loads(output.read_text())
    assert Path(out["checkpoint"]).stem == {"tsplib": "tsp-general", "cvrplib": "cvrp-general"}[folder]
    assert out["lengths"] == pytest.approx(lengths)
