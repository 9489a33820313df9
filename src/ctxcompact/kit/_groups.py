"""Tool-call groups, seen from the end of a history, and the batching of a masking boundary."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._history.messages import with_content
from ..exceptions import MissingArgumentError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from .._history.messages import Message

__all__ = ["batched_boundary", "call_names", "group_results", "old_groups_end", "rewrite_contents"]


def old_groups_end(history: Sequence[Message], keep: int) -> int:
    """Where the ``keep`` newest tool-call groups start: everything before it is "old".

    ``len(history)`` when ``keep`` is 0 (every group is old); ``0`` when there are fewer
    than ``keep`` groups (nothing is old). Groups are counted as :func:`tool_groups` counts
    them, one per assistant message with tool calls, scanning back from the end only as far
    as needed.

    Example:
        >>> from ctxcompact import Message, ToolCall
        >>> def turn(i):
        ...     call = ToolCall(id=f"c{i}", name="ls", arguments="{}")
        ...     return [Message.assistant(None, tool_calls=[call]), Message.tool(f"c{i}", "x")]
        >>> history = [Message.user("go"), *turn(1), *turn(2), *turn(3)]
        >>> old_groups_end(history, 2)  # the two newest groups start at index 3
        3
        >>> old_groups_end(history, 5), old_groups_end(history, 0)
        (0, 7)
    """
    if keep <= 0:
        return len(history)
    seen = 0
    for i in range(len(history) - 1, -1, -1):
        message = history[i]
        if message.tool_calls and message.role == "assistant":
            seen += 1
            if seen == keep:
                return i
    return 0


def group_results(history: Sequence[Message], stop: int) -> list[int]:
    """Indices of the tool results of every group that starts before ``stop``.

    The same indices as the ``result_indices`` of :func:`tool_groups`, in one tight pass
    with no group objects: hiding thousands of results then costs little more than copying
    the list (``benchmarks/bench_strategies.py``). With :func:`old_groups_end`, the results
    of all but the newest groups.

    Example:
        >>> from ctxcompact import Message, ToolCall
        >>> calls = [ToolCall(id=c, name="ls", arguments="{}") for c in ("a", "b")]
        >>> history = [Message.user("go"), Message.assistant(None, tool_calls=calls),
        ...            Message.tool("a", "x"), Message.tool("b", "y"), Message.assistant("ok")]
        >>> group_results(history, len(history)), group_results(history, 1)
        ([2, 3], [])
    """
    out: list[int] = []
    append = out.append
    ids: object = ()
    for i, message in zip(range(stop), history, strict=False):
        role = message.role
        if role == "tool":
            if message.tool_call_id in ids:  # type: ignore[operator]
                append(i)
        elif role == "assistant" and message.tool_calls:
            calls = message.tool_calls
            ids = (calls[0].id,) if len(calls) == 1 else {c.id for c in calls}
        else:
            ids = ()
    return out


def call_names(call_message: Message) -> dict[str, str]:
    """``tool_call_id -> tool name`` for one assistant message: the names of a group's calls,
    without a map over the whole history (ids are re-used across turns).

    Example:
        >>> from ctxcompact import Message, ToolCall
        >>> calls = [ToolCall(id="a", name="ls", arguments="{}")]
        >>> call_names(Message.assistant(None, tool_calls=calls))
        {'a': 'ls'}
    """
    return {c.id: c.name for c in call_message.tool_calls or ()}


def rewrite_contents(history: Sequence[Message], plan: Iterable[tuple[int, str]]) -> list[Message]:
    """A new list: ``history`` with message ``i`` replaced by a copy whose content is
    ``text`` (:func:`with_content`) for each ``(i, text)`` of ``plan``; every other message is
    the same object, and ``history`` is not changed.

    Example:
        >>> from ctxcompact import Message
        >>> history = [Message.user("go"), Message.tool("c1", "a long listing")]
        >>> out = rewrite_contents(history, [(1, "[hidden]")])
        >>> out[0] is history[0], out[1].text, history[1].text
        (True, '[hidden]', 'a long listing')
    """
    out = list(history)
    for i, text in plan:
        out[i] = with_content(history[i], text)
    return out


def batched_boundary(
    boundary: int,
    *,
    batch_turns: int = 0,
    clear_at_least: int = 0,
    unit_tokens: Callable[[int], int] | None = None,
) -> int:
    """Move a masking boundary only in batches, so the provider's prompt cache survives.

    A strategy that rewrites old messages changes the prompt prefix, and every token after
    the first change is billed again at the full price. ``boundary`` is how many units (tool
    turns or groups), oldest first, the strategy would rewrite. ``batch_turns = B`` rounds
    it down to a multiple of B. ``clear_at_least = T`` then moves it back to the last unit
    at which the cumulative tokens freed (``unit_tokens(k)`` for unit ``k``, counted from
    the oldest) cross a multiple of T, so each move frees at least T tokens (Anthropic's
    ``clear_at_least`` idea). Both depend on the history alone, so a strategy using this
    stays stateless. The built-in maskers (hiding, Schema 1, input clearing) use exactly
    this function.

    Args:
        boundary: Units that may be rewritten, oldest first (``<= 0``: none, returns 0).
        batch_turns: Move in steps of this many units (0: any step).
        clear_at_least: Move only when at least this many more tokens are freed (0: always).
        unit_tokens: Tokens freed by rewriting unit ``k``; needed only with ``clear_at_least``.

    Raises:
        MissingArgumentError: ``clear_at_least`` without ``unit_tokens`` (a ``TypeError``).

    Example:
        >>> batched_boundary(7, batch_turns=3)
        6
        >>> freed = [100, 100, 100, 100, 100]  # per unit, oldest first
        >>> batched_boundary(5, clear_at_least=250, unit_tokens=freed.__getitem__)
        5
        >>> batched_boundary(4, clear_at_least=250, unit_tokens=freed.__getitem__)
        3
    """
    if boundary <= 0:
        return 0
    if unit_tokens is None and clear_at_least > 0:
        raise MissingArgumentError(
            "unit_tokens",
            "batched_boundary: clear_at_least needs unit_tokens",
            needed_by="clear_at_least",
        )
    if batch_turns > 0:
        boundary -= boundary % batch_turns
    if clear_at_least <= 0 or boundary <= 0 or unit_tokens is None:
        return boundary
    total = 0
    allowed = 0
    for k in range(boundary):
        before = total // clear_at_least
        total += unit_tokens(k)
        if total // clear_at_least > before:
            allowed = k + 1
    return allowed
