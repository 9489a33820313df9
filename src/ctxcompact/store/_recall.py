"""Recall: a tool the model calls to see a removed tool result again, a window at a time.

One executor (:func:`execute_recall`) serves every loop: the :class:`~ctxcompact.Tool` that
:func:`recall_tool` builds for :class:`~ctxcompact.Agent`, and any other loop (the proxy) that
hands it the model's arguments. Results come back as numbered lines, ``limit`` at a time from
``offset``, or only the lines matching ``pattern``, so a huge result never returns whole.

The model chooses ``pattern`` (and a prompt injection in any tool result can choose it for the
model), so it is matched by RE2, whose time is linear in the text whatever the pattern:
Python's ``re`` took 11.8 s for ``(a+)+$`` over 27 characters, doubling with each one more.
"""

from __future__ import annotations

import json
import string
from typing import TYPE_CHECKING, Any

import re2

from .._contract.tools import ERROR_PREFIX, Tool
from .._history.messages import TextPart
from ..exceptions import ConfigError
from ._records import DEFAULT_NAMESPACE

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ._records import OriginalsStore

__all__ = [
    "DEFAULT_RECALL_LINES",
    "DEFAULT_RECALL_TEMPLATE",
    "MAX_RECALL_CHARS",
    "RECALL_TOOL_NAME",
    "execute_recall",
    "recall_placeholder",
    "recall_tool",
    "recall_tool_spec_anthropic",
    "recall_tool_spec_openai",
]

RECALL_TOOL_NAME = "recall_tool_result"
"""The name the model sees."""

DEFAULT_RECALL_TEMPLATE = (
    '[tool result hidden: call recall_tool_result("{tool_call_id}") to see it again]'
)
"""The placeholder text naming the tool and the id; ``{tool_call_id}`` and ``{tool_name}``."""

DEFAULT_RECALL_LINES = 200
"""Lines returned per recall when the model gives no ``limit``."""

MAX_RECALL_CHARS = 20_000
"""Characters returned per recall at most; a longer window stops early and says where."""

_TEMPLATE_FIELDS = frozenset({"tool_call_id", "tool_name"})


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
        '[tool result hidden: call recall_tool_result("call_7") to see it again]'
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


