"""What a removal leaves in the view: recall handles and the short markers that name them.

Every removal leaves, where it was, a short marker; with a store attached it names the
*handle* the original is kept under and the tool that brings it back
(:data:`RECALL_TOOL_NAME`). A handle is one string, the argument of
``recall_tool_result``:

========================  =====================================================================
handle                    what it brings back
========================  =====================================================================
``call_7``                the tool result answering call ``call_7`` (ids unique in the history)
``call_7@3f9a2c1b``       the same when the id is re-used: ``@`` and 8 hex digits of the
                          result's content hash tell the results apart
``args:call_7``           the arguments of call ``call_7`` (cleared, or dropped with the call)
``#0a1b2c3d4e``           a user or assistant message (``#`` and 10 hex digits of its hash)
``#r0a1b2c3d4e``          a list of the messages one compaction dropped or summarised, each
                          with its own handle (the guard's note and a summary name one)
========================  =====================================================================

Handles are derived from content, never from a position, so a marker written before one
compaction still names the same original after the next (positions shift; hashes do not).
Recall returns the original exactly (line endings, trailing newline, long lines a window at a
time): see :func:`ctxcompact.store.execute_recall`.

The strategies write the plain forms when the controller has no store (the context's
``recall`` is false); the controller's store hook rewrites plain markers into their recall
forms only once the store holds the original, and back when it does not.
"""

from __future__ import annotations

import re
import string
from typing import TYPE_CHECKING

from ..exceptions import ConfigError

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "ARGUMENTS_PREFIX",
    "CLEARED_RE",
    "DEFAULT_RECALL_TEMPLATE",
    "DROP_MARKER",
    "DROP_NOTE_RE",
    "INPUT_MARKER",
    "LEGACY_RECALL_TEMPLATE",
    "MAX_NOTE_RESULTS",
    "RANGE_NOTE_RE",
    "RANGE_PREFIX",
    "RECALL_TOOL_NAME",
    "STAND_IN_RANGE",
    "TRUNCATION_MARKER",
    "TRUNCATION_RE",
    "arguments_handle",
    "cleared_marker",
    "drop_note",
    "message_handle",
    "note_ranges",
    "range_handle",
    "range_note",
    "recall_placeholder",
    "result_handle",
    "strip_notes",
    "truncation_marker",
    "without_markers",
]

RECALL_TOOL_NAME = "recall_tool_result"
"""The name of the recall tool, as the model sees it and every marker names it."""

ARGUMENTS_PREFIX = "args:"
"""How a handle to a call's arguments starts: ``args:`` and the call's result handle."""

RANGE_PREFIX = "#r"
"""How a range handle starts (a message handle is ``#`` and hex digits only)."""

_RESULT_DIGITS = 8
_MESSAGE_DIGITS = 10

DEFAULT_RECALL_TEMPLATE = '[hidden: recall_tool_result("{tool_call_id}")]'
"""The placeholder of a hidden or masked result with a store: ``{tool_call_id}`` (the
result's handle) and ``{tool_name}``. Short, as every marker: it stands in the tool result's
own place, so saying what it is and naming the tool and the handle is enough, and an agent's
view holds dozens of them (the earlier wording, :data:`LEGACY_RECALL_TEMPLATE`, took 13
tokens more per result under the heuristic counter)."""

LEGACY_RECALL_TEMPLATE = (
    '[tool result hidden: call recall_tool_result("{tool_call_id}") to see it again]'
)
"""The earlier default placeholder, still recognised in a history written with it."""

TRUNCATION_MARKER = "\n\n... [{omitted} characters truncated] ...\n\n"
"""What replaces the middle of a cut text (seed 003's wording); ``{omitted}`` is a count."""

_RECALL_TRUNCATION = (
    '\n\n... [{omitted} characters truncated: recall_tool_result("{handle}", offset={offset}) '
    "shows them] ...\n\n"
)

INPUT_MARKER = "[cleared: {chars} chars]"
"""What replaces a long string value of a cleared call's arguments; ``{chars}`` its length."""

_RECALL_INPUT = '[cleared: {chars} chars; recall_tool_result("{handle}")]'

DROP_MARKER = (
    "[ctxcompact: {count} earlier step(s) of this task were dropped here to fit the window]"
)
"""The guard's note on the task when steps after it were dropped; ``{count}`` is how many."""

_RECALL_DROP = (
    "[ctxcompact: {count} earlier message(s) were dropped to fit the window; "
    'recall_tool_result("{range}") lists them{results}]'
)

MAX_NOTE_RESULTS = 8
"""Tool results a drop note names one by one (the newest dropped); the range it names lists
them all. Eight keep the note near 100 tokens with Anthropic's 30-character ids, against the
thousands of tokens a drop frees (README, "Nothing lost")."""

STAND_IN_RANGE = "#r" + "0" * _MESSAGE_DIGITS
"""The range handle a strategy writes in a recall-form note it costs: as long as a real one;
the controller's store hook puts the real one in its place."""

