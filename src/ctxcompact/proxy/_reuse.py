"""Compactions computed once per conversation, though the proxy keeps nothing between requests.

The client resends its whole history on every request, so the second request of a conversation
starts with exactly the messages the first one's compaction replaced. With a store attached,
the proxy keeps each compaction's rewrite under :func:`~ctxcompact.store.summary_key` of the
request's messages up to the last one it replaced (the unchanged messages before them
included), and, on a later request whose history starts with those very messages, puts the
kept rewrite in their place before the controller decides anything. A summary is then written
once, and the upstream receives the same summary text (the same prompt prefix: its cache is
kept) on every later request of the conversation. Chained compactions (a summary merged into a
later one) are substituted one after the other.
"""

from __future__ import annotations

import hashlib
import logging
from typing import TYPE_CHECKING

from .._store_records import message_key
from .._validate import check_history

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._messages import Message
    from .._store_records import OriginalsStore

__all__ = ["MAX_SUBSTITUTIONS", "prefix_keys", "remember_rewrite", "reuse_rewrites"]

logger = logging.getLogger("ctxcompact.proxy")

MAX_SUBSTITUTIONS = 8
"""Kept rewrites substituted one after the other at most (a conversation compacted 8 times)."""


def prefix_keys(messages: Sequence[Message]) -> list[str]:
    """``summary_key(messages[:i])`` for ``i`` in ``1..len(messages)``, in one pass.

    The key is SHA-256 of the JSON list of the messages' keys; the hash of each longer prefix
    continues the shorter one's, so every prefix costs one message's key, not the prefix's.
    """
    digest = hashlib.sha256(b"[")
    keys: list[str] = []
    for i, message in enumerate(messages):
        digest.update((", " if i else "").encode() + f'"{message_key(message)}"'.encode())
        done = digest.copy()
        done.update(b"]")
        keys.append(done.hexdigest())
    return keys


def reuse_rewrites(
    store: OriginalsStore, namespace: str, history: Sequence[Message]
) -> tuple[list[Message], int]:
    """``history`` with every kept rewrite of its leading messages put in their place.

    Returns the new history and how many rewrites were substituted (0: ``history`` as it
    came). The longest kept prefix wins; a store failure, or a result with more
    ``check_history`` problems than the history had, leaves the history as it was.
    """
    current = list(history)
    substituted = 0
    while substituted < MAX_SUBSTITUTIONS:
        try:
            found = _longest(store, namespace, current)
        except Exception as exc:  # the store failing must not fail the request
            logger.warning("proxy: reading kept summaries failed: %s", type(exc).__name__)
            break
        if found is None:
            break
        end, rewrite = found
        candidate = [*rewrite, *current[end:]]
        if len(check_history(candidate)) > len(check_history(current)):
            logger.warning("proxy: a kept summary does not fit this history; not reused")
            break
        current = candidate
        substituted += 1
    return (current, substituted) if substituted else (list(history), 0)


def _longest(
    store: OriginalsStore, namespace: str, history: Sequence[Message]
) -> tuple[int, tuple[Message, ...]] | None:
    keys = prefix_keys(history)
    for end in range(len(keys), 0, -1):
        rewrite = store.get_summary(namespace, keys[end - 1])
        if rewrite is not None:
            return end, rewrite
    return None


def remember_rewrite(
    store: OriginalsStore,
    namespace: str,
    before: Sequence[Message],
    after: Sequence[Message],
) -> bool:
    """Keep what a compaction turned ``before`` into, for the next request of the conversation.

    The unchanged tail (the same messages at the end of both) is left out: the key covers
    ``before`` up to the last message the compaction replaced, the kept messages are what
    stands for them. Returns whether something was kept; a store failure is logged and
    swallowed (the compaction stands, the next request computes it again).
    """
    tail = 0
    limit = min(len(before), len(after))
    while tail < limit and _same(before[-1 - tail], after[-1 - tail]):
        tail += 1
    replaced = before[: len(before) - tail]
    if not replaced:
        return False
    rewrite = after[: len(after) - tail]
    try:
        store.put_summary(namespace, prefix_keys(replaced)[-1], rewrite)
    except Exception as exc:
        logger.warning("proxy: keeping a summary failed: %s", type(exc).__name__)
        return False
    return True


def _same(a: Message, b: Message) -> bool:
    return a is b or a == b
