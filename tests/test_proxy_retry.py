"""Compact-and-retry over real HTTP on 127.0.0.1: SDK clients -> proxy -> fake upstream that
refuses prompts over its window, as OpenAI, Anthropic and a 413-answering gateway do."""

from __future__ import annotations

import gzip
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ctxcompact import check_history, from_anthropic, from_openai
from ctxcompact.proxy import ERROR_BODY_LIMIT
from ctxcompact.testing import FunctionStrategy
from tests.helpers.proxy_servers import FakeUpstream, serve_in_thread
from tests.test_proxy import (
    SECRET,
    anthropic_history,
    openai_client,
    openai_history,
    start_proxy,
    write_config,
)

# A window far larger than the upstream's: the case where only the upstream's answer helps.
TOO_LARGE = {"max_context_size": 1_000_000, "reserved_context_size": 1000}
MARK = "UNIQUE-CONTENT-7731"


@pytest.fixture
def upstream() -> Iterator[tuple[FakeUpstream, str]]:
    fake = FakeUpstream(window=4000)
    with serve_in_thread(fake.app()) as url:
        yield fake, url


def long_history() -> list[dict[str, Any]]:
    """~33 KB, ~7,600 estimated tokens: over a 4,000-token upstream window."""
    messages = openai_history(turns=30, output_chars=100)
    messages[1] = {"role": "user", "content": f"Fix the failing test. {MARK}"}
    return messages


def header_fields(value: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in value.split("; "))


def assert_valid_cut(original: list[dict[str, Any]], sent: list[dict[str, Any]]) -> None:
    """The retried history is a valid, order-kept cut that kept system, task and newest step."""
    history = from_openai(sent)
    assert check_history(history) == []
    assert sent[0] == original[0]
    assert sent[1]["role"] == "user"
    assert MARK in sent[1]["content"]
    assert sent[-2:] == original[-2:]  # the newest call and its result, untouched
    ids = [m["tool_call_id"] for m in sent if m["role"] == "tool"]
    all_ids = [m["tool_call_id"] for m in original if m["role"] == "tool"]
    assert ids == all_ids[len(all_ids) - len(ids) :]  # the newest kept, in order


