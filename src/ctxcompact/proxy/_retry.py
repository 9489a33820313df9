"""Compact-and-retry: when the upstream says the prompt is over its window, cut and resend.

Token estimates are estimates and configured windows can be wrong (a self-hosted model served
with a smaller context, a window copied from the wrong model), so a request the proxy let
through may still be refused as too long. The refusal comes before any answer byte, streaming
or not: the proxy reads the status, and for a 400 or 413 at most :data:`ERROR_BODY_LIMIT`
bytes of the error, before it starts its own response. When it is a context-too-long error
(:func:`is_context_error`), the request as it was sent is cut with a
:class:`~ctxcompact.strategies.ContextGuard` to :data:`FRACTIONS` of the window, in turn,
and sent again: at most twice. The window is the one the error states
(:func:`~ctxcompact.parse_context_error`), else the model table's
(:func:`~ctxcompact.context_window` with ``[models]``), else ``[compaction]
max_context_size``. Whatever the last answer is, the client gets it, with ``retried=N;
window=W`` in the ``x-ctxcompact`` header, ``action=compacted`` and the counts of the request
finally sent. Only sizes and statuses are logged.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx

from .._contract.protocols import CompactionContext
from .._controller.problems import Problem
from .._history.validate import check_history
from .._tokens.windows import parse_context_error, says_context_too_long
from ..strategies._guard import ContextGuard
from ._json import BodyError, parse_body
from ._rewrite import RewriteReport, codec, dumps, max_output_tokens, over_window

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from .._config.config import Config
    from .._tokens.counters import TokenCounter
    from ._rewrite import Body

__all__ = [
    "ERROR_BODY_LIMIT",
    "FRACTIONS",
    "Answer",
    "ContextRetry",
    "is_context_error",
]

logger = logging.getLogger("ctxcompact.proxy")

ERROR_BODY_LIMIT = 64 * 1024
"""Bytes of an upstream 400/413 body read to tell a context-too-long error (decoded)."""

FRACTIONS = (0.8, 0.6)
"""Shares of the window the request is cut to before the first and the second retry."""


def is_context_error(status: int, text: str) -> bool:
    """Whether an upstream answer says the prompt is over the model's window.

    Any 413; a 400 whose body says so (:func:`~ctxcompact._tokens.windows.says_context_too_long`:
    OpenAI's ``context_length_exceeded`` code, Anthropic's "prompt is too long", a wording
    :func:`~ctxcompact.parse_context_error` reads a window from...).

    Example:
        >>> is_context_error(400, '{"error": {"code": "context_length_exceeded"}}')
        True
        >>> is_context_error(400, '{"error": {"message": "bad tool schema"}}')
        False
    """
    if status == 413:
        return True
    if status != 400:
        return False
    return says_context_too_long(text)


@dataclass(frozen=True, slots=True)
class Answer:
    """The upstream answer to relay, and how.

    Attributes:
        upstream: The response whose status and headers the client gets.
        report: The report for the ``x-ctxcompact`` header (``retried``, ``window`` set when
            the request was sent again).
        chunks: When the body was (partly) read to inspect it: the decoded body to relay, in
            place of the raw stream (so ``content-encoding`` must not be relayed).
    """

    upstream: httpx.Response
    report: RewriteReport | None
    chunks: AsyncIterator[bytes] | None = None


class ContextRetry:
    """Decides whether and how to resend a request refused as too long.

    Args:
        config: For ``[models]`` and ``[compaction] max_context_size``.
        counter: The proxy's token counter (what the guard budgets with).

    Example:
        >>> from ctxcompact import Config, HeuristicTokenCounter
        >>> retry = ContextRetry(Config(), HeuristicTokenCounter())
        >>> retry.window("maximum context length is 8192 tokens", {"model": "gpt-4o"})
        8192
        >>> retry.window("too long", {"model": "gpt-4o"})
        128000
    """

    def __init__(self, config: Config, counter: TokenCounter) -> None:
        self.config = config
        self.counter = counter

    def window(self, error_text: str, body: Body) -> int | None:
        """The window to cut to: the error's, else the model's, else the configured one."""
        return (
            parse_context_error(error_text)
            or self.config.model_window(body.get("model"))
            or self.config.compaction.max_context_size
        )

    async def answer(
        self,
        upstream: httpx.Response,
        provider: str,
        sent: bytes,
        report: RewriteReport,
        send: Callable[[bytes], Awaitable[httpx.Response]],
    ) -> Answer:
        """The answer to relay for a request of ``provider`` sent as ``sent``.

        Anything but a 400 or 413 is relayed as it comes, unread. ``send`` sends a new body
        with the original request's method, URL and headers.
        """
        if upstream.status_code not in (400, 413):
            return Answer(upstream, report)
        head, rest = await _read_bounded(upstream)
        text = head.decode("utf-8", "replace")
        if (rest is not None and upstream.status_code != 413) or not is_context_error(
            upstream.status_code, text
        ):
            return Answer(upstream, report, _replay(head, rest))
        try:
            body = parse_body(sent)
        except BodyError:
            return Answer(upstream, report, _replay(head, rest))
        window = self.window(text, body)
        if window is None:
            logger.info("upstream said the prompt is too long; no window known to cut to")
            return Answer(upstream, report, _replay(head, rest))
        retried = 0
        for fraction in FRACTIONS:
            cut = await self._cut(provider, body, int(window * fraction))
            if cut is None:
                continue
            new_body, tokens, messages, received = cut
            logger.info(
                "upstream said the prompt is too long (%d); retrying at %d%% of a %d-token "
                "window: %d tokens",
                upstream.status_code,
                round(fraction * 100),
                window,
                tokens,
            )
            try:
                again = await send(dumps(new_body))
            except httpx.HTTPError as exc:
                logger.warning("retry not sent: %s", type(exc).__name__)
                break
            await upstream.aclose()
            retried += 1
            # What was finally sent is a cut of what came: ``compacted``, with its counts
            # (the first attempt's action said what went out first, no longer true).
            report = dataclasses.replace(
                report,
                action="compacted",
                tokens_before=report.tokens_before
                if report.tokens_before is not None
                else received,
                tokens_after=tokens,
                messages_after=messages,
                retried=retried,
                window=window,
                over_window=over_window(tokens, max_output_tokens(new_body), window),
            )
            upstream = again
            if upstream.status_code not in (400, 413):
                return Answer(upstream, report)
            head, rest = await _read_bounded(upstream)
            text = head.decode("utf-8", "replace")
            if rest is not None or not is_context_error(upstream.status_code, text):
                break
            body = new_body
        return Answer(upstream, report, _replay(head, rest))

    async def _cut(
        self, provider: str, body: Body, budget: int
    ) -> tuple[Body, int, int, int] | None:
        """``body`` with its history cut to ``budget`` tokens, its token and message counts
        and the token count of ``body``; ``None`` when the guard cannot or need not cut it."""
        found = codec(provider, body)
        if isinstance(found, Problem) or budget < 1:
            return None
        decode, encode = found
        try:
            history = decode()
            count = self.counter.count(history)
            ctx = CompactionContext(
                history=tuple(history),
                token_count=count,
                max_context_size=budget,
                reserved_context_size=0,
                token_counter=self.counter,
                max_output_tokens=max_output_tokens(body),
            )
            # One step at a time: the upstream refused the request, so keep all that fits
            # (the per-request default, batches of 8, would cut deeper for the cache's sake).
            guard = ContextGuard(context_window=budget, reserve_tokens=0, drop_batch=1)
            output = await guard.compact(ctx)
            if output is None or check_history(output):
                return None
            return encode(output), self.counter.count(output), len(output), count
        except Exception as exc:  # a budget nothing fits, a format that cannot say it
            logger.info("retry cut to %d tokens not possible: %s", budget, type(exc).__name__)
            return None


async def _read_bounded(upstream: httpx.Response) -> tuple[bytes, AsyncIterator[bytes] | None]:
    """Up to :data:`ERROR_BODY_LIMIT` decoded bytes, and the rest of the body to relay
    (``None`` when that was all of it)."""
    chunks: list[bytes] = []
    size = 0
    body = upstream.aiter_bytes()
    try:
        async for chunk in body:
            chunks.append(chunk)
            size += len(chunk)
            if size > ERROR_BODY_LIMIT:
                return b"".join(chunks), body
    except httpx.HTTPError as exc:
        logger.warning("upstream error answer broke off: %s", type(exc).__name__)
    return b"".join(chunks), None


async def _replay(head: bytes, rest: AsyncIterator[bytes] | None) -> AsyncIterator[bytes]:
    """What was read, then (when there is more) the rest of the decoded body."""
    yield head
    if rest is not None:
        async for chunk in rest:
            yield chunk
