"""A scripted HTTP server for the SDK adapters' tests: an ``httpx2.MockTransport`` that records.

The SDKs (openai 3.x, anthropic 2.x) send through ``httpx2``; the adapters take an
``httpx2.AsyncClient`` and the SDK does everything else for real: request building, retries,
``Retry-After``, error classes, response parsing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx2

__all__ = ["FAKE_KEY", "Wire", "anthropic_reply", "error_body", "openai_reply"]

FAKE_KEY = "sk-LEAKCHECK-0123456789abcdef"
"""A recognizable key: tests assert it appears in no message, repr or log."""

Scripted = httpx2.Response | Exception | Callable[[httpx2.Request], httpx2.Response]


class Wire:
    """Answers requests with scripted responses, in order, and records each request.

    Example:
        >>> wire = Wire(httpx2.Response(200, json={}))
        >>> client = wire.client()
    """

    def __init__(self, *script: Scripted) -> None:
        self.script = list(script)
        self.requests: list[httpx2.Request] = []
        self.times: list[float] = []

    @property
    def bodies(self) -> list[dict[str, Any]]:
        """The decoded JSON bodies of the requests received."""
        return [json.loads(r.content) for r in self.requests]

    @property
    def body(self) -> dict[str, Any]:
        """The body of the only request."""
        assert len(self.requests) == 1, f"expected one request, got {len(self.requests)}"
        return self.bodies[0]

    def handler(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        self.times.append(time.monotonic())
        if not self.script:
            raise AssertionError(f"unexpected request #{len(self.requests)} to {request.url}")
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        if isinstance(step, httpx2.Response):
            return step
        return step(request)

    def client(self) -> httpx2.AsyncClient:
        """An HTTP client whose every request goes to :meth:`handler`."""
        return httpx2.AsyncClient(transport=httpx2.MockTransport(self.handler))


def openai_reply(
    content: str | None = "ok",
    *,
    tool_calls: list[dict[str, Any]] | None = None,
    finish_reason: str | None = "stop",
    usage: Mapping[str, Any] | None = None,
    extra_message: Mapping[str, Any] | None = None,
) -> httpx2.Response:
    """A 200 Chat Completions response with one choice."""
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    message.update(extra_message or {})
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}
        ],
    }
    if usage is not None:
        body["usage"] = dict(usage)
    return httpx2.Response(200, json=body)


def anthropic_reply(
    content: list[dict[str, Any]] | None = None,
    *,
    stop_reason: str | None = "end_turn",
    usage: Mapping[str, Any] | None = None,
) -> httpx2.Response:
    """A 200 Messages response."""
    body: dict[str, Any] = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": content if content is not None else [{"type": "text", "text": "ok"}],
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": dict(usage) if usage is not None else {"input_tokens": 1, "output_tokens": 1},
    }
    return httpx2.Response(200, json=body)


def error_body(
    status: int,
    message: str,
    *,
    code: str | None = None,
    kind: str = "invalid_request_error",
    headers: Mapping[str, str] | None = None,
    anthropic: bool = False,
) -> httpx2.Response:
    """An error response in the provider's shape."""
    if anthropic:
        body: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": message}}
    else:
        body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return httpx2.Response(status, json=body, headers=dict(headers or {}))
