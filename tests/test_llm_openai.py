"""OpenAIChatLLM through the real openai SDK, against a scripted httpx2 transport."""

from __future__ import annotations

import json
import logging
import socket
import traceback

import httpx2
import openai
import pytest

from ctxcompact import Completion, Message, ToolCall, ToolSpec, Usage
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
from ctxcompact.llm.openai import OpenAIChatLLM
from tests.helpers.llm_wire import FAKE_KEY, Wire, error_body, openai_reply

READ_SPEC = ToolSpec(
    "read_file",
    "Read a file",
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)


def make_llm(wire: Wire, **kwargs: object) -> OpenAIChatLLM:
    kwargs.setdefault("api_key", FAKE_KEY)
    kwargs.setdefault("max_retries", 0)
    return OpenAIChatLLM("gpt-test", http_client=wire.client(), **kwargs)  # type: ignore[arg-type]


# -- requests --------------------------------------------------------------------------------


async def test_request_body_has_model_system_first_messages_tools_and_budget() -> None:
    wire = Wire(openai_reply("done"))
    llm = make_llm(wire)
    history = [Message.system("be brief"), Message.user("hello")]

    await llm.complete(history, system="summarize", tools=[READ_SPEC], max_tokens=77)

    body = wire.body
    assert body["model"] == "gpt-test"
    assert body["messages"] == [
        {"role": "system", "content": "summarize"},
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hello"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "read_file",
                "description": "Read a file",
                "parameters": READ_SPEC.parameters,
            },
        }
    ]
    # OpenAI itself: its newer models refuse max_tokens.
    assert body["max_completion_tokens"] == 77
    assert "max_tokens" not in body
    request = wire.requests[0]
    assert str(request.url) == "https://api.openai.com/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {FAKE_KEY}"


async def test_without_system_tools_or_budget_those_keys_are_absent() -> None:
    wire = Wire(openai_reply())
    await make_llm(wire).complete([Message.user("hi")])
    assert wire.body == {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]}


async def test_a_base_url_server_gets_max_tokens_and_the_default_budget() -> None:
    wire = Wire(openai_reply(), openai_reply())
    llm = make_llm(wire, base_url="http://127.0.0.1:9/v1", max_tokens=300)

    await llm.complete([Message.user("hi")])
    await llm.complete([Message.user("hi")], max_tokens=5)

    assert str(wire.requests[0].url) == "http://127.0.0.1:9/v1/chat/completions"
    assert [b.get("max_tokens") for b in wire.bodies] == [300, 5]
    assert all("max_completion_tokens" not in b for b in wire.bodies)


async def test_max_tokens_field_can_be_forced() -> None:
    wire = Wire(openai_reply())
    llm = make_llm(wire, max_tokens_field="max_tokens")
    await llm.complete([Message.user("hi")], max_tokens=9)
    assert wire.body["max_tokens"] == 9


async def test_extra_body_is_merged_into_every_request() -> None:
    wire = Wire(openai_reply())
    llm = make_llm(wire, extra_body={"temperature": 0, "seed": 7})
    await llm.complete([Message.user("hi")])
    assert wire.body["temperature"] == 0
    assert wire.body["seed"] == 7


async def test_a_ready_client_is_used_as_is() -> None:
    wire = Wire(openai_reply("from ready client"))
    client = openai.AsyncOpenAI(api_key=FAKE_KEY, max_retries=0, http_client=wire.client())
    llm = OpenAIChatLLM("gpt-test", client=client)
    completion = await llm.complete([Message.user("hi")])
    assert completion.message.text == "from ready client"
    assert llm.client is client


def test_a_ready_client_cannot_also_take_on_retry() -> None:
    client = openai.AsyncOpenAI(api_key=FAKE_KEY)
    with pytest.raises(ValueError, match="http_client="):
        OpenAIChatLLM("gpt-test", client=client, on_retry=lambda event: None)


# -- responses ---------------------------------------------------------------------------------


