"""What every strategy's output must satisfy (DESIGN.md's invariants), as checks that explain.

:mod:`ctxcompact.testing` raises these as one :class:`AssertionError`; the checks live here so
that module stays a menu of test doubles. Matching an output message to the input message it
comes from is positional, like everything in ctxcompact: the very same object, else (for a
tool result or an assistant message with tool calls) the next input message with the same
tool-call id, else an equal message. Real traces re-use ids across turns, so ids are only
ever looked up *after* the previous match.
"""

from __future__ import annotations

import copy
import json
from bisect import bisect_right
from collections.abc import Sequence
from typing import Any, Literal

from .._history.groups import tool_groups
from .._history.messages import Message
from .._history.validate import check_history
from ..kit import TRUNCATION_RE

__all__ = ["INVARIANTS", "Invariant", "Snapshot", "output_problems"]

Invariant = Literal[
    "returns messages",
    "input untouched",
    "None for no change",
    "causal order",
    "tool-call integrity",
    "system messages kept",
    "valid history",
]
"""The name of one invariant, as :class:`~ctxcompact.testing.StrategyInvariantError` names it."""

INVARIANTS: tuple[Invariant, ...] = (
    "returns messages",
    "input untouched",
    "None for no change",
    "causal order",
    "tool-call integrity",
    "system messages kept",
    "valid history",
)
"""Every invariant a strategy's output is checked against, in the order they are checked."""

Problem = tuple[Invariant, str]
_SYSTEM_ROLES = ("system", "developer")


class Snapshot:
    """A deep copy of a history, taken before a strategy runs, to prove it left it alone."""

    __slots__ = ("_dumps", "_items")

    def __init__(self, history: Sequence[Message]) -> None:
        self._items = list(history)
        self._dumps = [copy.deepcopy(m.model_dump()) for m in history]

    def changes(self, history: Sequence[Message]) -> str | None:
        """What changed in ``history`` since the snapshot, or ``None``."""
        if len(history) != len(self._items):
            return f"the input list went from {len(self._items)} to {len(history)} messages"
        for i, (was, now) in enumerate(zip(self._items, history, strict=True)):
            if was is not now:
                return f"input message {i} was replaced in the input list"
            if now.model_dump() != self._dumps[i]:
                return f"input message {i} ({now.role}) was changed in place"
        return None


def output_problems(
    before: Sequence[Message],
    after: object,
    *,
    max_new_messages: int = 0,
    keeps_system_messages: bool = True,
) -> list[Problem]:
    """Every invariant ``after`` (a strategy's output for ``before``) breaks, in order.

    Input mutation is not checked here (it needs a :class:`Snapshot` taken before the run).
    """
    if after is None:
        return []
    if isinstance(after, (str, bytes)) or not isinstance(after, Sequence):
        return [("returns messages", f"returned {type(after).__name__}, not a list or None")]
    messages: list[Message] = []
    for i, item in enumerate(after):
        if not isinstance(item, Message):
            kind = type(item).__name__
            return [("returns messages", f"item {i} of the output is a {kind}, not a Message")]
        messages.append(item)
    if after is before:
        return [("None for no change", "returned the input history itself; return None")]
    if len(messages) == len(before) and all(
        a is b or a == b for a, b in zip(messages, before, strict=True)
    ):
        return [("None for no change", "returned an unchanged copy of the input; return None")]

    sources, misplaced = _match(before, messages, keeps_system_messages=keeps_system_messages)
    problems: list[Problem] = []
    if misplaced:
        j, i, last = misplaced[0]
        problems.append(
            (
                "causal order",
                f"output message {j} ({messages[j].role}) is input message {i}, which is not "
                f"after input message {last} (output before it): messages were reordered or "
                "repeated",
            )
        )
    moved = {j for j, _, _ in misplaced}
    rewritten = _rewritten_in_place(before, messages, sources)
    new = [
        j
        for j, s in enumerate(sources)
        if s is None
        and j not in moved
        and j not in rewritten
        and not (messages[j].role == "tool" or messages[j].tool_calls)
    ]
    if len(new) > max_new_messages:
        where = ", ".join(f"{j} ({messages[j].role})" for j in new[:5])
        problems.append(
            (
                "causal order",
                f"{len(new)} output message(s) are not in the input: {where}; a strategy "
                f"adds messages only where it documents them (max_new_messages="
                f"{max_new_messages})",
            )
        )
    problems += _integrity(before, messages, sources)
    if keeps_system_messages:
        kept = {s for s in sources if s is not None}
        for i, m in enumerate(before):
            if m.role in _SYSTEM_ROLES and i not in kept:
                problems.append(
                    ("system messages kept", f"input message {i} ({m.role}) is not in the output")
                )
                break
    old_kinds = {p.kind for p in check_history(before)}
    new_problems = [p for p in check_history(messages) if p.kind not in old_kinds]
    if new_problems:
        problems.append(("valid history", "check_history: " + _first(list(map(str, new_problems)))))
    return _by_invariant(problems)


