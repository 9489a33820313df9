"""Placeholders for hidden tool results: the texts, templates, and what one saves in tokens.

Written once here so every strategy, and the store that recognises a placeholder later,
agrees on what a hidden result looks like.
"""

from __future__ import annotations

import math
import re
import string
from functools import lru_cache
from typing import TYPE_CHECKING

from .._history.messages import Message, with_content
from .._tokens.counters import HeuristicTokenCounter, TiktokenCounter, counts_text
from ..exceptions import ConfigError

if TYPE_CHECKING:
    from collections.abc import Callable, Collection

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
    "placeholder_pattern",
    "render_placeholder",
    "validate_template",
]

HIDDEN_PLACEHOLDER = "[old tool result hidden]"
"""``ToolResultHiding``'s default placeholder: 8 heuristic tokens, where KLIP-13's own text
(:data:`KLIP13_PLACEHOLDER`) costs 15."""

KLIP13_PLACEHOLDER = "<system>历史 tool_call已隐藏</system>"
"""KLIP-13's own placeholder, as the seed writes it; a preset:
``ToolResultHiding(placeholder=KLIP13_PLACEHOLDER)``."""

SCHEMA1_PLACEHOLDER = (
    "[Observation masked: old tool result "
    "(tool_call_id={tool_call_id}, tool={tool_name}, chars={original_chars})]"
)
"""``Schema1Masking``'s default placeholder template: seed 001's text, in English (fields
:data:`SCHEMA1_FIELDS`, filled by :func:`render_placeholder`)."""

SCHEMA1_SEED_PLACEHOLDER = (
    "[Observation masquée: résultat d’outil ancien "
    "(tool_call_id={tool_call_id}, outil={tool_name}, chars={original_chars})]"
)
"""Seed 001's template as the seed writes it (French, ``d’outil``): the default of
``MaskPolicy``, and a preset: ``Schema1Masking(placeholder_template=SCHEMA1_SEED_PLACEHOLDER)``."""

SCHEMA1_FIELDS = frozenset({"tool_call_id", "tool_name", "original_chars"})
"""The fields :func:`render_placeholder` fills (``tool_call_id``, ``tool_name``,
``original_chars``): pass them to :func:`validate_template`."""

UNKNOWN_TOOL_NAME = "unknown"
"""``{tool_name}`` when the call a result answers has no name (seed 001 writes ``inconnu``)."""


# -- placeholders -----------------------------------------------------------------------------


def validate_template(template: str, allowed: Collection[str], *, key: str) -> None:
    """Check a placeholder template when the strategy is built, not when it first runs.

    The template must be a ``str.format`` template that uses only the fields in
    ``allowed`` and has some fixed text (or a placeholder could not be told from a real
    result).

    Raises:
        ConfigError: Naming ``key`` (the parameter) and what is wrong; the loader reports it
            with the strategy's spec.

    Example:
        >>> from ctxcompact.exceptions import ConfigError
        >>> validate_template("[old {tool} result]", {"tool"}, key="placeholder")
        >>> try:
        ...     validate_template("[old {nope}]", {"tool"}, key="placeholder")
        ... except ConfigError as exc:
        ...     print(exc.key, "|", exc)
        placeholder | key 'placeholder': placeholder template '[old {nope}]' uses unknown field(s) ['nope']; allowed: ['tool'] (write {{ and }} for literal braces)
    """  # noqa: E501 - a doctest's output is one line
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
    """A Schema 1 style placeholder: ``template`` with ``{tool_call_id}``, ``{tool_name}``
    (:data:`UNKNOWN_TOOL_NAME` when empty) and ``{original_chars}`` filled in.

    Example:
        >>> render_placeholder("[masked {tool_name} {tool_call_id}: {original_chars} chars]",
        ...                    tool_call_id="c1", tool_name="", chars=1200)
        '[masked unknown c1: 1200 chars]'
    """
    return template.format(
        tool_call_id=tool_call_id, tool_name=tool_name or UNKNOWN_TOOL_NAME, original_chars=chars
    )


@lru_cache(maxsize=32)
def placeholder_pattern(template: str) -> re.Pattern[str]:
    """A regex matching any rendering of ``template``: use ``fullmatch`` on a result's text
    to leave an already-masked result alone (masking it again would change it for nothing).

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

    Example:
        >>> masked = placeholder_pattern("[masked {tool_name}: {original_chars} chars]")
        >>> bool(masked.fullmatch("[masked ls: 1,200 chars]")), bool(masked.fullmatch("a.py"))
        (True, False)
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


_HEURISTIC_TEXT = HeuristicTokenCounter.count_text
_TIKTOKEN_TEXT = TiktokenCounter.count_text


class PlaceholderCost:
    """What replacing a tool result's content with a placeholder saves, under one counter.

    Hiding must never make a result bigger in tokens, so every verdict is in the counter's
    tokens, not in characters (a 32-character Chinese placeholder costs as much as ~48 ASCII
    characters under the heuristic). Counting every result would make hiding several times
    slower, so a string result is counted only when it is at most :meth:`char_bound`
    characters long; above that it surely costs more than the placeholder. A counter that
    counts a bare string (:func:`~ctxcompact.counts_text`: both built-ins, a counter of
    one's own with ``count_text``, replay's memo around either) has only the texts counted,
    the rest of the message being the same before and after; any other counter counts the
    whole message both ways. The verdicts are the same either way, only the work differs.
    When the text counting is the built-in heuristic's or tiktoken's (a wrapper forwarding
    it included), bounds known of it settle most results without counting them.

    Args:
        counter: The context's token counter.

    Example:
        >>> cost = PlaceholderCost(HeuristicTokenCounter())
        >>> cost.tokens("<hidden>"), cost.char_bound(cost.tokens("<hidden>"))
        (3, 9)
    """

    __slots__ = ("_bytes_bound", "_counter", "_cpt", "_rate", "_text_tokens", "ascii_by_length")

    def __init__(self, counter: TokenCounter) -> None:
        self._counter = counter
        self._text_tokens: Callable[[str], int] | None = None
        self._rate = float(MAX_CHARS_PER_TOKEN)
        self._cpt = 0.0  # the heuristic's chars_per_token
        self.ascii_by_length = False
        """Whether an ASCII string result saves tokens exactly when it is longer than
        :meth:`char_bound` (the heuristic's ASCII cost depends on the length alone), so the
        fast path need not count it."""
        self._bytes_bound = False  # tiktoken's: at most one token a UTF-8 byte
        if not counts_text(counter):
            return
        text_tokens = self._text_tokens = counter.count_text
        # The bounds below are facts about the built-in text counting, whoever holds it: the
        # counter, a subclass that keeps it, or a wrapper that forwards it.
        owner = getattr(text_tokens, "__self__", None)
        function = getattr(text_tokens, "__func__", None)
        if isinstance(owner, HeuristicTokenCounter) and function is _HEURISTIC_TEXT:
            # Its ASCII rate is exact, and any other character costs at least one token.
            self._cpt = owner.chars_per_token
            self._rate = max(self._cpt, 1.0)
            self.ascii_by_length = self._rate == owner.chars_per_token
        elif isinstance(owner, TiktokenCounter) and function is _TIKTOKEN_TEXT:
            self._bytes_bound = True

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
        if not self._cpt:  # tiktoken, or a counter of one's own: no bound known of it
            if self._bytes_bound and len(content) > self._rate * size:
                return True  # tiktoken: at most one token a byte
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
