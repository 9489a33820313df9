"""The summary strategies keep the window: what the summary could not free is fitted.

Replayed on the 17 public traces at 16k/4k with a stand-in summarizer, llm-summary left 49
of 1,044 calls over the window and hiding-then-summary 94: the messages a summary keeps
whole (the last steps, with their tool results) were over the window on their own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from ctxcompact import (
    CompactionContext,
    CompactionController,
    CompactionStrategy,
    HeuristicTokenCounter,
    Message,
    check_history,
)
from ctxcompact.exceptions import ServerError
from ctxcompact.strategies import DROP_MARKER, SUMMARY_PREFIX, HidingThenSummary, LLMSummary
from ctxcompact.testing import ScriptedLLM
from tests.helpers.gen import assistant, call, system, tool, user

COUNTER = HeuristicTokenCounter()
WINDOW, RESERVED = 8_000, 2_000


def agent_history(*, newest_result_chars: int, steps: int = 12) -> list[Message]:
    """A task, then ``steps`` tool steps with small results; the newest result is big."""
    out = [system("you are an agent"), user("fix the failing test in parser.py")]
    for k in range(steps):
        size = newest_result_chars if k == steps - 1 else 400
        out += [assistant(None, call(f"c{k}", "read", f'{{"n": {k}}}')),
                tool(f"c{k}", f"HEAD-{k} " + "r" * size + f" TAIL-{k}")]  # fmt: skip
    return out


def context(history: Sequence[Message], llm: ScriptedLLM) -> CompactionContext:
    return CompactionContext(
        history, COUNTER.count(history), WINDOW, RESERVED, llm=llm, token_counter=COUNTER
    )


def fits(messages: Sequence[Message]) -> bool:
    return COUNTER.count(messages) + RESERVED < WINDOW


def test_a_summary_that_frees_too_little_is_followed_by_a_fit_that_keeps_the_summary() -> None:
    history = agent_history(newest_result_chars=40_000)  # the newest result alone: ~10k tokens
    before = list(history)
    llm = ScriptedLLM("Read eleven files; the bug is in parse().")
    out = asyncio.run(LLMSummary().compact(context(history, llm)))
    assert out is not None
    assert history == before  # input untouched
    assert len(llm.requests) == 1
    assert fits(out)
    assert out[0] is history[0]  # the system message stays first
    summaries = [m for m in out if m.text.startswith(SUMMARY_PREFIX)]
    assert len(summaries) == 1
    assert "the bug is in parse()" in summaries[0].text
    assert check_history(out) == []
    # The newest result was cut head + tail, not dropped: its call and both ends are there.
    newest = out[-1]
    assert newest.role == "tool"
    assert newest.tool_call_id == "c11"
    assert newest.text.startswith("HEAD-11")
    assert newest.text.endswith("TAIL-11")
    assert len(newest.text) < 40_000


def test_without_fit_window_the_summary_alone_is_returned_still_over_the_window() -> None:
    history = agent_history(newest_result_chars=40_000)
    llm = ScriptedLLM("Read eleven files; the bug is in parse().")
    out = asyncio.run(LLMSummary(fit_window=False).compact(context(history, llm)))
    assert out is not None
    assert not fits(out)
    assert out[-1] is history[-1]  # kept whole


def test_a_summary_that_fits_is_not_touched_by_the_fit() -> None:
    history = agent_history(newest_result_chars=400, steps=40)
    llm = ScriptedLLM("Read thirty-nine files.")
    out = asyncio.run(LLMSummary().compact(context(history, llm)))
    assert out is not None
    assert fits(out)
    assert out[-2:] == history[-2:]  # the kept step, the very same objects
    assert all(m.text.find(DROP_MARKER[:20]) < 0 for m in out)


def test_kept_steps_that_must_go_are_dropped_with_a_note_on_the_summary() -> None:
    # Three kept messages, two big steps: both do not fit together after the summary.
    history = agent_history(newest_result_chars=16_000, steps=6)
    history[-3] = tool("c4", "HEAD-4 " + "s" * 16_000 + " TAIL-4")
    llm = ScriptedLLM("Read five files.")
    out = asyncio.run(LLMSummary(max_preserved_messages=2).compact(context(history, llm)))
    assert out is not None
    assert fits(out)
    assert check_history(out) == []
    summary = next(m for m in out if m.text.startswith(SUMMARY_PREFIX))
    assert summary.text.endswith(DROP_MARKER.format(count=1))
    assert [m.tool_call_id for m in out if m.role == "tool"] == ["c5"]


def test_a_user_message_after_the_summary_is_the_task_and_the_summary_is_never_dropped() -> None:
    history = agent_history(newest_result_chars=400, steps=8)
    history += [user("now run the whole suite"), assistant(None, call("s1", "run", "{}")),
                tool("s1", "HEAD " + "x" * 40_000 + " TAIL")]  # fmt: skip
    llm = ScriptedLLM("Fixed parser.py.")
    out = asyncio.run(LLMSummary(max_preserved_messages=2).compact(context(history, llm)))
    assert out is not None
    assert fits(out)
    assert any(m.text.startswith(SUMMARY_PREFIX) for m in out)
    assert any(m.text.startswith("now run the whole suite") for m in out)
    assert check_history(out) == []


def test_nothing_to_summarize_but_over_the_window_is_fitted() -> None:
    history = [system("agent"), user("look"), assistant(None, call("c0", "cat", "{}")),
               tool("c0", "HEAD " + "y" * 60_000 + " TAIL")]  # fmt: skip
    llm = ScriptedLLM()  # never called: the cut leaves nothing before the kept messages
    out = asyncio.run(LLMSummary(max_preserved_messages=2).compact(context(history, llm)))
    assert out is not None
    assert fits(out)
    assert llm.requests == []
    assert [m.role for m in out] == ["system", "user", "assistant", "tool"]


def test_a_history_that_fits_with_nothing_to_summarize_is_still_a_noop() -> None:
    history = [user("hi"), assistant("hello")]
    assert asyncio.run(LLMSummary().compact(context(history, ScriptedLLM()))) is None


def test_hiding_then_a_failed_summary_still_fits_the_window() -> None:
    history = agent_history(newest_result_chars=40_000)
    llm = ScriptedLLM(ServerError("502 bad gateway"))
    out = asyncio.run(HidingThenSummary(preserve_recent_n=1).compact(context(history, llm)))
    assert out is not None
    assert fits(out)
    assert check_history(out) == []
    assert not any(m.text.startswith(SUMMARY_PREFIX) for m in out)
    assert out[-1].text.startswith("HEAD-11")


def test_a_tier_asking_ahead_only_gets_no_fit_its_next_tier_fits() -> None:
    history = agent_history(newest_result_chars=40_000)
    out = asyncio.run(LLMSummary().compact(context(history, ScriptedLLM()), ahead_only=True))
    assert out is None


def test_without_summarizing_at_the_trigger_the_window_is_kept_with_no_summarizer_call() -> None:
    history = agent_history(newest_result_chars=40_000)
    llm = ScriptedLLM()  # any call would fail the test: the script is empty
    out = asyncio.run(LLMSummary(summarize_at_trigger=False).compact(context(history, llm)))
    assert out is not None
    assert fits(out)
    assert llm.requests == []
    assert check_history(out) == []


async def compacted(strategy: CompactionStrategy, history: list[Message]) -> list[Message]:
    """The history after a controller (default store: recall markers) compacted it once."""
    controller = CompactionController(
        strategy, max_context_size=WINDOW, reserved_context_size=RESERVED, token_counter=COUNTER
    )
    result = await controller.compact(history)
    assert result.event is not None
    assert result.event.status == "compacted"
    return list(result.history)


@pytest.mark.parametrize("name", ["read", "mcp__server{k:02d}__" + "x" * 45])
async def test_the_fit_leaves_room_for_the_note_the_store_hook_adds(name: str) -> None:
    # With the default store, the controller's hook notes what the summary replaced and names
    # up to 8 of its results by handle (long ids here, as a provider's are): the fitted
    # output must leave room for that note, or the request ends over the window by its size
    # (llm-summary left 8 of 1,044 calls over at 16k by 28-84 tokens, hiding-then-summary 33).
    # The note names each result's tool: long (MCP) names, one per server, must be counted.
    history = [system("you are an agent"), user("fix the failing test in parser.py")]
    for k in range(12):
        cid = f"toolu_01{k:02d}" + "ABCDEFGHJKMNPQRSTVWXYZ"
        size = 40_000 if k == 11 else 400
        tool_name = name.format(k=k)
        history += [assistant(None, call(cid, tool_name, f'{{"n": {k}}}')), tool(cid, "r" * size)]
    out = await compacted(
        LLMSummary(ScriptedLLM("Read eleven files; the bug is in parse().")), history
    )
    assert any("recall_tool_result(" in m.text and "results:" in m.text for m in out)
    assert fits(out), COUNTER.count(out) + RESERVED - WINDOW


async def test_hiding_kept_when_the_summary_fails_is_fitted_with_its_recall_placeholders() -> None:
    # The summary fails: the hidden history is fitted to the window. Each hidden result is
    # sent as the recall placeholder (longer than hiding's): the fit counts them, or the
    # request ends over the window by their difference (+762 tokens here before).
    history = [system("you are an agent"), user("fix the failing test in parser.py")]
    for k in range(300):
        cid = f"toolu_01{k:03d}ABCDEFGHJKMNPQRSTVWXYZ"
        size = 2_000 if k == 299 else 200
        history += [assistant(None, call(cid, "read", f'{{"n": {k}}}')), tool(cid, "r" * size)]
    failing = ScriptedLLM(*[ServerError("502 from the summarizer")] * 5)
    out = await compacted(HidingThenSummary(failing, preserve_recent_n=1), history)
    assert sum(1 for m in out if m.role == "tool" and "recall_tool_result(" in m.text) > 50
    assert fits(out), COUNTER.count(out) + RESERVED - WINDOW
