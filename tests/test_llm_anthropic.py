"""AnthropicLLM through the real anthropic SDK, against a scripted httpx2 transport."""

from __future__ import annotations

import json
import logging
import traceback
from typing import Any

import anthropic
import httpx2
import pytest

from ctxcompact import LLM, Message, ToolCall, ToolSpec, Usage, from_anthropic
from ctxcompact.exceptions import (
    AuthenticationError,
    BadResponseError,
    ContextTooLongError,
    LLMConnectionError,
    LLMError,
    LLMTimeoutError,
    ModelNotFoundError,
    RateLimitError,
    ServerError,
)
from ctxcompact.llm import RetryEvent
from ctxcompact.llm.anthropic import DEFAULT_MAX_TOKENS, AnthropicLLM, merge_system
from tests.helpers.llm_wire import FAKE_KEY, Wire, anthropic_reply, error_body

LS_SPEC = ToolSpec(
    "ls", "List files", {"type": "object", "properties": {"dir": {"type": "string"}}}
)


def make_llm(wire: Wire, **kwargs: Any) -> AnthropicLLM:
    kwargs.setdefault("api_key", FAKE_KEY)
    kwargs.setdefault("max_retries", 0)
    return AnthropicLLM("claude-test", http_client=wire.client(), **kwargs)


def anthropic_error(status: int, message: str, kind: str, **kw: Any) -> httpx2.Response:
    return error_body(status, message, kind=kind, anthropic=True, **kw)


def test_the_adapter_is_an_llm() -> None:
    assert isinstance(AnthropicLLM("claude-test", api_key=FAKE_KEY), LLM)


# -- requests ------------------------------------------------------------------------------------


async def test_request_body_has_model_system_messages_tools_and_budget() -> None:
    wire = Wire(anthropic_reply())
    history = [Message.system("history rules"), Message.user("hello")]

    await make_llm(wire).complete(history, system="summarize", tools=[LS_SPEC], max_tokens=64)

    body = wire.body
    assert body["model"] == "claude-test"
    assert body["max_tokens"] == 64
    assert body["system"] == "summarize\n\nhistory rules"
    assert body["messages"] == [{"role": "user", "content": "hello"}]
    assert body["tools"] == [
        {"name": "ls", "description": "List files", "input_schema": LS_SPEC.parameters}
    ]
    request = wire.requests[0]
    assert str(request.url) == "https://api.anthropic.com/v1/messages"
    # anthropic 2.x sends the key as a bearer token; older versions used x-api-key.
    sent_key = request.headers.get("x-api-key") or request.headers["authorization"]
    assert sent_key.removeprefix("Bearer ") == FAKE_KEY


async def test_the_budget_defaults_to_the_adapter_then_the_module_default() -> None:
    wire = Wire(anthropic_reply(), anthropic_reply())
    await make_llm(wire, max_tokens=300).complete([Message.user("hi")])
    await make_llm(wire).complete([Message.user("hi")])
    assert [b["max_tokens"] for b in wire.bodies] == [300, DEFAULT_MAX_TOKENS]
    assert all("system" not in b and "tools" not in b for b in wire.bodies)


def test_system_blocks_from_the_history_keep_their_cache_control() -> None:
    blocks = [{"type": "text", "text": "rules", "cache_control": {"type": "ephemeral"}}]
    assert merge_system("first", blocks) == [{"type": "text", "text": "first"}, *blocks]
    assert merge_system(None, blocks) == blocks
    assert merge_system("only", None) == "only"
    assert merge_system(None, None) is None


async def test_extra_body_carries_the_thinking_switch() -> None:
    wire = Wire(anthropic_reply())
    thinking = {"type": "enabled", "budget_tokens": 1024}
    await make_llm(wire, extra_body={"thinking": thinking}).complete([Message.user("hi")])
    assert wire.body["thinking"] == thinking


# -- responses ---------------------------------------------------------------------------------


async def test_thinking_and_tool_result_blocks_round_trip_through_a_second_request() -> None:
    reply_content = [
        {"type": "thinking", "thinking": "I should list the files.", "signature": "sig-abc=="},
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {"dir": "src"}},
    ]
    wire = Wire(anthropic_reply(reply_content, stop_reason="tool_use"), anthropic_reply())
    llm = make_llm(wire)
    history = [Message.user("what is in src?")]

    completion = await llm.complete(history, tools=[LS_SPEC])

    assert completion.finish_reason == "tool_calls"
    assert completion.message.tool_calls == (
        ToolCall(id="toolu_1", name="ls", arguments='{"dir": "src"}'),
    )
    assert completion.message.text == "Let me look."
    # The tool result the agent appends, as the Anthropic format reads it from a user turn.
    (result,) = from_anthropic(
        [
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": "a.py",
                        "is_error": False,
                    }
                ],
            }
        ]
    )
    await llm.complete([*history, completion.message, result], tools=[LS_SPEC])

    sent = wire.bodies[1]["messages"]
    assert sent[1] == {"role": "assistant", "content": reply_content}
    assert sent[2] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.py", "is_error": False}
        ],
    }