async def test_tool_calls_round_trip_through_a_second_request() -> None:
    calls = [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
        }
    ]
    wire = Wire(openai_reply(None, tool_calls=calls, finish_reason="tool_calls"), openai_reply())
    llm = make_llm(wire)
    history = [Message.user("read a.py")]

    completion = await llm.complete(history, tools=[READ_SPEC])

    assert completion.finish_reason == "tool_calls"
    assert completion.message.tool_calls == (
        ToolCall(id="call_1", name="read_file", arguments='{"path": "a.py"}'),
    )
    # The reply goes back exactly as the server sent it (null refusal dropped).
    history = [*history, completion.message, Message.tool("call_1", "print('a')")]
    await llm.complete(history, tools=[READ_SPEC])
    sent = wire.bodies[1]["messages"]
    assert sent[1] == {"role": "assistant", "content": None, "tool_calls": calls}
    assert sent[2] == {"role": "tool", "tool_call_id": "call_1", "content": "print('a')"}


async def test_unknown_message_keys_are_kept_for_the_round_trip() -> None:
    wire = Wire(openai_reply("x", extra_message={"reasoning_content": "thought"}))
    completion = await make_llm(wire).complete([Message.user("hi")])
    assert (completion.message.model_extra or {})["reasoning_content"] == "thought"
    assert "refusal" not in (completion.message.model_extra or {})


async def test_usage_is_parsed_with_cached_prompt_tokens() -> None:
    usage = {
        "prompt_tokens": 1200,
        "completion_tokens": 80,
        "total_tokens": 1280,
        "prompt_tokens_details": {"cached_tokens": 1024},
    }
    wire = Wire(openai_reply(usage=usage))
    completion = await make_llm(wire).complete([Message.user("hi")])
    assert completion.usage == Usage(input_tokens=1200, output_tokens=80, cache_read_tokens=1024)


async def test_usage_is_none_when_the_server_reports_none() -> None:
    wire = Wire(openai_reply())
    completion = await make_llm(wire).complete([Message.user("hi")])
    assert completion.usage is None


@pytest.mark.parametrize(
    ("wire_reason", "expected"),
    [
        ("stop", "stop"),
        ("length", "length"),
        ("content_filter", "content_filter"),
        ("function_call", "tool_calls"),
        ("something_new", "something_new"),
        (None, "stop"),
    ],
)
async def test_finish_reasons_are_mapped(wire_reason: str | None, expected: str) -> None:
    wire = Wire(openai_reply("text", finish_reason=wire_reason))
    completion = await make_llm(wire).complete([Message.user("hi")])
    assert completion == Completion(Message.assistant("text"), None, expected)


async def test_an_empty_answer_cut_by_the_budget_is_a_length_completion() -> None:
    wire = Wire(openai_reply("", finish_reason="length"))
    completion = await make_llm(wire).complete([Message.user("hi")], max_tokens=1)
    assert completion.finish_reason == "length"
    assert completion.message.text == ""


