"""Cutting messages head + tail to a token target (seed 003 L1 with sizes chosen to fit).

:class:`~ctxcompact.strategies.ToolResultTruncation` cuts at fixed character counts; the
guard needs the longest cut that fits a number of tokens under any counter, and to share a
room between several results (:func:`water_fill`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._history.messages import Message, TextPart
from ..kit import truncation_marker, with_content

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["cut_message", "cut_text", "shrink", "water_fill"]


def water_fill(items: list[tuple[int, int, int]], room: int) -> list[tuple[int, int]]:
    """``(index, target)`` for each ``(index, tokens, minimum)`` item to cut so all fit ``room``.

    The largest cap ``c`` with ``sum(max(minimum, min(tokens, c))) <= room``: every item
    above it is cut to it (or to its minimum), the others stay whole.
    """

    def need(cap: int) -> int:
        return sum(max(low, min(size, cap)) for _, size, low in items)

    if need(max((size for _, size, _ in items), default=0)) <= room:
        return []
    lo, hi = 0, max(size for _, size, _ in items)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if need(mid) <= room:
            lo = mid
        else:
            hi = mid - 1
    return [(i, max(low, lo)) for i, size, low in items if size > max(low, lo)]


def cut_message(message: Message, keep: int, handle: str | None = None) -> Message:
    """``message`` with its texts cut to ``keep`` characters in all, head + marker + tail
    (the recall form of the marker, naming ``handle``, when given)."""
    content = message.content
    if isinstance(content, str):
        return with_content(message, cut_text(content, keep, handle))
    if not content:
        return message
    total = sum(len(p.text) for p in content if isinstance(p, TextPart))
    parts = []
    for part in content:
        if isinstance(part, TextPart) and total:
            part_keep = len(part.text) * keep // total
            if part_keep < len(part.text):
                part = part.model_copy(update={"text": cut_text(part.text, part_keep, handle)})
        parts.append(part)
    return message.model_copy(update={"content": tuple(parts)})


def cut_text(text: str, keep: int, handle: str | None = None) -> str:
    n = len(text)
    if keep >= n:
        return text
    head = keep // 2
    tail = keep - head
    offset = text.count("\n", 0, head) + 1
    marker = truncation_marker(n - keep, handle=handle, offset=offset)
    return text[:head] + marker + text[n - tail :]


def shrink(
    message: Message,
    target: int,
    count: Callable[[Message], int],
    finish: Callable[[Message], Message] | None = None,
    handle: str | None = None,
) -> Message | None:
    """The longest cut of ``message`` (``cut_message``, then ``finish``) costing at most
    ``target`` tokens; ``None`` when even the shortest costs more."""
    done = finish or (lambda m: m)
    content = message.content
    if isinstance(content, str):
        length = len(content)
    else:
        length = sum(len(p.text) for p in content or () if isinstance(p, TextPart))
    best = done(cut_message(message, 0, handle))
    if count(best) > target:
        return None
    lo, hi = 0, length - 1
    while lo < hi:  # the largest keep whose cut fits (the cost grows with keep, up to a digit)
        mid = (lo + hi + 1) // 2
        candidate = done(cut_message(message, mid, handle))
        if count(candidate) <= target:
            lo, best = mid, candidate
        else:
            hi = mid - 1
    return best
