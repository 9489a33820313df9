"""Helpers every built-in strategy shares: placeholders, the error heuristic, fast copies,
parameter checks and the cache-friendly batching of a masking boundary.

Written once here so the strategies agree on what a hidden result and an error look like.
"""

from __future__ import annotations

import json
import re
import string
import threading
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from functools import lru_cache

from pydantic import BaseModel

from .._messages import Message, TextPart
from ..exceptions import ConfigError

__all__ = [
    "HIDDEN_PLACEHOLDER",
    "SCHEMA1_FIELDS",
    "SCHEMA1_PLACEHOLDER",
    "UNKNOWN_TOOL_NAME",
    "batched_boundary",
    "call_names",
    "check_int",
    "clear_error_cache",
    "error_reason",
    "group_results",
    "is_error_result",
    "looks_like_error",
    "old_groups_end",
    "placeholder_pattern",
    "render_placeholder",
    "rewrite_contents",
    "validate_template",
    "with_content",
]

HIDDEN_PLACEHOLDER = "<system>历史 tool_call已隐藏</system>"
"""KLIP-13's placeholder for a hidden tool result (ToolResultHiding's default)."""

SCHEMA1_PLACEHOLDER = (
    "[Observation masquée: résultat d’outil ancien "
    "(tool_call_id={tool_call_id}, outil={tool_name}, chars={original_chars})]"
)
"""Schema 1's placeholder template, as seed 001 writes it (French, ``d’outil``)."""

SCHEMA1_FIELDS = frozenset({"tool_call_id", "tool_name", "original_chars"})
"""The fields a Schema 1 placeholder template may use."""

UNKNOWN_TOOL_NAME = "inconnu"
"""``{tool_name}`` when the call a result answers has no name (seed 001)."""


# -- fast copies ------------------------------------------------------------------------------

# pydantic's own slot descriptors, called directly: half the cost of object.__setattr__,
# which looks the name up through the class hierarchy on every call.
_SLOTS = BaseModel.__dict__
SET_DICT = _SLOTS["__dict__"].__set__
SET_EXTRA = _SLOTS["__pydantic_extra__"].__set__
SET_FIELDS_SET = _SLOTS["__pydantic_fields_set__"].__set__
SET_PRIVATE = _SLOTS["__pydantic_private__"].__set__
_CONTENT_KEY = frozenset({"content"})


def with_content(message: Message, content: str) -> Message:
    """A copy of ``message`` with string ``content``; everything else (extras too) kept.

    Equivalent to ``message.model_copy(update={"content": content})`` for a string, about three
    times faster: strategies rewrite thousands of tool results per call, and the value needs no
    validation (it is a ``str``).
    """
    new = object.__new__(type(message))
    fields = message.__dict__.copy()
    fields["content"] = content
    SET_DICT(new, fields)
    # Extras and the fields set are shared, never mutated: frozen models cannot change
    # them, and pydantic copies both before updating a copy (``model_copy``).
    SET_EXTRA(new, message.__pydantic_extra__)
    fields_set = message.__pydantic_fields_set__
    SET_FIELDS_SET(new, fields_set if "content" in fields_set else fields_set | _CONTENT_KEY)
    SET_PRIVATE(new, message.__pydantic_private__)
    return new


def rewrite_contents(history: Sequence[Message], plan: Iterable[tuple[int, str]]) -> list[Message]:
    """A new list: ``history`` with ``message[i]`` replaced by its copy with content ``text``
    for each ``(i, text)`` of ``plan``; every other message is reused.

    :func:`with_content` inlined into one loop: hiding rewrites thousands of results per call,
    and per-call overhead is most of its cost.
    """
    out = list(history)
    new_object = object.__new__
    set_dict, set_extra, set_fields_set, set_private = (
        SET_DICT,
        SET_EXTRA,
        SET_FIELDS_SET,
        SET_PRIVATE,
    )
    content_key = _CONTENT_KEY
    for i, text in plan:
        message = history[i]
        new = new_object(type(message))
        fields = message.__dict__.copy()
        fields["content"] = text
        set_dict(new, fields)
        set_extra(new, message.__pydantic_extra__)  # shared: see with_content
        fields_set = message.__pydantic_fields_set__
        set_fields_set(new, fields_set if "content" in fields_set else fields_set | content_key)
        set_private(new, message.__pydantic_private__)
        out[i] = new
    return out


