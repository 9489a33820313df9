"""Stores that async callers await: a network store must not block the event loop it serves.

:class:`~ctxcompact.store.OriginalsStore` is synchronous, and for the built-in local stores that
is right (a dict, a SQLite file). A store across the network (:class:`~ctxcompact.store.RedisStore`)
offers the same four methods awaitable as well, prefixed ``a``, plus :meth:`afind_summary`
(the proxy's lookup of a conversation's kept summary, in one round trip). Async callers (the
controller's store hook, the proxy) go through the helpers here, which await such a store and
call any other store as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, TypeGuard, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._history.messages import Message
    from ._records import OriginalsStore, StoredOriginal

__all__ = [
    "AsyncOriginalsStore",
    "DeletesSummaries",
    "delete_summary",
    "find_summary",
    "is_async_store",
    "put_records",
    "put_summary",
]


@runtime_checkable
class AsyncOriginalsStore(Protocol):
    """The async variant of :class:`~ctxcompact.store.OriginalsStore`: an optional ability.

    A store that has these methods is awaited by the controller and the proxy instead of
    being called on their event loop; it must keep the synchronous methods too (the agent and
    the recall tool call those, from worker threads in the proxy).

    Example:
        >>> from ctxcompact.store import MemoryStore
        >>> is_async_store(MemoryStore())
        False
    """

    async def aput(self, *records: StoredOriginal) -> None:
        """:meth:`OriginalsStore.put <ctxcompact.store.OriginalsStore.put>`, awaited."""

    async def aget(
        self, namespace: str, tool_call_id: str, *, position: int | None = None
    ) -> StoredOriginal | None:
        """:meth:`OriginalsStore.get <ctxcompact.store.OriginalsStore.get>`, awaited."""

    async def aput_summary(self, namespace: str, key: str, messages: Sequence[Message]) -> None:
        """:meth:`OriginalsStore.put_summary <ctxcompact.store.OriginalsStore.put_summary>`,
        awaited."""

    async def aget_summary(self, namespace: str, key: str) -> tuple[Message, ...] | None:
        """:meth:`OriginalsStore.get_summary <ctxcompact.store.OriginalsStore.get_summary>`,
        awaited."""

    async def afind_summary(
        self, namespace: str, keys: Sequence[str]
    ) -> tuple[int, tuple[Message, ...]] | None:
        """The summary kept under the first of ``keys`` that has one, and that key's index
        in ``keys``; ``None`` when none has one."""


@runtime_checkable
class FindsSummaries(Protocol):
    """An optional ability of a synchronous store: :meth:`find_summary` looks many keys up at
    once (the built-in :class:`~ctxcompact.store.SQLiteStore` and
    :class:`~ctxcompact.store.MemoryStore` have it; any other store is asked key by key)."""

    def find_summary(
        self, namespace: str, keys: Sequence[str]
    ) -> tuple[int, tuple[Message, ...]] | None:
        """The summary kept under the first of ``keys`` that has one, and that key's index
        in ``keys``; ``None`` when none has one."""


@runtime_checkable
class DeletesSummaries(Protocol):
    """An optional ability of a synchronous store: :meth:`delete_summary` forgets one kept
    summary (the built-in :class:`~ctxcompact.store.SQLiteStore` and
    :class:`~ctxcompact.store.MemoryStore` have it; other stores keep superseded ones until
    their own bound or expiry removes them)."""

    def delete_summary(self, namespace: str, key: str) -> bool:
        """Forget the summary kept under ``key``; whether there was one."""


def is_async_store(store: object) -> TypeGuard[AsyncOriginalsStore]:
    """Whether ``store`` offers the async methods (:class:`AsyncOriginalsStore`)."""
    return isinstance(store, AsyncOriginalsStore)


async def put_records(store: OriginalsStore, *records: StoredOriginal) -> None:
    """``store.put(*records)``, awaited when the store is async."""
    if is_async_store(store):
        await store.aput(*records)
    else:
        store.put(*records)


async def put_summary(
    store: OriginalsStore, namespace: str, key: str, messages: Sequence[Message]
) -> None:
    """``store.put_summary(...)``, awaited when the store is async."""
    if is_async_store(store):
        await store.aput_summary(namespace, key, messages)
    else:
        store.put_summary(namespace, key, messages)


async def delete_summary(store: OriginalsStore, namespace: str, key: str) -> bool:
    """``store.delete_summary(...)`` when the store can forget a summary; ``False`` (nothing
    done) when it cannot. An async store is never called synchronously here."""
    if is_async_store(store) or not isinstance(store, DeletesSummaries):
        return False
    return store.delete_summary(namespace, key)


async def find_summary(
    store: OriginalsStore, namespace: str, keys: Sequence[str]
) -> tuple[int, tuple[Message, ...]] | None:
    """The summary under the first of ``keys`` that has one, and that key's index: one round
    trip with an async store, else ``get_summary`` key by key."""
    if is_async_store(store):
        return await store.afind_summary(namespace, keys)
    if isinstance(store, FindsSummaries):  # the built-in stores: one query, not one per key
        return store.find_summary(namespace, keys)
    for i, key in enumerate(keys):
        found = store.get_summary(namespace, key)
        if found is not None:
            return i, found
    return None
