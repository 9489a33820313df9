"""Cache-aligned summaries: the summary is asked as the continuation of the live history, so
the provider reads its cached prefix; replay bills that prefix as cached."""

from __future__ import annotations

import asyncio
import logging

import pytest

from ctxcompact import (
    CompactionContext,
    CompactionController,
    Completion,
    HeuristicTokenCounter,
    Message,
    ToolSpec,
    Usage,
    check_history,
    load_strategy,
)
from ctxcompact.exceptions import ContextTooLongError
from ctxcompact.replay import MemoCounter, MeteredLLM, ReplayStats, replay
from ctxcompact.strategies import (
    ALIGNED_SUMMARY_HEAD,
    SUMMARIZER_SYSTEM,
    HidingThenSummary,
    LLMSummary,
)
from ctxcompact.testing import LLMRequest, ScriptedLLM, assert_strategy_invariants
from tests.helpers.gen import assistant, call, system, tool, user

SUMMARY = "Task: fix calc.py. Done: read files. Next: run the tests."
TOOLS = [ToolSpec(name="read", description="read a file")]


def conversation(groups: int = 4, size: int = 3_000) -> list[Message]:
    out = [system("You are a coding agent."), user("fix the bug in calc.py")]
    for k in range(groups):
        out += [assistant(f"step {k}", call(f"c{k}", "read")), tool(f"c{k}", f"{k}" * size)]
    return [*out, assistant("looking"), user("go on")]


def ctx(history: list[Message], llm: ScriptedLLM, window: int = 200_000) -> CompactionContext:
    return CompactionContext(history, 10_000, window, 1_000, llm=llm)


def test_the_request_is_the_live_history_plus_one_instruction() -> None:
    history = conversation()
    llm = ScriptedLLM(SUMMARY)
    strategy = LLMSummary(cache_aligned=True, tools=TOOLS)
    out = assert_strategy_invariants(strategy, ctx(history, llm), max_new_messages=1)
    assert out is not None
    [request] = llm.requests
    n = len(history)
    assert all(a is b for a, b in zip(request.messages[:n], history, strict=True))
    assert len(request.messages) == n + 1
    instruction = request.messages[-1]
    assert instruction.role == "user"
    assert instruction.text.startswith(ALIGNED_SUMMARY_HEAD.split("{")[0])
    assert "last 2 user and assistant messages" in instruction.text
    # It is told the task is not part of what it replaces.
    assert "first message (the task) and latest message, which stay verbatim" in (instruction.text)
    assert request.system is None  # the history's own system message, as the agent sent it
    assert request.tools == tuple(TOOLS)
    assert request.max_tokens == strategy.max_summary_tokens


def test_the_summary_replaces_the_same_messages_as_the_normal_mode() -> None:
    history = conversation()
    aligned = asyncio.run(
        LLMSummary(cache_aligned=True).compact(ctx(history, ScriptedLLM(SUMMARY)))
    )
    normal_llm = ScriptedLLM(SUMMARY)
    normal = asyncio.run(LLMSummary().compact(ctx(history, normal_llm)))
    assert aligned is not None
    assert normal is not None
    assert aligned == normal
    assert check_history(aligned) == []
    assert normal_llm.requests[0].system == SUMMARIZER_SYSTEM  # the transcript request


def is_transcript(request: LLMRequest) -> bool:
    return request.system == SUMMARIZER_SYSTEM and len(request.messages) == 1


def test_a_history_over_the_input_budget_falls_back_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    history = conversation(groups=6)
    llm = ScriptedLLM(SUMMARY)
    strategy = LLMSummary(cache_aligned=True, max_input_tokens=3_000)
    with caplog.at_level(logging.WARNING, logger="ctxcompact"):
        out = assert_strategy_invariants(strategy, ctx(history, llm), max_new_messages=1)
    assert out is not None
    [request] = llm.requests
    assert is_transcript(request)
    [record] = [r for r in caplog.records if "cache-aligned" in r.getMessage()]
    assert "input budget of 3000" in record.getMessage()
    assert "calc.py" not in record.getMessage()  # sizes only, never content


def test_a_model_refusing_the_long_history_falls_back_to_the_transcript() -> None:
    llm = ScriptedLLM(ContextTooLongError("prompt is too long"), SUMMARY)
    out = asyncio.run(LLMSummary(cache_aligned=True).compact(ctx(conversation(), llm)))
    assert out is not None
    assert [is_transcript(r) for r in llm.requests] == [False, True]


def test_unanswered_tool_calls_at_the_end_fall_back_to_the_transcript() -> None:
    history = [*conversation(), assistant(None, call("late", "read"))]
    llm = ScriptedLLM(SUMMARY)
    out = asyncio.run(
        LLMSummary(cache_aligned=True, max_preserved_messages=0).compact(ctx(history, llm))
    )
    assert out is not None
    assert is_transcript(llm.requests[0])


def test_a_summary_cut_at_the_output_limit_is_asked_again_still_aligned() -> None:
    history = conversation()
    cut = Completion(Message.assistant("Task: fix calc"), finish_reason="length")
    llm = ScriptedLLM(cut, SUMMARY)
    out = asyncio.run(LLMSummary(cache_aligned=True).compact(ctx(history, llm)))
    assert out is not None
    assert out[1] is history[1]  # the task stays verbatim before the summary
    assert SUMMARY in out[2].text
    for request in llm.requests:
        assert request.messages[: len(history)] == tuple(history)
    assert "much shorter" in llm.requests[1].messages[-1].text


