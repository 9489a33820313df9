"""Relaying an upstream's answer to the client chunk by chunk, cut off where the upstream broke."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import httpx
from starlette.background import BackgroundTask
from starlette.responses import StreamingResponse

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from starlette.types import Send

__all__ = ["Relay", "release"]

logger = logging.getLogger("ctxcompact.proxy")


class Relay(StreamingResponse):
    """The upstream's answer, relayed as raw bytes chunk by chunk as they arrive.

    SSE streams are relayed without buffering and a compressed body keeps its
    content-encoding header. An upstream that breaks off mid-answer is logged as one line and
    the client's response is left incomplete (the server closes the connection), so the
    client sees the answer cut off, as it was, instead of a well-formed but short one.
    """

    def __init__(
        self,
        upstream: httpx.Response,
        shown_url: str,
        headers: dict[str, str],
        chunks: AsyncIterator[bytes] | None = None,
    ) -> None:
        self._chunks = upstream.aiter_raw() if chunks is None else chunks
        super().__init__(
            self._chunks,
            status_code=upstream.status_code,
            headers=headers,
            background=BackgroundTask(release, upstream),
        )
        self._shown_url = shown_url

    async def stream_response(self, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        relayed = 0
        try:
            async for chunk in self._chunks:
                relayed += len(chunk)
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except httpx.HTTPError as exc:
            logger.warning(
                "upstream %s broke off its answer after %d bytes: %s",
                self._shown_url,
                relayed,
                type(exc).__name__,
            )
            return
        await send({"type": "http.response.body", "body": b"", "more_body": False})


_DRAINED = httpx.ByteStream(b"")


async def release(upstream: httpx.Response) -> None:
    """Close ``upstream`` and let it go at once: httpx binds a response's stream back to the
    response (a reference cycle), which would keep it, its request and the request's body
    (the whole history, hundreds of KiB) alive until the garbage collector's next full pass.
    The closed stream is replaced by an empty one, so reference counting frees them as soon
    as the proxy drops the response."""
    await upstream.aclose()
    upstream.stream = _DRAINED