def test_too_large_configured_window_is_corrected_by_one_retry(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    fake.max_prompt_bytes = 16_000
    messages = long_history()
    before = json.dumps(messages)
    with start_proxy(write_config(tmp_path, url, **TOO_LARGE)) as proxy:
        raw = openai_client(proxy).chat.completions.with_raw_response.create(
            model="fake-model", messages=messages
        )
    completion = raw.parse()
    assert json.dumps(messages) == before  # the caller's list is untouched
    assert len(fake.received) == 2
    assert fake.received[0].json()["messages"] == messages  # first sent as it came
    sent = fake.received[1].json()["messages"]
    assert len(fake.received[1].body) <= 16_000 < len(fake.received[0].body)
    assert_valid_cut(messages, sent)
    assert completion.choices[0].message.content == f"saw {len(sent)} messages"
    fields = header_fields(raw.headers["x-ctxcompact"])
    assert fields["retried"] == "1"
    assert fields["window"] == "4000"  # the window the error stated, not the configured one
    assert fields["messages"] == f"{len(messages)}->{len(sent)}"


def test_second_retry_cuts_deeper_when_the_first_is_still_too_long(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    fake.max_prompt_bytes = 12_000
    messages = long_history()
    with start_proxy(write_config(tmp_path, url, **TOO_LARGE)) as proxy:
        raw = openai_client(proxy).chat.completions.with_raw_response.create(
            model="fake-model", messages=messages
        )
    assert raw.http_response.status_code == 200
    sizes = [len(r.body) for r in fake.received]
    assert len(sizes) == 3
    assert sizes[0] > sizes[1] > 12_000 >= sizes[2]
    assert_valid_cut(messages, fake.received[2].json()["messages"])
    assert header_fields(raw.headers["x-ctxcompact"])["retried"] == "2"


def test_at_most_two_retries_then_the_upstream_error_reaches_the_client(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    fake.max_prompt_bytes = 3_000  # below what the guard can reach
    config = write_config(tmp_path, url, **TOO_LARGE)
    with start_proxy(config) as proxy, pytest.raises(openai.BadRequestError) as info:
        openai_client(proxy).chat.completions.create(model="fake-model", messages=long_history())
    assert len(fake.received) == 3
    error = info.value
    assert error.code == "context_length_exceeded"  # the upstream's own error, relayed
    assert header_fields(error.response.headers["x-ctxcompact"])["retried"] == "2"


def test_anthropic_prompt_is_too_long_is_retried(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    fake.too_long = "anthropic"
    fake.max_prompt_bytes = 16_000
    messages = anthropic_history(turns=30, output_chars=100)
    with start_proxy(write_config(tmp_path, url, **TOO_LARGE)) as proxy:
        client = anthropic.Anthropic(base_url=proxy, api_key=SECRET, max_retries=0)
        raw = client.messages.with_raw_response.create(
            model="claude-fake", max_tokens=100, system="Be terse.", messages=messages
        )
    assert raw.http_response.status_code == 200
    assert len(fake.received) == 2
    sent = fake.received[1].json()
    assert sent["system"] == "Be terse."
    history = from_anthropic(sent["messages"], system=sent["system"])
    assert check_history(history) == []
    assert sent["messages"][-2:] == messages[-2:]
    fields = header_fields(raw.headers["x-ctxcompact"])
    assert (fields["retried"], fields["window"]) == ("1", "4000")


def test_413_without_a_stated_window_uses_the_model_table(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    fake.too_long = "413"
    fake.max_prompt_bytes = 30_000
    with start_proxy(write_config(tmp_path, url, **TOO_LARGE)) as proxy:
        raw = openai_client(proxy).chat.completions.with_raw_response.create(
            model="gpt-4", messages=openai_history(turns=60, output_chars=100)
        )
    assert raw.http_response.status_code == 200
    assert len(fake.received) == 2
    # gpt-4's documented window is 8,192 tokens: the cut is to 80% of it.
    assert header_fields(raw.headers["x-ctxcompact"])["window"] == "8192"


def test_code_without_window_for_an_unknown_model_uses_the_configured_window(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    fake.too_long = "openai-bare"
    fake.max_prompt_bytes = 16_000
    config = write_config(tmp_path, url, max_context_size=4500, reserved_context_size=100)
    never = FunctionStrategy(lambda ctx: None, name="never")
    with start_proxy(config, strategy=never) as proxy:
        raw = openai_client(proxy).chat.completions.with_raw_response.create(
            model="unknown-model", messages=long_history()
        )
    assert raw.http_response.status_code == 200
    assert header_fields(raw.headers["x-ctxcompact"])["window"] == "4500"


def test_other_400_is_relayed_unchanged_and_not_retried(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    fake.status = 400
    with start_proxy(write_config(tmp_path, url, **TOO_LARGE)) as proxy:
        response = httpx.post(
            f"{proxy}/v1/chat/completions",
            json={"model": "gpt-4", "messages": long_history()},
            headers={"authorization": f"Bearer {SECRET}"},
        )
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "slow down"
    assert len(fake.received) == 1
    assert "retried" not in response.headers["x-ctxcompact"]


def test_streaming_request_is_retried_before_any_byte_is_sent(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    fake.max_prompt_bytes = 16_000
    body = {"model": "fake-model", "stream": True, "messages": long_history()}
    config = write_config(tmp_path, url, **TOO_LARGE)
    with (
        start_proxy(config) as proxy,
        httpx.stream("POST", f"{proxy}/v1/chat/completions", json=body) as response,
    ):
        status = response.status_code
        header = response.headers["x-ctxcompact"]
        text = response.read().decode()
    assert status == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert header_fields(header)["retried"] == "1"
    deltas = [
        json.loads(line[6:])["choices"][0]["delta"].get("content", "")
        for line in text.splitlines()
        if line.startswith("data: {")
    ]
    assert "".join(deltas) == "one two three four"
    assert text.endswith("data: [DONE]\n\n")
    assert fake.received[1].json()["stream"] is True


def test_streaming_through_the_sdk_after_a_retry(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    fake.max_prompt_bytes = 16_000
    with start_proxy(write_config(tmp_path, url, **TOO_LARGE)) as proxy:
        stream = openai_client(proxy).chat.completions.create(
            model="fake-model", messages=long_history(), stream=True
        )
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "one two three four"
    assert len(fake.received) == 2


def test_retry_logs_sizes_never_content(
    upstream: tuple[FakeUpstream, str], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake, url = upstream
    fake.max_prompt_bytes = 12_000
    caplog.set_level(logging.DEBUG, logger="ctxcompact")
    with start_proxy(write_config(tmp_path, url, **TOO_LARGE)) as proxy:
        openai_client(proxy).chat.completions.create(model="fake-model", messages=long_history())
    retries = [r for r in caplog.records if "retrying at" in r.getMessage()]
    assert len(retries) == 2
    for record in caplog.records:
        assert MARK not in record.getMessage()
        assert SECRET not in record.getMessage()
        assert "line 3" not in record.getMessage()


def refusing_app(status: int, body: bytes, headers: dict[str, str]) -> tuple[Starlette, list[int]]:
    """An upstream answering every chat request with ``body``; records each request's size."""
    sizes: list[int] = []

    async def chat(request: Request) -> Response:
        sizes.append(len(await request.body()))
        return Response(body, status_code=status, headers=headers)

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])]), sizes


def test_error_body_over_the_read_limit_is_relayed_whole_and_not_retried(
    tmp_path: Path,
) -> None:
    big = json.dumps(
        {"error": {"message": "x" * (2 * ERROR_BODY_LIMIT) + " maximum context length is 9"}}
    ).encode()
    app, sizes = refusing_app(400, big, {"content-type": "application/json"})
    with serve_in_thread(app) as url, start_proxy(write_config(tmp_path, url)) as proxy:
        response = httpx.post(
            f"{proxy}/v1/chat/completions", json={"model": "m", "messages": long_history()}
        )
    assert response.status_code == 400
    assert response.content == big
    assert len(sizes) == 1


def test_gzip_encoded_context_error_is_read_and_retried(tmp_path: Path) -> None:
    error = {"error": {"message": "maximum context length is 4000 tokens", "code": None}}
    app, sizes = refusing_app(
        400,
        gzip.compress(json.dumps(error).encode()),
        {"content-type": "application/json", "content-encoding": "gzip"},
    )
    with serve_in_thread(app) as url, start_proxy(write_config(tmp_path, url, **TOO_LARGE)) as p:
        response = httpx.post(
            f"{p}/v1/chat/completions",
            json={"model": "m", "messages": long_history()},
            headers={"accept-encoding": "gzip"},
        )
    # Still refused after two retries: the client gets the error, decoded, once.
    assert response.status_code == 400
    assert response.json() == error
    assert "content-encoding" not in response.headers
    assert len(sizes) == 3
    assert sizes[0] > sizes[1] > sizes[2]
