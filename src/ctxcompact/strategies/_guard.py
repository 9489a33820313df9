"""ContextGuard: make every request fit ``window - reserve`` (seed 003 L1-L3, seed 002 task 1).

What is kept, by priority: pinned messages (system and developer messages, the first and the
newest user message, the user's pins: never dropped), the task (the last user message) and the
exchange holding it, the newest step (the newest assistant message and its tool results), then
older exchanges while they fit, by relevance (those keeping the most names in view, per token)
or newest first. An exchange is an assistant message with what answers it (see
``_fit.units``), so no result is ever left without its call and turns still alternate. When
the newest step alone does not fit, its results are cut head + tail (seed 003 L1); when the
pinned messages and the newest step still do not fit together, what is kept but not pinned
gives the room (the long arguments of its calls cleared, its text cut head + tail); the task is
cut only when it alone is over the budget, the other pinned user messages only when the pins
alone leave no room. What still cannot fit raises
:class:`~ctxcompact.exceptions.ContextBudgetError` naming the parts.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..exceptions import ConfigError
from ..kit import DROP_MARKER, check_int, options_repr, pinned_indices
from ._fit import Fitter, log_truncated, result_names
from ._relevance import Relevance
from ._truncation import ToolResultTruncation

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .._contract.protocols import CompactionContext
    from .._history.messages import Message
    from .._tokens.counters import TokenCounter

__all__ = [
    "DEFAULT_RESERVE_TOKENS",
    "DROP_MARKER",
    "DROP_ORDERS",
    "PER_REQUEST_DROP_BATCH",
    "TRIGGERED_FILL",
    "ContextGuard",
]

logger = logging.getLogger("ctxcompact.strategies.guard")

DEFAULT_RESERVE_TOKENS = 8192
"""``reserve_tokens`` when a ``context_window`` is given and no reserve is (seed 003)."""

DROP_ORDERS = ("relevance", "oldest")
"""The values of ``drop``: which older steps go first when some must."""

PER_REQUEST_DROP_BATCH = 8
"""``drop_batch`` of a per-request guard (see the README's reasoning)."""

TRIGGERED_FILL = 0.8
"""``fill`` of a triggered guard (no ``context_window``). Replayed over the 17 public traces at
a 16k window with ``ctxcompact replay`` (reserve 2,000): cache-adjusted cost 53.8% of no
compaction at 1.0, 39.2% at 0.8, 34.9% at 0.6 (less history kept); 0.8 keeps most."""


class ContextGuard:
    """Trim a history to ``context_window - reserve_tokens``: keep the task, drop old steps.

    Nothing happens (``None``) while the estimate (``ctx.token_counter``) fits. Otherwise,
    when ``truncate_first``, tool results over ``max_tool_result_chars`` are cut to head +
    tail first. If that is not enough, the guard keeps the pinned messages (system and
    developer messages, the first and the newest user message, the user's pins:
    ``ctx.pin``; where they are), the task (the last user message) with the exchange holding
    it, the newest step (the newest assistant message with its tool results) and the lead
    (what precedes the first assistant message), then adds older exchanges while they fit,
    in the ``drop`` order: by relevance (each adds the most names, identifiers, paths and
    numbers, not otherwise in view per token; no model call) or newest first; the rest is
    dropped. The kept history opens (after system messages) with a user message, user and
    assistant turns alternate as they did, and parallel calls stay together. When the lead
    cannot fit beside the rest, everything before the task is dropped but the pinned
    messages (the guarantee below). Pins are absolute: when they and the newest step still do
    not fit together, the kept messages that are not pinned give the room first (the long
    string arguments of their calls cleared as ``clear_tool_inputs`` clears them, then their
    text cut head + tail, each marker naming its handle with recall), and pinned user
    messages are cut head + tail only when the pins alone leave no room (a WARNING says so).

    When steps after the task were dropped and ``drop_marker`` is true, a note
    (:data:`DROP_MARKER`) is appended to a copy of the task, so the model knows its earlier
    work is gone. When the controller keeps what is removed (``ctx.recall``), the note is the
    recall form (:func:`ctxcompact.kit.drop_note`): it names the range listing every dropped
    message and the newest dropped results by tool and handle, and is written whenever
    anything was dropped; cuts then name their handle too. Both are costed as written. It
    sits after the task's text, where the prompt cache already breaks when
    steps are dropped, and inside the task message, so roles still alternate (a separate
    user message would make two user turns in a row, and a later run would take it for the
    task). A later run updates the count instead of adding a second note.

    When the newest step alone does not fit, its tool results are cut head + tail, as much
    as needed (seed 003 L1 with adaptive sizes); the task is cut only when it alone is over
    the budget. The guarantee: the output fits the budget whenever the system messages, the
    pinned messages and the task (each at its cut minimum), the newest assistant message cut
    to its markers and about 16 tokens per newest tool result (each cut down to its marker,
    overhead included) fit;
    otherwise :class:`~ctxcompact.exceptions.ContextBudgetError` names each part and its
    tokens.
    Cuts and drops are logged at WARNING on ``ctxcompact.strategies.guard`` (sizes only).
    Usually a per-request transform: the stored history stays whole.

    Used as the triggered strategy of a controller (no ``context_window``), the window is
    the context's ``max_context_size`` and the budget ``max_context_size -
    reserved_context_size - 1``: strictly below the controller's threshold, which fires at
    ``tokens + reserved >= max``. An explicit ``reserve_tokens`` larger than that reserve
    wins. Either way, a request's known answer budget (``max_output_tokens``) is kept free.
    A triggered guard keeps older steps only up to 80% of the budget (``fill``), so it runs
    again only after several steps, not at every one.

    Args:
        context_window: The model's window in tokens; ``None`` takes the context's.
        reserve_tokens: Tokens kept free for the answer (``None``: :data:`DEFAULT_RESERVE_TOKENS`
            with a ``context_window``, the context's ``reserved_context_size`` without).
        truncate_first: Cut huge tool results everywhere before dropping anything.
        max_tool_result_chars: Longest tool result left whole by that first phase.
        head_chars: Characters kept from the start of a result cut by that phase.
        tail_chars: Characters kept from the end of a result cut by that phase.
        drop_marker: Note on the task how many steps after it were dropped.
        fill: When trimming, keep older steps and turns only up to this fraction of the
            budget (the task and the newest step may use all of it). ``None``: 1 with a
            ``context_window`` (a per-request transform, recomputed from the whole history
            every time), :data:`TRIGGERED_FILL` without (a triggered strategy: the room it
            frees lets several steps through before the next run, so it breaks the prompt
            cache less often).
        drop_batch: With ``drop="oldest"``: drop older exchanges in multiples of this many
            (at most all of them), so the first kept one, and the cached prompt prefix up to
            it, stays the same for several requests instead of moving at each one. Replayed
            as a per-request transform over the 17 public traces at a 16k window, batches of
            8 bring the cache-adjusted cost from 68% to 39% of no compaction.
        drop: Which older exchanges go first when some must: ``"relevance"`` keeps those
            that keep the most names in view per token (see the README for the measure),
            ``"oldest"`` keeps the newest, contiguous.

    Raises:
        ConfigError: A negative count, or a budget (window minus reserve) that is not positive.
        ContextBudgetError: At run time, what must be kept does not fit the budget.

    Example:
        >>> guard = ContextGuard(context_window=128_000, reserve_tokens=8_192)
        >>> guard.budget(None)
        119808
    """

    def __init__(
        self,
        *,
        context_window: int | None = None,
        reserve_tokens: int | None = None,
        truncate_first: bool = True,
        max_tool_result_chars: int = 50_000,
        head_chars: int = 2_000,
        tail_chars: int = 2_000,
        drop_marker: bool = True,
        fill: float | None = None,
        drop_batch: int | None = None,
        drop: str | None = None,
    ) -> None:
        if context_window is not None:
            check_int("context_window", context_window, minimum=1)
        if reserve_tokens is not None:
            check_int("reserve_tokens", reserve_tokens)
        self.context_window = context_window
        self.reserve_tokens = reserve_tokens
        self.truncate_first = bool(truncate_first)
        self.drop_marker = bool(drop_marker)
        if fill is not None and (
            isinstance(fill, bool) or not isinstance(fill, (int, float)) or not 0 < fill <= 1
        ):
            raise ConfigError(f"must be in (0, 1], got {fill!r}", key="fill")
        self.fill = fill
        if drop_batch is not None:
            check_int("drop_batch", drop_batch, minimum=1)
        self.drop_batch = drop_batch
        if drop is not None and drop not in DROP_ORDERS:
            raise ConfigError(
                f"must be one of {', '.join(map(repr, DROP_ORDERS))}, got {drop!r}", key="drop"
            )
        self.drop = drop
        self._relevance = Relevance() if self.drop_order() == "relevance" else None
        self.truncation = ToolResultTruncation(
            max_chars=max_tool_result_chars, head_chars=head_chars, tail_chars=tail_chars
        )
        self.max_tool_result_chars = max_tool_result_chars
        if context_window is not None:
            self.budget(None)

    def drop_order(self) -> str:
        """``drop``, or its default for how the guard is used: ``"relevance"`` triggered,
        ``"oldest"`` per request (a request is rebuilt from the whole history every time, and
        only a fixed order keeps the first kept exchange, so the cached prefix, in place)."""
        if self.drop is not None:
            return self.drop
        return "oldest" if self.context_window is not None else "relevance"

    def batch_size(self) -> int:
        """``drop_batch``, or its default: :data:`PER_REQUEST_DROP_BATCH` per request, 1
        triggered (the triggered guard's ``fill`` already spaces its runs)."""
        if self.drop_batch is not None:
            return self.drop_batch
        return PER_REQUEST_DROP_BATCH if self.context_window is not None else 1

    def fill_ratio(self) -> float:
        """``fill``, or its default for how the guard is used (see the class docstring)."""
        if self.fill is not None:
            return float(self.fill)
        return 1.0 if self.context_window is not None else TRIGGERED_FILL

    def __repr__(self) -> str:
        return options_repr(self, self.truncation)  # head_chars, tail_chars

    def budget(
        self,
        max_context_size: int | None,
        reserved_context_size: int = 0,
        max_output_tokens: int | None = None,
    ) -> int:
        """Tokens the history may use.

        With ``context_window`` set: ``context_window - reserve_tokens``. Otherwise
        ``max_context_size - (reserved_context_size + 1)`` (the controller's threshold fires
        at equality), or ``max_context_size - reserve_tokens`` when that reserve is larger.
        When the request's answer budget is known (``max_output_tokens``), at least that
        much is kept free.
        """
        if self.context_window is not None:
            window, key = self.context_window, "reserve_tokens"
            reserve = DEFAULT_RESERVE_TOKENS if self.reserve_tokens is None else self.reserve_tokens
        elif max_context_size is None:
            raise ConfigError("no context window: pass context_window=", key="context_window")
        else:
            window, reserve, key = (
                max_context_size,
                reserved_context_size + 1,
                "reserved_context_size",
            )
            if self.reserve_tokens is not None and self.reserve_tokens > reserve:
                reserve, key = self.reserve_tokens, "reserve_tokens"
        if max_output_tokens is not None and max_output_tokens > reserve:
            reserve, key = max_output_tokens, "max_tokens"
        budget = window - reserve
        if budget <= 0:
            value = {
                "max_tokens": max_output_tokens,
                "reserved_context_size": reserved_context_size,
            }
            raise ConfigError(
                f"context window {window} minus {key} {value.get(key, reserve)} leaves no room "
                f"for the history; lower {key}",
                key=key,
            )
        return budget

    async def compact(self, ctx: CompactionContext) -> list[Message] | None:
        """Trim ``ctx.history`` to the budget; ``None`` when it already fits.

        Raises:
            ContextBudgetError: What must be kept does not fit (see the class docstring).
        """
        budget = self.budget(ctx.max_context_size, ctx.reserved_context_size, ctx.max_output_tokens)
        return self.guard(
            ctx.history,
            budget=budget,
            token_counter=ctx.token_counter,
            pinned=pinned_indices(ctx.history, ctx.pin),
            recall=ctx.recall,
        )

    def guard(
        self,
        history: Sequence[Message],
        *,
        budget: int,
        token_counter: TokenCounter,
        target: int | None = None,
        pinned: frozenset[int] | None = None,
        recall: bool = False,
        extra: Sequence[int] | None = None,
    ) -> list[Message] | None:
        """The synchronous core of :meth:`compact`, with the budget already computed.

        With ``target`` (below ``budget``), the history is trimmed as soon as it is over the
        target, older steps kept up to the target (``fill`` is not used); the task and the
        newest step may still use the whole budget. :class:`~ctxcompact.strategies.Tiered`
        calls it so. ``pinned``: the indices never dropped (default
        :func:`ctxcompact.kit.pinned_indices`); ``recall``: write the recall forms of the
        note and the cut markers; ``extra``: tokens each message of ``history`` will take
        beyond its count once the controller writes the recall forms of markers written
        plain (:func:`ctxcompact.kit.recall_extra`), so they are costed.
        """
        count = token_counter.count_message
        tokens = [count(m) for m in history]
        if extra is not None:
            tokens = [t + e for t, e in zip(tokens, extra, strict=True)]
        total = sum(tokens)
        limit = budget if target is None else min(target, budget)
        if total <= limit:
            return None
        work = list(history)
        if self.truncate_first:
            changed, total = self._truncate(work, tokens, total, count, recall)
            if total <= limit:
                return work if changed else None
        relevance = self._relevance
        fitter = Fitter(
            work,
            tokens,
            budget=budget,
            soft=int(budget * self.fill_ratio()) if target is None else limit,
            count=count,
            drop_marker=self.drop_marker,
            batch=self.batch_size(),
            rank=None if relevance is None else relevance.order,
            pinned=pinned_indices(work) if pinned is None else pinned,
            recall=recall,
        )
        return fitter.fit()

    def _truncate(
        self,
        work: list[Message],
        tokens: list[int],
        total: int,
        count: Callable[[Message], int],
        recall: bool,
    ) -> tuple[bool, int]:
        changed = False
        names = result_names(work)
        for i, message in enumerate(work):
            if message.role != "tool":
                continue
            # The id stands in for the handle: the controller writes the real one, which is
            # no longer unless the id is re-used (then 9 characters more, a few tokens).
            handle = message.tool_call_id if recall else None
            cut = self.truncation.truncate_message(message, handle=handle)
            if cut is message:
                continue
            log_truncated(i, names.get(i, "unknown"), len(message.text), len(cut.text))
            work[i] = cut
            new = count(cut)
            total += new - tokens[i]
            tokens[i] = new
            changed = True
        return changed, total
