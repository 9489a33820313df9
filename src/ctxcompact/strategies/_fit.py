"""Fitting a history into a token budget: what :class:`ContextGuard` keeps, drops and cuts.

The history is cut into units (see :func:`units`): system messages belong to none and always
stay; the task (the last user message) is never dropped; steps after it (an assistant
message with the tool messages right after it) are dropped oldest first, and turns before it
whole. :class:`Fitter` keeps the newest of them that fit and, when even the newest step does
not, cuts its tool results head + tail (and the task, when it alone is over the budget).
"""

from __future__ import annotations

import itertools
import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._history.groups import tool_groups
from .._history.messages import Message, TextPart
from ..exceptions import ContextBudgetError
from ..kit import call_names, with_content
from ._cut import cut_message, shrink, water_fill

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = ["DROP_MARKER", "PINNED", "Fitter", "Plan", "log_truncated", "result_names", "units"]

logger = logging.getLogger("ctxcompact.strategies.guard")

PINNED = frozenset({"system", "developer"})

DROP_MARKER = (
    "[ctxcompact: {count} earlier step(s) of this task were dropped here to fit the window]"
)
"""Appended to the task when steps after it were dropped; ``{count}`` is how many."""

_DROP_MARKER_RE = re.compile(
    r"(?:\n\n)?" + re.escape(DROP_MARKER).replace(r"\{count\}", r"(\d+)") + r"\Z"
)


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
        units: ``(start, end)`` message ranges; system messages belong to none.
        unit_tokens: Tokens of each unit, its system messages not counted.
        turns: Unit ranges before the task, oldest first, each dropped whole.
        block: The unit range always kept: the task (with, in malformed input, what cannot
            be separated from it); ``None`` without a user message.
        steps: Unit indices after the task (all of them without a user message).
        task: Index of the task message, or ``None``.
    """

    units: list[tuple[int, int]]
    unit_tokens: list[int]
    turns: list[tuple[int, int]]
    block: tuple[int, int] | None
    steps: list[int]
    task: int | None

    @staticmethod
    def of(history: Sequence[Message], tokens: Sequence[int]) -> Plan:
        found = units(history)
        unit_tokens = [
            sum(tokens[k] for k in range(s, e) if history[k].role not in PINNED) for s, e in found
        ]
        task = max((i for i, m in enumerate(history) if m.role == "user"), default=None)
        if task is None:
            return Plan(found, unit_tokens, [], None, list(range(len(found))), None)
        protected = next(k for k, (s, e) in enumerate(found) if s <= task < e)
        starts = [k for k, (s, _) in enumerate(found) if history[s].role == "user"]
        bounds = [0, *(k for k in starts if 0 < k <= protected)]
        turns = list(itertools.pairwise(bounds))
        steps = list(range(protected + 1, len(found)))
        return Plan(found, unit_tokens, turns, (bounds[-1], protected + 1), steps, task)

    def tokens_of(self, first: int, end: int) -> int:
        return sum(self.unit_tokens[first:end])


class Fitter:
    """One run of the dropping and cutting phase over ``work`` (its ``tokens`` counted).

    Args:
        plan: ``Plan.of(work, tokens)``.
        budget: Tokens the output may use.
        count: The token counter's ``count_message``.
        drop_marker: Note on the task how many steps after it were dropped.
        fill: Older steps and turns are kept only up to this fraction of the budget; the
            task and the newest step may use all of it.
        batch: Steps after the task are dropped in multiples of this.
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
    ) -> None:
        self.batch = batch
        self.plan, self.work, self.tokens = plan, work, tokens
        self.budget, self.count = budget, count
        self.soft = int(budget * fill)
        self.mark = drop_marker  # best effort: left out when it alone would not fit
        self.pinned = sum(t for m, t in zip(work, tokens, strict=True) if m.role in PINNED)
        block = plan.block
        self.fixed = self.pinned + (plan.tokens_of(*block) if block else 0)

    def fit(self) -> list[Message]:
        """The new history: within the budget, or :class:`ContextBudgetError`."""
        plan, budget, soft = self.plan, self.budget, self.soft
        steps_tokens = sum(plan.unit_tokens[k] for k in plan.steps)
        if self.fixed + steps_tokens <= soft:
            # Every step fits: drop whole turns before the task, oldest first.
            used = self.fixed + steps_tokens
            first = plan.block[0] if plan.block else 0
            for start, end in reversed(plan.turns):
                if used + plan.tokens_of(start, end) > soft:
                    break
                used += plan.tokens_of(start, end)
                first = start
            return self._assemble(first, 0, {})
        # Some step must go, so every turn before the task goes too (oldest first).
        newest = plan.steps[-1] if plan.steps else None
        older = plan.steps[:-1]
        marker_cost = self._marker_cost(len(older)) if older else 0
        used = self.fixed + marker_cost + (plan.unit_tokens[newest] if newest is not None else 0)
        if used > budget:
            return self._cut(newest, len(older), marker_cost)
        used -= marker_cost
        kept = 0
        for k in reversed(older):
            if used + plan.unit_tokens[k] + marker_cost > soft:
                break
            used += plan.unit_tokens[k]
            kept += 1
        # The note's count has fewer digits now than the bound it was costed with: make
        # sure its exact cost fits all the same.
        while kept and used + self._marker_cost(len(older) - kept) > soft:
            used -= plan.unit_tokens[older[len(older) - kept]]
            kept -= 1
        dropped = len(older) - kept
        if self.batch > 1 and dropped % self.batch:
            # Drop in whole batches: the first kept step, hence the prompt prefix up to it,
            # stays the same while the history grows, instead of moving at every request.
            more = min(len(older), dropped + self.batch - dropped % self.batch)
            freed = sum(plan.unit_tokens[k] for k in older[dropped:more])
            note = self._marker_cost(more) - self._marker_cost(dropped)
            if note <= freed:  # a longer count in the note never outweighs what it frees
                dropped = more
        return self._assemble(plan.block[0] if plan.block else 0, dropped, {})

    # -- assembling ----------------------------------------------------------------------------

    def _marker_cost(self, dropped: int) -> int:
        task = self.plan.task
        if task is None or not self.mark:
            return 0
        message = self.work[task]
        return self.count(_with_marker(message, dropped)) - self.tokens[task]

    def _assemble(
        self, first_unit: int, dropped_steps: int, replaced: dict[int, Message]
    ) -> list[Message]:
        """Pinned messages, units from ``first_unit`` on minus the oldest ``dropped_steps``."""
        plan, work = self.plan, self.work
        units = plan.units
        gone: set[int] = set(range(first_unit))
        gone.update(plan.steps[:dropped_steps])
        keep = [True] * len(work)
        for k in gone:
            start, end = units[k]
            for i in range(start, end):
                if work[i].role not in PINNED:
                    keep[i] = False
        out: list[Message] = []
        n_dropped = dropped_tokens = 0
        for i, message in enumerate(work):
            if not keep[i]:
                n_dropped += 1
                dropped_tokens += self.tokens[i]
                continue
            message = replaced.get(i, message)
            if i == plan.task and i not in replaced and dropped_steps and self.mark:
                message = _with_marker(message, dropped_steps)
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
                if work[i].role in PINNED:
                    continue
                if i > start and work[i].role == "tool":
                    results.append(i)
                else:
                    step_fixed += tokens[i]
        task = plan.task
        task_tokens = tokens[task] if task is not None else 0
        room = budget - self.fixed + task_tokens - step_fixed - marker_cost  # task + results
        minimum = {i: count(cut_message(work[i], 0)) for i in results}
        results_min = sum(minimum.values())
        results_full = sum(tokens[i] for i in results)
        replaced: dict[int, Message] = {}
        dropped = older
        task_min = task_tokens
        if task is not None and task_tokens > budget:
            task_min = count(cut_message(work[task], 0))
            share = min(results_full, max(results_min, room // 2))
            marked = dropped and self.mark
            cut_task = shrink(
                work[task],
                room - share + marker_cost,
                count,
                (lambda m: _with_marker(m, dropped)) if marked else None,
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
            self._fail(newest, task_min, step_fixed, results_min, len(results))
        if task is not None and task in replaced:
            logger.warning(
                "Context guard: cut the task message (%d → %d chars)",
                len(work[task].text),
                len(replaced[task].text),
            )
        names = result_names(work)
        for i, target in water_fill([(i, tokens[i], minimum[i]) for i in results], room):
            cut = shrink(work[i], target, count)
            if cut is None:  # the fill never targets below the minimum
                raise AssertionError("unreachable: a result cannot reach its own minimum")
            log_truncated(i, names.get(i, "unknown"), len(work[i].text), len(cut.text))
            replaced[i] = cut
        return self._assemble(plan.block[0] if plan.block else 0, dropped, replaced)

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
            parts["system messages"] = self.pinned
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
    content = message.content
    if isinstance(content, str) or content is None:
        text = content or ""
        match = _DROP_MARKER_RE.search(text)
        if match is not None:
            dropped += int(match.group(1))
            text = text[: match.start()]
        note = DROP_MARKER.format(count=dropped)
        return with_content(message, f"{text}\n\n{note}" if text else note)
    parts = list(content)
    last = parts[-1] if parts else None
    if isinstance(last, TextPart):
        match = _DROP_MARKER_RE.fullmatch(last.text)
        if match is not None:
            dropped += int(match.group(1))
            parts.pop()
    parts.append(TextPart(text=DROP_MARKER.format(count=dropped)))
    return message.model_copy(update={"content": tuple(parts)})


def units(history: Sequence[Message]) -> list[tuple[int, int]]:
    """``(start, end)`` of each droppable unit, oldest first (system messages are not units)."""
    units: list[tuple[int, int]] = []
    last_call_unit = -1
    n = len(history)
    i = 0
    while i < n:
        message = history[i]
        if message.role in PINNED:
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
