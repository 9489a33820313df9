"""Pipeline: order, no-op, contexts handed to each step, TOML steps."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from ctxcompact import CompactionContext, Message, load_strategy
from ctxcompact.exceptions import ConfigError, StrategyLoadError
from ctxcompact.strategies import Pipeline, ToolResultHiding, ToolResultTruncation
from tests.helpers.gen import assistant, call, tool, user
from tests.helpers.strategy_checks import assert_safe, dump, run


class Recorder:
    """A strategy that records the contexts it sees and returns a fixed answer."""

    def __init__(self, answer: Sequence[Message] | None) -> None:
        self.answer = answer
        self.seen: list[CompactionContext] = []

    async def compact(self, ctx: CompactionContext) -> Sequence[Message] | None:
        self.seen.append(ctx)
        return self.answer


def history(n: int = 8, size: int = 60_000) -> list[Message]:
    out = [user("go")]
    for k in range(n):
        out += [assistant(None, call(f"c{k}")), tool(f"c{k}", "x" * size)]
    return out


def test_steps_run_in_order_each_on_the_previous_output() -> None:
    h = history()
    shorter = [user("short")]
    first, second = Recorder(shorter), Recorder(None)
    out = run(Pipeline(first, second), h)
    assert out == shorter
    assert first.seen[0].history is h
    assert second.seen[0].history is shorter
    assert second.seen[0].token_count == second.seen[0].token_counter.count(shorter)
    assert second.seen[0].max_context_size == first.seen[0].max_context_size


def test_all_no_ops_give_none() -> None:
    a, b = Recorder(None), Recorder(None)
    assert run(Pipeline(a, b), history()) is None
    assert len(a.seen) == len(b.seen) == 1
    assert run(Pipeline(), history()) is None


def test_truncation_then_hiding() -> None:
    h = history()
    snap = dump(h)
    out = run(Pipeline(ToolResultTruncation(), ToolResultHiding(preserve_recent_n=2)), h)
    assert_safe(h, snap, out)
    assert out is not None
    assert [m.content for m in out[2:13:2]] == [ToolResultHiding().placeholder] * 6
    assert all(len(m.text) < 5_000 for m in out[13:])


def test_steps_from_toml_are_loaded() -> None:
    p = Pipeline(
        steps=[
            "tool-result-truncation",
            {"strategy": "tool-result-hiding", "params": {"preserve_recent_n": 2}},
        ]
    )
    assert isinstance(p.strategies[0], ToolResultTruncation)
    assert isinstance(p.strategies[1], ToolResultHiding)
    assert p.strategies[1].preserve_recent_n == 2
    loaded = load_strategy("pipeline", params={"steps": ["ctxcompact.strategies:ContextGuard"]})
    assert isinstance(loaded, Pipeline)
    assert type(loaded.strategies[0]).__name__ == "ContextGuard"


def test_python_strategies_come_before_toml_steps() -> None:
    first = Recorder(None)
    p = Pipeline(first, steps=["tool-result-hiding"])
    assert p.strategies[0] is first
    assert isinstance(p.strategies[1], ToolResultHiding)


@pytest.mark.parametrize(
    ("steps", "key"),
    [
        ([42], "steps[0]"),
        (["tool-result-hiding", {"params": {}}], "steps[1]"),
        ([{"strategy": "tool-result-hiding", "extra": 1}], "steps[0]"),
        ([{"strategy": "tool-result-hiding", "params": [1]}], "steps[0].params"),
        ("tool-result-hiding", "steps"),
    ],
)
def test_bad_steps_raise_config_error(steps: object, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        Pipeline(steps=steps)  # type: ignore[arg-type]
    assert info.value.key == key


def test_unknown_step_strategy_names_the_spec() -> None:
    with pytest.raises(StrategyLoadError, match="no-such-strategy"):
        Pipeline(steps=["no-such-strategy"])


@pytest.mark.parametrize(
    "name",
    ["ToolResultHiding", "Schema1Masking", "ToolResultTruncation", "ContextGuard", "Pipeline"],
)
def test_every_strategy_builds_with_no_arguments(name: str) -> None:
    import ctxcompact.strategies as strategies
    from ctxcompact import CompactionStrategy

    strategy = getattr(strategies, name)()
    assert isinstance(strategy, CompactionStrategy)
    assert name in repr(strategy)
