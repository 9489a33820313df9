"""Recall through the proxy: the model reads back what compaction removed, the client never knows.

With ``[store]`` and ``recall = true``, every request the proxy changed goes out with the
``recall_tool_result`` tool added. When the model's answer calls only that tool, the proxy runs
it against the caller's own originals (:func:`~ctxcompact.proxy._callers.caller_namespace`: a
hash of every credential the request carries), appends the call and its result to the request
and asks the upstream again, at most :data:`MAX_RECALL_ROUNDS` times; the client receives the
final answer. An answer that mixes the recall tool with other tools is passed through unchanged.

Streaming answers are relayed as they come until the first tool-call delta names the recall
tool; from there the answer is held, and when it ends with only recall calls the follow-up's
stream continues the same response (for Anthropic, its ``message_start`` is left out and its
content-block indices continue the first answer's).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING, Any, TypeAlias

import httpx
from starlette.responses import JSONResponse, Response

from .._contract.tools import ERROR_PREFIX
from ..store._recall import (
    RECALL_TOOL_NAME,
    execute_recall,
    recall_tool_spec_anthropic,
    recall_tool_spec_openai,
)
from ._recall_stream import StreamState, sse_events
from ._relay import Relay

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from ..store._records import OriginalsStore
    from ._rewrite import RewriteReport

__all__ = ["MAX_RECALL_ROUNDS", "Recall"]

logger = logging.getLogger("ctxcompact.proxy")

MAX_RECALL_ROUNDS = 3
"""Recall rounds per client request at most; past it the answer goes to the client as is."""

Body = dict[str, Any]
_HOP = frozenset({"content-length", "content-encoding", "transfer-encoding", "connection"})
_HOP |= {"keep-alive", "trailer", "upgrade", "date", "server"}


class Recall:
    """Offers the recall tool and answers the model's recall calls for the proxy.

    Args:
        store: Where the controller keeps what it removed, per caller namespace.
        max_rounds: Recall rounds per client request at most.

    Example:
        >>> from ctxcompact.store import MemoryStore
        >>> body = Recall(MemoryStore()).offer({"messages": []}, "openai")
        >>> body["tools"][0]["function"]["name"]
        'recall_tool_result'
    """

    def __init__(self, store: OriginalsStore, *, max_rounds: int = MAX_RECALL_ROUNDS) -> None:
        self.store = store
        self.max_rounds = max_rounds
        self.on_answered: Callable[[int, int], object] | None = None
        """Told how many calls each round answered and how many found their original (the
        proxy's metrics)."""

    def offer(self, body: Body, provider: str) -> Body:
        """``body`` with the recall tool added to its ``tools`` (once)."""
        tools = body.get("tools")
        tools = list(tools) if isinstance(tools, list) else []
        if any(_tool_name(t) == RECALL_TOOL_NAME for t in tools):
            return body
        spec = recall_tool_spec_openai() if provider == "openai" else recall_tool_spec_anthropic()
        return {**body, "tools": [*tools, spec]}

    def run(self, calls: list[tuple[str, Any]], namespace: str) -> list[tuple[str, str]]:
        """Each call's id and the text of its result."""
        results = [
            (cid, execute_recall(self.store, args, namespace=namespace)) for cid, args in calls
        ]
        if self.on_answered is not None:
            found = sum(1 for _, text in results if not text.startswith(ERROR_PREFIX))
            self.on_answered(len(results), found)
        return results

    async def answer(self, calls: list[tuple[str, Any]], namespace: str) -> list[tuple[str, str]]:
        """:meth:`run` in a worker thread: a recall reads the store and scans a whole result
        (linear time, but a result can be megabytes), and other clients' requests must not
        wait for it on the event loop."""
        return await asyncio.to_thread(self.run, calls, namespace)

    async def respond(
        self,
        upstream: httpx.Response,
        resend: Resend,
        provider: str,
        content: bytes,
        report: RewriteReport,
        shown_url: str,
    ) -> Response:
        """The final answer to the client, from the upstream's answer to ``content``.

        The app sent ``content`` as it sends any request (a request it cannot send is a 400,
        no answer a 504, no upstream a 502); here the answer is read, recall calls are
        answered with ``resend`` (a follow-up body -> the upstream's answer, not read yet), and
        the final answer is returned. An upstream that breaks off or stalls mid-answer cuts
        the client off (:class:`~ctxcompact.proxy._relay.Relay`), as on the plain path.
        """
        extra = {"x-ctxcompact": report.header()}
        namespace = report.recall_namespace
        if namespace is None:  # the tool did not go out: relayed as on the plain path
            return Relay(upstream, shown_url, _headers(upstream, extra), upstream.aiter_bytes())
        body: Body = json.loads(content)
        if body.get("stream") is True:
            chunks = _stream(self, upstream, resend, provider, body, namespace)
            return Relay(upstream, shown_url, _headers(upstream, extra), chunks)
        rounds = 0
        while True:
            data, broke = await _read(upstream)
            if broke is not None:
                # What came, then the cut: the client sees the answer interrupted.
                return Relay(upstream, shown_url, _headers(upstream, extra), _cut(data, broke))
            answer = _json(data) if upstream.status_code == 200 else None
            calls = recall_calls(provider, answer) if rounds < self.max_rounds else None
            if calls is None or not isinstance(answer, dict):
                if rounds:
                    logger.info("proxy: answered %d recall round(s) for the client", rounds)
                return Response(data, upstream.status_code, _headers(upstream, extra))
            rounds += 1
            body = follow_up(provider, body, answer, await self.answer(calls, namespace))
            try:
                upstream = await resend(_dumps(body))
            except httpx.HTTPError as exc:
                return _upstream_error(exc, extra)


Resend: TypeAlias = "Callable[[bytes], Awaitable[httpx.Response]]"
"""Sends a follow-up request body upstream; its answer comes back streamed, not read yet."""


async def _read(upstream: httpx.Response) -> tuple[bytes, httpx.HTTPError | None]:
    """The body (decoded) and, when the upstream broke off or stalled, the error."""
    chunks: list[bytes] = []
    try:
        async for chunk in upstream.aiter_bytes():
            chunks.append(chunk)
    except httpx.HTTPError as exc:
        return b"".join(chunks), exc
    finally:
        await upstream.aclose()
    return b"".join(chunks), None


async def _cut(data: bytes, error: httpx.HTTPError) -> AsyncIterator[bytes]:
    if data:
        yield data
    raise error


def _json(data: bytes) -> object:
    try:
        return json.loads(data)
    except (ValueError, RecursionError):  # not JSON (an error page), or absurdly deep
        return None


def _dumps(body: Body) -> bytes:
    # A recalled original may hold a lone surrogate (the client sent one, the store kept it
    # exactly): it can only be inside a JSON string, where backslashreplace writes exactly
    # its \udXXX escape, as ._json.encode_body does for rewritten bodies.
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    return text.encode("utf-8", "backslashreplace")


def _headers(upstream: httpx.Response, extra: dict[str, str]) -> dict[str, str]:
    kept = {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP}
    return {**kept, **extra}


def _upstream_error(exc: httpx.HTTPError, extra: dict[str, str]) -> Response:
    status = 504 if isinstance(exc, httpx.TimeoutException) else 502
    logger.warning("proxy: upstream failed during recall: %s", type(exc).__name__)
    message = f"upstream failed during recall: {type(exc).__name__}"
    return JSONResponse(
        {"error": {"type": "ctxcompact_proxy_error", "message": message}}, status, extra
    )


def _tool_name(tool: object) -> object:
    if not isinstance(tool, dict):
        return None
    function = tool.get("function")
    return function.get("name") if isinstance(function, dict) else tool.get("name")


def recall_calls(provider: str, answer: object) -> list[tuple[str, Any]] | None:
    """``(id, arguments)`` of each call when ``answer`` calls only the recall tool, else None."""
    if not isinstance(answer, dict):
        return None
    calls: list[tuple[object, Any, object]] = []
    if provider == "openai":
        choices = answer.get("choices")
        if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
            return None
        message = choices[0].get("message")
        raw = message.get("tool_calls") if isinstance(message, dict) else None
        for call in raw if isinstance(raw, list) else []:
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict):
                return None
            calls.append((call.get("id"), function.get("arguments"), function.get("name")))
    else:
        blocks = answer.get("content")
        for block in blocks if isinstance(blocks, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_use":
                calls.append((block.get("id"), block.get("input"), block.get("name")))
    if not calls or any(name != RECALL_TOOL_NAME or not isinstance(i, str) for i, _, name in calls):
        return None
    return [(str(i), args) for i, args, _ in calls]


def follow_up(provider: str, body: Body, answer: Body, results: list[tuple[str, str]]) -> Body:
    """``body`` with the model's recall answer and the recall results appended."""
    messages = list(body.get("messages") or [])
    if provider == "openai":
        message = answer["choices"][0]["message"]
        assistant = {"role": "assistant", "content": message.get("content")}
        assistant["tool_calls"] = message["tool_calls"]
        messages.append(assistant)
        messages += [{"role": "tool", "tool_call_id": i, "content": text} for i, text in results]
    else:
        messages.append({"role": "assistant", "content": answer["content"]})
        blocks = [{"type": "tool_result", "tool_use_id": i, "content": t} for i, t in results]
        messages.append({"role": "user", "content": blocks})
    return {**body, "messages": messages}


async def _stream(
    recall: Recall,
    first: httpx.Response,
    resend: Resend,
    provider: str,
    body: Body,
    namespace: str,
) -> AsyncIterator[bytes]:
    """The client's stream: the upstream's events, held from a recall call on, and the
    follow-ups' events after them. An ``httpx.HTTPError`` (the upstream broke off or stalled)
    goes up to the :class:`~ctxcompact.proxy._relay.Relay`, which cuts the client off, after
    what was held: the client then has every byte the upstream sent, as on the plain path."""
    upstream = first
    state = StreamState(provider)
    rounds = 0
    while True:
        try:
            if upstream.status_code != 200:
                async for raw in upstream.aiter_bytes():
                    yield raw
                return
            async for event in sse_events(upstream.aiter_text()):
                for out in state.feed(event):
                    yield out
        except httpx.HTTPError:
            for out in state.release():
                yield out
            raise
        finally:
            await upstream.aclose()
        calls = state.recall_calls() if rounds < recall.max_rounds else None
        if calls is None:
            for out in state.release():
                yield out
            return
        rounds += 1
        logger.info("proxy: answering recall round %d in a stream", rounds)
        results = await recall.answer(calls, namespace)
        body = follow_up(provider, body, state.answer(), results)
        state = state.next_round()
        try:
            upstream = await resend(_dumps(body))
        except httpx.HTTPError as exc:
            logger.warning("proxy: upstream failed during recall: %s", type(exc).__name__)
            yield state.error_event(f"upstream failed during recall: {type(exc).__name__}")
            return
        if upstream.status_code != 200:
            await upstream.aread()
            await upstream.aclose()
            yield state.error_event(f"upstream answered {upstream.status_code} during recall")
            return
