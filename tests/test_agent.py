"""Agent: the tool-calling loop with compaction in front of every model call (ScriptedLLM)."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading

import pytest

from ctxcompact import (
    CONTINUE_PROMPT,
    Agent,
    CompactionContext,
    CompactionEvent,
    CompactionRecord,
    Completion,
    Message,
    Tool,
    ToolCall,
    Usage,
    check_history,
)
from ctxcompact.exceptions import ContextTooLongError, MaxStepsExceeded, UserError
from ctxcompact.strategies import ToolResultTruncation
from ctxcompact.testing import FunctionStrategy, LLMRequest, ScriptedLLM

_ids = itertools.count()


def calls(*specs: tuple[str, dict[str, object]]) -> Message:
    """An assistant message calling each ``(name, arguments)``; fresh ids."""
    return Message.assistant(
        None,
        tool_calls=[
            ToolCall(id=f"call_{next(_ids)}", name=name, arguments=json.dumps(args))
            for name, args in specs
        ],
    )


def never(ctx: CompactionContext) -> None:
    raise AssertionError("compaction should not have run")


def agent_with(llm: ScriptedLLM, **kwargs: object) -> Agent:
    kwargs.setdefault("compaction", FunctionStrategy(never))
    kwargs.setdefault("max_context_size", 100_000)
    kwargs.setdefault("reserved_context_size", 1_000)
    return Agent(llm, **kwargs)  # type: ignore[arg-type]


def tool_texts(request: LLMRequest) -> list[str]:
    return [m.text for m in request.messages if m.role == "tool"]


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first.
        b: The second.
    """
    return a + b


# -- the basic loop ---------------------------------------------------------------------------


async def test_an_answer_without_tools_ends_the_run() -> None:
    llm = ScriptedLLM("Hello there.")
    agent = agent_with(llm, system_prompt="Be brief.")
    assert await agent.run("hi") == "Hello there."
    assert [(m.role, m.text) for m in agent.history] == [
        ("system", "Be brief."),
        ("user", "hi"),
        ("assistant", "Hello there."),
    ]
    assert agent.transcript == agent.history
    assert agent.stop_reason == "answer"
    assert agent.steps == 1
    # The only tool is recall's: the agent keeps originals in memory by default and offers
    # the tool that brings them back (issue 20); without a store it offers none.
    assert [t.name for t in llm.requests[0].tools or ()] == ["recall_tool_result"]
    assert [m.role for m in llm.requests[0].messages] == ["system", "user"]
    bare = ScriptedLLM("Hello there.")
    await agent_with(bare, store=None).run("hi")
    assert bare.requests[0].tools is None


async def test_tool_calls_are_run_and_their_results_sent_back() -> None:
    llm = ScriptedLLM(calls(("add", {"a": 2, "b": 3})), "2 + 3 = 5")
    agent = agent_with(llm, tools=[add], max_tokens=256)
    assert await agent.run("what is 2 + 3?") == "2 + 3 = 5"
    assert llm.requests[0].tools is not None
    assert llm.requests[0].tools[0] == Tool(add).spec  # then the default recall tool
    assert [t.name for t in llm.requests[0].tools] == ["add", "recall_tool_result"]
    assert llm.requests[0].max_tokens == 256
    assert tool_texts(llm.requests[1]) == ["5"]
    call_id = agent.history[1].tool_calls[0].id  # type: ignore[index]
    assert agent.history[2] == Message.tool(call_id, "5")
    assert check_history(agent.history) == []
    assert agent.steps == 2


async def test_the_calls_of_one_message_run_concurrently() -> None:
    """Each tool waits for the other to have started: run one after the other, they deadlock
    (and the wait_for guard turns that into an error result, failing the assertions)."""
    started = {"left": asyncio.Event(), "right": asyncio.Event()}

    async def left() -> str:
        started["left"].set()
        await asyncio.wait_for(started["right"].wait(), 10)
        return "left done"

    async def right() -> str:
        started["right"].set()
        await asyncio.wait_for(started["left"].wait(), 10)
        return "right done"

    llm = ScriptedLLM(calls(("left", {}), ("right", {})), "both done")
    agent = agent_with(llm, tools=[left, right])
    assert await agent.run("go") == "both done"
    assert tool_texts(llm.requests[1]) == ["left done", "right done"]


async def test_sync_tools_of_one_message_run_concurrently_in_threads() -> None:
    barrier = threading.Barrier(2, timeout=10)

    def first() -> str:
        barrier.wait()  # returns only once the other call is running too
        return "first"

    def second() -> str:
        barrier.wait()
        return "second"

    llm = ScriptedLLM(calls(("second", {}), ("first", {})), "ok")
    await agent_with(llm, tools=[first, second]).run("go")
    assert tool_texts(llm.requests[1]) == ["second", "first"]  # in the order of the calls


