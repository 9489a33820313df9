"""Removed then referenced: what a strategy took from the model's view that the model needed later.

Replay knows, for every model call of a recorded conversation, the input that call would
have seen. :func:`removed_then_referenced` compares those inputs with the recording and counts
the tool results a strategy removed whose content the model quoted afterwards, when it could no
longer see it: each is a result the agent would have had to read again, guess, or get wrong.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .._history.messages import RawPart
from ..kit._terms import distinctive_tokens
from ..kit._terms import words as _words
from ..store._removed import removed_originals

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from .._history.messages import Message

__all__ = [
    "ReferencedReport",
    "ReferencedResult",
    "distinctive_tokens",
    "removed_then_referenced",
]


def _answer_text(message: Message) -> str:
    """What the model wrote: its text and its tool calls' arguments."""
    parts = [message.text]
    parts.extend(c.arguments for c in message.tool_calls or ())
    return "\n".join(parts)


def _visible_text(message: Message) -> str:
    """Everything of a message the model sees: text, tool calls, reasoning, thinking blocks."""
    parts = [message.text]
    for tool_call in message.tool_calls or ():
        parts += (tool_call.name, tool_call.arguments)
    reasoning = (message.model_extra or {}).get("reasoning_content")
    if isinstance(reasoning, str):
        parts.append(reasoning)
    if isinstance(message.content, tuple):
        for part in message.content:
            if isinstance(part, RawPart):
                parts.extend(v for v in (part.model_extra or {}).values() if isinstance(v, str))
    return "\n".join(parts)


class _Visible:
    """The text one call's input held, searched lazily (most calls need no search)."""

    def __init__(self, messages: Sequence[Message]) -> None:
        self._messages = messages
        self._raw: str | None = None
        self._words: str | None = None

    def holds(self, token: str) -> bool:
        if self._raw is None:
            self._raw = "\n".join(_visible_text(m) for m in self._messages)
        if token.startswith("6g:"):
            if self._words is None:
                self._words = " " + " ".join(_words(self._raw)) + " "
            return f" {token[3:]} " in self._words
        return token in self._raw


@dataclass(frozen=True, slots=True)
class ReferencedResult:
    """One tool result a strategy removed, and whether the model quoted it afterwards.

    Attributes:
        position: Its index in the recording.
        tool_call_id: The id of the call it answers.
        removed_at: The recording index of the first call whose input did not hold it
            verbatim.
        referenced_at: The recording index of the first answer that quoted it while it was
            out of view, or ``None``.
        quoted: The distinctive tokens that answer quoted and its input did not hold.
        distinctive: How many distinctive tokens the result has.

    Example:
        >>> ReferencedResult(4, "c1", 9, None, (), 12).referenced
        False
    """

    position: int
    tool_call_id: str | None
    removed_at: int
    referenced_at: int | None
    quoted: tuple[str, ...]
    distinctive: int

    @property
    def referenced(self) -> bool:
        """Whether a later answer quoted it while it was removed."""
        return self.referenced_at is not None


@dataclass(frozen=True, slots=True)
class ReferencedReport:
    """Removed-then-referenced counts for one conversation (or a sum of them).

    Attributes:
        results: Tool results in the recording that some model call came after.
        removed: Of those, the ones missing (not verbatim) from the input of some later call.
        referenced: Of those, the ones a later answer quoted while they were out of view.
        details: One :class:`ReferencedResult` per removed result, in recording order.

    Example:
        >>> (ReferencedReport(10, 4, 1) + ReferencedReport(5, 4, 1)).rate
        0.25
    """

    results: int = 0
    removed: int = 0
    referenced: int = 0
    details: tuple[ReferencedResult, ...] = field(default=(), repr=False)

    @property
    def rate(self) -> float:
        """``referenced / removed`` (0 when nothing was removed)."""
        return self.referenced / self.removed if self.removed else 0.0

    def __add__(self, other: ReferencedReport) -> ReferencedReport:
        return ReferencedReport(
            self.results + other.results,
            self.removed + other.removed,
            self.referenced + other.referenced,
            self.details + other.details,
        )


