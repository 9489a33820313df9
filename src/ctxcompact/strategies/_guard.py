"""ContextGuard: make the history fit ``window - reserve`` by dropping the oldest turns.

Seed 003 L2/L3 and seed 002 task 1: an optional first phase cuts huge tool results, then the
oldest atomic units are dropped until the estimate fits. A unit is one message, except that an
assistant message with tool calls and the tool messages right after it form one unit, so no
result is ever left without its call. System (and developer) messages always stay.
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
    first; if that is not enough, the oldest units are dropped: a user message, a plain
    assistant message, or an assistant message with its tool results (never split). System
    and developer messages stay where they are; the newest unit stays even if it alone is
    over budget. What was cut and dropped is logged at WARNING on
    ``ctxcompact.strategies.guard``. Usually a per-request transform: the stored history
    stays whole and only the request is trimmed.

    Args:
        context_window: The model's window in tokens; ``None`` takes the context's
            ``max_context_size``.
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

    def budget(self, max_context_size: int | None) -> int:
        """Tokens the history may use: the window (own, else ``max_context_size``) - reserve."""
        window = self.context_window if self.context_window is not None else max_context_size
        if window is None:
            raise ConfigError("no context window: pass context_window=", key="context_window")
        budget = window - self.reserve_tokens
        if budget <= 0:
            raise ConfigError(
                f"context window {window} minus reserve_tokens {self.reserve_tokens} leaves no "
                "room for the history; lower reserve_tokens",
                key="reserve_tokens",
            )
        return budget

    async def compact(self, ctx: CompactionContext) -> list[Message] | None:
        """Trim ``ctx.history`` to the budget; ``None`` when it already fits."""
        return self.guard(
            ctx.history, budget=self.budget(ctx.max_context_size), token_counter=ctx.token_counter
        )

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
        # The newest unit always stays, even when it alone is over budget.
        while total > budget and dropped < len(units) - 1:
            start, end = units[dropped]
            unit_tokens = sum(tokens[k] for k in range(start, end) if work[k].role not in _PINNED)
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