async def test_a_tool_result_built_in_code_goes_out_as_a_tool_result_block() -> None:
    wire = Wire(anthropic_reply())
    call = ToolCall(id="toolu_9", name="ls", arguments="{}")
    history = [
        Message.user("go"),
        Message.assistant(None, tool_calls=[call]),
        Message.tool("toolu_9", "done"),
    ]
    await make_llm(wire).complete(history)
    user_turn = wire.body["messages"][2]
    assert user_turn["role"] == "user"
    (block,) = user_turn["content"]
    assert block["type"] == "tool_result"
    assert block["tool_use_id"] == "toolu_9"


async def test_usage_input_is_the_whole_prompt_including_cache() -> None:
    usage = {
        "input_tokens": 50,
        "output_tokens": 20,
        "cache_read_input_tokens": 1000,
        "cache_creation_input_tokens": 200,
    }
    completion = await make_llm(Wire(anthropic_reply(usage=usage))).complete([Message.user("hi")])
    assert completion.usage == Usage(
        input_tokens=1250, output_tokens=20, cache_read_tokens=1000, cache_write_tokens=200
    )


async def test_usage_without_cache_fields() -> None:
    usage = {"input_tokens": 7, "output_tokens": 3}
    completion = await make_llm(Wire(anthropic_reply(usage=usage))).complete([Message.user("hi")])
    assert completion.usage == Usage(input_tokens=7, output_tokens=3)


@pytest.mark.parametrize(
    ("stop_reason", "expected"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("refusal", "content_filter"),
        ("pause_turn", "pause_turn"),
        (None, "stop"),
    ],
)
async def test_stop_reasons_are_mapped(stop_reason: str | None, expected: str) -> None:
    wire = Wire(anthropic_reply([{"type": "text", "text": "x"}], stop_reason=stop_reason))
    completion = await make_llm(wire).complete([Message.user("hi")])
    assert completion.finish_reason == expected


async def test_an_empty_answer_cut_by_the_budget_is_a_length_completion() -> None:
    wire = Wire(anthropic_reply([], stop_reason="max_tokens"))
    completion = await make_llm(wire).complete([Message.user("hi")], max_tokens=1)
    assert completion.finish_reason == "length"


# -- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "error", "status"),
    [
        (
            anthropic_error(
                400, "prompt is too long: 210000 tokens > 200000 maximum", "invalid_request_error"
            ),
            ContextTooLongError,
            400,
        ),
        (
            anthropic_error(413, "Request exceeds the maximum size", "request_too_large"),
            ContextTooLongError,
            413,
        ),
        (
            anthropic_error(401, "invalid x-api-key", "authentication_error"),
            AuthenticationError,
            401,
        ),
        (anthropic_error(403, "no access", "permission_error"), AuthenticationError, 403),
        (anthropic_error(404, "model: claude-test", "not_found_error"), ModelNotFoundError, 404),
        (anthropic_error(429, "rate limited", "rate_limit_error"), RateLimitError, 429),
        (anthropic_error(500, "internal", "api_error"), ServerError, 500),
        (anthropic_error(529, "Overloaded", "overloaded_error"), ServerError, 529),
        (
            anthropic_error(400, "messages: roles must alternate", "invalid_request_error"),
            LLMError,
            400,
        ),
    ],
)
async def test_http_errors_map_to_the_tree(
    response: httpx2.Response, error: type[LLMError], status: int
) -> None:
    wire = Wire(response)
    with pytest.raises(error) as caught:
        await make_llm(wire).complete([Message.user("hi")])
    assert type(caught.value) is error
    assert caught.value.status_code == status
    assert caught.value.retryable is (status in (429, 500, 529))
    assert isinstance(caught.value.__cause__, anthropic.APIStatusError)
    assert "claude-test" in str(caught.value)
    assert len(wire.requests) == 1


@pytest.mark.parametrize(
    ("failure", "error"),
    [
        (httpx2.ReadTimeout("slow"), LLMTimeoutError),
        (httpx2.ConnectError("refused"), LLMConnectionError),
    ],
)
async def test_transport_failures_map_to_the_tree(
    failure: Exception, error: type[LLMError]
) -> None:
    with pytest.raises(error) as caught:
        await make_llm(Wire(failure)).complete([Message.user("hi")])
    assert caught.value.retryable is True
    assert isinstance(caught.value.__cause__, anthropic.APIConnectionError)


