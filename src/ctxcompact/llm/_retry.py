"""Seeing the SDKs' own retries: one report (callback + log line) per retried attempt.

The retrying itself stays the SDK's (``max_retries``, exponential backoff with jitter,
``Retry-After``). The OpenAI SDK has no public "a retry is happening" hook (Anthropic's
middleware sees attempts, not the wait), so both adapters watch the wire: httpx
``event_hooks`` on the SDK's HTTP client see every request and response. Rejected
alternatives: overriding the SDKs' private ``_sleep_for_retry``, and lowering the level of
their loggers to catch the "Retrying request" INFO line (which would also push every SDK
INFO record into the application's handlers).

A :class:`~contextvars.ContextVar` set around each ``complete`` call ties the requests to
that call (hooks run in the caller's task), so concurrent calls on one client and requests
made outside the adapter are never confused. Which attempt a request is comes from the
SDKs' ``x-stainless-retry-count`` header, so a redirect inside one attempt is not taken
for a retry; without the header, every request after the first counts as one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx2

__all__ = ["RetryCallback", "RetryEvent"]

logger = logging.getLogger("ctxcompact.llm")


@dataclass(frozen=True, slots=True)
class RetryEvent:
    """One retry the SDK is making, reported when the retried request goes out.

    Attributes:
        provider: ``openai`` or ``anthropic``.
        model: The model the call is for.
        attempt: The retry number: 1 for the first retry.
        max_retries: The retry budget the SDK was given.
        status_code: The HTTP status of the failed attempt, or ``None`` when it got no
            response (timeout, connection error).
        waited_s: Seconds between the failed attempt's response (or its start, when it got
            none) and this retry: the SDK's backoff or the server's ``Retry-After``.

    Example:
        >>> RetryEvent("openai", "gpt-4o", 1, 2, 429, 0.5).describe()
        'openai gpt-4o: retry 1 of 2 after HTTP 429 (waited 0.50 s)'
    """

    provider: str
    model: str
    attempt: int
    max_retries: int
    status_code: int | None
    waited_s: float

    def describe(self) -> str:
        """A one-line, user-facing description (the log line)."""
        cause = f"HTTP {self.status_code}" if self.status_code else "a timeout or connection error"
        return (
            f"{self.provider} {self.model}: retry {self.attempt} of {self.max_retries} "
            f"after {cause} (waited {self.waited_s:.2f} s)"
        )


RetryCallback = Callable[[RetryEvent], None]
"""Called once per retry, e.g. to update a spinner (seed 002, task 2.3)."""


@dataclass(slots=True)
class _CallState:
    owner: object
    requests: int = 0
    retries: int = 0
    last_status: int | None = None
    last_mark: float = 0.0


_RETRY_COUNT_HEADER = "x-stainless-retry-count"
_CURRENT: ContextVar[_CallState | None] = ContextVar("ctxcompact_llm_call", default=None)


class RetryWatcher:
    """Event hooks for an httpx(2) client that report the retries of one adapter's calls."""

    def __init__(
        self,
        *,
        provider: str,
        model: str,
        max_retries: int,
        on_retry: RetryCallback | None,
    ) -> None:
        self.provider = provider
        self.model = model
        self.max_retries = max_retries
        self.on_retry = on_retry

    def hooks(self) -> dict[str, list[Callable[[object], Awaitable[None]]]]:
        """The ``event_hooks`` mapping to install on the HTTP client."""
        return {"request": [self._on_request], "response": [self._on_response]}

    def install(self, http_client: httpx2.AsyncClient) -> None:
        """Append the hooks to an existing client's ``event_hooks`` (a public property)."""
        hooks = http_client.event_hooks
        http_client.event_hooks = {
            "request": [*hooks.get("request", []), self._on_request],
            "response": [*hooks.get("response", []), self._on_response],
        }

    @contextmanager
    def call(self) -> Iterator[None]:
        """Mark the attempts made inside the block as belonging to one adapter call."""
        token = _CURRENT.set(_CallState(owner=self))
        try:
            yield
        finally:
            _CURRENT.reset(token)

    async def _on_request(self, request: object) -> None:
        state = _CURRENT.get()
        if state is None or state.owner is not self:
            return
        now = time.monotonic()
        state.requests += 1
        headers = getattr(request, "headers", None)
        header = headers.get(_RETRY_COUNT_HEADER) if headers is not None else None
        if isinstance(header, str) and header.isdigit():
            retries = int(header)
        else:
            retries = state.requests - 1
        if retries > state.retries:
            state.retries = retries
            self._report(
                RetryEvent(
                    provider=self.provider,
                    model=self.model,
                    attempt=retries,
                    max_retries=self.max_retries,
                    status_code=state.last_status,
                    waited_s=max(0.0, now - state.last_mark),
                )
            )
        # Until a response arrives, the attempt's start is the best mark we have.
        state.last_status = None
        state.last_mark = now

    def _report(self, event: RetryEvent) -> None:
        logger.warning("%s", event.describe())
        if self.on_retry is None:
            return
        try:
            self.on_retry(event)
        except Exception:
            # A broken progress display must not fail the model call it reports on.
            logger.exception("on_retry callback %r failed", self.on_retry)

    async def _on_response(self, response: object) -> None:
        state = _CURRENT.get()
        if state is None or state.owner is not self:
            return
        status = getattr(response, "status_code", None)
        state.last_status = status if isinstance(status, int) else None
        state.last_mark = time.monotonic()