_RANGE_NOTE = (
    "\n\n[ctxcompact: this summary replaces {count} message(s); "
    'recall_tool_result("{range}") lists them]'
)

_TEMPLATE_FIELDS = frozenset({"tool_call_id", "tool_name"})


# -- handles ----------------------------------------------------------------------------------


def result_handle(tool_call_id: str, digest: str | None = None) -> str:
    """The handle of a tool result: its id, or ``id@`` and 8 digits of ``digest`` (the hex
    SHA-256 of the result) when the id is re-used in the history.

    Example:
        >>> result_handle("call_7"), result_handle("call_7", "3f9a2c1b77e0")
        ('call_7', 'call_7@3f9a2c1b')
    """
    return tool_call_id if digest is None else f"{tool_call_id}@{digest[:_RESULT_DIGITS]}"


def arguments_handle(tool_call_id: str, digest: str | None = None) -> str:
    """The handle of a call's arguments: ``args:`` and the call's :func:`result_handle`.

    Example:
        >>> arguments_handle("call_7")
        'args:call_7'
    """
    return ARGUMENTS_PREFIX + result_handle(tool_call_id, digest)


def message_handle(digest: str) -> str:
    """The handle of a user or assistant message: ``#`` and 10 digits of its hash.

    Example:
        >>> message_handle("0a1b2c3d4e5f6789")
        '#0a1b2c3d4e'
    """
    return "#" + digest[:_MESSAGE_DIGITS]


def range_handle(digest: str) -> str:
    """The handle of a range (the messages one rewrite dropped or summarised).

    Example:
        >>> range_handle("0a1b2c3d4e5f6789")
        '#r0a1b2c3d4e'
    """
    return RANGE_PREFIX + digest[:_MESSAGE_DIGITS]


# -- markers ----------------------------------------------------------------------------------


def recall_placeholder(
    tool_call_id: str,
    *,
    template: str = DEFAULT_RECALL_TEMPLATE,
    tool_name: str | None = None,
) -> str:
    """The text that stands for a removed result and tells the model how to recall it.

    Raises:
        ConfigError: ``template`` uses a field other than ``{tool_call_id}`` and
            ``{tool_name}``, or does not name ``{tool_call_id}`` (the model could not recall).

    Example:
        >>> recall_placeholder("call_7")
        '[hidden: recall_tool_result("call_7")]'
    """
    try:
        fields = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
    except ValueError as exc:
        raise ConfigError(f"invalid recall template {template!r}: {exc}", key="template") from None
    unknown = sorted(fields - _TEMPLATE_FIELDS)
    if unknown or "tool_call_id" not in fields:
        raise ConfigError(
            f"recall template {template!r} must name {{tool_call_id}} and may use only "
            f"{sorted(_TEMPLATE_FIELDS)}" + (f" (unknown: {unknown})" if unknown else ""),
            key="template",
        )
    return template.format(tool_call_id=tool_call_id, tool_name=tool_name or "unknown")


def truncation_marker(omitted: int, *, handle: str | None = None, offset: int = 1) -> str:
    """The marker in place of a cut text's middle: plain, or naming the handle and the line
    (``offset``) the cut starts on.

    Example:
        >>> truncation_marker(480)
        '\\n\\n... [480 characters truncated] ...\\n\\n'
        >>> truncation_marker(480, handle="c1", offset=12).strip()
        '... [480 characters truncated: recall_tool_result("c1", offset=12) shows them] ...'
    """
    if handle is None:
        return TRUNCATION_MARKER.format(omitted=omitted)
    return _RECALL_TRUNCATION.format(omitted=omitted, handle=handle, offset=offset)


def cleared_marker(chars: int, *, handle: str | None = None, marker: str = INPUT_MARKER) -> str:
    """The text in place of a cleared argument value of ``chars`` characters: ``marker``, or
    with a handle the recall form.

    Example:
        >>> cleared_marker(300), cleared_marker(300, handle="args:w1")
        ('[cleared: 300 chars]', '[cleared: 300 chars; recall_tool_result("args:w1")]')
    """
    if handle is None:
        return marker.format(chars=chars)
    return _RECALL_INPUT.format(chars=chars, handle=handle)


def drop_note(
    count: int,
    *,
    range_handle: str | None = None,
    results: Iterable[tuple[str, str]] = (),
) -> str:
    """The note on the task saying what was dropped to fit the window.

    Without ``range_handle``: :data:`DROP_MARKER` (``count`` is steps). With it, ``count``
    is messages, the range lists every one of them, and ``results`` (``(tool name, handle)``
    of dropped tool results, oldest first) names the newest :data:`MAX_NOTE_RESULTS` by tool.

    Example:
        >>> drop_note(3)
        '[ctxcompact: 3 earlier step(s) of this task were dropped here to fit the window]'
        >>> print(drop_note(6, range_handle="#r0a1b2c3d4e",
        ...                 results=[("Read", "c1"), ("Bash", "c2"), ("Read", "c3")]))
        [ctxcompact: 6 earlier message(s) were dropped to fit the window; recall_tool_result("#r0a1b2c3d4e") lists them; results: Read c1 c3, Bash c2]
    """  # noqa: E501 - a doctest's output is one line
    if range_handle is None:
        return DROP_MARKER.format(count=count)
    listed = list(results)[-MAX_NOTE_RESULTS:]
    by_tool: dict[str, list[str]] = {}
    for name, handle in listed:
        by_tool.setdefault(name or "unknown", []).append(handle)
    shown = ", ".join(f"{name} {' '.join(handles)}" for name, handles in by_tool.items())
    return _RECALL_DROP.format(
        count=count, range=range_handle, results=f"; results: {shown}" if shown else ""
    )


