"""ToolResultHiding: KLIP-13 §3, old tool results replaced by a short placeholder."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._groups import ToolGroup, tool_groups
from .._messages import Message, TextPart
from .._tokens import HeuristicTokenCounter, TokenCounter
from ..exceptions import ConfigError
from ._shared import (
    CONTENT_KEY,
    HIDDEN_PLACEHOLDER,
    SET_DICT,
    SET_EXTRA,
    SET_FIELDS_SET,
    SET_PRIVATE,
    batched_boundary,
    check_int,
    group_results,
    old_groups_end,
    rewrite_contents,
)

if TYPE_CHECKING:
    from collections.abc import Container, Sequence

    from .._contract import CompactionContext

__all__ = ["ToolResultHiding"]


class ToolResultHiding:
    """Hide the tool results of all but the last ``preserve_recent_n`` tool-call groups.

    A group is an assistant message with ``tool_calls`` plus the tool messages right after it
    that answer one of its calls; parallel calls are one group, hidden or kept whole. Only the
    ``content`` of old tool messages changes (string or list content alike); ids, calls, order
    and every other message stay as they are. Results already showing the placeholder are
    left alone, so a second run on the output returns ``None``. A string result no longer
    than the placeholder is left alone too: hiding it would make the prompt bigger.

    Args:
        preserve_recent_n: How many of the newest groups keep their results.
        placeholder: The text that replaces a hidden result.
        batch_turns: When > 0, the number of hidden groups moves only in multiples of this,
            so the prompt prefix (and the provider's cache of it) stays stable between moves.
        clear_at_least: When > 0, hide more only where the tokens newly hidden, counted from
            the oldest group, cross a multiple of this (Anthropic's ``clear_at_least`` idea).

    Raises:
        ConfigError: A negative count or a non-string placeholder.

    Example:
        >>> from ctxcompact import Message, ToolCall
        >>> h = [Message.assistant(None, tool_calls=[ToolCall(id="a", name="ls", arguments="{}")]),
        ...      Message.tool("a", "a big output, longer than the placeholder")]
        >>> ToolResultHiding(preserve_recent_n=0).hide(h)[1].content
        '<system>历史 tool_call已隐藏</system>'
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
        """The synchronous core of :meth:`compact` (``token_counter`` serves ``clear_at_least``)."""
        if not (self.batch_turns or self.clear_at_least):
            return _hide_before(
                history, old_groups_end(history, self.preserve_recent_n), self.placeholder
            )
        indices = self.hidden_indices(history, token_counter=token_counter)
        if not indices:
            return None
        placeholder = self.placeholder
        return rewrite_contents(history, [(i, placeholder) for i in indices])

    def hidden_indices(
        self, history: Sequence[Message], *, token_counter: TokenCounter | None = None
    ) -> list[int]:
        """Indices of the tool messages :meth:`hide` would replace, oldest first."""
        if not (self.batch_turns or self.clear_at_least):
            # The common case, in one tight pass (no group objects): see the benchmark.
            stop = old_groups_end(history, self.preserve_recent_n)
            return [i for i in group_results(history, stop) if not self._hidden(history[i])]
        groups = tool_groups(history)
        boundary = len(groups) - self.preserve_recent_n
        if boundary <= 0:
            return []
        counter = token_counter or HeuristicTokenCounter()
        boundary = batched_boundary(
            boundary,
            batch_turns=self.batch_turns,
            clear_at_least=self.clear_at_least,
            unit_tokens=lambda k: sum(
                counter.count_message(history[i]) for i in self._to_hide(history, groups[k])
            ),
        )
        out: list[int] = []
        for group in groups[:boundary]:
            out.extend(self._to_hide(history, group))
        return out

    def _to_hide(self, history: Sequence[Message], group: ToolGroup) -> list[int]:
        return [i for i in group.result_indices if not self._hidden(history[i])]

    def _hidden(self, message: Message) -> bool:
        """Already hidden, or too short for hiding to save anything."""
        content = message.content
        if type(content) is str and len(content) <= len(self.placeholder):
            return True
        return (
            isinstance(content, tuple)
            and len(content) == 1
            and isinstance(content[0], TextPart)
            and content[0].text == self.placeholder
        )


def _hide_before(history: Sequence[Message], stop: int, placeholder: str) -> list[Message] | None:
    """Hide every result of the groups that start before ``stop``, in one fused pass.

    The same result as :meth:`ToolResultHiding.hidden_indices` plus
    :func:`~._shared.rewrite_contents`, written as one loop because hiding must cost little
    more than copying the list (``benchmarks/bench_strategies.py``): the group scan of
    :func:`~._shared.group_results`, the already-hidden test and the copy, all inline.
    Fields are read from each message's ``__dict__`` (one attribute lookup, then dictionary
    lookups), a tool message is recognised by its ``tool_call_id`` before its role is compared,
    and a single call's id is compared directly instead of through a one-element tuple.
    """
    out: list[Message] | None = None
    new_object = object.__new__
    set_dict, set_extra, set_fields_set, set_private = (
        SET_DICT,
        SET_EXTRA,
        SET_FIELDS_SET,
        SET_PRIVATE,
    )
    content_key = CONTENT_KEY
    str_, tuple_ = str, tuple
    one: str | None = None  # the id of the current group's call, when it has only one
    many: Container[str] = ()  # the ids of the current group's calls, when parallel
    short = len(placeholder)  # a result this short (or the placeholder itself) stays as it is
    for i, message in zip(range(stop), history, strict=False):
        fields = message.__dict__
        call_id = fields["tool_call_id"]
        if call_id is not None and (call_id == one or call_id in many) and fields["role"] == "tool":
            content = fields["content"]
            kind = type(content)
            if (kind is str_ and len(content) <= short) or (
                kind is tuple_
                and len(content) == 1
                and isinstance(content[0], TextPart)
                and content[0].text == placeholder
            ):
                continue
            if out is None:
                out = list(history)
            new = new_object(type(message))
            copied = fields.copy()
            copied["content"] = placeholder
            set_dict(new, copied)
            set_extra(new, message.__pydantic_extra__)  # shared: see with_content
            fields_set = message.__pydantic_fields_set__
            set_fields_set(new, fields_set if "content" in fields_set else fields_set | content_key)
            set_private(new, message.__pydantic_private__)
            out[i] = new
            continue
        role = fields["role"]
        if role == "tool":
            continue  # a result of another group, or without an id: the group goes on
        calls = fields["tool_calls"]
        if calls and role == "assistant":
            if len(calls) == 1:
                one, many = calls[0].id, ()
            else:
                one, many = None, {c.id for c in calls}
        else:
            one, many = None, ()
    return out
