"""The Python API (``ppoor.solve``, ``ppoor.Model``): what it returns passes the tests' own checker,
gaps follow the given references, and bad input raises the command line's one-line errors."""

import math

import numpy as np
import ppoor
import pytest
from checks import check_cvrp_actions, check_tsp_actions, check_vrp_actions
from hypothesis import example, given, settings
from hypothesis import strategies as st
from ppoor.data.datasets import DataError
from ppoor.models import CheckpointError
from ppoor.search import Decoding


@pytest.fixture(scope="module")
def tsp():
    return ppoor.Model("tsp20", device="cpu")


@pytest.fixture(scope="module")
def cvrp():
    return ppoor.Model("cvrp20", device="cpu")


@settings(max_examples=12, deadline=None)
@given(
    count=st.integers(1, 4),
    nodes=st.integers(5, 30),
    how=st.sampled_from(["greedy", "multi-greedy", "sampling"]),
    augment=st.sampled_from([1, 8]),
    seed=st.integers(0, 2**16),
)
def test_tsp_tours_are_checked_tours_of_the_given_coordinates(tsp, count, nodes, how, augment, seed):
    coords = np.random.default_rng(seed).random((count, nodes, 2))
    result = tsp.solve(coords, Decoding(how, augment=augment, num_samples=4, seed=seed))
    assert len(result.tours) == len(result.lengths) == count and result.decode == how
    for tour, length, points in zip(result.tours, result.lengths, coords, strict=True):
        assert check_tsp_actions([*tour, tour[0]], points) == pytest.approx(length, rel=1e-6)
    assert result.mean_gap is None and np.isnan(result.gaps).all()  # no references given


@settings(max_examples=8, deadline=None)
@given(count=st.integers(1, 3), nodes=st.integers(3, 25), capacity=st.integers(10, 40), seed=st.integers(0, 2**16))
def test_cvrp_routes_from_a_dict_respect_the_capacity(cvrp, count, nodes, capacity, seed):
    rng = np.random.default_rng(seed)
    data = {
        "depot": rng.random((count, 2)),
        "coords": rng.random((count, nodes, 2)),
        "demand": rng.integers(1, 10, (count, nodes)),
        "capacity": capacity,
    }
    result = cvrp.solve(data, "multi-greedy")
    for b, (tour, length) in enumerate(zip(result.tours, result.lengths, strict=True)):
        cost = check_cvrp_actions(tour, data["depot"][b], data["coords"][b], data["demand"][b], capacity)
        assert cost == pytest.approx(length, rel=1e-6)


def test_gaps_follow_the_given_references_and_the_shipped_ones(tsp):
    coords = np.random.default_rng(3).random((3, 20, 2))
    first = tsp.solve(coords)
    references = first.lengths / 1.1  # the tours are 10% above these
    result = tsp.solve(coords, references=references)
    assert result.reference_source == "given"
    assert result.gaps == pytest.approx(np.full(3, 10.0))
    assert result.mean_gap == pytest.approx(10.0)
    shipped = ppoor.solve("val", checkpoint="tsp20", num_instances=5, device="cpu")
    assert shipped.reference_source.startswith("data/reference_lengths/tsp20_val")
    assert np.isfinite(shipped.gaps).all() and 0 <= shipped.mean_gap < 20
    with pytest.raises(DataError, match="do not fit these instances"):
        tsp.solve(coords, references=first.lengths * 2)  # references of other data are refused


def test_a_model_is_reused_and_greedy_is_repeatable(tsp):
    coords = np.random.default_rng(5).random((2, 15, 2))
    one, two = tsp.solve(coords), tsp.solve(coords[0])
    assert np.array_equal(one.tours[0], two.tours[0]) and one.lengths[0] == two.lengths[0]
    assert tsp.problem == "tsp" and tsp.num_nodes == 20 and "tsp20.pt" in repr(tsp)


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"data": {"coords": np.zeros((2, 5, 3))}}, DataError, "coords"),
        ({"data": 5}, DataError, "a set name .test / val., a path or a dict of arrays"),
        ({"data": "missing.npz"}, DataError, "no such file"),
        ({"decoding": "beam-search"}, ValueError, "decode must be one of"),
        ({"num_instances": 0}, ValueError, "num_instances must be a whole number of at least 1"),
        ({"variant": "vrptw"}, ValueError, "does not fit this TSP model"),
        ({"reference_solver": "pyvrp"}, ValueError, "solves CVRP"),
        ({"data": {"coords": np.full((1, 5, 2), np.nan)}}, DataError, "instances:"),
        ({"references": np.ones(3), "num_instances": 2}, DataError, "references holds"),
    ],
)
def test_bad_input_raises_one_line(tsp, options, error, message):
    options = {"data": "test", "num_instances": 2, **options}
    with pytest.raises(error, match=message) as raised:
        tsp.solve(**options)
    assert "\n" not in str(raised.value)