# -- the error heuristic ----------------------------------------------------------------------

# Each pattern is anchored to a line start or to a marker tools really print, so prose that
# merely mentions "error", "exception" or "timeout" does not count (seed 001 warns of this).
# Speed matters (tool outputs run to megabytes per request): the keywords are substrings every
# match contains, tested with a fast ``in`` first; line-start patterns are searched as
# "newline + pattern" (a literal first character the regex engine skips ahead to) plus a
# match at the very start, instead of trying ``^`` at every character.
_ERROR_PATTERNS: tuple[tuple[str, tuple[str, ...], str | None, str | None], ...] = (
    # name, keywords, line-start pattern, pattern anywhere
    ("traceback", ("Traceback (most",), r"Traceback \(most recent call last\)", None),
    (
        "error_line",
        ("Error", "ERROR", "FATAL", "fatal"),
        r"[ \t]*(?:Error|ERROR|FATAL|fatal)\b[ \t]*:",
        None,
    ),
    ("error_word", ("ERROR",), r"ERROR\b", None),
    (
        "exception_line",
        ("Exception:", "Error:"),
        r"[ \t]*(?:[A-Za-z_]\w*\.)*\w*(?:Exception|Error):",
        None,
    ),
    (
        "connection_refused",
        ("refused", "Refused", "REFUSED", "connect_error"),
        None,
        r"(?i:connection refused)|ECONNREFUSED|\bconnect_error\b",
    ),
    ("timeout", ("timed out", "TimeoutError"), None, r"\btimed out\b|\bTimeoutError\b"),
    (
        "exit_code",
        ("Exit code ", "<returncode>"),
        r"Exit code [1-9]",
        r"<returncode>(?:-\d+|[1-9]\d*)</returncode>",
    ),
    ("tool_use_error", ("<tool_use_error>",), None, r"<tool_use_error>"),
)


def _compile(line_start: str | None, anywhere: str | None) -> Callable[[str], object]:
    at_start = re.compile(line_start).match if line_start else None
    after_newline = re.compile("\n(?:" + line_start + ")").search if line_start else None
    search = re.compile(anywhere).search if anywhere else None

    def found(text: str) -> object:
        if (
            at_start is not None
            and after_newline is not None
            and (at_start(text) or after_newline(text))
        ):
            return True
        return search is not None and search(text)

    return found


_ERROR_CHECKS = tuple(
    (name, keywords, _compile(line_start, anywhere))
    for name, keywords, line_start, anywhere in _ERROR_PATTERNS
)
_EMPTY: tuple[object, ...] = (None, False, "", 0, [], {})


def _json_error(text: str) -> bool:
    stripped = text.lstrip()
    if not stripped.startswith(("{", "[")):
        return False
    try:
        value = json.loads(stripped)
    except ValueError:
        return False
    if not isinstance(value, dict):
        return False
    # ``"error": null`` is how many APIs say "no error", so an empty value does not count.
    if "error" in value and value["error"] not in _EMPTY:
        return True
    return value.get("status") == "error"


def _error_reason(text: str) -> str | None:
    """:func:`error_reason` without the cache."""
    if _json_error(text):
        return "json_error"
    for name, keywords, found in _ERROR_CHECKS:
        # A plain loop, not ``any(...)``: most texts are short and a generator per pattern
        # cost more than the substring tests themselves.
        for keyword in keywords:
            if keyword in text:
                if found(text):
                    return name
                break
    return None


# The verdict of a text never changes (strings are immutable), and a per-request transform
# sees the same tool results again at every call: without this cache, replaying one Claude
# Code trace spent 6.3 s of 7.7 s re-running the patterns. Keyed by the string itself, not by
# message identity, so it also hits when a proxy rebuilds equal messages from every request's
# JSON; the lookup hashes a string once (CPython caches str hashes) and compares equal strings
# with memcmp. Bounded in entries and in characters, least recently used out first, because it
# keeps its keys alive after their conversation is gone.
_CACHE_MAX_ENTRIES = 16_384
_CACHE_MAX_CHARS = 32_000_000
_verdicts: dict[str, str | None] = {}
_cached_chars = 0
_cache_lock = threading.Lock()
_MISS = ""  # never a verdict: every reason name is non-empty


