"""The history validator: are tool calls and tool results paired the way providers demand?

Pairing is positional, like every other part of ctxcompact: a tool message answers the
nearest earlier unanswered call *of the group it sits in* (the assistant message with
``tool_calls`` that the run of tool messages directly follows). Ids are never mapped over
the whole history, because real traces (tau-bench) re-use them across turns.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .messages import Message

__all__ = ["HistoryProblem", "ProblemKind", "check_history"]

ProblemKind = Literal[
    "orphan_result",
    "unanswered_call",
    "separated_result",
    "duplicate_call_id",
    "misplaced_tool_calls",
    "misplaced_tool_call_id",
]


@dataclass(frozen=True, slots=True)
class HistoryProblem:
    """One thing wrong with a history.

    Attributes:
        index: The index of the offending message.
        kind: ``orphan_result`` (a tool result that answers no earlier unanswered call),
            ``unanswered_call`` (a call never answered, outside the final pending group),
            ``separated_result`` (a result answering a call of an earlier group, with
            another message in between), ``duplicate_call_id`` (two calls with one id in a
            single assistant message), ``misplaced_tool_calls`` (``tool_calls`` on a message
            that is not an assistant's), ``misplaced_tool_call_id`` (``tool_call_id`` on a
            message that is not a tool result).
        message: A sentence for humans.

    Example:
        >>> from ctxcompact import Message
        >>> [str(p) for p in check_history([Message.tool("x", "ok")])]
        ["message 0: orphan_result: tool result for 'x' answers no earlier unanswered call"]
    """

    index: int
    kind: ProblemKind
    message: str

    def __str__(self) -> str:
        return f"message {self.index}: {self.kind}: {self.message}"


def check_history(history: Sequence[Message]) -> list[HistoryProblem]:
    """The problems of ``history``, in message order; an empty list means valid.

    Calls of the last assistant message may stay unanswered when nothing but their results
    follows it: those are pending calls the agent has not run yet. Linear in the history
    length.

    Example:
        >>> from ctxcompact import Message, ToolCall
        >>> ask = Message.assistant(None, tool_calls=[ToolCall(id="a", name="ls", arguments="{}")])
        >>> check_history([Message.user("hi"), ask, Message.tool("a", "x")])
        []
        >>> check_history([Message.user("hi"), ask, Message.user("?")])[0].kind
        'unanswered_call'
    """
    problems: list[HistoryProblem] = []
    # The open group: unanswered call counts by id (a count > 1 only with duplicate ids).
    group_index = -1
    open_calls: dict[str, int] = {}
    # Unanswered calls of closed groups, id -> assistant indices (most recent last). Used
    # only to tell a separated result from an orphan, never to pair by id globally.
    closed: dict[str, list[int]] = {}
    unanswered: list[tuple[int, str]] = []  # (assistant index, id), resolved at the end

    def close_group() -> None:
        nonlocal group_index
        for call_id, count in open_calls.items():
            for _ in range(count):
                closed.setdefault(call_id, []).append(group_index)
                unanswered.append((group_index, call_id))
        open_calls.clear()
        group_index = -1

    for i, msg in enumerate(history):
        if msg.tool_calls and msg.role != "assistant":
            problems.append(
                HistoryProblem(i, "misplaced_tool_calls", f"a {msg.role} message has tool_calls")
            )
        if msg.tool_call_id is not None and msg.role != "tool":
            problems.append(
                HistoryProblem(
                    i,
                    "misplaced_tool_call_id",
                    f"a {msg.role} message has tool_call_id {msg.tool_call_id!r}",
                )
            )
        if msg.role == "tool":
            _check_result(i, msg, group_index, open_calls, closed, problems)
            continue
        close_group()
        if msg.role == "assistant" and msg.tool_calls:
            group_index = i
            for call in msg.tool_calls:
                if call.id in open_calls:
                    if open_calls[call.id] == 1:  # report each duplicated id once
                        problems.append(
                            HistoryProblem(
                                i,
                                "duplicate_call_id",
                                f"tool call id {call.id!r} appears more than once",
                            )
                        )
                    open_calls[call.id] += 1
                else:
                    open_calls[call.id] = 1

    # Whatever is still open at the end belongs to the last assistant message with only its
    # results after it: pending calls, allowed. Anything closed and never answered is not.
    never = [
        HistoryProblem(
            index,
            "unanswered_call",
            f"tool call {call_id!r} is never answered (only the last assistant "
            "message may have pending calls)",
        )
        for index, call_id in _still_unanswered(unanswered, closed)
    ]
    # Both lists are in message order: merging keeps the whole check linear.
    return list(heapq.merge(problems, never, key=lambda p: p.index))


def _check_result(
    i: int,
    msg: Message,
    group_index: int,
    open_calls: dict[str, int],
    closed: dict[str, list[int]],
    problems: list[HistoryProblem],
) -> None:
    call_id = msg.tool_call_id
    if call_id is None:
        problems.append(HistoryProblem(i, "orphan_result", "a tool message has no tool_call_id"))
        return
    if open_calls.get(call_id, 0) > 0:
        open_calls[call_id] -= 1
        return
    earlier = closed.get(call_id)
    if earlier:
        origin = earlier.pop()  # the nearest earlier unanswered call with that id
        problems.append(
            HistoryProblem(
                i,
                "separated_result",
                f"tool result for {call_id!r} is separated from its call (message "
                f"{origin}) by another message; results must directly follow their call",
            )
        )
        return
    where = f" of message {group_index}" if group_index >= 0 else ""
    problems.append(
        HistoryProblem(
            i,
            "orphan_result",
            f"tool result for {call_id!r} answers no earlier unanswered call{where}",
        )
    )


def _still_unanswered(
    unanswered: list[tuple[int, str]], closed: dict[str, list[int]]
) -> list[tuple[int, str]]:
    # A separated result popped its call from ``closed``; what is left there is unanswered.
    remaining: dict[tuple[int, str], int] = {}
    for call_id, indices in closed.items():
        for index in indices:
            remaining[(index, call_id)] = remaining.get((index, call_id), 0) + 1
    out: list[tuple[int, str]] = []
    for key in unanswered:
        if remaining.get(key, 0) > 0:
            remaining[key] -= 1
            out.append(key)
    return out
