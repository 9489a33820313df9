"""Property-based: every non-LLM strategy on generated valid and invalid histories.

For each: no ``check_history`` problem its input did not have, order kept, input unchanged,
content-only strategies change only tool contents, and idempotence where documented.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxcompact import CompactionStrategy, HeuristicTokenCounter, Message, check_history
from ctxcompact.exceptions import ContextBudgetError
from ctxcompact.strategies import (
    ContextGuard,
    Pipeline,
    Schema1Masking,
    ToolResultHiding,
    ToolResultTruncation,
)
from tests.helpers.gen import invalid_histories, valid_histories
from tests.helpers.strategy_checks import assert_content_only, assert_safe, dump, run

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

CONTENT_ONLY: list[CompactionStrategy] = [
    ToolResultHiding(),
    ToolResultHiding(preserve_recent_n=1),
    ToolResultHiding(preserve_recent_n=0, batch_turns=2),
    ToolResultHiding(preserve_recent_n=1, clear_at_least=15),
    Schema1Masking(window_turns=1),
    Schema1Masking(window_turns=1, keep_errors=False, keep_last_k_per_tool=1),
    Schema1Masking(window_turns=2, batch_turns=2, clear_at_least=10),
    ToolResultTruncation(max_chars=10, head_chars=2, tail_chars=2),
]
IDEMPOTENT = CONTENT_ONLY  # a second run on the output is a no-op for each of these

histories = st.one_of(
    valid_histories(max_turns=4, max_steps=3),
    invalid_histories().map(lambda pair: pair[0]),
)
strategies = st.sampled_from(range(len(CONTENT_ONLY)))


@SETTINGS
@given(history=histories, which=strategies)
def test_content_only_strategies_keep_every_invariant(history: list[Message], which: int) -> None:
    strategy = CONTENT_ONLY[which]
    snap = dump(history)
    out = run(strategy, history)
    assert_safe(history, snap, out)
    if out is None:
        return
    assert assert_content_only(history, out)  # something changed, tool contents only
    assert {p.kind for p in check_history(out)} == {p.kind for p in check_history(history)}
    assert run(IDEMPOTENT[which], out) is None


@SETTINGS
@given(history=histories, budget=st.integers(1, 400), truncate=st.booleans())
def test_guard_keeps_every_invariant(history: list[Message], budget: int, truncate: bool) -> None:
    snap = dump(history)
    guard = ContextGuard(
        context_window=budget,
        reserve_tokens=0,
        truncate_first=truncate,
        max_tool_result_chars=10,
        head_chars=2,
        tail_chars=2,
    )
    try:
        out = run(guard, history)
    except ContextBudgetError as exc:  # what must be kept does not fit: said, not sent over
        error: ContextBudgetError | None = exc
    else:
        error = None
    if error is not None:
        assert sum(error.required.values()) > budget
        return
    assert_safe(history, snap, out)
    if out is None:
        return
    systems = [m for m in history if m.role in ("system", "developer")]
    assert [m for m in out if m.role in ("system", "developer")] == systems
    assert HeuristicTokenCounter().count(out) <= budget


@SETTINGS
@given(history=histories)
def test_pipeline_of_everything_keeps_every_invariant(history: list[Message]) -> None:
    pipeline = Pipeline(
        ToolResultTruncation(max_chars=10, head_chars=2, tail_chars=2),
        Schema1Masking(window_turns=2),
        ToolResultHiding(preserve_recent_n=1),
        ContextGuard(context_window=60, reserve_tokens=0),
    )
    snap = dump(history)
    try:
        out = run(pipeline, history)
    except ContextBudgetError:
        return
    assert_safe(history, snap, out)


NEVER_LONGER: list[CompactionStrategy] = [
    ToolResultHiding(preserve_recent_n=0),
    ToolResultHiding(preserve_recent_n=0, placeholder="[a placeholder longer than most results]"),
    Schema1Masking(window_turns=1),
    Schema1Masking(window_turns=1, placeholder_template="[masked {tool_name}]"),
    Schema1Masking(window_turns=1, keep_errors=False, keep_last_k_per_tool=1),
]


@SETTINGS
@given(history=histories, which=st.sampled_from(range(len(NEVER_LONGER))))
def test_hiding_and_masking_never_make_a_result_cost_more(
    history: list[Message], which: int
) -> None:
    # The rule is in tokens, under the context's counter (run() gives the heuristic): a short
    # accented result may be replaced by a longer but cheaper placeholder.
    counter = HeuristicTokenCounter()
    out = run(NEVER_LONGER[which], history)
    for before, after in zip(history, out or history, strict=True):
        if before is not after:
            assert counter.count_message(after) < counter.count_message(before)
