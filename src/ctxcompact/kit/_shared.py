"""Helpers every built-in strategy shares: placeholders, copies, parameter checks and the
cache-friendly batching of a masking boundary.

Written once here so the strategies agree on what a hidden result looks like. The error
heuristic lives in :mod:`._errors`.
"""

from __future__ import annotations

import math
import re
import string
from functools import lru_cache
from typing import TYPE_CHECKING

from .._history.messages import Message, with_content
from .._tokens.counters import HeuristicTokenCounter, TiktokenCounter
from ..exceptions import ConfigError
from ._errors import is_error_result  # re-exported: benchmarks/bench_replay.py imports it here

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterable, Sequence

    from .._tokens.counters import TokenCounter

__all__ = [
    "HEURISTIC_TOKENS_PER_EXTRA_BYTE",
    "HIDDEN_PLACEHOLDER",
    "KLIP13_PLACEHOLDER",
    "MAX_CHARS_PER_TOKEN",
    "SCHEMA1_FIELDS",
    "SCHEMA1_PLACEHOLDER",
    "SCHEMA1_SEED_PLACEHOLDER",
    "UNKNOWN_TOOL_NAME",
    "PlaceholderCost",
    "batched_boundary",
    "call_names",
    "check_int",
    "group_results",
    "is_error_result",
    "old_groups_end",
    "placeholder_pattern",
    "render_placeholder",
    "rewrite_contents",
    "validate_template",
    "with_content",
]

HIDDEN_PLACEHOLDER = "[old tool result hidden]"
"""ToolResultHiding's default placeholder (8 heuristic tokens, KLIP-13's own text costs 15)."""

KLIP13_PLACEHOLDER = "<system>历史 tool_call已隐藏</system>"
"""KLIP-13's own placeholder, a preset: ``ToolResultHiding(placeholder=KLIP13_PLACEHOLDER)``."""

SCHEMA1_PLACEHOLDER = (
    "[Observation masked: old tool result "
    "(tool_call_id={tool_call_id}, tool={tool_name}, chars={original_chars})]"
)
"""Schema1Masking's default placeholder template: seed 001's text, in English."""

SCHEMA1_SEED_PLACEHOLDER = (
    "[Observation masquée: résultat d’outil ancien "
    "(tool_call_id={tool_call_id}, outil={tool_name}, chars={original_chars})]"
)
"""Seed 001's template as written (French, ``d’outil``): the default of :class:`MaskPolicy`,
a preset for ``Schema1Masking(placeholder_template=SCHEMA1_SEED_PLACEHOLDER)``."""

SCHEMA1_FIELDS = frozenset({"tool_call_id", "tool_name", "original_chars"})
"""The fields a Schema 1 placeholder template may use."""

UNKNOWN_TOOL_NAME = "unknown"
"""``{tool_name}`` when the call a result answers has no name (seed 001 writes ``inconnu``)."""


# -- copies -----------------------------------------------------------------------------------


def rewrite_contents(history: Sequence[Message], plan: Iterable[tuple[int, str]]) -> list[Message]:
    """A new list: ``history`` with ``message[i]`` replaced by its copy with content ``text``
    for each ``(i, text)`` of ``plan`` (:func:`with_content`); every other message is reused.
    """
    out = list(history)
    for i, text in plan:
        out[i] = with_content(history[i], text)
    return out


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
    """A regex whose ``fullmatch`` tells any rendering of ``template``, in linear time.

    A field stands for any text without a newline (format specs such as
    ``{original_chars:,}`` change how a value looks). Every result of a conversation is
    matched against it, and a tool's output can be crafted, so the regex must not backtrack
    over a field: a lazy ``[^\n]*?`` per field cost O(n^fields) (7.9 s for 6.8 kB of
    ``, tool=, chars=`` repeated behind the Schema 1 prefix). Here a field followed, on its
    line, by a literal and another field stops at that literal's first occurrence (which is
    always a valid choice: a later one leaves less room and no more), and the last field of
    a line takes the line up to the literal that ends it; so every character is tried a
    bounded number of times. It accepts exactly what the lazy form accepted
    (``tests/test_redos.py`` checks that on random templates and on every tool result of
    the traces).
    """
    literals = [""]  # literal, field(s), literal, ..., literal
    for literal, field, _, _ in string.Formatter().parse(template):
        literals[-1] += literal
        if field is not None and not (len(literals) > 1 and literals[-1] == ""):
            literals.append("")  # fields in a row make one gap
    out = [re.escape(literals[0])]
    for k, literal in enumerate(literals[1:], start=1):
        if k == len(literals) - 1 or "\n" in literal:
            out.append(r"[^\n]*")  # ends its line: one place the literal can be
        else:
            out.append(r"(?:(?!" + re.escape(literal) + r")[^\n])*")  # to its first occurrence
        out.append(re.escape(literal))
    return re.compile("".join(out), re.DOTALL)


# -- what a placeholder saves -----------------------------------------------------------------

MAX_CHARS_PER_TOKEN = 16
"""Characters per token no real text exceeds, for counters other than the heuristic.

Tokenizers average 3 to 5 characters per token; only long runs of one character (spaces,
``=``) pack more. A string result longer than this many characters per token of the
placeholder is taken to cost more than the placeholder without being counted."""


