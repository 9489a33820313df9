"""The controller's incremental token count: a running estimate plus the provider's usage.

One cumulative estimate per message of the history seen last, and optionally the provider's
count of a prefix of it. A history that extends the one seen before costs only its new
messages; any other history (after a compaction, a request parsed afresh with different
messages, an edited history) is recounted from scratch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ._messages import Message
    from ._tokens import TokenCounter

__all__ = ["RunningCount"]


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

    def reset(self) -> None:
        """Forget everything: the next history is estimated from scratch."""
        self._seen, self._cum, self._usage = [], [0], None

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

    def observe(self, tokens: int, history: Sequence[Message], counter: TokenCounter) -> None:
        """Record that the provider counted ``tokens`` for the whole ``history``."""
        self._sync(history, counter)
        self._usage = (tokens, len(history))

    def _sync(self, history: Sequence[Message], counter: TokenCounter) -> None:
        seen = len(self._seen)
        if len(history) < seen or not self._extends(history, seen):
            self.reset()
            seen = 0
        count = counter.count_message
        for message in history[seen:]:
            self._seen.append(message)
            self._cum.append(self._cum[-1] + count(message))

    def _extends(self, history: Sequence[Message], seen: int) -> bool:
        # Constant time: the first, middle and last message seen must still be there (same
        # object, or equal for a history parsed afresh). An in-place edit elsewhere is not
        # noticed; the next provider usage corrects the count, and the controller resets it
        # after each compaction.
        for i in {0, seen // 2, seen - 1} if seen else ():
            old, new = self._seen[i], history[i]
            if old is not new and old != new:
                return False
        return True
