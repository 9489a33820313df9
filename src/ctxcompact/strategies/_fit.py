"""Fitting a history into a token budget: what :class:`ContextGuard` keeps, drops and cuts.

The history is cut into units (see :func:`units`): pinned messages (system messages, the first
user message, the user's pins: :func:`ctxcompact.kit.pinned_indices`) belong to none and always
stay; the task (the last user message) is never dropped; steps after it (an assistant message
with the tool messages right after it) are dropped oldest first, and turns before it whole.
:class:`Fitter` keeps the newest of them that fit and, when even the newest step does not,
cuts its tool results head + tail (and the task, when it alone is over the budget, and the
other pinned user messages, when they alone are).

With recall on (the controller keeps what is removed), the note on the task is the recall
form of :func:`ctxcompact.kit.drop_note` and every cut the recall form of the truncation
marker, costed with stand-in handles of the real ones' length: the controller writes the real
handles in afterwards.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._history.groups import tool_groups
from .._history.messages import Message, TextPart
from ..exceptions import ContextBudgetError
from ..kit import DROP_MARKER, DROP_NOTE_RE, STAND_IN_RANGE, call_names, drop_note, with_content
from ._cut import cut_message, shrink, water_fill

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = ["DROP_MARKER", "PINNED", "Fitter", "Plan", "log_truncated", "result_names", "units"]

logger = logging.getLogger("ctxcompact.strategies.guard")

PINNED = frozenset({"system", "developer"})

_STAND_IN_MESSAGE = "#" + "0" * 10


def guard_pins(history: Sequence[Message], pinned: frozenset[int]) -> frozenset[int]:
    """The pinned messages the guard keeps outside every unit: system messages, and pinned
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
    """The history cut into droppable pieces, each a range of units (see :func:`units`).

    Attributes:
        units: ``(start, end)`` message ranges; pinned messages belong to none.
        unit_tokens: Tokens of each unit, its pinned messages not counted.
        turns: Unit ranges before the task, oldest first, each dropped whole.
        block: The unit range always kept: the task (with, in malformed input, what cannot
            be separated from it); ``None`` without a user message.
        steps: Unit indices after the task (all of them without a user message).
        task: Index of the task message, or ``None``.
        pinned: Indices of the messages kept whatever happens (the task aside).
    """

    units: list[tuple[int, int]]
    unit_tokens: list[int]
    turns: list[tuple[int, int]]
    block: tuple[int, int] | None
    steps: list[int]
    task: int | None
    pinned: frozenset[int] = frozenset()

    @staticmethod
    def of(
        history: Sequence[Message],
        tokens: Sequence[int],
        pinned: frozenset[int] | None = None,
    ) -> Plan:
        """The plan of ``history``; ``pinned`` (default: the system messages) stay outside
        every unit, the task aside."""
        task = max((i for i, m in enumerate(history) if m.role == "user"), default=None)
        keep = guard_pins(history, pinned or frozenset()) - {task}
        found = units(history, keep)
        unit_tokens = [sum(tokens[k] for k in range(s, e) if k not in keep) for s, e in found]
        if task is None:
            return Plan(found, unit_tokens, [], None, list(range(len(found))), None, keep)
        protected = next(k for k, (s, e) in enumerate(found) if s <= task < e)
        starts = [k for k, (s, _) in enumerate(found) if history[s].role == "user"]
        bounds = [0, *(k for k in starts if 0 < k <= protected)]
        turns = list(itertools.pairwise(bounds))
        steps = list(range(protected + 1, len(found)))
        return Plan(found, unit_tokens, turns, (bounds[-1], protected + 1), steps, task, keep)

    def tokens_of(self, first: int, end: int) -> int:
        return sum(self.unit_tokens[first:end])


