"""Upstream faults reach the client the same way on the plain path and on the recall path.

Real HTTP on 127.0.0.1. Each fault runs through the plain path (no store: the proxy relays the
upstream's answer as it comes) and the recall path (``[store] recall = true`` and a request the
proxy changed, so it goes out with ``recall_tool_result`` and the proxy reads the answer for
recall calls), streamed and not. Cut off mid-answer: the client gets what came, then an
interrupted response (no clean end, no ``[DONE]``); no answer at all: 504; unreachable: 502;
chunks the proxy cannot read: relayed byte for byte; a header it cannot forward: 400. Never a
traceback.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.helpers.proxy_servers import (
    FakeUpstream,
    free_port,
    serve_broken_stream,
    serve_in_thread,
)
from tests.test_proxy import anthropic_history, openai_history, start_proxy, write_config
from tests.test_proxy_responses import responses_items

PATHS = ["plain", "recall"]
ROUTES = {
    "openai": "/v1/chat/completions",
    "anthropic": "/v1/messages",
    "responses": "/v1/responses",
}
stream_ids = pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
both_paths = pytest.mark.parametrize("path", PATHS)


@dataclass(frozen=True)
class Outcome:
    """What the client saw: the status, the body bytes it got, what reading it raised."""

    status: int
    body: bytes
    error: str | None


def config(tmp_path: Path, url: str, path: str) -> Path:
    # The line right after write_config's [proxy] table belongs to it: stalls end in 1 s.
    extra = "timeout = 1.0\n"
    if path == "recall":
        extra += f'[store]\npath = "{tmp_path / "originals.db"}"\nrecall = true\n'
    # The plain path: write_config's [store] recall = false (recall is on by default).
    return write_config(tmp_path, url, extra=extra)


def request(provider: str, stream: bool) -> dict[str, Any]:
    """A request over the trigger: compacted, and with recall on it offers the recall tool."""
    if provider == "responses":
        items = responses_items(turns=4, output_chars=300)
        return {"model": "m", "max_output_tokens": 100, "input": items, "stream": stream}
    if provider == "openai":
        messages = openai_history(turns=4, output_chars=300)
    else:
        messages = anthropic_history(turns=4, output_chars=300)
    return {"model": "m", "max_tokens": 100, "messages": messages, "stream": stream}


def fetch(
    proxy: str, provider: str, body: dict[str, Any], headers: dict[str, Any] | None = None
) -> Outcome:
    pieces: list[bytes] = []
    url = f"{proxy}{ROUTES[provider]}"
    with httpx.stream("POST", url, json=body, headers=headers, timeout=30) as r:
        try:
            pieces.extend(r.iter_bytes())
        except httpx.TransportError as exc:
            return Outcome(r.status_code, b"".join(pieces), type(exc).__name__)
    return Outcome(r.status_code, b"".join(pieces), None)


def offers_recall(body: bytes) -> bool:
    tools = json.loads(body).get("tools") or []
    return any((t.get("function") or t).get("name") == "recall_tool_result" for t in tools)


@pytest.fixture
def no_traceback(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> Iterator[pytest.LogCaptureFixture]:
    caplog.set_level(logging.INFO)
    yield caplog
    assert "Traceback" not in caplog.text
    assert not [r for r in caplog.records if r.exc_info]
    assert "Traceback" not in capfd.readouterr().err


@stream_ids
@both_paths
@pytest.mark.parametrize("fault", ["close", "stall"])
def test_an_upstream_that_breaks_off_mid_answer_cuts_the_client_off(
    tmp_path: Path, no_traceback: pytest.LogCaptureFixture, fault: str, path: str, stream: bool
) -> None:
    with (
        serve_broken_stream(chunks=2, then=fault) as (url, received),
        start_proxy(config(tmp_path, url, path)) as proxy,
    ):
        outcome = fetch(proxy, "openai", request("openai", stream))
    assert outcome == Outcome(200, b'data: {"i": 0}\n\ndata: {"i": 1}\n\n', "RemoteProtocolError")
    assert len(received) == 1
    assert offers_recall(received[0].body) == (path == "recall")
    broke = [r for r in no_traceback.records if "broke off" in r.getMessage()]
    assert [r.levelno for r in broke] == [logging.WARNING]
    error = "RemoteProtocolError" if fault == "close" else "ReadTimeout"
    assert error in broke[0].getMessage()


@both_paths
def test_the_openai_sdk_sees_a_stream_cut_off_as_an_error(
    tmp_path: Path, no_traceback: pytest.LogCaptureFixture, path: str
) -> None:
    def chunk(text: str) -> bytes:
        data = {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "m",
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
        }
        return f"data: {json.dumps(data)}\n\n".encode()

    events = [chunk("hello"), chunk(" from ")]
    text: list[str] = []
    with (
        serve_broken_stream(events=events) as (url, _),
        start_proxy(config(tmp_path, url, path)) as proxy,
        openai.OpenAI(base_url=f"{proxy}/v1", api_key="sk-x", max_retries=0) as client,
    ):
        stream = client.chat.completions.create(
            model="m", messages=openai_history(4, 300), max_tokens=100, stream=True
        )
        pieces = (p.choices[0].delta.content or "" for p in stream)
        with pytest.raises((httpx.TransportError, openai.APIError)):
            text.extend(pieces)
    assert "".join(text) == "hello from "


@stream_ids
@both_paths
@pytest.mark.parametrize("provider", sorted(ROUTES))
def test_an_upstream_that_never_answers_is_a_504(
    tmp_path: Path,
    no_traceback: pytest.LogCaptureFixture,
    provider: str,
    path: str,
    stream: bool,
) -> None:
    with (
        serve_broken_stream(then="silent") as (url, received),
        start_proxy(config(tmp_path, url, path)) as proxy,
    ):
        outcome = fetch(proxy, provider, request(provider, stream))
    assert (outcome.status, outcome.error) == (504, None)
    message = json.loads(outcome.body)["error"]["message"]
    assert message.startswith(f"upstream http://127.0.0.1:{url.rsplit(':', 1)[1]}/")
    assert message.endswith("timed out: ReadTimeout")
    assert offers_recall(received[0].body) == (path == "recall")


@stream_ids
@both_paths
def test_an_unreachable_upstream_is_a_502(
    tmp_path: Path, no_traceback: pytest.LogCaptureFixture, path: str, stream: bool
) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with start_proxy(config(tmp_path, url, path)) as proxy:
        outcome = fetch(proxy, "openai", request("openai", stream))
    assert (outcome.status, outcome.error) == (502, None)
    message = json.loads(outcome.body)["error"]["message"]
    assert message == f"upstream unreachable: ConnectError at {url}/v1/chat/completions"


def _sse(event: str | None, data: object) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data)
    return (f"event: {event}\n" if event else "").encode() + f"data: {text}\n\n".encode()


def _delta(delta: object) -> bytes:
    return _sse(None, {"choices": [{"index": 0, "delta": delta}]})


RECALL_CALL = {
    "tool_calls": [
        {"index": 0, "id": "c1", "function": {"name": "recall_tool_result", "arguments": ""}}
    ]
}
MALFORMED: dict[str, tuple[str, list[bytes]]] = {
    "openai-shapes": (
        "openai",
        [
            _delta({"tool_calls": "x"}),
            _delta({"tool_calls": [1, None]}),
            _delta({"tool_calls": [{"index": "a", "function": "f"}]}),
            _delta({"tool_calls": [{"index": 0, "function": {"name": 5, "arguments": 7}}]}),
            _sse(None, {"choices": 5}),
            _sse(None, {"choices": [5, {"delta": []}]}),
            _delta({"content": "hello"}),
            _sse(None, "[DONE]"),
        ],
    ),
    # A recall call is being held when the unreadable chunk comes.
    "openai-while-held": (
        "openai",
        [
            _delta(RECALL_CALL),
            _delta({"tool_calls": [{"index": 0, "function": {"arguments": 7}}]}),
            _delta({"tool_calls": [{"index": 0, "function": {"arguments": '{"tool_call_id"'}}]}),
            _sse(None, "[DONE]"),
        ],
    ),
    # Responses: a recall call is being held when an item comes with a non-integer index.
    "responses-while-held": (
        "responses",
        [
            _sse(
                "response.created",
                {"type": "response.created", "response": {"id": "r", "output": []}},
            ),
            _sse(
                "response.output_item.added",
                {
                    "type": "response.output_item.added",
                    "output_index": 0,
                    "item": {"type": "function_call", "call_id": "c", "name": "recall_tool_result"},
                },
            ),
            _sse(
                "response.output_item.done",
                {"type": "response.output_item.done", "output_index": "x", "item": {}},
            ),
            _sse(
                "response.completed",
                {"type": "response.completed", "response": {"id": "r", "output": []}},
            ),
        ],
    ),
    "anthropic-shapes": (
        "anthropic",
        [
            _sse("message_start", {"type": "message_start", "message": {}}),
            _sse(
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": [1]},
            ),
            _sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": "x"}),
            _sse(
                "content_block_start",
                {"type": "content_block_start", "index": 1, "content_block": {"type": "text"}},
            ),
            _sse(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 1,
                    "delta": {"type": "text_delta", "text": 5},
                },
            ),
            _sse(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 2,
                    "content_block": {"type": "tool_use", "id": "t", "name": "recall_tool_result"},
                },
            ),
            _sse(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 2,
                    "delta": {"type": "input_json_delta", "partial_json": 5},
                },
            ),
            _sse("message_stop", {"type": "message_stop"}),
        ],
    ),
}


@stream_ids
@both_paths
@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_chunks_the_proxy_cannot_read_are_relayed_byte_for_byte(
    tmp_path: Path, no_traceback: pytest.LogCaptureFixture, case: str, path: str, stream: bool
) -> None:
    provider, script = MALFORMED[case]
    fake = FakeUpstream(script=script)
    with serve_in_thread(fake.app()) as url, start_proxy(config(tmp_path, url, path)) as proxy:
        outcome = fetch(proxy, provider, request(provider, stream))
    assert outcome == Outcome(200, b"".join(script), None)
    assert len(fake.received) == 1  # no recall answered from what could not be read
    assert offers_recall(fake.received[0].body) == (path == "recall")


@stream_ids
@both_paths
def test_a_header_value_that_cannot_be_forwarded_is_the_same_400(
    tmp_path: Path, no_traceback: pytest.LogCaptureFixture, path: str, stream: bool
) -> None:
    fake = FakeUpstream()
    with serve_in_thread(fake.app()) as url, start_proxy(config(tmp_path, url, path)) as proxy:
        outcome = fetch(proxy, "openai", request("openai", stream), {"x-odd": b"caf\xe9"})
    assert (outcome.status, outcome.error) == (400, None)
    message = json.loads(outcome.body)["error"]["message"]
    assert message == "request path, query or headers cannot be forwarded"
    assert fake.received == []
