import numpy as np
import pytest
import torch
from checks import SHARED, random_allowed_actions
from ppoor.envs import VECTOR_ENVS, kool_dataset
from ppoor.models import (
    Agent,
    CheckpointError,
    StateWrapper,
    compile_step,
    compiler_problem,
    export_weights,
    load_agent,
    read_checkpoint,
    save_checkpoint,
)
from ppoor.search import Decoding, decode
from torch._dynamo.utils import counters

RLOR = SHARED / "checkpoints" / "rlor"
needs_rlor = pytest.mark.skipif(
    not RLOR.exists(), reason=f"{RLOR} is absent (the shared folder is not beside this clone)"
)
needs_cxx = pytest.mark.skipif(compiler_problem() is not None, reason="torch.compile's inductor finds no C++ compiler")


def episode_states(problem, m=3, n=8, traj=4, seed=0):
    """(static tensors, list of state dicts) along one episode of random allowed actions."""
    env = VECTOR_ENVS[problem](num_envs=m, num_nodes=n, n_traj=traj)
    obs, _ = env.reset(seed=seed)
    wrapper = StateWrapper(problem)
    static = wrapper.static(obs)
    rng = np.random.default_rng(seed)
    states = []
    while not env.terminated.all():
        states.append(wrapper.state(static, obs))
        obs, *_ = env.step(random_allowed_actions(obs["action_mask"], rng))
    states.append(wrapper.state(static, obs))
    return static, states


def make_agent(problem, seed=0):
    torch.manual_seed(seed)
    return Agent(problem).eval()


@pytest.mark.parametrize("problem", ["tsp", "cvrp", "mtvrp"])
def test_masked_actions_have_probability_zero(problem):
    agent = make_agent(problem)
    for seed in range(3):
        static, states = episode_states(problem, seed=seed)
        cache = agent.encode(static)
        for state in states:
            action, logprob, entropy, _ = agent.get_action_and_value(state, cache=cache)
            probs = torch.softmax(agent(cache, state)[0], -1)
            mask = state["action_mask"]
            assert mask.gather(-1, action[..., None]).all(), "sampled a masked action"
            assert (probs[~mask] == 0).all()
            assert (probs[mask] > 0).all()
            torch.testing.assert_close(probs.sum(-1), torch.ones(mask.shape[:2]))
            assert torch.isfinite(logprob).all() and torch.isfinite(entropy).all()