def removed_then_referenced(
    recording: Sequence[Message], inputs: Mapping[int, Sequence[Message]]
) -> ReferencedReport:
    """Count the tool results removed from view that the model quoted afterwards.

    Method, precisely:

    1. Each key of ``inputs`` is the index in ``recording`` of an assistant message (a model
       call's answer); its value is the input that call saw: ``recording[:index]`` after the
       strategy (replay's ``on_call`` gives exactly these pairs; keep a copy of each input,
       ``list(request)``, as replay goes on appending to its history).
    2. A tool result at position ``p`` is *removed at call* ``c`` (``c > p``) when
       :func:`~ctxcompact.store.removed_originals` of ``recording[:c]`` and that input lists
       it: the input does not hold it verbatim (hidden, masked, truncated, dropped or
       summarised). Results are matched by position, never by id alone.
    3. Its distinctive tokens are :func:`distinctive_tokens` of its text.
    4. It is *referenced* when, for some call ``c`` at which it is removed, the answer
       ``recording[c]`` (its text and its tool calls' arguments) contains one of those tokens
       (the answer's own distinctive tokens, so whole identifiers and numbers, not parts) and
       that token is nowhere in the input of call ``c``: no message's text, tool call name or
       arguments, reasoning or thinking text holds it as a substring (6-grams: as six whole
       words). The model wrote something it could only have taken from the removed result
       (or guessed).

    A result quoted by several answers counts once; results with no distinctive tokens can
    be removed but never referenced. The rate is ``referenced / removed``.

    Args:
        recording: The whole recorded conversation.
        inputs: For each model call, by the index of its answer, the input it saw.

    Example:
        >>> from ctxcompact import Message, ToolCall
        >>> grep = ToolCall(id="c1", name="grep", arguments='{"q": "def"}')
        >>> rec = [Message.user("find it"), Message.assistant(None, tool_calls=[grep]),
        ...        Message.tool("c1", "found in src/core/engine.py"), Message.assistant("ok"),
        ...        Message.user("where?"), Message.assistant("In src/core/engine.py.")]
        >>> hidden = [*rec[:2], Message.tool("c1", "[hidden]"), *rec[3:5]]
        >>> report = removed_then_referenced(rec, {3: rec[:3], 5: hidden})
        >>> report.removed, report.referenced, report.details[0].quoted
        (1, 1, ('src/core/engine.py',))
    """
    calls = sorted(i for i in inputs if 0 <= i < len(recording))
    last_call = calls[-1] if calls else -1
    results = sum(1 for i, m in enumerate(recording[:last_call]) if m.role == "tool")
    removed_at: dict[int, int] = {}
    referenced: dict[int, tuple[int, tuple[str, ...]]] = {}
    tokens: dict[int, frozenset[str]] = {}
    for c in calls:
        answer = recording[c]
        answer_tokens: frozenset[str] | None = None
        visible = _Visible(inputs[c])
        for removal in removed_originals(recording[:c], inputs[c]):
            p = removal.position
            if removal.message.role != "tool":
                continue
            removed_at.setdefault(p, c)
            if p in referenced:
                continue
            if p not in tokens:
                tokens[p] = distinctive_tokens(removal.message.text)
            if not tokens[p] or answer.role != "assistant":
                continue
            if answer_tokens is None:
                answer_tokens = distinctive_tokens(_answer_text(answer))
            quoted = tuple(sorted(t for t in tokens[p] & answer_tokens if not visible.holds(t)))
            if quoted:
                referenced[p] = (c, quoted)
    details = tuple(
        ReferencedResult(
            position=p,
            tool_call_id=recording[p].tool_call_id,
            removed_at=removed_at[p],
            referenced_at=referenced[p][0] if p in referenced else None,
            quoted=referenced[p][1] if p in referenced else (),
            distinctive=len(tokens.get(p) or distinctive_tokens(recording[p].text)),
        )
        for p in sorted(removed_at)
    )
    return ReferencedReport(results, len(removed_at), len(referenced), details)
