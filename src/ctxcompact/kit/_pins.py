"""Pins: the messages no built-in strategy drops, hides or summarises away.

Always pinned: system (and developer) messages, the first user message (the task as the user
stated it) and the newest user message (what they asked last). ctxcompact's own summaries
(user messages starting with its summary prefix) are never the first or newest *user* message:
they stand for older messages. Users pin more with :class:`PinRules`: a Python predicate, and
patterns (``[compaction] pin_patterns`` in TOML) matched against each message's text.

Strategies read the pins with :func:`pinned_indices` (the guard keeps them all, a summary
leaves them verbatim before it); after every
rewrite the controller checks that the task, the newest user message and each message the
user pinned are still in the view, verbatim, and puts back what a strategy lost (a
``pin_restored`` problem says so); system messages are left to the strategies.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

import re2

from ..exceptions import ConfigError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .._history.messages import Message

__all__ = [
    "MAX_PIN_PATTERNS",
    "MAX_PIN_PATTERN_CHARS",
    "SUMMARY_MARK",
    "PinRules",
    "pinned_indices",
]

MAX_PIN_PATTERNS = 64
"""The most patterns :class:`PinRules` takes: each is run over every message's text."""

MAX_PIN_PATTERN_CHARS = 1_000
"""The longest pattern :class:`PinRules` takes."""

SUMMARY_MARK = "[ctxcompact] The earlier part of this conversation was compacted."
"""How ctxcompact's summaries start (``LLMSummary``'s ``SUMMARY_PREFIX``): such a user
message is never the first or the newest user message for pinning."""

_SYSTEM_ROLES = frozenset({"system", "developer"})
_REGEX_META = frozenset("\\.^$|?*+()[]{}")
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False
_RE2_OPTIONS.never_capture = True


class PinRules:
    """What a user pins beyond the defaults: a predicate and patterns, as one predicate.

    A pattern without regex syntax is a literal (``in``); any other is compiled by RE2, whose
    time is linear in the text whatever the pattern (no catastrophic regex, even from a
    config file someone else wrote). At most :data:`MAX_PIN_PATTERNS` patterns of at most
    :data:`MAX_PIN_PATTERN_CHARS` characters. Verdicts are remembered per message object
    (messages are immutable), so checking a growing history costs its new messages only.

    Args:
        patterns: Texts or RE2 patterns; a message whose text matches one is pinned.
        predicate: ``message -> bool``; ``True`` pins the message.

    Raises:
        ConfigError: Too many or too long patterns, or one RE2 cannot compile (``key`` is
            ``pin_patterns``).

    Example:
        >>> from ctxcompact import Message
        >>> rules = PinRules(["## Rules", r"never (push|merge)"])
        >>> rules(Message.user("## Rules\\n1. tests first")), rules(Message.user("hello"))
        (True, False)
    """

    __slots__ = ("_matchers", "_memo", "patterns", "predicate")

    def __init__(
        self,
        patterns: Sequence[str] = (),
        *,
        predicate: Callable[[Message], bool] | None = None,
    ) -> None:
        if isinstance(patterns, str):
            raise ConfigError("must be a list of patterns, not one string", key="pin_patterns")
        patterns = list(patterns)
        if len(patterns) > MAX_PIN_PATTERNS:
            raise ConfigError(
                f"at most {MAX_PIN_PATTERNS} patterns, got {len(patterns)}", key="pin_patterns"
            )
        self.patterns = tuple(patterns)
        self.predicate = predicate
        self._matchers: list[Callable[[str], bool]] = [_matcher(p) for p in patterns]
        self._memo: dict[int, tuple[weakref.ref[Message], bool]] = {}

    def __repr__(self) -> str:
        return f"PinRules({list(self.patterns)!r}, predicate={self.predicate!r})"

    def __bool__(self) -> bool:
        return bool(self._matchers) or self.predicate is not None

    def __call__(self, message: Message) -> bool:
        """Whether the user pinned ``message``."""
        key = id(message)
        hit = self._memo.get(key)
        if hit is not None and hit[0]() is message:
            return hit[1]
        text = message.text
        verdict = any(m(text) for m in self._matchers) or bool(
            self.predicate is not None and self.predicate(message)
        )
        memo = self._memo
        if len(memo) > 65_536:  # a long-lived proxy: forget rather than grow
            memo.clear()

        def forget(_: object, key: int = key) -> None:
            memo.pop(key, None)

        memo[key] = (weakref.ref(message, forget), verdict)
        return verdict


def _matcher(pattern: str) -> Callable[[str], bool]:
    if not isinstance(pattern, str) or not pattern:
        raise ConfigError(
            f"a pattern must be a non-empty string, got {pattern!r}", key="pin_patterns"
        )
    if len(pattern) > MAX_PIN_PATTERN_CHARS:
        raise ConfigError(
            f"a pattern may have at most {MAX_PIN_PATTERN_CHARS} characters, got {len(pattern)}",
            key="pin_patterns",
        )
    if not _REGEX_META.intersection(pattern):
        return lambda text: pattern in text
    try:
        compiled = re2.compile(pattern.encode("utf-8"), _RE2_OPTIONS)
    except (re2.error, UnicodeEncodeError) as exc:
        raise ConfigError(
            f"pattern {pattern!r} is not a valid RE2 expression ({type(exc).__name__}); "
            "RE2 is Python's syntax without look-around or backreferences",
            key="pin_patterns",
        ) from None
    search = compiled.search
    return lambda text: search(text.encode("utf-8", "surrogatepass")) is not None


def _is_summary(message: Message) -> bool:
    return message.text.startswith(SUMMARY_MARK)


def pinned_indices(
    history: Sequence[Message], pin: Callable[[Message], bool] | None = None
) -> frozenset[int]:
    """Indices of the pinned messages of ``history``: system and developer messages, the
    first and the newest user message (ctxcompact's summaries aside), and those ``pin``
    (e.g. :class:`PinRules`) says.

    Example:
        >>> from ctxcompact import Message
        >>> h = [Message.system("s"), Message.user("task"), Message.assistant("ok"),
        ...      Message.user("more"), Message.assistant("done"), Message.user("last")]
        >>> sorted(pinned_indices(h))
        [0, 1, 5]
    """
    pinned: set[int] = set()
    first = newest = None
    for i, message in enumerate(history):
        role = message.role
        if role in _SYSTEM_ROLES:
            pinned.add(i)
        elif role == "user" and not _is_summary(message):
            if first is None:
                first = i
            newest = i
        if pin is not None and i not in pinned and pin(message):
            pinned.add(i)
    pinned.update(i for i in (first, newest) if i is not None)
    return frozenset(pinned)
