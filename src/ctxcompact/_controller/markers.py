"""What the store hook writes into the view: each marker naming its original's real handle.

Strategies write the plain markers (or, with the context's ``recall``, the recall forms with
stand-in handles of the right length, so their budgets hold); these functions put in the real
handle once the store holds the original, or the plain form when it does not.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from .._history.messages import Message, TextPart
from ..kit import (
    CLEARED_RE,
    DROP_MARKER,
    DROP_NOTE_RE,
    HIDDEN_PLACEHOLDER,
    RANGE_NOTE_RE,
    TRUNCATION_RE,
    cleared_marker,
    drop_note,
    range_note,
    truncation_marker,
    with_content,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence, Set

    from .._history.messages import ToolCall

__all__ = [
    "NAMED_RE",
    "cleared_handle",
    "named_handles",
    "with_cleared_handles",
    "with_drop_note",
    "with_range_note",
    "with_truncation_handle",
    "without_handles",
]

NAMED_RE = re.compile(r'recall_tool_result\("([^"\n]{1,300})"')
"""A handle a marker names (the first one in a text)."""

# Every handle a text's markers name; inside a call's JSON arguments the quotes are escaped.
_NAMED_ALL = re.compile(r'recall_tool_result\(\\?"([^"\\\n]{1,300})\\?"')
_NOTE_RESULTS = re.compile(r"; results: ([^\]\n]*)\]\Z")


def cleared_handle(arguments: str) -> tuple[bool, str | None]:
    """Whether a call's ``arguments`` (JSON) hold a value cleared by the default marker, and
    the handle its recall form names (``None``: the plain form, nothing to recall).

    Example:
        >>> cleared_handle('{"path": "a", "text": "[cleared: 300 chars]"}')
        (True, None)
        >>> from ctxcompact.kit import cleared_marker
        >>> cleared_handle(json.dumps({"text": cleared_marker(300, handle="args:w1")}))
        (True, 'args:w1')
        >>> cleared_handle('{"path": "a"}')
        (False, None)
    """
    if "[cleared: " not in arguments:
        return False, None
    try:
        value = json.loads(arguments)
    except ValueError:
        return False, None
    cleared = False
    pending: list[Any] = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            pending.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            pending.extend(reversed(item))
        elif isinstance(item, str):
            match = CLEARED_RE.fullmatch(item)
            if match is not None:
                if match.group(2) is not None:
                    return True, match.group(2)
                cleared = True
    return cleared, None


def _map_text(message: Message, change: Callable[[str], str]) -> Message:
    """``message`` with ``change`` applied to its text (each text part); the same object
    when nothing changed."""
    content = message.content
    if isinstance(content, str):
        new = change(content)
        return message if new == content else with_content(message, new)
    if not content:
        return message
    parts = [
        part.model_copy(update={"text": change(part.text)}) if isinstance(part, TextPart) else part
        for part in content
    ]
    if all(a is b or a == b for a, b in zip(parts, content, strict=True)):
        return message
    return message.model_copy(update={"content": tuple(parts)})


def with_truncation_handle(replacement: Message, original: str, handle: str | None) -> Message:
    """``replacement`` (a cut of ``original``) with each cut marker naming ``handle`` and the
    line of ``original`` the cut starts on; the plain marker when ``handle`` is ``None``."""

    def change(text: str) -> str:
        out: list[str] = []
        last = 0
        for match in TRUNCATION_RE.finditer(text):
            head = text[last : match.start()]
            # Where the head sits in the original (its start for a string result; a text
            # part's place for parts): the cut starts on the line after it.
            at = 0 if original.startswith(head) else original.find(head)
            offset = original.count("\n", 0, max(at, 0) + len(head)) + 1 if at >= 0 else 1
            out.append(head)
            out.append(truncation_marker(int(match.group(1)), handle=handle, offset=offset))
            last = match.end()
        if not out:
            return text
        out.append(text[last:])
        return "".join(out)

    return _map_text(replacement, change)


def with_cleared_handles(
    replacement: Message, originals: dict[str, tuple[ToolCall, str | None]]
) -> Message:
    """``replacement`` (an assistant message whose calls were cleared) with every cleared
    value naming its call's arguments handle. ``originals``: call id -> (the original call,
    its handle or ``None`` when the store does not hold it: the strategy's marker stays).

    A value the strategy changed is a cleared one, whatever its marker says; the recall form
    is kept only when it is shorter than the original value, else the value comes back whole.
    """
    calls = replacement.tool_calls or ()
    new_calls = []
    changed = False
    for call in calls:
        entry = originals.get(call.id)
        if entry is None:
            new_calls.append(call)
            continue
        original, handle = entry
        if handle is None:
            new_calls.append(call)
            continue
        try:
            old_value = json.loads(original.arguments)
            new_value = json.loads(call.arguments)
        except ValueError:
            new_calls.append(call)
            continue
        marked = _mark(old_value, new_value, handle)
        text = json.dumps(marked, ensure_ascii=False)
        if text == call.arguments:
            new_calls.append(call)
            continue
        changed = True
        new_calls.append(call.model_copy(update={"arguments": text}))
    return replacement.replace(tool_calls=new_calls) if changed else replacement


def _mark(old: Any, new: Any, handle: str) -> Any:
    if isinstance(old, str) and isinstance(new, str) and old != new:
        marker = cleared_marker(len(old), handle=handle)
        return marker if len(marker) < len(old) else old
    if isinstance(old, dict) and isinstance(new, dict):
        return {k: _mark(old[k], v, handle) if k in old else v for k, v in new.items()}
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [_mark(a, b, handle) for a, b in zip(old, new, strict=True)]
    return new


def with_drop_note(
    message: Message,
    *,
    count: int,
    range_handle: str | None,
    results: Sequence[tuple[str, str]],
) -> Message:
    """``message`` (the task) with its drop note naming ``range_handle`` and ``results``
    (the plain note when ``range_handle`` is ``None``); a note is added when there is none."""
    note = drop_note(count, range_handle=range_handle, results=results)
    if range_handle is None:
        note = DROP_MARKER.format(count=count)
    content = message.content
    if isinstance(content, str) or content is None:
        text = content or ""
        match = DROP_NOTE_RE.search(text)
        if match is not None:
            text = text[: match.start()]
        new = f"{text}\n\n{note}" if text else note
        return message if new == content else with_content(message, new)
    parts = list(content)
    last = parts[-1] if parts else None
    if isinstance(last, TextPart) and DROP_NOTE_RE.fullmatch(last.text):
        if last.text == note:
            return message
        parts.pop()
    parts.append(TextPart(text=note))
    return message.model_copy(update={"content": tuple(parts)})


def drop_note_count(message: Message) -> int | None:
    """The count the drop note at the end of ``message`` states, or ``None``."""
    match = DROP_NOTE_RE.search(message.text)
    return None if match is None else int(match.group(1))


def with_range_note(message: Message, *, count: int, range_handle: str) -> Message:
    """``message`` (a summary) ending with the note naming the range it replaces."""
    note = range_note(count, range_handle)
    content = message.content
    if isinstance(content, str) or content is None:
        text = content or ""
        match = RANGE_NOTE_RE.search(text)
        if match is not None:
            text = text[: match.start()]
        return with_content(message, text + note)
    parts = list(content)
    last = parts[-1] if parts else None
    if isinstance(last, TextPart) and RANGE_NOTE_RE.fullmatch("\n\n" + last.text):
        parts.pop()
    parts.append(TextPart(text=note.lstrip("\n")))
    return message.model_copy(update={"content": tuple(parts)})


def _note_results(note: str) -> list[tuple[str, str]]:
    """The ``(tool name, handle)`` pairs a recall-form drop note lists, in its order."""
    match = _NOTE_RESULTS.search(note)
    if match is None:
        return []
    pairs: list[tuple[str, str]] = []
    for group in match.group(1).split(", "):
        name, *handles = group.split(" ")
        pairs += [(name, h) for h in handles if h]
    return pairs


def named_handles(message: Message) -> set[str]:
    """Every handle the markers of ``message`` name: in its text, its calls' arguments and
    the results its drop note lists."""
    found: set[str] = set()
    for text in (message.text, *(c.arguments for c in message.tool_calls or ())):
        if "recall_tool_result" not in text:
            continue
        found.update(_NAMED_ALL.findall(text))
        note = DROP_NOTE_RE.search(text)
        if note is not None:
            found.update(h for _, h in _note_results(note.group(0)))
    return found


def without_handles(
    message: Message, gone: Set[str], *, placeholder: re.Pattern[str] | None = None
) -> Message:
    """``message`` with every marker naming a handle of ``gone`` (evicted from the store) in
    its plain form, so that nothing promises a recall that cannot happen: a tool result
    that is a recall placeholder (``placeholder`` matches it) becomes
    :data:`~ctxcompact.kit.HIDDEN_PLACEHOLDER`; a cut's marker, a cleared value's marker and
    a drop note that names its range lose the handle; a drop note lists only the results
    still held; a summary's range note goes. The same object when nothing changed.
    """
    if not gone:
        return message
    content = message.content
    if message.role == "tool" and placeholder is not None and isinstance(content, str):
        named = NAMED_RE.search(content)
        if named is not None and named.group(1) in gone and placeholder.fullmatch(content):
            return with_content(message, HIDDEN_PLACEHOLDER)

    def cut(match: re.Match[str]) -> str:
        return truncation_marker(int(match.group(1))) if match.group(2) in gone else match[0]

    def change(text: str) -> str:
        if "recall_tool_result" not in text:
            return text
        text = TRUNCATION_RE.sub(cut, text)
        note = DROP_NOTE_RE.search(text)
        if note is not None and note.group(2) is not None:
            count, listed = int(note.group(1)), _note_results(note.group(0))
            kept = [(name, h) for name, h in listed if h not in gone]
            new: str | None = None
            if note.group(2) in gone:
                new = DROP_MARKER.format(count=count)
            elif len(kept) != len(listed):
                new = drop_note(count, range_handle=note.group(2), results=kept)
            if new is not None:
                start = note.start() + (2 if note.group(0).startswith("\n\n") else 0)
                text = text[:start] + new
        summary = RANGE_NOTE_RE.search(text)
        if summary is not None and summary.group(2) in gone:
            text = text[: summary.start()]
        return text

    out = _map_text(message, change)
    calls = out.tool_calls or ()
    if not any("[cleared: " in c.arguments for c in calls):
        return out
    new_calls = [_without_cleared_handles(c, gone) for c in calls]
    if all(a is b for a, b in zip(new_calls, calls, strict=True)):
        return out
    return out.replace(tool_calls=new_calls)


def _without_cleared_handles(call: ToolCall, gone: Set[str]) -> ToolCall:
    if "[cleared: " not in call.arguments:
        return call
    try:
        value = json.loads(call.arguments)
    except ValueError:
        return call

    def plain(item: Any) -> Any:
        if isinstance(item, str):
            match = CLEARED_RE.fullmatch(item)
            if match is not None and match.group(2) in gone:
                return cleared_marker(int(match.group(1)))
            return item
        if isinstance(item, dict):
            return {k: plain(v) for k, v in item.items()}
        if isinstance(item, list):
            return [plain(v) for v in item]
        return item

    text = json.dumps(plain(value), ensure_ascii=False)
    return call if text == call.arguments else call.model_copy(update={"arguments": text})
