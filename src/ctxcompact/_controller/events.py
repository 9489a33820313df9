"""Compaction events and the checks the controller applies to a strategy's output."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from .._history.messages import Message
from .._history.validate import check_history

if TYPE_CHECKING:
    from ..llm._breaker import OutageStatus
    from .problems import Problem

__all__ = [
    "AheadUse",
    "CompactionEvent",
    "CompactionResult",
    "EventStatus",
    "PreparedRequest",
    "Step",
    "Trigger",
    "breaks_cache",
    "rejection",
    "same_messages",
    "strategy_name",
]

Trigger = Literal["threshold", "ratio", "messages", "forced", "cold"]
EventStatus = Literal["compacted", "noop", "rejected", "failed", "skipped", "circuit_open"]
AheadUse = Literal["used", "unused"]


@dataclass(frozen=True, slots=True)
class CompactionEvent:
    """What one triggered compaction did (or why it did nothing).

    Attributes:
        strategy: The strategy's name (its ``name`` attribute, else its class name).
        trigger: ``threshold`` (``tokens + reserved >= max``), ``ratio`` (``tokens >=
            trigger_ratio * max``), ``messages`` (more than ``max_messages`` messages) or
            ``forced`` (``compact(force=True)``) or ``cold`` (the prompt cache expired since
            the last call: ``cache_ttl``).
        status: ``compacted`` (history replaced), ``noop`` (the strategy returned ``None``
            or the same messages), ``rejected`` (its output broke ``check_history`` or was
            not a list of messages; the original kept), ``failed`` (it raised; the original
            kept), ``skipped`` (the last attempt saved too little and the history has not
            grown enough since), ``circuit_open`` (too many consecutive failures).
        tokens_before: The controller's token count when it fired.
        tokens_after: The estimate of the result (equal to ``tokens_before`` if unchanged).
        messages_before: Length of the input history.
        messages_after: Length of the result.
        duration_s: Time spent in the strategy.
        problems: Why it was rejected, failed, skipped or not run, as fields
            (:class:`~ctxcompact.Problem`): the run's own problem, then ``circuit_open`` when
            this failure opened the circuit. When it compacted: ``pin_restored`` when the
            strategy lost pinned messages and the controller put them back, else empty.
        messages_rewritten: Input messages not kept as they were (dropped, summarized,
            masked or truncated); non-zero is logged as a warning.
        summarizer: What the run's model calls met, when a circuit breaker saw it
            (:class:`~ctxcompact.llm.CircuitBreakerLLM`): ``unavailable`` (a call was refused
            unsent: the breaker is open, and the run went without the summary, e.g. hiding
            alone) or ``failed`` (a call failed as in an outage); ``None`` otherwise.
        ahead: Whether the run was offered a summary made ahead of time in the background
            (``precompute_ratio``) and put it in place (``used``: no summarizer call on the
            hot path for it) or not (``unused``: the cheaper steps sufficed, or it no longer
            fitted); ``None`` when there was none.
        waited_s: Seconds the run waited for that summary to be finished (it had started
            too late): the part of it on the hot path.
        cache_break: The result rewrote or dropped a message that an earlier model call
            already had in its prompt (one before the history's last assistant message), so
            the provider's cached prompt prefix ends there (:func:`breaks_cache`). ``False``
            unless ``compacted``.

    Example:
        >>> e = CompactionEvent("Hiding", "threshold", "compacted", 900, 300, 40, 40, 0.01)
        >>> e.tokens_before - e.tokens_after
        600
    """

    strategy: str
    trigger: Trigger
    status: EventStatus
    tokens_before: int
    tokens_after: int
    messages_before: int
    messages_after: int
    duration_s: float
    problems: tuple[Problem, ...] = ()
    messages_rewritten: int = 0
    summarizer: OutageStatus | None = None
    ahead: AheadUse | None = None
    waited_s: float = 0.0
    cache_break: bool = False

    @property
    def problem(self) -> Problem | None:
        """The run's own problem (the first of :attr:`problems`), or ``None``."""
        return self.problems[0] if self.problems else None

    @property
    def error(self) -> str | None:
        """The problems as one sentence (``None`` when there is none): ctxcompact's own error
        messages in full, a third-party exception by its type name only. Decide on
        :attr:`problems`, never on this text."""
        return "; ".join(p.message for p in self.problems) or None

    def __str__(self) -> str:
        """The event as log lines show it: counts and the problems' fields, no exception
        message (:attr:`error` has those)."""
        text = (
            f"compaction {self.status} by {self.strategy} ({self.trigger}): "
            f"{self.messages_before} -> {self.messages_after} messages, "
            f"{self.tokens_before} -> {self.tokens_after} tokens in {self.duration_s:.3f}s"
        )
        if self.messages_rewritten:
            text += f"; {self.messages_rewritten} messages dropped or rewritten"
        if self.summarizer is not None:
            text += f"; summarizer {self.summarizer}"
        if self.ahead is not None:
            text += f"; summary made ahead {self.ahead}"
            if self.waited_s:
                text += f" after waiting {self.waited_s:.3f}s"
        shown = "; ".join(p.shown for p in self.problems)
        return f"{text}; {shown}" if shown else text


def strategy_name(strategy: object) -> str:
    name = getattr(strategy, "name", None)
    return name if isinstance(name, str) and name else type(strategy).__name__


def breaks_cache(history: Sequence[Message], output: Sequence[Message]) -> bool:
    """Whether ``output`` changes a message that an earlier model call already sent.

    The messages before the last assistant message of ``history`` were the prompt of the call
    that answered with it, so the provider may hold them as a cached prefix; a rewrite that
    changes or drops any of them makes the next call pay for everything from there again.
    Rewriting only what came after (the newest tool results, the new user message) keeps it.

    Example:
        >>> from ctxcompact import Message
        >>> old = [Message.user("task"), Message.assistant("ok"), Message.user("next")]
        >>> breaks_cache(old, [*old[:2], Message.user("cut")])
        False
        >>> breaks_cache(old, [Message.user("summary"), *old[1:]])
        True
    """
    sent = next((i for i in range(len(history) - 1, -1, -1) if history[i].role == "assistant"), 0)
    if len(output) < sent:
        return True
    return any(output[i] is not history[i] and output[i] != history[i] for i in range(sent))


def same_messages(output: Sequence[Message], history: Sequence[Message]) -> bool:
    if output is history:
        return True
    try:
        return len(output) == len(history) and all(
            a is b for a, b in zip(output, history, strict=False)
        )
    except TypeError:
        return False


def rejection(history: Sequence[Message], output: object) -> str | None:
    """Why ``output`` may not replace ``history``, or ``None`` when it may."""
    if not isinstance(output, Sequence) or isinstance(output, (str, bytes)):
        return f"strategy returned {type(output).__name__}, not a sequence of messages"
    for i, message in enumerate(output):
        if not isinstance(message, Message):
            return f"output item {i} is a {type(message).__name__}, not a Message"
    if not output and history:
        return "strategy returned an empty history"
    problems = check_history(output)
    if not problems:
        return None  # the common case: one validation, not two
    before = Counter(p.kind for p in check_history(history))
    new = Counter(p.kind for p in problems) - before
    if new:
        first = next(p for p in problems if p.kind in new)
        kinds = ", ".join(f"{k} x{c}" for k, c in sorted(new.items()))
        return f"output breaks tool-call pairing ({kinds}); first: {first}"
    return None


@dataclass(frozen=True, slots=True)
class CompactionResult:
    """What :meth:`CompactionController.compact` returns: the history and what happened.

    Attributes:
        history: The history to keep: the input object itself when nothing changed, else a
            new list.
        event: The event, or ``None`` when the trigger did not fire.
        store_problem: Why the removed originals could not be stored, when an attached store
            failed (the compaction stands); :attr:`store_error` says it in words.

    Example:
        >>> CompactionResult([]).changed
        False
    """

    history: Sequence[Message]
    event: CompactionEvent | None = None
    store_problem: Problem | None = None

    @property
    def store_error(self) -> str | None:
        """:attr:`store_problem` in words (no message content), or ``None``."""
        return None if self.store_problem is None else self.store_problem.message

    @property
    def changed(self) -> bool:
        """Whether the history was replaced (the event is ``compacted``)."""
        return self.event is not None and self.event.status == "compacted"


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """The messages to send for one model call, after the per-request transforms.

    Attributes:
        messages: What to send (the stored history is not touched).
        transform_problems: One per transform that raised or broke tool-call pairing and was
            left out of this request (the others still applied), and a ``pin_restored`` one
            per transform whose output lost pinned messages the controller put back;
            :attr:`skipped` says them in words.
        store_problem: Why what the transforms removed could not be stored, or what the
            store evicted (``store_evicted``), when an attached store failed or its bound was
            reached (the request is sent anyway); :attr:`store_error` in words.

    Example:
        >>> PreparedRequest([]).skipped
        ()
    """

    messages: list[Message]
    transform_problems: tuple[Problem, ...] = ()
    store_problem: Problem | None = None

    @property
    def skipped(self) -> tuple[str, ...]:
        """One line per transform left out (``"name raised KeyError (...)"``), no message
        content in them."""
        return tuple(p.message for p in self.transform_problems)

    @property
    def store_error(self) -> str | None:
        """:attr:`store_problem` in words (no message content), or ``None``."""
        return None if self.store_problem is None else self.store_problem.message


@dataclass(frozen=True, slots=True)
class Step:
    """One model call's preparation: compaction of the stored history, then the transforms.

    The agent, the replay engine and the proxy all prepare a call this way, in this order.

    Attributes:
        history: The stored history from now on (compacted or the input object itself).
        request: The messages to send.
        event: The compaction event, when the trigger fired.
        transform_problems: Transforms left out of this request (see
            :class:`PreparedRequest`); :attr:`skipped` in words.
        store_problems: Failures of an attached originals store, from the compaction and
            from the transforms (each rewrite stands); :attr:`store_errors` in words.

    Example:
        >>> Step([], []).compacted
        False
    """

    history: Sequence[Message]
    request: list[Message]
    event: CompactionEvent | None = None
    transform_problems: tuple[Problem, ...] = ()
    store_problems: tuple[Problem, ...] = ()

    @property
    def skipped(self) -> tuple[str, ...]:
        """The transforms left out, in words (see :attr:`PreparedRequest.skipped`)."""
        return tuple(p.message for p in self.transform_problems)

    @property
    def store_errors(self) -> tuple[str, ...]:
        """:attr:`store_problems` in words (no message content)."""
        return tuple(p.message for p in self.store_problems)

    @property
    def compacted(self) -> bool:
        """Whether the stored history was replaced by the strategy's output."""
        return self.event is not None and self.event.status == "compacted"