async def test_a_failing_tool_becomes_an_error_result_and_the_loop_goes_on() -> None:
    def fetch(url: str) -> str:
        raise ConnectionError(f"cannot reach {url}")

    llm = ScriptedLLM(
        calls(("fetch", {"url": "http://x"}), ("add", {"a": 1, "b": 1})), "fetch failed"
    )
    agent = agent_with(llm, tools=[fetch, add])
    assert await agent.run("go") == "fetch failed"
    assert tool_texts(llm.requests[1]) == [
        "Error: tool 'fetch' failed: ConnectionError: cannot reach http://x",
        "2",
    ]
    failed, ok = agent.history[2:4]
    assert failed.is_error
    assert not ok.is_error
    # Anthropic gets the flag; the OpenAI wire format does not carry it.
    from ctxcompact import to_anthropic, to_openai

    blocks = to_anthropic(agent.history)[1][2]["content"]
    assert [b.get("is_error") for b in blocks] == [True, None]
    assert "is_error" not in json.dumps(to_openai(agent.history))


async def test_invalid_arguments_go_back_to_the_model_which_can_retry() -> None:
    seen: list[int] = []

    def square(n: int) -> int:
        seen.append(n)
        return n * n

    llm = ScriptedLLM(
        calls(("square", {"n": "four"})),
        calls(("square", {"n": 4})),
        "16",
    )
    agent = agent_with(llm, tools=[square])
    assert await agent.run("square 4") == "16"
    [error] = tool_texts(llm.requests[1])
    assert error.startswith("Error: tool 'square': invalid arguments: n: Input should be")
    assert tool_texts(llm.requests[2]) == [error, "16"]
    assert seen == [4]


async def test_an_unknown_tool_gets_an_error_result_naming_the_real_ones() -> None:
    llm = ScriptedLLM(calls(("delete_everything", {})), "sorry")
    await agent_with(llm, tools=[add]).run("go")
    assert tool_texts(llm.requests[1]) == [
        "Error: unknown tool 'delete_everything'; the available tools are: add, "
        "recall_tool_result"  # offered by default (the agent's default store)
    ]


async def test_tool_results_are_truncated_on_arrival_but_kept_whole_in_the_transcript() -> None:
    def dump() -> str:
        return "h" * 500 + "m" * 5_000 + "t" * 500

    llm = ScriptedLLM(calls(("dump", {})), "ok")
    truncation = ToolResultTruncation(max_chars=1_000, head_chars=100, tail_chars=100)
    agent = agent_with(llm, tools=[dump], tool_result_truncation=truncation)
    await agent.run("go")
    [sent] = tool_texts(llm.requests[1])
    call_id = agent.history[2].tool_call_id
    # With the default store the cut's marker names the handle that brings the middle back.
    named = f'truncated: recall_tool_result("{call_id}", offset=1) shows them]'
    assert sent == truncation.truncate_text(dump()).replace("truncated]", named)
    assert len(sent) < 1_000
    assert agent.history[2].text == sent
    assert agent.messages[2].text == dump()
    assert agent.messages[2].tool_call_id == agent.history[2].tool_call_id


async def test_a_run_cancelled_during_tools_leaves_every_call_answered() -> None:
    started, finished = asyncio.Event(), asyncio.Event()

    async def hang() -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    async def quick() -> str:
        finished.set()
        return "quick result"

    llm = ScriptedLLM(calls(("hang", {}), ("quick", {})), "after")
    agent = agent_with(llm, tools=[hang, quick])
    task = asyncio.create_task(agent.run("go"))
    await started.wait()
    await finished.wait()
    await asyncio.sleep(0)  # let quick's task hand over its result
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert check_history(agent.history) == []
    hung, done = agent.history[-2:]
    assert hung.is_error
    assert hung.text == "Error: the call to 'hang' was cancelled before it finished"
    assert done.text == "quick result"
    assert await agent.run("try again") == "after"  # the agent is usable afterwards
    assert agent.messages[-4:-2] == [hung, done]


async def test_run_cannot_be_entered_twice_at_once() -> None:
    started, release = asyncio.Event(), asyncio.Event()

    async def wait() -> str:
        started.set()
        await release.wait()
        return "ok"

    agent = agent_with(ScriptedLLM(calls(("wait", {})), "done"), tools=[wait])
    first = asyncio.create_task(agent.run("one"))
    await started.wait()
    with pytest.raises(UserError, match="already running"):
        await agent.run("two")
    release.set()
    assert await first == "done"


def test_duplicate_tool_names_and_bad_max_steps_are_rejected() -> None:
    with pytest.raises(UserError, match="two tools are named 'add'"):
        Agent(ScriptedLLM(), tools=[add, Tool(add)], compaction=FunctionStrategy(never))
    with pytest.raises(UserError, match="max_steps"):
        Agent(ScriptedLLM(), max_steps=0, compaction=FunctionStrategy(never))


