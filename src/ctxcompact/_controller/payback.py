"""Whether a rewrite the window does not need pays back the prompt cache it breaks.

A provider bills a repeated prompt prefix at its cache-read price. A rewrite makes every
message from the first one it changed a cache write again at the next call, and saves the
read price of every token it freed at each call after. So a rewrite that the window does not
need (the history fits without it, or it does not make the history fit) is worth it only if

    read x freed x calls_to_come >= (write - read) x tokens_from_the_first_change

and a loss otherwise. The future is unknown; the controller counts on half as many calls to
come as the conversation has made so far (its assistant messages). Knowing nothing else of a
process's length, the chance that it lasts another ``f`` times what has run is ``1 / (1 +
f)`` (Gott's "Copernican" estimate): a rewrite weighed over half the calls so far pays back
two times in three, one weighed over all of them only one time in two, and one of the 17
recorded conversations then lost 15.7% on a single rewrite made a call before it ended. A
longer conversation can afford a rewrite a short one cannot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._tokens.pricing import REWRITE_PRICING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._history.messages import Message
    from .._tokens.counters import TokenCounter
    from .._tokens.pricing import Pricing

__all__ = ["REWRITE_PRICING", "Payback", "payback"]

HORIZON = 0.5
"""The calls to come a rewrite is weighed over, as a share of the calls so far (see above)."""


@dataclass(frozen=True, slots=True)
class Payback:
    """The figures of one rewrite's weighing, in tokens.

    Attributes:
        freed: Tokens the rewrite takes out of every later call.
        rebilled: Tokens from its first changed message on, written again at the next call.
        calls: The calls to come it is weighed over (the assistant messages so far).
        pays: Whether ``read x freed x calls >= (write - read) x rebilled``.
    """

    freed: int
    rebilled: int
    calls: int
    pays: bool

    def __str__(self) -> str:
        return (
            f"frees {self.freed} tokens a call but re-bills {self.rebilled}: does not pay back "
            f"over {self.calls} calls"
        )


def payback(
    history: Sequence[Message],
    output: Sequence[Message],
    counter: TokenCounter,
    pricing: Pricing = REWRITE_PRICING,
) -> Payback:
    """Weigh replacing ``history`` with ``output`` (see the module).

    Example:
        >>> from ctxcompact import HeuristicTokenCounter, Message
        >>> old = [Message.user("task"), Message.assistant("x" * 400), Message.user("y" * 4000)]
        >>> new = [old[0], Message.assistant("[hidden]"), old[2]]
        >>> weighed = payback(old, new, HeuristicTokenCounter())
        >>> weighed.pays, weighed.freed, weighed.rebilled  # it re-bills the long text after it
        (False, 121, 1242)
    """
    first = 0
    limit = min(len(history), len(output))
    while first < limit and (history[first] is output[first] or history[first] == output[first]):
        first += 1
    count = counter.count_message
    freed = sum(count(m) for m in history) - sum(count(m) for m in output)
    rebilled = sum(count(m) for m in output[first:])
    calls = max(1, int(sum(1 for m in history if m.role == "assistant") * HORIZON))
    pays = freed > 0 and pricing.read * freed * calls >= (pricing.write - pricing.read) * rebilled
    return Payback(freed, rebilled, calls, pays)
