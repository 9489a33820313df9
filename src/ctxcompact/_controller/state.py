"""What one conversation accumulates between calls: :class:`ControllerState`, and in it the
incremental token count (:class:`RunningCount`, a running estimate plus the provider's usage).

The running count keeps one cumulative estimate per message of the history seen last, and
optionally the provider's count of a prefix of it. Every call compares every message seen
before with the one now at its place: by identity, and by equality only where identity fails (a
request parsed afresh has equal, new objects), in one C-level list comparison, so an agent's
step costs about the same at 100 and at 10,000 messages
(``benchmarks/bench_running_count.py``). A history that extends the one seen before costs only
its new messages; one that differs somewhere (an edited or replaced message, a compaction, a
shorter history) is re-estimated from the first difference on, and the provider's count is
dropped: it counted another history.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .ahead import AheadSlot
from .store_hook import ProducedMessages

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._history.messages import Message
    from .._tokens.counters import TokenCounter
    from .events import EventStatus

__all__ = ["ControllerState", "RunningCount"]


class RunningCount:
    """Tokens of a growing history, in time proportional to the messages added.

    Example:
        >>> from ctxcompact import HeuristicTokenCounter, Message
        >>> running, history = RunningCount(), [Message.user("hi")]
        >>> running.observe(100, history, HeuristicTokenCounter())
        >>> history.append(Message.user("more"))
        >>> running.total(history, HeuristicTokenCounter())
        106
    """

    def __init__(self) -> None:
        self._seen: list[Message] = []  # the history counted so far
        self._cum: list[int] = [0]  # _cum[i]: estimate of _seen[:i]
        self._usage: tuple[int, int] | None = None  # (provider tokens, messages covered)
        # largest_step's scan so far: (messages scanned, largest step between two assistant
        # messages among them, index of the last assistant message, -1 for none)
        self._steps: tuple[int, int, int] = (0, 0, -1)

    def reset(self) -> None:
        """Forget everything: the next history is estimated from scratch."""
        self._seen, self._cum, self._usage = [], [0], None
        self._steps = (0, 0, -1)

    def estimate(self, history: Sequence[Message], counter: TokenCounter) -> int:
        """The counter's estimate of the whole ``history`` (usage not applied)."""
        self._sync(history, counter)
        return self._cum[-1]

    def total(self, history: Sequence[Message], counter: TokenCounter) -> int:
        """The provider's count of the covered prefix plus the estimate of the rest."""
        self._sync(history, counter)
        if self._usage is not None:
            tokens, covered = self._usage
            return tokens + self._cum[-1] - self._cum[covered]
        return self._cum[-1]

    def replace(self, history: Sequence[Message], counter: TokenCounter) -> int:
        """Start over from ``history`` (a strategy's output) and return its estimate.

        The provider's count is dropped (it counted another history), but the estimate of
        every message kept from the history seen last is reused by identity: a compaction
        that keeps most messages costs only the ones it rewrote.
        """
        seen, cum = self._seen, self._cum
        known = {id(m): cum[k + 1] - cum[k] for k, m in enumerate(seen)}
        self._seen, self._cum, self._usage = [], [0], None
        self._steps = (0, 0, -1)
        count = counter.count_message
        total = 0
        for message in history:
            tokens = known.get(id(message))
            total += count(message) if tokens is None else tokens
            self._seen.append(message)
            self._cum.append(total)
        # `seen` stays referenced until here, so no id in `known` was reused by a new object.
        del seen
        return total

    def largest_step(self, history: Sequence[Message], counter: TokenCounter) -> int:
        """The most one model call has added to ``history`` (estimated): the tokens from an
        assistant message to the next one (its answer, then the tool results and user
        messages that followed), and from the last one to the end; 0 before any answer.

        Example:
            >>> from ctxcompact import HeuristicTokenCounter, Message
            >>> history = [Message.user("task"), Message.assistant("a"), Message.user("x" * 400)]
            >>> RunningCount().largest_step(history, HeuristicTokenCounter())
            133
        """
        self._sync(history, counter)
        seen, cum = self._seen, self._cum
        # Only the messages added since the last call are scanned (the controller asks at
        # every call once the history nears its trigger).
        scanned, largest, previous = self._steps
        for i in range(scanned, len(seen)):
            if seen[i].role == "assistant":
                if previous >= 0:
                    largest = max(largest, cum[i] - cum[previous])
                previous = i
        self._steps = (len(seen), largest, previous)
        if previous >= 0:
            largest = max(largest, cum[-1] - cum[previous])
        return largest

    def observe(self, tokens: int, history: Sequence[Message], counter: TokenCounter) -> None:
        """Record that the provider counted ``tokens`` for the whole ``history``."""
        self._sync(history, counter)
        self._usage = (tokens, len(history))

    def _sync(self, history: Sequence[Message], counter: TokenCounter) -> None:
        seen, cum = self._seen, self._cum
        n_seen = len(seen)
        current = history if type(history) is list else list(history)
        if len(current) >= n_seen:
            # Take the new messages first, then compare whole lists: list equality runs in C
            # and tries identity before __eq__ for each pair, so every message is checked at
            # about a nanosecond each when it is the same object (slicing the prefix instead
            # would cost more than the comparison: it touches every message's refcount).
            seen.extend(current[n_seen:])
            if seen == current:
                count = counter.count_message
                for k in range(n_seen, len(seen)):
                    cum.append(cum[-1] + count(seen[k]))
                return
            del seen[n_seen:]
        start = _first_difference(seen, current)
        del seen[start:]
        del cum[start + 1 :]
        if start < self._steps[0]:  # the scan covered messages that changed: scan again
            self._steps = (0, 0, -1)
        # Not an extension of what the provider counted: its count no longer applies. The
        # estimates of the unchanged prefix are kept (recounting them gives the same).
        self._usage = None
        count = counter.count_message
        for message in current[start:]:
            seen.append(message)
            cum.append(cum[-1] + count(message))


