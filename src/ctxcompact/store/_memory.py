"""MemoryStore: removed originals in a dict, bounded in bytes, for one process.

Content is kept as UTF-8 bytes, the very bytes the bound counts: a Python string of JSON that
is not all ASCII takes two or four bytes a character, so a store of strings used up to 1.7
times its bound (measured on the public traces through the proxy). Kept as bytes, the memory
is the bound plus about 0.8 KiB of bookkeeping per entry (measured with tracemalloc).
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

from .._history.messages import Message
from ..exceptions import StoreError
from ._records import RemovalKind, StoredOriginal, dump_message

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["DEFAULT_MAX_BYTES", "DEFAULT_MEMORY_STORE_BYTES", "MemoryStore"]

logger = logging.getLogger("ctxcompact.store")

DEFAULT_MAX_BYTES = 256 * 1024 * 1024
"""The default bound of a store: 256 MiB of message JSON (originals and summaries)."""

DEFAULT_MEMORY_STORE_BYTES = 64 * 1024 * 1024
"""The bound of the store a controller or an agent keeps by default (one conversation): 64
MiB of JSON. What the guard removed at a 16k window from the largest public trace takes 0.49
MiB; from all 17 traces together, 3.3 MiB (README, "Nothing lost"): the bound is there for
conversations far longer than any recorded, and evicts the oldest first."""

# (namespace, tool_call_id, position, content_hash) for originals; (namespace, key) for summaries.
_OriginalKey = tuple[str, str, int, str]
_SummaryKey = tuple[str, str]
# An original's other fields: (tool_name, kind, created_at).
_Fields = tuple[str | None, RemovalKind, float]


def check_max_bytes(max_bytes: int) -> int:
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
        raise StoreError(f"max_bytes must be a positive integer, got {max_bytes!r}")
    return max_bytes


def too_big(skipped: list[str], max_bytes: int) -> StoreError:
    return StoreError(
        f"not stored: {len(skipped)} record(s) larger than the store's whole bound of "
        f"{max_bytes} bytes (ids {', '.join(repr(s) for s in skipped[:5])}); raise max_bytes"
    )


class MemoryStore:
    """An :class:`~ctxcompact.store.OriginalsStore` in memory, safe across threads.

    When the JSON of everything kept passes ``max_bytes``, the least recently stored records
    (and summaries) go first; :attr:`evictions` counts them (the controller reports them).
    Storing a record again makes it recent. The process's memory for it is ``max_bytes`` plus
    about 0.8 KiB per entry (the JSON is kept as UTF-8).

    Args:
        max_bytes: The bound, in bytes of message JSON.

    Example:
        >>> from ctxcompact import Message
        >>> store = MemoryStore()
        >>> store.put(StoredOriginal.from_message(Message.tool("c1", "a.py"), position=2,
        ...                                       kind="hidden"))
        >>> store.get("default", "c1").message.text
        'a.py'
    """

    def __init__(self, *, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_bytes = check_max_bytes(max_bytes)
        self._lock = threading.Lock()
        # One recency order over both kinds of entry; the value is (entry, size, stamp), the
        # stamp growing with every store so that "most recent" needs no scan. An entry is the
        # JSON as UTF-8 bytes: a summary's, or an original's with its record's other fields.
        self._order: OrderedDict[
            tuple[str, _OriginalKey | _SummaryKey], tuple[object, int, int]
        ] = OrderedDict()
        self._stamp = 0
        self._by_id: dict[tuple[str, str], list[_OriginalKey]] = {}
        self._bytes = 0
        self.evictions = 0
        """Entries evicted so far to stay under ``max_bytes``."""

    def __repr__(self) -> str:
        return f"MemoryStore({len(self)} entries, {self._bytes} bytes, max_bytes={self.max_bytes})"

    def __len__(self) -> int:
        return len(self._order)

    @property
    def total_bytes(self) -> int:
        """Bytes of JSON kept now."""
        return self._bytes

    def put(self, *records: StoredOriginal) -> None:
        skipped: list[str] = []
        max_bytes, by_id = self.max_bytes, self._by_id
        with self._lock:
            for record in records:
                blob = record.content.encode("utf-8")
                size = len(blob)
                if size > max_bytes:
                    skipped.append(record.tool_call_id)
                    continue
                namespace, handle = record.namespace, record.tool_call_id
                key: _OriginalKey = (namespace, handle, record.position, record.content_hash)
                # The record's other fields, not a copy of it without content: a tuple is
                # built in a fraction of the time (thousands of records per rewrite).
                fields = (record.tool_name, record.kind, record.created_at)
                self._add(("o", key), (fields, blob), size)
                ids = by_id.get((namespace, handle))
                if ids is None:
                    by_id[(namespace, handle)] = [key]
                elif key not in ids:
                    ids.append(key)
            self._evict()
        if skipped:
            raise too_big(skipped, self.max_bytes)

    def get(
        self, namespace: str, tool_call_id: str, *, position: int | None = None
    ) -> StoredOriginal | None:
        with self._lock:
            best: tuple[_OriginalKey, _Fields, bytes] | None = None
            best_rank = (-1, -1)
            for okey in self._by_id.get((namespace, tool_call_id), ()):
                value, _, stamp = self._order[("o", okey)]
                assert isinstance(value, tuple)
                # The exact position first, then the most recently stored.
                rank = (int(position is not None and okey[2] == position), stamp)
                if rank > best_rank:
                    best, best_rank = (okey, *value), rank
        if best is None:
            return None
        (namespace, handle, at, digest), (tool_name, kind, created_at), blob = best
        return StoredOriginal(
            namespace=namespace,
            tool_call_id=handle,
            position=at,
            tool_name=tool_name,
            content=blob.decode("utf-8"),
            content_hash=digest,
            kind=kind,
            created_at=created_at,
        )

    def put_summary(self, namespace: str, key: str, messages: Sequence[Message]) -> None:
        content = "[" + ",".join(dump_message(m) for m in messages) + "]"
        blob = content.encode("utf-8")
        with self._lock:
            if len(blob) > self.max_bytes:
                raise too_big([f"summary {key[:12]}"], self.max_bytes)
            self._add(("s", (namespace, key)), blob, len(blob))
            self._evict()

    def get_summary(self, namespace: str, key: str) -> tuple[Message, ...] | None:
        with self._lock:
            hit = self._order.get(("s", (namespace, key)))
        if hit is None:
            return None
        assert isinstance(hit[0], bytes)
        return parse_summary(hit[0].decode("utf-8"))

    def delete_summary(self, namespace: str, key: str) -> bool:
        """Forget the summary kept under ``key`` (the proxy's kept compaction a later one of
        the same conversation superseded); whether there was one."""
        with self._lock:
            old = self._order.pop(("s", (namespace, key)), None)
            if old is not None:
                self._bytes -= old[1]
        return old is not None

    def find_summary(
        self, namespace: str, keys: Sequence[str]
    ) -> tuple[int, tuple[Message, ...]] | None:
        """The summary under the first of ``keys`` that has one, and that key's index (under
        one lock, not one per key)."""
        with self._lock:
            hits = (self._order.get(("s", (namespace, key))) for key in keys)
            found = next(((i, hit) for i, hit in enumerate(hits) if hit is not None), None)
        if found is None:
            return None
        i, hit = found
        assert isinstance(hit[0], bytes)
        return i, parse_summary(hit[0].decode("utf-8"))

    # -- internals ----------------------------------------------------------------------------

    def _add(self, key: tuple[str, _OriginalKey | _SummaryKey], value: object, size: int) -> None:
        old = self._order.pop(key, None)
        if old is not None:
            self._bytes -= old[1]
        self._stamp += 1
        self._order[key] = (value, size, self._stamp)
        self._bytes += size

    def _evict(self) -> None:
        evicted, freed = 0, 0
        while self._bytes > self.max_bytes and self._order:
            key, (_, size, _) = self._order.popitem(last=False)
            self._bytes -= size
            evicted, freed = evicted + 1, freed + size
            if key[0] == "o":
                okey = key[1]
                ids = self._by_id.get((okey[0], okey[1]))
                if ids is not None and okey in ids:
                    ids.remove(okey)
                    if not ids:
                        del self._by_id[(okey[0], okey[1])]
        if evicted:
            self.evictions += evicted
            logger.info(
                "MemoryStore: evicted the %d least recently stored entries (%d bytes) to stay "
                "under max_bytes=%d",
                evicted,
                freed,
                self.max_bytes,
            )


PARSED_SUMMARIES = 32
"""How many parsed summary entries :func:`parse_summary` keeps for the next read of the same
entry (and at most :data:`PARSED_SUMMARY_CHARS` characters of their JSON)."""

PARSED_SUMMARY_CHARS = 32 * 1024 * 1024
"""The most JSON the parsed entries :func:`parse_summary` keeps may hold, in characters."""

_parsed: OrderedDict[str, tuple[Message, ...]] = OrderedDict()
_parsed_chars = 0
_parsed_lock = threading.Lock()


def parse_summary(content: str) -> tuple[Message, ...]:
    """The messages of a summary entry (a JSON array of :func:`dump_message` objects).

    The proxy reads its conversation's kept compaction on every request, the same entry
    until the next compaction: the last :data:`PARSED_SUMMARIES` entries read are kept parsed
    (bounded by :data:`PARSED_SUMMARY_CHARS`), so the next read of the same JSON returns the
    same immutable messages, and what is computed once per message object (their JSON and
    hash, ``_records.message_key``) is not computed again.

    Example:
        >>> text = '[{"role":"user","content":"hi"}]'
        >>> parse_summary(text)[0].text, parse_summary(text) is parse_summary(text)
        ('hi', True)
    """
    global _parsed_chars
    with _parsed_lock:
        hit = _parsed.get(content)
        if hit is not None:
            _parsed.move_to_end(content)
            return hit
    messages = tuple(Message.model_validate(item) for item in json.loads(content))
    if len(content) > PARSED_SUMMARY_CHARS:
        return messages
    with _parsed_lock:
        if content not in _parsed:
            _parsed[content] = messages
            _parsed_chars += len(content)
        while len(_parsed) > PARSED_SUMMARIES or _parsed_chars > PARSED_SUMMARY_CHARS:
            old, _ = _parsed.popitem(last=False)
            _parsed_chars -= len(old)
    return messages
