"""ToolResultHiding: KLIP-13 §3, old tool results replaced by a short placeholder."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._history.groups import ToolGroup, tool_groups
from .._history.messages import Message, TextPart
from .._tokens.counters import HeuristicTokenCounter, TokenCounter
from ..exceptions import ConfigError
from ..kit import (
    HIDDEN_PLACEHOLDER,
    PlaceholderCost,
    batched_boundary,
    check_int,
    group_results,
    old_groups_end,
    options_repr,
    rewrite_contents,
)
from ._clear_inputs import clearer_for

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._contract.protocols import CompactionContext

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
    (see :class:`~ctxcompact.kit.PlaceholderCost`), so hiding stays about as fast as copying.

    Args:
        preserve_recent_n: How many of the newest groups keep their results.
        placeholder: The text that replaces a hidden result.
        batch_turns: When > 0, the number of hidden groups moves only in multiples of this,
            so the prompt prefix (and the provider's cache of it) stays stable between moves.
        clear_at_least: When > 0, hide more only where the tokens freed (each result's
            tokens minus its placeholder's), counted from the oldest group, cross a multiple
            of this (Anthropic's ``clear_at_least`` idea).
        clear_tool_inputs: Also clear the calls of the groups whose results are hidden
            (``True``: every tool; a list: those tool names; ``False``: off, the default):
            each string value longer than ``clear_inputs_min_chars`` in their arguments
            becomes ``[cleared: N chars]``, as :class:`~ctxcompact.strategies.ToolInputClearing`
            does. The arguments stay a JSON object with the same keys; ids and names never
            change; the kept groups are untouched.
        clear_inputs_min_chars: Only longer string values are cleared.

    Raises:
        ConfigError: A negative count, a non-string placeholder, or ``clear_tool_inputs``
            neither a boolean nor a list of names.

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
        clear_tool_inputs: bool | Sequence[str] = False,
        clear_inputs_min_chars: int = 200,
    ) -> None:
        self.preserve_recent_n = check_int("preserve_recent_n", preserve_recent_n)
        self.batch_turns = check_int("batch_turns", batch_turns)
        self.clear_at_least = check_int("clear_at_least", clear_at_least)
        if not isinstance(placeholder, str) or not placeholder:
            raise ConfigError(f"must be a non-empty string, got {placeholder!r}", key="placeholder")
        self.placeholder = placeholder
        self.clear_tool_inputs = clear_tool_inputs
        self._clearer = clearer_for(clear_tool_inputs, clear_inputs_min_chars)
        self.clear_inputs_min_chars = clear_inputs_min_chars

    def __repr__(self) -> str:
        return options_repr(self)

    async def compact(self, ctx: CompactionContext) -> list[Message] | None:
        """Hide old tool results of ``ctx.history``; ``None`` when nothing was replaced."""
        return self.hide(ctx.history, token_counter=ctx.token_counter)

    def hide(
        self, history: Sequence[Message], *, token_counter: TokenCounter | None = None
    ) -> list[Message] | None:
        """The synchronous core of :meth:`compact` (the heuristic when ``token_counter`` is
        ``None``)."""
        indices, cleared = self._plan(history, token_counter)
        if not indices and not cleared:
            return None
        placeholder = self.placeholder
        out = rewrite_contents(history, [(i, placeholder) for i in indices])
        for i, message in cleared:
            out[i] = message
        return out

    def hidden_indices(
        self, history: Sequence[Message], *, token_counter: TokenCounter | None = None
    ) -> list[int]:
        """Indices of the tool messages :meth:`hide` would replace, oldest first."""
        return self._plan(history, token_counter)[0]

    def _plan(
        self, history: Sequence[Message], token_counter: TokenCounter | None
    ) -> tuple[list[int], list[tuple[int, Message]]]:
        """The results to hide and ``(index, copy)`` of each call message whose arguments
        ``clear_tool_inputs`` clears (the calls of the old groups)."""
        counter = token_counter or HeuristicTokenCounter()
        cost = PlaceholderCost(counter)
        tokens = cost.tokens(self.placeholder)
        clearer = self._clearer
        if not (self.batch_turns or self.clear_at_least):
            # The common case, in one tight pass (no group objects): see the benchmark.
            stop = old_groups_end(history, self.preserve_recent_n)
            bound = cost.char_bound(tokens)
            indices = [
                i
                for i in group_results(history, stop)
                if self._saved(history[i], cost, tokens, bound) > 0
            ]
            if clearer is None:
                return indices, []
            calls = [(i, clearer.message(history[i])[0]) for i in _call_indices(history, stop)]
            return indices, [(i, new) for i, new in calls if new is not None]
        groups = tool_groups(history)
        boundary = len(groups) - self.preserve_recent_n
        if boundary <= 0:
            return [], []
        # Each old group's results to hide, with the tokens each frees: computed once, both
        # to place the boundary and to list the indices. Long results are counted only for
        # ``clear_at_least``, which needs what each frees.
        limit = None if self.clear_at_least else cost.char_bound(tokens)
        hideable = [self._to_hide(history, g, cost, tokens, limit) for g in groups[:boundary]]
        cleared = [
            None if clearer is None else clearer.message(history[g.call_index])[0]
            for g in groups[:boundary]
        ]
        freed_inputs = [
            0
            if new is None or not self.clear_at_least
            else counter.count_message(history[g.call_index]) - counter.count_message(new)
            for g, new in zip(groups, cleared, strict=False)
        ]
        boundary = batched_boundary(
            boundary,
            batch_turns=self.batch_turns,
            clear_at_least=self.clear_at_least,
            unit_tokens=lambda k: sum(saved for _, saved in hideable[k]) + freed_inputs[k],
        )
        return [i for group in hideable[:boundary] for i, _ in group], [
            (g.call_index, new)
            for g, new in zip(groups[:boundary], cleared, strict=False)
            if new is not None
        ]

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


def _call_indices(history: Sequence[Message], stop: int) -> list[int]:
    """Indices of the assistant messages with tool calls before ``stop`` (the groups' calls)."""
    return [i for i in range(stop) if history[i].tool_calls and history[i].role == "assistant"]
