"""Recall: a tool the model calls to see a removed original again, a window at a time.

One executor (:func:`execute_recall`) serves every loop: the :class:`~ctxcompact.Tool` that
:func:`recall_tool` builds for :class:`~ctxcompact.Agent`, and any other loop (the proxy) that
hands it the model's arguments. The model names the *handle* a marker gave it (a tool-call
id, ``args:...``, ``#...``: :mod:`ctxcompact.kit._markers`); the original comes back as
numbered lines, ``limit`` at a time from line ``offset``, or only the lines matching
``pattern``, so a huge original never returns whole.

Exactly what was removed comes back: lines are split on ``\\n`` only, so a ``\\r`` before it
(CRLF) stays in the line, a text ending with a newline shows a last, empty line, and a line
longer than :data:`MAX_RECALL_CHARS` comes in pieces (``char_offset`` goes on inside it).
:func:`recall_whole` pages through the answers as a model would and reassembles the
original, byte for byte: what replay and the tests compare.

The model chooses ``pattern`` (and a prompt injection in any tool result can choose it for the
model), so it is matched by RE2, whose time is linear in the text whatever the pattern:
Python's ``re`` took 11.8 s for ``(a+)+$`` over 27 characters, doubling with each one more.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

import re2

from .._contract.tools import ERROR_PREFIX, Tool
from .._history.messages import TextPart
from ..kit import ARGUMENTS_PREFIX, DEFAULT_RECALL_TEMPLATE, RANGE_PREFIX, RECALL_TOOL_NAME
from ..kit import recall_placeholder as recall_placeholder
from ._records import DEFAULT_NAMESPACE

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ._records import OriginalsStore, StoredOriginal

__all__ = [
    "DEFAULT_RECALL_LINES",
    "DEFAULT_RECALL_TEMPLATE",
    "MAX_RECALL_CHARS",
    "RECALL_TOOL_NAME",
    "execute_recall",
    "recall_found",
    "recall_placeholder",
    "recall_tool",
    "recall_tool_spec_anthropic",
    "recall_tool_spec_openai",
    "recall_whole",
]

DEFAULT_RECALL_LINES = 200
"""Lines returned per recall when the model gives no ``limit``."""

MAX_RECALL_CHARS = 20_000
"""Characters returned per recall at most; a longer window stops early and says where."""


def _recall_tool_result(
    tool_call_id: str,
    offset: int | None = None,
    limit: int | None = None,
    pattern: str | None = None,
    char_offset: int | None = None,
) -> str:
    """See again what was hidden, cut, cleared or dropped from the conversation.

    Returns numbered lines: a window of `limit` lines from line `offset`, or the lines
    matching `pattern`. Page through a long text with `offset` rather than asking for it all.

    Args:
        tool_call_id: The handle a marker names: a tool-call id for a result (possibly with
            @ and digits), args:<id> for a call's arguments, #<digits> for a message,
            #r<digits> for the list of what was dropped or summarised.
        offset: The first line to return (1 is the first line).
        limit: How many lines to return at most (200 by default).
        pattern: A regular expression (RE2 syntax: Python's without look-around or
            backreferences); only matching lines are returned.
        char_offset: Within line `offset`, the first character to return (1 is the
            first): to go on inside a line too long to come back at once.
    """
    raise NotImplementedError  # the signature and docstring make the schema; see recall_tool


_SPEC = Tool(_recall_tool_result, name=RECALL_TOOL_NAME).spec


def recall_tool_spec_openai() -> dict[str, Any]:
    """The recall tool as an OpenAI Chat Completions ``tools`` entry.

    Example:
        >>> recall_tool_spec_openai()["function"]["name"]
        'recall_tool_result'
    """
    return {
        "type": "function",
        "function": {
            "name": _SPEC.name,
            "description": _SPEC.description,
            "parameters": json.loads(json.dumps(_SPEC.parameters)),
        },
    }


def recall_tool_spec_anthropic() -> dict[str, Any]:
    """The recall tool as an Anthropic Messages ``tools`` entry.

    Example:
        >>> sorted(recall_tool_spec_anthropic())
        ['description', 'input_schema', 'name']
    """
    return {
        "name": _SPEC.name,
        "description": _SPEC.description,
        "input_schema": json.loads(json.dumps(_SPEC.parameters)),
    }


def _error(text: str) -> str:
    return f"{ERROR_PREFIX}{RECALL_TOOL_NAME}: {text}"


class _BadArguments(Exception):
    """What the model got wrong, in words for the model."""


def _positive(arguments: Mapping[str, Any], name: str) -> int | None:
    value = arguments.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _BadArguments(f"{name} must be a positive integer, got {json.dumps(value)}")
    return value


_REGEX_META = frozenset("\\.^$|?*+()[]{}")
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a bad pattern is the model's to hear about, not stderr's
# Whether a line matches is all that is asked: without groups to report, RE2 answers with its
# DFA alone (about 3 ns a character, the same at any length; with groups, 4x slower past
# 64 kB of line, where it changes engines).
_RE2_OPTIONS.never_capture = True


class _LineFilter:
    """The lines ``pattern`` matches: by RE2 (linear time, any pattern), or by ``in`` for a
    pattern without any regex syntax (the same lines, without a regex engine per line)."""

    __slots__ = ("matches", "pattern")

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self.matches: Callable[[str], bool]
        if not _REGEX_META.intersection(pattern):
            self.matches = lambda line: pattern in line
            return
        try:
            compiled = re2.compile(pattern.encode("utf-8"), _RE2_OPTIONS)
        except UnicodeEncodeError:
            raise _BadArguments(
                f"pattern {pattern!r} holds a lone surrogate; leave it out of the pattern"
            ) from None
        except re2.error as exc:
            reason = exc.args[0] if exc.args else ""
            if isinstance(reason, bytes):
                reason = reason.decode("utf-8", "replace")
            raise _BadArguments(
                f"pattern {pattern!r} is not a valid regular expression for this tool "
                f"({reason}); it takes RE2 syntax: Python's without look-around, "
                "backreferences, atomic groups or possessive quantifiers (write \\z for \\Z)"
            ) from None
        search = compiled.search
        # A stored line may hold a lone surrogate (kept exactly); surrogatepass gives RE2
        # bytes it can scan, where no pattern of valid UTF-8 matches the surrogate itself.
        self.matches = lambda line: search(line.encode("utf-8", "surrogatepass")) is not None


_KNOWN = ("tool_call_id", "offset", "limit", "pattern", "char_offset")


class _Request:
    __slots__ = ("char_offset", "handle", "limit", "offset", "regex")

    def __init__(self, arguments: Mapping[str, Any] | str) -> None:
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as exc:
                raise _BadArguments(
                    f"the arguments are not valid JSON ({exc.msg} at char {exc.pos})"
                ) from None
        if not isinstance(arguments, dict):
            raise _BadArguments("the arguments must be a JSON object with a tool_call_id")
        handle = arguments.get("tool_call_id")
        if not isinstance(handle, str) or not handle:
            raise _BadArguments("tool_call_id is required: the handle its marker names")
        unknown = sorted(set(arguments) - set(_KNOWN))
        if unknown:
            raise _BadArguments(f"unknown argument(s) {unknown}; use {', '.join(_KNOWN)}")
        self.handle = handle
        self.offset = _positive(arguments, "offset") or 1
        self.limit = _positive(arguments, "limit")
        self.char_offset = _positive(arguments, "char_offset") or 1
        pattern = arguments.get("pattern")
        if pattern is not None and not isinstance(pattern, str):
            raise _BadArguments("pattern must be a string (a regular expression)")
        self.regex = None if pattern is None else _LineFilter(pattern)


def _find(store: OriginalsStore, namespace: str, handle: str) -> StoredOriginal | None:
    record = store.get(namespace, handle)
    if record is not None:
        return record
    # "id@position": the placeholders of ctxcompact 0.2 named the position of a result whose
    # id was re-used; records stored then are found that way still.
    base, at, position = handle.rpartition("@")
    if at and base and position.isdigit() and len(position) < 8:
        record = store.get(namespace, base, position=int(position))
        if record is not None and record.position == int(position):
            return record
    return None


def _title(handle: str, record: StoredOriginal) -> tuple[str, str]:
    """What the answer calls the original, and its text."""
    message = record.message
    if message.role == "tool":
        return f"Tool result {handle}", message.text
    if handle.startswith(ARGUMENTS_PREFIX) and message.tool_calls and len(message.tool_calls) == 1:
        call = message.tool_calls[0]
        return f"Arguments of call {handle[len(ARGUMENTS_PREFIX) :]} ({call.name})", call.arguments
    if record.kind == "range" or handle.startswith(RANGE_PREFIX):
        return f"Removed messages {handle}", message.text
    return f"Message {handle} ({message.role})", message.text


def execute_recall(
    store: OriginalsStore,
    arguments: Mapping[str, Any] | str,
    *,
    namespace: str = DEFAULT_NAMESPACE,
    max_chars: int = MAX_RECALL_CHARS,
) -> str:
    """Run a recall: the text to send back to the model as the tool's result.

    Never raises: what the model got wrong (bad JSON, a bad regular expression) comes back
    as text starting with ``"Error: "``, and so does a store failure. A handle the store no
    longer holds (its size bound evicted it) or never held gets a plain sentence saying so.

    Args:
        store: Where the originals are.
        arguments: The model's arguments, as JSON text or already parsed.
        namespace: Whose originals to look in.
        max_chars: Characters of the original shown at most (the window stops early and
            says where to go on): the proxy lowers it when the context window has less room
            left than a whole window would take.

    Example:
        >>> from ctxcompact import Message
        >>> from ctxcompact.store import MemoryStore, StoredOriginal
        >>> store = MemoryStore()
        >>> store.put(StoredOriginal.from_message(Message.tool("c7", "one\\ntwo"), position=4,
        ...                                       kind="hidden"))
        >>> print(execute_recall(store, '{"tool_call_id": "c7", "offset": 2}'))
        Tool result c7 (2 lines, 7 characters), lines 2-2:
        2: two
    """
    try:
        request = _Request(arguments)
    except _BadArguments as exc:
        return _error(str(exc))
    handle = request.handle
    try:
        record = _find(store, namespace, handle)
    except Exception as exc:  # a store failure is the tool's failure, not the loop's
        return _error(f"the store of removed results failed ({type(exc).__name__})")
    if record is None:
        return (
            f"{_MISSING} {handle!r} any more: the store of removed originals "
            "drops the oldest ones past its size bound, or no marker named this handle. It "
            "cannot be recalled; read it again from its source if you still need it."
        )
    title, text = _title(handle, record)
    message = record.message
    other_parts = (
        sum(1 for p in message.content if not isinstance(p, TextPart))
        if isinstance(message.content, tuple)
        else 0
    )
    return _window(title, text, request, other_parts, max(1, max_chars))


_MISSING = "Nothing is kept under"


def recall_found(answer: str) -> bool:
    """Whether an :func:`execute_recall` answer holds the original (not an error, not the
    sentence saying the handle is not held).

    Example:
        >>> from ctxcompact.store import MemoryStore
        >>> recall_found(execute_recall(MemoryStore(), {"tool_call_id": "gone"}))
        False
    """
    return not answer.startswith((ERROR_PREFIX, _MISSING))


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _window(title: str, text: str, request: _Request, other_parts: int, room: int) -> str:
    lines = text.split("\n")
    total = len(lines)
    parts = f", {other_parts} non-text part(s) not shown" if other_parts else ""
    head = f"{title} ({_count(total, 'line')}, {len(text)} characters{parts})"
    if not text:
        return f"{head}: the text is empty."
    offset, regex = request.offset, request.regex
    if offset > total:
        return f"{head}: offset {offset} is past the last line ({total})."
    budget = request.limit or DEFAULT_RECALL_LINES
    shown: list[str] = []
    more: tuple[int, int] | None = None  # (line, char) to go on from
    last = offset - 1
    start = request.char_offset - 1
    for number in range(offset, total + 1):
        line = lines[number - 1]
        skip = start if number == offset else 0
        if regex is not None and not regex.matches(line):
            continue
        if len(shown) == budget:
            more = (number, 1)
            break
        piece = line[skip:]
        if len(piece) > room:
            if shown:
                more = (number, skip + 1)
                break
            piece = piece[:room]
            more = (number, skip + len(piece) + 1)
        label = f"{number}: " if skip == 0 else f"{number} (from char {skip + 1}): "
        shown.append(label + piece)
        room -= len(piece) + 1
        last = number
        if more is not None:
            break
    if regex is not None:
        if not shown:
            return f"{head}: no line from line {offset} on matches {regex.pattern!r}."
        what = f"matching {regex.pattern!r} from line {offset}"
        head = f"{head}, {_count(len(shown), 'line')} {what}:"
    else:
        head = f"{head}, lines {offset}-{last}:"
        if more is None and last < total:
            more = (last + 1, 1)
    out = [head, *shown]
    if more is not None:
        line_no, char = more
        same = " and the same pattern" if regex is not None else ""
        if char > 1:
            out.append(
                f"[more from line {line_no}, char {char}: call {RECALL_TOOL_NAME} with "
                f"offset={line_no} and char_offset={char}{same}]"
            )
        else:
            out.append(
                f"[more from line {line_no}: call {RECALL_TOOL_NAME} with offset={line_no}{same}]"
            )
    return "\n".join(out)


_HEAD = re.compile(r"\((\d+) lines?, (\d+) characters")
_LINE = re.compile(r"(\d+)(?: \(from char (\d+)\))?: ")
_MORE = re.compile(r"\[more from line (\d+)(?:, char (\d+))?: ")


def recall_whole(
    store: OriginalsStore | None,
    handle: str,
    *,
    namespace: str = DEFAULT_NAMESPACE,
    execute: Callable[[dict[str, Any]], str] | None = None,
    max_calls: int = 10_000,
) -> str | None:
    """The original behind ``handle`` as recall gives it back, or ``None`` when it does not.

    Calls the executor as a model would (:func:`execute_recall` on ``store``, or
    ``execute`` with the arguments, e.g. a request through the proxy), follows each answer's
    ``[more ...]`` line and puts the pieces back together. It never reads the store itself:
    what it returns is what the model can get.

    Example:
        >>> from ctxcompact import Message
        >>> from ctxcompact.store import MemoryStore, StoredOriginal
        >>> store = MemoryStore()
        >>> text = "a\\r\\nb\\n" + "x" * 50_000 + "\\n"
        >>> store.put(StoredOriginal.from_message(Message.tool("c1", text), position=1,
        ...                                       kind="hidden"))
        >>> recall_whole(store, "c1") == text
        True
    """
    if execute is None:
        if store is None:
            raise ValueError("recall_whole needs a store or an execute function")
        target = store

        def execute(arguments: dict[str, Any]) -> str:
            return execute_recall(target, arguments, namespace=namespace)

    pieces: dict[int, list[str]] = {}
    arguments: dict[str, Any] = {"tool_call_id": handle, "limit": 100_000}
    total = None
    for _ in range(max_calls):
        answer = execute(arguments)
        head, _, body = answer.partition("\n")
        match = _HEAD.search(head)
        if match is None or answer.startswith(ERROR_PREFIX):
            return None
        total = int(match.group(1))
        if head.endswith(": the text is empty."):
            return ""
        rows = body.split("\n") if body else []
        more = _MORE.match(rows[-1]) if rows else None
        if more is not None:
            rows = rows[:-1]
        for row in rows:
            label = _LINE.match(row)
            if label is None:
                return None
            pieces.setdefault(int(label.group(1)), []).append(row[label.end() :])
        if more is None:
            break
        arguments = {"tool_call_id": handle, "limit": 100_000, "offset": int(more.group(1))}
        if more.group(2):
            arguments["char_offset"] = int(more.group(2))
    else:
        return None
    if total is None or sorted(pieces) != list(range(1, total + 1)):
        return None
    return "\n".join("".join(pieces[n]) for n in range(1, total + 1))


def recall_tool(store: OriginalsStore, *, namespace: str = DEFAULT_NAMESPACE) -> Tool:
    """The ``recall_tool_result`` tool, reading from ``store``, for ``Agent(tools=[...])``.

    Example:
        >>> from ctxcompact.store import MemoryStore
        >>> recall_tool(MemoryStore()).name
        'recall_tool_result'
    """

    def recall_tool_result(
        tool_call_id: str,
        offset: int | None = None,
        limit: int | None = None,
        pattern: str | None = None,
        char_offset: int | None = None,
    ) -> str:
        arguments: dict[str, Any] = {"tool_call_id": tool_call_id, "offset": offset}
        arguments["limit"] = limit
        if pattern is not None:
            arguments["pattern"] = pattern
        if char_offset is not None:
            arguments["char_offset"] = char_offset
        return execute_recall(store, arguments, namespace=namespace)

    recall_tool_result.__doc__ = _recall_tool_result.__doc__
    return Tool(recall_tool_result, name=RECALL_TOOL_NAME)
