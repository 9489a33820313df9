"""Fitting a history into a token budget: what :class:`ContextGuard` keeps, drops and cuts.

The history is cut into *exchanges* (see :func:`units`): each opens on an assistant message
and holds what answers it up to the next assistant message (its tool results, a user message
after them), so dropping any set of them keeps user and assistant turns alternating. System
messages belong to none and always stay. Kept, by priority: system messages, the task (the
newest user message) with the exchange holding it, the newest exchange (its tool results cut
when it alone does not fit), the *lead* (what comes before the first assistant message: the
first user message, where agents state their task), then older exchanges while they fit,
newest first or by relevance (:class:`Fitter`'s ``rank``). When even the lead cannot fit,
everything before the task goes (the guarantee of seed 003: system + task + newest step), the
pinned messages aside.

Pinned messages (system messages, the first and the newest user message, the user's pins:
:func:`ctxcompact.kit.pinned_indices`) are never dropped, like system messages inside an
exchange. When they and the newest step do not fit together, the kept messages that are not
pinned give the room first (their calls' long arguments cleared as ``clear_tool_inputs`` does,
then their text cut head + tail); only when the pins alone leave no room are the pinned user
messages cut head + tail (the last resort, logged at WARNING).

With recall on (the controller keeps what is removed), the note on the task is the recall
form of :func:`ctxcompact.kit.drop_note`, written whenever anything was dropped, and every cut
the recall form of the truncation marker, costed with stand-in handles of the real ones'
length: the controller writes the real handles in afterwards.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._history.groups import tool_groups
from .._history.messages import Message, TextPart
from ..exceptions import ContextBudgetError
from ..kit import (
    DROP_MARKER,
    DROP_NOTE_RE,
    STAND_IN_RANGE,
    arguments_handle,
    call_names,
    cleared_marker,
    drop_note,
    with_content,
)
from ._clear_inputs import ArgumentClearer
from ._cut import cut_message, shrink, water_fill

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .._history.messages import ToolCall

__all__ = [
    "DROP_MARKER",
    "PINNED",
    "Fitter",
    "Plan",
    "guard_pins",
    "log_truncated",
    "result_names",
    "units",
]

logger = logging.getLogger("ctxcompact.strategies.guard")

PINNED = frozenset({"system", "developer"})

_STAND_IN_MESSAGE = "#" + "0" * 10
_PLAIN_CLEARER = ArgumentClearer()  # 200, as clear_tool_inputs: within a rewrite made anyway
_MIN_CLEARED_CHARS = _PLAIN_CLEARER.min_chars


def guard_pins(history: Sequence[Message], pinned: frozenset[int]) -> frozenset[int]:
    """The pinned messages the guard keeps whatever it drops: system messages, and pinned
    messages that are neither tool results nor tool calls (those belong to their step)."""
    return frozenset(
        i
        for i in pinned
        if history[i].role in PINNED or (history[i].role != "tool" and not history[i].tool_calls)
    ) | frozenset(i for i, m in enumerate(history) if m.role in PINNED)


def result_names(history: Sequence[Message]) -> dict[int, str]:
    """``index -> tool name`` of every tool result that answers a call of its group."""
    names: dict[int, str] = {}
    for group in tool_groups(history):
        by_id = call_names(history[group.call_index])
        for i in group.result_indices:
            names[i] = by_id.get(history[i].tool_call_id or "", "")
    return names


def log_truncated(index: int, tool: str, before: int, after: int) -> None:
    """Log one truncated tool result: where and how much at WARNING; its tool's name, which
    the client chose (a newline in it would forge a log line), only at DEBUG and escaped."""
    logger.warning(
        "Context guard: truncated the tool result at message %d (%d → %d chars)",
        index,
        before,
        after,
    )
    logger.debug("Context guard: message %d answers tool %.200r", index, tool)


# -- what may be dropped -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Plan:
    """The history cut into droppable exchanges (see :func:`units`) and what is always kept.

    Attributes:
        units: ``(start, end)`` message ranges, oldest first; system messages inside a range
            are never dropped.
        unit_tokens: Tokens of each unit, its system messages not counted.
        fixed: Indices of the messages always kept besides system messages: the task and
            the exchange holding it, and (with the lead kept) the lead.
        candidates: Units that may be dropped, oldest first.
        newest: The newest unit, kept (its tool results may be cut); ``None`` when the task
            holds the newest messages.
        task: Index of the task (the newest user message), or ``None``.
        after_task: How many of ``candidates`` (the newest ones) come after the task: the
            steps the note on the task counts.
        lead_kept: Whether the lead is in ``fixed`` (else everything before the task goes).
        pinned: Indices of the pinned messages kept whatever is dropped (system messages
            and :func:`guard_pins`), the task aside; their tokens are in no unit.
    """

    units: list[tuple[int, int]]
    unit_tokens: list[int]
    fixed: frozenset[int]
    candidates: list[int]
    newest: int | None
    task: int | None
    after_task: int
    lead_kept: bool
    pinned: frozenset[int] = frozenset()

    @staticmethod
    def of(
        history: Sequence[Message],
        tokens: Sequence[int],
        *,
        keep_lead: bool = True,
        pinned: frozenset[int] = frozenset(),
    ) -> Plan:
        """The plan for ``history`` (``tokens`` per message); without ``keep_lead``, every
        message before the task is droppable and dropped (the seed's minimum), ``pinned``
        (see :func:`guard_pins`) aside."""
        found = units(history)
        start = found[0][0] if found else len(history)
        opening = next((i for i, m in enumerate(history) if m.role == "user"), None)
        if keep_lead and found and opening is not None and opening > start:
            # The history opens with assistant turns before its first user message: they go
            # whenever the guard trims, and the lead runs from that user message to the end of
            # its exchange (unless a tool result there could answer one of them, or that
            # exchange is the newest step, which is always kept).
            k = next(k for k, (s, e) in enumerate(found) if s <= opening < e)
            answers = any(history[i].role == "tool" for i in range(opening, found[k][1]))
            if not answers and k < len(found) - 1:
                start, found = found[k][1], found[k + 1 :]
        task = max((i for i, m in enumerate(history) if m.role == "user"), default=None)
        keep = guard_pins(history, pinned) - {task}
        unit_tokens = [sum(tokens[k] for k in range(s, e) if k not in keep) for s, e in found]
        # The lead is kept from its first user message on: what precedes it (an orphan tool
        # result, an assistant turn) goes, so a trimmed history still opens with a user message.
        lead_from = 0 if opening is None or opening >= start else opening
        lead = {i for i in range(lead_from, start) if i not in keep}
        task_unit = None
        if task is not None and task >= start:
            task_unit = next(k for k, (s, e) in enumerate(found) if s <= task < e)
        newest = len(found) - 1 if found and task_unit != len(found) - 1 else None
        first = 0  # the oldest unit that may be kept
        if keep_lead or task is None:
            fixed = lead
            if task_unit is not None:
                fixed.update(range(*found[task_unit]))
        elif task_unit is None:  # the task is in the lead: what comes before it goes
            fixed = {i for i in lead if i >= task}
        else:
            # Everything before the task goes; the rest of its exchange stays, or all of it
            # when a result there may answer a call made before the task.
            s, e = found[task_unit]
            whole = any(history[i].role == "tool" for i in range(task, e))
            fixed = set(range(s if whole else task, e))
            first = task_unit + 1
        candidates = [k for k in range(first, len(found)) if k not in (task_unit, newest)]
        if task is None:
            after = len(candidates)
        else:
            after = sum(1 for k in candidates if found[k][0] > task)
        return Plan(
            found,
            unit_tokens,
            frozenset(fixed),
            candidates,
            newest,
            task,
            after,
            keep_lead or task is None,
            keep,
        )


class _NoRoom(Exception):
    """What must be kept does not fit; ``parts`` names each piece and its tokens."""

    def __init__(self, parts: dict[str, int]) -> None:
        super().__init__(parts)
        self.parts = parts


class Fitter:
    """One run of the dropping and cutting phase over ``work`` (its ``tokens`` counted).

    Args:
        work: The history (truncated first when the guard does).
        tokens: Tokens of each message of ``work``.
        budget: Tokens the output may use.
        soft: Older exchanges are kept only up to this many tokens (default: the budget);
            the task and the newest step may use all of the budget.
        count: The token counter's ``count_message``.
        drop_marker: Note on the task what was dropped.
        batch: Oldest-first only: exchanges are dropped in multiples of this.
        rank: Orders the droppable exchanges, most wanted first, and keeps each that fits
            (gaps allowed); ``None`` keeps the newest that fit, contiguous, and drops the
            older ones.
        pinned: The pinned indices (:func:`ctxcompact.kit.pinned_indices`): never dropped,
            cut head + tail only when nothing else gives the room.
        recall: Write (and cost) the recall forms of the note and of the cut markers.
    """

    def __init__(
        self,
        work: list[Message],
        tokens: list[int],
        *,
        budget: int,
        soft: int | None = None,
        count: Callable[[Message], int],
        drop_marker: bool,
        batch: int = 1,
        rank: Callable[[Plan, Sequence[Message]], Sequence[int]] | None = None,
        pinned: frozenset[int] = frozenset(),
        recall: bool = False,
    ) -> None:
        self.work, self.tokens = work, tokens
        self.budget, self.count = budget, count
        self.soft = budget if soft is None else soft
        self.batch = batch
        self.rank = rank
        self.drop_marker = drop_marker
        self.mark = drop_marker  # best effort: left out when it alone would not fit
        self.pins = pinned
        self.recall = recall
        self.may_cut_pins = False  # only in the last plan tried (the last resort)
        task = max((i for i, m in enumerate(work) if m.role == "user"), default=None)
        self.pinned = sum(tokens[i] for i in guard_pins(work, pinned) - {task})
        self._names: dict[int, str] = result_names(work) if recall else {}
        self._reused: set[str] = set()
        self._reused_calls: set[str] = set()
        if recall:
            seen: set[str] = set()
            called: set[str] = set()
            for message in work:
                if message.role == "tool" and message.tool_call_id is not None:
                    (self._reused if message.tool_call_id in seen else seen).add(
                        message.tool_call_id
                    )
                for call_id in message.tool_call_ids:
                    (self._reused_calls if call_id in called else called).add(call_id)

    def fit(self) -> list[Message]:
        """The new history: within the budget, or :class:`ContextBudgetError`."""
        plan = Plan.of(self.work, self.tokens, pinned=self.pins)
        fallback = Plan.of(self.work, self.tokens, keep_lead=False, pinned=self.pins)
        plans = [plan] if fallback.fixed == plan.fixed else [plan, fallback]
        for n, tried in enumerate(plans):
            self.mark = self.drop_marker
            self.may_cut_pins = n == len(plans) - 1
            try:
                return self._fit(tried)
            except _NoRoom as error:
                parts = error.parts
        raise ContextBudgetError(self.budget, parts) from None

    def _fit(self, plan: Plan) -> list[Message]:
        tokens = plan.unit_tokens
        fixed = self.pinned + sum(self.tokens[i] for i in plan.fixed if i not in plan.pinned)
        newest = tokens[plan.newest] if plan.newest is not None else 0
        marker = self._note_for(plan, set(plan.candidates))
        if fixed + newest + marker > self.budget:
            return self._cut(plan, marker)
        used = fixed + newest
        if self.rank is None:
            kept = self._newest_first(plan, used, marker)
        else:
            kept = self._ranked(plan, used, marker)
        return self._assemble(plan, kept, {})

    def _newest_first(self, plan: Plan, used: int, marker: int) -> set[int]:
        """The newest candidates that fit ``soft``, contiguous; older ones dropped in batches."""
        units, tokens, soft = plan.candidates, plan.unit_tokens, self.soft
        after = len(units) - plan.after_task  # candidates[after:] come after the task
        kept = 0
        for pos in range(len(units) - 1, -1, -1):
            # The note is needed once a step after the task goes; before it, all were kept.
            # (With recall, the note is needed once anything goes.)
            need = marker if pos >= after or self.recall else 0
            if used + tokens[units[pos]] + need > soft:
                break
            used += tokens[units[pos]]
            kept += 1
        dropped = len(units) - kept
        while kept and used + self._exact_note(plan, dropped) > soft:
            used -= tokens[units[dropped]]
            kept -= 1
            dropped += 1
        if self.batch > 1 and dropped % self.batch:
            # Drop in whole batches: the first kept exchange, hence the prompt prefix up to
            # it, stays the same while the history grows, instead of moving at every request.
            more = min(len(units), dropped + self.batch - dropped % self.batch)
            freed = sum(tokens[k] for k in units[dropped:more])
            note = self._exact_note(plan, more) - self._exact_note(plan, dropped)
            if note <= freed:  # a longer count in the note never outweighs what it frees
                dropped = more
        return set(units[:dropped])

    def _ranked(self, plan: Plan, used: int, marker: int) -> set[int]:
        """Candidates in ``rank`` order, each kept when it fits ``soft`` (gaps allowed)."""
        assert self.rank is not None
        tokens, soft = plan.unit_tokens, self.soft
        order = list(self.rank(plan, self.work))
        kept: list[int] = []
        for k in order:
            if used + tokens[k] + marker <= soft:
                used += tokens[k]
                kept.append(k)
        dropped = set(plan.candidates) - set(kept)
        while kept and used + self._note_for(plan, dropped) > soft:
            k = kept.pop()  # the least wanted of those kept
            used -= tokens[k]
            dropped.add(k)
        return dropped

    def _note_for(self, plan: Plan, dropped: set[int]) -> int:
        """The note's cost when the ``dropped`` candidates go (0 when none is written)."""
        task = plan.task
        if task is None or not self.mark or not self._noted_needed(plan, dropped):
            return 0
        return self.count(self._noted(self.work[task], plan, dropped)) - self.tokens[task]

    def _noted_needed(self, plan: Plan, dropped: set[int]) -> bool:
        """Whether the note is written: steps after the task went, or, with recall, anything."""
        if self.recall:
            return bool(self._gone(plan, dropped))
        return bool(self._after(plan, dropped))

    @staticmethod
    def _after(plan: Plan, dropped: set[int] | list[int]) -> int:
        """How many of ``dropped`` come after the task."""
        after = set(plan.candidates[len(plan.candidates) - plan.after_task :])
        return sum(1 for k in dropped if k in after)

    def _exact_note(self, plan: Plan, dropped: int) -> int:
        """The note's cost when the ``dropped`` oldest candidates go."""
        return self._note_for(plan, set(plan.candidates[:dropped]))

    # -- the note ------------------------------------------------------------------------------

    def _keep(self, plan: Plan, dropped: set[int]) -> list[bool]:
        """Which messages stay when the ``dropped`` candidates go."""
        keep = [i in plan.pinned or m.role in PINNED for i, m in enumerate(self.work)]
        for i in plan.fixed:
            keep[i] = True
        for k in (*(k for k in plan.candidates if k not in dropped), plan.newest):
            if k is not None:
                for i in range(*plan.units[k]):
                    keep[i] = True
        return keep

    def _gone(self, plan: Plan, dropped: set[int]) -> list[int]:
        """The messages dropped when the ``dropped`` candidates go, in order."""
        return [i for i, kept in enumerate(self._keep(plan, dropped)) if not kept]

    def _handle(self, i: int) -> str:
        """A stand-in for the recall handle of ``work[i]``, as long as the real one: the
        controller writes the real one in."""
        call_id = self.work[i].tool_call_id
        if self.work[i].role != "tool" or call_id is None:
            return _STAND_IN_MESSAGE
        return f"{call_id}@00000000" if call_id in self._reused else call_id

    def _cut_handle(self, i: int) -> str | None:
        """The handle a cut of ``work[i]`` names (a stand-in), or ``None`` without recall."""
        return self._handle(i) if self.recall else None

    def _noted(self, message: Message, plan: Plan, dropped: set[int]) -> Message:
        """The task ``message`` with the note on what was dropped."""
        if not self.recall:
            return _with_marker(message, self._after(plan, dropped))
        gone = self._gone(plan, dropped)
        results = [
            (self._names.get(i) or "unknown", self._handle(i))
            for i in gone
            if self.work[i].role == "tool"
        ]
        return _with_note(
            message,
            len(gone),
            lambda n: drop_note(n, range_handle=STAND_IN_RANGE, results=results),
        )

    # -- assembling ----------------------------------------------------------------------------

    def _assemble(
        self, plan: Plan, dropped: set[int], replaced: dict[int, Message]
    ) -> list[Message]:
        """Every message but those of the ``dropped`` units (and, without the lead, those
        before the task), with ``replaced`` messages swapped in and the note on the task."""
        work = self.work
        keep = self._keep(plan, dropped)
        noted = self.mark and self._noted_needed(plan, dropped)
        out: list[Message] = []
        n_dropped = dropped_tokens = 0
        for i, message in enumerate(work):
            if not keep[i]:
                n_dropped += 1
                dropped_tokens += self.tokens[i]
                continue
            message = replaced.get(i, message)
            if i == plan.task and i not in replaced and noted:
                message = self._noted(message, plan, dropped)
            out.append(message)
        if n_dropped:
            logger.warning(
                "Context guard: dropped %d old messages (estimated %d tokens)",
                n_dropped,
                dropped_tokens,
            )
        return out

    # -- cutting the newest step (and the task when it alone is over the budget) ---------------

    def _cut(self, plan: Plan, marker_cost: int) -> list[Message]:
        """Drop every candidate and cut the kept tool results (the newest exchange's and the
        task's) to fit; in the last plan, what is kept but not pinned is cleared and cut
        first, pins only when they alone leave no room; the task itself only when it alone
        is over the budget."""
        work, tokens, count, budget = self.work, self.tokens, self.count, self.budget
        kept = set(plan.fixed)
        if plan.newest is not None:
            kept.update(range(*plan.units[plan.newest]))
        results = sorted(i for i in kept if work[i].role == "tool")
        task = plan.task if plan.task in kept else None
        others = sum(
            tokens[i] for i in kept if i not in results and i != task and i not in plan.pinned
        )
        task_tokens = tokens[task] if task is not None else 0
        room = budget - self.pinned - others - marker_cost  # for the task and the results
        minimum = {i: count(cut_message(work[i], 0, self._cut_handle(i))) for i in results}
        results_min = sum(minimum.values())
        results_full = sum(tokens[i] for i in results)
        replaced: dict[int, Message] = {}
        every = set(plan.candidates)
        task_min = task_tokens
        # Pins are absolute: what is kept but not pinned (the newest assistant message, the
        # rest of the task's exchange) gives the room first, then the pinned messages.
        unpinned = [i for i in kept if i not in results and i != task and i not in plan.pinned]
        if task is not None and task_tokens > budget:
            handle = self._cut_handle(task)
            task_min = count(cut_message(work[task], 0, handle))
            if room - task_min < results_min and self.may_cut_pins:
                # Even the task cut to its marker leaves no room: the rest gives what it can.
                deficit = results_min + task_min - room
                room += self._free_unpinned(unpinned, deficit, replaced)
                if room - task_min < results_min:
                    deficit = results_min + task_min - room
                    room += self._cut_pins(plan, deficit, replaced, task)
            share = min(results_full, max(results_min, room // 2))
            marked = self.mark and self._noted_needed(plan, every)
            cut_task = shrink(
                work[task],
                room - share + marker_cost,
                count,
                (lambda m: self._noted(m, plan, every)) if marked else None,
                handle,
            )
            if cut_task is not None:
                replaced[task] = cut_task
                room -= count(cut_task) - marker_cost
            else:
                room -= task_tokens
        else:
            room -= task_tokens
        if room < results_min and self.may_cut_pins:
            room += self._free_unpinned(unpinned, results_min - room, replaced)
        if room < results_min and marker_cost:
            self.mark = False  # without the note it may fit: the guarantee does not count it
            return self._cut(plan, 0)
        if room < results_min and self.may_cut_pins:
            room += self._cut_pins(plan, results_min - room, replaced, task)
        if room < results_min:
            self._fail(plan, kept, task, task_min, results, results_min, replaced)
        if task is not None and task in replaced:
            logger.warning(
                "Context guard: cut the task message (%d → %d chars)",
                len(work[task].text),
                len(replaced[task].text),
            )
        names = result_names(work)
        for i, target in water_fill([(i, tokens[i], minimum[i]) for i in results], room):
            cut = shrink(work[i], target, count, handle=self._cut_handle(i))
            if cut is None:  # the fill never targets below the minimum
                raise AssertionError("unreachable: a result cannot reach its own minimum")
            log_truncated(i, names.get(i, "unknown"), len(work[i].text), len(cut.text))
            replaced[i] = cut
        return self._assemble(plan, every, replaced)

    def _free_unpinned(
        self, unpinned: list[int], deficit: int, replaced: dict[int, Message]
    ) -> int:
        """Free ``deficit`` tokens from the kept messages that are not pinned: the long
        arguments of their calls cleared as ``clear_tool_inputs`` does, then their text cut
        head + tail; the tokens freed (the markers name their handles with recall)."""
        freed = self._clear_arguments(unpinned, deficit, replaced)
        if freed < deficit:
            freed += self._cut_largest(unpinned, deficit - freed, replaced, "message")
        return freed

    def _cut_pins(
        self, plan: Plan, deficit: int, replaced: dict[int, Message], task: int | None
    ) -> int:
        """The last resort, when the pinned messages alone leave no room: cut the pinned
        user messages (the task aside) head + tail, largest first, saying why."""
        pins = [
            i
            for i in plan.pinned
            if self.work[i].role not in PINNED and i not in replaced and i != task
        ]
        if not pins:
            return 0
        logger.warning(
            "Context guard: the system and pinned messages (%d tokens) and the newest step "
            "cut as far as it goes exceed the budget of %d by %d tokens: cutting pinned "
            "messages",
            self.pinned,
            self.budget,
            deficit,
        )
        return self._cut_largest(pins, deficit, replaced, "pinned message")

    def _clear_arguments(
        self, indices: list[int], deficit: int, replaced: dict[int, Message]
    ) -> int:
        """Clear the long string arguments of the calls of the ``indices`` messages (largest
        first) as :class:`~ctxcompact.strategies.ToolInputClearing` does, until ``deficit``
        tokens are freed; the tokens freed. With recall, each marker is costed in its recall
        form (the controller names the arguments' handle)."""
        work, count = self.work, self.count
        freed = 0
        for i in sorted(indices, key=lambda k: -self.tokens[k]):
            if freed >= deficit:
                break
            message = replaced.get(i, work[i])
            calls = message.tool_calls or ()
            cleared = [self._clearer(c).call(c)[0] for c in calls]
            if all(c is None for c in cleared):
                continue
            new = message.replace(
                tool_calls=[c if n is None else n for c, n in zip(calls, cleared, strict=True)]
            )
            gain = count(message) - count(new)
            if gain <= 0:
                continue
            replaced[i] = new
            freed += gain
            logger.warning(
                "Context guard: cleared the long arguments of the calls of message %d "
                "(%d tokens freed)",
                i,
                gain,
            )
        return freed

    def _clearer(self, call: ToolCall) -> ArgumentClearer:
        """The clearer of ``call``'s arguments: the plain marker, or with recall the recall
        form naming a stand-in handle as long as the real one."""
        if not self.recall:
            return _PLAIN_CLEARER
        reused = call.id in self._reused_calls or call.id in self._reused  # as Handles has it
        handle = arguments_handle(call.id, "0" * 8 if reused else None)
        marker = cleared_marker(0, handle=handle.replace("{", "{{").replace("}", "}}"))
        template = marker.replace(": 0 chars", ": {chars} chars", 1)
        least = len(template.format(chars=10**12)) + 1
        return ArgumentClearer(min_chars=max(_MIN_CLEARED_CHARS, least), marker=template)

    def _cut_largest(
        self, cuttable: list[int], deficit: int, replaced: dict[int, Message], what: str
    ) -> int:
        """Cut the ``cuttable`` messages head + tail (largest first; a message already in
        ``replaced`` is cut from there) to free ``deficit`` tokens; the tokens freed. A cut
        keeps the message (its head, its tail and, with recall, the handle of the whole); one
        without text to cut gives nothing."""
        work, count = self.work, self.count
        current = {i: replaced.get(i, work[i]) for i in cuttable}
        size = {i: count(m) if i in replaced else self.tokens[i] for i, m in current.items()}
        freed = 0
        for i in sorted(cuttable, key=lambda k: -size[k]):
            if freed >= deficit:
                break
            handle = self._cut_handle(i)
            least = count(cut_message(current[i], 0, handle))
            if least >= size[i]:
                continue
            target = max(least, size[i] - (deficit - freed))
            cut = shrink(current[i], target, count, None, handle)
            if cut is None:
                continue
            replaced[i] = cut
            freed += size[i] - count(cut)
            logger.warning(
                "Context guard: cut the %s %d (%d → %d chars)",
                what,
                i,
                len(work[i].text),
                len(cut.text),
            )
        return freed

    def _fail(
        self,
        plan: Plan,
        kept: set[int],
        task: int | None,
        task_tokens: int,
        results: list[int],
        results_min: int,
        replaced: dict[int, Message],
    ) -> None:
        def size(i: int) -> int:  # as far as it was cut or cleared
            return self.count(replaced[i]) if i in replaced else self.tokens[i]

        parts: dict[str, int] = {}
        pinned = self.pinned - sum(
            self.tokens[i] - size(i) for i in replaced if i in plan.pinned and i != task
        )
        if pinned:
            parts["system and pinned messages"] = pinned
        newest = set(range(*plan.units[plan.newest])) if plan.newest is not None else set()
        lead = {i for i in plan.fixed if task is None or i < task} - newest - plan.pinned
        if plan.lead_kept and lead:
            parts[
                f"first messages and the exchange before the task (messages {min(lead)}-"
                f"{max(lead)})"
            ] = sum(size(i) for i in lead if i not in results)
        if task is not None:
            rest = {i for i in plan.fixed if i > task} - set(results) - newest - plan.pinned
            parts[f"task (message {task})"] = task_tokens + sum(size(i) for i in rest)
        if newest:
            start = plan.units[plan.newest][0] if plan.newest is not None else 0
            step = sum(size(i) for i in newest if i not in results and i not in plan.pinned)
            parts[f"newest assistant message (message {start})"] = step
        if results:
            parts[f"its {len(results)} tool result(s) cut to their markers"] = results_min
        raise _NoRoom(parts)


# -- helpers -----------------------------------------------------------------------------------


def _with_marker(message: Message, dropped: int) -> Message:
    """The task ``message`` noting ``dropped`` more dropped steps (an earlier note is merged)."""
    return _with_note(message, dropped, lambda n: DROP_MARKER.format(count=n))


def _with_note(message: Message, count: int, render: Callable[[int], str]) -> Message:
    """``message`` with the note ``render(total)`` at its end, where ``total`` is ``count``
    plus the count of a note already there (which the new one replaces)."""
    content = message.content
    if isinstance(content, str) or content is None:
        text = content or ""
        match = DROP_NOTE_RE.search(text)
        if match is not None:
            count += int(match.group(1))
            text = text[: match.start()]
        note = render(count)
        return with_content(message, f"{text}\n\n{note}" if text else note)
    parts = list(content)
    last = parts[-1] if parts else None
    if isinstance(last, TextPart):
        match = DROP_NOTE_RE.fullmatch(last.text)
        if match is not None:
            count += int(match.group(1))
            parts.pop()
    parts.append(TextPart(text=render(count)))
    return message.model_copy(update={"content": tuple(parts)})


def units(history: Sequence[Message]) -> list[tuple[int, int]]:
    """``(start, end)`` of each droppable exchange, oldest first.

    An exchange opens on an assistant message and runs to the next one: its tool results,
    and user messages after them. Dropping any set of exchanges therefore never puts two
    user turns or two assistant turns side by side that were not already. What comes before
    the first assistant message (the lead) is in none; system messages inside a range are
    never dropped. A tool result separated from its call's exchange by an assistant message
    without calls (invalid input) joins everything back to the last exchange with calls, so
    dropping never leaves a result without the call it may answer.
    """
    found: list[tuple[int, int]] = []
    last_call_unit = -1
    for i, message in enumerate(history):
        if message.role == "assistant":
            found.append((i, i + 1))
            if message.tool_calls:
                last_call_unit = len(found) - 1
            continue
        if not found:
            continue  # the lead
        start, _ = found[-1]
        if message.role == "tool" and not history[start].tool_calls and last_call_unit >= 0:
            found[last_call_unit:] = [(found[last_call_unit][0], i + 1)]
            continue
        found[-1] = (start, i + 1)
    return found
