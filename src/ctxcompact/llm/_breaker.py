"""A circuit breaker around a model: an outage is paid once, not on every call.

A summarizer that is down costs each call its timeout times its attempts (three minutes with
``[compaction.llm]``'s defaults). Its callers (each proxy request, each agent step) are
independent, so none of them can learn from the others; the breaker belongs to the endpoint
they share. :class:`CircuitBreakerLLM` wraps any :class:`~ctxcompact.LLM`:

* **closed**: calls go through. A call that fails as an outage would (a timeout, a
  connection error, a 5xx or a 429 after the SDK's own retries, or any exception that is not
  a :class:`~ctxcompact.exceptions.LLMError`) counts; ``failure_threshold`` of them in a row
  open the breaker. A call that gets an answer, even an error answer such as a 400 or a 401,
  shows the endpoint is up and resets the count.
* **open**: every call raises :class:`~ctxcompact.exceptions.LLMUnavailableError` at once,
  unsent, for ``cooldown`` seconds.
* **half-open**: after the cool-down, the next call is the probe and goes through; calls made
  while it is in flight are refused. Its success closes the breaker, its failure opens it for
  another cool-down.

Which calls a breaker refused or saw fail inside a block of code is collected by
:func:`watch_outages` (a :class:`~contextvars.ContextVar`, as the retry hooks use), so the
controller can report it even when the strategy caught the error and carried on.

No circuit-breaker package is used: those on PyPI (pybreaker, circuitbreaker, purgatory)
let every call through while half-open, and their errors would have to be mapped into
ctxcompact's tree anyway; the state machine is a few dozen lines.
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from .._defaults import DEFAULT_BREAKER_COOLDOWN, DEFAULT_BREAKER_FAILURES
from ..exceptions import ArgumentError, LLMError, LLMUnavailableError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from .._contract.protocols import LLM, Completion, ToolSpec
    from .._history.messages import Message

__all__ = [
    "BreakerState",
    "BreakerStats",
    "CircuitBreakerLLM",
    "LLMOutages",
    "OutageStatus",
    "watch_outages",
]

logger = logging.getLogger("ctxcompact.llm")

BreakerState = Literal["closed", "open", "half_open"]
OutageStatus = Literal["unavailable", "failed"]


@dataclass(frozen=True, slots=True)
class BreakerStats:
    """A snapshot of a breaker, for metrics and health checks.

    Attributes:
        state: ``closed``, ``open`` (calls refused) or ``half_open`` (a probe may go, or is
            in flight).
        consecutive_failures: Failed calls since the last call that got an answer.
        calls: Calls sent to the model.
        failures: Sent calls that failed as an outage would.
        refused: Calls refused unsent while the breaker was open or a probe in flight.
        opened: Times the breaker opened (a failed probe opens it again).
        retry_in_s: Seconds until a probe may go (``0.0`` when one may go now or the
            breaker is closed).

    Example:
        >>> BreakerStats("closed", 0, 3, 0, 0, 0, 0.0).state
        'closed'
    """

    state: BreakerState
    consecutive_failures: int
    calls: int
    failures: int
    refused: int
    opened: int
    retry_in_s: float


@dataclass(slots=True)
class LLMOutages:
    """What the breakers saw of the calls made inside one :func:`watch_outages` block.

    Attributes:
        refused: Calls an open breaker refused without sending them.
        failed: Calls that failed as an outage would (each counted by its breaker).
    """

    refused: int = 0
    failed: int = 0

    @property
    def status(self) -> OutageStatus | None:
        """``unavailable`` when a call was refused, else ``failed`` when one failed, else
        ``None``."""
        if self.refused:
            return "unavailable"
        return "failed" if self.failed else None


_WATCH: ContextVar[LLMOutages | None] = ContextVar("ctxcompact_llm_outages", default=None)


@contextmanager
def watch_outages() -> Iterator[LLMOutages]:
    """Collect what the breakers refused or saw fail inside the block.

    Calls made in this task (and in tasks it starts inside the block, which copy the
    context) are counted; an inner block collects its own calls only.

    Example:
        >>> with watch_outages() as seen:
        ...     pass
        >>> seen.status is None
        True
    """
    seen = LLMOutages()
    token = _WATCH.set(seen)
    try:
        yield seen
    finally:
        _WATCH.reset(token)


def _calls(failures: int) -> str:
    return f"{failures} failed call" + ("" if failures == 1 else "s")


def _is_outage(exc: Exception) -> bool:
    """Whether a failed call says the endpoint is not serving (rather than answering no)."""
    return not isinstance(exc, LLMError) or exc.retryable


class CircuitBreakerLLM:
    """An :class:`~ctxcompact.LLM` that stops calling a failing endpoint for a cool-down.

    Share one per endpoint: every controller, conversation and proxy request that calls
    through the same object shares its state. :func:`ctxcompact.wire` wraps the summarizer
    it builds from ``[compaction.llm]`` in one (``breaker_failures``, ``breaker_cooldown``).
    It states the wrapped model's window (``WindowedLLM``) and closes it with :meth:`aclose`.
    Safe to share across threads and event loops.

    Args:
        llm: The model to call.
        failure_threshold: Consecutive failed calls that open the breaker (>= 1).
        cooldown: Seconds an open breaker refuses calls before one probe goes (> 0).
        clock: Time source in seconds (tests pass a manual one).

    Example:
        >>> import asyncio
        >>> from ctxcompact import Message
        >>> from ctxcompact.exceptions import LLMConnectionError
        >>> from ctxcompact.testing import ScriptedLLM
        >>> llm = CircuitBreakerLLM(ScriptedLLM(LLMConnectionError("down")), cooldown=60)
        >>> for _ in range(2):
        ...     try:
        ...         asyncio.run(llm.complete([Message.user("hi")]))
        ...     except Exception as exc:
        ...         print(type(exc).__name__)
        LLMConnectionError
        LLMUnavailableError
        >>> llm.stats().state, llm.stats().refused
        ('open', 1)
    """

    def __init__(
        self,
        llm: LLM,
        *,
        failure_threshold: int = DEFAULT_BREAKER_FAILURES,
        cooldown: float = DEFAULT_BREAKER_COOLDOWN,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if failure_threshold < 1:
            raise ArgumentError(
                "failure_threshold", f"failure_threshold must be >= 1, got {failure_threshold}"
            )
        if not cooldown > 0:
            raise ArgumentError("cooldown", f"cooldown must be > 0 seconds, got {cooldown}")
        self.llm = llm
        self.failure_threshold = failure_threshold
        self.cooldown = cooldown
        self.clock = clock
        self._lock = threading.Lock()
        self._consecutive = 0
        self._opened_at: float | None = None  # set while open or half-open
        self._probing = False
        self._calls = self._failures = self._refused = self._opened = 0

    def __repr__(self) -> str:
        return (
            f"CircuitBreakerLLM({self.llm!r}, failure_threshold={self.failure_threshold}, "
            f"cooldown={self.cooldown})"
        )

    @property
    def context_window(self) -> int | None:
        """The wrapped model's window, when it states one (``WindowedLLM``)."""
        window = getattr(self.llm, "context_window", None)
        return window if isinstance(window, int) and not isinstance(window, bool) else None

    @property
    def state(self) -> BreakerState:
        """``closed``, ``open`` or ``half_open`` (see the module docs)."""
        return self.stats().state

    def stats(self) -> BreakerStats:
        """The current state and counters."""
        with self._lock:
            retry_in = 0.0
            if self._opened_at is None:
                state: BreakerState = "closed"
            else:
                retry_in = max(0.0, self._opened_at + self.cooldown - self.clock())
                state = "open" if retry_in > 0 else "half_open"
            return BreakerStats(
                state,
                self._consecutive,
                self._calls,
                self._failures,
                self._refused,
                self._opened,
                retry_in,
            )

    def reset(self) -> None:
        """Close the breaker and forget the failures (the counters stay)."""
        with self._lock:
            self._consecutive = 0
            self._opened_at = None
            self._probing = False

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        system: str | None = None,
        tools: Sequence[ToolSpec] | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        """The wrapped model's answer, or :class:`LLMUnavailableError` at once while open.

        Raises:
            LLMUnavailableError: The breaker is open (or a probe is in flight): not sent.
            LLMError: Whatever the wrapped model raised.
        """
        probe = self._admit()
        try:
            completion = await self.llm.complete(
                messages, system=system, tools=tools, max_tokens=max_tokens
            )
        except Exception as exc:
            if _is_outage(exc):
                self._failed(probe, exc)
            else:
                self._answered(probe)
            raise
        except BaseException:  # cancelled: says nothing about the endpoint
            if probe:
                with self._lock:
                    self._probing = False
            raise
        self._answered(probe)
        return completion

    def _admit(self) -> bool:
        """Let a call through (``True`` when it is the probe), or raise while open."""
        with self._lock:
            if self._opened_at is None:
                self._calls += 1
                return False
            retry_in = self._opened_at + self.cooldown - self.clock()
            if retry_in <= 0 and not self._probing:
                self._probing = True
                self._calls += 1
                return True
            self._refused += 1
            failures = self._consecutive
        seen = _WATCH.get()
        if seen is not None:
            seen.refused += 1
        calls = _calls(failures)
        why = (
            f"not sent: a probe call is in flight after {calls}"
            if retry_in <= 0
            else f"not sent: open after {calls}; a probe goes in {retry_in:.1f} s"
        )
        raise LLMUnavailableError(
            f"the model's circuit breaker is open ({why})",
            retry_in_s=max(0.0, retry_in),
            failures=failures,
        )

    def _failed(self, probe: bool, exc: Exception) -> None:
        with self._lock:
            self._failures += 1
            self._consecutive += 1
            opens = probe or (
                self._opened_at is None and self._consecutive >= self.failure_threshold
            )
            if opens:
                self._opened_at = self.clock()
                self._opened += 1
            if probe:
                self._probing = False
            failures = self._consecutive
        seen = _WATCH.get()
        if seen is not None:
            seen.failed += 1
        if opens:
            # Only the type: the wrapped model's message could be a third party's own text.
            level = logging.INFO if probe else logging.WARNING
            logger.log(
                level,
                "circuit breaker open after %s (last: %s): calls fail at once for %.0f s, "
                "then one probe goes",
                _calls(failures),
                type(exc).__name__,
                self.cooldown,
            )

    def _answered(self, probe: bool) -> None:
        # Any answer shows the endpoint is up: the probe's, or a call's sent before it opened.
        with self._lock:
            was_open = self._opened_at is not None
            self._consecutive = 0
            self._opened_at = None
            if probe:
                self._probing = False
        if was_open:
            logger.info("circuit breaker closed: a call got an answer")

    async def aclose(self) -> None:
        """Close the wrapped model, when it can be closed."""
        close = getattr(self.llm, "aclose", None)
        if close is not None:
            await close()