def test_bad_checkpoints_and_problems_raise(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist .the shipped ones: .*tsp20"):
        ppoor.Model("tsp7")
    with pytest.raises(CheckpointError, match="CVRP model was asked for"):
        ppoor.Model("tsp20", problem="cvrp")
    with pytest.raises(DataError, match="bare coordinates are TSP instances"):
        ppoor.solve(np.zeros((4, 2)), checkpoint="cvrp20")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="cannot be read"):
        ppoor.Model(tmp_path / "junk.pt")


@settings(max_examples=6, deadline=None)
@given(count=st.integers(1, 3), nodes=st.integers(5, 25), seed=st.integers(0, 2**16))
@example(count=1, nodes=17, seed=120)  # at temperature 1e-3 a near-tie (logits 0.005 apart) was sampled both ways
def test_sampling_controls_reach_greedy_at_their_limits(tsp, count, nodes, seed):
    """top-k 1 and a nucleus of almost nothing leave one action per step: the sampled tours are the
    greedy ones (multi-sampling the multi-greedy ones); the tours of looser controls are valid tours
    of their own. (A temperature near 0 is not exact: actions whose logits tie within ~0.01 stay
    likely; ``test_filter_logits_keeps_what_it_says`` checks what it does.)"""
    coords = np.random.default_rng(seed).random((count, nodes, 2))
    greedy, multi = tsp.solve(coords), tsp.solve(coords, "multi-greedy")
    for controls in ({"top_k": 1}, {"top_p": 1e-9}):
        sampled = tsp.solve(coords, Decoding("sampling", num_samples=3, seed=seed, **controls))
        assert np.allclose(sampled.lengths, greedy.lengths), controls
        starts = tsp.solve(coords, Decoding("multi-sampling", seed=seed, **controls))
        assert np.allclose(starts.lengths, multi.lengths), controls
    loose = tsp.solve(coords, Decoding("multi-sampling", seed=seed, temperature=2.0, top_k=3, top_p=0.9))
    for tour, length, points in zip(loose.tours, loose.lengths, coords, strict=True):
        assert check_tsp_actions([*tour, tour[0]], points) == pytest.approx(length, rel=1e-6)


@settings(max_examples=4, deadline=None)
@given(count=st.integers(1, 3), nodes=st.integers(5, 20), seed=st.integers(0, 2**16))
def test_beams_of_width_one_are_the_greedy_decodes(tsp, cvrp, count, nodes, seed):
    """A beam that keeps one partial solution keeps the most probable action at every step: beam
    W = 1 is greedy and multi-beam W = 1 is multi-greedy, tour for tour, on TSP and CVRP."""
    rng = np.random.default_rng(seed)
    coords = rng.random((count, nodes, 2))
    cvrp_data = {"depot": rng.random((count, 2)), "coords": coords, "demand": rng.integers(1, 10, (count, nodes)),
                 "capacity": 30}  # fmt: skip
    for model, data in ((tsp, coords), (cvrp, cvrp_data)):
        for beam, greedy in (("beam", "greedy"), ("multi-beam", "multi-greedy")):
            got, want = model.solve(data, Decoding(beam, beam_width=1)), model.solve(data, greedy)
            np.testing.assert_allclose(got.lengths, want.lengths, rtol=1e-9)
            assert all(np.array_equal(a, b) for a, b in zip(got.tours, want.tours, strict=True))


@settings(max_examples=4, deadline=None)
@given(nodes=st.integers(4, 6), seed=st.integers(0, 2**16))
def test_a_beam_wide_enough_to_keep_every_tour_finds_the_optimum(tsp, nodes, seed):
    """With W = n! slots (every ordered partial tour at every depth) beam search enumerates every
    tour, so its best is the optimum that brute force over the permutations finds; a narrower beam
    is never better, and every beam's tours are valid."""
    import itertools

    points = np.random.default_rng(seed).random((2, nodes, 2))
    found = tsp.solve(points, Decoding("beam", beam_width=math.factorial(nodes)))
    narrow = tsp.solve(points, Decoding("beam", beam_width=2))
    for b, instance in enumerate(points):
        best = min(check_tsp_actions([0, *rest, 0], instance) for rest in itertools.permutations(range(1, nodes)))
        assert found.lengths[b] == pytest.approx(best, rel=1e-9)
        assert narrow.lengths[b] >= best - 1e-9
        for result in (found, narrow):
            tour = result.tours[b]
            assert check_tsp_actions([*tour, tour[0]], instance) == pytest.approx(result.lengths[b], rel=1e-6)


