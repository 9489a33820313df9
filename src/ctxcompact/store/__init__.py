"""Nothing lost for good: removed originals kept in a store, and a tool to recall them.

Whatever a rewrite removes from what the model sees (a hidden or masked tool result, a result
cut to head and tail, a call's cleared arguments, messages dropped or summarised away) is kept
in an :class:`OriginalsStore` under a *handle*, and the marker left in its place names that
handle and ``recall_tool_result``. The handle scheme (a tool-call id, ``id@hash`` when ids are
re-used, ``args:<id>``, ``#hash`` for a message, ``#r...`` for the list of what one rewrite
dropped or summarised) is :mod:`ctxcompact.kit._markers`'s; handles come from content, not
positions, so they stay valid across successive compactions.

* :func:`removed_originals` compares a history before and after a rewrite and says what went,
  where, how, and under which handle; :func:`record_removed` stores it.
* :class:`MemoryStore` (one process; the controller's and the agent's default, bounded at
  :data:`DEFAULT_MEMORY_STORE_BYTES`), :class:`SQLiteStore` (a file several processes share,
  kept across restarts) and :class:`RedisStore` (a Redis server that processes on several
  machines share; the ``redis`` extra) are built in; all are bounded in bytes and evict the
  least recently stored first, and count what they evict (:class:`CountsEvictions`: the
  controller reports it). Records live in namespaces (the proxy uses
  :func:`credential_namespace`).
* :func:`recall_tool` gives the model ``recall_tool_result`` to page through an original
  (``offset``/``limit``, ``char_offset`` inside a long line) or grep it (``pattern``);
  :func:`execute_recall` and the tool specs serve other loops, :func:`recall_placeholder`
  writes the text that tells the model how, and :func:`recall_whole` reassembles an original
  from the executor's answers, byte for byte, as a check that it really comes back.
* :func:`default_store_path` is the file ``ctxcompact proxy`` opens when ``[store]`` names
  none: a SQLite file in the user's cache folder.
* Summaries are kept under :func:`summary_key` of the messages they replaced, so a summary is
  computed once per conversation (``put_summary``/``get_summary``).

Other backends: :class:`OriginalsStore` is a ``runtime_checkable`` Protocol of four methods,
the extension point for Postgres or anything else. A store across the network also offers
them awaitable (:class:`AsyncOriginalsStore`, as :class:`RedisStore` does), so that the
controller and the proxy await it instead of blocking their event loop.

Failures raise :class:`~ctxcompact.exceptions.StoreError` (``record_removed`` wraps whatever a
third-party store raises), so a caller can report one error type and carry on.

Example:
    >>> from ctxcompact import Message, ToolCall
    >>> store = MemoryStore()
    >>> call = Message.assistant(None, tool_calls=[ToolCall(id="c1", name="cat", arguments="{}")])
    >>> before = [Message.user("read it"), call, Message.tool("c1", "line one\\nline two")]
    >>> after = [*before[:2], Message.tool("c1", recall_placeholder("c1"))]
    >>> record_removed(store, before, after)
    1
    >>> print(execute_recall(store, {"tool_call_id": "c1", "pattern": "two"}))
    Tool result c1 (2 lines, 17 characters), 1 line matching 'two' from line 1:
    2: line two
"""

from __future__ import annotations

from ..exceptions import StoreError
from ._async import AsyncOriginalsStore, is_async_store
from ._memory import DEFAULT_MAX_BYTES, DEFAULT_MEMORY_STORE_BYTES, MemoryStore
from ._paths import default_store_path
from ._recall import (
    DEFAULT_RECALL_LINES,
    DEFAULT_RECALL_TEMPLATE,
    MAX_RECALL_CHARS,
    RECALL_TOOL_NAME,
    execute_recall,
    recall_found,
    recall_placeholder,
    recall_tool,
    recall_tool_spec_anthropic,
    recall_tool_spec_openai,
    recall_whole,
)
from ._records import (
    DEFAULT_NAMESPACE,
    REMOVAL_KINDS,
    CountsEvictions,
    OriginalsStore,
    RemovalKind,
    StoredOriginal,
    content_digest,
    counts_evictions,
    credential_namespace,
    message_key,
    summary_key,
)
from ._redis import RedisStore
from ._removed import Removal, record_removed, removed_originals
from ._sqlite import SCHEMA_VERSION, SQLiteStore

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MEMORY_STORE_BYTES",
    "DEFAULT_NAMESPACE",
    "DEFAULT_RECALL_LINES",
    "DEFAULT_RECALL_TEMPLATE",
    "MAX_RECALL_CHARS",
    "RECALL_TOOL_NAME",
    "REMOVAL_KINDS",
    "SCHEMA_VERSION",
    "AsyncOriginalsStore",
    "CountsEvictions",
    "MemoryStore",
    "OriginalsStore",
    "RedisStore",
    "Removal",
    "RemovalKind",
    "SQLiteStore",
    "StoreError",
    "StoredOriginal",
    "content_digest",
    "counts_evictions",
    "credential_namespace",
    "default_store_path",
    "execute_recall",
    "is_async_store",
    "message_key",
    "recall_found",
    "recall_placeholder",
    "recall_tool",
    "recall_tool_spec_anthropic",
    "recall_tool_spec_openai",
    "recall_whole",
    "record_removed",
    "removed_originals",
    "summary_key",
]
