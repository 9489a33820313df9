"""CircuitBreakerLLM: an outage is paid by the first failed calls, then refused unsent.

The state machine with a manual clock (closed -> open -> half-open -> closed/open), what
counts as an outage, one probe at a time, and what the controller and the strategies make of
a refusal: the per-conversation circuit stays closed, the event says ``summarizer``, hiding
and the LLM-free pipeline steps still apply.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from ctxcompact import (
    CompactionContext,
    CompactionController,
    ControllerState,
    Message,
    ToolCall,
    check_history,
)
from ctxcompact.exceptions import (
    AuthenticationError,
    ContextTooLongError,
    LLMConnectionError,
    LLMTimeoutError,
    LLMUnavailableError,
    RateLimitError,
    ServerError,
)
from ctxcompact.llm import CircuitBreakerLLM, watch_outages
from ctxcompact.strategies import HidingThenSummary, LLMSummary, Pipeline, ToolResultHiding
from ctxcompact.testing import ScriptedLLM


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def ask() -> list[Message]:
    return [Message.user("summarize this")]


async def outcome(llm: CircuitBreakerLLM) -> str:
    """The call's result: the answer text or the exception's type name."""
    try:
        completion = await llm.complete(ask())
    except Exception as exc:
        return type(exc).__name__
    return completion.message.text or ""


async def test_one_failed_call_opens_it_and_later_calls_are_refused_unsent() -> None:
    inner = ScriptedLLM(LLMConnectionError("down"))
    llm = CircuitBreakerLLM(inner, cooldown=30, clock=Clock())
    assert await outcome(llm) == "LLMConnectionError"
    assert [await outcome(llm) for _ in range(5)] == ["LLMUnavailableError"] * 5
    assert len(inner.requests) == 1  # the five refusals reached nobody
    stats = llm.stats()
    assert (stats.state, stats.calls, stats.failures, stats.refused, stats.opened) == (
        "open",
        1,
        1,
        5,
        1,
    )
    assert stats.retry_in_s == 30


async def test_the_refusal_says_when_a_probe_goes_and_after_how_many_failures() -> None:
    clock = Clock()
    llm = CircuitBreakerLLM(ScriptedLLM(ServerError("503")), cooldown=30, clock=clock)
    await outcome(llm)
    clock.now += 12
    with pytest.raises(LLMUnavailableError, match=r"probe goes in 18\.0 s") as info:
        await llm.complete(ask())
    assert (info.value.retry_in_s, info.value.failures) == (18, 1)
    assert not info.value.retryable


async def test_threshold_counts_consecutive_failures_and_an_answer_resets_the_count() -> None:
    inner = ScriptedLLM(
        LLMTimeoutError("t"), LLMTimeoutError("t"), "ok", LLMTimeoutError("t"),
        LLMTimeoutError("t"), LLMTimeoutError("t"),
    )  # fmt: skip
    llm = CircuitBreakerLLM(inner, failure_threshold=3, cooldown=5, clock=Clock())
    results = [await outcome(llm) for _ in range(7)]
    assert results == [
        "LLMTimeoutError", "LLMTimeoutError", "ok",  # two, then an answer: count back to 0
        "LLMTimeoutError", "LLMTimeoutError", "LLMTimeoutError",  # three in a row: open
        "LLMUnavailableError",
    ]  # fmt: skip
    assert llm.state == "open"


@pytest.mark.parametrize(
    "error", [ContextTooLongError("too long"), AuthenticationError("401"), ValueError("odd")]
)
async def test_what_counts_as_an_outage(error: Exception) -> None:
    """Answers that say no (400, 401) show the endpoint is up; a foreign exception from a
    third-party model is taken as an outage, like a timeout."""
    llm = CircuitBreakerLLM(ScriptedLLM(error, "ok"), cooldown=30, clock=Clock())
    first = await outcome(llm)
    second = await outcome(llm)
    assert first == type(error).__name__
    if isinstance(error, ValueError):
        assert (second, llm.state) == ("LLMUnavailableError", "open")
    else:
        assert (second, llm.state) == ("ok", "closed")


async def test_a_rate_limit_after_the_sdk_retries_opens_it() -> None:
    llm = CircuitBreakerLLM(ScriptedLLM(RateLimitError("429")), cooldown=30, clock=Clock())
    await outcome(llm)
    assert llm.state == "open"


async def test_after_the_cool_down_one_probe_goes_and_an_answer_closes_it() -> None:
    clock = Clock()
    inner = ScriptedLLM(LLMConnectionError("down"), "back", "again")
    llm = CircuitBreakerLLM(inner, cooldown=30, clock=clock)
    await outcome(llm)
    clock.now += 29.9
    assert await outcome(llm) == "LLMUnavailableError"
    clock.now += 0.2
    assert llm.state == "half_open"
    assert await outcome(llm) == "back"  # the probe
    assert llm.state == "closed"
    assert await outcome(llm) == "again"
    assert len(inner.requests) == 3


async def test_a_failed_probe_opens_it_for_another_cool_down() -> None:
    clock = Clock()
    inner = ScriptedLLM(LLMConnectionError("down"), LLMConnectionError("still down"))
    llm = CircuitBreakerLLM(inner, cooldown=30, clock=clock)
    await outcome(llm)
    clock.now += 31
    assert await outcome(llm) == "LLMConnectionError"  # the probe, sent
    assert await outcome(llm) == "LLMUnavailableError"
    stats = llm.stats()
    assert (stats.state, stats.opened, stats.calls, stats.retry_in_s) == ("open", 2, 2, 30)


class Gate:
    """A model whose calls wait until released; counts the calls that reached it."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.calls = 0
        self.fail = False

    async def complete(self, messages: object, **kwargs: object) -> object:
        from ctxcompact import Completion

        self.calls += 1
        await self.release.wait()
        if self.fail:
            raise LLMTimeoutError("timed out")
        return Completion(Message.assistant("summary"))