def test_filter_logits_keeps_what_it_says():
    import torch
    from ppoor.search.decoding import filter_logits

    logits = torch.log(torch.tensor([[[0.5, 0.3, 0.15, 0.05, 0.0]]]))  # the last action infeasible (-inf)
    kept = lambda **kw: torch.isfinite(filter_logits(logits, **kw))[0, 0].tolist()  # noqa: E731
    assert kept(top_k=2) == [True, True, False, False, False]
    assert kept(top_p=0.5) == [True, False, False, False, False]  # 0.5 alone reaches 0.5
    assert kept(top_p=0.79) == [True, True, False, False, False]
    assert kept(top_p=0.81) == [True, True, True, False, False]
    assert kept(top_k=10, top_p=1.0) == [True, True, True, True, False]
    sharper = filter_logits(logits, temperature=0.5).softmax(-1)[0, 0]
    assert sharper[0] > 0.5 and torch.isclose(sharper.sum(), torch.tensor(1.0))
    # near 0 the argmax takes all unless another action is within about 0.01 of it
    cold = filter_logits(torch.tensor([[[1.0, 0.95, 0.0]]]), temperature=1e-3).softmax(-1)[0, 0]
    assert cold[1] < 1e-20 and cold[0] == 1.0
    tie = filter_logits(torch.tensor([[[1.0, 0.995, 0.0]]]), temperature=1e-3).softmax(-1)[0, 0]
    assert 0.99 < tie[0] + tie[1] and tie[1] > 1e-3


@pytest.mark.parametrize(
    ("options", "message"),
    [({"temperature": 0.0}, "temperature must be in"), ({"top_k": 0}, "top_k must be a whole number"),
     ({"top_p": 1.5}, "top_p must be in"), ({"top_p": float("nan")}, "top_p must be in"),
     ({"strategy": "beam", "beam_width": 0}, "beam_width must be a whole number"),
     ({"strategy": "multi-beam", "beam_width": 2.5}, "beam_width must be a whole number"),
     ({"augment": 3}, "--augment must be 1 or 8"), ({"augment": True}, "--augment must be 1 or 8"),
     ({"batch_size": 0}, "batch_size must be a whole number"), ({"seed": -1}, "seed must be a whole number"),
     ({"num_starts": 0}, "num_starts must be a whole number"), ({"num_samples": 1.5}, "num_samples must be a whole"),
     ({"distance_prior": float("inf")}, "distance_prior must be a finite number")],
)  # fmt: skip
def test_bad_decoding_settings_raise_one_line(options, message):
    with pytest.raises(ValueError, match=message) as raised:
        Decoding(**{"strategy": "sampling", **options})
    assert "\n" not in str(raised.value)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 12), seed=st.integers(0, 2**16))
