"""The controller's store hook: what a rewrite removed goes to an originals store.

With a store attached, :class:`~ctxcompact.CompactionController` hands every rewrite (a
compaction's result, a request after the transforms) to :meth:`StoreHook.keep`, which records
each original :func:`~ctxcompact.store.removed_originals` finds. With recall on (a recall
placeholder template), it also makes every tool result the rewrite *hid or masked* show that
template, naming ``recall_tool_result`` and the result's id, whatever strategy wrote the
original placeholder: built-in or third-party, nothing in the strategy has to know. Three
exceptions keep the rewrite honest:

* a replacement that already names ``recall_tool_result`` is the strategy's own recall text
  and is kept as it is;
* a result shorter than its recall placeholder is put back whole (hiding never makes a result
  bigger, and nothing is then removed);
* a message a rewrite produced (a placeholder, a summary, a result the agent cut on arrival)
  is never recorded as an original, so a later rewrite that drops or masks it cannot shadow
  the real original; a recall placeholder that a strategy hid again is put back, so the
  placeholder text stays stable call after call.

A store failure never blocks the rewrite: it is returned as a
:class:`~ctxcompact.Problem` (``store_failed``; the controller reports it in the result and it
is logged at WARNING by its fields), and placeholders then keep the strategy's own text, since
nothing could be recalled.
"""

from __future__ import annotations

import logging
import weakref
from typing import TYPE_CHECKING, Protocol

from ..exceptions import ConfigError
from ..kit import (
    HIDDEN_PLACEHOLDER,
    KLIP13_PLACEHOLDER,
    SCHEMA1_PLACEHOLDER,
    SCHEMA1_SEED_PLACEHOLDER,
    placeholder_pattern,
)
from ..store._async import is_async_store
from ..store._recall import DEFAULT_RECALL_TEMPLATE, RECALL_TOOL_NAME, recall_placeholder
from ..store._records import StoredOriginal
from ..store._removed import removed_originals
from .problems import Problem, describe_error

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._history.messages import Message
    from ..store._records import OriginalsStore
    from ..store._removed import Removal

__all__ = ["ProducedMessages", "StoreHook", "check_recall_template", "store_cut_results"]

logger = logging.getLogger("ctxcompact.controller")

_PLACEHOLDER_KINDS = frozenset({"hidden", "masked"})


def check_recall_template(template: str) -> str:
    """``template`` when it is a valid recall placeholder template.

    Raises:
        ConfigError: It does not name ``{tool_call_id}`` or uses another field than it and
            ``{tool_name}`` (``key`` is ``recall_placeholder``).
    """
    if not isinstance(template, str) or not template:
        raise ConfigError(f"must be a non-empty string, got {template!r}", key="recall_placeholder")
    try:
        recall_placeholder("x", template=template)
    except ConfigError as exc:
        raise ConfigError(exc.message, key="recall_placeholder") from None
    return template


class ProducedMessages:
    """The messages a conversation's compactions produced (placeholders, summaries), by
    identity and without keeping them alive: they are not originals.

    Example:
        >>> from ctxcompact import Message
        >>> produced, kept, new = ProducedMessages(), Message.user("a"), Message.user("b")
        >>> produced.add([kept], [kept, new])
        >>> (kept in produced, new in produced)
        (False, True)
    """

    __slots__ = ("__weakref__", "_refs")

    def __init__(self) -> None:
        self._refs: dict[int, weakref.ref[Message]] = {}

    def __len__(self) -> int:
        return len(self._refs)

    def __contains__(self, message: object) -> bool:
        ref = self._refs.get(id(message))
        return ref is not None and ref() is message

    def add(self, before: Sequence[Message], after: Sequence[Message]) -> None:
        """Remember the messages of ``after`` that are not objects of ``before``."""
        old = {id(m) for m in before}
        refs = self._refs
        owner = weakref.ref(self)
        for message in after:
            key = id(message)
            if key in old:
                continue

            def forget(_: object, key: int = key) -> None:
                live = owner()
                if live is not None:
                    live._refs.pop(key, None)

            refs[key] = weakref.ref(message, forget)