# -- bounded endings ---------------------------------------------------------------------------


async def test_max_steps_ends_a_run_that_keeps_calling_tools_and_run_can_go_on() -> None:
    llm = ScriptedLLM(*(calls(("add", {"a": i, "b": 1})) for i in range(3)), "finally")
    agent = agent_with(llm, tools=[add], max_steps=3)
    with pytest.raises(MaxStepsExceeded, match="max_steps=3") as info:
        await agent.run("count")
    assert info.value.steps == 3
    assert agent.stop_reason == "max_steps"
    assert len(llm.requests) == 3
    assert agent.history[-1].role == "tool"
    assert check_history(agent.history) == []
    assert await agent.run("go on") == "finally"
    assert agent.stop_reason == "answer"


async def test_a_length_finish_asks_once_for_a_concise_answer() -> None:
    llm = ScriptedLLM(
        Completion(Message.assistant("A very long answer that got"), finish_reason="length"),
        "Short answer.",
    )
    agent = agent_with(llm)
    assert await agent.run("explain") == "Short answer."
    assert [m.text for m in llm.requests[1].messages[-2:]] == [
        "A very long answer that got",
        CONTINUE_PROMPT,
    ]
    assert agent.stop_reason == "answer"


async def test_a_second_length_finish_returns_the_cut_answer_instead_of_looping() -> None:
    cut = Completion(Message.assistant("still too long"), finish_reason="length")
    llm = ScriptedLLM(cut, cut, "never sent")
    agent = agent_with(llm)
    assert await agent.run("explain") == "still too long"
    assert agent.stop_reason == "length"
    assert len(llm.requests) == 2
    assert llm.remaining == 1


async def test_a_length_finish_with_tool_calls_runs_the_tools() -> None:
    truncated_call = Message.assistant(
        None, tool_calls=[ToolCall(id="c1", name="add", arguments='{"a": 1, "b"')]
    )
    llm = ScriptedLLM(Completion(truncated_call, finish_reason="length"), "ok")
    await agent_with(llm, tools=[add]).run("go")
    [error] = tool_texts(llm.requests[1])
    assert "not valid JSON" in error
    assert CONTINUE_PROMPT not in [m.text for m in llm.requests[1].messages]


# -- compaction --------------------------------------------------------------------------------


def keep_system_and_last_turn(ctx: CompactionContext) -> list[Message]:
    """A stand-in summarizer: system messages, the task, a summary note, then the last tool
    turn. Like the built-in summaries it keeps the task verbatim before the summary (the
    controller would put it back otherwise, a ``pin_restored`` problem)."""
    history = list(ctx.history)
    start = max(i for i, m in enumerate(history) if m.role == "assistant" and m.tool_calls)
    task = next(m for m in history if m.role == "user")
    dropped = [m for m in history[:start] if m.role != "system" and m is not task]
    return [
        *(m for m in history[:start] if m.role == "system"),
        task,
        Message.user(f"[summary of {len(dropped)} messages]"),
        *history[start:],
    ]


async def test_compaction_mid_run_shrinks_the_history_and_the_transcript_keeps_everything() -> None:
    def big(n: int) -> str:
        return str(n) * 5_000  # ~1,430 heuristic tokens

    script = [calls(("big", {"n": i})) for i in range(4)]
    llm = ScriptedLLM(*script, "all read")
    events: list[CompactionEvent] = []
    strategy = FunctionStrategy(keep_system_and_last_turn)
    agent = Agent(
        llm,
        tools=[big],
        system_prompt="sys",
        compaction=strategy,
        max_context_size=3_000,
        reserved_context_size=500,
        on_event=events.append,
    )
    assert await agent.run("read everything") == "all read"

    assert strategy.calls, "the threshold was never crossed"
    assert check_history(agent.history) == []
    assert agent.history[0] == Message.system("sys")
    assert agent.history[-1].text == "all read"
    assert len(agent.history) < len(agent.messages)
    # Every message ever added is in the transcript, in order, with nothing replaced.
    expected = [Message.system("sys"), Message.user("read everything")]
    for i, request in enumerate(script):
        call_id = request.tool_calls[0].id  # type: ignore[index]
        expected += [request, Message.tool(call_id, big(i))]
    expected.append(Message.assistant("all read"))
    assert agent.messages == expected
    # Each compaction is recorded where it happened, with the history it produced.
    records = [e for e in agent.transcript if isinstance(e, CompactionRecord)]
    assert [r.event for r in records] == events
    compacted = [r for r in records if r.event.status == "compacted"]
    assert len(compacted) == len(strategy.calls) >= 2
    for record in compacted:
        assert record.history is not None
        assert record.history[1] == Message.user("read everything")
        assert record.history[2].text.startswith("[summary of")
        position = agent.transcript.index(record)
        last_before = [e for e in agent.transcript[:position] if isinstance(e, Message)][-1]
        assert record.history[-1] is last_before
    # What was sent after a compaction is the compacted history, not the transcript.
    sent = llm.requests[-1].messages
    assert len(sent) < len(expected) - 1
    assert sent[2].text.startswith("[summary of")