def range_note(count: int, range_handle: str) -> str:
    """What a summary's text ends with to name the range it replaces.

    Example:
        >>> range_note(12, "#r0a1b2c3d4e").strip()
        '[ctxcompact: this summary replaces 12 message(s); recall_tool_result("#r0a1b2c3d4e") lists them]'
    """  # noqa: E501 - a doctest's output is one line
    return _RANGE_NOTE.format(count=count, range=range_handle)


# -- reading markers back -----------------------------------------------------------------------

# Each is anchored on a literal and scans character classes that exclude its own closing
# character, so a crafted text costs linear time (tests/internals/redos.py).
_HANDLE = r'[^"\n]{1,300}'
TRUNCATION_RE = re.compile(
    r"\n\n\.\.\. \[(\d+) characters truncated"
    r'(?:: recall_tool_result\("(' + _HANDLE + r')", offset=(\d+)\) shows them)?\] \.\.\.\n\n'
)
"""Either form of :func:`truncation_marker`: groups omitted, handle, offset."""

CLEARED_RE = re.compile(
    r'\[cleared: (\d+) chars(?:; recall_tool_result\("(' + _HANDLE + r')"\))?\]'
)
"""Either form of :func:`cleared_marker` with the default marker: groups chars, handle."""

_RANGE = r"#r[0-9a-f]{10}"
DROP_NOTE_RE = re.compile(
    r"(?:\n\n)?\[ctxcompact: (\d+) earlier "
    r"(?:step\(s\) of this task were dropped here to fit the window"
    r"|message\(s\) were dropped to fit the window; recall_tool_result\(\"(" + _RANGE + r")\"\) "
    r"lists them(?:; results: [^\]\n]*)?)\]\Z"
)
"""Either form of :func:`drop_note` at the end of a text: groups count, range (recall form)."""

RANGE_NOTE_RE = re.compile(
    r"\n\n\[ctxcompact: this summary replaces (\d+) message\(s\); "
    r"recall_tool_result\(\"(" + _RANGE + r")\"\) lists them\]\Z"
)
""":func:`range_note` at the end of a text: groups count, range."""

_RANGE_IN_TEXT = re.compile(_RANGE)
_NOTE_START = "[ctxcompact: "
"""What both :data:`DROP_NOTE_RE` and :data:`RANGE_NOTE_RE` must contain."""


def strip_notes(text: str) -> str:
    """``text`` without the ctxcompact notes a rewrite appended (a drop note, a range note).

    Example:
        >>> strip_notes("fix it\\n\\n" + drop_note(2))
        'fix it'
    """
    if _NOTE_START not in text:
        return text
    for pattern in (DROP_NOTE_RE, RANGE_NOTE_RE):
        match = pattern.search(text)
        if match is not None:
            text = text[: match.start()]
    return text


def note_ranges(text: str) -> list[str]:
    """The range handles the ctxcompact notes at the end of ``text`` name.

    Example:
        >>> note_ranges("task\\n\\n" + drop_note(2, range_handle="#r0a1b2c3d4e"))
        ['#r0a1b2c3d4e']
    """
    found: list[str] = []
    if _NOTE_START not in text:  # both notes hold it: a substring scan, not two regex scans
        return found
    for pattern in (DROP_NOTE_RE, RANGE_NOTE_RE):
        match = pattern.search(text)
        if match is not None:
            found += _RANGE_IN_TEXT.findall(match.group(0))
    return found


_MARKER_TEXT = re.compile(
    r'recall_tool_result\(\\?"[^"\\\n]{1,300}\\?"(?:, offset=\d+)?\)'
    r"|\[cleared: \d+ chars"
    r"|\[\d+ characters truncated"
)


def without_markers(text: str) -> str:
    """``text`` without what ctxcompact's markers add to it: the handles a recall form names
    (as written in a text, or JSON-escaped in a call's arguments), the sizes of the cleared
    and cut markers, and the notes at its end (:func:`strip_notes`). None of these is a
    name the conversation uses, so the guard's relevance order does not count them (a
    masked step would otherwise look like news: its handle is a name seen nowhere else).

    Example:
        >>> without_markers('fix parse_config [cleared: 300 chars; recall_tool_result("args:w1")]')
        'fix parse_config  ;  ]'
    """
    return _MARKER_TEXT.sub(" ", strip_notes(text))
