"""Summaries made ahead of time through a proxy that keeps nothing between requests.

The proxy gives each request a fresh :class:`~ctxcompact.ControllerState`, so a summary made
in the background cannot wait in one. It waits in the store instead, next to the rewrites
that :mod:`._reuse` keeps, per caller namespace:

* when a request's history (after :func:`~._reuse.reuse_rewrites`, and after its own
  compaction, if any) reaches ``precompute_ratio`` of the trigger, :class:`AheadSummaries`
  starts the controller's :meth:`~ctxcompact.CompactionController.summarize_ahead` in a
  background task, at most one per conversation (its first messages, up to the first user
  message, name it) and at most :data:`MAX_IN_FLIGHT` in all; the request is not delayed;
* the finished summary is kept under ``"ahead:"`` + :func:`~._reuse.prefix_keys` of the
  messages it covers (those it replaces and the leading system messages before them), in the
  window's scope like the kept rewrites: the leading system messages and the summary;
* a later request of the conversation whose history starts with exactly those messages
  (same hash) finds it (:meth:`AheadSummaries.find`) and offers it to its state: when that
  request's trigger fires, the run puts the summary in place without calling the
  summarizer. Below the trigger, nothing changes: the upstream's prompt cache holds.

A summary is only ever applied to messages whose hash is the hash it was made for: a history
that diverged finds nothing. Tasks still running at shutdown are cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from .._contract.protocols import SummaryAhead
from .._controller.state import ControllerState
from ..store._async import find_summary, put_summary
from ._reuse import prefix_keys

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._controller.controller import CompactionController
    from .._history.messages import Message
    from ..store._records import OriginalsStore

__all__ = ["AHEAD_KEY_PREFIX", "MAX_IN_FLIGHT", "AheadSummaries"]

logger = logging.getLogger("ctxcompact.proxy")

AHEAD_KEY_PREFIX = "ahead:"
"""Prefix of the store keys of summaries made ahead (beside the rewrites :mod:`._reuse`
keeps under bare hashes)."""

MAX_IN_FLIGHT = 64
"""Background summaries one proxy process runs at once; past it, a conversation's summary
is written when its trigger fires instead (the request waits for it, as without this)."""


class AheadSummaries:
    """The proxy's summaries made ahead of time (see the module docs).

    Example:
        >>> AheadSummaries().in_flight
        0
    """

    def __init__(self) -> None:
        self._tasks: dict[tuple[str, str], asyncio.Task[None]] = {}

    @property
    def in_flight(self) -> int:
        """Background summaries running now."""
        return len(self._tasks)

    async def find(
        self, store: OriginalsStore, namespace: str, history: Sequence[Message], *, scope: str = ""
    ) -> SummaryAhead | None:
        """The summary made ahead for the longest start of ``history`` it covers, or
        ``None`` (also when the store fails: logged, the request goes on without it). A
        network store is asked once for every start (``store._async.find_summary``)."""
        keys = [AHEAD_KEY_PREFIX + key for key in prefix_keys(history, scope)]
        try:
            found = await find_summary(store, namespace, keys[::-1])
        except Exception as exc:  # the store failing must not fail the request
            logger.warning("proxy: reading summaries made ahead failed: %s", type(exc).__name__)
            return None
        if found is None or not found[1]:
            return None
        index, kept = found
        return SummaryAhead(len(kept) - 1, len(keys) - index, kept[-1], len(history))

    def start(
        self,
        controller: CompactionController,
        store: OriginalsStore,
        namespace: str,
        history: Sequence[Message],
        *,
        state: ControllerState,
        reserved_context_size: int | None = None,
        scope: str = "",
    ) -> bool:
        """Start making ``history``'s summary in the background when it is due and none is
        being made for this conversation; returns whether one was started. ``state`` is the
        request's (it counts ``history``'s tokens)."""
        due = controller.ahead_due(
            history, state=state, reserved_context_size=reserved_context_size
        )
        if not due:
            return False
        first_user = next((i for i, m in enumerate(history) if m.role == "user"), None)
        if first_user is None:
            return False
        slot = (namespace, prefix_keys(history[: first_user + 1])[-1])
        if slot in self._tasks or len(self._tasks) >= MAX_IN_FLIGHT:
            return False
        snapshot = list(history)
        work = self._make(controller, store, namespace, snapshot, reserved_context_size, scope)
        task = asyncio.get_running_loop().create_task(work)
        self._tasks[slot] = task
        task.add_done_callback(lambda _: self._tasks.pop(slot, None))
        return True

    async def _make(
        self,
        controller: CompactionController,
        store: OriginalsStore,
        namespace: str,
        history: list[Message],
        reserved: int | None,
        scope: str,
    ) -> None:
        state = ControllerState(background=False)  # counts this history only
        ahead = await controller.summarize_ahead(
            history, state=state, reserved_context_size=reserved
        )
        if ahead is None:
            return
        kept = (*history[: ahead.start], ahead.summary)
        key = AHEAD_KEY_PREFIX + prefix_keys(history[: ahead.end], scope)[-1]
        try:
            await put_summary(store, namespace, key, kept)
        except Exception as exc:
            logger.warning("proxy: keeping a summary made ahead failed: %s", type(exc).__name__)

    async def settle(self) -> None:
        """Wait for every background summary running now (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    async def aclose(self) -> None:
        """Cancel the background summaries still running."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