class StoreHook:
    """Records what a rewrite removed and, with recall on, writes the recall placeholders.

    Args:
        store: Where the originals go.
        namespace: Whose they are.
        recall_template: The recall placeholder template (``{tool_call_id}``,
            ``{tool_name}``), or ``None`` to leave the strategies' placeholders alone.
    """

    __slots__ = ("namespace", "recall_template", "store")

    def __init__(
        self, store: OriginalsStore, *, namespace: str, recall_template: str | None
    ) -> None:
        self.store = store
        self.namespace = namespace
        self.recall_template = (
            None if recall_template is None else check_recall_template(recall_template)
        )

    def _render(self, removal: Removal, *, shared_id: bool = False) -> str:
        """The recall placeholder; ``shared_id``: the id is re-used in the history, so the
        placeholder names ``id@position`` (recall finds that exact result)."""
        assert self.recall_template is not None
        key = f"{removal.tool_call_id}@{removal.position}" if shared_id else removal.tool_call_id
        return self.recall_template.format(
            tool_call_id=key, tool_name=removal.tool_name or "unknown"
        )

    def _is_recall_text(self, removal: Removal) -> bool:
        """Whether the removed message is itself a recall placeholder (a rewrite's output),
        naming its id alone or ``id@position``."""
        message = removal.message
        if self.recall_template is None or message.role != "tool":
            return False
        marked = self.recall_template.format(
            tool_call_id=removal.tool_call_id + "\x00", tool_name=removal.tool_name or "unknown"
        )
        head, _, tail = marked.partition("\x00")
        text = message.text
        if not (text.startswith(head) and text.endswith(tail)):
            return False
        middle = text[len(head) : len(text) - len(tail)] if tail else text[len(head) :]
        return middle == "" or (middle[:1] == "@" and middle[1:].isdigit())

    def keep(
        self,
        before: Sequence[Message],
        after: list[Message],
        produced: ProducedMessages,
        *,
        namespace: str | None = None,
    ) -> tuple[list[Message], Problem | None]:
        """Record what ``after`` removed from ``before``; the history to use and the failure.

        ``namespace`` overrides the hook's for this call (one conversation of many).

        The history is ``after`` itself when nothing had to change, else a new list (with
        recall placeholders, or results put back). Never raises.
        """
        return self._keep(self.store, before, after, produced, namespace)

    async def akeep(
        self,
        before: Sequence[Message],
        after: list[Message],
        produced: ProducedMessages,
        *,
        namespace: str | None = None,
    ) -> tuple[list[Message], Problem | None]:
        """:meth:`keep` for async callers: a store that can be awaited
        (:class:`~ctxcompact.store.AsyncOriginalsStore`, a network store) is awaited instead
        of blocking the event loop; any other store is called as :meth:`keep` calls it.

        The records are collected first and written in one awaited ``aput``; when that
        fails, the rewrite is decided again as :meth:`keep` decides it after a failed
        ``put`` (the strategy's placeholders stay: nothing could be recalled).
        """
        store = self.store
        if not is_async_store(store):
            return self._keep(store, before, after, produced, namespace)
        collected = _Collect()
        out = self._keep(collected, before, after, produced, namespace)
        if not collected.records:
            return out
        try:
            await store.aput(*collected.records)
        except Exception as exc:
            return self._keep(_Raise(exc), before, after, produced, namespace)
        return out

    def _keep(
        self,
        store: _Puts,
        before: Sequence[Message],
        after: list[Message],
        produced: ProducedMessages,
        namespace: str | None,
    ) -> tuple[list[Message], Problem | None]:
        try:
            removals = removed_originals(before, after)
        except Exception as exc:  # a bug here must not cost the compaction
            logger.debug("removed_originals raised", exc_info=True)
            return after, self._failed(exc)
        if not removals:
            return after, None
        recall = self.recall_template is not None
        positions = {id(m): j for j, m in enumerate(after)} if recall else {}
        seen_ids: dict[str, int] = {}
        for m in before:
            if m.role == "tool" and m.tool_call_id is not None:
                seen_ids[m.tool_call_id] = seen_ids.get(m.tool_call_id, 0) + 1
        restored: dict[int, Message] = {}  # index in after -> message put back
        rendered: dict[int, Message] = {}  # index in after -> recall placeholder
        records: list[StoredOriginal] = []
        unrecordable: Exception | None = None
        for removal in removals:
            replacement = removal.replacement
            j = positions.get(id(replacement)) if replacement is not None else None
            if self._is_recall_text(removal):
                if j is not None:
                    restored[j] = removal.message  # a recall placeholder hidden again
                continue
            if j is not None and self._wants_recall_text(removal):
                text = self._render(removal, shared_id=seen_ids.get(removal.tool_call_id, 0) > 1)
                content = removal.message.content
                if isinstance(content, str) and len(text) >= len(content):
                    restored[j] = removal.message  # would grow: keep it whole, nothing removed
                    continue
                assert replacement is not None
                rendered[j] = replacement.replace(content=text)
            if removal.message in produced or is_builtin_placeholder(removal.message):
                # Not an original: its original was kept when it was produced (in this
                # process), or it is a built-in strategy's placeholder (produced by another
                # process, or before a restart, on a history resumed from storage).
                continue
            try:
                records.append(
                    StoredOriginal.from_message(
                        removal.message,
                        position=removal.position,
                        kind=removal.kind,
                        namespace=namespace or self.namespace,
                        tool_call_id=removal.tool_call_id,
                        tool_name=removal.tool_name,
                    )
                )
            except Exception as exc:  # a message the record cannot hold: report, never raise
                logger.debug("a removed original could not be serialised", exc_info=True)
                unrecordable = unrecordable or exc
                if j is not None:
                    rendered.pop(j, None)  # not stored: the model must not be told to recall it
        error: Problem | None = None
        if records:
            try:
                store.put(*records)
            except Exception as exc:
                logger.debug("store %s raised", type(self.store).__name__, exc_info=True)
                error = self._failed(exc, len(records))
                rendered = {}  # nothing to recall: the strategy's placeholders stay
        if unrecordable is not None and error is None:
            error = self._failed(unrecordable)
        changes = {**rendered, **restored}
        if not changes:
            return after, error
        out = list(after)
        for j, message in changes.items():
            out[j] = message
        return out, error

    @staticmethod
    def _wants_recall_text(removal: Removal) -> bool:
        replacement = removal.replacement
        return (
            replacement is not None
            and removal.message.role == "tool"
            and removal.kind in _PLACEHOLDER_KINDS
            and RECALL_TOOL_NAME not in replacement.text
        )

    def _failed(self, exc: BaseException, records: int = 0) -> Problem:
        """The failure as a problem; logged once at WARNING by its fields."""
        name = type(self.store).__name__
        what = f"{records} removed original(s)" if records else "the removed originals"
        # A StoreError's text is the store's own about itself; any other message may quote
        # what the store was given, so it is named by its type only (describe_error).
        message = f"{name} could not keep {what}: {describe_error(exc)}"
        problem = Problem.raised(
            "store_failed", exc, source=name, message=message, count=records or None
        )
        logger.warning("originals store failed, the rewrite stands: %s", problem.shown)
        logger.debug("originals store failure: %s", problem.explained)
        return problem