@pytest.mark.parametrize(
    ("response", "match"),
    [
        (anthropic_reply([], stop_reason="end_turn"), "neither text nor tool calls"),
        (anthropic_reply([{"type": "text", "text": ""}]), "neither text nor tool calls"),
        (httpx2.Response(200, json={"type": "message", "role": "assistant"}), "no content"),
        (
            httpx2.Response(200, json={"type": "message", "content": [{"type": "tool_use"}]}),
            "malformed",
        ),
        (httpx2.Response(200, text="<html>gateway</html>"), "not a message"),
    ],
)
async def test_empty_or_malformed_answers_are_bad_responses(
    response: httpx2.Response, match: str
) -> None:
    with pytest.raises(BadResponseError, match=match):
        await make_llm(Wire(response)).complete([Message.user("hi")])


# -- retries -----------------------------------------------------------------------------------


async def test_retry_after_is_honoured_by_the_sdk() -> None:
    # The SDK's own first backoff is at most 0.5 s; 0.8 s can only be the server's.
    wire = Wire(
        anthropic_error(529, "Overloaded", "overloaded_error", headers={"retry-after": "0.8"}),
        anthropic_reply(),
    )
    completion = await make_llm(wire, max_retries=1).complete([Message.user("hi")])
    assert completion.message.text == "ok"
    assert wire.times[1] - wire.times[0] >= 0.8


async def test_each_retry_is_reported_by_callback_and_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    events: list[RetryEvent] = []
    quick = {"retry-after": "0.01"}
    wire = Wire(
        anthropic_error(429, "slow", "rate_limit_error", headers=quick),
        anthropic_error(529, "busy", "overloaded_error", headers=quick),
        anthropic_reply(),
    )
    with caplog.at_level(logging.WARNING, logger="ctxcompact.llm"):
        await make_llm(wire, max_retries=2, on_retry=events.append).complete([Message.user("hi")])

    assert [(e.provider, e.attempt, e.max_retries, e.status_code) for e in events] == [
        ("anthropic", 1, 2, 429),
        ("anthropic", 2, 2, 529),
    ]
    lines = [r.getMessage() for r in caplog.records if r.name == "ctxcompact.llm"]
    assert lines == [e.describe() for e in events]
    assert "retry 2 of 2 after HTTP 529" in lines[1]


async def test_concurrent_calls_report_only_their_own_retries() -> None:
    import asyncio

    events: list[RetryEvent] = []

    def route(request: httpx2.Request) -> httpx2.Response:
        text = json.loads(request.content)["messages"][0]["content"]
        if text == "flaky" and request.headers["x-stainless-retry-count"] == "0":
            return anthropic_error(500, "x", "api_error", headers={"retry-after": "0.01"})
        return anthropic_reply([{"type": "text", "text": text}])

    wire = Wire(*([route] * 3))
    llm = make_llm(wire, max_retries=1, on_retry=events.append)
    replies = await asyncio.gather(
        llm.complete([Message.user("flaky")]), llm.complete([Message.user("steady")])
    )
    assert [r.message.text for r in replies] == ["flaky", "steady"]
    assert [(e.attempt, e.status_code) for e in events] == [(1, 500)]


# -- the key never leaks -----------------------------------------------------------------------


async def test_the_api_key_appears_in_no_error_repr_or_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    echo = anthropic_error(401, f"invalid x-api-key: {FAKE_KEY}", "authentication_error")
    wire = Wire(anthropic_error(500, "x", "api_error", headers={"retry-after": "0.01"}), echo)
    llm = make_llm(wire, max_retries=1)

    with caplog.at_level(logging.DEBUG), pytest.raises(AuthenticationError) as caught:
        await llm.complete([Message.user("hi")])

    error = caught.value
    assert caplog.records
    for text in (
        str(error),
        repr(error),
        str(error.__cause__),
        "".join(traceback.format_exception(error)),
        repr(llm),
        caplog.text,
    ):
        assert FAKE_KEY not in text
    assert "[redacted]" in str(error)


async def test_no_credentials_at_all_is_an_authentication_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    wire = Wire()
    llm = AnthropicLLM("claude-test", http_client=wire.client())
    with pytest.raises(AuthenticationError, match="ANTHROPIC_API_KEY"):
        await llm.complete([Message.user("hi")])
    assert wire.requests == []