def _first(details: Sequence[str], shown: int = 2) -> str:
    """The first ``shown`` details, and how many more there are: enough to find the bug."""
    more = f"; and {len(details) - shown} more" if len(details) > shown else ""
    return "; ".join(details[:shown]) + more


def _ids(ids: Sequence[str | None], shown: int = 3) -> str:
    """``['a', 'b', ...]`` with at most ``shown`` ids, and how many there are."""
    if len(ids) <= shown:
        return str(list(ids))
    return str(list(ids[:shown]))[:-1] + f", ... ({len(ids)} in all)]"


def _by_invariant(problems: Sequence[Problem]) -> list[Problem]:
    """One entry per broken invariant, in the order of :data:`INVARIANTS`."""
    details: dict[Invariant, list[str]] = {}
    for name, detail in problems:
        details.setdefault(name, []).append(detail)
    return [(name, "; ".join(details[name])) for name in INVARIANTS if name in details]


# -- matching output to input ------------------------------------------------------------------


def _rewritten_in_place(
    before: Sequence[Message], after: Sequence[Message], sources: Sequence[int | None]
) -> set[int]:
    """Output messages that rewrite an input message of the same role at its place (a task
    cut head+tail, a note appended to it): rewritten, not added. The replaced input message
    lies between the input messages kept before and after it, nothing else keeps it, and the
    rewrite starts with its text (a cut keeps the head; one cut to fewer than 16 characters
    keeps its head and tail around the truncation marker): a message in its place with other
    text (a summary, a new instruction) is a new message."""
    used = {s for s in sources if s is not None}
    found: set[int] = set()
    for j, source in enumerate(sources):
        if source is not None:
            continue
        low = max((s for s in sources[:j] if s is not None), default=-1)
        high = min((s for s in sources[j + 1 :] if s is not None), default=len(before))
        role = after[j].role
        text = after[j].text
        cut = TRUNCATION_RE.search(text)
        for i in range(low + 1, high):
            original = before[i].text
            head = original[:16]
            if cut is not None and cut.start() < 16:  # cut short: its head, marker, tail
                head = original[: cut.start()]
                if not original.endswith(text[cut.end() :]):
                    continue
            if i not in used and before[i].role == role and text.startswith(head):
                used.add(i)
                found.add(j)
                break
    return found


def _match(
    before: Sequence[Message], after: Sequence[Message], *, keeps_system_messages: bool
) -> tuple[list[int | None], list[tuple[int, int, int]]]:
    """The input index each output message comes from (``None``: new or misplaced), and the
    misplaced ones: ``(output index, the input index it is, the last input index before it)``.
    """
    by_object: dict[int, list[int]] = {}
    by_result: dict[str, list[int]] = {}
    by_call: dict[str, list[int]] = {}
    by_text: dict[tuple[str, str], list[int]] = {}
    for i, m in enumerate(before):
        by_object.setdefault(id(m), []).append(i)
        if m.role == "tool" and m.tool_call_id is not None:
            by_result.setdefault(m.tool_call_id, []).append(i)
        elif m.tool_calls:
            for call_id in {c.id for c in m.tool_calls}:
                by_call.setdefault(call_id, []).append(i)
        else:
            by_text.setdefault((m.role, m.text), []).append(i)
    by_role: dict[str, list[int]] = {}
    if not keeps_system_messages:
        for i, m in enumerate(before):
            if m.role in _SYSTEM_ROLES:
                by_role.setdefault(m.role, []).append(i)

    sources: list[int | None] = []
    misplaced: list[tuple[int, int, int]] = []
    last = -1
    for j, m in enumerate(after):
        if id(m) in by_object:
            candidates = [by_object[id(m)]]
        elif m.role == "tool" and m.tool_call_id is not None:
            candidates = [by_result.get(m.tool_call_id, [])]
        elif m.tool_calls:
            candidates = [by_call.get(c.id, []) for c in m.tool_calls]
        else:
            equal = [i for i in by_text.get((m.role, m.text), ()) if before[i] == m]
            candidates = [equal, by_role.get(m.role, [])]
        after_last = [c[k] for c in candidates if (k := bisect_right(c, last)) < len(c)]
        if after_last:
            last = min(after_last)
            sources.append(last)
            continue
        sources.append(None)
        earlier = [c[0] for c in candidates if c]
        if earlier:
            misplaced.append((j, min(earlier), last))
    return sources, misplaced


