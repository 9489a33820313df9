"""Real HTTP servers on 127.0.0.1 for the proxy tests and benchmark: uvicorn in a thread.

`FakeUpstream` is a small OpenAI + Anthropic lookalike that records what it receives.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp


@contextmanager
def serve_in_thread(app: ASGIApp, **settings: Any) -> Iterator[str]:
    """Serve ``app`` on a free loopback port; yields its base URL; stops it on exit.

    ``settings`` go to ``uvicorn.Config`` (e.g. ``timeout_keep_alive``)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, **{"log_level": "warning", "lifespan": "on", **settings})
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("server did not start within 10 s")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def free_port() -> int:
    """A loopback port nothing listens on (bound then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class FakeUpstream:
    """Answers like OpenAI and Anthropic would, records every request.

    Attributes:
        status: Status code for chat answers (200, or e.g. 429 to test pass-through).
        release_last_chunk: When set, streams hold their last chunk until it is set.
        max_prompt_bytes: When set, a chat, messages or responses body larger than this
            is refused as over the context window, in the style of ``too_long``.
        too_long: How that refusal looks: ``openai`` (400 ``context_length_exceeded``
            stating ``window``), ``openai-bare`` (the code, no window stated),
            ``anthropic`` (400 "prompt is too long: N tokens > window maximum"), ``413``.
        window: The window the refusal states.
        recall_ids: While not empty and the request offers ``recall_tool_result`` (Responses:
            whole answers only), the answer calls it with the next of these ids (taken off
            the list).
        recall_limit: With ``recall_ids``, the ``limit`` (lines) each recall call asks for.
        also_call: With ``recall_ids``, the answer also calls this other tool (mixed).
        follow_up_status: When set, a request carrying a recall result gets this status.
        script: When set, every chat, messages and responses answer is these bytes, as an
            SSE stream.
    """

    received: list[Received] = field(default_factory=list)
    status: int = 200
    release_last_chunk: threading.Event | None = None
    max_prompt_bytes: int | None = None
    too_long: str = "openai"
    window: int = 8192
    recall_ids: list[str] = field(default_factory=list)
    recall_limit: int | None = None
    also_call: str | None = None
    follow_up_status: int | None = None
    script: list[bytes] | None = None

    def _scripted(self) -> Response | None:
        if self.script is None:
            return None
        chunks = list(self.script)

        async def stream() -> AsyncIterator[bytes]:
            for chunk in chunks:
                yield chunk

        return StreamingResponse(stream(), media_type="text/event-stream")

    def _recall_call(self, body: dict[str, Any]) -> list[tuple[str, str, str]] | None:
        """``(id, name, arguments JSON)`` of the calls to answer with, or None."""
        names = [(t.get("function") or t).get("name") for t in body.get("tools") or []]
        if not self.recall_ids or "recall_tool_result" not in names:
            return None
        n = len(self.received)
        target = self.recall_ids.pop(0)
        arguments: dict[str, Any] = {"tool_call_id": target}
        if self.recall_limit is not None:
            arguments["limit"] = self.recall_limit
        calls = [(f"rc_{n}", "recall_tool_result", json.dumps(arguments))]
        if self.also_call:
            calls.append((f"oc_{n}", self.also_call, "{}"))
        return calls

    def refusal(self, item: Received) -> Response | None:
        """The context-too-long answer for ``item``, or ``None`` when it fits."""
        if self.max_prompt_bytes is None or len(item.body) <= self.max_prompt_bytes:
            return None
        tokens = len(item.body) // 3
        if self.too_long == "413":
            return Response(b"request entity too large", status_code=413)
        if self.too_long == "anthropic":
            message = f"prompt is too long: {tokens} tokens > {self.window} maximum"
            error = {
                "type": "error",
                "error": {"type": "invalid_request_error", "message": message},
            }
            return JSONResponse(error, status_code=400)
        message = (
            f"This model's maximum context length is {self.window} tokens. However, your "
            f"messages resulted in {tokens} tokens. Please reduce the length of the messages."
            if self.too_long == "openai"
            else "Your input exceeds the context window of this model."
        )
        error = {
            "error": {
                "message": message,
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        }
        return JSONResponse(error, status_code=400)

    def app(self) -> Starlette:
        async def record(request: Request) -> Received:
            item = Received(
                request.method, request.url.path, dict(request.headers), await request.body()
            )
            self.received.append(item)
            return item

        async def chat(request: Request) -> Response:
            item = await record(request)
            refused = self.refusal(item) or self._scripted()
            if refused is not None:
                return refused
            if self.status != 200:
                return JSONResponse(
                    {"error": {"message": "slow down", "type": "rate_limit", "code": None}},
                    status_code=self.status,
                    headers={"retry-after": "0"},
                )
            body = item.json()
            called = '"name": "recall_tool_result"' in json.dumps(body["messages"])
            if self.follow_up_status and called:
                return JSONResponse({"error": {"message": "down"}}, self.follow_up_status)
            calls = self._recall_call(body)
            if calls is not None:
                if body.get("stream"):
                    return StreamingResponse(
                        _openai_tool_stream(calls), media_type="text/event-stream"
                    )
                return JSONResponse(_openai_tool_completion(calls))
            if body.get("stream"):
                return StreamingResponse(self._openai_stream(), media_type="text/event-stream")
            return JSONResponse(_openai_completion(len(body["messages"])))

        async def messages(request: Request) -> Response:
            item = await record(request)
            refused = self.refusal(item) or self._scripted()
            if refused is not None:
                return refused
            body = item.json()
            calls = self._recall_call(body)
            if calls is not None:
                if body.get("stream"):
                    return StreamingResponse(
                        _anthropic_tool_stream(calls), media_type="text/event-stream"
                    )
                return JSONResponse(_anthropic_tool_message(calls))
            if body.get("stream"):
                return StreamingResponse(self._anthropic_stream(), media_type="text/event-stream")
            return JSONResponse(_anthropic_message(len(body["messages"])))

        async def responses(request: Request) -> Response:
            item = await record(request)
            refused = self.refusal(item) or self._scripted()
            if refused is not None:
                return refused
            body = item.json()
            raw = body.get("input")
            n = len(raw) if isinstance(raw, list) else 1
            calls = None if body.get("stream") else self._recall_call(body)
            if (
                calls is not None
            ):  # whole answers only; streamed recall: tests.helpers.recall_upstream
                answer = _responses_answer(n)
                answer["output"] = [
                    {
                        "type": "function_call",
                        "id": f"fc_{c}",
                        "call_id": c,
                        "name": name,
                        "arguments": args,
                        "status": "completed",
                    }
                    for c, name, args in calls
                ]
                return JSONResponse(answer)
            if body.get("stream"):
                return StreamingResponse(self._responses_stream(n), media_type="text/event-stream")
            return JSONResponse(_responses_answer(n))

        async def models(request: Request) -> Response:
            await record(request)
            return JSONResponse({"object": "list", "data": [{"id": "fake-model"}]})

        return Starlette(
            routes=[
                Route("/v1/chat/completions", chat, methods=["POST"]),
                Route("/v1/messages", messages, methods=["POST"]),
                Route("/v1/responses", responses, methods=["POST"]),
                Route("/v1/models", models, methods=["GET"]),
            ]
        )

    async def _openai_stream(self) -> AsyncIterator[bytes]:
        words = ["one", " two", " three", " four"]
        for i, word in enumerate(words):
            if i == len(words) - 1 and self.release_last_chunk is not None:
                await asyncio.to_thread(self.release_last_chunk.wait, 10)
            chunk = {
                "id": "chatcmpl-1",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": "fake-model",
                "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}],
            }
            yield f"data: {json.dumps(chunk)}\n\n".encode()
        done = {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "fake-model",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        }
        yield f"data: {json.dumps(done)}\n\ndata: [DONE]\n\n".encode()

    async def _responses_stream(self, n_items: int) -> AsyncIterator[bytes]:
        started = {**_responses_answer(n_items), "status": "in_progress", "output": []}
        events: list[dict[str, Any]] = [{"type": "response.created", "response": started}]
        for word in ["red", " green", " blue"]:
            events.append(
                {
                    "type": "response.output_text.delta",
                    "item_id": "msg_1",
                    "output_index": 0,
                    "content_index": 0,
                    "delta": word,
                    "logprobs": [],
                }
            )
        events.append({"type": "response.completed", "response": _responses_answer(n_items)})
        for i, data in enumerate(events):
            data["sequence_number"] = i
            yield f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode()

    async def _anthropic_stream(self) -> AsyncIterator[bytes]:
        msg = _anthropic_message(0)
        msg["content"] = []
        events: list[tuple[str, dict[str, Any]]] = [
            ("message_start", {"type": "message_start", "message": msg}),
            (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                },
            ),
        ]
        for word in ["alpha", " beta", " gamma"]:
            events.append(
                (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": 0,
                        "delta": {"type": "text_delta", "text": word},
                    },
                )
            )
        events += [
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                    "usage": {"output_tokens": 3},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
        for name, data in events:
            yield f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


def _openai_completion(n_messages: int) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "fake-model",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": f"saw {n_messages} messages"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
    }


def _responses_answer(n_items: int) -> dict[str, Any]:
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 0,
        "model": "fake-model",
        "status": "completed",
        "output": [
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": [
                    {"type": "output_text", "text": f"saw {n_items} items", "annotations": []}
                ],
            }
        ],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": 10,
            "output_tokens": 3,
            "total_tokens": 13,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


def _anthropic_message(n_messages: int) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "fake-model",
        "content": [{"type": "text", "text": f"saw {n_messages} messages"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 3},
    }


@dataclass
class RawRequest:
    head: bytes
    body: bytes


@contextmanager
def serve_broken_stream(
    chunks: int = 2, *, then: str = "close", events: list[bytes] | None = None
) -> Iterator[tuple[str, list[RawRequest]]]:
    """An upstream that starts an SSE answer, sends ``chunks`` events, then fails.

    Plain sockets, not uvicorn: the fault is on the wire, as when a provider's server dies or
    hangs mid-answer. ``then`` is ``close`` (the connection drops in the middle of a chunked
    body), ``stall`` (it stays open and silent until the server stops) or ``silent`` (no
    answer at all, not even a status line). ``events`` replaces the default events
    (``data: {"i": N}``). Yields the base URL and every request received (head and body).
    """
    if then not in ("close", "stall", "silent"):
        raise ValueError(f"unknown fault {then!r}")
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    received: list[RawRequest] = []
    stop = threading.Event()
    default = [f'data: {{"i": {i}}}\n\n'.encode() for i in range(chunks)]
    sent = events if events is not None else default

    def answer(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(10)
            data = b""
            while b"\r\n\r\n" not in data:
                part = conn.recv(65536)
                if not part:
                    return
                data += part
            head, _, rest = data.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            while len(rest) < length:
                part = conn.recv(65536)
                if not part:
                    return
                rest += part
            received.append(RawRequest(head, rest))
            if then == "silent":
                stop.wait(30)
                return
            conn.sendall(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"transfer-encoding: chunked\r\n\r\n"
            )
            for event in sent:
                conn.sendall(f"{len(event):x}\r\n".encode() + event + b"\r\n")
                time.sleep(0.05)
            if then == "stall":
                stop.wait(30)
            # No terminating zero-length chunk: the answer is cut off.

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=answer, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}", received
    finally:
        stop.set()
        thread.join(timeout=10)
        server.close()


def _openai_tool_completion(calls: list[tuple[str, str, str]]) -> dict[str, Any]:
    answer = _openai_completion(0)
    tool_calls = [
        {"id": i, "type": "function", "function": {"name": name, "arguments": args}}
        for i, name, args in calls
    ]
    answer["choices"][0]["message"] = {
        "role": "assistant",
        "content": "Let me look again.",
        "tool_calls": tool_calls,
    }
    answer["choices"][0]["finish_reason"] = "tool_calls"
    return answer


async def _openai_tool_stream(calls: list[tuple[str, str, str]]) -> AsyncIterator[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        data = {
            "id": "chatcmpl-t",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "fake-model",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return f"data: {json.dumps(data)}\n\n".encode()

    yield chunk({"role": "assistant", "content": "Let me look again."})
    for index, (i, name, args) in enumerate(calls):
        half = len(args) // 2
        first = {"name": name, "arguments": args[:half]}
        yield chunk(
            {"tool_calls": [{"index": index, "id": i, "type": "function", "function": first}]}
        )
        yield chunk({"tool_calls": [{"index": index, "function": {"arguments": args[half:]}}]})
    yield chunk({}, "tool_calls")
    yield b"data: [DONE]\n\n"


def _anthropic_tool_message(calls: list[tuple[str, str, str]]) -> dict[str, Any]:
    answer = _anthropic_message(0)
    answer["content"] = [{"type": "text", "text": "Let me look again."}] + [
        {"type": "tool_use", "id": i, "name": name, "input": json.loads(args)}
        for i, name, args in calls
    ]
    answer["stop_reason"] = "tool_use"
    return answer


async def _anthropic_tool_stream(calls: list[tuple[str, str, str]]) -> AsyncIterator[bytes]:
    msg = _anthropic_message(0)
    msg["content"] = []
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": msg},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": "Let me look again."},
        },
        {"type": "content_block_stop", "index": 0},
    ]
    for index, (i, name, args) in enumerate(calls, start=1):
        block = {"type": "tool_use", "id": i, "name": name, "input": {}}
        half = len(args) // 2
        events += [
            {"type": "content_block_start", "index": index, "content_block": block},
            *(
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": part},
                }
                for part in (args[:half], args[half:])
            ),
            {"type": "content_block_stop", "index": index},
        ]
    events += [
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 9},
        },
        {"type": "message_stop"},
    ]
    for data in events:
        yield f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode()
