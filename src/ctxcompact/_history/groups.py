"""Positional tool-call groups, the unit every strategy keeps whole.

A group is an assistant message with ``tool_calls`` plus the tool messages that directly
follow it. Ids are matched only inside a group: real traces re-use ids across turns, so no
code here (or anywhere in ctxcompact) maps ids over the whole history.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .messages import Message

__all__ = ["ToolGroup", "tool_groups"]


@dataclass(frozen=True, slots=True)
class ToolGroup:
    """One assistant message with tool calls and the tool messages right after it.

    Attributes:
        call_index: Index of the assistant message.
        result_indices: Indices of the tool messages that answer one of its calls.
        end: Index one past the run of tool messages that follows the assistant message
            (results that answer none of its calls, orphans, are inside the run too).

    Example:
        >>> from ctxcompact import Message, ToolCall
        >>> call = ToolCall(id="c1", name="ls", arguments="{}")
        >>> history = [Message.assistant(None, tool_calls=[call]), Message.tool("c1", "a.py")]
        >>> tool_groups(history)
        [ToolGroup(call_index=0, result_indices=(1,), end=2)]
    """

    call_index: int
    result_indices: tuple[int, ...]
    end: int


def tool_groups(history: Sequence[Message]) -> list[ToolGroup]:
    """The tool-call groups of ``history``, oldest first. Linear in its length.

    Example:
        >>> from ctxcompact import Message, ToolCall
        >>> h = [Message.assistant(None, tool_calls=[ToolCall(id="a", name="ls", arguments="{}")]),
        ...      Message.tool("a", "x")]
        >>> tool_groups(h)
        [ToolGroup(call_index=0, result_indices=(1,), end=2)]
    """
    groups: list[ToolGroup] = []
    n = len(history)
    i = 0
    while i < n:
        msg = history[i]
        if msg.role == "assistant" and msg.tool_calls:
            ids = {c.id for c in msg.tool_calls}
            j = i + 1
            results: list[int] = []
            while j < n and history[j].role == "tool":
                if history[j].tool_call_id in ids:
                    results.append(j)
                j += 1
            groups.append(ToolGroup(i, tuple(results), j))
            i = j
        else:
            i += 1
    return groups
