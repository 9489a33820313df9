"""Ranges: the list of what one rewrite dropped or summarised, kept under one handle.

A guard's drop note and a summary name one handle (``#r`` and 10 hex digits) instead of every
message they stand for; recalling it returns this list, one line per removed original with its
own handle, its role or tool, its size and the start of its text, oldest first, and the ranges
an earlier drop or summary named (so nothing dropped twice goes out of reach). The handle is a
hash of the list's handles: the same drop on the next request names the same range.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from .._history.messages import Message
from ..kit import range_handle
from ._records import DEFAULT_NAMESPACE, StoredOriginal

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ._removed import Removal

__all__ = ["PREVIEW_CHARS", "range_record"]

PREVIEW_CHARS = 60
"""Characters of a removed message's first line shown in a range's list."""


def _preview(text: str) -> str:
    line = next((part.strip() for part in text.split("\n") if part.strip()), "")
    return line if len(line) <= PREVIEW_CHARS else line[: PREVIEW_CHARS - 1] + "…"


def range_record(
    removals: Sequence[Removal],
    links: Sequence[str] = (),
    *,
    namespace: str = DEFAULT_NAMESPACE,
) -> StoredOriginal | None:
    """The range of ``removals`` (dropped or summarised, in order; a message's arguments
    removals follow it) and of the earlier ranges ``links`` names; ``None`` when empty.

    Example:
        >>> from ctxcompact.store import removed_originals
        >>> before = [Message.user("task"), Message.assistant("old"), Message.user("now")]
        >>> record = range_record(removed_originals(before, [before[0], before[2]]))
        >>> record.tool_call_id[:2], record.kind
        ('#r', 'range')
        >>> print(record.message.text)
        1 message(s) removed, oldest first; recall_tool_result(handle) shows one:
        #b45cc7997d assistant, 3 chars: old
    """
    rows: list[str] = []
    keys: list[str] = []
    calls: list[str] = []
    for removal in removals:
        if removal.call is not None:
            calls.append(f"{removal.tool_name or 'unknown'} {removal.handle}")
            continue
        _flush(rows, calls)
        message = removal.message
        keys.append(removal.handle)
        if message.role == "tool":
            rows.append(
                f"{removal.handle} result of {removal.tool_name or 'unknown'}, "
                f"{len(message.text)} chars: {_preview(message.text)}"
            )
        else:
            rows.append(
                f"{removal.handle} {message.role}, {len(message.text)} chars: "
                f"{_preview(message.text)}"
            )
    _flush(rows, calls)
    keys += [f"args {r.handle}" for r in removals if r.call is not None]
    earlier = sorted(set(links))
    if not keys and not earlier:
        return None
    count = sum(1 for r in removals if r.call is None)
    lines = [f"{count} message(s) removed, oldest first; recall_tool_result(handle) shows one:"]
    lines += rows
    if earlier:
        lines.append(f"earlier removals: {' '.join(earlier)}")
    digest = hashlib.sha256("\n".join([*keys, *earlier]).encode("utf-8", "surrogatepass"))
    return StoredOriginal.from_message(
        Message.user("\n".join(lines)),
        position=removals[0].position if removals else 0,
        kind="range",
        namespace=namespace,
        tool_call_id=range_handle(digest.hexdigest()),
    )


def _flush(rows: list[str], calls: list[str]) -> None:
    """Add the pending calls (arguments of the message just listed) to its row."""
    if calls and rows:
        rows[-1] += f" (calls: {', '.join(calls)})"
    calls.clear()
