"""The adapters with the controller and LLMSummary: usage feedback, failures keep the history."""

from __future__ import annotations

from ctxcompact import CompactionController, Message, ToolCall
from ctxcompact.llm.anthropic import AnthropicLLM
from ctxcompact.llm.openai import OpenAIChatLLM
from ctxcompact.strategies import SUMMARY_PREFIX, LLMSummary
from tests.helpers.llm_wire import FAKE_KEY, Wire, anthropic_reply, error_body, openai_reply


def history() -> list[Message]:
    call = ToolCall(id="c1", name="grep", arguments='{"pattern": "TODO"}')
    return [
        Message.system("You are a coding agent."),
        Message.user("Find the TODOs."),
        Message.assistant(None, tool_calls=[call]),
        Message.tool("c1", "a.py:3: TODO fix\nb.py:9: TODO test"),
        Message.assistant("There are two TODOs."),
        Message.user("Fix the first one."),
        Message.assistant("Done."),
    ]


async def test_provider_usage_becomes_the_controllers_count() -> None:
    usage = {
        "input_tokens": 40,
        "output_tokens": 10,
        "cache_read_input_tokens": 900,
        "cache_creation_input_tokens": 50,
    }
    wire = Wire(anthropic_reply([{"type": "text", "text": "next step"}], usage=usage))
    llm = AnthropicLLM("claude-test", api_key=FAKE_KEY, max_retries=0, http_client=wire.client())
    controller = CompactionController(
        LLMSummary(), max_context_size=10_000, reserved_context_size=1_000
    )
    stored = history()

    completion = await llm.complete(stored)
    assert completion.usage is not None
    stored = [*stored, completion.message]
    controller.observe_usage(completion.usage, stored)

    # 40 uncached + 900 read + 50 written + 10 out: the whole context, not the uncached part.
    assert controller.token_count(stored) == 1000


async def test_a_failing_summarizer_keeps_the_history_and_reports_the_typed_error() -> None:
    busy = {"retry-after": "0.01"}
    wire = Wire(error_body(503, "down", headers=busy), error_body(503, "down", headers=busy))
    llm = OpenAIChatLLM("gpt-test", api_key=FAKE_KEY, max_retries=1, http_client=wire.client())
    controller = CompactionController(
        LLMSummary(llm, max_preserved_messages=1), max_context_size=100_000
    )
    before = history()
    snapshot = list(before)

    compacted = await controller.compact(before, force=True)
    result, event = compacted.history, compacted.event

    assert result is before
    assert before == snapshot
    assert event is not None
    assert event.status == "failed"
    assert event.error is not None
    assert event.error.startswith("ServerError")
    assert "HTTP 503" in event.error
    assert FAKE_KEY not in event.error
    assert len(wire.requests) == 2  # the SDK retried once, then gave up


async def test_a_summary_through_the_adapter_replaces_the_old_part() -> None:
    wire = Wire(openai_reply("The user asked for TODOs; two were found in a.py and b.py."))
    llm = OpenAIChatLLM("gpt-test", api_key=FAKE_KEY, max_retries=0, http_client=wire.client())
    before = history()
    # A summary must cost less than what it replaces: give the old part a real grep output.
    before[3] = Message.tool("c1", before[3].text + "\nc.py: no match" * 40)

    result = await CompactionController(
        LLMSummary(llm, max_preserved_messages=2), max_context_size=100_000
    ).maybe_compact(before, force=True)

    assert result is not before
    assert result[0] is before[0]
    assert result[1] is before[1]  # the task, verbatim, before the summary
    assert result[2].text.startswith(SUMMARY_PREFIX)
    assert "two were found" in result[2].text
    assert list(result[3:]) == before[-2:]
    assert all(a is b for a, b in zip(result[3:], before[-2:], strict=True))
    sent = wire.body
    assert sent["messages"][0]["role"] == "system"  # the summarizer's system prompt
    assert "TODO fix" in sent["messages"][-1]["content"]


async def test_context_too_long_from_the_provider_makes_the_summary_retry_smaller() -> None:
    # LLMSummary halves its input once on ContextTooLongError: the adapter must raise that
    # type for OpenAI's code, not a generic error.
    too_long = error_body(400, "maximum context length exceeded", code="context_length_exceeded")
    wire = Wire(too_long, openai_reply("short summary"))
    llm = OpenAIChatLLM("gpt-test", api_key=FAKE_KEY, max_retries=0, http_client=wire.client())
    before = [*history()[:-2], Message.assistant("x" * 4000), *history()[-2:]]

    result = await CompactionController(
        LLMSummary(llm, max_preserved_messages=2, max_input_tokens=3000), max_context_size=100_000
    ).maybe_compact(before, force=True)

    # With the default store the summary ends with a note naming the range it replaces: the
    # four messages after the task, which stays verbatim before it.
    assert result[1] is before[1]
    assert result[2].text.startswith(
        SUMMARY_PREFIX + "short summary\n\n[ctxcompact: this summary replaces 4 message(s); "
    )
    first, second = (b["messages"][-1]["content"] for b in wire.bodies)
    assert len(second) < len(first)
