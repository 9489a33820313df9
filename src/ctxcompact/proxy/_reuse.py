"""Compactions computed once per conversation, though the proxy keeps nothing between requests.

The client resends its whole history on every request, so the second request of a conversation
starts with exactly the messages the first one's compaction replaced. With a store attached,
the proxy keeps each compaction's rewrite under :func:`~ctxcompact.store.summary_key` of the
request's messages up to the last one it replaced (the unchanged messages before them
included), and, on a later request whose history starts with those very messages, puts the
kept rewrite in their place before the controller decides anything. A summary is then written
once, and the upstream receives the same summary text (the same prompt prefix: its cache is
kept) on every later request of the conversation. A later compaction (a summary merged into a
new one) is kept under the received messages it covers, so one substitution always suffices.
"""

from __future__ import annotations

import hashlib
import logging
from typing import TYPE_CHECKING

from .._history.validate import check_history
from ..store._async import delete_summary, find_summary, put_summary
from ..store._records import message_key

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._history.messages import Message
    from ..store._records import OriginalsStore

__all__ = ["prefix_keys", "remember_rewrite", "reuse_rewrites"]

logger = logging.getLogger("ctxcompact.proxy")


def prefix_keys(messages: Sequence[Message], scope: str = "") -> list[str]:
    """``summary_key(messages[:i])`` for ``i`` in ``1..len(messages)``, in one pass.

    The key is SHA-256 of the JSON list of the messages' keys; the hash of each longer prefix
    continues the shorter one's, so every prefix costs one message's key, not the prefix's.
    A ``scope`` goes in front: the same messages compacted for another scope (another
    window) get other keys.
    """
    digest = hashlib.sha256(scope.encode() + b"[")
    keys: list[str] = []
    for i, message in enumerate(messages):
        digest.update((", " if i else "").encode() + f'"{message_key(message)}"'.encode())
        done = digest.copy()
        done.update(b"]")
        keys.append(done.hexdigest())
    return keys


async def reuse_rewrites(
    store: OriginalsStore,
    namespace: str,
    history: Sequence[Message],
    *,
    scope: str = "",
    keys: Sequence[str] | None = None,
) -> tuple[list[Message], int]:
    """``history`` with the kept rewrite of its longest kept prefix put in its place.

    Returns the new history and how many leading messages of ``history`` were replaced (0:
    ``history`` as it came). A store failure, or a result with more ``check_history``
    problems than the history had, leaves the history as it was. ``keys`` is
    ``prefix_keys(history, scope)`` when the caller has it already.
    """
    try:
        found = await _longest(store, namespace, history, scope, keys)
    except Exception as exc:  # the store failing must not fail the request
        logger.warning("proxy: reading kept summaries failed: %s", type(exc).__name__)
        return list(history), 0
    if found is None:
        return list(history), 0
    end, rewrite = found
    # Messages the rewrite kept as they were are the client's own objects again, so the
    # controller tells them (originals) from what a rewrite produced (not originals).
    received = {message_key(m): m for m in history[:end]}
    kept = [received.get(message_key(m), m) for m in rewrite]
    candidate = [*kept, *history[end:]]
    if len(check_history(candidate)) > len(check_history(history)):
        logger.warning("proxy: a kept summary does not fit this history; not reused")
        return list(history), 0
    return candidate, end


async def _longest(
    store: OriginalsStore,
    namespace: str,
    history: Sequence[Message],
    scope: str,
    keys: Sequence[str] | None,
) -> tuple[int, tuple[Message, ...]] | None:
    """The longest prefix with a kept rewrite: its length and the rewrite. A network store
    is asked once for all the prefixes (:func:`~ctxcompact.store._async.find_summary`)."""
    if keys is None:
        keys = prefix_keys(history, scope)
    found = await find_summary(store, namespace, keys[::-1])
    if found is None:
        return None
    index, rewrite = found
    return len(keys) - index, rewrite


async def remember_rewrite(
    store: OriginalsStore,
    namespace: str,
    received: Sequence[Message],
    reused: int,
    before: Sequence[Message],
    after: Sequence[Message],
    *,
    scope: str = "",
    keys: Sequence[str] | None = None,
) -> bool:
    """Keep what a compaction turned the request into, for the next request of the conversation.

    ``before`` is what the compaction ran on: ``received`` with its first ``reused`` messages
    replaced by a kept rewrite (:func:`reuse_rewrites`). The key covers the messages
    *received* up to the last one the compaction replaced (so the next request needs one
    substitution however many compactions came before); the kept messages are what stands
    for them. Returns whether something was kept; a store failure is logged and swallowed
    (the compaction stands, the next request computes it again). ``keys`` is
    ``prefix_keys(received, scope)`` when the caller has it already.

    The kept rewrite this one replaces (the one :func:`reuse_rewrites` put in, under a shorter
    prefix of the same messages) is then deleted, when the store can delete one
    (:class:`~ctxcompact.store._async.DeletesSummaries`): the conversation's next request
    finds the new one first, so the old one would only take room (4.40 of the 7.07 MiB the
    public traces left in the store, before). What this costs: a conversation that forks from
    the very point the old rewrite covered, and not from a later one, computes its
    compaction again (once).
    """
    tail = 0
    # The unchanged tail can only reach back to the received messages ``before`` ends with.
    limit = min(len(after), len(received) - reused)
    while tail < limit and _same(before[-1 - tail], after[-1 - tail]):
        tail += 1
    replaced = received[: len(received) - tail]
    if not replaced:
        return False
    rewrite = after[: len(after) - tail]
    if keys is None:
        keys = prefix_keys(replaced, scope)  # it ends at or after the reused prefix
    key = keys[len(replaced) - 1]
    try:
        await put_summary(store, namespace, key, rewrite)
    except Exception as exc:
        logger.warning("proxy: keeping a summary failed: %s", type(exc).__name__)
        return False
    superseded = keys[reused - 1] if reused else None
    if superseded is not None and superseded != key:
        try:
            await delete_summary(store, namespace, superseded)
        except Exception as exc:  # it stays until the store's bound evicts it
            logger.warning("proxy: forgetting a superseded summary failed: %s", type(exc).__name__)
    return True


def _same(a: Message, b: Message) -> bool:
    return a is b or a == b
