"""What a rewrite removed: the messages of ``before`` not kept verbatim in ``after``.

The two histories are aligned positionally, in order, never by id alone (ids are re-used
across turns in real traces):

1. Every message of ``after`` that *is* (same object) a message of ``before`` is an anchor;
   anchors are taken in increasing order, so nothing is matched backwards.
2. Between two anchors, an ``after`` message equal to a ``before`` message of the same role and
   ids is kept too (a strategy that copied a message without changing it).
3. What is left of ``after`` between the same anchors is either the replacement of a ``before``
   message or a message the rewrite added (a summary). A replacement is a tool result
   answering the same ``tool_call_id``, an assistant message with the same tool calls, or a
   message of the same role whose text is the original's with other ctxcompact notes (see
   :func:`~ctxcompact.kit.strip_notes`; an *annotation*, such as the guard's drop note:
   nothing was removed) or a shorter text keeping its first or last characters around a
   ctxcompact truncation marker (a cut).
4. Every ``before`` message neither kept, annotated nor replaced was removed.

Kinds: a replaced message whose replacement keeps its first or last characters (at least 16,
or half the original when shorter) was ``truncated``; any other replaced tool result is
``masked`` when its text names the original's ``tool_call_id`` (Schema 1's placeholders do)
and ``hidden`` when it does not (ToolResultHiding's fixed placeholder). An assistant message
whose tool calls' arguments changed gives one ``cleared`` removal per changed call. A message
that is gone was ``summarised`` when the rewrite added a message (a summary stands for it) and
``dropped`` when it did not; a gone assistant message with tool calls also gives one removal
per call, for its arguments.

Each removal carries its recall handle (:mod:`ctxcompact.kit._markers` documents the scheme):
a tool result's id (``id@`` and 8 hex digits of its text's hash when the id is re-used in
``before``), ``args:`` and that for a call's arguments, ``#`` and 10 hex digits of the hash of
the message's role and text for any other message (:class:`Handles`).
"""

from __future__ import annotations

import bisect
import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._history.messages import Message, TextPart
from ..exceptions import StoreError
from ..kit import (
    TRUNCATION_RE,
    arguments_handle,
    message_handle,
    note_ranges,
    result_handle,
    strip_notes,
    with_content,
)
from ._records import DEFAULT_NAMESPACE, RemovalKind, StoredOriginal

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._history.messages import ToolCall
    from ._records import OriginalsStore

__all__ = [
    "Alignment",
    "Handles",
    "Removal",
    "align",
    "record_removed",
    "records_of",
    "removals_of",
    "removed_originals",
    "text_digest",
    "without_notes",
]

_KEPT_CHARS = 16


@dataclass(frozen=True, slots=True)
class Removal:
    """One thing a rewrite took out of the view: a message, or a call's arguments.

    Attributes:
        position: The message's index in the history before the rewrite.
        message: The original message (ctxcompact's own notes taken off its text).
        kind: ``hidden``, ``masked``, ``truncated``, ``cleared``, ``dropped`` or
            ``summarised``.
        tool_call_id: The handle it is stored and recalled under (see the module
            docstring); :attr:`handle` is the same.
        tool_name: The name of the call a tool result answers (or of the call whose
            arguments these are), when known.
        replacement: The message that took its place, for a replaced one.
        call: For the arguments of a call (``cleared``, or a call dropped or summarised with
            its message): the original call; ``None`` otherwise.
        links: The range handles ctxcompact's notes on the removed message named (an
            earlier drop or summary), so a new range can list them.

    Example:
        >>> Removal(3, Message.tool("c1", "x"), "dropped", "c1", None, None).kind
        'dropped'
    """

    position: int
    message: Message
    kind: RemovalKind
    tool_call_id: str
    tool_name: str | None
    replacement: Message | None
    call: ToolCall | None = None
    links: tuple[str, ...] = ()

    @property
    def handle(self) -> str:
        """The recall handle (:attr:`tool_call_id`)."""
        return self.tool_call_id

    @property
    def original(self) -> str:
        """What a recall of :attr:`handle` returns: the call's arguments for arguments,
        else the message's text."""
        return self.call.arguments if self.call is not None else self.message.text