class _Puts(Protocol):
    def put(self, *records: StoredOriginal) -> None: ...


class _Collect:
    """Keeps what :meth:`StoreHook._keep` would store, for one awaited write."""

    def __init__(self) -> None:
        self.records: tuple[StoredOriginal, ...] = ()

    def put(self, *records: StoredOriginal) -> None:
        self.records = records


class _Raise:
    """Fails as the awaited write did, so the rewrite is decided as after a failed ``put``."""

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def put(self, *records: StoredOriginal) -> None:
        raise self.exc


def store_cut_results(
    store: OriginalsStore,
    namespace: str,
    start: int,
    results: Sequence[Message],
    cut: Sequence[Message],
) -> bool:
    """Keep the originals of tool results cut on arrival (the agent's
    ``tool_result_truncation``, which the controller never sees); whether it worked.

    ``results[k]`` was added to the history at ``start + k`` as ``cut[k]``. A store failure is
    logged at WARNING without content, never raised.
    """
    pairs = [
        (k, whole)
        for k, (whole, short) in enumerate(zip(results, cut, strict=True))
        if short is not whole
    ]
    if not pairs:
        return True
    try:
        store.put(
            *(
                StoredOriginal.from_message(
                    whole, position=start + k, kind="truncated", namespace=namespace
                )
                for k, whole in pairs
            )
        )
    except Exception as exc:  # the store never stops the agent
        logger.debug("store %s raised", type(store).__name__, exc_info=True)
        logger.warning(
            "originals store %s could not keep %d truncated result(s) (%s); the run goes on",
            type(store).__name__,
            len(pairs),
            type(exc).__name__,
        )
        return False
    return True


_BUILTIN_PLACEHOLDERS = tuple(
    placeholder_pattern(t)
    for t in (
        HIDDEN_PLACEHOLDER,
        KLIP13_PLACEHOLDER,
        SCHEMA1_PLACEHOLDER,
        SCHEMA1_SEED_PLACEHOLDER,
        DEFAULT_RECALL_TEMPLATE,
    )
)


def is_builtin_placeholder(message: Message) -> bool:
    """Whether a tool result's text is exactly a built-in placeholder (default templates
    only: a custom placeholder is recognised within the process that produced it)."""
    if message.role != "tool" or not isinstance(message.content, str):
        return False
    return any(p.fullmatch(message.content) for p in _BUILTIN_PLACEHOLDERS)
