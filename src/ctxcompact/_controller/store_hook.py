"""The controller's store hook: what a rewrite removed goes to an originals store, and each
marker in the view names the handle to recall it with.

With a store attached, :class:`~ctxcompact.CompactionController` hands every rewrite (a
compaction's result, a request after the transforms) to :meth:`StoreHook.keep`, which records
each original :func:`~ctxcompact.store.removed_originals` finds under its handle (the scheme is
:mod:`ctxcompact.kit._markers`'s) and, for what one rewrite dropped or summarised, a range
listing them. With recall on (a recall placeholder template), it then makes every marker name
its handle and ``recall_tool_result``, whatever strategy wrote it:

* a hidden or masked tool result shows the recall placeholder;
* a cut's marker names the handle and the line the cut starts on;
* a cleared argument value names ``args:<id>``;
* the guard's drop note names the range and the newest dropped results by tool and handle
  (a note is added to the task when a strategy dropped messages without one);
* a summary ends with a note naming the range it replaces.

A marker promises a recall only while the store holds the original: when a store that counts
its evictions (:class:`~ctxcompact.store.CountsEvictions`) evicted some during the ``put``
(or the awaited ``aput``), what it no longer holds keeps the plain marker, the markers an
earlier rewrite left in the view for what went are put back in their plain forms
(:func:`~.markers.without_handles`), and the eviction is reported (a ``store_evicted``
problem, a WARNING line with counts only). Three exceptions keep the rewrite
honest:

* a replacement that already names ``recall_tool_result`` and the right handle is kept;
* a result shorter than its recall placeholder is put back whole (hiding never makes a result
  bigger, and nothing is then removed);
* a message a rewrite produced (a placeholder, a result the agent cut on arrival) is never
  recorded as a tool result's original, so a later rewrite that drops or masks it cannot
  shadow the real original; a recall placeholder that a strategy hid again is put back, so the
  placeholder text stays stable call after call.

A store failure never blocks the rewrite: it is returned as a :class:`~ctxcompact.Problem`
(``store_failed``; the controller reports it in the result and it is logged at WARNING by its
fields), and markers then keep their plain forms, since nothing could be recalled.
"""

from __future__ import annotations

import asyncio
import logging
import string
import weakref
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from ..exceptions import ConfigError
from ..kit import DEFAULT_RECALL_TEMPLATE as DEFAULT_RECALL_TEMPLATE
from ..kit import (
    DROP_NOTE_RE,
    HIDDEN_PLACEHOLDER,
    KLIP13_PLACEHOLDER,
    LEGACY_RECALL_TEMPLATE,
    RECALL_TOOL_NAME,
    SCHEMA1_PLACEHOLDER,
    SCHEMA1_SEED_PLACEHOLDER,
    STAND_IN_RANGE,
    TRUNCATION_RE,
    note_ranges,
    placeholder_pattern,
    recall_placeholder,
    with_content,
)
from ..store._async import is_async_store
from ..store._ranges import range_record
from ..store._records import StoredOriginal, counts_evictions
from ..store._removed import Alignment, Handles, align, records_of, removals_of, text_digest
from .markers import (
    NAMED_RE,
    cleared_handle,
    drop_note_count,
    named_handles,
    with_cleared_handles,
    with_drop_note,
    with_range_note,
    with_truncation_handle,
    without_handles,
)
from .problems import Problem, describe_error

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._history.messages import Message, ToolCall
    from ..store._records import OriginalsStore
    from ..store._removed import Removal
    from .state import ControllerState

__all__ = ["ProducedMessages", "StoreHook", "check_recall_template", "store_cut_results"]

logger = logging.getLogger("ctxcompact.controller")

_PLACEHOLDER_KINDS = frozenset({"hidden", "masked"})
_GONE = frozenset({"dropped", "summarised"})


