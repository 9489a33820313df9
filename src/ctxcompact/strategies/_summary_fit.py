"""Fitting what a summary could not free: the summary strategies' last step.

A summary replaces the older messages, but keeps the last ones whole; when those (a huge
tool result, a long task) are over the window on their own, the summary alone leaves the
request over it. :func:`fit_after_summary` then fits the rest the way
:class:`~ctxcompact.strategies.ContextGuard` does, as a triggered guard (budget
``max_context_size - reserved_context_size - 1``, the request's answer budget kept free,
older steps kept up to :data:`~ctxcompact.strategies._guard.TRIGGERED_FILL` of it): the
newest step's results are cut head + tail, older kept steps are dropped with a note. The
summary itself and the leading system messages are never dropped: they go before what is
fitted, and when no user message follows the summary, the summary is the task the note is
appended to.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .._history.messages import Message
from ..exceptions import ConfigError, ContextBudgetError
from ..kit import MAX_NOTE_RESULTS, STAND_IN_RANGE, drop_note, pinned_indices, recall_extra
from ._fit import result_names
from ._guard import ContextGuard

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .._contract.protocols import CompactionContext
    from .._tokens.counters import TokenCounter

__all__ = ["fit_after_summary", "note_bound"]

logger = logging.getLogger(__name__)

_GUARD = ContextGuard()  # triggered: the context's window and reserve, its fill


def fit_after_summary(
    ctx: CompactionContext,
    output: Sequence[Message],
    is_summary: Callable[[Message], bool],
    *,
    live: Sequence[Message] | None = None,
) -> Sequence[Message]:
    """``output`` (a rewrite of ``ctx.history``) fitted to the context's window; ``output``
    itself when it fits already, or when what must be kept cannot fit (logged: the summary
    still stands, smaller than the history).

    With ``ctx.recall``, what the controller's store hook adds is counted: its note on what
    was replaced (:func:`note_bound`), and, when ``ctx.history`` is a rewrite of ``live``
    with plain placeholders (hiding's, at the same positions), their recall forms.

    Example:
        >>> from ctxcompact import CompactionContext, HeuristicTokenCounter, Message
        >>> h = [Message.user("summary"), Message.user("x " * 5000)]
        >>> ctx = CompactionContext(h, 5000, 3000, 500, token_counter=HeuristicTokenCounter())
        >>> out = fit_after_summary(ctx, h, lambda m: m.text == "summary")
        >>> out[0] is h[0], ctx.token_counter.count(out) < 2500
        (True, True)
    """
    counter = ctx.token_counter
    try:
        budget = _GUARD.budget(
            ctx.max_context_size, ctx.reserved_context_size, ctx.max_output_tokens
        )
    except ConfigError:  # the reserve leaves no room: nothing could fit it
        return output
    extra: list[int] | None = None
    if ctx.recall:
        # The store hook then notes what the summary replaced, and names the results among
        # it, on the summary or the task: that note is no part of ``output`` yet.
        budget = max(1, budget - note_bound(ctx.history, counter))
        extra = _placeholders_extra(ctx.history, live, output, counter)
    if counter.count(output) + (sum(extra) if extra else 0) <= budget:
        return output
    summary = max((i for i, m in enumerate(output) if is_summary(m)), default=None)
    start = 0
    if summary is not None:
        # A user message after the summary is the task: the summary goes before what is
        # fitted. Without one, the summary is the task (never dropped, the note goes on it).
        later_user = any(m.role == "user" for m in output[summary + 1 :])
        start = summary + 1 if later_user else summary
    head, rest = list(output[:start]), list(output[start:])
    room = budget - sum(counter.count_message(m) for m in head)
    try:
        fitted = _GUARD.guard(
            rest,
            budget=max(1, room),
            token_counter=counter,
            pinned=pinned_indices(rest, ctx.pin),
            recall=ctx.recall,
            extra=None if extra is None else extra[start:],
        )
    except ContextBudgetError as exc:
        logger.warning(
            "the summary leaves ~%d tokens over a budget of %d, and what must be kept "
            "does not fit it either (%s); the request stays over the window",
            counter.count(output) - budget,
            budget,
            type(exc).__name__,
        )
        return output
    return output if fitted is None else [*head, *fitted]


def _placeholders_extra(
    history: Sequence[Message],
    live: Sequence[Message] | None,
    output: Sequence[Message],
    counter: TokenCounter,
) -> list[int] | None:
    """What each message of ``output`` gains when the hook writes the recall forms of the
    plain placeholders that ``history`` (a rewrite of ``live``, position for position) put
    in place of ``live``'s results; ``None`` when there is nothing to count."""
    if live is None or len(live) != len(history):
        return None
    at = {id(m): i for i, m in enumerate(history)}
    before = [live[at[id(m)]] if id(m) in at else m for m in output]
    extra = recall_extra(before, output, counter)
    return None if extra is None else [max(0, e) for e in extra]


def note_bound(history: Sequence[Message], counter: TokenCounter) -> int:
    """At most the tokens the store hook's note on a rewrite of ``history`` takes: the
    drop note with a range handle, a message count of as many digits as ``history`` has
    messages, and the :data:`~ctxcompact.kit.MAX_NOTE_RESULTS` longest tool results'
    tool names and handles, each listed on its own (a handle may gain ``@`` and 8 digits).

    Example:
        >>> from ctxcompact import HeuristicTokenCounter, Message
        >>> h = [Message.user("task"), Message.tool("toolu_01ABC", "x"), Message.user("go")]
        >>> 20 < note_bound(h, HeuristicTokenCounter()) < 80
        True
    """
    names = result_names(history)
    entries = [
        f"{names.get(i) or 'unknown'} {m.tool_call_id}@{'0' * 8}"
        for i, m in enumerate(history)
        if m.role == "tool" and m.tool_call_id is not None
    ]
    listed = ", ".join(sorted(entries, key=len)[-MAX_NOTE_RESULTS:])
    text = drop_note(10 ** len(str(len(history))), range_handle=STAND_IN_RANGE)
    if listed:
        text = text[:-1] + f"; results: {listed}]"
    return counter.count_message(Message.user("\n\n" + text)) - counter.count_message(
        Message.user("")
    )
