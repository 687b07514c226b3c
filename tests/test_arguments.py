"""Every numeric argument of every script, checked from one table: each has a range, and a value
outside it (below, above, NaN, infinity) stops the script's own check with one line naming the flag."""

import math
import types
import typing
from dataclasses import fields, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ppoor import eval as evaluator
from ppoor import eval_rlea, ppo_or, rlea
from ppoor.codegen.settings import check_args as rlea_check_args
from ppoor.training import options as ppo_options
from ppoor.training.runs import MAX_SECONDS, check_numbers, fail, flag, new_run_dir


def ppo_or_check(args):
    starts = ppo_options.env_size(args).starts
    ppo_options.check_args(ppo_options.with_defaults(args, starts), starts)


SCRIPTS = {  # script: (its Args with the defaults a user gets, its ranges, its check)
    "ppo_or.py": (ppo_or.Args(num_nodes=20, num_envs=64), ppo_options.LIMITS, ppo_or_check),
    "eval.py": (evaluator.Args(checkpoint="tsp20"), evaluator.LIMITS, evaluator.check_args),
    "rlea.py": (rlea.Args(), rlea.LIMITS, lambda args: fail(rlea_check_args(args, rlea.LIMITS))),
    "eval_rlea.py": (eval_rlea.Args(), eval_rlea.LIMITS, lambda args: fail(rlea_check_args(args, eval_rlea.LIMITS))),
}
try:  # the railway scripts need flatland-rl (an optional extra)
    from ppoor import eval_flatland, ppo_flatland, ppo_priorities
    from ppoor.railway import priorities
    from ppoor.railway import trainer as rail_trainer

    SCRIPTS["ppo_flatland.py"] = (ppo_flatland.Args(), rail_trainer.LIMITS, rail_trainer.check_args)
    SCRIPTS["ppo_priorities.py"] = (ppo_priorities.Args(), priorities.LIMITS, priorities.check_args)
    SCRIPTS["eval_flatland.py"] = (eval_flatland.Args(), eval_flatland.LIMITS, eval_flatland.check_args)
except ImportError:
    pass


def options(tp) -> tuple:
    """The types a field's annotation admits (``int | None`` -> (int, NoneType))."""
    return typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,)


def numeric_fields(args) -> dict[str, bool]:
    """The fields whose type admits an int or a float -> whether it is an int."""
    return {f.name: int in options(f.type) for f in fields(args) if {int, float} & set(options(f.type))}


def bad_values(low: float, high: float, integer: bool) -> list[float]:
    """Values just outside [low, high]; for a float also NaN, and infinity where the range is finite
    (an int field takes whole numbers only on the command line)."""
    if integer:
        return [low - 1] + ([high + 1] if high != math.inf else [])
    values = [math.nan, low - max(abs(low), 1e-3) * 0.5 - 1e-9]
    if high != math.inf:
        values += [math.inf, high * 2 + 1]
    return values


CASES = [
    (script, name, value)
    for script, (args, limits, _) in SCRIPTS.items()
    for name, integer in numeric_fields(args).items()
    for value in bad_values(*limits.get(name, (0, 0)), integer=integer)
]


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_every_numeric_argument_has_a_range(script):
    args, limits, _ = SCRIPTS[script]
    assert set(numeric_fields(args)) == set(limits), "a numeric argument without a range, or a stale range"
    for name in limits:  # the defaults themselves are in range
        value = getattr(args, name)
        low, high = limits[name]
        assert value is None or low <= value <= high, (name, value)


@pytest.mark.parametrize(("script", "name", "value"), CASES)
def test_a_value_out_of_range_stops_with_one_line(script, name, value):
    args, _, check = SCRIPTS[script]
    with pytest.raises(SystemExit) as exc:
        check(replace(args, **{name: value}))
    message = str(exc.value.code)
    assert message.startswith(f"error: {flag(name)} must be "), message
    assert len(message.splitlines()) == 1, message


@settings(max_examples=200, deadline=None)
@given(
    low=st.floats(-1e6, 1e6),
    width=st.floats(0, 1e6),
    value=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(10**12), 10**12)),
)
def test_check_numbers_accepts_exactly_the_closed_range(low, width, value):
    high = low + width
    from dataclasses import make_dataclass

    args = make_dataclass("Args", [("x", float)])(value)
    problems = check_numbers(args, {"x": (low, high)})
    inside = not (isinstance(value, float) and math.isnan(value)) and low <= value <= high
    assert (problems == []) == inside
    if problems:
        assert problems[0].startswith("--x must be ")


def test_infinite_budgets_are_refused_but_huge_finite_ones_are_not():
    from dataclasses import make_dataclass

    args = make_dataclass("Args", [("total_seconds", float)])
    assert check_numbers(args(math.inf), {"total_seconds": (1e-3, MAX_SECONDS)})
    assert not check_numbers(args(MAX_SECONDS), {"total_seconds": (1e-3, MAX_SECONDS)})


def test_run_folders_started_in_the_same_second_never_collide(tmp_path):
    names = [new_run_dir("tsp-v0__x__1", str(tmp_path))[0] for _ in range(3)]
    assert len(set(names)) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)