def error_reason(text: str) -> str | None:
    """The name of the first error pattern ``text`` matches, or ``None``.

    Names: ``json_error`` (a JSON object with a non-empty ``error`` or ``"status": "error"``),
    ``traceback``, ``error_line``, ``error_word``, ``exception_line``, ``connection_refused``,
    ``timeout``, ``exit_code``, ``tool_use_error``. Verdicts are cached by text (a bounded,
    least-recently-used cache of at most 16,384 texts and 32 million characters), so asking
    again about a text already seen costs a dictionary lookup.

    Example:
        >>> error_reason("Traceback (most recent call last):\\n  ...")
        'traceback'
        >>> error_reason("The call raises an exception when the timeout is reached.") is None
        True
    """
    global _cached_chars
    with _cache_lock:
        verdict = _verdicts.pop(text, _MISS)
        if verdict != _MISS:
            _verdicts[text] = verdict  # back at the most recent end
            return verdict
    verdict = _error_reason(text)
    size = len(text)
    if size > _CACHE_MAX_CHARS:
        return verdict
    with _cache_lock:
        if text not in _verdicts:
            _verdicts[text] = verdict
            _cached_chars += size
            while len(_verdicts) > _CACHE_MAX_ENTRIES or _cached_chars > _CACHE_MAX_CHARS:
                oldest = next(iter(_verdicts))
                del _verdicts[oldest]
                _cached_chars -= len(oldest)
    return verdict


def clear_error_cache() -> None:
    """Forget every cached :func:`error_reason` verdict (benchmarks measure the first sight)."""
    global _cached_chars
    with _cache_lock:
        _verdicts.clear()
        _cached_chars = 0


def looks_like_error(content: object) -> bool:
    """Whether tool-result ``content`` looks like an error (seed 001 §6, without false alarms).

    Strings are checked directly; list content (raw dicts or parts) by its text parts.
    """
    if isinstance(content, str):
        return error_reason(content) is not None
    if isinstance(content, (list, tuple)):
        texts = []
        for part in content:
            if isinstance(part, TextPart):
                texts.append(part.text)
            elif isinstance(part, Mapping) and isinstance(part.get("text"), str):
                texts.append(part["text"])
        return any(error_reason(t) is not None for t in texts)
    return False


def is_error_result(message: Message) -> bool:
    """A tool result flagged as an error by its provider, or looking like one."""
    return message.is_error or looks_like_error(message.content)


# -- placeholders -----------------------------------------------------------------------------


def validate_template(template: str, allowed: Collection[str], *, key: str) -> None:
    """Raise :class:`ConfigError` unless ``template`` is a format string over ``allowed``."""
    try:
        fields = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
    except ValueError as exc:
        raise ConfigError(f"invalid placeholder template {template!r}: {exc}", key=key) from None
    if not any(literal for literal, _, _, _ in string.Formatter().parse(template)):
        raise ConfigError(
            f"placeholder template {template!r} needs some fixed text, or a masked result "
            "could not be told from a real one",
            key=key,
        )
    unknown = sorted(f for f in fields if f not in allowed)
    if unknown:
        raise ConfigError(
            f"placeholder template {template!r} uses unknown field(s) {unknown}; "
            f"allowed: {sorted(allowed)} (write {{{{ and }}}} for literal braces)",
            key=key,
        )
    try:
        sample = {"tool_call_id": "call_1", "tool_name": "ls", "original_chars": 1234}
        template.format(**{name: sample.get(name, "x") for name in allowed})
    except (ValueError, KeyError, IndexError, AttributeError) as exc:
        raise ConfigError(
            f"placeholder template {template!r} cannot be formatted: {exc}", key=key
        ) from None


