"""Summaries made ahead of time: started in the background below the trigger, swapped in when
it fires, never applied to a history that changed, incremental, and no loop when they fail.

A conversation grows one tool turn at a time through ``controller.step`` (as an agent's loop
does); ``controller.settle()`` after each call stands for the time the agent's model takes
to answer, during which the background summary is written. The summarizer is a
:class:`ScriptedLLM` whose recorded requests show what was sent, and when.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from ctxcompact import (
    CompactionContext,
    CompactionController,
    Completion,
    ControllerState,
    HeuristicTokenCounter,
    Message,
    SummaryAhead,
    summarizes_ahead,
)
from ctxcompact.exceptions import NotSmallerError, ServerError, SummaryNotSmallerError
from ctxcompact.replay import MemoCounter, MeteredLLM, replay
from ctxcompact.strategies import (
    SUMMARY_PREFIX,
    ContextGuard,
    HidingThenSummary,
    LLMSummary,
    Pipeline,
    ToolResultHiding,
)
from ctxcompact.testing import LLMRequest, ScriptedLLM, assert_output_invariants
from tests.helpers.gen import assistant, call, tool, user

WINDOW, RESERVED, RATIO = 4_000, 1_000, 0.5  # trigger at 3,000 tokens, ahead from 1,500


def said(message: Message) -> str:
    """The summary's own text: with the default store (recall on) the controller ends it with
    a note naming the range it replaces, tested in test_recall_every_removal.py."""
    return message.text.split("\n\n[ctxcompact: this summary replaces ")[0]


def turn(k: int) -> list[Message]:
    """One tool turn whose result is ~130 tokens and names itself (``result-07``)."""
    return [assistant(None, call(f"c{k}", "read")), tool(f"c{k}", f"result-{k:02d} " + "x" * 500)]


def numbered_summaries() -> ScriptedLLM:
    """A summarizer answering ``summary 1``, ``summary 2``... in order."""

    def answer(n: int) -> object:
        return lambda request: Completion(Message.assistant(f"summary {n}"))

    return ScriptedLLM(*(answer(n) for n in range(1, 40)))  # type: ignore[arg-type]


def summary(llm: object = None, **options: object) -> LLMSummary:
    """LLMSummary with an answer budget that fits the small test window."""
    return LLMSummary(llm, max_summary_tokens=200, **options)  # type: ignore[arg-type]


def controller(
    llm: ScriptedLLM, strategy: object | None = None, **options: object
) -> CompactionController:
    return CompactionController(
        strategy or summary(llm),  # type: ignore[arg-type]
        max_context_size=WINDOW,
        reserved_context_size=RESERVED,
        precompute_ratio=options.pop("precompute_ratio", RATIO),  # type: ignore[arg-type]
        **options,  # type: ignore[arg-type]
    )


def transcript(request: LLMRequest) -> str:
    return "\n".join(m.text for m in request.messages)


async def grow_until_compacted(
    c: CompactionController, llm: ScriptedLLM, history: list[Message], start: int
) -> tuple[list[Message], int, list[int]]:
    """Add turns from ``start`` until a step compacts; returns the history, the next turn
    number, and the summarizer calls made during each step (not during settle)."""
    during_steps: list[int] = []
    k = start
    while True:
        before = len(llm.requests)
        step = await c.step(history)
        during_steps.append(len(llm.requests) - before)
        await c.settle()
        if step.compacted:
            return [*step.history, *turn(k)], k + 1, during_steps
        history = [*history, *turn(k)]
        k += 1
        assert k < 60, "never compacted"


async def test_the_summary_is_written_in_the_background_and_swapped_in_at_the_trigger() -> None:
    llm = numbered_summaries()
    c = controller(llm)
    history = [user("refactor the parser")]
    made_ahead_at = None
    for k in range(60):
        tokens = c.token_count(history)
        before = len(llm.requests)
        step = await c.step(history)
        assert len(llm.requests) == before or step.compacted  # no call while below it
        if step.compacted:
            break
        await c.settle()
        if made_ahead_at is None and len(llm.requests) > before:
            made_ahead_at = tokens
        history = [*history, *turn(k)]
    assert step.compacted
    assert made_ahead_at is not None
    assert RATIO * (WINDOW - RESERVED) <= made_ahead_at < WINDOW - RESERVED
    event = step.event
    assert event is not None
    assert (event.ahead, event.waited_s) == ("used", 0.0)
    assert len(llm.requests) == 1  # the trigger itself made no call
    summary = [m for m in step.history if m.text.startswith(SUMMARY_PREFIX)]
    assert [said(m) for m in summary] == [SUMMARY_PREFIX + "summary 1"]
    # What came in after the summary was started stays whole, after it.
    assert step.history[-len(turn(0)) * 2 :] == history[-len(turn(0)) * 2 :]
    assert_output_invariants(history, step.history, max_new_messages=1)


async def test_no_summary_is_made_ahead_before_the_next_call_may_reach_the_trigger() -> None:
    # Issue 21: a summary made ahead for a conversation that ends below its trigger is a
    # summarizer call for nothing (at 32k, one public trace that never needed compaction cost
    # 145% of not compacting for it). Every call here adds ~135 tokens: the summary waits
    # until the history is within that of the 3,000-token trigger, not 1,500 (the ratio).
    llm = numbered_summaries()
    c = controller(llm)
    history = [user("refactor the parser")]
    started_at, k = None, 0
    while not c.should_compact(history):
        tokens = c.token_count(history)
        await c.step(history)
        await c.settle()
        if started_at is None and llm.requests:
            started_at = tokens
        history = [*history, *turn(k)]
        k += 1
    one_call = c.token_counter.count(turn(0))
    assert started_at is not None
    assert WINDOW - RESERVED - one_call <= started_at < WINDOW - RESERVED
    assert len(llm.requests) == 1  # made once, ahead of the trigger, and nowhere else
    step = await c.step(history)
    assert step.event is not None
    assert (step.event.ahead, step.event.waited_s) == ("used", 0.0)


async def test_the_second_summary_sends_the_first_and_only_what_is_new() -> None:
    llm = numbered_summaries()
    c = controller(llm)
    history, k, _ = await grow_until_compacted(c, llm, [user("refactor the parser")], 0)
    first_covered = {
        f"result-{n:02d}" for n in range(k) if f"result-{n:02d}" in transcript(llm.requests[0])
    }
    history, k, during = await grow_until_compacted(c, llm, history, k)
    assert during[-1] == 0  # the second trigger did not wait for the summarizer either
    second = transcript(llm.requests[1])
    assert "[earlier summary]\nsummary 1" in second
    assert first_covered  # the first summary covered some results...
    assert not any(marker in second for marker in first_covered)  # ...none is sent again
    assert "result-" in second  # what is new since is


async def test_a_history_that_diverged_never_gets_the_summary_made_for_the_old_one() -> None:
    llm = numbered_summaries()
    c = controller(llm)
    history = [user("refactor the parser")]
    for k in range(60):  # grow until a summary is being made
        await c.step(history)
        history = [*history, *turn(k)]
        if c.state.ahead.busy_for(history):
            break
    k += 1
    await c.settle()
    assert len(llm.requests) == 1
    # The client edits an early tool result: the summary made ahead no longer stands for it.
    edited = [*history[:2], tool("c0", "result-00 edited"), *history[3:]]
    while not c.should_compact(edited):
        edited = [*edited, *turn(k)]
        k += 1
    step = await c.step(edited)
    assert step.compacted
    assert step.event is not None
    assert step.event.ahead is None
    texts = [said(m) for m in step.history]
    assert SUMMARY_PREFIX + "summary 1" not in texts  # not the stale one...
    assert any(t.startswith(SUMMARY_PREFIX + "summary") for t in texts)  # ...a fresh one
    assert "result-00 edited" in transcript(llm.requests[-1])


async def test_a_summary_not_finished_at_the_trigger_is_awaited_and_the_wait_reported() -> None:
    release = asyncio.Event()

    class Slow:
        requests = 0

        async def complete(self, messages: Sequence[Message], **kw: object) -> Completion:
            self.requests += 1
            await release.wait()
            return Completion(Message.assistant("slow summary"))

    slow = Slow()
    c = controller(ScriptedLLM(), summary(slow))  # type: ignore[arg-type]
    history = [user("refactor the parser")]
    k = 0
    while not c.should_compact(history):
        await c.step(history)  # no settle: the summary is still being written
        await asyncio.sleep(0)
        history = [*history, *turn(k)]
        k += 1
    assert slow.requests == 1
    asyncio.get_running_loop().call_later(0.05, release.set)
    step = await c.step(history)
    assert step.event is not None
    assert step.event.ahead == "used"
    assert step.event.waited_s > 0
    assert slow.requests == 1


async def test_a_failed_background_summary_is_not_retried_every_call() -> None:
    llm = ScriptedLLM(ServerError("down"), "summary after the outage")
    c = controller(llm)
    # One early call added ~1,000 tokens: from then on the summary is due once the history
    # is within that of the trigger, several ordinary calls before it fires.
    big = [assistant(None, call("big", "read")), tool("big", "y" * 4_000)]
    history = [user("refactor the parser"), *big]
    k = 0
    calls_below_trigger = []
    while not c.should_compact(history):
        await c.step(history)
        await c.settle()
        calls_below_trigger.append(len(llm.requests))
        history = [*history, *turn(k)]
        k += 1
    assert calls_below_trigger[-1] == 1  # one failed attempt, not one per call
    assert calls_below_trigger.count(1) >= 2  # and several calls after it
    step = await c.step(history)
    assert step.compacted  # the trigger's run wrote the summary the usual way
    assert step.event is not None
    assert step.event.ahead is None
    assert any(said(m) == SUMMARY_PREFIX + "summary after the outage" for m in step.history)


async def test_a_summary_made_ahead_that_is_not_smaller_is_a_typed_failure() -> None:
    history = [user("hi"), *turn(0), assistant("done"), user("thanks"), assistant("ok")]
    big = Message.user(SUMMARY_PREFIX + "y" * 5_000)
    ctx = CompactionContext(
        history, 3_500, WINDOW, RESERVED, llm=ScriptedLLM(), ahead=SummaryAhead(0, 3, big, 6)
    )
    with pytest.raises(SummaryNotSmallerError) as caught:
        await summary().compact(ctx)
    assert isinstance(caught.value, NotSmallerError)  # what a tiered strategy catches
    assert caught.value.tokens_after > caught.value.tokens_before


async def test_without_waiting_at_the_trigger_only_a_summary_made_ahead_is_put_in_place() -> None:
    history = [user("hi"), *turn(0), *turn(1), assistant("done"), user("thanks"), assistant("ok")]
    llm = ScriptedLLM()  # any call fails the test
    lazy = summary(llm, summarize_at_trigger=False)
    ctx = CompactionContext(history, 3_500, WINDOW, RESERVED)
    assert await lazy.compact(ctx) is None
    made = Message.user(SUMMARY_PREFIX + "made ahead")
    ahead = SummaryAhead(0, 5, made, len(history))
    out = await lazy.compact(CompactionContext(history, 3_500, WINDOW, RESERVED, ahead=ahead))
    # The task stays verbatim before the summary made ahead, which stands for the rest.
    assert out == [history[0], made, *history[5:]]
    assert out[0] is history[0]
    assert llm.requests == []


async def test_a_pipeline_ending_in_a_guard_never_waits_for_the_summarizer() -> None:
    llm = numbered_summaries()
    strategy = Pipeline(summary(summarize_at_trigger=False), ContextGuard())
    counter = MemoCounter(HeuristicTokenCounter())
    metered = MeteredLLM(llm, counter)
    c = CompactionController(
        strategy,
        max_context_size=WINDOW,
        reserved_context_size=RESERVED,
        token_counter=counter,
        llm=metered,
        precompute_ratio=RATIO,
    )
    recording = [user("refactor the parser")]
    for k in range(40):
        recording += turn(k)
    recording.append(assistant("done"))
    stats = await replay(recording, c, counter=counter, llm=metered)
    assert stats.compactions >= 2
    assert stats.calls_over_window == 0
    assert stats.summarizer_hot_calls == 0
    assert stats.summarizer_background_calls >= 2
    assert stats.ahead_used >= 2


async def test_replay_shows_summaries_made_ahead_in_the_background_not_on_the_hot_path() -> None:
    recording = [user("refactor the parser")]
    for k in range(40):
        recording += turn(k)
    recording.append(assistant("done"))

    async def run(ratio: float) -> object:
        counter = MemoCounter(HeuristicTokenCounter())
        metered = MeteredLLM(numbered_summaries(), counter)
        c = CompactionController(
            summary(),
            max_context_size=WINDOW,
            reserved_context_size=RESERVED,
            token_counter=counter,
            llm=metered,
            precompute_ratio=ratio,
        )
        return await replay(recording, c, counter=counter, llm=metered)

    ahead, at_trigger = await run(RATIO), await run(0)
    assert at_trigger.summarizer_hot_calls == at_trigger.summarizer_calls == at_trigger.compactions  # type: ignore[attr-defined]
    assert at_trigger.hot_calls_after_first >= 1  # type: ignore[attr-defined]
    assert ahead.hot_calls_after_first == 0  # type: ignore[attr-defined]
    assert at_trigger.hot_s_after_first > 0 == ahead.hot_s_after_first  # type: ignore[attr-defined]
    assert ahead.summarizer_background_calls >= ahead.compactions >= 2  # type: ignore[attr-defined]
    assert ahead.ahead_used == ahead.compactions  # type: ignore[attr-defined]


async def test_a_state_that_lives_one_request_starts_nothing_in_the_background() -> None:
    llm = numbered_summaries()
    c = controller(llm)
    history = [user("refactor the parser")]
    k = 0
    while not c.ahead_due(history):
        history += turn(k)
        k += 1
    assert not c.should_compact(history)
    await c.step(history, state=ControllerState(background=False))
    await asyncio.sleep(0.01)
    assert llm.requests == []
    c.precompute_ratio = None
    await c.step(history)
    await c.settle()
    assert llm.requests == []  # and none with precompute_ratio off


def test_a_task_left_in_a_finished_event_loop_is_dropped_not_awaited() -> None:
    llm = numbered_summaries()
    c = controller(llm)
    history = [user("refactor the parser")]
    for k in range(8):
        history += turn(k)
    asyncio.run(c.step(history))  # starts a task that this loop's end cancels
    for k in range(8, 20):
        history += turn(k)
    step = asyncio.run(c.step(history))  # another loop: the old task is dropped
    assert step.compacted
    assert step.event is not None
    assert step.event.ahead is None


async def test_hiding_then_summary_makes_no_summary_ahead_when_hiding_will_do() -> None:
    llm = ScriptedLLM()
    strategy = HidingThenSummary(llm, preserve_recent_n=1)
    history = [user("refactor the parser")]
    for k in range(16):  # just below the trigger
        history += turn(k)
    tokens = HeuristicTokenCounter().count(history)
    ctx = CompactionContext(history, tokens, WINDOW, RESERVED)
    assert tokens < WINDOW - RESERVED
    assert await strategy.summarize_ahead(ctx) is None  # hiding frees more than the room
    assert llm.requests == []


async def test_a_pipeline_summarizes_ahead_after_steps_that_keep_positions_only() -> None:
    history = [user("refactor the parser")]
    for k in range(10):
        history += turn(k)
    history += [assistant("done"), user("thanks"), assistant("ok")]
    ctx = CompactionContext(history, 2_000, WINDOW, RESERVED, llm=ScriptedLLM("ahead"))
    hiding_first = Pipeline(ToolResultHiding(preserve_recent_n=2), summary())
    made = await hiding_first.summarize_ahead(ctx)
    assert made is not None
    assert (made.start, made.history_length) == (0, len(history))
    assert summarizes_ahead(hiding_first)
    dropping_first = Pipeline(ContextGuard(context_window=1_500, reserve_tokens=0), summary())
    assert await dropping_first.summarize_ahead(ctx) is None


# -- every compaction shrinks the context ------------------------------------------------------


def test_an_output_that_is_not_smaller_is_not_applied_and_does_not_fire_every_call() -> None:
    from ctxcompact.testing import FunctionStrategy

    def pad(ctx: CompactionContext) -> list[Message]:
        return [*ctx.history[:-1], user(ctx.history[-1].text + " and more words")]

    c = CompactionController(
        FunctionStrategy(pad), max_context_size=WINDOW, reserved_context_size=RESERVED
    )
    history = [user("refactor the parser")]
    for k in range(20):
        history += turn(k)
    history.append(user("go on"))
    first = asyncio.run(c.compact(history))
    second = asyncio.run(c.compact([*history, assistant("ok")]))
    assert first.history is history
    assert first.event is not None
    assert first.event.status == "noop"
    assert first.event.problem is not None
    assert first.event.problem.kind == "not_smaller"
    assert second.event is not None
    assert second.event.status == "skipped"  # waits for the history to grow, not every call


def test_a_strategy_raising_not_smaller_is_a_noop_that_never_opens_the_circuit() -> None:
    from ctxcompact.testing import FunctionStrategy

    def refuse(ctx: CompactionContext) -> None:
        raise NotSmallerError("nothing to shrink", tokens_before=10, tokens_after=12)

    c = CompactionController(
        FunctionStrategy(refuse),
        max_context_size=WINDOW,
        reserved_context_size=RESERVED,
        min_progress=0.0,  # no wait: every call runs it
        max_failures=1,
    )
    history = [user("x " * 20_000)]
    statuses = [asyncio.run(c.compact([*history, user(str(k))])).event for k in range(3)]
    assert [e.status for e in statuses if e is not None] == ["noop", "noop", "noop"]
    assert c.state.failures == 0