def test_hiding_then_summary_sends_the_history_as_the_agent_last_sent_it() -> None:
    history = conversation(groups=6)
    llm = ScriptedLLM(SUMMARY)
    strategy = HidingThenSummary(preserve_recent_n=1, cache_aligned=True, tools=TOOLS)
    # Over the trigger even after hiding: the summary runs in the same call.
    context = CompactionContext(history, 40_000, 40_000, 30_000, llm=llm)
    out = assert_strategy_invariants(strategy, context, max_new_messages=1)
    assert out is not None
    [request] = llm.requests
    assert request.messages[: len(history)] == tuple(history)  # not the hidden copy
    assert request.tools == tuple(TOOLS)
    assert out[-2:] == history[-2:]


# -- replay: the aligned call's prefix is billed as cached --------------------------------------


async def replay_summary(*, aligned: bool) -> tuple[ReplayStats, MeteredLLM]:
    counter = MemoCounter(HeuristicTokenCounter())
    llm = MeteredLLM(ScriptedLLM(SUMMARY, SUMMARY, SUMMARY), counter)
    strategy = LLMSummary(cache_aligned=aligned, max_input_tokens=100_000)
    controller = CompactionController(
        strategy,
        max_context_size=4_000,
        reserved_context_size=1_000,
        token_counter=counter,
        llm=llm,
    )
    recording = [*conversation(groups=8, size=2_000), assistant("done")]
    stats = await replay(recording, controller, counter=counter, llm=llm)
    return stats, llm


async def test_replay_bills_the_aligned_prefix_as_cached_and_the_summary_costs_less() -> None:
    aligned, aligned_llm = await replay_summary(aligned=True)
    normal, _ = await replay_summary(aligned=False)
    assert aligned.compactions == normal.compactions >= 1
    assert aligned.summarizer_calls == normal.summarizer_calls
    assert normal.summarizer_cached_tokens == 0
    cached = aligned.summarizer_cached_tokens
    assert cached > 0
    tokens = aligned.summarizer_tokens
    assert aligned.summarizer_cost == pytest.approx(tokens - cached + 0.1 * cached)
    assert aligned.summarizer_cost < normal.summarizer_cost
    assert normal.summarizer_cost == normal.summarizer_tokens
    assert aligned_llm.cached_tokens == cached


async def test_metered_llm_counts_only_the_prefix_shared_with_the_previous_input() -> None:
    counter = HeuristicTokenCounter()
    llm = MeteredLLM(ScriptedLLM(SUMMARY, SUMMARY, SUMMARY), counter)
    previous = [system("agent"), user("a" * 400), assistant("b" * 400)]
    llm.previous = tuple(previous)
    await llm.complete([*previous[:2], user("changed"), user("summarize")])
    assert llm.cached_tokens == counter.count_message(previous[0]) + counter.count_message(
        previous[1]
    )
    before = llm.cached_tokens
    await llm.complete([user("transcript")], system="summarizer")  # a new prompt: nothing
    assert llm.cached_tokens == before
    usage = Completion(Message.assistant(SUMMARY), usage=Usage(input_tokens=5, output_tokens=1))
    llm.inner = ScriptedLLM(usage)
    await llm.complete([*previous, user("summarize")])
    assert llm.cached_tokens == before + 5  # never more than the reported input


def test_loads_by_spec_with_cache_aligned_and_passes_it_through() -> None:
    summary = load_strategy("ctxcompact.strategies:LLMSummary", params={"cache_aligned": True})
    assert isinstance(summary, LLMSummary)
    assert summary.cache_aligned
    both = load_strategy("hiding-then-summary", params={"cache_aligned": True})
    assert isinstance(both, HidingThenSummary)
    assert both.summary.cache_aligned
    assert not HidingThenSummary().summary.cache_aligned  # off by default


def test_a_model_calling_a_tool_instead_falls_back_to_the_transcript() -> None:
    tool_call = Message.assistant(None, tool_calls=[call("x", "read")])
    llm = ScriptedLLM(Completion(tool_call, finish_reason="tool_calls"), SUMMARY)
    history = conversation()
    out = asyncio.run(LLMSummary(cache_aligned=True).compact(ctx(history, llm)))
    assert out is not None
    assert out[1] is history[1]  # the task stays verbatim before the summary
    assert SUMMARY in out[2].text
    assert [is_transcript(r) for r in llm.requests] == [False, True]


async def test_the_agent_passes_its_tools_to_a_cache_aligned_summary() -> None:
    from ctxcompact import Agent, tool

    @tool
    def read(path: str) -> str:
        """Read a file."""
        return "x" * 3_000

    calls = [assistant(None, call(f"c{k}", "read", '{"path": "a"}')) for k in range(6)]
    llm = ScriptedLLM(*calls, SUMMARY, "done")
    agent = Agent(
        llm,
        tools=[read],
        compaction=LLMSummary(cache_aligned=True, max_summary_tokens=512),  # no tools of its own
        max_context_size=20_000,
        reserved_context_size=15_000,
    )
    assert await agent.run("read a six times") == "done"
    summary_requests = [
        r for r in llm.requests if r.messages and ALIGNED_SUMMARY_HEAD[:20] in r.messages[-1].text
    ]
    assert summary_requests, "the window is small enough that a summary must be asked"
    assert all(r.tools == tuple(agent.tool_specs) for r in summary_requests)
