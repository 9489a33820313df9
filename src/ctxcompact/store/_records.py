"""What an originals store keeps, and the Protocol a store implements.

A record is one original a rewrite removed from what the model sees, serialised losslessly
(the :class:`~ctxcompact.Message` model's own JSON), kept under its recall *handle* (the
``tool_call_id`` field: a tool-call id, ``id@hash``, ``args:...``, ``#hash`` or ``#r...``; the
scheme is :mod:`ctxcompact.kit._markers`'s), with where it was (``position``), a hash of that
JSON, and why it went (``kind``). Two records of one handle are told apart by their hash.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol, TypeGuard, runtime_checkable

from pydantic import ValidationError

from .._history.messages import Message

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = [
    "DEFAULT_NAMESPACE",
    "REMOVAL_KINDS",
    "CountsEvictions",
    "OriginalsStore",
    "RemovalKind",
    "StoredOriginal",
    "content_digest",
    "counts_evictions",
    "credential_namespace",
    "dump_message",
    "load_message",
    "message_key",
    "summary_key",
]

RemovalKind = Literal["hidden", "masked", "truncated", "cleared", "dropped", "summarised", "range"]
"""Why an original left the model's view (see :func:`~ctxcompact.store.removed_originals`);
``cleared`` is a call's arguments, ``range`` the list of what one rewrite dropped or
summarised (each with its handle)."""

REMOVAL_KINDS: tuple[RemovalKind, ...] = (
    "hidden",
    "masked",
    "truncated",
    "cleared",
    "dropped",
    "summarised",
    "range",
)
"""Every :data:`RemovalKind`, in the order a report lists them."""

DEFAULT_NAMESPACE = "default"
"""The namespace used when none is given (one agent, one process)."""


def dump_message(message: Message) -> str:
    """The message's JSON: the keys it was built with (``null`` kept, absent kept absent).

    Nested parts and tool calls are written whole, so their ``type`` always survives and the
    JSON validates back into the same message (:func:`load_message`). A string UTF-8 cannot
    encode (a lone UTF-16 surrogate, as JavaScript clients send when they cut an emoji in
    two) is written as its ``\\udXXX`` escape, in ASCII JSON, so it comes back exactly;
    every other message gets the model's own JSON, byte for byte as before.

    Example:
        >>> load_message(dump_message(Message.tool("c1", "cut \\ud83d"))).content == "cut \\ud83d"
        True
    """
    fields = set(message.model_fields_set)
    try:
        return message.model_dump_json(include=fields)
    except ValueError:  # PydanticSerializationError: only unencodable strings get here
        data = message.model_dump(mode="json", include=fields)
        return json.dumps(data, ensure_ascii=True, separators=(",", ":"), allow_nan=False)


def load_message(text: str) -> Message:
    """The message :func:`dump_message` wrote."""
    try:
        return Message.model_validate_json(text)
    except ValidationError:
        if "\\ud" not in text and "\\uD" not in text:
            raise
    # pydantic's JSON parser refuses a lone surrogate's escape; the standard library's keeps it.
    return Message.model_validate(json.loads(text))


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# The JSON and hash of recently stored messages, by identity: the same removal is stored again
# before every model call, and messages are immutable. Entries leave with their message.
_DUMPED: dict[int, tuple[weakref.ref[Message], str, str]] = {}


def _forget(key: int) -> Callable[[weakref.ref[Message]], None]:
    def forget(_: weakref.ref[Message]) -> None:
        _DUMPED.pop(key, None)

    return forget


SAME_VALUE_CHARS = 8 * 1024 * 1024
"""The most JSON, in characters, of the messages :func:`message_key` knows by value (each
entry counted with :data:`_ENTRY_CHARS` more for what keeping it costs beside its text)."""

_ENTRY_CHARS = 640
"""What one entry costs beside its message's text, counted as characters: the key tuple, its
frozenset of keys, the dict node and the value tuple (~640 bytes measured with tracemalloc on
200,000 short messages). Without it, short messages filled the bound at 122 MiB of memory."""

# The keys of recent messages by value: the proxy parses every request into new message
# objects, and each request resends the conversation so far. Keyed by everything
# dump_message writes (the keys present included), so equal values mean equal JSON; only the
# hash is kept beside the value (whose strings are the message's own); bounded by the JSON's
# length, least recently used out.
_BY_VALUE: OrderedDict[tuple[object, ...], tuple[str, int]] = OrderedDict()
_by_value_chars = 0
_by_value_lock = threading.Lock()


def _value_key(message: Message) -> tuple[object, ...] | None:
    """What :func:`dump_message` writes of ``message``, as a hashable tuple; ``None`` for a
    message with extra keys or content parts (rare, and not hashable as they are)."""
    content = message.content
    if message.model_extra or not (content is None or isinstance(content, str)):
        return None
    calls: tuple[object, ...] | None = message.tool_calls
    if calls:
        if any(call.model_extra for call in message.tool_calls or ()):
            return None
        calls = tuple(
            (frozenset(c.model_fields_set), c.id, c.name, c.arguments, c.type)
            for c in message.tool_calls or ()
        )
    return (
        type(message),
        frozenset(message.model_fields_set),
        message.role,
        content,
        calls,
        message.tool_call_id,
        message.name,
    )


def _dumped(message: Message) -> tuple[str, str]:
    """``(dump_message(message), its SHA-256)``, computed once per message object."""
    key = id(message)
    hit = _DUMPED.get(key)
    if hit is not None and hit[0]() is message:
        return hit[1], hit[2]
    content = dump_message(message)
    digest = _sha256(content)
    _DUMPED[key] = (weakref.ref(message, _forget(key)), content, digest)
    return content, digest


def content_digest(message: Message) -> str:
    """The hex SHA-256 of the message's JSON (:func:`dump_message`), computed once per
    message object: what recall handles take their digits from.

    Example:
        >>> content_digest(Message.user("x")) == content_digest(Message.user("x"))
        True
    """
    return _dumped(message)[1]


def message_key(message: Message) -> str:
    """A hash of the message's JSON (:func:`dump_message`): equal messages, equal keys.

    Computed once per message object (a request asks up to three times), and once for equal
    messages of recent requests (:data:`SAME_VALUE_CHARS`): the proxy hashes every message of
    every request to find a conversation's kept compaction.
    """
    global _by_value_chars
    value = _value_key(message)
    if value is not None:
        with _by_value_lock:
            known = _BY_VALUE.get(value)
            if known is not None:
                _BY_VALUE.move_to_end(value)
                return known[0]
    content, digest = _dumped(message)
    if value is not None and len(content) <= SAME_VALUE_CHARS:
        with _by_value_lock:
            if value not in _BY_VALUE:
                size = len(content) + _ENTRY_CHARS
                _BY_VALUE[value] = (digest, size)
                _by_value_chars += size
            while _by_value_chars > SAME_VALUE_CHARS:
                _, (_, size) = _BY_VALUE.popitem(last=False)
                _by_value_chars -= size
    return digest


def summary_key(messages: Sequence[Message]) -> str:
    """The key a summary is stored under: a hash of the exact messages it replaced, in order.

    Example:
        >>> a, b = Message.user("x"), Message.assistant("y")
        >>> summary_key([a, b]) == summary_key([a, b]) != summary_key([b, a])
        True
    """
    return _sha256(json.dumps([message_key(m) for m in messages]))


def credential_namespace(credential: str) -> str:
    """A namespace derived from a caller's credential (an API key): its SHA-256, shortened.

    The proxy stores each caller's originals under this, so one caller can never recall
    another's content, and the credential itself is never written anywhere.

    Example:
        >>> a, b = credential_namespace("sk-a"), credential_namespace("sk-b")
        >>> a == credential_namespace("sk-a") != b
        True
    """
    return "key-" + _sha256(credential)[:32]


@dataclass(frozen=True, slots=True)
class StoredOriginal:
    """One removed original as a store keeps it.

    Attributes:
        namespace: Whose it is (``"default"``; the proxy uses a hash of the caller's key).
        tool_call_id: The handle it is kept and recalled under: the id of the tool call a
            result answers (``id@hash`` when the id is re-used), ``args:`` and that for a
            call's arguments, ``#hash`` for another message, ``#r...`` for a range.
        position: The message's index in the history it was removed from.
        tool_name: The name of the call it answers, when known.
        content: The original :class:`~ctxcompact.Message` as JSON (:func:`dump_message`).
        content_hash: SHA-256 of ``content``; with the position, what tells apart two results
            that share an id.
        kind: ``hidden``, ``masked``, ``truncated``, ``cleared``, ``dropped``,
            ``summarised`` or ``range``.
        created_at: When it was stored (seconds since the epoch).

    Example:
        >>> r = StoredOriginal.from_message(Message.tool("c1", "a.py"), position=3, kind="hidden")
        >>> r.tool_call_id, r.message.text
        ('c1', 'a.py')
    """

    namespace: str
    tool_call_id: str
    position: int
    tool_name: str | None
    content: str
    content_hash: str
    kind: RemovalKind
    created_at: float = field(default_factory=time.time)

    @classmethod
    def from_message(
        cls,
        message: Message,
        *,
        position: int,
        kind: RemovalKind,
        namespace: str = DEFAULT_NAMESPACE,
        tool_call_id: str | None = None,
        tool_name: str | None = None,
        created_at: float | None = None,
    ) -> StoredOriginal:
        """A record of ``message``; the handle defaults to its ``tool_call_id`` (or
        ``#`` and 10 digits of its hash)."""
        content, digest = _dumped(message)
        key = tool_call_id or message.tool_call_id or "#" + digest[:10]
        return cls(
            namespace=namespace,
            tool_call_id=key,
            position=position,
            tool_name=tool_name,
            content=content,
            content_hash=digest,
            kind=kind,
            created_at=time.time() if created_at is None else created_at,
        )

    @property
    def message(self) -> Message:
        """The original message."""
        return load_message(self.content)

    @property
    def size(self) -> int:
        """Bytes the record counts against a store's bound (its JSON, UTF-8)."""
        return len(self.content.encode("utf-8"))


@runtime_checkable
class OriginalsStore(Protocol):
    """Where removed originals (and reusable summaries) are kept: the extension point.

    :class:`~ctxcompact.store.MemoryStore` and :class:`~ctxcompact.store.SQLiteStore` are
    built in; a Redis or Postgres store is any class with these four methods. Methods are
    synchronous and should be quick; a failure should raise
    :class:`~ctxcompact.exceptions.StoreError` (:func:`~ctxcompact.store.record_removed`
    wraps anything else into one), and callers report it and carry on.

    Example:
        >>> class DictStore:  # a sketch: a Redis store would use HSET/HGET the same way
        ...     def __init__(self): self.data = {}
        ...     def put(self, *records):
        ...         for r in records: self.data[(r.namespace, r.tool_call_id)] = r
        ...     def get(self, namespace, tool_call_id, *, position=None):
        ...         return self.data.get((namespace, tool_call_id))
        ...     def put_summary(self, namespace, key, messages):
        ...         self.data[(namespace, "summary", key)] = tuple(messages)
        ...     def get_summary(self, namespace, key):
        ...         return self.data.get((namespace, "summary", key))
        >>> isinstance(DictStore(), OriginalsStore)
        True
    """

    def put(self, *records: StoredOriginal) -> None:
        """Keep ``records`` (in one transaction where the backend has them).

        Storing a record equal in namespace, id, position and hash to one already kept only
        marks it as recent.
        """

    def get(
        self, namespace: str, tool_call_id: str, *, position: int | None = None
    ) -> StoredOriginal | None:
        """The record for ``tool_call_id`` in ``namespace``: the one at ``position`` when
        there is one, else the most recently stored; ``None`` when there is none."""

    def put_summary(self, namespace: str, key: str, messages: Sequence[Message]) -> None:
        """Keep the messages that replaced the messages hashed into ``key``
        (:func:`summary_key`), replacing any kept before under that key."""

    def get_summary(self, namespace: str, key: str) -> tuple[Message, ...] | None:
        """The messages kept under ``key``, or ``None``."""


@runtime_checkable
class CountsEvictions(Protocol):
    """An optional ability of a store: it counts the entries its size bound evicted.

    The controller reads the count before and after each ``put`` (or awaited ``aput``): when
    it moved, it checks
    that what it just stored is still there before a marker promises a recall, and reports
    the eviction (a ``store_evicted`` problem, a WARNING line without content).
    :class:`~ctxcompact.store.MemoryStore`, :class:`~ctxcompact.store.SQLiteStore` and
    :class:`~ctxcompact.store.RedisStore` count.

    Example:
        >>> from ctxcompact.store import MemoryStore
        >>> counts_evictions(MemoryStore()), counts_evictions(object())
        (True, False)
    """

    evictions: int
    """Entries evicted by this object so far (never decreases)."""


def counts_evictions(store: object) -> TypeGuard[CountsEvictions]:
    """Whether ``store`` counts its evictions (see :class:`CountsEvictions`)."""
    count = getattr(store, "evictions", None)
    return isinstance(count, int) and not isinstance(count, bool)