def _first_difference(old: Sequence[Message], new: Sequence[Message]) -> int:
    """The first index where ``new`` has not the same (or an equal) message as ``old``."""
    for i, (a, b) in enumerate(zip(old, new, strict=False)):
        if a is not b and a != b:
            return i
    return min(len(old), len(new))


class ControllerState:
    """What one conversation accumulates between calls: token counts and loop guards.

    A controller owns one (``controller.state``) and uses it unless a call passes another,
    so one controller can serve many conversations at once, each with its own state (the
    proxy passes a fresh one per request: it is stateless by design).

    Args:
        namespace: Whose originals this conversation's are in an attached store.
        background: Whether the controller may make this conversation's summary ahead of
            time in a background task (``precompute_ratio``): a state kept from one call to
            the next. A state made for one request and dropped after it (the proxy's) says
            ``False``; the proxy keeps its summaries ahead in its store instead.

    Example:
        >>> state = ControllerState()
        >>> state.failures, state.retry_at
        (0, None)
    """

    __slots__ = (
        "ahead",
        "background",
        "count",
        "failures",
        "handles",
        "last_call",
        "last_status",
        "namespace",
        "optional_wait",
        "produced",
        "recall_named",
        "retry_at",
    )

    def __init__(self, *, namespace: str | None = None, background: bool = True) -> None:
        self.ahead = AheadSlot()
        """The summary being made ahead of the trigger (see :mod:`.ahead`)."""
        self.background = background
        self.count = RunningCount()
        self.failures = 0
        self.retry_at: int | None = None  # estimate the history must reach before a retry
        self.optional_wait = False
        """Whether ``retry_at`` comes from a rewrite the window did not need and that did not
        pay back its cache break: such a wait ends as soon as the history is over the window."""
        self.last_status: EventStatus | None = None
        self.produced = ProducedMessages()  # placeholders and summaries: never originals
        self.namespace = namespace
        """Whose originals this conversation's are in an attached store (``None``: the
        controller's ``store_namespace``); the proxy gives each caller its own."""
        self.last_call: float | None = None  # the controller's clock at the last model call
        self.handles: dict[str, str] = {}
        """Recall handles stored so far -> the hash of the text stored under each, so an id
        re-used after a compaction gets a handle of its own."""
        self.recall_named = False
        """Whether a marker in this conversation has named the recall tool (a loop that
        offers the tool only once needed can read it)."""

    def reset(self) -> None:
        """Start afresh: close the circuit, drop the min-progress wait, forget counts, usage,
        the last call's time (a new conversation is no cold cache) and what was produced;
        a summary being made ahead is cancelled."""
        self.ahead.cancel()
        self.count.reset()
        self.failures = 0
        self.retry_at = None
        self.optional_wait = False
        self.last_call = None
        self.last_status = None
        self.produced = ProducedMessages()
        self.handles = {}
        self.recall_named = False