def leading_literal(template: str) -> str:
    """The text of a format ``template`` before its first field (braces unescaped): how
    every rendering of it starts.

    Example:
        >>> leading_literal("[{{x}} hidden: {tool_call_id}]")
        '[{x} hidden: '
    """
    lead = ""
    for literal, field, _, _ in string.Formatter().parse(template):
        lead += literal
        if field is not None:
            break
    return lead


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
    """Records what a rewrite removed and, with recall on, makes every marker name its handle.

    Args:
        store: Where the originals go.
        namespace: Whose they are.
        recall_template: The recall placeholder template (``{tool_call_id}``,
            ``{tool_name}``), or ``None`` to keep the originals without promising a recall
            (the strategies' markers stay as they wrote them).
    """

    __slots__ = ("_lead", "namespace", "recall_template", "store")

    def __init__(
        self, store: OriginalsStore, *, namespace: str, recall_template: str | None
    ) -> None:
        self.store = store
        self.namespace = namespace
        self.recall_template = (
            None if recall_template is None else check_recall_template(recall_template)
        )
        self._lead = "" if recall_template is None else leading_literal(recall_template)

    @property
    def recall(self) -> bool:
        """Whether markers name the recall tool."""
        return self.recall_template is not None

    def _placeholder(self, removal: Removal, handle: str) -> str:
        assert self.recall_template is not None
        return self.recall_template.format(
            tool_call_id=handle, tool_name=removal.tool_name or "unknown"
        )

    def _is_recall_text(self, removal: Removal) -> bool:
        """Whether the removed message is itself a recall placeholder (a rewrite's output)
        naming its own handle (or, as ctxcompact 0.2 wrote them, ``id@position``)."""
        message = removal.message
        if self.recall_template is None or message.role != "tool" or message.tool_call_id is None:
            return False
        content = message.content
        if isinstance(content, str) and not content.startswith(self._lead):
            return False  # every rendering starts so: no need to render one
        marked = self.recall_template.format(
            tool_call_id="\x00", tool_name=removal.tool_name or "unknown"
        )
        head, _, tail = marked.partition("\x00")
        text = message.text
        if not (text.startswith(head) and text.endswith(tail)) or len(text) < len(marked) - 1:
            return False
        middle = text[len(head) : len(text) - len(tail)] if tail else text[len(head) :]
        call_id = message.tool_call_id
        return middle == call_id or middle.startswith(call_id + "@")

    def keep(
        self,
        before: Sequence[Message],
        after: list[Message],
        state: ControllerState,
    ) -> tuple[list[Message], Problem | None]:
        """Record what ``after`` removed from ``before``; the history to use and the problem.

        ``state`` is the conversation's: its namespace (else the hook's), the messages its
        rewrites produced, and the handles stored so far (a tool-call id stored before with
        another text gets an ``id@hash`` handle of its own); ``state.recall_named`` is set
        once a marker names the recall tool.

        The history is ``after`` itself when nothing had to change, else a new list. Never
        raises.
        """
        return self._run(self.store, before, after, state)

    async def akeep(
        self,
        before: Sequence[Message],
        after: list[Message],
        state: ControllerState,
    ) -> tuple[list[Message], Problem | None]:
        """:meth:`keep` for async callers: a store that can be awaited
        (:class:`~ctxcompact.store.AsyncOriginalsStore`, a network store) is awaited instead
        of blocking the event loop; any other store is called as :meth:`keep` calls it.

        The records are collected first and written in one awaited ``aput``; when that
        fails, the rewrite is decided again as :meth:`keep` decides it after a failed
        ``put`` (markers keep their plain forms: nothing could be recalled), and when the
        store's count of evictions moved, as after a ``put`` that evicted (what it no longer
        holds keeps its plain marker; the eviction is reported).
        """
        store = self.store
        if not is_async_store(store):
            return self._run(store, before, after, state)
        collected = _Collect()
        out = self._run(collected, before, after, state)
        records = collected.records
        if not records:
            return out
        counted = store.evictions if counts_evictions(store) else None
        try:
            await store.aput(*records)
        except Exception as exc:
            return self._run(_Raise(exc), before, after, state)
        now = store.evictions if counts_evictions(store) else None
        if counted is None or now is None or now == counted:
            return out
        # What the store holds now, asked of it once: what was just stored, and what the
        # markers of the view name (an earlier rewrite's originals may be among what went).
        fresh = {r.tool_call_id for r in records}
        named: set[str] = set()
        for message in out[0]:
            named |= named_handles(message)
        older = sorted(named - fresh)
        namespace = records[0].namespace
        try:
            found = await asyncio.gather(
                *(store.aget(r.namespace, r.tool_call_id, position=r.position) for r in records),
                *(store.aget(namespace, h) for h in older),
            )
        except Exception as exc:
            return self._run(_Raise(exc), before, after, state)
        held = dict(zip([*(r.tool_call_id for r in records), *older], found, strict=True))
        return self._run(_Evicted(now - counted, held), before, after, state)

    def _run(
        self,
        store: _Puts,
        before: Sequence[Message],
        after: list[Message],
        state: ControllerState,
    ) -> tuple[list[Message], Problem | None]:
        try:
            out, problem = self._keep(
                store,
                before,
                after,
                state.produced,
                state.namespace or self.namespace,
                state.handles,
            )
        except Exception as exc:  # a bug here must not cost the compaction
            logger.debug("the store hook raised", exc_info=True)
            return after, self._failed(exc)
        if self.recall and out is not after:
            state.recall_named = True
        return out, problem

    def _keep(
        self,
        store: _Puts,
        before: Sequence[Message],
        after: list[Message],
        produced: ProducedMessages,
        namespace: str,
        seen: dict[str, str] | None,
    ) -> tuple[list[Message], Problem | None]:
        alignment = align(before, after)
        handles = Handles(before)
        removals = removals_of(before, after, alignment, handles)
        if not removals:
            return after, None
        removals = [self._final(r, produced, seen) for r in removals]
        restored: dict[int, Message] = {}  # index in after -> message put back
        recordable: list[Removal] = []
        already: set[str] = set()  # handles whose original was kept when they were produced
        for removal in removals:
            made = self._produced(removal, produced)
            if made:
                already.add(removal.handle)
            if self._is_recall_text(removal):
                j = alignment.replaced.get(removal.position)
                if j is not None and removal.kind in _PLACEHOLDER_KINDS:
                    restored[j] = removal.message  # a recall placeholder hidden again
                continue
            if not made:
                recordable.append(removal)
        gone = [r for r in removals if r.kind in _GONE and not _unheld_cleared(r, produced)]
        targets = _note_targets(after, alignment) if gone else ([], None, False)
        links = {link for r in gone for link in r.links} | self._note_links(
            before, after, alignment
        )
        if targets[1] is not None:  # its note (an earlier one) gives way to the new one
            links.update(note_ranges(after[targets[1]].text))
        records: list[StoredOriginal] = []
        error: Problem | None = None
        unrecordable: Exception | None = None
        try:
            records = records_of(recordable, namespace=namespace)
        except Exception:  # one at a time then: one odd message costs only its own recall
            for removal in recordable:
                try:
                    records += records_of([removal], namespace=namespace)
                except Exception as exc:  # a message no record can hold: report, never raise
                    logger.debug("a removed original could not be serialised", exc_info=True)
                    unrecordable = unrecordable or exc
        span: StoredOriginal | None = None
        try:
            span = range_record(gone, sorted(links), namespace=namespace) if self.recall else None
        except Exception as exc:
            logger.debug("a range could not be serialised", exc_info=True)
            unrecordable = unrecordable or exc
        if span is not None:
            records.append(span)
        if unrecordable is not None:
            error = self._failed(unrecordable)
        held = self._put(store, records, namespace)
        evicted = isinstance(held, tuple)
        if isinstance(held, Problem):
            error, held = held, set()
        elif isinstance(held, tuple):
            error, held = held
        if not self.recall:
            return (self._apply(after, restored) if restored else after), error
        promised = held | already  # stored now, or when the placeholder was produced
        named_span = span if span is not None and span.tool_call_id in held else None
        out = self._render(after, alignment, removals, promised, named_span, targets)
        for j, message in restored.items():
            out[j] = message
        if evicted:  # what an earlier rewrite stored may be among what went
            out = self._withdraw(store, out, held, namespace)
        return out, error

    def _withdraw(
        self, store: _Puts, out: list[Message], held: set[str], namespace: str
    ) -> list[Message]:
        """``out`` with the markers that name a handle the store no longer holds in their
        plain forms (asked only after a write that evicted)."""
        named: set[str] = set()
        for message in out:
            named |= named_handles(message)
        gone = {h for h in named - held if store.get(namespace, h) is None}
        if not gone:
            return out
        assert self.recall_template is not None
        pattern = placeholder_pattern(self.recall_template)
        return [without_handles(m, gone, placeholder=pattern) for m in out]

    # -- handles -------------------------------------------------------------------------------

    def _final(
        self, removal: Removal, produced: ProducedMessages, seen: dict[str, str] | None
    ) -> Removal:
        """``removal`` with the handle its marker must name: the one a produced placeholder
        or cut already names, or an ``id@hash`` one when the plain id was stored before with
        another text in this conversation."""
        cut = _cut_copy_handle(removal, produced)
        if cut is not None:
            return replace(removal, tool_call_id=cut)
        message = removal.message
        if removal.call is None and message.role == "tool" and message in produced:
            named = NAMED_RE.search(message.text)
            if named is not None and named.group(1) != removal.tool_call_id:
                return replace(removal, tool_call_id=named.group(1))
            return removal
        if removal.call is not None and message in produced:
            # A call a rewrite cleared: its original arguments were stored then, under the
            # handle its markers name (a digest of the cleared text would name nothing).
            cleared, named_handle = cleared_handle(removal.call.arguments)
            if named_handle is not None:
                return replace(removal, tool_call_id=named_handle)
            if cleared:
                return removal
        if seen is None or "@" in removal.handle or removal.handle.startswith("#"):
            return removal
        digest = text_digest(
            "arguments" if removal.call is not None else "tool",
            removal.original,
        )
        other = seen.setdefault(removal.handle, digest)
        if other == digest:
            return removal
        return replace(removal, tool_call_id=f"{removal.handle}@{digest[:8]}")

    @staticmethod
    def _produced(removal: Removal, produced: ProducedMessages) -> bool:
        """Whether ``removal`` is no original: a tool result or a call a rewrite produced
        (its original was kept when it was produced), or a built-in placeholder (produced by
        another process, or before a restart, on a history resumed from storage)."""
        if _cut_copy_handle(removal, produced) is not None:
            return True
        message = removal.message
        if removal.call is not None:  # a call of a produced message may be left whole
            return message in produced and cleared_handle(removal.call.arguments)[0]
        if message.role != "tool":
            return False
        return message in produced or is_builtin_placeholder(message)

    @staticmethod
    def _note_links(
        before: Sequence[Message], after: Sequence[Message], alignment: Alignment
    ) -> set[str]:
        """Ranges an earlier note named that the new notes no longer do (a drop note the
        guard merged into a new one): the new range lists them."""
        # A message kept verbatim names the same ranges in both histories: only the others
        # can name a range the new notes lost.
        kept = alignment.kept
        old = {
            r
            for i, m in enumerate(before)
            if not kept[i] and m.role != "tool"
            for r in note_ranges(m.text)
        }
        if not old:
            return set()
        new = {r for m in after if m.role != "tool" for r in note_ranges(m.text)}
        return old - new

    # -- storing -------------------------------------------------------------------------------

    def _put(
        self, store: _Puts, records: list[StoredOriginal], namespace: str
    ) -> set[str] | Problem | tuple[Problem, set[str]]:
        """Store ``records``: the handles the store holds afterwards, or the failure (with
        the eviction problem when some were evicted)."""
        if not records:
            return set()
        before = store.evictions if counts_evictions(store) else None
        try:
            store.put(*records)
        except Exception as exc:
            logger.debug("store %s raised", type(store).__name__, exc_info=True)
            return self._failed(exc, len(records))
        handles = {r.tool_call_id for r in records}
        now = store.evictions if counts_evictions(store) else None
        if before is None or now is None or now == before:
            return handles
        evicted = now - before
        held = set()
        for record in records:
            kept = store.get(namespace, record.tool_call_id, position=record.position)
            if kept is not None and kept.content_hash == record.content_hash:
                held.add(record.tool_call_id)
        name = type(self.store).__name__
        problem = Problem.fixed(
            "store_evicted",
            f"{name} evicted {evicted} least recently stored entries to stay under its size "
            f"bound; {len(handles) - len(held)} of the {len(records)} just stored are among "
            "them, and recalling an evicted one says it is gone",
            source=name,
            count=evicted,
        )
        logger.warning("originals store: %s", problem.shown)
        return problem, held

    # -- rendering -----------------------------------------------------------------------------

    def _render(
        self,
        after: list[Message],
        alignment: Alignment,
        removals: Sequence[Removal],
        held: set[str],
        span: StoredOriginal | None,
        targets: tuple[list[int], int | None, bool],
    ) -> list[Message]:
        """``after`` with every marker naming its handle (held ones only)."""
        out = list(after)
        cleared: dict[int, dict[str, tuple[ToolCall, str | None]]] = {}
        for removal in removals:
            j = alignment.replaced.get(removal.position)
            replacement = removal.replacement
            handle = removal.handle if removal.handle in held else None
            if j is None or replacement is None:
                continue
            if removal.kind == "cleared" and removal.call is not None:
                cleared.setdefault(j, {})[removal.call.id] = (removal.call, handle)
            elif removal.kind == "truncated":
                out[j] = with_truncation_handle(out[j], removal.original, handle)
            elif removal.kind in _PLACEHOLDER_KINDS and removal.message.role == "tool":
                if handle is None:
                    continue
                if RECALL_TOOL_NAME in replacement.text and handle in replacement.text:
                    continue  # the strategy's own recall text
                text = self._placeholder(removal, handle)
                content = removal.message.content
                if isinstance(content, str) and len(text) >= len(content):
                    out[j] = removal.message  # would grow: keep it whole, nothing removed
                else:
                    out[j] = with_content(replacement, text)
        for j, originals in cleared.items():
            out[j] = with_cleared_handles(out[j], originals)
        gone = [r for r in removals if r.kind in _GONE]
        if gone:
            self._name_range(out, gone, held, span, targets)
        return out

    @staticmethod
    def _name_range(
        out: list[Message],
        gone: Sequence[Removal],
        held: set[str],
        span: StoredOriginal | None,
        targets: tuple[list[int], int | None, bool],
    ) -> None:
        """Make the notes this rewrite wrote (or the summary, or the task) name the range."""
        range_key = span.tool_call_id if span is not None else None
        messages = sum(1 for r in gone if r.call is None)
        results = [
            (r.tool_name or "unknown", r.handle)
            for r in gone
            if r.call is None and r.message.role == "tool" and r.handle in held
        ]
        noted, fallback, summary = targets
        for j in noted:
            count = drop_note_count(out[j]) or messages
            out[j] = with_drop_note(out[j], count=count, range_handle=range_key, results=results)
        if range_key is None or fallback is None:
            return
        if summary:
            out[fallback] = with_range_note(out[fallback], count=messages, range_handle=range_key)
        else:
            out[fallback] = with_drop_note(
                out[fallback], count=messages, range_handle=range_key, results=results
            )

    @staticmethod
    def _apply(after: list[Message], changes: dict[int, Message]) -> list[Message]:
        out = list(after)
        for j, message in changes.items():
            out[j] = message
        return out

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