def test_two_opt_reaches_a_local_optimum_never_longer(n, seed):
    """On random symmetric matrices (metric or not): a permutation of the same nodes, never longer,
    and no 2-opt move left that shortens it (checked by brute force over every pair of edges)."""
    from ppoor.search.polish import two_opt

    rng = np.random.default_rng(seed)
    dist = rng.integers(1, 100, (n, n)).astype(float)
    dist = np.triu(dist, 1) + np.triu(dist, 1).T
    tour = rng.permutation(n)
    better = two_opt(dist, tour)

    def length(t):
        return sum(dist[t[k], t[(k + 1) % len(t)]] for k in range(len(t)))

    assert sorted(better.tolist()) == list(range(n)) and length(better) <= length(tour) + 1e-9
    for i in range(n):
        for j in range(i + 2, n):
            if i == 0 and j == n - 1:
                continue
            moved = np.concatenate([better[: i + 1], better[i + 1 : j + 1][::-1], better[j + 1 :]])
            assert length(moved) >= length(better) - 1e-9


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 11), seed=st.integers(0, 2**16))
def test_or_opt_and_the_tsp_local_search_reach_local_optima_never_longer(n, seed):
    """On random symmetric matrices: or-opt leaves no segment of 1-3 nodes whose move to another edge,
    forwards or reversed, shortens the tour, and the 2-opt + or-opt search leaves neither kind of
    move (both checked by brute force, building every moved tour)."""
    from ppoor.search.polish import or_opt, tsp_local_search

    rng = np.random.default_rng(seed)
    dist = rng.integers(1, 100, (n, n)).astype(float)
    dist = np.triu(dist, 1) + np.triu(dist, 1).T
    tour = rng.permutation(n)

    def length(t):
        return sum(dist[t[k], t[(k + 1) % len(t)]] for k in range(len(t)))

    def segment_moves(t):
        t = list(t)
        for size in range(1, 4):
            for i in range(n):
                segment = [t[(i + k) % n] for k in range(size)]
                rest = [v for v in t if v not in segment]
                for at in range(1, len(rest) + 1):
                    for part in (segment, segment[::-1]):
                        yield rest[:at] + part + rest[at:]

    for better in (or_opt(dist, tour), tsp_local_search(dist, tour)):
        assert sorted(better.tolist()) == list(range(n)) and length(better) <= length(tour) + 1e-9
        assert all(length(moved) >= length(better) - 1e-9 for moved in segment_moves(better) if n > 3)
    both = tsp_local_search(dist, tour)
    for i in range(n):
        for j in range(i + 2, n):
            if not (i == 0 and j == n - 1):
                moved = np.concatenate([both[: i + 1], both[i + 1 : j + 1][::-1], both[j + 1 :]])
                assert length(moved) >= length(both) - 1e-9


def test_polish_is_its_own_row_and_its_lengths_are_checked(tsp):
    from ppoor.search.polish import polish

    coords = np.random.default_rng(11).random((4, 30, 2))
    decoded = tsp.solve(coords, references=np.full(4, 1.0))  # any positive references: gaps to compare
    polished = polish(decoded)
    assert polished.decode == "greedy + 2-opt + or-opt" and (polished.lengths <= decoded.lengths + 1e-9).all()
    assert polished.lengths.mean() < decoded.lengths.mean()  # greedy TSP30 tours leave 2-opt moves
    for tour, length, points in zip(polished.tours, polished.lengths, coords, strict=True):
        assert check_tsp_actions([*tour, tour[0]], points) == pytest.approx(length, rel=1e-9)
    with pytest.raises(ValueError, match="PyVRP models CVRP, the VRP variants, MRCVRP and PCVRP, not PDP"):
        polish(ppoor.Model("families/pdp20").solve("test", num_instances=1))


@settings(max_examples=4, deadline=None)
@given(count=st.integers(1, 3), nodes=st.integers(3, 25), capacity=st.integers(10, 40), seed=st.integers(0, 2**16))
def test_the_vrp_polish_is_feasible_and_never_costlier(cvrp, count, nodes, capacity, seed):
    """PyVRP's local search on decoded CVRP routes (from a dict, so capacities of any size) and on
    decoded VRPTW / open-route / backhaul routes (RouteFinder's generator): every polished solution
    passes the tests' own checkers at the cost reported, and none costs more than the decoded one."""
    from ppoor.search.polish import polish

    rng = np.random.default_rng(seed)
    data = {"depot": rng.random((count, 2)), "coords": rng.random((count, nodes, 2)),
            "demand": rng.integers(1, 10, (count, nodes)), "capacity": capacity}  # fmt: skip
    decoded = cvrp.solve(data)
    polished = polish(decoded)
    assert polished.decode == "greedy + local search"
    assert (polished.lengths <= decoded.lengths + 1e-9).all()
    for b, (tour, length) in enumerate(zip(polished.tours, polished.lengths, strict=True)):
        cost = check_cvrp_actions(tour, data["depot"][b], data["coords"][b], data["demand"][b], capacity)
        assert cost == pytest.approx(length, rel=1e-6)
    vrp = ppoor.Model("mtvrp20")
    for variant in ("vrptw", "ovrpb", "vrpmbl"):
        decoded = vrp.solve("test", variant=variant, num_instances=count, num_nodes=nodes if nodes >= 5 else 5)
        polished = polish(decoded)
        assert (polished.lengths <= decoded.lengths + 1e-9).all()
        for (group, i, tour, length) in polished.items():
            instance = {key: value[i] for key, value in group.instances.items()}
            assert check_vrp_actions(tour, instance) == pytest.approx(length, rel=1e-6), variant
