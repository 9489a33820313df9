"""Every non-LLM strategy on every public trace: valid output, input untouched, savings printed.

Run with ``-s`` to see the table (``pytest tests/test_strategy_traces.py -s``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from ctxcompact import (
    CompactionStrategy,
    HeuristicTokenCounter,
    Message,
    check_history,
    from_openai,
)
from ctxcompact.strategies import (
    ContextGuard,
    Pipeline,
    Schema1Masking,
    ToolResultHiding,
    ToolResultTruncation,
)
from tests.helpers.strategy_checks import assert_safe, dump, run
from tests.helpers.traces import load_trace, trace_names

STRATEGIES: dict[str, Callable[[], CompactionStrategy]] = {
    "hiding": ToolResultHiding,
    "hiding-batch10": lambda: ToolResultHiding(batch_turns=10),
    # always: mask each whole trace, which may fit the test context's window.
    "schema1": lambda: Schema1Masking(always=True),
    "schema1-keep2": lambda: Schema1Masking(keep_last_k_per_tool=2, always=True),
    "schema1-clear20k": lambda: Schema1Masking(clear_at_least=20_000, always=True),
    "truncation-8k": lambda: ToolResultTruncation(max_chars=8_000),
    "guard-32k": lambda: ContextGuard(context_window=32_000),
    "pipeline": lambda: Pipeline(ToolResultTruncation(max_chars=8_000), ToolResultHiding()),
}


@pytest.fixture(scope="module")
def histories() -> dict[str, list[Message]]:
    return {name: from_openai(load_trace(name)) for name in trace_names()}


@pytest.mark.parametrize("strategy_name", list(STRATEGIES))
def test_strategy_on_every_trace(
    strategy_name: str, histories: dict[str, list[Message]], caplog: pytest.LogCaptureFixture
) -> None:
    counter = HeuristicTokenCounter()
    total_before = total_after = changed = 0
    lines = []
    caplog.set_level(logging.ERROR, logger="ctxcompact.strategies.guard")
    for name, history in histories.items():
        assert check_history(history) == [], name
        snap = dump(history)
        out = run(STRATEGIES[strategy_name](), history)
        assert_safe(history, snap, out)
        result = history if out is None else out
        assert check_history(result) == [], name
        before, after = counter.count(history), counter.count(result)
        assert after <= before, name
        total_before += before
        total_after += after
        changed += out is not None
        lines.append(f"  {name:50} {before:>9,} -> {after:>9,} ({1 - after / before:6.1%} saved)")
    print(f"\n{strategy_name}: {changed}/{len(histories)} traces changed")
    print("\n".join(lines))
    print(
        f"  {'TOTAL':50} {total_before:>9,} -> {total_after:>9,} "
        f"({1 - total_after / total_before:6.1%} saved)"
    )
    assert changed > 0
    assert total_after < total_before
