"""LLMSummary on generated histories (hypothesis) and on every public trace."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxcompact import (
    CompactionContext,
    Completion,
    HeuristicTokenCounter,
    Message,
    check_history,
    from_openai,
)
from ctxcompact.exceptions import SummaryRejectedError
from ctxcompact.strategies import SUMMARY_PREFIX, HidingThenSummary, LLMSummary
from ctxcompact.testing import LLMRequest, ScriptedLLM
from tests.helpers.gen import invalid_histories, valid_histories
from tests.helpers.traces import load_meta, load_trace, trace_names

COUNTER = HeuristicTokenCounter()


def run(
    strategy: LLMSummary | HidingThenSummary, history: Sequence[Message], llm: ScriptedLLM
) -> Sequence[Message] | None:
    tokens = COUNTER.count(history)
    ctx = CompactionContext(history, tokens, max(tokens, 20_000), 1_000, llm=llm)
    try:
        return asyncio.run(strategy.compact(ctx))
    except SummaryRejectedError as exc:
        error = exc
    # The scripted answers are fine text: the one refusal possible is a summary that would
    # not shrink the (generated, often tiny) part it replaces.
    assert error.reason == "not_smaller"
    return None


def kinds(history: Sequence[Message]) -> set[str]:
    return {p.kind for p in check_history(history)}


def check_output(history: Sequence[Message], out: Sequence[Message] | None) -> None:
    """The invariants: no new problem, one summary, before it only the history's own
    messages in order (systems and pins: the task verbatim), the tail reused as is."""
    if out is None:
        return
    assert kinds(out) <= kinds(history)
    summaries = [i for i, m in enumerate(out) if m.text.startswith(SUMMARY_PREFIX)]
    assert len(summaries) >= 1
    s = summaries[0]
    assert out[s].role == "user"
    positions = [next(i for i, h in enumerate(history) if h is m) for m in out[:s]]
    assert positions == sorted(set(positions))
    # Every system message and the task (the first user message) are still there, verbatim.
    task = next(
        (m for m in history if m.role == "user" and not m.text.startswith(SUMMARY_PREFIX)), None
    )
    for pinned in [m for m in history if m.role in ("system", "developer")] + [task]:
        assert pinned is None or any(m is pinned for m in out)
    tail = out[s + 1 :]
    # The kept tail is the history's own suffix: the very same objects, in order.
    assert all(a is b for a, b in zip(tail, history[len(history) - len(tail) :], strict=True))
    assert len(out) <= len(history)
    assert COUNTER.count(out) < COUNTER.count(history)  # a summary always shrinks


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=valid_histories(max_turns=4), keep=st.integers(0, 4))
def test_valid_histories_stay_valid(history: list[Message], keep: int) -> None:
    before = [m.model_dump() for m in history]
    out = run(LLMSummary(max_preserved_messages=keep), history, ScriptedLLM("sum"))
    assert [m.model_dump() for m in history] == before
    check_output(history, out)
    if out is not None:
        assert check_history(out) == []


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=invalid_histories(), keep=st.integers(0, 3))
def test_invalid_histories_get_no_new_problem(case: tuple[list[Message], str], keep: int) -> None:
    history, _ = case
    out = run(LLMSummary(max_preserved_messages=keep), history, ScriptedLLM("sum"))
    check_output(history, out)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=valid_histories(max_turns=4, max_steps=4))
def test_hiding_then_summary_keeps_histories_valid(history: list[Message]) -> None:
    strategy = HidingThenSummary(preserve_recent_n=1)
    out = run(strategy, history, ScriptedLLM("sum", "sum"))
    if out is not None:
        assert check_history(out) == []
        assert len(out) <= len(history)


# -- the public traces -------------------------------------------------------------------------


def reference_answer(name: str) -> str:
    """Claude Code's real summary for the traces that ended in a compaction, else a stand-in."""
    try:
        answer = load_meta(name).get("reference_compaction_output")
    except FileNotFoundError:
        answer = None
    return answer if isinstance(answer, str) else f"Summary of {name}: task, errors, files, todo."


@pytest.mark.parametrize("name", trace_names())
async def test_every_trace_is_summarized_validly_and_saves_tokens(name: str) -> None:
    history = from_openai(load_trace(name))
    answer = reference_answer(name)
    seen: list[LLMRequest] = []

    def respond(request: LLMRequest) -> Completion:
        seen.append(request)
        return Completion(Message.assistant(answer))

    tokens = COUNTER.count(history)
    window = 32_000
    ctx = CompactionContext(history, tokens, window, 4_000, llm=ScriptedLLM(respond))
    out = await LLMSummary(max_summary_tokens=4_000).compact(ctx)
    assert out is not None
    check_output(history, out)
    (request,) = seen
    # The summarizer's own request fits its window (prompt + transcript + answer).
    request_tokens = COUNTER.count([Message.system(request.system or ""), *request.messages])
    assert request_tokens + 4_000 <= window
    after = COUNTER.count(out)
    print(f"{name}: {tokens} -> {after} tokens ({1 - after / tokens:.0%} saved)")
    assert after < tokens


@pytest.mark.parametrize("name", trace_names())
async def test_every_trace_through_hiding_then_summary_is_valid(name: str) -> None:
    history = from_openai(load_trace(name))
    tokens = COUNTER.count(history)
    # A window the trace overflows by half: hiding alone rarely suffices, the summary follows.
    window = tokens // 2 + 4_000
    llm = ScriptedLLM(f"Summary of {name}.")
    ctx = CompactionContext(history, tokens, window, 4_000, llm=llm)
    out = await HidingThenSummary(max_summary_tokens=2_000).compact(ctx)
    assert out is not None
    assert kinds(out) <= kinds(history)
    after = COUNTER.count(out)
    path = "hiding+summary" if llm.requests else "hiding"
    print(f"{name}: {tokens} -> {after} tokens via {path} ({1 - after / tokens:.0%} saved)")
    assert after < tokens
    if not llm.requests:
        assert after + 4_000 < window  # hiding alone was judged enough, and it is
