"""Errors carry fields: run-time problems as :class:`~ctxcompact.Problem`, user mistakes as
``UserError`` subclasses whose attributes say what and where."""

from __future__ import annotations

import typing

import pytest

from ctxcompact import CompactionController, Message, Problem, load_strategy
from ctxcompact.exceptions import (
    ArgumentError,
    CompactionError,
    MissingArgumentError,
    PricingError,
    StrategyLoadError,
    UnknownPricingError,
    UserError,
)
from ctxcompact.kit import batched_boundary
from ctxcompact.llm import CircuitBreakerLLM
from ctxcompact.replay import Pricing, provider
from ctxcompact.testing import FunctionStrategy, ScriptedLLM

SECRET = "the launch code is 0000"
KINDS = typing.get_args(typing.get_type_hints(Problem)["kind"])


# -- run-time problems ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_what_a_problem_shows_comes_from_its_fields_never_from_the_exception(kind: str) -> None:
    problem = Problem.raised(kind, RuntimeError(SECRET), source="leaky", count=3)  # type: ignore[arg-type]
    assert SECRET not in problem.shown
    assert SECRET not in problem.message  # a third-party message is withheld there too
    assert problem.detail == SECRET  # for DEBUG logs
    assert problem.shown == " ".join(problem.shown.split())  # one line


def test_the_kinds_are_the_closed_set_headers_know() -> None:
    assert len(KINDS) == 21
    assert {
        "strategy_raised",
        "output_rejected",
        "circuit_open",
        "store_failed",
        "no_payback",
        "not_smaller",
        "store_evicted",
        "pin_restored",
    } <= set(KINDS)


async def test_a_failed_event_carries_the_fields_and_the_legacy_sentence() -> None:
    def refuse(ctx: object) -> None:
        raise CompactionError("the summary was empty")

    controller = CompactionController(
        FunctionStrategy(refuse), max_context_size=100, reserved_context_size=10, max_failures=1
    )
    result = await controller.compact([Message.user("x" * 400)])
    assert result.event is not None
    raised, circuit = result.event.problems
    assert (raised.kind, raised.source, raised.exception_type) == (
        "strategy_raised",
        "refuse",
        "CompactionError",
    )
    assert (circuit.kind, circuit.count) == ("circuit_open", 1)
    assert result.event.error == (
        "CompactionError: the summary was empty; circuit now open after 1 consecutive failures"
    )
    assert str(result.event).endswith(
        "; strategy raised CompactionError; circuit open after 1 failures"
    )


# -- user mistakes ----------------------------------------------------------------------------


def test_a_bad_price_table_is_a_pricing_error_and_still_a_value_error() -> None:
    with pytest.raises(PricingError) as info:
        Pricing("mine", read=2.0)
    assert isinstance(info.value, UserError)
    assert isinstance(info.value, ValueError)
    assert (info.value.table, info.value.argument) == ("mine", "read")


def test_an_unknown_price_table_names_the_choices_and_is_still_a_key_error() -> None:
    with pytest.raises(KeyError) as info:
        provider("nope")
    error = info.value
    assert isinstance(error, UnknownPricingError)
    assert isinstance(error, UserError)
    assert error.name == "nope"
    assert "flat" in error.choices
    assert list(error.choices) == sorted(error.choices)
    assert str(error) == f"unknown pricing 'nope'; choose one of {', '.join(error.choices)}"


def test_a_bad_argument_names_it_and_is_still_a_value_error() -> None:
    with pytest.raises(ValueError, match="cooldown must be > 0") as info:
        CircuitBreakerLLM(ScriptedLLM(), cooldown=0)
    assert isinstance(info.value, ArgumentError)
    assert isinstance(info.value, UserError)
    assert info.value.argument == "cooldown"


def test_a_missing_argument_names_both_and_is_still_a_type_error() -> None:
    with pytest.raises(TypeError) as info:
        batched_boundary(4, clear_at_least=100)
    assert isinstance(info.value, MissingArgumentError)
    assert isinstance(info.value, UserError)
    assert (info.value.argument, info.value.needed_by) == ("unit_tokens", "clear_at_least")


@pytest.mark.parametrize(
    ("spec", "params", "reason", "choice"),
    [
        ("tool-result-hidng", None, "unknown_name", "tool-result-hiding"),
        ("ctxcompact.strategies:ToolResultHidng", None, "no_attribute", "ToolResultHiding"),
        ("tool-result-hiding", {"preserve_recent": 3}, "bad_params", "preserve_recent_n"),
        ("no_such_module_xyz:Thing", None, "module_not_found", None),
        ("not a spec", None, "malformed_spec", None),
    ],
)
def test_a_strategy_load_error_carries_the_spec_the_reason_and_the_choices(
    spec: str, params: dict[str, object] | None, reason: str, choice: str | None
) -> None:
    with pytest.raises(StrategyLoadError) as info:
        load_strategy(spec, params=params)
    error = info.value
    assert error.spec == spec
    assert error.reason == reason
    assert str(error) == f"cannot load strategy {spec!r}: {error.detail}"
    if choice is None:
        assert error.choices == ()
    else:
        assert choice in error.choices
