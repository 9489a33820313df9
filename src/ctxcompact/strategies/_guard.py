"""ContextGuard: make the history fit ``window - reserve`` by dropping the oldest turns.

Seed 003 L2/L3 and seed 002 task 1: an optional first phase cuts huge tool results, then the
oldest atomic units are dropped until the estimate fits. A unit is one message, except that an
assistant message with tool calls and the tool messages right after it form one unit, so no
result is ever left without its call. System (and developer) messages always stay, and so does
the protected tail: the last user message and everything after it. Drops stop only where a
user message starts the rest, so the kept history never opens with an assistant message
(Anthropic rejects that; strict-alternation chat templates break on it).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .._groups import tool_groups
from ..exceptions import ConfigError
from ._shared import call_names, check_int
from ._truncation import ToolResultTruncation

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .._contract import CompactionContext
    from .._messages import Message
    from .._tokens import TokenCounter

__all__ = ["ContextGuard"]

logger = logging.getLogger("ctxcompact.strategies.guard")

_PINNED = frozenset({"system", "developer"})


class ContextGuard:
    """Drop the oldest turns until the history fits ``context_window - reserve_tokens``.

    Nothing happens (``None``) while the estimate (``ctx.token_counter``) fits. Otherwise,
    when ``truncate_first``, tool results over ``max_tool_result_chars`` are cut to head + tail
    first; if that is not enough, the oldest whole turns are dropped: everything before a
    user message, a tool-call assistant message always with its results. The cut is always
    at a user message, so the kept history starts (after system messages) with a user
    message whenever the input has one; this can drop a little more than the budget needs,
    never less, and never leaves a result without its call. System and developer messages
    stay where they are. The last user message and everything after it are never dropped,
    even when they alone are over budget (only truncation can shrink them); a history
    without a user message keeps at least its newest unit. What was cut and dropped is
    logged at WARNING on ``ctxcompact.strategies.guard``. Usually a per-request transform:
    the stored history stays whole and only the request is trimmed.

    Used as the triggered strategy of a controller (no ``context_window``), the window is
    the context's ``max_context_size`` and the reserve is the larger of ``reserve_tokens``
    and the context's ``reserved_context_size`` (plus one token), so a run brings the
    history strictly below the controller's threshold (which fires at
    ``tokens + reserved >= max``) instead of doing nothing.

    Args:
        context_window: The model's window in tokens; ``None`` takes the context's
            ``max_context_size`` (and then its ``reserved_context_size`` as a lower bound
            for the reserve).
        reserve_tokens: Tokens kept free for the answer.
        truncate_first: Cut huge tool results before dropping anything.
        max_tool_result_chars: Longest tool result left whole by that first phase.
        head_chars: Characters kept from the start of a cut result.
        tail_chars: Characters kept from the end of a cut result.

    Raises:
        ConfigError: A negative count, or a budget (window minus reserve) that is not positive.

    Example:
        >>> guard = ContextGuard(context_window=128_000, reserve_tokens=8_192)
        >>> guard.budget(None)
        119808
    """

    def __init__(
        self,
        *,
        context_window: int | None = None,
        reserve_tokens: int = 8192,
        truncate_first: bool = True,
        max_tool_result_chars: int = 50_000,
        head_chars: int = 2_000,
        tail_chars: int = 2_000,
    ) -> None:
        if context_window is not None:
            check_int("context_window", context_window, minimum=1)
        self.context_window = context_window
        self.reserve_tokens = check_int("reserve_tokens", reserve_tokens)
        self.truncate_first = bool(truncate_first)
        self.truncation = ToolResultTruncation(
            max_chars=max_tool_result_chars, head_chars=head_chars, tail_chars=tail_chars
        )
        if context_window is not None:
            self.budget(None)

    def __repr__(self) -> str:
        return (
            f"ContextGuard(context_window={self.context_window}, "
            f"reserve_tokens={self.reserve_tokens}, truncate_first={self.truncate_first})"
        )

    def budget(
        self,
        max_context_size: int | None,
        reserved_context_size: int = 0,
        max_output_tokens: int | None = None,
    ) -> int:
        """Tokens the history may use.

        With ``context_window`` set: ``context_window - reserve_tokens``. Otherwise the window
        is ``max_context_size`` and the history must stay below the controller's threshold
        too: ``max_context_size - max(reserve_tokens, reserved_context_size + 1)`` (the
        ``+ 1`` because the threshold fires at equality). Either way, when the request's
        answer budget is known (``max_output_tokens``), at least that much is kept free.
        """
        if self.context_window is not None:
            window, reserve, key = self.context_window, self.reserve_tokens, "reserve_tokens"
        elif max_context_size is None:
            raise ConfigError("no context window: pass context_window=", key="context_window")
        else:
            window, reserve, key = max_context_size, self.reserve_tokens, "reserve_tokens"
            if reserved_context_size + 1 > reserve:
                reserve, key = reserved_context_size + 1, "reserved_context_size"
        if max_output_tokens is not None and max_output_tokens > reserve:
            reserve, key = max_output_tokens, "max_tokens"
        budget = window - reserve
        if budget <= 0:
            value = {"reserve_tokens": self.reserve_tokens, "max_tokens": max_output_tokens}.get(
                key, reserved_context_size
            )
            raise ConfigError(
                f"context window {window} minus {key} {value} leaves no room for the "
                f"history; lower {key}",
                key=key,
            )
        return budget

    async def compact(self, ctx: CompactionContext) -> list[Message] | None:
        """Trim ``ctx.history`` to the budget; ``None`` when it already fits."""
        budget = self.budget(ctx.max_context_size, ctx.reserved_context_size, ctx.max_output_tokens)
        return self.guard(ctx.history, budget=budget, token_counter=ctx.token_counter)

    def guard(
        self, history: Sequence[Message], *, budget: int, token_counter: TokenCounter
    ) -> list[Message] | None:
        """The synchronous core of :meth:`compact`, with the budget already computed."""
        count = token_counter.count_message
        tokens = [count(m) for m in history]
        total = sum(tokens)
        if total <= budget:
            return None
        work = list(history)
        changed = False
        if self.truncate_first:
            changed, total = self._truncate(work, tokens, total, count)
            if total <= budget:
                return work

        units = _units(work)
        dropped = 0
        dropped_tokens = 0
        for stop in _cut_points(work, units):
            if total <= budget:
                break
            while dropped < stop:
                start, end = units[dropped]
                unit_tokens = sum(
                    tokens[k] for k in range(start, end) if work[k].role not in _PINNED
                )
                total -= unit_tokens
                dropped_tokens += unit_tokens
                dropped += 1
        if dropped:
            cut = units[dropped][0]
            pinned = [m for m in work[:cut] if m.role in _PINNED]
            n_dropped = cut - len(pinned)
            logger.warning(
                "Context guard: dropped %d old messages (estimated %d tokens)",
                n_dropped,
                dropped_tokens,
            )
            work = pinned + work[cut:]
            changed = True
        if total > budget:
            logger.warning(
                "Context guard: history still over budget after trimming (%d > %d tokens)",
                total,
                budget,
            )
        return work if changed else None

    def _truncate(
        self,
        work: list[Message],
        tokens: list[int],
        total: int,
        count: Callable[[Message], int],
    ) -> tuple[bool, int]:
        changed = False
        names: dict[int, str] = {}
        for group in tool_groups(work):
            by_id = call_names(work[group.call_index])
            for i in group.result_indices:
                names[i] = by_id.get(work[i].tool_call_id or "", "")
        for i, message in enumerate(work):
            if message.role != "tool":
                continue
            cut = self.truncation.truncate_message(message)
            if cut is message:
                continue
            logger.warning(
                'Context guard: truncated tool result for "%s" (%d → %d chars)',
                names.get(i, "unknown"),
                len(message.text),
                len(cut.text),
            )
            work[i] = cut
            new = count(cut)
            total += new - tokens[i]
            tokens[i] = new
            changed = True
        return changed, total


def _cut_points(history: Sequence[Message], units: Sequence[tuple[int, int]]) -> list[int]:
    """Unit indices the history may be cut before, in order: drop ``units[:k]`` for each ``k``.

    The protected tail starts at the unit holding the last user message (the newest unit
    when there is none), so it is never dropped. When the history has a user message, only
    units that start with one are cut points: the kept history then opens with a user
    message, never with an assistant message left without its question.
    """
    user_starts = [k for k, (start, _) in enumerate(units) if history[start].role == "user"]
    last_user = max((i for i, m in enumerate(history) if m.role == "user"), default=None)
    if last_user is None:
        return list(range(1, len(units)))
    protected = next(k for k, (start, end) in enumerate(units) if start <= last_user < end)
    return [k for k in user_starts if 0 < k <= protected]


def _units(history: Sequence[Message]) -> list[tuple[int, int]]:
    """``(start, end)`` of each droppable unit, oldest first (system messages are not units)."""
    units: list[tuple[int, int]] = []
    last_call_unit = -1
    n = len(history)
    i = 0
    while i < n:
        message = history[i]
        if message.role in _PINNED:
            i += 1
            continue
        end = i + 1
        if message.role == "assistant" and message.tool_calls:
            while end < n and history[end].role == "tool":
                end += 1
            last_call_unit = len(units)
        elif message.role == "tool" and units:
            # A result cut off from its call's run (an orphan, or a result separated from its
            # call in invalid input) joins everything back to the last tool-call unit, so
            # dropping never leaves a result without the call it may answer.
            keep = last_call_unit if last_call_unit >= 0 else len(units) - 1
            units[keep:] = [(units[keep][0], end)]
            i = end
            continue
        units.append((i, end))
        i = end
    return units
