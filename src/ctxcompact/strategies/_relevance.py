"""Which old exchanges to keep when some must go: those naming what the conversation names.

An agent's answers are written with the names (identifiers, paths, numbers) in its view; a
dropped step hurts when it was the last place one of them could still be seen, and the agent
has to read it again, guess, or get it wrong. So when some older exchanges must go, the context
guard keeps, per token, those that keep the most names in view that nothing else kept shows: a
greedy budgeted coverage, with no model call and no weights to tune. What is always kept
(system messages, the first and the newest user messages, the newest exchange) is in view
from the start, so an exchange repeating its names adds nothing. Exchanges that add no name
are kept newest first. Names are :func:`ctxcompact.kit.distinctive_tokens` without word
6-grams.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from ..kit import distinctive_tokens, without_markers
from ._fit import PINNED

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._history.messages import Message
    from ._fit import Plan

__all__ = ["Relevance"]

_MEMO_LIMIT = 8192  # messages remembered per guard (a proxy serves many conversations)


class Relevance:
    """Orders a plan's droppable exchanges, most worth keeping first (see the module).

    Example:
        >>> from ctxcompact import Message
        >>> sorted(Relevance().names(Message.user("fix parse_config in src/app.py")))
        ['parse_config', 'src/app.py']
    """

    def __init__(self) -> None:
        self._memo: dict[int, tuple[Message, frozenset[str]]] = {}

    def names(self, message: Message) -> frozenset[str]:
        """The names ``message`` shows the model: in its text and its calls' arguments, what
        ctxcompact's markers add left out (:func:`ctxcompact.kit.without_markers`)."""
        hit = self._memo.get(id(message))
        if hit is not None and hit[0] is message:
            return hit[1]
        text = message.text
        if message.tool_calls:
            text = "\n".join([text, *(c.arguments for c in message.tool_calls)])
        found = distinctive_tokens(without_markers(text), ngrams=False)
        if len(self._memo) >= _MEMO_LIMIT:
            self._memo.clear()
        self._memo[id(message)] = (message, found)
        return found

    def order(self, plan: Plan, work: Sequence[Message]) -> list[int]:
        """``plan.candidates``, the exchange that adds the most names not yet in view per
        token first (lazy greedy: what one adds only shrinks as more is kept)."""
        per_unit: list[set[str]] = []
        for start, end in plan.units:
            found: set[str] = set()
            for i in range(start, end):
                if work[i].role not in PINNED:
                    found |= self.names(work[i])
            per_unit.append(found)
        seen: set[str] = set()
        for i, message in enumerate(work):
            if message.role in PINNED or i in plan.fixed or i in plan.pinned:
                seen |= self.names(message)
        if plan.newest is not None:
            seen |= per_unit[plan.newest]
        tokens = plan.unit_tokens

        def priority(k: int) -> float:
            return -len(per_unit[k] - seen) / max(tokens[k], 1)

        # (priority, newest first on ties, unit, the version of ``seen`` it was computed at)
        heap = [(priority(k), -k, k, 0) for k in plan.candidates]
        heapq.heapify(heap)
        order: list[int] = []
        version = 0  # bumped whenever ``seen`` grows: older priorities may be stale
        while heap:
            _, _, k, when = heapq.heappop(heap)
            if when != version:
                heapq.heappush(heap, (priority(k), -k, k, version))
                continue
            order.append(k)
            new = per_unit[k] - seen
            if new:
                seen |= new
                version += 1
        return order