def render_placeholder(template: str, *, tool_call_id: str, tool_name: str, chars: int) -> str:
    """``template`` with ``{tool_call_id}``, ``{tool_name}`` and ``{original_chars}`` filled."""
    return template.format(
        tool_call_id=tool_call_id, tool_name=tool_name or UNKNOWN_TOOL_NAME, original_chars=chars
    )


@lru_cache(maxsize=32)
def placeholder_pattern(template: str) -> re.Pattern[str]:
    """A regex that matches any rendering of ``template``, to leave masked results alone."""
    out = []
    for literal, field, _, _ in string.Formatter().parse(template):
        out.append(re.escape(literal))
        if field is not None:
            # Any rendering: format specs (``{original_chars:,}``) change how a value looks.
            out.append(r"[^\n]*?")
    return re.compile("".join(out), re.DOTALL)


# -- groups -----------------------------------------------------------------------------------


def old_groups_end(history: Sequence[Message], keep: int) -> int:
    """Where the ``keep`` newest tool-call groups start (``len(history)`` when ``keep`` is 0).

    ``0`` when there are fewer than ``keep`` groups, so nothing is old. Groups are
    counted as :func:`ctxcompact._groups.tool_groups` counts them (one per assistant message
    with calls), scanning back from the end only as far as needed.
    """
    if keep <= 0:
        return len(history)
    seen = 0
    for i in range(len(history) - 1, -1, -1):
        message = history[i]
        if message.tool_calls and message.role == "assistant":
            seen += 1
            if seen == keep:
                return i
    return 0


def group_results(history: Sequence[Message], stop: int) -> list[int]:
    """Indices of the tool results of every group that starts before ``stop``.

    The same indices as the ``result_indices`` of :func:`ctxcompact._groups.tool_groups`,
    in one tight pass: hiding thousands of results must cost little more than copying the
    list (see ``benchmarks/bench_strategies.py``).
    """
    out: list[int] = []
    append = out.append
    ids: object = ()
    for i, message in zip(range(stop), history, strict=False):
        role = message.role
        if role == "tool":
            if message.tool_call_id in ids:  # type: ignore[operator]
                append(i)
        elif role == "assistant" and message.tool_calls:
            calls = message.tool_calls
            ids = (calls[0].id,) if len(calls) == 1 else {c.id for c in calls}
        else:
            ids = ()
    return out


def call_names(call_message: Message) -> dict[str, str]:
    """``tool_call_id -> tool name`` for one assistant message (never the whole history)."""
    return {c.id: c.name for c in call_message.tool_calls or ()}


# -- parameters and batching ------------------------------------------------------------------


def check_int(name: str, value: int, *, minimum: int = 0) -> int:
    """``value`` if it is an int ``>= minimum``, else a :class:`ConfigError` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"must be an integer, got {value!r}", key=name)
    if value < minimum:
        raise ConfigError(f"must be >= {minimum}, got {value}", key=name)
    return value


def batched_boundary(
    boundary: int,
    *,
    batch_turns: int,
    clear_at_least: int,
    unit_tokens: Callable[[int], int],
) -> int:
    """Move a masking boundary only in batches, so the prompt prefix changes rarely.

    ``boundary`` is how many units (tool turns or groups), oldest first, may be masked.
    ``batch_turns = B`` rounds it down to a multiple of B. ``clear_at_least = T`` then moves
    it back to the last unit at which the cumulative tokens of what would be masked
    (``unit_tokens(k)`` for unit ``k``, counted from the oldest) cross a multiple of T, so
    at least T tokens are freed per move. Both depend on the history only.

    Example:
        >>> batched_boundary(7, batch_turns=3, clear_at_least=0, unit_tokens=lambda k: 1)
        6
        >>> batched_boundary(7, batch_turns=0, clear_at_least=250, unit_tokens=lambda k: 100)
        5
    """
    if batch_turns > 0:
        boundary -= boundary % batch_turns
    if clear_at_least <= 0 or boundary <= 0:
        return boundary
    total = 0
    allowed = 0
    for k in range(boundary):
        before = total // clear_at_least
        total += unit_tokens(k)
        if total // clear_at_least > before:
            allowed = k + 1
    return allowed