# -- tool calls --------------------------------------------------------------------------------


def _integrity(
    before: Sequence[Message], after: Sequence[Message], sources: Sequence[int | None]
) -> list[Problem]:
    problems: list[str] = []
    where: dict[int, int] = {}  # input index -> output index
    for j, (m, s) in enumerate(zip(after, sources, strict=True)):
        if s is not None:
            where[s] = j
            if m.tool_calls or before[s].tool_calls:
                problems += _same_calls(j, m, s, before[s])
            if m.role == "tool" and before[s].role == "tool" and m.name != before[s].name:
                problems.append(f"output message {j}: the tool result's name was changed")
        elif m.tool_calls:
            ids = [c.id for c in m.tool_calls]
            problems.append(
                f"output message {j} makes tool calls {_ids(ids)} that no input message makes at "
                "that point (tool-call ids are never altered and calls never invented)"
            )
        elif m.role == "tool":
            problems.append(
                f"output message {j} is a result for call {m.tool_call_id!r}, which no input "
                "result answers at that point"
            )
    for group in tool_groups(before):
        call_kept = group.call_index in where
        kept = [r for r in group.result_indices if r in where]
        lost = [before[r].tool_call_id for r in group.result_indices if r not in where]
        if call_kept and len(kept) < len(group.result_indices):
            problems.append(
                f"results for {_ids(lost)} of input message {group.call_index} were dropped while "
                "their calls were kept (parallel calls are kept or dropped together)"
            )
        elif kept and not call_kept:
            problems.append(
                f"input message {group.call_index} (the calls) was dropped while results "
                f"{_ids([before[r].tool_call_id for r in kept])} were kept"
            )
        elif call_kept:
            start = where[group.call_index]
            run_end = start + 1
            while run_end < len(after) and after[run_end].role == "tool":
                run_end += 1
            apart = [str(before[r].tool_call_id) for r in kept if not start < where[r] < run_end]
            if apart:
                problems.append(
                    f"results {_ids(apart)} no longer directly follow their calls (output message "
                    f"{start})"
                )
    return [("tool-call integrity", _first(problems))] if problems else []


def _same_calls(j: int, new: Message, s: int, old: Message) -> list[str]:
    was, now = old.tool_calls or (), new.tool_calls or ()
    if [c.id for c in was] != [c.id for c in now]:
        return [
            f"output message {j}: the tool calls of input message {s} went from "
            f"{[c.id for c in was]} to {[c.id for c in now]} (parallel calls stay together, "
            "ids unchanged)"
        ]
    problems = []
    for a, b in zip(was, now, strict=True):
        if a.name != b.name:
            problems.append(f"output message {j}: call {a.id!r} renamed {a.name!r} -> {b.name!r}")
        elif a.arguments != b.arguments and not _same_keys(a.arguments, b.arguments):
            problems.append(
                f"output message {j}: the arguments of call {a.id!r} are no longer a JSON "
                "object with the same keys"
            )
    return problems


def _same_keys(old: str, new: str) -> bool:
    def keys(text: str) -> frozenset[str] | None:
        try:
            value: Any = json.loads(text)
        except (TypeError, ValueError):
            return None
        return frozenset(value) if isinstance(value, dict) else None

    old_keys = keys(old)
    return old_keys is not None and keys(new) == old_keys
