"""Recall through the proxy: the model reads back what compaction removed, the client never knows.

With ``[store] recall = true``, every request the proxy changed goes out with the
``recall_tool_result`` tool added, on Chat Completions, Messages and Responses. When the
model's answer calls only that tool, the proxy runs it against the caller's own originals
(:func:`~ctxcompact.proxy._callers.caller_namespace`: a hash of every credential the request
carries), appends the model's turn and the results to the request and asks the upstream
again; the client receives the final answer.

The loop is bounded and never leaks a recall call to a client that did not offer the tool:

* up to ``max_recall_rounds`` rounds (``[proxy] max_recall_rounds``, :data:`MAX_RECALL_ROUNDS`
  by default) are answered by running the calls;
* one more recall answer is a *closing round*: each call is answered with a text saying the
  budget is spent (:func:`~._recall_formats.budget_spent`), and the model is asked again, with
  the same tools (the prompt prefix, and its cache, stay as they were), so it can answer or go
  on with the client's own tools;
* whatever recall calls are left in the answer the client is to get (after the closing round,
  or beside calls of the client's tools) are taken out (:meth:`RecallShape.strip`); an answer
  left with no text gets one that says so (:func:`~._recall_formats.kept_back`).

A client that offered a tool of that name itself gets the calls the proxy does not answer.

Streaming answers are relayed as they come until the first call names the recall tool; from
there the answer is held, and when it ends with only recall calls the follow-up's stream
continues the same message or response (:mod:`._recall_stream`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING, Any, TypeAlias

import httpx
from starlette.responses import JSONResponse, Response

from .._defaults import MAX_RECALL_ROUNDS
from ..store._recall import RECALL_TOOL_NAME, execute_recall, recall_found
from ._recall_formats import SHAPES, RecallShape, budget_spent, kept_back, tool_name
from ._recall_stream import ChatStream, StreamState, sse_events
from ._recall_stream_messages import MessagesStream
from ._recall_stream_responses import ResponsesStream
from ._relay import Relay

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from ..store._records import OriginalsStore
    from ._rewrite import RewriteReport

__all__ = ["MAX_RECALL_ROUNDS", "Recall", "stream_state"]

logger = logging.getLogger("ctxcompact.proxy")

Body = dict[str, Any]
_HOP = frozenset({"content-length", "content-encoding", "transfer-encoding", "connection"})
_HOP |= {"keep-alive", "trailer", "upgrade", "date", "server"}


class Recall:
    """Offers the recall tool and answers the model's recall calls for the proxy.

    Args:
        store: Where the controller keeps what it removed, per caller namespace.
        max_rounds: Recall rounds answered per client request at most; one closing round
            follows (see the module docstring).

    Example:
        >>> from ctxcompact.store import MemoryStore
        >>> body, added = Recall(MemoryStore()).offer({"messages": []}, "openai")
        >>> body["tools"][0]["function"]["name"], added
        ('recall_tool_result', True)
    """

    def __init__(self, store: OriginalsStore, *, max_rounds: int = MAX_RECALL_ROUNDS) -> None:
        if max_rounds < 0:
            raise ValueError(f"max_rounds must be 0 or more, got {max_rounds}")
        self.store = store
        self.max_rounds = max_rounds
        self.on_answered: Callable[[int, int], object] | None = None
        """Told how many calls each round answered and how many found their original (the
        proxy's metrics)."""

    def offer(self, body: Body, provider: str) -> tuple[Body, bool]:
        """``body`` with the recall tool added to its ``tools``, and whether it was added
        (``False``: the client offers a tool of that name itself)."""
        tools = body.get("tools")
        tools = list(tools) if isinstance(tools, list) else []
        if any(tool_name(t) == RECALL_TOOL_NAME for t in tools):
            return body, False
        return {**body, "tools": [*tools, SHAPES[provider].spec()]}, True

    def run(self, calls: list[tuple[str, Any]], namespace: str) -> list[tuple[str, str]]:
        """Each call's id and the text of its result (whatever the handle names: the
        executor reads it, the proxy passes it through)."""
        results = [
            (cid, execute_recall(self.store, args, namespace=namespace)) for cid, args in calls
        ]
        if self.on_answered is not None:
            found = sum(1 for _, text in results if recall_found(text))
            self.on_answered(len(results), found)
        return results

    async def answer(self, calls: list[tuple[str, Any]], namespace: str) -> list[tuple[str, str]]:
        """:meth:`run` in a worker thread: a recall reads the store and scans a whole result
        (linear time, but a result can be megabytes), and other clients' requests must not
        wait for it on the event loop."""
        return await asyncio.to_thread(self.run, calls, namespace)

    async def results(
        self, calls: list[tuple[str, Any]], namespace: str, rounds: int
    ) -> tuple[list[tuple[str, str]], bool]:
        """The results for round ``rounds + 1``, and whether it is the closing round."""
        if rounds < self.max_rounds:
            return await self.answer(calls, namespace), False
        logger.info("proxy: recall budget of %d round(s) spent; closing round", rounds)
        return [(cid, budget_spent(rounds)) for cid, _ in calls], True

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
        added = report.recall_added
        if body.get("stream") is True:
            chunks = _stream(self, upstream, resend, provider, body, namespace, added)
            return Relay(upstream, shown_url, _headers(upstream, extra), chunks)
        shape = SHAPES[provider]
        rounds, closing = 0, False
        while True:
            data, broke = await _read(upstream)
            if broke is not None:
                # What came, then the cut: the client sees the answer interrupted.
                return Relay(upstream, shown_url, _headers(upstream, extra), _cut(data, broke))
            answer = _json(data) if upstream.status_code == 200 else None
            if not isinstance(answer, dict):
                return Response(data, upstream.status_code, _headers(upstream, extra))
            calls = shape.recall_calls(answer) if not closing else None
            if calls is not None and (added or rounds < self.max_rounds):
                results, closing = await self.results(calls, namespace, rounds)
                rounds += 1
                body = shape.follow_up(body, answer, results)
                try:
                    upstream = await resend(_dumps(body))
                except httpx.HTTPError as exc:
                    return _upstream_error(exc, extra)
                continue
            if rounds:
                logger.info("proxy: answered %d recall round(s) for the client", rounds)
            if added and shape.has_recall(answer):
                logger.info("proxy: recall calls taken out of the answer to the client")
                data = _dumps(shape.strip(answer, kept_back(self.max_rounds)))
            return Response(data, upstream.status_code, _headers(upstream, extra))


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


def stream_state(provider: str, *, added: bool) -> StreamState:
    """The state for a streamed answer on ``provider``'s route (the app's provider names)."""
    if provider == "openai":
        return ChatStream(added=added)
    if provider == "anthropic":
        return MessagesStream(added=added)
    return ResponsesStream(added=added)


async def _stream(
    recall: Recall,
    first: httpx.Response,
    resend: Resend,
    provider: str,
    body: Body,
    namespace: str,
    added: bool,
) -> AsyncIterator[bytes]:
    """The client's stream: the upstream's events, held from a recall call on, and the
    follow-ups' events after them. An ``httpx.HTTPError`` (the upstream broke off or stalled)
    goes up to the :class:`~ctxcompact.proxy._relay.Relay`, which cuts the client off, after
    what was held: the client then has every byte the upstream sent (but the recall calls),
    as on the plain path."""
    upstream = first
    shape: RecallShape = SHAPES[provider]
    state = stream_state(provider, added=added)
    rounds, closing = 0, False
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
        calls = state.recall_calls() if not closing else None
        if calls is None or not (added or rounds < recall.max_rounds):
            # The final answer: what is held goes out, recall calls taken out (with a note
            # when the client would get no text at all).
            stripped = added and bool(state.recall_keys)
            note = kept_back(recall.max_rounds) if stripped and not state.others else None
            for out in state.release(note=note):
                yield out
            return
        results, closing = await recall.results(calls, namespace, rounds)
        rounds += 1
        logger.info("proxy: answering recall round %d in a stream", rounds)
        body = shape.follow_up(body, state.answer(), results)
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