async def test_the_default_compaction_is_an_llm_summary_with_the_agents_llm() -> None:
    from ctxcompact.strategies import LLMSummary

    llm = ScriptedLLM()
    agent = Agent(llm)
    assert isinstance(agent.controller.strategy, LLMSummary)


async def test_reported_usage_feeds_the_trigger() -> None:
    """Tiny messages, but the provider said the prompt was nearly the whole window."""
    strategy = FunctionStrategy(keep_system_and_last_turn)
    llm = ScriptedLLM(
        Completion(calls(("add", {"a": 1, "b": 2})), usage=Usage(input_tokens=9_500)),
        "3",
    )
    agent = Agent(
        llm,
        tools=[add],
        system_prompt="sys",
        compaction=strategy,
        max_context_size=10_000,
        reserved_context_size=1_000,
    )
    await agent.run("add")
    assert len(strategy.calls) == 1


# -- context too long --------------------------------------------------------------------------


def drop_oldest_turn(ctx: CompactionContext) -> list[Message]:
    """Drop the oldest message after the first user message (which is pinned)."""
    history = list(ctx.history)
    first = next(i for i, m in enumerate(history) if m.role != "system")
    return history[: first + 1] + history[first + 2 :]


async def _agent_with_past(llm: ScriptedLLM, strategy: FunctionStrategy) -> Agent:
    agent = Agent(llm, system_prompt="sys", compaction=strategy, max_context_size=1_000_000)
    for i in range(4):
        agent.add(Message.user(f"question {i} " + "q" * 400))
        agent.add(Message.assistant(f"answer {i} " + "a" * 400))
    return agent


async def test_context_too_long_forces_a_compaction_and_retries() -> None:
    llm = ScriptedLLM(ContextTooLongError("prompt is too long", status_code=400), "fine")
    strategy = FunctionStrategy(drop_oldest_turn)
    agent = await _agent_with_past(llm, strategy)
    assert await agent.run("and now?") == "fine"
    assert len(strategy.calls) == 1
    assert len(llm.requests[1].messages) == len(llm.requests[0].messages) - 1
    [record] = [e for e in agent.transcript if isinstance(e, CompactionRecord)]
    assert (record.event.trigger, record.event.status) == ("forced", "compacted")
    assert len(agent.messages) == 1 + 8 + 2  # nothing lost from the transcript


async def test_context_too_long_is_retried_at_most_twice_then_raised() -> None:
    errors = [ContextTooLongError(f"too long {i}") for i in range(4)]
    llm = ScriptedLLM(*errors)
    strategy = FunctionStrategy(drop_oldest_turn)
    agent = await _agent_with_past(llm, strategy)
    with pytest.raises(ContextTooLongError) as info:
        await agent.run("and now?")
    assert info.value is errors[2]
    assert len(llm.requests) == 3
    assert len(strategy.calls) == 2
    # The user's input is kept for a later retry (with the default store it carries the note
    # naming what the forced compactions dropped).
    assert agent.history[-1].role == "user"
    assert agent.history[-1].text.split("\n\n[ctxcompact: ")[0] == "and now?"


async def test_context_too_long_is_raised_at_once_when_compaction_cannot_shrink() -> None:
    error = ContextTooLongError("too long")
    llm = ScriptedLLM(error, "never")
    strategy = FunctionStrategy(lambda ctx: None, name="noop")
    agent = await _agent_with_past(llm, strategy)
    with pytest.raises(ContextTooLongError) as info:
        await agent.run("and now?")
    assert info.value is error
    assert len(llm.requests) == 1
    assert len(strategy.calls) == 1


# -- a ready controller ------------------------------------------------------------------------


async def test_a_ready_controller_is_used_and_its_events_reach_the_transcript() -> None:
    from ctxcompact import CompactionController

    seen: list[CompactionEvent] = []
    strategy = FunctionStrategy(drop_oldest_turn)
    controller = CompactionController(strategy, max_context_size=1_000_000, on_event=seen.append)
    llm = ScriptedLLM(ContextTooLongError("too long"), "ok")
    agent = Agent(llm, controller=controller)
    agent.add(Message.user("old " * 100), Message.assistant("old answer " * 50))
    await agent.run("new")
    assert len(seen) == 1
    assert [e.event for e in agent.transcript if isinstance(e, CompactionRecord)] == seen
    with pytest.raises(UserError, match="either controller= or compaction"):
        Agent(llm, controller=controller, compaction=strategy)