# -- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "error", "status"),
    [
        (
            error_body(
                400,
                "This model's maximum context length is 8192 tokens.",
                code="context_length_exceeded",
            ),
            ContextTooLongError,
            400,
        ),
        (
            error_body(400, "This model's maximum context length is 2048 tokens."),
            ContextTooLongError,
            400,
        ),
        (error_body(413, "Request too large"), ContextTooLongError, 413),
        (
            error_body(401, "Incorrect API key provided", code="invalid_api_key"),
            AuthenticationError,
            401,
        ),
        (error_body(403, "Project not allowed"), AuthenticationError, 403),
        (
            error_body(404, "The model `gpt-test` does not exist", code="model_not_found"),
            ModelNotFoundError,
            404,
        ),
        (error_body(429, "Rate limit reached", code="rate_limit_exceeded"), RateLimitError, 429),
        # A rate limit that talks about tokens is still a rate limit, not a full window.
        (
            error_body(429, "Request too large: too many tokens for the context window per min"),
            RateLimitError,
            429,
        ),
        (error_body(500, "oops", kind="server_error"), ServerError, 500),
        (error_body(503, "overloaded", kind="server_error"), ServerError, 503),
        (error_body(408, "request timeout"), LLMTimeoutError, 408),
        (error_body(422, "bad temperature"), LLMError, 422),
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
    assert caught.value.retryable is (status in (408, 429, 500, 503))
    assert isinstance(caught.value.__cause__, openai.APIStatusError)
    assert "gpt-test" in str(caught.value)
    assert len(wire.requests) == 1  # max_retries=0


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
    assert caught.value.status_code is None
    assert isinstance(caught.value.__cause__, openai.APIConnectionError)


@pytest.mark.parametrize(
    ("response", "match"),
    [
        (
            httpx2.Response(200, json={"id": "x", "object": "chat.completion", "choices": []}),
            "no choices",
        ),
        (openai_reply(None, finish_reason="stop"), "neither text nor tool calls"),
        (openai_reply("", finish_reason="stop"), "neither text nor tool calls"),
        (
            httpx2.Response(200, json={"choices": [{"index": 0, "finish_reason": "stop"}]}),
            "no message",
        ),
        (
            httpx2.Response(
                200, json={"choices": [{"message": {"role": "assistant", "content": 3}}]}
            ),
            "malformed",
        ),
        (httpx2.Response(200, text="<html>gateway</html>"), "not a chat completion"),
    ],
)
async def test_empty_or_malformed_answers_are_bad_responses(
    response: httpx2.Response, match: str
) -> None:
    with pytest.raises(BadResponseError, match=match) as caught:
        await make_llm(Wire(response)).complete([Message.user("hi")])
    assert caught.value.retryable is False


# -- retries (the SDK's own) -------------------------------------------------------------------


async def test_retry_after_is_honoured_by_the_sdk() -> None:
    # The SDK's own first backoff is at most 0.5 s: a gap of 0.8 s or more can only come
    # from the server's Retry-After.
    wire = Wire(error_body(429, "slow down", headers={"retry-after": "0.8"}), openai_reply("ok"))
    completion = await make_llm(wire, max_retries=1).complete([Message.user("hi")])
    assert completion.message.text == "ok"
    assert len(wire.requests) == 2
    assert wire.times[1] - wire.times[0] >= 0.8


async def test_each_retry_is_reported_by_callback_and_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    events: list[RetryEvent] = []
    wire = Wire(
        error_body(429, "slow down", headers={"retry-after": "0.01"}),
        error_body(503, "busy", headers={"retry-after-ms": "10"}),
        openai_reply("finally"),
    )
    llm = make_llm(wire, max_retries=3, on_retry=events.append)

    with caplog.at_level(logging.WARNING, logger="ctxcompact.llm"):
        completion = await llm.complete([Message.user("hi")])

    assert completion.message.text == "finally"
    assert [(e.attempt, e.max_retries, e.status_code) for e in events] == [(1, 3, 429), (2, 3, 503)]
    assert all(e.provider == "openai" and e.model == "gpt-test" for e in events)
    assert all(e.waited_s >= 0.01 for e in events)
    lines = [r.getMessage() for r in caplog.records if r.name == "ctxcompact.llm"]
    assert len(lines) == 2
    assert "retry 1 of 3 after HTTP 429" in lines[0]
    assert "retry 2 of 3 after HTTP 503" in lines[1]


async def test_retries_after_a_timeout_are_reported_without_status() -> None:
    events: list[RetryEvent] = []
    wire = Wire(httpx2.ReadTimeout("slow"), openai_reply("ok"))
    # No Retry-After without a response: this waits the SDK's own backoff (< 0.5 s).
    await make_llm(wire, max_retries=1, on_retry=events.append).complete([Message.user("hi")])
    assert [(e.attempt, e.status_code) for e in events] == [(1, None)]


async def test_exhausted_retries_raise_the_last_error_after_max_retries_plus_one_tries() -> None:
    events: list[RetryEvent] = []
    busy = {"retry-after": "0.01"}
    wire = Wire(*(error_body(429, "slow down", headers=busy) for _ in range(3)))
    with pytest.raises(RateLimitError):
        await make_llm(wire, max_retries=2, on_retry=events.append).complete([Message.user("hi")])
    assert len(wire.requests) == 3
    assert [e.attempt for e in events] == [1, 2]


async def test_client_errors_are_not_retried() -> None:
    events: list[RetryEvent] = []
    wire = Wire(error_body(400, "bad request"))
    with pytest.raises(LLMError):
        await make_llm(wire, max_retries=3, on_retry=events.append).complete([Message.user("hi")])
    assert len(wire.requests) == 1
    assert events == []


# -- the key never leaks -----------------------------------------------------------------------


async def test_the_api_key_appears_in_no_error_repr_or_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A server that echoes the key back, after a retried 500.
    echo = error_body(401, f"Incorrect API key provided: {FAKE_KEY}", code="invalid_api_key")
    wire = Wire(error_body(500, "boom", headers={"retry-after": "0.01"}), echo)
    llm = make_llm(wire, max_retries=1)

    with caplog.at_level(logging.DEBUG), pytest.raises(AuthenticationError) as caught:
        await llm.complete([Message.user("hi")])

    error = caught.value
    shown = [
        str(error),
        repr(error),
        str(error.__cause__),
        repr(error.__cause__),
        "".join(traceback.format_exception(error)),
        repr(llm),
        caplog.text,
        json.dumps([r.getMessage() for r in caplog.records]),
    ]
    assert caplog.records, "expected DEBUG records from the SDK"
    for text in shown:
        assert FAKE_KEY not in text
    assert "[redacted]" in str(error)
    # The key did go out on the wire, where it belongs.
    assert all(r.headers["authorization"] == f"Bearer {FAKE_KEY}" for r in wire.requests)


def test_no_key_at_all_is_an_authentication_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(AuthenticationError, match="OPENAI_API_KEY"):
        OpenAIChatLLM("gpt-test")


async def test_a_broken_retry_callback_is_logged_and_the_call_still_succeeds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(event: RetryEvent) -> None:
        raise RuntimeError("spinner crashed")

    wire = Wire(error_body(429, "slow", headers={"retry-after": "0.01"}), openai_reply("fine"))
    with caplog.at_level(logging.WARNING, logger="ctxcompact.llm"):
        completion = await make_llm(wire, max_retries=1, on_retry=broken).complete(
            [Message.user("hi")]
        )
    assert completion.message.text == "fine"
    failures = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(failures) == 1
    assert "on_retry callback" in failures[0].getMessage()
    assert failures[0].exc_info is not None


async def test_a_closed_port_is_a_connection_error_over_real_sockets() -> None:
    with socket.socket() as sock:  # bind, then close: nothing listens on that port
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    llm = OpenAIChatLLM(
        "gpt-test", api_key=FAKE_KEY, base_url=f"http://127.0.0.1:{port}/v1", max_retries=0
    )
    try:
        with pytest.raises(LLMConnectionError) as caught:
            await llm.complete([Message.user("hi")])
    finally:
        await llm.aclose()
    assert caught.value.retryable is True
    assert isinstance(caught.value.__cause__, openai.APIConnectionError)


async def test_a_redirect_inside_one_attempt_is_not_reported_as_a_retry() -> None:
    events: list[RetryEvent] = []
    moved = httpx2.Response(307, headers={"location": "https://api.openai.com/v1/moved"})
    wire = Wire(moved, openai_reply("moved"))
    http = httpx2.AsyncClient(transport=httpx2.MockTransport(wire.handler), follow_redirects=True)
    llm = OpenAIChatLLM(
        "gpt-test", api_key=FAKE_KEY, max_retries=2, http_client=http, on_retry=events.append
    )
    completion = await llm.complete([Message.user("hi")])
    assert completion.message.text == "moved"
    assert [r.url.path for r in wire.requests] == ["/v1/chat/completions", "/v1/moved"]
    assert events == []
