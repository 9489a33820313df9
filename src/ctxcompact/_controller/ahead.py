"""Summaries made ahead of time: one background task per conversation state.

When a conversation reaches ``precompute_ratio`` of the trigger, the controller starts the
strategy's :meth:`~ctxcompact.SummarizesAhead.summarize_ahead` as an asyncio task on a copy of
the history, and the agent carries on with the history as it is (the provider's prompt cache
holds). When the trigger fires, the controller takes the result, waiting only when the task
has not finished yet, and hands it to the run as ``ctx.ahead``. :class:`AheadSlot` is what a
:class:`~ctxcompact.ControllerState` keeps of it:

* the history it was made from (a copy of the list, the messages themselves): the result is
  offered only while the conversation still starts with those very messages (each the same
  object, or an equal one); a history that diverged (an edit, a compaction) cancels the task
  or drops the result;
* the task, or its result once finished: a summary, or ``None`` (the strategy saw nothing to
  make ahead; asked again on the next call, which costs no model call); a task that failed
  is not started again until the history changes (an outage must not cost a model call per
  turn), and the trigger's own run then tries the usual way;
* a task created in an event loop that is no longer running (a caller that runs each step in
  its own ``asyncio.run``) is dropped: it cannot be awaited from another loop.

Model calls made inside the task see :func:`in_background` true, so a meter (replay's) can
tell the summarizer's time in the background from its time on the hot path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from contextvars import ContextVar
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Coroutine, Sequence

    from .._contract.protocols import SummaryAhead
    from .._history.messages import Message

__all__ = ["AheadSlot", "in_background"]

logger = logging.getLogger("ctxcompact.controller")

_IN_BACKGROUND: ContextVar[bool] = ContextVar("ctxcompact_in_background", default=False)


def in_background() -> bool:
    """Whether the running code is a summary made ahead of time, off the hot path.

    Example:
        >>> in_background()
        False
    """
    return _IN_BACKGROUND.get()


async def _background(work: Coroutine[object, object, SummaryAhead | None]) -> SummaryAhead | None:
    _IN_BACKGROUND.set(True)  # this task's own copy of the context
    return await work


class AheadSlot:
    """The summary being made ahead for one conversation (see the module docs).

    Example:
        >>> slot = AheadSlot()
        >>> slot.busy_for([])
        False
    """

    __slots__ = ("_blocked", "_result", "_snapshot", "_task", "background_s", "started")

    def __init__(self) -> None:
        self._snapshot: list[Message] | None = None
        self._task: asyncio.Task[SummaryAhead | None] | None = None
        self._result: SummaryAhead | None = None
        self._blocked = False  # the last task failed: none again until the history changes
        self.started = 0
        """Tasks started in this slot (for reports)."""
        self.background_s = 0.0
        """Seconds those tasks ran, in the background."""

    # -- what the slot holds ------------------------------------------------------------------

    def _matches(self, history: Sequence[Message]) -> bool:
        snapshot = self._snapshot
        if snapshot is None or len(history) < len(snapshot):
            return False
        # List equality runs in C and tries identity before __eq__ for each pair.
        return snapshot == list(history[: len(snapshot)])

    def _usable(self) -> bool:
        task = self._task
        if task is None:
            return True
        try:
            return not task.get_loop().is_closed() and (
                task.done() or task.get_loop() is asyncio.get_running_loop()
            )
        except RuntimeError:  # no running loop
            return task.done()

    def sync(self, history: Sequence[Message]) -> None:
        """Forget what no longer applies to ``history`` (cancelling a task made for
        another history); a failure's block lifts once the history differs."""
        if self._snapshot is None:
            return
        if not self._matches(history) or not self._usable():
            self.cancel()
            self._blocked = False

    def busy_for(self, history: Sequence[Message]) -> bool:
        """Whether a summary for ``history`` is being made or is ready (or the last attempt
        failed on it): no new one is due."""
        self.sync(history)
        if self._snapshot is None:
            return False
        if self._blocked or self._result is not None:
            return True
        task = self._task
        if task is None:
            return False
        if not task.done():
            return True
        self._collect(task)
        return self._blocked or self._result is not None

    # -- starting, taking -----------------------------------------------------------------------

    def start(
        self,
        history: Sequence[Message],
        work: Coroutine[object, object, SummaryAhead | None],
    ) -> None:
        """Run ``work`` (the strategy's ``summarize_ahead`` on ``history``) in the background."""
        self.cancel()
        self._snapshot = list(history)
        self.started += 1
        started = time.perf_counter()
        task = asyncio.get_running_loop().create_task(_background(work))

        def finished(done: asyncio.Task[SummaryAhead | None]) -> None:
            self.background_s += time.perf_counter() - started
            if not done.cancelled() and done.exception() is not None:
                exc = done.exception()
                # The type only: a provider's error text can echo the conversation.
                logger.warning(
                    "summary ahead of time failed (%s); the trigger's run writes one, or goes on "
                    "without one (summarize_at_trigger = false)",
                    type(exc).__name__,
                )
                logger.debug("summary ahead of time failed: %s", exc)

        task.add_done_callback(finished)
        self._task = task

    def offer(self, history: Sequence[Message], ahead: SummaryAhead) -> None:
        """Hold ``ahead``, made elsewhere (the proxy's store) for the start of ``history``."""
        self.cancel()
        self._snapshot = list(history[: ahead.end])
        self._result = ahead

    async def take(self, history: Sequence[Message]) -> tuple[SummaryAhead | None, float]:
        """The summary made ahead for ``history``, and the seconds spent waiting for it (a
        task still running is awaited: that wait is on the hot path). The slot is emptied."""
        self.sync(history)
        task, result = self._task, self._result
        waited = 0.0
        if task is not None and not task.done():
            start = time.perf_counter()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.shield(task)
            waited = time.perf_counter() - start
        if task is not None and task.done():
            self._collect(task)
            result = self._result
        self.clear()
        return result, waited

    async def settle(self) -> None:
        """Wait for a running task to finish (its failure is logged, not raised)."""
        task = self._task
        if task is None or task.done() or not self._usable():
            return
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await asyncio.shield(task)

    def _collect(self, task: asyncio.Task[SummaryAhead | None]) -> None:
        if task.cancelled():
            self.clear()
            return
        if task.exception() is not None:
            self._task, self._result, self._blocked = None, None, True
            return
        result = task.result()
        self._task = None
        if result is None:  # nothing to make ahead now: asked again next time
            self._snapshot = None
        self._result = result

    def clear(self) -> None:
        """Forget the task (not cancelled) and the result."""
        self._snapshot, self._task, self._result, self._blocked = None, None, None, False

    def cancel(self) -> None:
        """Cancel a running task and forget everything."""
        task = self._task
        if task is not None and not task.done():
            # A closed loop refuses: the task will never run again anyway.
            with contextlib.suppress(RuntimeError):
                task.cancel()
        self.clear()