def _recall_tool_result(
    tool_call_id: str,
    offset: int | None = None,
    limit: int | None = None,
    pattern: str | None = None,
) -> str:
    """See again a tool result that was hidden or removed from the conversation.

    Returns numbered lines: a window of `limit` lines from line `offset`, or the lines
    matching `pattern`. Page through a long result with `offset` rather than asking for it all.

    Args:
        tool_call_id: The id named in the placeholder that replaced the result.
        offset: The first line to return (1 is the first line of the result).
        limit: How many lines to return at most (200 by default).
        pattern: A regular expression (RE2 syntax: Python's without look-around or
            backreferences); only matching lines are returned.
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


def _parse(
    arguments: Mapping[str, Any] | str,
) -> tuple[str, int, int | None, _LineFilter | None]:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            raise _BadArguments(
                f"the arguments are not valid JSON ({exc.msg} at char {exc.pos})"
            ) from None
    if not isinstance(arguments, dict):
        raise _BadArguments("the arguments must be a JSON object with a tool_call_id")
    call_id = arguments.get("tool_call_id")
    if not isinstance(call_id, str) or not call_id:
        raise _BadArguments("tool_call_id is required: the id named in the placeholder")
    unknown = sorted(set(arguments) - {"tool_call_id", "offset", "limit", "pattern"})
    if unknown:
        raise _BadArguments(
            f"unknown argument(s) {unknown}; use tool_call_id, offset, limit, pattern"
        )
    offset, limit = _positive(arguments, "offset"), _positive(arguments, "limit")
    pattern = arguments.get("pattern")
    if pattern is None:
        return call_id, offset or 1, limit, None
    if not isinstance(pattern, str):
        raise _BadArguments("pattern must be a string (a regular expression)")
    return call_id, offset or 1, limit, _LineFilter(pattern)


def execute_recall(
    store: OriginalsStore,
    arguments: Mapping[str, Any] | str,
    *,
    namespace: str = DEFAULT_NAMESPACE,
) -> str:
    """Run a recall: the text to send back to the model as the tool's result.

    Never raises for what the model got wrong (bad JSON, an unknown id, a bad regular
    expression) or for a store failure: those come back as text starting with ``"Error: "``.

    Args:
        store: Where the originals are.
        arguments: The model's arguments, as JSON text or already parsed.
        namespace: Whose originals to look in.

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
        call_id, offset, limit, regex = _parse(arguments)
    except _BadArguments as exc:
        return _error(str(exc))
    try:
        record = store.get(namespace, call_id)
        if record is None:
            # "id@position": a placeholder names the position when its id is re-used in the
            # history, so each of the results that share an id can be recalled.
            base, at, position = call_id.rpartition("@")
            if at and base and position.isdigit():
                record = store.get(namespace, base, position=int(position))
                if record is not None and record.position != int(position):
                    record = None
    except Exception as exc:  # a store failure is the tool's failure, not the loop's
        return _error(f"the store of removed results failed ({type(exc).__name__})")
    if record is None:
        return _error(
            f"no removed result is stored for tool_call_id {call_id!r}. Only results that "
            "were hidden or removed can be recalled; use the id their placeholder names."
        )
    message = record.message
    other_parts = (
        sum(1 for p in message.content if not isinstance(p, TextPart))
        if isinstance(message.content, tuple)
        else 0
    )
    return _window(call_id, message.text, offset, limit, regex, other_parts)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _window(
    call_id: str,
    text: str,
    offset: int,
    limit: int | None,
    regex: _LineFilter | None,
    other_parts: int,
) -> str:
    lines = text.splitlines()
    total = len(lines)
    parts = f", {other_parts} non-text part(s) not shown" if other_parts else ""
    head = f"Tool result {call_id} ({_count(total, 'line')}, {len(text)} characters{parts})"
    if total == 0:
        return f"{head}: the result has no text."
    if offset > total:
        return f"{head}: offset {offset} is past the last line ({total})."
    budget = limit or DEFAULT_RECALL_LINES
    shown: list[str] = []
    chars = 0
    last = offset - 1
    stopped_early = False
    for number in range(offset, total + 1):
        line = lines[number - 1]
        if regex is not None and not regex.matches(line):
            continue
        if len(shown) == budget:
            stopped_early = True
            break
        if len(line) > MAX_RECALL_CHARS:
            line = line[:MAX_RECALL_CHARS] + f" [line cut at {MAX_RECALL_CHARS} of {len(line)}]"
        if shown and chars + len(line) > MAX_RECALL_CHARS:
            stopped_early = True
            break
        shown.append(f"{number}: {line}")
        chars += len(line) + 1
        last = number
    if regex is not None:
        what = f"matching {regex.pattern!r} from line {offset}"
        if not shown:
            return f"{head}: no line from line {offset} on matches {regex.pattern!r}."
        head = f"{head}, {_count(len(shown), 'line')} {what}:"
    else:
        head = f"{head}, lines {offset}-{last}:"
    out = [head, *shown]
    if stopped_early or (regex is None and last < total):
        same = " and the same pattern" if regex is not None else ""
        out.append(
            f"[more from line {last + 1}: call {RECALL_TOOL_NAME} with offset={last + 1}{same}]"
        )
    return "\n".join(out)


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
    ) -> str:
        arguments = {"tool_call_id": tool_call_id, "offset": offset, "limit": limit}
        if pattern is not None:
            arguments["pattern"] = pattern
        return execute_recall(store, arguments, namespace=namespace)

    recall_tool_result.__doc__ = _recall_tool_result.__doc__
    return Tool(recall_tool_result, name=RECALL_TOOL_NAME)