class Fitter:
    """One run of the dropping and cutting phase over ``work`` (its ``tokens`` counted).

    Args:
        plan: ``Plan.of(work, tokens, pinned)``.
        budget: Tokens the output may use.
        count: The token counter's ``count_message``.
        drop_marker: Note on the task what was dropped.
        fill: Older steps and turns are kept only up to this fraction of the budget; the
            task and the newest step may use all of it.
        batch: Steps after the task are dropped in multiples of this.
        recall: Write (and cost) the recall forms of the note and of the cut markers.
    """

    def __init__(
        self,
        plan: Plan,
        work: list[Message],
        tokens: list[int],
        *,
        budget: int,
        count: Callable[[Message], int],
        drop_marker: bool,
        fill: float = 1.0,
        batch: int = 1,
        recall: bool = False,
    ) -> None:
        self.batch = batch
        self.plan, self.work, self.tokens = plan, work, tokens
        self.budget, self.count = budget, count
        self.soft = int(budget * fill)
        self.mark = drop_marker  # best effort: left out when it alone would not fit
        self.recall = recall
        self.pinned = sum(tokens[i] for i in plan.pinned)
        block = plan.block
        self.fixed = self.pinned + (plan.tokens_of(*block) if block else 0)
        self._names: dict[int, str] = result_names(work) if recall else {}
        self._reused: set[str] = set()
        if recall:
            seen: set[str] = set()
            for message in work:
                if message.role == "tool" and message.tool_call_id is not None:
                    (self._reused if message.tool_call_id in seen else seen).add(
                        message.tool_call_id
                    )

    @property
    def _start(self) -> int:
        """The first unit of the task's turn: every unit before it is a turn to drop."""
        return self.plan.block[0] if self.plan.block else 0

    def fit(self) -> list[Message]:
        """The new history: within the budget, or :class:`ContextBudgetError`."""
        plan, budget, soft = self.plan, self.budget, self.soft
        steps_tokens = sum(plan.unit_tokens[k] for k in plan.steps)
        if self.fixed + steps_tokens <= soft:
            # Every step fits: drop whole turns before the task, oldest first.
            used = self.fixed + steps_tokens
            first = self._start
            for start, end in reversed(plan.turns):
                if used + plan.tokens_of(start, end) > soft:
                    break
                used += plan.tokens_of(start, end)
                first = start
            if not (self.recall and self.mark):
                return self._assemble(first, 0, {})
            # The note naming the dropped turns must fit too: drop more turns for it.
            kept = [t for t in plan.turns if t[0] >= first]
            while first and kept and used + self._marker_cost(0, first) > soft:
                start, end = kept.pop(0)
                used -= plan.tokens_of(start, end)
                first = end
            if not first or used + self._marker_cost(0, first) <= budget:
                return self._assemble(first, 0, {})
        # Some step must go, so every turn before the task goes too (oldest first).
        newest = plan.steps[-1] if plan.steps else None
        older = plan.steps[:-1]
        marker_cost = self._marker_cost(len(older)) if older or self._start else 0
        used = self.fixed + marker_cost + (plan.unit_tokens[newest] if newest is not None else 0)
        if used > budget:
            return self._cut(newest, len(older), marker_cost)
        used -= marker_cost
        kept_steps = 0
        for k in reversed(older):
            if used + plan.unit_tokens[k] + marker_cost > soft:
                break
            used += plan.unit_tokens[k]
            kept_steps += 1
        # The note's count has fewer digits now than the bound it was costed with: make
        # sure its exact cost fits all the same.
        while kept_steps and used + self._marker_cost(len(older) - kept_steps) > soft:
            used -= plan.unit_tokens[older[len(older) - kept_steps]]
            kept_steps -= 1
        dropped = len(older) - kept_steps
        if self.batch > 1 and dropped % self.batch:
            # Drop in whole batches: the first kept step, hence the prompt prefix up to it,
            # stays the same while the history grows, instead of moving at every request.
            more = min(len(older), dropped + self.batch - dropped % self.batch)
            freed = sum(plan.unit_tokens[k] for k in older[dropped:more])
            note = self._marker_cost(more) - self._marker_cost(dropped)
            if note <= freed:  # a longer count in the note never outweighs what it frees
                dropped = more
        return self._assemble(self._start, dropped, {})

    # -- the note ------------------------------------------------------------------------------

    def _gone(self, first_unit: int, dropped_steps: int) -> list[int]:
        """The messages dropped with the units before ``first_unit`` and the oldest
        ``dropped_steps`` steps, in order."""
        plan, pinned = self.plan, self.plan.pinned
        chosen = [*range(first_unit), *plan.steps[:dropped_steps]]
        return sorted(
            i for k in chosen for i in range(*plan.units[k]) if i not in pinned and i != plan.task
        )

    def _handle(self, i: int) -> str:
        """A stand-in for the recall handle of ``work[i]``, as long as the real one: the
        controller writes the real one in."""
        call_id = self.work[i].tool_call_id
        if self.work[i].role != "tool" or call_id is None:
            return _STAND_IN_MESSAGE
        return f"{call_id}@00000000" if call_id in self._reused else call_id

    def _noted(self, message: Message, first_unit: int, dropped_steps: int) -> Message:
        """The task ``message`` with the note on what was dropped."""
        if not self.recall:
            return _with_marker(message, dropped_steps)
        gone = self._gone(first_unit, dropped_steps)
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

    def _marker_cost(self, dropped: int, first_unit: int | None = None) -> int:
        task = self.plan.task
        if task is None or not self.mark:
            return 0
        first = self._start if first_unit is None else first_unit
        if not dropped and not (self.recall and first):
            return 0
        message = self.work[task]
        return self.count(self._noted(message, first, dropped)) - self.tokens[task]

    # -- assembling ----------------------------------------------------------------------------

    def _assemble(
        self, first_unit: int, dropped_steps: int, replaced: dict[int, Message]
    ) -> list[Message]:
        """Pinned messages, units from ``first_unit`` on minus the oldest ``dropped_steps``."""
        plan, work = self.plan, self.work
        gone = set(self._gone(first_unit, dropped_steps))
        out: list[Message] = []
        n_dropped = dropped_tokens = 0
        noted = self.mark and (dropped_steps or (self.recall and gone))
        for i, message in enumerate(work):
            if i in gone:
                n_dropped += 1
                dropped_tokens += self.tokens[i]
                continue
            message = replaced.get(i, message)
            if i == plan.task and i not in replaced and noted:
                message = self._noted(message, first_unit, dropped_steps)
            out.append(message)
        if n_dropped:
            logger.warning(
                "Context guard: dropped %d old messages (estimated %d tokens)",
                n_dropped,
                dropped_tokens,
            )
        return out

    # -- cutting the newest step (and the task when it alone is over the budget) ---------------

    def _cut(self, newest: int | None, older: int, marker_cost: int) -> list[Message]:
        plan, work, tokens, count, budget = (
            self.plan,
            self.work,
            self.tokens,
            self.count,
            self.budget,
        )
        results: list[int] = []
        step_fixed = 0
        if newest is not None:
            start, end = plan.units[newest]
            for i in range(start, end):
                if i in plan.pinned:
                    continue
                if i > start and work[i].role == "tool":
                    results.append(i)
                else:
                    step_fixed += tokens[i]
        task = plan.task
        task_tokens = tokens[task] if task is not None else 0
        room = budget - self.fixed + task_tokens - step_fixed - marker_cost  # task + results
        minimum = {i: count(cut_message(work[i], 0, self._cut_handle(i))) for i in results}
        results_min = sum(minimum.values())
        results_full = sum(tokens[i] for i in results)
        replaced: dict[int, Message] = {}
        dropped = older
        first = self._start
        task_min = task_tokens
        if task is not None and task_tokens > budget:
            handle = self._cut_handle(task)
            task_min = count(cut_message(work[task], 0, handle))
            share = min(results_full, max(results_min, room // 2))
            marked = self.mark and (dropped or (self.recall and first))
            cut_task = shrink(
                work[task],
                room - share + marker_cost,
                count,
                (lambda m: self._noted(m, first, dropped)) if marked else None,
                handle,
            )
            if cut_task is not None:
                replaced[task] = cut_task
                room -= count(cut_task) - marker_cost
            else:
                room -= task_tokens
        else:
            room -= task_tokens
        if room < results_min and marker_cost:
            self.mark = False  # without the note it may fit: the guarantee does not count it
            return self._cut(newest, older, 0)
        if room < results_min:
            room += self._cut_pins(results_min - room, replaced)
        if room < results_min:
            self._fail(newest, task_min, step_fixed, results_min, len(results))
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
        return self._assemble(first, dropped, replaced)

    def _cut_handle(self, i: int) -> str | None:
        """The handle a cut of ``work[i]`` names (a stand-in), or ``None`` without recall."""
        return self._handle(i) if self.recall else None

    def _cut_pins(self, deficit: int, replaced: dict[int, Message]) -> int:
        """Cut pinned user messages head + tail (largest first) to free ``deficit`` tokens,
        when nothing else can give them; the tokens freed. A cut keeps the message (its
        head, its tail and, with recall, the handle of the whole)."""
        plan, work, tokens, count = self.plan, self.work, self.tokens, self.count
        freed = 0
        cuttable = [i for i in plan.pinned if work[i].role not in PINNED]
        for i in sorted(cuttable, key=lambda k: -tokens[k]):
            if freed >= deficit:
                break
            handle = self._cut_handle(i)
            least = count(cut_message(work[i], 0, handle))
            if least >= tokens[i]:
                continue
            cut = shrink(work[i], max(least, tokens[i] - (deficit - freed)), count, None, handle)
            if cut is None:
                continue
            replaced[i] = cut
            freed += tokens[i] - count(cut)
            logger.warning(
                "Context guard: cut the pinned message %d (%d → %d chars)",
                i,
                len(work[i].text),
                len(cut.text),
            )
        return freed

    def _fail(
        self,
        newest: int | None,
        task_tokens: int,
        step_fixed: int,
        results_min: int,
        n_results: int,
    ) -> None:
        plan = self.plan
        parts: dict[str, int] = {}
        if self.pinned:
            parts["system and pinned messages"] = self.pinned
        if plan.task is not None:
            block_rest = self.fixed - self.pinned - self.tokens[plan.task]
            parts[f"task (message {plan.task})"] = task_tokens + block_rest
        if newest is not None:
            parts[f"newest assistant message (message {plan.units[newest][0]})"] = step_fixed
        if n_results:
            parts[f"its {n_results} tool result(s) cut to their markers"] = results_min
        raise ContextBudgetError(self.budget, parts)


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


def units(
    history: Sequence[Message], pinned: frozenset[int] | None = None
) -> list[tuple[int, int]]:
    """``(start, end)`` of each droppable unit, oldest first (system messages, and the
    ``pinned`` indices, are not units)."""
    units: list[tuple[int, int]] = []
    last_call_unit = -1
    n = len(history)
    i = 0
    while i < n:
        message = history[i]
        if message.role in PINNED or (pinned is not None and i in pinned):
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