async def test_while_the_probe_is_in_flight_other_calls_are_refused_at_once() -> None:
    clock = Clock()
    gate = Gate()
    gate.fail = True
    gate.release.set()
    llm = CircuitBreakerLLM(gate, cooldown=30, clock=clock)  # type: ignore[arg-type]
    await outcome(llm)
    gate.release.clear()
    gate.fail = False
    clock.now += 31
    probe = asyncio.create_task(llm.complete(ask()))
    await asyncio.sleep(0)
    assert gate.calls == 2  # the probe is waiting inside the model
    with pytest.raises(LLMUnavailableError, match="probe call is in flight") as info:
        await llm.complete(ask())
    assert info.value.retry_in_s == 0
    gate.release.set()
    assert (await probe).message.text == "summary"
    assert (llm.state, gate.calls) == ("closed", 2)


async def test_a_cancelled_probe_lets_the_next_call_probe() -> None:
    clock = Clock()
    gate = Gate()
    gate.fail = True
    gate.release.set()
    llm = CircuitBreakerLLM(gate, cooldown=30, clock=clock)  # type: ignore[arg-type]
    await outcome(llm)
    gate.release.clear()
    gate.fail = False
    clock.now += 31
    probe = asyncio.create_task(llm.complete(ask()))
    await asyncio.sleep(0)
    probe.cancel()
    with pytest.raises(asyncio.CancelledError):
        await probe
    assert llm.stats().failures == 1  # a cancellation says nothing about the endpoint
    gate.release.set()
    assert await outcome(llm) == "summary"
    assert llm.state == "closed"


async def test_reset_closes_it() -> None:
    llm = CircuitBreakerLLM(ScriptedLLM(ServerError("x"), "ok"), cooldown=30, clock=Clock())
    await outcome(llm)
    llm.reset()
    assert (llm.state, await outcome(llm)) == ("closed", "ok")


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="failure_threshold"):
        CircuitBreakerLLM(ScriptedLLM(), failure_threshold=0)
    with pytest.raises(ValueError, match="cooldown"):
        CircuitBreakerLLM(ScriptedLLM(), cooldown=0)


async def test_it_states_the_wrapped_window_and_closes_the_wrapped_model() -> None:
    class Local(ScriptedLLM):
        context_window = 2048
        closed = False

        async def aclose(self) -> None:
            self.closed = True

    inner = Local()
    llm = CircuitBreakerLLM(inner)
    assert llm.context_window == 2048
    await llm.aclose()
    assert inner.closed
    assert CircuitBreakerLLM(ScriptedLLM()).context_window is None


async def test_watch_outages_sees_refusals_and_failures_in_its_block_only() -> None:
    llm = CircuitBreakerLLM(ScriptedLLM(ServerError("x")), cooldown=30, clock=Clock())
    with watch_outages() as first:
        await outcome(llm)
    with watch_outages() as second:
        await outcome(llm)
        await outcome(llm)
    assert (first.failed, first.refused, first.status) == (1, 0, "failed")
    assert (second.failed, second.refused, second.status) == (0, 2, "unavailable")


