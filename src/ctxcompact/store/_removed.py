"""What a rewrite removed: the messages of ``before`` not kept verbatim in ``after``.

The two histories are aligned positionally, in order, never by id alone (ids are re-used
across turns in real traces):

1. Every message of ``after`` that *is* (same object) a message of ``before`` is an anchor;
   anchors are taken in increasing order, so nothing is matched backwards.
2. Between two anchors, an ``after`` message equal to a ``before`` message of the same role and
   ids is kept too (a strategy that copied a message without changing it).
3. What is left of ``after`` between the same anchors is either the replacement of a ``before``
   message (a tool result answering the same ``tool_call_id``, an assistant message with the
   same tool calls) or a message the rewrite added (a summary).
4. Every ``before`` message neither kept nor replaced was removed.

Kinds: a replaced message whose replacement keeps its first or last characters (at least 16,
or half the original when shorter) was ``truncated``; any other replacement is ``masked`` when
its text names the original's ``tool_call_id`` (Schema 1's placeholders do) and ``hidden``
when it does not (ToolResultHiding's fixed placeholder). A message that is gone was
``summarised`` when the rewrite added a message (a summary stands for it) and ``dropped`` when
it did not.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..exceptions import StoreError
from ._records import DEFAULT_NAMESPACE, RemovalKind, StoredOriginal

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._history.messages import Message
    from ._records import OriginalsStore

__all__ = ["Removal", "record_removed", "removed_originals"]

_KEPT_CHARS = 16


@dataclass(frozen=True, slots=True)
class Removal:
    """One message of a history that a rewrite did not keep verbatim.

    Attributes:
        position: Its index in the history before the rewrite.
        message: The original message.
        kind: ``hidden``, ``masked``, ``truncated``, ``dropped`` or ``summarised``.
        tool_call_id: The id it is stored and recalled under: the tool result's id, or
            ``"#<position>"`` for any other message.
        tool_name: The name of the call a tool result answers, when that call is found.
        replacement: The message that took its place, for a replaced one.

    Example:
        >>> from ctxcompact import Message
        >>> Removal(3, Message.tool("c1", "x"), "dropped", "c1", None, None).kind
        'dropped'
    """

    position: int
    message: Message
    kind: RemovalKind
    tool_call_id: str
    tool_name: str | None
    replacement: Message | None


def _shape(message: Message) -> tuple[str, str | None, tuple[str, ...]]:
    return (message.role, message.tool_call_id, message.tool_call_ids)


def _replaceable(message: Message) -> bool:
    """Whether a changed copy of ``message`` is recognisable as its replacement."""
    return (message.role == "tool" and message.tool_call_id is not None) or bool(
        message.role == "assistant" and message.tool_calls
    )


def _align_segment(
    before: Sequence[Message],
    after: Sequence[Message],
    b_range: range,
    a_range: range,
    kept: list[bool],
    replaced: dict[int, Message],
) -> bool:
    """Steps 2 and 3 between two anchors; whether an added message was found."""
    candidates: dict[tuple[str, str | None, tuple[str, ...]], list[int]] = {}
    for i in b_range:
        candidates.setdefault(_shape(before[i]), []).append(i)
    added = False
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
            kept[match] = True
            floor = match + 1
        elif start < len(indices) and _replaceable(message):
            replaced[indices[start]] = message
            floor = indices[start] + 1
        else:
            added = True
    return added


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
    text, new = original.text, replacement.text
    need = min(_KEPT_CHARS, max(1, len(text) // 2))
    if len(new) < len(text) and text and (new[:need] == text[:need] or new[-need:] == text[-need:]):
        return "truncated"
    if original.tool_call_id and original.tool_call_id in new:
        return "masked"
    return "hidden"


def removed_originals(before: Sequence[Message], after: Sequence[Message]) -> list[Removal]:
    """The messages of ``before`` that ``after`` does not keep verbatim, oldest first.

    Pure: neither history is changed. See the module docstring for how the histories are
    aligned and how each removal's kind is decided.

    Example:
        >>> from ctxcompact import Message, ToolCall
        >>> ls = ToolCall(id="c1", name="ls", arguments="{}")
        >>> call = Message.assistant(None, tool_calls=[ls])
        >>> before = [Message.user("list"), call, Message.tool("c1", "a.py b.py")]
        >>> after = [before[0], before[1], Message.tool("c1", "[hidden]")]
        >>> [(r.position, r.kind, r.tool_name) for r in removed_originals(before, after)]
        [(2, 'hidden', 'ls')]
    """
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
    kept = [False] * len(before)
    replaced: dict[int, Message] = {}
    added = False
    prev_i, prev_j = -1, -1
    for i, j in [*anchors, (len(before), len(after))]:
        if i - prev_i > 1 or j - prev_j > 1:
            added |= _align_segment(
                before, after, range(prev_i + 1, i), range(prev_j + 1, j), kept, replaced
            )
        if i < len(before):
            kept[i] = True
        prev_i, prev_j = i, j
    names = _tool_names(before)
    gone: RemovalKind = "summarised" if added else "dropped"
    removals: list[Removal] = []
    for i, message in enumerate(before):
        if kept[i]:
            continue
        replacement = replaced.get(i)
        kind = _replacement_kind(message, replacement) if replacement is not None else gone
        removals.append(
            Removal(
                position=i,
                message=message,
                kind=kind,
                tool_call_id=message.tool_call_id
                if message.role == "tool" and message.tool_call_id
                else f"#{i}",
                tool_name=names.get(i),
                replacement=replacement,
            )
        )
    return removals


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
        >>> from ctxcompact import Message
        >>> from ctxcompact.store import MemoryStore
        >>> before = [Message.user("hi"), Message.assistant("hello")]
        >>> record_removed(MemoryStore(), before, before[1:])
        1
    """
    removals = removed_originals(before, after)
    if not removals:
        return 0
    try:
        records = [
            StoredOriginal.from_message(
                r.message,
                position=r.position,
                kind=r.kind,
                namespace=namespace,
                tool_call_id=r.tool_call_id,
                tool_name=r.tool_name,
            )
            for r in removals
        ]
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