HEURISTIC_TOKENS_PER_EXTRA_BYTE = 1.3
"""The most a non-ASCII character costs under the heuristic, per UTF-8 byte beyond its first:
1.3 for a two-byte character of the scripts after Cyrillic, at most 1.0 for any other
(``tests/test_strategy_shared.py`` checks every character against the counter)."""


class PlaceholderCost:
    """What replacing a tool result's content with a placeholder saves, under one counter.

    Hiding must never make a result bigger in tokens, so every verdict is in the counter's
    tokens, not in characters (a 32-character Chinese placeholder costs as much as ~48 ASCII
    characters under the heuristic). Counting every result would make hiding several times
    slower, so a string result is counted only when it is at most :meth:`char_bound`
    characters long; above that it surely costs more than the placeholder. For the two
    built-in counters, which count a message as an overhead plus its texts, only the texts
    are counted (the rest is the same before and after); any other counter counts the whole
    message both ways.

    Args:
        counter: The context's token counter.

    Example:
        >>> cost = PlaceholderCost(HeuristicTokenCounter())
        >>> cost.tokens("<hidden>"), cost.char_bound(cost.tokens("<hidden>"))
        (3, 9)
    """

    __slots__ = ("_counter", "_cpt", "_rate", "_text_tokens", "ascii_by_length")

    def __init__(self, counter: TokenCounter) -> None:
        self._counter = counter
        self._text_tokens: Callable[[str], int] | None = None
        self._rate = float(MAX_CHARS_PER_TOKEN)
        self._cpt = 0.0  # the heuristic's chars_per_token
        self.ascii_by_length = False
        """Whether an ASCII string result saves tokens exactly when it is longer than
        :meth:`char_bound` (the heuristic's ASCII cost depends on the length alone), so the
        fast path need not count it."""
        # Exact types only: a subclass may count a message some other way.
        kind = type(counter)
        if isinstance(counter, TiktokenCounter) and kind is TiktokenCounter:
            self._text_tokens = counter.count_text
        elif isinstance(counter, HeuristicTokenCounter) and kind is HeuristicTokenCounter:
            self._text_tokens = counter.count_text
            # Its ASCII rate is exact, and any other character costs at least one token.
            self._cpt = counter.chars_per_token
            self._rate = max(self._cpt, 1.0)
            self.ascii_by_length = self._rate == counter.chars_per_token

    def tokens(self, placeholder: str) -> int:
        """The placeholder's cost, in the unit :meth:`saved` and :meth:`char_bound` take."""
        if self._text_tokens is not None:
            return self._text_tokens(placeholder)
        return self._counter.count_message(Message.tool("", placeholder))

    def shrinks(self, message: Message, placeholder: str) -> bool:
        """Whether ``placeholder`` as content costs fewer tokens than ``message``'s content.

        The same verdict as ``saved(message, placeholder, tokens(placeholder)) > 0``,
        counting as little as it can, for a placeholder rendered anew for each result (Schema
        1), where counting each exactly would cost more than the rest of masking. A tiktoken
        token is at least one UTF-8 byte. Under the heuristic an ASCII character costs
        ``1 / chars_per_token`` and any other at least that, and at most
        :data:`HEURISTIC_TOKENS_PER_EXTRA_BYTE` per byte its UTF-8 encoding has beyond the
        first: so cheap bounds of the placeholder's cost settle most results.
        """
        content = message.content
        text_tokens = self._text_tokens
        if text_tokens is None or type(content) is not str:
            return self.saved(message, placeholder, 0) > 0  # counts the whole message
        size = len(placeholder.encode("utf-8", "surrogatepass"))
        if not self._cpt:  # tiktoken: at most one token a byte
            if len(content) > self._rate * size:
                return True
            return text_tokens(content) > text_tokens(placeholder)
        cpt, length = self._cpt, len(placeholder)
        most = math.ceil(length / cpt + HEURISTIC_TOKENS_PER_EXTRA_BYTE * (size - length))
        if len(content) > self._rate * most:
            return True
        if self.ascii_by_length and content.isascii():
            tokens = math.ceil(len(content) / cpt)  # text_tokens(content), without the call
            if tokens <= math.ceil(length / cpt):  # the placeholder's least possible cost
                return False
            if tokens > most:
                return True
        return text_tokens(content) > text_tokens(placeholder)

    def char_bound(self, placeholder_tokens: int) -> int:
        """A string result longer than this costs more than the placeholder, uncounted."""
        return int(self._rate * placeholder_tokens)

    def saved(self, message: Message, placeholder: str, placeholder_tokens: int) -> int:
        """Tokens freed by giving ``message`` the content ``placeholder`` (``<= 0``: none)."""
        content = message.content
        if self._text_tokens is not None and type(content) is str:
            return self._text_tokens(content) - placeholder_tokens
        count = self._counter.count_message
        return count(message) - count(with_content(message, placeholder))


# -- groups -----------------------------------------------------------------------------------


def old_groups_end(history: Sequence[Message], keep: int) -> int:
    """Where the ``keep`` newest tool-call groups start (``len(history)`` when ``keep`` is 0).

    ``0`` when there are fewer than ``keep`` groups, so nothing is old. Groups are
    counted as :func:`ctxcompact.tool_groups` counts them (one per assistant message
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

    The same indices as the ``result_indices`` of :func:`ctxcompact.tool_groups`,
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
