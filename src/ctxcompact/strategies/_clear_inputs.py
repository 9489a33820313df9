"""ToolInputClearing: the long string arguments of old tool calls replaced by a short marker.

An agent's old tool *inputs* cost as much as its old results: a coding agent's ``Write`` and
``Edit`` calls carry whole files in their arguments, and no result-hiding strategy touches
them (they are ~a third of the input of the public Claude Code traces). This is Anthropic's
``clear_tool_inputs`` and LangChain's, as a strategy of its own so it composes with any
result masking in a :class:`~ctxcompact.strategies.Pipeline`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from .._history.groups import tool_groups
from .._tokens.counters import HeuristicTokenCounter, TokenCounter
from ..exceptions import ConfigError
from ..kit import INPUT_MARKER, batched_boundary, check_int, options_repr, validate_template

if TYPE_CHECKING:
    from collections.abc import Collection, Sequence

    from .._contract.protocols import CompactionContext
    from .._history.messages import Message, ToolCall

__all__ = ["INPUT_MARKER", "ArgumentClearer", "ToolInputClearing", "clearer_for"]

_MEMO_LIMIT = 4096  # arguments remembered per instance (a proxy serves many conversations)

# Alone, every rewrite this strategy makes is a cache break of its own: the whole prompt after
# the first value it clears is billed again. The controller makes a rewrite the window does not
# need only when it pays back (docs/guides/controller.md), but never holds back one the window
# needs. With a threshold of 200 characters each of the three losses on the 17 public traces
# was such a needed rewrite: 7 to 759 tokens over, it freed 4-6% of the history, kept one to
# five calls inside the window, and re-billed the prompt from its first cleared value on.
# The 31 string arguments over 2,000 characters (written files, large edits and heredocs) hold
# 62% of the characters of the 227 over 200: clearing only those keeps most of what clearing
# can free, and a rewrite then frees at least ~500 tokens. Summed over the traces, 200 cost
# 100.01-100.31% of not compacting with the three pricings and both windows, 2,000 costs
# 99.74-99.95% (docs/guides/strategies.md gives the sweep, and how little it rests on). Inside a
# rewrite that masking makes anyway (the tiered strategy's clear tier, the masking strategies'
# clear_tool_inputs) clearing rides on that break, so those keep ArgumentClearer's 200.
_DEFAULT_MIN_CHARS = 2_000


class ArgumentClearer:
    """The one implementation of clearing long string values in tool-call arguments.

    :class:`ToolInputClearing` uses it, and so do ``clear_tool_inputs`` of
    :class:`~ctxcompact.strategies.ToolResultHiding` and
    :class:`~ctxcompact.strategies.Schema1Masking`. Every string value longer than
    ``min_chars`` characters, at any depth of a call's JSON-object arguments, becomes
    ``marker`` with its length; keys, ids and names stay; arguments that are not a JSON object
    are left alone.

    Args:
        min_chars: Only string values longer than this are cleared (above the marker's length).
        tools: Tool names whose calls are cleared (``None``: every tool).
        marker: What replaces a value; may use ``{chars}``.
        key: The configuration key ``min_chars`` is reported under.

    Raises:
        ConfigError: ``min_chars`` not above the marker's length, or a bad marker.

    Example:
        >>> from ctxcompact import ToolCall
        >>> call = ToolCall(id="w1", name="Write", arguments='{"text": "' + "x" * 300 + '"}')
        >>> ArgumentClearer().call(call)[0].arguments
        '{"text": "[cleared: 300 chars]"}'
    """

    def __init__(
        self,
        *,
        min_chars: int = 200,
        tools: frozenset[str] | None = None,
        marker: str = INPUT_MARKER,
        key: str = "min_chars",
    ) -> None:
        if not isinstance(marker, str) or not marker:
            raise ConfigError(f"must be a non-empty string, got {marker!r}", key="marker")
        validate_template(marker, ("chars",), key="marker")
        self.marker = marker
        self.min_chars = check_int(key, min_chars)
        longest = len(marker.format(chars=10**12))
        if self.min_chars <= longest:
            raise ConfigError(
                f"must be above the marker's length ({longest}) so clearing always shrinks "
                f"a value, got {min_chars}",
                key=key,
            )
        self.tools = tools
        self._memo: dict[str, tuple[str, int] | None] = {}

    def message(
        self, message: Message, keep_ids: Collection[str] = ()
    ) -> tuple[Message | None, int]:
        """``message`` with its calls' long values cleared (calls whose id is in ``keep_ids``
        untouched) and the characters freed; ``None`` when nothing is cleared."""
        calls = message.tool_calls or ()
        new_calls = [(None, 0) if c.id in keep_ids else self.call(c) for c in calls]
        if all(new is None for new, _ in new_calls):
            return None, 0
        replaced = [
            call if new is None else new for call, (new, _) in zip(calls, new_calls, strict=True)
        ]
        return message.replace(tool_calls=replaced), sum(chars for _, chars in new_calls)

    def call(self, call: ToolCall) -> tuple[ToolCall | None, int]:
        """The call with its long values cleared and the characters freed; ``None`` if
        nothing is cleared."""
        if self.tools is not None and call.name not in self.tools:
            return None, 0
        arguments = call.arguments
        if arguments in self._memo:
            hit = self._memo[arguments]
        else:
            hit = self._cleared_arguments(arguments)
            if len(self._memo) >= _MEMO_LIMIT:
                self._memo.clear()
            self._memo[arguments] = hit
        if hit is None:
            return None, 0
        return call.model_copy(update={"arguments": hit[0]}), hit[1]

    def _cleared_arguments(self, arguments: str) -> tuple[str, int] | None:
        if len(arguments) <= self.min_chars:
            return None  # no string value inside can be longer than the whole text
        try:
            parsed = json.loads(arguments)
        except ValueError:
            return None
        if not isinstance(parsed, dict):
            return None
        changed = [False]
        cleared = self._clear_value(parsed, changed)
        if not changed[0]:
            return None
        text = json.dumps(cleared, ensure_ascii=False)
        return text, len(arguments) - len(text)

    def _clear_value(self, value: Any, changed: list[bool]) -> Any:
        if isinstance(value, str):
            if len(value) > self.min_chars:
                changed[0] = True
                return self.marker.format(chars=len(value))
            return value
        if isinstance(value, dict):
            return {key: self._clear_value(item, changed) for key, item in value.items()}
        if isinstance(value, list):
            return [self._clear_value(item, changed) for item in value]
        return value


def clearer_for(clear_tool_inputs: Sequence[str] | bool, min_chars: int) -> ArgumentClearer | None:
    """The clearer for a strategy's ``clear_tool_inputs`` setting (``None`` when off).

    Raises:
        ConfigError: Neither a boolean nor a list of tool names (``key`` names the setting).
    """
    # Built (and so checked) even when off: a bad min_chars is reported either way.
    clearer = ArgumentClearer(min_chars=min_chars, key="clear_inputs_min_chars")
    if clear_tool_inputs is True or clear_tool_inputs is False:
        return clearer if clear_tool_inputs else None
    if not isinstance(clear_tool_inputs, (list, tuple, set, frozenset)) or not all(
        isinstance(t, str) and t for t in clear_tool_inputs
    ):
        raise ConfigError(
            f"must be true, false or a list of tool names, got {clear_tool_inputs!r}",
            key="clear_tool_inputs",
        )
    if not clear_tool_inputs:
        return None
    clearer.tools = frozenset(clear_tool_inputs)
    return clearer


class ToolInputClearing:
    """Replace long string values in the arguments of old tool calls with a short marker.

    A call is old when its group (an assistant message with ``tool_calls`` and its results)
    is not among the ``keep_recent`` newest. In an old call's arguments, every string value
    longer than ``min_chars`` characters, at any depth, becomes the marker with its length;
    the arguments stay a valid JSON object with the same keys (re-serialized with
    ``json.dumps``), and tool-call ids, names, results and every other message are kept as
    they are. Arguments that are not a JSON object are left alone. A marker is shorter than
    ``min_chars``, so a second run on the output returns ``None``.

    Args:
        keep_recent: How many of the newest tool-call groups keep their arguments whole.
        min_chars: Only string values longer than this are cleared (default 2,000
            characters: alone, each rewrite is a cache break of its own, and clearing
            shorter values freed too little to pay for it).
        tools: The tool names whose calls are cleared (``None``, ``True`` or ``"all"``:
            every tool).
        marker: What replaces a value; may use ``{chars}``.
        batch_turns: When > 0, the number of cleared groups moves only in multiples of
            this, so the prompt prefix (and the provider's cache of it) changes rarely.
        clear_at_least: When > 0, clear more only where the tokens freed, counted from the
            oldest group, cross a multiple of this (Anthropic's ``clear_at_least`` idea).

    Raises:
        ConfigError: A negative count, ``min_chars`` not above the marker's length, a
            marker with fields other than ``{chars}``, or ``tools`` not a list of names.

    Example:
        >>> from ctxcompact import Message, ToolCall
        >>> call = ToolCall(id="w1", name="Write", arguments='{"path": "a.py", "text": "' +
        ...     "x" * 3000 + '"}')
        >>> h = [Message.assistant(None, tool_calls=[call]), Message.tool("w1", "ok")]
        >>> ToolInputClearing(keep_recent=0).clear(h)[0].tool_calls[0].arguments
        '{"path": "a.py", "text": "[cleared: 3000 chars]"}'
    """

    def __init__(
        self,
        *,
        keep_recent: int = 5,
        min_chars: int = _DEFAULT_MIN_CHARS,
        tools: Sequence[str] | str | bool | None = None,
        marker: str = INPUT_MARKER,
        batch_turns: int = 0,
        clear_at_least: int = 0,
    ) -> None:
        self.keep_recent = check_int("keep_recent", keep_recent)
        self.batch_turns = check_int("batch_turns", batch_turns)
        self.clear_at_least = check_int("clear_at_least", clear_at_least)
        self._clearer = ArgumentClearer(
            min_chars=min_chars, tools=_tool_names(tools), marker=marker
        )
        self.marker = marker
        self.min_chars = self._clearer.min_chars
        self.tools = self._clearer.tools

    def __repr__(self) -> str:
        return options_repr(self)

    async def compact(self, ctx: CompactionContext) -> list[Message] | None:
        """Clear the long arguments of old calls in ``ctx.history``; ``None`` if none."""
        return self.clear(ctx.history, token_counter=ctx.token_counter)

    def clear(
        self, history: Sequence[Message], *, token_counter: TokenCounter | None = None
    ) -> list[Message] | None:
        """The synchronous core of :meth:`compact` (the heuristic when ``token_counter`` is
        ``None``)."""
        groups = tool_groups(history)
        boundary = len(groups) - self.keep_recent
        if boundary <= 0:
            return None
        clearer = self._clearer
        rewritten = [clearer.message(history[g.call_index])[0] for g in groups[:boundary]]
        if self.batch_turns or self.clear_at_least:
            counter = token_counter or HeuristicTokenCounter()
            tokens = [
                0
                if new is None
                else counter.count_message(history[g.call_index]) - counter.count_message(new)
                for g, new in zip(groups, rewritten, strict=False)
            ]
            boundary = batched_boundary(
                boundary,
                batch_turns=self.batch_turns,
                clear_at_least=self.clear_at_least,
                unit_tokens=tokens.__getitem__,
            )
        out: list[Message] | None = None
        for group, new in zip(groups[:boundary], rewritten, strict=False):
            if new is not None:
                if out is None:
                    out = list(history)
                out[group.call_index] = new
        return out


def _tool_names(tools: Sequence[str] | str | bool | None) -> frozenset[str] | None:
    if tools is None or tools is True or tools == "all":
        return None
    if isinstance(tools, (str, bool)) or not all(isinstance(t, str) and t for t in tools):
        raise ConfigError(f'must be "all" or a list of tool names, got {tools!r}', key="tools")
    return frozenset(tools)