@dataclass(frozen=True, slots=True)
class Alignment:
    """How ``after`` lines up with ``before`` (see the module docstring).

    Attributes:
        kept: Per ``before`` index, whether it is in ``after`` verbatim.
        replaced: ``before`` index -> ``after`` index of its replacement (annotations too).
        added: ``after`` indices of the messages the rewrite added.
        annotated: The ``before`` indices whose replacement holds their whole text.
        kept_at: ``before`` index -> ``after`` index of each kept message.
    """

    kept: list[bool]
    replaced: dict[int, int]
    added: list[int]
    annotated: frozenset[int]
    kept_at: dict[int, int]


def _shape(message: Message) -> tuple[str, str | None, tuple[str, ...]]:
    return (message.role, message.tool_call_id, message.tool_call_ids)


def _replaceable(message: Message) -> bool:
    """Whether a changed copy of ``message`` is recognisable as its replacement by its ids."""
    return (message.role == "tool" and message.tool_call_id is not None) or bool(
        message.role == "assistant" and message.tool_calls
    )


def _cut_of(text: str, new: str) -> bool:
    """Whether ``new`` is shorter than ``text`` and keeps its first or last characters."""
    if len(new) >= len(text) or not text:
        return False
    need = min(_KEPT_CHARS, max(1, len(text) // 2))
    return new[:need] == text[:need] or new[-need:] == text[-need:]


def _annotates(original: Message, new: Message) -> bool:
    """Whether ``new`` is ``original`` with other ctxcompact notes: nothing was removed."""
    text = strip_notes(original.text).rstrip("\n")
    return bool(text) and text == strip_notes(new.text).rstrip("\n")


def _align_segment(
    before: Sequence[Message],
    after: Sequence[Message],
    b_range: range,
    a_range: range,
    kept: dict[int, int],
    replaced: dict[int, int],
    added: list[int],
) -> None:
    """Steps 2 and 3 between two anchors."""
    candidates: dict[tuple[str, str | None, tuple[str, ...]], list[int]] = {}
    for i in b_range:
        candidates.setdefault(_shape(before[i]), []).append(i)
    floor = b_range.start  # the next before index a match may use: order is kept
    for j in a_range:
        message = after[j]
        indices = candidates.get(_shape(message), [])
        start = bisect.bisect_left(indices, floor)
        content = message.content
        # Content first: a replaced result differs there, and comparing it is cheap.
        match = next(
            (i for i in indices[start:] if before[i].content == content and before[i] == message),
            None,
        )
        if match is not None:
            kept[match] = j
            floor = match + 1
            continue
        if start < len(indices):
            if _replaceable(message):
                found: int | None = indices[start]
            else:  # the first later message of its role that it annotates or cuts
                cut = message.role != "tool" and TRUNCATION_RE.search(message.text) is not None
                found = next(
                    (
                        i
                        for i in indices[start:]
                        if message.role != "tool"
                        and (
                            _annotates(before[i], message)
                            or (cut and _cut_of(before[i].text, message.text))
                        )
                    ),
                    None,
                )
            if found is not None:
                replaced[found] = j
                floor = found + 1
                continue
        added.append(j)


def _align_pair(
    before: Sequence[Message],
    after: Sequence[Message],
    i: int,
    j: int,
    kept: dict[int, int],
    replaced: dict[int, int],
    added: list[int],
) -> None:
    """:func:`_align_segment` of one ``before`` and one ``after`` message (the same
    decisions, without its index): a rewrite that replaces results one by one between kept
    messages makes thousands of these."""
    old, message = before[i], after[j]
    if _shape(old) != _shape(message):
        added.append(j)
    elif old.content == message.content and old == message:
        kept[i] = j
    elif _replaceable(message) or (
        message.role != "tool"
        and (
            _annotates(old, message)
            or (TRUNCATION_RE.search(message.text) is not None and _cut_of(old.text, message.text))
        )
    ):
        replaced[i] = j
    else:
        added.append(j)


def align(before: Sequence[Message], after: Sequence[Message]) -> Alignment:
    """Line ``after`` up with ``before`` (pure; see the module docstring)."""
    by_object: dict[int, list[int]] = {}
    for i, message in enumerate(before):
        by_object.setdefault(id(message), []).append(i)
    anchors: list[tuple[int, int]] = []
    last = -1
    for j, message in enumerate(after):
        for i in by_object.get(id(message), ()):
            if i > last:
                anchors.append((i, j))
                last = i
                break
    kept_at: dict[int, int] = {}
    replaced: dict[int, int] = {}
    added: list[int] = []
    prev_i, prev_j = -1, -1
    for i, j in [*anchors, (len(before), len(after))]:
        if i - prev_i == 2 and j - prev_j == 2:  # one message each side: most rewrites
            _align_pair(before, after, prev_i + 1, prev_j + 1, kept_at, replaced, added)
        elif i - prev_i > 1 or j - prev_j > 1:
            _align_segment(
                before, after, range(prev_i + 1, i), range(prev_j + 1, j), kept_at, replaced, added
            )
        if i < len(before):
            kept_at[i] = j
        prev_i, prev_j = i, j
    kept = [False] * len(before)
    for i in kept_at:
        kept[i] = True
    annotated = frozenset(
        i
        for i, j in replaced.items()
        if before[i].role != "tool" and not before[i].tool_calls and _annotates(before[i], after[j])
    )
    return Alignment(kept, replaced, sorted(added), annotated, kept_at)


def _tool_names(before: Sequence[Message]) -> dict[int, str]:
    """The call name of each tool result, from the nearest assistant message calling its id."""
    names: dict[int, str] = {}
    calls: dict[str, str] = {}
    for i, message in enumerate(before):
        if message.role == "assistant" and message.tool_calls:
            calls = {c.id: c.name for c in message.tool_calls}
        elif message.role == "tool" and message.tool_call_id in calls:
            names[i] = calls[message.tool_call_id]
    return names


def _replacement_kind(original: Message, replacement: Message) -> RemovalKind:
    if _cut_of(original.text, replacement.text):
        return "truncated"
    if original.tool_call_id and original.tool_call_id in replacement.text:
        return "masked"
    return "hidden"


def without_notes(message: Message) -> Message:
    """``message`` without the ctxcompact notes a rewrite appended to its text (the same
    object when it has none): the original the notes were added to."""
    content = message.content
    if isinstance(content, str):
        text = strip_notes(content)
        return message if text is content or text == content else with_content(message, text)
    if not content or message.role == "tool":
        return message
    last = content[-1]
    if isinstance(last, TextPart) and not strip_notes("\n\n" + last.text):
        return message.model_copy(update={"content": tuple(content[:-1])})
    return message


class Handles:
    """The recall handle of each original of one history (see the module docstring).

    Digests are of the text a recall returns (a message's text, a call's arguments), so a
    copy that differs elsewhere (a cleared call, a note appended) keeps the handle of its
    original, and equal texts share one: they recall the same.

    Example:
        >>> h = [Message.tool("c1", "a"), Message.tool("c1", "b"), Message.user("hi")]
        >>> handles = Handles(h)
        >>> handles.result(h[0]), handles.message(h[2])
        ('c1@5015fc00', '#977de55195')
    """

    __slots__ = ("reused",)

    def __init__(self, before: Sequence[Message]) -> None:
        results: set[str] = set()
        calls: set[str] = set()
        reused: set[str] = set()
        for message in before:
            if message.role == "tool" and message.tool_call_id is not None:
                (reused if message.tool_call_id in results else results).add(message.tool_call_id)
            for call in message.tool_calls or ():
                (reused if call.id in calls else calls).add(call.id)
        self.reused = reused

    def result(self, message: Message) -> str:
        """The handle of a tool result."""
        call_id = message.tool_call_id or ""
        if call_id in self.reused:
            return result_handle(call_id, text_digest("tool", message.text))
        return result_handle(call_id)

    def arguments(self, call: ToolCall) -> str:
        """The handle of a call's arguments."""
        if call.id in self.reused:
            return arguments_handle(call.id, text_digest("arguments", call.arguments))
        return arguments_handle(call.id)

    def message(self, message: Message) -> str:
        """The handle of any message (a tool result's own, a ``#`` one for others)."""
        if message.role == "tool" and message.tool_call_id is not None:
            return self.result(message)
        return message_handle(text_digest(message.role, message.text))


def text_digest(kind: str, text: str) -> str:
    """The hex SHA-256 a handle takes its digits from: of ``kind`` and ``text``."""
    data = f"{kind}\x00{text}".encode("utf-8", "surrogatepass")
    return hashlib.sha256(data).hexdigest()


def removed_originals(before: Sequence[Message], after: Sequence[Message]) -> list[Removal]:
    """What ``after`` took out of the view of ``before``, in order (pure; see the module
    docstring for how the histories are aligned and each removal's kind).

    Example:
        >>> from ctxcompact import ToolCall
        >>> ls = ToolCall(id="c1", name="ls", arguments="{}")
        >>> call = Message.assistant(None, tool_calls=[ls])
        >>> before = [Message.user("list"), call, Message.tool("c1", "a.py b.py")]
        >>> after = [before[0], before[1], Message.tool("c1", "[hidden]")]
        >>> [(r.position, r.kind, r.tool_name) for r in removed_originals(before, after)]
        [(2, 'hidden', 'ls')]
    """
    return removals_of(before, after, align(before, after))


def removals_of(
    before: Sequence[Message],
    after: Sequence[Message],
    alignment: Alignment,
    handles: Handles | None = None,
) -> list[Removal]:
    """The removals an :func:`align`\\ ment shows (:func:`removed_originals` in two steps)."""
    handles = handles or Handles(before)
    names = _tool_names(before)
    gone: RemovalKind = "summarised" if alignment.added else "dropped"
    removals: list[Removal] = []
    for i, message in enumerate(before):
        if alignment.kept[i] or i in alignment.annotated:
            continue
        j = alignment.replaced.get(i)
        replacement = after[j] if j is not None else None
        if message.role == "tool" and message.tool_call_id is not None:
            kind = gone if replacement is None else _replacement_kind(message, replacement)
            handle = handles.result(message)
            removals.append(Removal(i, message, kind, handle, names.get(i), replacement))
            continue
        original = without_notes(message)
        links = tuple(note_ranges(message.text)) if original is not message else ()
        calls = message.tool_calls or ()
        if replacement is None:
            removals.append(
                Removal(i, original, gone, handles.message(original), None, None, links=links)
            )
            removals.extend(
                Removal(i, original, gone, handles.arguments(c), c.name, None, c) for c in calls
            )
            continue
        if original.text != without_notes(replacement).text:
            kind = _replacement_kind(original, replacement)
            handle = handles.message(original)
            removals.append(Removal(i, original, kind, handle, None, replacement, links=links))
        new_calls = {c.id: c for c in replacement.tool_calls or ()}
        removals.extend(
            Removal(i, original, "cleared", handles.arguments(c), c.name, replacement, c)
            for c in calls
            if c.id in new_calls and new_calls[c.id].arguments != c.arguments
        )
    return removals


def records_of(
    removals: Sequence[Removal], *, namespace: str = DEFAULT_NAMESPACE
) -> list[StoredOriginal]:
    """The store records of ``removals``: each original under its handle (a call's
    arguments as an assistant message holding that one call)."""
    return [
        StoredOriginal.from_message(
            r.message if r.call is None else Message.assistant(None, tool_calls=[r.call]),
            position=r.position,
            kind=r.kind,
            namespace=namespace,
            tool_call_id=r.tool_call_id,
            tool_name=r.tool_name,
        )
        for r in removals
    ]


def record_removed(
    store: OriginalsStore,
    before: Sequence[Message],
    after: Sequence[Message],
    *,
    namespace: str = DEFAULT_NAMESPACE,
) -> int:
    """Store every original :func:`removed_originals` finds; the number stored.

    Storing the same removal again (the same rewrite on the next request) only marks it as
    recent, so calling this before every model call is safe.

    Raises:
        StoreError: The store failed; whatever it raised is the cause. Catch it, report it and
            keep the rewrite: the history itself is not affected.

    Example:
        >>> from ctxcompact.store import MemoryStore
        >>> before = [Message.user("hi"), Message.assistant("hello")]
        >>> record_removed(MemoryStore(), before, before[1:])
        1
    """
    removals = removed_originals(before, after)
    if not removals:
        return 0
    try:
        records = records_of(removals, namespace=namespace)
    except Exception as exc:  # a message no record can hold: still a StoreError to report
        raise StoreError(
            f"{len(removals)} removed original(s) could not be serialised: {type(exc).__name__}"
        ) from exc
    try:
        store.put(*records)
    except StoreError:
        raise
    except Exception as exc:
        raise StoreError(
            f"{type(store).__name__}.put failed on {len(records)} record(s): "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    return len(records)
