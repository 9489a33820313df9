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

Every follow-up stays inside the window the request was compacted for: the rewrite reports
the room left (:attr:`~._rewrite.RewriteReport.recall_room`: the window less the request's
tokens and its answer budget), each round's results are cut to what is left (the recall
window stops early and says where to go on, as for a long original), and a round that finds
less than :data:`MIN_RECALL_ROOM` tokens left is a closing round that says the window is full
(:func:`~._recall_formats.no_room`). Without that, a model paging through long originals into
a nearly full window made the upstream refuse a follow-up the client never asked for.

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
from .._history.messages import Message
from .._tokens.counters import TokenCounter, counts_text
from ..store._recall import MAX_RECALL_CHARS, RECALL_TOOL_NAME, execute_recall, recall_found
from ._recall_formats import SHAPES, RecallShape, budget_spent, kept_back, no_room, tool_name
from ._recall_stream import ChatStream, StreamState, sse_events
from ._recall_stream_messages import MessagesStream
from ._recall_stream_responses import ResponsesStream
from ._relay import Relay

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from ..store._records import OriginalsStore
    from ._rewrite import RewriteReport

__all__ = ["MAX_RECALL_ROUNDS", "MIN_RECALL_ROOM", "Recall", "stream_state", "text_tokens"]

logger = logging.getLogger("ctxcompact.proxy")

Body = dict[str, Any]
Results = list[tuple[str, str]]

MIN_RECALL_ROOM = 256
"""Tokens a recall round needs left in the window to be run: below it, a page would hold a
few lines at most, and the round closes the loop instead (the model answers with what it
has). About a screenful of numbered lines."""

_CALL_TOKENS = 24
"""Tokens a recall call and its result cost beyond their texts, per call (the call's id and
name, the result's wrapping): an allowance, since the wire formats differ."""

_FIT_TRIES = 4
"""Times a round's results are cut down to fit what is left before the round gives up."""

_MIN_CHARS = 500
"""A page cut below this many characters of the original is not worth a round: the round
closes the loop instead."""

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

    def __init__(
        self,
        store: OriginalsStore,
        *,
        max_rounds: int = MAX_RECALL_ROUNDS,
        count: Callable[[str], int] | None = None,
    ) -> None:
        if max_rounds < 0:
            raise ValueError(f"max_rounds must be 0 or more, got {max_rounds}")
        self.store = store
        self.max_rounds = max_rounds
        self.count = count
        """Tokens of a text, to fit each round into the room its request has left; ``None``:
        results are not fitted."""
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

    def run(
        self, calls: list[tuple[str, Any]], namespace: str, max_chars: int = MAX_RECALL_CHARS
    ) -> Results:
        """Each call's id and the text of its result (whatever the handle names: the
        executor reads it, the proxy passes it through), at most ``max_chars`` characters of
        the original each."""
        return [
            (cid, execute_recall(self.store, args, namespace=namespace, max_chars=max_chars))
            for cid, args in calls
        ]

    async def answer(
        self, calls: list[tuple[str, Any]], namespace: str, room: int | None = None
    ) -> Results | None:
        """:meth:`run` in a worker thread (a recall reads the store and scans a whole result:
        linear time, but a result can be megabytes, and other clients' requests must not wait
        for it on the event loop), cut down until the results fit in ``room`` tokens;
        ``None`` when they cannot (``room`` is too small for a useful page)."""
        chars = MAX_RECALL_CHARS
        for _ in range(_FIT_TRIES):
            results = await asyncio.to_thread(self.run, calls, namespace, chars)
            if room is None or self.count is None:
                break
            used = sum(self.count(text) for _, text in results)
            if used <= room:
                break
            # The texts are mostly the original's characters: cut them in proportion, a
            # little more than that (a line is shown whole or cut, so a cut is not exact).
            chars = int(min(chars, sum(len(t) for _, t in results) / len(results)) * room / used)
            chars = chars * 9 // 10
            if chars < _MIN_CHARS:
                return None
        else:
            return None
        if self.on_answered is not None:
            found = sum(1 for _, text in results if recall_found(text))
            self.on_answered(len(results), found)
        return results

    async def results(
        self, calls: list[tuple[str, Any]], namespace: str, rounds: int, room: int | None = None
    ) -> tuple[Results, bool, int]:
        """The results for round ``rounds + 1``, whether it is the closing round, and the
        tokens the round adds to the request (0 when ``room`` is ``None``: not fitted).

        ``room`` is what the window has left for the round: the calls and their results
        must fit in it (:attr:`~._rewrite.RewriteReport.recall_room`)."""
        if rounds >= self.max_rounds:
            logger.info("proxy: recall budget of %d round(s) spent; closing round", rounds)
            return [(cid, budget_spent(rounds)) for cid, _ in calls], True, 0
        if room is None or self.count is None:
            answered = await self.answer(calls, namespace)
            assert answered is not None  # not fitted: never None
            return answered, False, 0
        count = self.count
        calls_cost = sum(_CALL_TOKENS + count(_arguments(args)) for _, args in calls)
        left = room - calls_cost
        answered = await self.answer(calls, namespace, left) if left >= MIN_RECALL_ROOM else None
        if answered is None:
            logger.info("proxy: %d token(s) left in the window; closing recall round", room)
            closing = [(cid, no_room(max(room, 0))) for cid, _ in calls]
            return closing, True, calls_cost + sum(count(t) for _, t in closing)
        return answered, False, calls_cost + sum(count(t) for _, t in answered)

    def room(self, report: RewriteReport) -> int | None:
        """Tokens the recall rounds of ``report``'s request may add: its room in the window
        less the recall tool's own description; ``None`` when no window applies."""
        if report.recall_room is None or self.count is None:
            return None
        return report.recall_room - self.count(json.dumps(SHAPES["openai"].spec()))

    def spend(self, room: int | None, answer: Body) -> int | None:
        """``room`` less the model's turn that goes into the follow-up, counted as the
        answer's JSON text (more than the turn: ids and usage are in it, so it errs on the
        safe side)."""
        if room is None or self.count is None:
            return room
        return room - self.count(json.dumps(answer, ensure_ascii=False))

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
            chunks = _stream(
                self, upstream, resend, provider, body, namespace, added, self.room(report)
            )
            return Relay(upstream, shown_url, _headers(upstream, extra), chunks)
        shape = SHAPES[provider]
        rounds, closing = 0, False
        room = self.room(report)
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
                room = self.spend(room, answer)
                results, closing, used = await self.results(calls, namespace, rounds, room)
                rounds += 1
                room = None if room is None else room - used
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


def text_tokens(counter: TokenCounter) -> Callable[[str], int]:
    """``counter``'s count of a text: its own ``count_text`` when it promises one, else the
    count of a user message holding the text (a little more: the message's overhead)."""
    if counts_text(counter):
        return counter.count_text
    return lambda text: counter.count_message(Message.user(text))


def _arguments(arguments: Any) -> str:
    """A call's arguments as text (the model wrote JSON text, or the route gave an object)."""
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


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
    room: int | None,
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
        answer = state.answer()
        room = recall.spend(room, answer)
        results, closing, used = await recall.results(calls, namespace, rounds, room)
        rounds += 1
        room = None if room is None else room - used
        logger.info("proxy: answering recall round %d in a stream", rounds)
        body = shape.follow_up(body, answer, results)
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