def _note_targets(
    after: Sequence[Message], alignment: Alignment
) -> tuple[list[int], int | None, bool]:
    """Where the range of what a rewrite dropped or summarised is named: the drop notes it
    wrote; else the message it added (a summary: the third item is true); else the newest
    user message (a strategy that dropped without a note)."""
    changed = sorted({*alignment.replaced.values(), *alignment.added})
    noted = [j for j in changed if after[j].role != "tool" and _fresh_note(after[j].text)]
    if noted:
        return noted, None, False
    added = [j for j in alignment.added if after[j].role in ("user", "assistant")]
    if added:
        return [], added[0], True
    task = next((j for j in range(len(after) - 1, -1, -1) if after[j].role == "user"), None)
    return [], task, False


def _cut_copy_handle(removal: Removal, produced: ProducedMessages) -> str | None:
    """The handle a user or assistant message a rewrite cut head + tail names (the guard's
    last resort cuts the newest assistant message rather than a pin): the original was kept
    under it when the cut was made, so the cut copy is no original and a range lists that
    handle. ``None`` for anything else."""
    message = removal.message
    if removal.call is not None or message.role == "tool" or message not in produced:
        return None
    match = TRUNCATION_RE.search(message.text)
    return None if match is None else match.group(2)


def _unheld_cleared(removal: Removal, produced: ProducedMessages) -> bool:
    """Whether ``removal`` is a call a rewrite cleared while the store did not hold its
    original (its markers are the plain ones): a range must not list it."""
    if removal.call is None or removal.message not in produced:
        return False
    return cleared_handle(removal.call.arguments) == (True, None)


