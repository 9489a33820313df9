"""Pins survive every rewrite: the controller's check after each strategy and transform.

The pinned messages of the history a strategy was given (:func:`ctxcompact.kit.pinned_indices`:
system messages, the first and the newest user message, the user's pins) must still be in its
output: as the same message, with a ctxcompact note added, cut head + tail (a cut keeps the
message, and with a store its handle), or with their text verbatim in some message of the
output. What a strategy lost is put back where it was relative to the messages around it: a
hidden pinned result gets its content back, a dropped or summarised message is inserted after
the nearest earlier message that was kept (never inside a tool-call group), with its whole
group when it is part of one. The count of messages put back is reported
(``pin_restored``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._history.groups import tool_groups
from .._history.validate import check_history
from ..kit import strip_notes
from ..store._removed import align

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._history.messages import Message

__all__ = ["restore_pins"]


def restore_pins(
    before: Sequence[Message], after: Sequence[Message], pinned: frozenset[int]
) -> tuple[list[Message], int]:
    """``after`` with the pinned messages of ``before`` it lost put back, and how many.

    Never makes a history worse: when putting them back would break tool-call pairing, the
    output is returned as it was (and 0).

    Example:
        >>> from ctxcompact import Message
        >>> before = [Message.system("s"), Message.user("task"), Message.assistant("a"),
        ...           Message.user("now")]
        >>> out, n = restore_pins(before, [before[0], Message.user("summary"), before[3]],
        ...                       frozenset({0, 1, 3}))
        >>> [m.text for m in out], n
        (['s', 'task', 'summary', 'now'], 1)
    """
    present = {id(m) for m in after}
    missing = [i for i in sorted(pinned) if id(before[i]) not in present]
    if not missing:
        return list(after), 0
    alignment = align(before, after)
    out = list(after)
    lost: list[int] = []
    texts: list[str] | None = None
    for i in missing:
        if alignment.kept[i] or i in alignment.annotated:
            continue
        j = alignment.replaced.get(i)
        original = before[i]
        if j is not None:
            if _is_cut(original.text, strip_notes(after[j].text)):  # a note may follow
                continue  # cut to fit: kept, head and tail
            out[j] = original  # hidden or masked: the same place, the same ids
            lost.append(i)
            continue
        text = strip_notes(original.text)
        if texts is None:
            texts = [strip_notes(m.text) for m in after]
        if text and any(text in t for t in texts):
            continue  # its text is still in the view, verbatim
        lost.append(i)
    inserted = [i for i in lost if alignment.replaced.get(i) is None]
    if inserted:
        places = {**alignment.kept_at, **alignment.replaced}
        out = _insert(before, out, places, inserted)
    if not lost:
        return out, 0
    if len(check_history(out)) > len(check_history(after)):
        return list(after), 0
    return out, len(lost)


def _is_cut(text: str, new: str) -> bool:
    if len(new) >= len(text) or not text:
        return False
    need = min(16, max(1, len(text) // 2))
    return new[:need] == text[:need] and new[-need:] == text[-need:]


def _insert(
    before: Sequence[Message],
    out: list[Message],
    places: dict[int, int],
    lost: list[int],
) -> list[Message]:
    """``out`` with ``before[i]`` for each ``i`` of ``lost`` (and the rest of its tool-call
    group) inserted after the nearest earlier message of ``before`` still there
    (``places``: ``before`` index -> its index in ``out``)."""
    groups: dict[int, tuple[int, ...]] = {}
    for group in tool_groups(before):
        members = (group.call_index, *group.result_indices)
        for k in members:
            groups[k] = members
    wanted: set[int] = set()
    for i in lost:
        wanted.update(k for k in groups.get(i, (i,)) if k not in places)
    # Each message of out, and each inserted one, by the before index it stands for.
    slots: list[tuple[int | None, Message]] = [(None, m) for m in out]
    for i, j in places.items():
        slots[j] = (i, out[j])
    for i in sorted(wanted):
        position = 0
        for p, (source, _) in enumerate(slots):
            if source is not None and source < i:
                position = p + 1
        # Never inside a tool-call group: past the results of a call it would follow.
        while (
            0 < position < len(slots)
            and slots[position][1].role == "tool"
            and (before[i].role != "tool")
        ):
            position += 1
        slots.insert(position, (i, before[i]))
    return [m for _, m in slots]