async def test_it_warns_once_when_it_opens(caplog: pytest.LogCaptureFixture) -> None:
    llm = CircuitBreakerLLM(ScriptedLLM(LLMConnectionError("secret-ish text")), clock=Clock())
    with caplog.at_level(logging.DEBUG, logger="ctxcompact.llm"):
        for _ in range(4):
            await outcome(llm)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert "LLMConnectionError" in warnings[0].getMessage()
    assert "secret-ish" not in caplog.text  # the type only, never the model's message


# -- what the controller and the strategies make of it -------------------------------------


def session(turns: int = 6, user_chars: int = 6000) -> list[Message]:
    """A history where hiding old tool results is not enough: a long task text stays."""
    history = [Message.system("You are a coding agent."), Message.user("fix it " * user_chars)]
    for i in range(turns):
        call = ToolCall(id=f"c{i}", name="cat", arguments="{}")
        history += [Message.assistant(None, tool_calls=[call]), Message.tool(f"c{i}", "x" * 4000)]
    return history


def open_breaker() -> CircuitBreakerLLM:
    """A breaker whose one scripted call fails."""
    return CircuitBreakerLLM(ScriptedLLM(LLMConnectionError("down")), cooldown=600)


async def opened() -> CircuitBreakerLLM:
    llm = open_breaker()
    await outcome(llm)
    assert llm.state == "open"
    return llm


async def test_refusals_do_not_open_the_conversations_circuit(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The breaker counts the outage; the controller's own circuit, which only a forced run
    or reset() closes, stays closed, so compaction resumes when the summarizer is back."""
    llm = await opened()
    caplog.clear()
    controller = CompactionController(
        LLMSummary(llm, max_summary_tokens=200), max_context_size=8000,
        reserved_context_size=500, max_failures=2,
    )  # fmt: skip
    state = ControllerState()
    for _ in range(4):
        result = await controller.compact(session(), state=state)
        assert result.event is not None
        assert result.event.status == "failed"
        assert result.event.summarizer == "unavailable"
        assert result.event.error is not None
        assert result.event.error.startswith("LLMUnavailableError")
    assert state.failures == 0
    # The breaker warned once when it opened; each refused run is logged at INFO.
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_hiding_still_applies_and_the_event_says_the_summarizer_was_unavailable(
    caplog: pytest.LogCaptureFixture,
) -> None:
    llm = await opened()
    caplog.clear()
    # fit_window=False: hiding alone, as the breaker left it (by default the hidden history,
    # still over the window here, is then fitted to it: tests/test_summary_fit.py).
    controller = CompactionController(
        HidingThenSummary(llm, preserve_recent_n=1, fit_window=False), max_context_size=8000,
        reserved_context_size=500,
    )  # fmt: skip
    history = session()
    with caplog.at_level(logging.INFO, logger="ctxcompact"):
        result = await controller.compact(history)
    event = result.event
    assert event is not None
    assert (event.status, event.summarizer) == ("compacted", "unavailable")
    assert "summarizer unavailable" in str(event)
    hidden = [m for m in result.history if m.role == "tool" and m.text != "x" * 4000]
    assert len(hidden) == 5  # every tool result but the newest
    assert check_history(result.history) == []
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_a_failing_summarizer_is_reported_as_failed_on_the_run_that_paid() -> None:
    llm = open_breaker()
    controller = CompactionController(
        HidingThenSummary(llm, preserve_recent_n=1), max_context_size=8000,
        reserved_context_size=500,
    )  # fmt: skip
    result = await controller.compact(session())
    assert result.event is not None
    assert (result.event.status, result.event.summarizer) == ("compacted", "failed")


async def test_a_pipeline_runs_its_llm_free_steps_while_the_summarizer_is_unavailable() -> None:
    llm = await opened()
    pipeline = Pipeline(ToolResultHiding(preserve_recent_n=1), LLMSummary(llm))
    history = session()
    ctx = CompactionContext(tuple(history), 20_000, 8000, 500)
    out = await pipeline.compact(ctx)
    assert out is not None
    assert len(out) == len(history)  # hidden, not summarized
    assert sum(1 for m in out if m.role == "tool" and m.text == "x" * 4000) == 1
    # Alone, the summary step has nothing to fall back on: the refusal is the run's failure.
    with pytest.raises(LLMUnavailableError):
        await Pipeline(LLMSummary(llm)).compact(ctx)
