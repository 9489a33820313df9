"""ToolResultHiding: KLIP-13 §3, old tool results replaced by a short placeholder."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._groups import ToolGroup, tool_groups
from .._messages import Message, TextPart
from .._tokens import HeuristicTokenCounter, TokenCounter
from ..exceptions import ConfigError
from ._shared import (
    HIDDEN_PLACEHOLDER,
    PlaceholderCost,
    batched_boundary,
    check_int,
    group_results,
    old_groups_end,
    rewrite_contents,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._contract import CompactionContext

__all__ = ["ToolResultHiding"]


class ToolResultHiding:
    """Hide the tool results of all but the last ``preserve_recent_n`` tool-call groups.

    A group is an assistant message with ``tool_calls`` plus the tool messages right after it
    that answer one of its calls; parallel calls are one group, hidden or kept whole. Only the
    ``content`` of old tool messages changes (string or list content alike); ids, calls, order
    and every other message stay as they are. Results already showing the placeholder are
    left alone, so a second run on the output returns ``None``. So is a result that costs no
    more tokens than the placeholder under the context's token counter: hiding never makes a
    result bigger (the default placeholder is 32 characters but ~15 heuristic tokens, as much
    as ~48 ASCII characters). Only results short enough for that to be possible are counted
    (see :class:`~._shared.PlaceholderCost`), so hiding stays about as fast as copying.

    Args:
        preserve_recent_n: How many of the newest groups keep their results.
        placeholder: The text that replaces a hidden result.
        batch_turns: When > 0, the number of hidden groups moves only in multiples of this,
            so the prompt prefix (and the provider's cache of it) stays stable between moves.
        clear_at_least: When > 0, hide more only where the tokens freed (each result's
            tokens minus its placeholder's), counted from the oldest group, cross a multiple
            of this (Anthropic's ``clear_at_least`` idea).

    Raises:
        ConfigError: A negative count or a non-string placeholder.

    Example:
        >>> from ctxcompact import Message, ToolCall
        >>> h = [Message.assistant(None, tool_calls=[ToolCall(id="a", name="ls", arguments="{}")]),
        ...      Message.tool("a", "a big output, longer than the placeholder in tokens too")]
        >>> ToolResultHiding(preserve_recent_n=0).hide(h)[1].content
        '[old tool result hidden]'
    """

    def __init__(
        self,
        *,
        preserve_recent_n: int = 5,
        placeholder: str = HIDDEN_PLACEHOLDER,
        batch_turns: int = 0,
        clear_at_least: int = 0,
    ) -> None:
        self.preserve_recent_n = check_int("preserve_recent_n", preserve_recent_n)
        self.batch_turns = check_int("batch_turns", batch_turns)
        self.clear_at_least = check_int("clear_at_least", clear_at_least)
        if not isinstance(placeholder, str) or not placeholder:
            raise ConfigError(f"must be a non-empty string, got {placeholder!r}", key="placeholder")
        self.placeholder = placeholder

    def __repr__(self) -> str:
        return (
            f"ToolResultHiding(preserve_recent_n={self.preserve_recent_n}, "
            f"batch_turns={self.batch_turns}, clear_at_least={self.clear_at_least})"
        )

    async def compact(self, ctx: CompactionContext) -> list[Message] | None:
        """Hide old tool results of ``ctx.history``; ``None`` when nothing was replaced."""
        return self.hide(ctx.history, token_counter=ctx.token_counter)

    def hide(
        self, history: Sequence[Message], *, token_counter: TokenCounter | None = None
    ) -> list[Message] | None:
        """The synchronous core of :meth:`compact` (the heuristic when ``token_counter`` is
        ``None``)."""
        indices = self.hidden_indices(history, token_counter=token_counter)
        if not indices:
            return None
        placeholder = self.placeholder
        return rewrite_contents(history, [(i, placeholder) for i in indices])

    def hidden_indices(
        self, history: Sequence[Message], *, token_counter: TokenCounter | None = None
    ) -> list[int]:
        """Indices of the tool messages :meth:`hide` would replace, oldest first."""
        cost = PlaceholderCost(token_counter or HeuristicTokenCounter())
        tokens = cost.tokens(self.placeholder)
        if not (self.batch_turns or self.clear_at_least):
            # The common case, in one tight pass (no group objects): see the benchmark.
            stop = old_groups_end(history, self.preserve_recent_n)
            bound = cost.char_bound(tokens)
            return [
                i
                for i in group_results(history, stop)
                if self._saved(history[i], cost, tokens, bound) > 0
            ]
        groups = tool_groups(history)
        boundary = len(groups) - self.preserve_recent_n
        if boundary <= 0:
            return []
        # Each old group's results to hide, with the tokens each frees: computed once, both
        # to place the boundary and to list the indices. Long results are counted only for
        # ``clear_at_least``, which needs what each frees.
        limit = None if self.clear_at_least else cost.char_bound(tokens)
        hideable = [self._to_hide(history, g, cost, tokens, limit) for g in groups[:boundary]]
        boundary = batched_boundary(
            boundary,
            batch_turns=self.batch_turns,
            clear_at_least=self.clear_at_least,
            unit_tokens=lambda k: sum(saved for _, saved in hideable[k]),
        )
        return [i for group in hideable[:boundary] for i, _ in group]

    def _to_hide(
        self,
        history: Sequence[Message],
        group: ToolGroup,
        cost: PlaceholderCost,
        tokens: int,
        bound: int | None,
    ) -> list[tuple[int, int]]:
        """``(index, tokens freed)`` for each result of ``group`` worth hiding."""
        out = []
        for i in group.result_indices:
            saved = self._saved(history[i], cost, tokens, bound)
            if saved > 0:
                out.append((i, saved))
        return out

    def _saved(
        self, message: Message, cost: PlaceholderCost, tokens: int, bound: int | None
    ) -> int:
        """Tokens freed by hiding ``message``: 0 if already hidden, 1 (uncounted) for a string
        longer than ``bound`` characters (``None``: count every result)."""
        content = message.content
        placeholder = self.placeholder
        if type(content) is str:
            if content == placeholder:
                return 0
            if bound is not None and len(content) > bound:
                return 1
        elif (
            isinstance(content, tuple)
            and len(content) == 1
            and isinstance(content[0], TextPart)
            and content[0].text == placeholder
        ):
            return 0
        return cost.saved(message, placeholder, tokens)