def _fresh_note(text: str) -> bool:
    """Whether ``text`` ends with a drop note this rewrite wrote: the plain form, or the
    recall form naming a strategy's stand-in range."""
    match = DROP_NOTE_RE.search(text)
    return match is not None and match.group(2) in (None, STAND_IN_RANGE)


def store_cut_results(
    store: OriginalsStore,
    namespace: str,
    start: int,
    results: Sequence[Message],
    cut: Sequence[Message],
    *,
    history: Sequence[Message] = (),
    recall: bool = False,
) -> list[Message] | None:
    """Keep the originals of tool results cut on arrival (the agent's
    ``tool_result_truncation``, which the controller never sees); the cut results to add
    (with recall, their markers name the handle), or ``None`` when the store failed.

    ``results[k]`` goes into ``history`` (the history before them) at ``start + k`` as
    ``cut[k]``. A store failure is logged at WARNING without content, never raised.
    """
    pairs = [
        (k, whole)
        for k, (whole, short) in enumerate(zip(results, cut, strict=True))
        if short is not whole
    ]
    if not pairs:
        return list(cut)
    handles = Handles([*history, *results])
    try:
        store.put(
            *(
                StoredOriginal.from_message(
                    whole,
                    position=start + k,
                    kind="truncated",
                    namespace=namespace,
                    tool_call_id=handles.result(whole),
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
        return None
    out = list(cut)
    if recall:
        for k, whole in pairs:
            out[k] = with_truncation_handle(cut[k], whole.text, handles.result(whole))
    return out


_BUILTIN_TEMPLATES = (
    HIDDEN_PLACEHOLDER,
    KLIP13_PLACEHOLDER,
    SCHEMA1_PLACEHOLDER,
    SCHEMA1_SEED_PLACEHOLDER,
    DEFAULT_RECALL_TEMPLATE,
    LEGACY_RECALL_TEMPLATE,  # a history written before the shorter default
)
_BUILTIN_PLACEHOLDERS = tuple(placeholder_pattern(t) for t in _BUILTIN_TEMPLATES)
# Every rendering of a template starts with its text before the first field: a result that
# starts with none of these is no placeholder, without running the five patterns.
_BUILTIN_LEADS = tuple(leading_literal(t) for t in _BUILTIN_TEMPLATES)


def is_builtin_placeholder(message: Message) -> bool:
    """Whether a tool result's text is exactly a built-in placeholder (default templates
    only: a custom placeholder is recognised within the process that produced it)."""
    content = message.content
    if message.role != "tool" or not isinstance(content, str):
        return False
    if not content.startswith(_BUILTIN_LEADS):
        return False
    return any(p.fullmatch(content) for p in _BUILTIN_PLACEHOLDERS)


class _Puts(Protocol):
    def put(self, *records: StoredOriginal) -> None: ...

    def get(
        self, namespace: str, tool_call_id: str, *, position: int | None = None
    ) -> StoredOriginal | None: ...


class _Collect:
    """Keeps what :meth:`StoreHook._keep` would store, for one awaited write."""

    def __init__(self) -> None:
        self.records: tuple[StoredOriginal, ...] = ()

    def put(self, *records: StoredOriginal) -> None:
        self.records = records

    def get(
        self, namespace: str, tool_call_id: str, *, position: int | None = None
    ) -> StoredOriginal | None:
        return None  # never asked: it counts no evictions


class _Evicted(_Collect):
    """Stands for an awaited write that evicted: its ``put`` moves the count by what the
    store evicted, and ``get`` answers what the store still held when asked afterwards, so
    the rewrite is decided as after a ``put`` that evicted."""

    def __init__(self, evicted: int, held: dict[str, StoredOriginal | None]) -> None:
        super().__init__()
        self.evictions = 0
        self._evicted = evicted
        self._held = held

    def put(self, *records: StoredOriginal) -> None:
        self.evictions += self._evicted

    def get(
        self, namespace: str, tool_call_id: str, *, position: int | None = None
    ) -> StoredOriginal | None:
        return self._held.get(tool_call_id)


class _Raise(_Collect):
    """Fails as the awaited write did, so the rewrite is decided as after a failed ``put``."""

    def __init__(self, exc: Exception) -> None:
        super().__init__()
        self.exc = exc

    def put(self, *records: StoredOriginal) -> None:
        raise self.exc