@pytest.mark.parametrize("problem", ["tsp", "cvrp", "mtvrp"])
@pytest.mark.parametrize("train", [False, True])
def test_cached_decoding_equals_reencoding(problem, train):
    agent = make_agent(problem).train(train)
    static, states = episode_states(problem)
    cache = agent.encode(static)
    for state in states:
        cached = agent(cache, state)
        fresh = agent(agent.encode(state), state)
        for a, b in zip(cached, fresh, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("problem", ["tsp", "cvrp", "mtvrp"])
def test_parallel_decoding_equals_separate_decodes(problem):
    agent = make_agent(problem)
    static, states = episode_states(problem, traj=5)
    cache = agent.encode(static)
    for state in states[:: max(1, len(states) // 4)]:
        logits, values = agent(cache, state)
        for j in range(5):
            single = {k: v[:, j : j + 1] if v.dim() >= 2 and k not in static else v for k, v in state.items()}
            one_logits, one_values = agent(cache, single)
            torch.testing.assert_close(one_logits, logits[:, j : j + 1], rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(one_values, values[:, j : j + 1], rtol=1e-5, atol=1e-5)


def test_permuting_tsp_nodes_permutes_logits():
    agent = make_agent("tsp")
    static, states = episode_states("tsp", n=9)
    perm = torch.randperm(9, generator=torch.Generator().manual_seed(1))
    inverse = torch.argsort(perm)
    permuted_static = {"coords": static["coords"][:, perm]}
    cache, permuted_cache = agent.encode(static), agent.encode(permuted_static)
    for state in states:
        permuted = {
            **permuted_static,
            "action_mask": state["action_mask"][..., perm],
            "first_node": inverse[state["first_node"]],
            "last_node": inverse[state["last_node"]],
            "is_initial_action": state["is_initial_action"],
        }
        logits, values = agent(cache, state)
        permuted_logits, permuted_values = agent(permuted_cache, permuted)
        torch.testing.assert_close(permuted_logits, logits[..., perm], rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(permuted_values, values, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("problem", ["tsp", "cvrp", "mtvrp"])
def test_instances_in_a_batch_do_not_influence_each_other(problem):
    agent = make_agent(problem)
    static, states = episode_states(problem, m=4)
    cache = agent.encode(static)
    alone_static = {k: v[2:3] for k, v in static.items()}
    alone_cache = agent.encode(alone_static)
    for state in states:
        logits, values = agent(cache, state)
        alone = agent(alone_cache, {k: v[2:3] for k, v in state.items()})
        torch.testing.assert_close(alone[0], logits[2:3], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(alone[1], values[2:3], rtol=1e-5, atol=1e-5)


@needs_cxx
@pytest.mark.parametrize("problem", ["tsp", "cvrp", "mtvrp"])
def test_the_compiled_step_computes_what_the_eager_one_does(problem):
    """models.compile_step (torch.compile of the decode step): on the states of random episodes
    (every step of a rollout's shape, then all steps at once: the PPO update's), the logits, values
    and the gradients of a loss on them, down to the encoder's weights, equal the eager model's."""
    eager = make_agent(problem, seed=3).train()
    compiled = compile_step(make_agent(problem, seed=3).train())
    static, states = episode_states(problem, seed=5)
    # every step of the episode at once, as the PPO update decodes them: queries [B, T x N]
    update = {**static, **{key: torch.cat([s[key] for s in states], 1) for key in states[0] if key not in static}}
    graphs = counters["stats"]["unique_graphs"]
    for state in (*states[:3], update):
        outputs = []
        for agent in (eager, compiled):
            agent.zero_grad()
            logits, value = agent(agent.encode(static), state)
            logp = torch.log_softmax(logits, -1).masked_fill(~state["action_mask"], 0.0)
            (logp.sum() + value.square().sum()).backward()
            outputs.append((logits, value, agent.encoder[0].attention.query.weight.grad.clone()))
        for a, b in zip(*outputs, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert counters["stats"]["unique_graphs"] > graphs  # the step did run compiled
    assert dict(compiled.state_dict()).keys() == dict(eager.state_dict()).keys()  # checkpoints unchanged


@needs_cxx
@pytest.mark.parametrize(("problem", "mode"), [("tsp", "greedy"), ("tsp", "multi-greedy"), ("cvrp", "multi-greedy")])
def test_a_compiled_model_decodes_the_same_solutions(problem, mode):
    """The decodes of a compiled step equal the eager ones, tour for tour, over batches of two sizes."""
    data = kool_dataset(problem, 10, "test", 7)
    eager = decode(make_agent(problem), data, Decoding(mode, batch_size=4))
    compiled = decode(compile_step(make_agent(problem)), data, Decoding(mode, batch_size=4))
    np.testing.assert_allclose(compiled.lengths, eager.lengths, rtol=1e-6)
    assert all((a == b).all() for a, b in zip(compiled.tours, eager.tours, strict=True))


def test_without_a_cxx_compiler_compiling_fails_in_one_line():
    """(inductor's own config.patch: pytest's monkeypatch deleted the setting on undo, and every later
    compile in the session then failed)"""
    from torch._inductor import config

    with config.patch({"cpp.cxx": ("/nonexistent/g++",)}):
        problem = compiler_problem()
        assert problem.startswith("compiling the decode step needs a C++ compiler") and "\n" not in problem
        with pytest.raises(ValueError, match="needs a C\\+\\+ compiler"):
            compile_step(make_agent("tsp"))
    after = compiler_problem()
    assert after is None or "/nonexistent" not in after  # the setting is back


def test_gradients_reach_the_encoder_through_the_cache():
    agent = make_agent("tsp").train()
    static, states = episode_states("tsp")
    cache = agent.encode(static)
    loss = sum(agent.get_action_and_value(s, cache=cache)[1].sum() for s in states[1:3])
    loss.backward()
    assert agent.encoder[0].attention.query.weight.grad.abs().sum() > 0
    assert agent.embedding.node.weight.grad.abs().sum() > 0


def test_dynamic_embedding_hook_is_used_by_the_decoder():
    agent = make_agent("cvrp")
    static, states = episode_states("cvrp")
    cache, state = agent.encode(static), states[3]
    base = agent(cache, state)
    shape = (*state["action_mask"].shape, 128)
    agent.embedding.dynamic = lambda s: tuple(torch.zeros(shape) for _ in range(3))
    for a, b in zip(agent(cache, state), base, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    agent.embedding.dynamic = lambda s: tuple(torch.randn(shape) for _ in range(3))
    changed = agent(cache, state)[0]
    assert not torch.allclose(changed, base[0])
    assert (changed[~state["action_mask"]] == float("-inf")).all()


def test_state_wrapper_types():
    static, states = episode_states("cvrp")
    assert static["coords"].dtype == torch.float32 and set(static) == {"depot", "coords", "demand"}
    state = states[1]
    assert state["action_mask"].dtype == torch.bool
    assert state["last_node"].dtype == torch.int64
    assert state["current_load"].dtype == torch.float32


@needs_rlor
@pytest.mark.parametrize(("problem", "greedy", "multi_greedy"), [("tsp", 5.7956, 5.7089), ("cvrp", 11.3571, 10.9236)])
def test_rlor_checkpoints_reproduce_published_figures(problem, greedy, multi_greedy):
    """The original code's figures on the first 1,000 seed-1234 test instances (see spec.md)."""
    torch.set_num_threads(1)
    agent, ckpt = load_agent(RLOR / f"{problem}50-v0-12000.pt", problem=problem)
    assert ckpt["format"] == "rlor"
    data = kool_dataset(problem, 50, "test", 1000)
    assert decode(agent, data, "greedy").lengths.mean() == pytest.approx(greedy, abs=1e-3)
    assert decode(agent, data, Decoding("multi-greedy", batch_size=250)).lengths.mean() == pytest.approx(multi_greedy, abs=1e-3)


@needs_rlor
def test_wrong_problem_and_bad_checkpoints_are_rejected(tmp_path):
    with pytest.raises(CheckpointError, match="is a CVRP model, but a TSP model was asked for"):
        load_agent(RLOR / "cvrp50-v0-12000.pt", problem="tsp")
    with pytest.raises(CheckpointError, match="does not exist"):
        load_agent(tmp_path / "nothing.pt")
    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="cannot be read"):
        load_agent(corrupt)
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(3)}, foreign)
    with pytest.raises(CheckpointError, match="neither"):
        load_agent(foreign)


def test_saved_checkpoint_round_trips(tmp_path):
    agent = make_agent("tsp", seed=3)
    path = tmp_path / "ckpt" / "agent.pt"
    save_checkpoint({"problem": "tsp", "num_nodes": 10, "model_config": {}, "model": agent.state_dict()}, path)
    assert [p.name for p in path.parent.iterdir()] == ["agent.pt"]
    loaded, ckpt = load_agent(path, problem="tsp")
    assert ckpt["num_nodes"] == 10
    for a, b in zip(agent.state_dict().values(), loaded.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b)


def test_exported_weights_load_without_the_training_state(tmp_path):
    agent = make_agent("mtvrp", seed=2)
    full = tmp_path / "run" / "7.pt"
    payload = {"problem": "mtvrp", "num_nodes": 20, "model_config": {}, "model": agent.state_dict()}
    save_checkpoint(payload | {"optimizer": {"state": {}}, "rank_rng": [None], "args": {"env_id": "vrptw-v0"}}, full)
    export_weights(full, tmp_path / "vrptw20.pt")
    slim = read_checkpoint(tmp_path / "vrptw20.pt")
    assert "optimizer" not in slim and "rank_rng" not in slim and slim["args"] == {"env_id": "vrptw-v0"}
    loaded, _ = load_agent(tmp_path / "vrptw20.pt", problem="mtvrp")
    for a, b in zip(agent.state_dict().values(), loaded.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b)


@needs_rlor
def test_rlor_training_size_comes_from_the_file_name(tmp_path):
    renamed = tmp_path / "tsp20-v0-300.pt"
    renamed.write_bytes((RLOR / "tsp50-v0-12000.pt").read_bytes())
    assert read_checkpoint(renamed)["num_nodes"] == 20
    plain = tmp_path / "agent.pt"
    plain.write_bytes((RLOR / "tsp50-v0-12000.pt").read_bytes())
    assert read_checkpoint(plain)["num_nodes"] == 50


def test_sampler_follows_the_distribution_and_never_picks_masked_actions():
    from ppoor.models.agent import sample

    probs = torch.tensor([[0.0, 0.2, 0.0, 0.5, 0.3, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0, 1.0]])
    logp = probs.log().expand(4000, 2, 6)
    draws = sample(logp, torch.Generator().manual_seed(0))
    assert (probs[[0, 1]][None].expand(4000, 2, 6).gather(-1, draws[..., None]) > 0).all()
    freq = torch.stack([(draws[:, 0] == a).float().mean() for a in range(6)])
    torch.testing.assert_close(freq, probs[0], atol=0.03, rtol=0)
    assert (draws[:, 1] == 5).all()


@pytest.mark.parametrize("seed", range(3))
def test_single_query_attention_equals_the_fused_kernel(seed):
    """The greedy decoder's one-query attention (two batched products) against
    torch's scaled_dot_product_attention, with masked keys, on random inputs."""
    import torch.nn.functional as F
    from ppoor.models.attention_model import single_query_attention

    g = torch.Generator().manual_seed(seed)
    b, heads, keys, dk = 5, 8, 13, 16
    q = torch.randn(b, 1, heads, dk, generator=g).transpose(1, 2)  # the decoder's strided layout
    k, v = torch.randn(2, b, heads, keys, dk, generator=g)
    mask = torch.rand(b, 1, 1, keys, generator=g) < 0.6
    mask[..., seed] = True
    bias = torch.where(mask, 0.0, float("-inf"))
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    torch.testing.assert_close(single_query_attention(q, k, v, bias), expected, rtol=1e-5, atol=1e-5)
    assert not torch.equal(expected, F.scaled_dot_product_attention(q, k, v))  # the mask matters


@pytest.mark.parametrize("problem", ["tsp", "cvrp", "mtvrp"])
def test_the_transformer_encoder_encodes_each_instance_alone_even_in_training_mode(problem):
    """RouteFinder's layers hold no batch statistics: an instance's encoding in training mode is the
    same alone as in a batch (batch norm's is not, which --norm-groups exists for)."""
    static, _ = episode_states(problem, m=4)
    alone = {k: v[1:2] for k, v in static.items()}
    for encoder, independent in (("transformer", True), ("am", False)):
        torch.manual_seed(0)
        agent = Agent(problem, encoder=encoder).train()
        batch, single = agent.encode(static), agent.encode(alone)
        same = torch.allclose(batch.logit_key[1:2], single.logit_key, rtol=1e-4, atol=1e-5)
        assert same == independent, encoder


def test_the_encoder_kind_is_recorded_and_rebuilt_and_unknown_settings_fail_in_one_line(tmp_path):
    torch.manual_seed(1)
    agent = Agent("cvrp", encoder="transformer", distance_prior=2.0).eval()
    assert agent.config == {"distance_prior": 2.0, "encoder": "transformer"} and Agent("tsp").config == {}
    path = tmp_path / "t.pt"
    save_checkpoint({"problem": "cvrp", "num_nodes": 10, "model_config": agent.config, "model": agent.state_dict()}, path)
    loaded, _ = load_agent(path)
    static, states = episode_states("cvrp", m=2)
    with torch.no_grad():
        torch.testing.assert_close(loaded(loaded.encode(static), states[1])[0], agent(agent.encode(static), states[1])[0])
    for config, detail in (({"encoder": "gnn"}, "encoder must be one of am, transformer"), ({"depth": 9}, "depth")):
        save_checkpoint({"problem": "cvrp", "num_nodes": 10, "model_config": config, "model": agent.state_dict()}, path)
        with pytest.raises(CheckpointError, match="model settings this version cannot build") as error:
            load_agent(path)
        assert detail in str(error.value) and "\n" not in str(error.value)
