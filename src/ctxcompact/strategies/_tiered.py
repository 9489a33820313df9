"""Tiered: the cheapest rewrite that fits, tier after tier, the context guard last.

When the controller's threshold fires, the tiers run in order, each on the previous one's
output, and the history is measured again (``ctx.token_counter``) after each: as soon as it
is at or under the target (``fill`` of the guard's budget) the run stops. The default tiers:

1. ``truncate``: a tool result over ``max_result_share`` of the budget is cut head + tail to
   that size (one result must not crowd out the rest);
2. ``mask``: results older than the last ``keep_recent`` tool-call groups become
   ``[masked]``, except errors (:class:`Schema1Masking`);
3. ``clear``: long string arguments of those older calls become a sized marker
   (:class:`ToolInputClearing`);
4. ``summary``: with an LLM, the older messages are summarized (:class:`LLMSummary`);
5. the context guard, always last: it drops older exchanges, keeping the system prompt, the
   first and the newest user messages and the newest exchange, chosen by relevance, and
   always fits (or raises :class:`~ctxcompact.exceptions.ContextBudgetError`).

With a store, the controller writes the ``mask`` and ``clear`` markers in their recall forms,
which name the handle to read the original back with (``ctx.recall``: the tiers count those
forms when they fit).

A tier that raises, or whose output is not smaller or breaks pairing, is skipped: the run
falls through to the next tier, never into a loop.

The summary is made ahead of time (:meth:`Tiered.summarize_ahead`): when the controller
starts one ahead of the trigger (``precompute_ratio``), the cheap tiers run on a copy
and the summary of what they leave is written in the background; when the trigger fires, the
summary tier swaps it in with no model call. Like every summary of :class:`LLMSummary` it is
incremental: the second and later ones send the previous summary plus what came after it.
The agent never waits for the summarizer: a trigger with no summary made ahead that lines up
(one step jumped past both thresholds, or the cheap tiers were expected to do) leaves the
history to the guard, and the next summary is made in the background. ``summary =
{summarize_at_trigger = true}`` writes one at the trigger instead, while the agent waits.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

# LLM is needed at run time, not only for typing: the loader injects by resolved annotation.
from .._contract.protocols import LLM, CompactionStrategy, Dependencies, SummaryAhead
from .._history.validate import check_history
from ..exceptions import ConfigError, LLMUnavailableError, StrategyLoadError
from ..kit import check_int, options_repr, pinned_indices, recall_extra
from ..kit._recall_costs import MASKED
from ._clear_inputs import ToolInputClearing
from ._cut import shrink
from ._guard import ContextGuard
from ._pipeline import Step, _load_step
from ._schema1 import Schema1Masking
from ._summary import LLMSummary

if TYPE_CHECKING:
    from .._contract.protocols import CompactionContext
    from .._history.messages import Message
    from .._tokens.counters import TokenCounter

__all__ = ["BUILT_IN_TIERS", "DEFAULT_FILL", "DEFAULT_RESULT_SHARE", "DEFAULT_TIERS", "Tiered"]

logger = logging.getLogger(__name__)

DEFAULT_FILL = 0.4
"""The target, as a share of the guard's budget (why 0.4: docs/guides/strategies.md, "Why these
defaults", under the tiered strategy)."""

DEFAULT_RESULT_SHARE = 0.0625
"""The ``truncate`` tier's cap on one tool result, as a share of the budget (1/16)."""

BUILT_IN_TIERS = ("truncate", "mask", "clear", "summary")
"""The tiers named by a word in ``tiers``; anything else is a strategy spec."""

DEFAULT_TIERS: tuple[str, ...] = BUILT_IN_TIERS
"""Every built-in tier, cheapest first (``summary`` only runs with an LLM)."""


class Tiered:
    """Run tiers cheapest first, measuring after each, until the history fits the target.

    The target is ``fill`` times the guard's budget (``max_context_size -
    reserved_context_size - 1`` from the context, as a triggered
    :class:`~ctxcompact.strategies.ContextGuard` computes it). Nothing happens (``None``)
    while the history is at or under it. Meant as the controller's triggered strategy: it
    runs when the threshold fires and leaves room for several calls before the next run, so
    the provider's cache of the prompt holds in between.

    Args:
        llm: The summarizer of the ``summary`` tier (injected by the loader; else
            ``ctx.llm`` at run time; without either the tier is skipped).
        fill: The target as a share of the budget, in (0, 1).
        tiers: The tiers, in order: built-in names (``truncate``, ``mask``, ``clear``,
            ``summary``), strategies named as in a pipeline's ``steps`` (a spec, or
            ``{strategy = "...", params = {...}}``), or strategy objects. The guard always
            runs last.
        keep_recent: Tool-call groups, newest first, whose results and arguments the
            ``mask`` and ``clear`` tiers leave whole.
        max_result_share: The ``truncate`` tier cuts a tool result over this share of the
            budget to that size (in (0, 1]).
        clear_min_chars: The ``clear`` tier clears string arguments longer than this.
        summary: Keyword arguments of the ``summary`` tier's :class:`LLMSummary`. Its
            ``summarize_at_trigger`` (default ``false``): whether a trigger with no summary
            made ahead that lines up writes one then, while the agent waits (``true``; for a
            controller that makes none ahead: ``precompute_ratio = 0``, or each step run in
            its own event loop), or leaves the history to the guard (``false``).
        guard: Keyword arguments of the last tier's :class:`ContextGuard` (``drop``,
            ``drop_marker``, ``truncate_first``...; not ``fill`` nor ``context_window``).
        dependencies: What a tier named as a strategy is offered (filled by the loader).

    Raises:
        ConfigError: A setting out of range, an unknown built-in tier or guard key.

    Example:
        >>> Tiered(fill=0.5, tiers=["mask", "clear"])
        Tiered(fill=0.5, tiers=('mask', 'clear'))
    """

    def __init__(
        self,
        llm: LLM | None = None,
        *,
        fill: float = DEFAULT_FILL,
        tiers: Sequence[Step | CompactionStrategy] = DEFAULT_TIERS,
        keep_recent: int = 5,
        max_result_share: float = DEFAULT_RESULT_SHARE,
        clear_min_chars: int = 200,
        summary: Mapping[str, Any] | None = None,
        guard: Mapping[str, Any] | None = None,
        dependencies: Dependencies | None = None,
    ) -> None:
        self.fill = _share("fill", fill, closed=False)
        self.max_result_share = _share("max_result_share", max_result_share, closed=True)
        self.keep_recent = check_int("keep_recent", keep_recent)
        self.clear_min_chars = check_int("clear_min_chars", clear_min_chars)
        if isinstance(tiers, (str, Mapping)):
            raise ConfigError("must be a list of tiers", key="tiers")
        self.tiers = tuple(tiers)
        self.llm = llm
        self.summary = None if summary is None else dict(summary)
        at_trigger = (self.summary or {}).get("summarize_at_trigger", False)
        if not isinstance(at_trigger, bool):
            raise ConfigError(
                f"must be true or false, got {at_trigger!r}", key="summary.summarize_at_trigger"
            )
        self._at_trigger = at_trigger
        self.guard = None if guard is None else dict(guard)
        for key in ("fill", "context_window"):
            if key in (self.guard or {}):
                raise ConfigError(
                    f"the guard's {key} is set by the tiered strategy, not in guard",
                    key=f"guard.{key}",
                )
        try:
            self._guard = ContextGuard(**(self.guard or {}))
        except TypeError as exc:
            raise ConfigError(str(exc), key="guard") from None
        offer = dependencies if dependencies is not None else Dependencies()
        self._tiers: list[tuple[str, CompactionStrategy | None]] = []
        for k, tier in enumerate(self.tiers):
            if isinstance(tier, str) and tier in BUILT_IN_TIERS:
                self._tiers.append((tier, self._built_in(tier)))
                continue
            if not isinstance(tier, (str, Mapping)):  # a strategy object (Python)
                self._tiers.append((type(tier).__name__, tier))
                continue
            try:
                step = _load_step(tier, k, offer, key="tiers")
            except StrategyLoadError as exc:
                if isinstance(tier, str) and exc.reason == "unknown_name":
                    choices = ", ".join(BUILT_IN_TIERS)
                    raise ConfigError(
                        f"unknown tier {tier!r}: neither a built-in tier ({choices}) nor a "
                        "strategy name",
                        key=f"tiers[{k}]",
                    ) from None
                raise
            self._tiers.append((type(step).__name__, step))

    def _built_in(self, name: str) -> CompactionStrategy | None:
        if name == "mask":
            # It runs when the tiered run does (the threshold fired): every run is a batch,
            # and the history it sees may already be under the threshold after truncation.
            return Schema1Masking(
                window_turns=self.keep_recent,
                placeholder_template=MASKED,
                batch_turns=0,
                always=True,
            )
        if name == "clear":
            return ToolInputClearing(keep_recent=self.keep_recent, min_chars=self.clear_min_chars)
        if name == "summary":
            try:
                # The tiered guard (relevance) fits what the summary leaves, not the
                # summary's own oldest-first fit.
                options: dict[str, Any] = {"fit_window": False, **(self.summary or {})}
                options.pop("summarize_at_trigger", None)  # decided per run, in _summarize
                return LLMSummary(self.llm, **options)
            except TypeError as exc:
                raise ConfigError(str(exc), key="summary") from None
        return None  # truncate: needs the budget, done in compact()

    def __repr__(self) -> str:
        return options_repr(self)

    def needs_llm(self) -> bool:
        """Never: without a model, the ``summary`` tier is skipped (see ``NeedsLLM``)."""
        return False

    def _summary_tier(self, ctx: CompactionContext) -> tuple[int, LLMSummary] | None:
        """The summary tier and its index in ``_tiers``, when it has a summarizer."""
        for k, (_, tier) in enumerate(self._tiers):
            if isinstance(tier, LLMSummary):
                return (k, tier) if tier.llm is not None or ctx.llm is not None else None
        return None

    def _target(self, ctx: CompactionContext) -> tuple[int, int]:
        """The guard's budget and the tiers' target (``fill`` of it), in tokens."""
        budget = self._guard.budget(
            ctx.max_context_size, ctx.reserved_context_size, ctx.max_output_tokens
        )
        return budget, max(1, int(budget * self.fill))

    async def summarize_ahead(self, ctx: CompactionContext) -> SummaryAhead | None:
        """The summary tier's summary, made now (the controller runs this in the background
        ahead of the trigger, see ``precompute_ratio``) for the trigger's run to swap in.

        The tiers before the summary run first, on a copy, as they will at the trigger; the
        summary is of what they leave. ``None`` (no model call) when there is no summary
        tier or summarizer, when a tier before it moved positions (the summary would not line
        up), or when those tiers will reach the target at the trigger on their own: what
        they leave now plus what the conversation may still add before the trigger (kept
        whole, being recent) is at or under the target. The controller asks again on its
        next call, so the estimate is remade as the trigger nears.
        """
        found = self._summary_tier(ctx)
        if found is None:
            return None
        at, summary = found
        budget, target = self._target(ctx)
        counter = ctx.token_counter
        history: Sequence[Message] = ctx.history
        tokens = counter.count(history)
        for name, tier in self._tiers[:at]:
            out = await self._run_tier(name, tier, ctx, history, tokens, budget)
            if out is None:
                continue
            if len(out) != len(history):
                return None  # positions moved: a summary would not line up at the trigger
            after = counter.count(out)
            if after < tokens and not _breaks_pairing(history, out):
                history, tokens = out, after
        room = max(0, ctx.max_context_size - ctx.reserved_context_size - ctx.token_count)
        if tokens + room <= target:
            return None
        tiered = dataclasses.replace(ctx, history=history, token_count=tokens)
        return await summary.summarize_ahead(tiered, live=ctx.history)

    async def compact(self, ctx: CompactionContext) -> Sequence[Message] | None:
        """The history after the tiers needed to reach the target; ``None`` if none was."""
        budget, target = self._target(ctx)
        counter = ctx.token_counter
        history: Sequence[Message] = ctx.history
        tokens = counter.count(history)
        if tokens <= target:
            return None
        changed = False
        extra: list[int] | None = None
        for name, tier in self._tiers:
            out = await self._run_tier(name, tier, ctx, history, tokens, budget)
            if out is None:
                continue
            # With recall, the store hook writes each marker of the mask and clear tiers in
            # its recall form, which names a handle: cost that, not the plain marker.
            more = recall_extra(ctx.history, out, counter) if ctx.recall else None
            after = counter.count(out) + (sum(more) if more else 0)
            if after >= tokens or _breaks_pairing(history, out):
                logger.debug("tier %s skipped: its output is not smaller or breaks pairing", name)
                continue
            history, tokens, changed, extra = out, after, True, more
            if tokens <= target:
                return history
        out = self._guard.guard(
            history,
            budget=budget,
            token_counter=counter,
            target=target,
            pinned=pinned_indices(history, ctx.pin),
            recall=ctx.recall,
            extra=extra,
        )
        if out is not None:
            return out
        return history if changed else None

    async def _run_tier(
        self,
        name: str,
        tier: CompactionStrategy | None,
        ctx: CompactionContext,
        history: Sequence[Message],
        tokens: int,
        budget: int,
    ) -> Sequence[Message] | None:
        """One tier's output, or ``None`` when it changed nothing, could not run or raised."""
        if tier is None:
            cap = int(budget * self.max_result_share)
            return _cut_large(history, cap, ctx.token_counter, recall=ctx.recall)
        if isinstance(tier, LLMSummary) and tier.llm is None and ctx.llm is None:
            return None  # no summarizer configured: the guard will fit
        try:
            sub = dataclasses.replace(ctx, history=history, token_count=tokens)
            if isinstance(tier, LLMSummary):
                # The pins are read in the history as given, as summarize_ahead reads them
                # (``live``), so the summary is swapped in with the split it was made with.
                live = ctx.history if len(ctx.history) == len(history) else None
                return await self._summarize(tier, sub, live)
            return await tier.compact(sub)
        except Exception as exc:
            # A failing tier (the summarizer down, a refused summary, a broken plug-in) falls
            # through to the next one; the guard still fits the history.
            level = logging.DEBUG if isinstance(exc, LLMUnavailableError) else logging.WARNING
            logger.log(level, "tier %s failed (%s); the next tier runs", name, type(exc).__name__)
            return None

    async def _summarize(
        self, tier: LLMSummary, ctx: CompactionContext, live: Sequence[Message] | None
    ) -> Sequence[Message] | None:
        """The summary tier: the summary made ahead put in place, with no model call; else
        one written now only with ``summarize_at_trigger`` (see the class)."""
        out = await tier.compact(ctx, live=live, ahead_only=True)
        if out is not None or self._at_trigger:
            return out if out is not None else await tier.compact(ctx, live=live)
        logger.debug("tier summary: no summary made ahead lines up; the next tier fits")
        return None


def _share(key: str, value: object, *, closed: bool) -> float:
    """``value`` as a float in (0, 1] (``closed``) or (0, 1), else a ``ConfigError``."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or not (0 < value <= 1 if closed else 0 < value < 1):  # type: ignore[operator]
        raise ConfigError(f"must be in {'(0, 1]' if closed else '(0, 1)'}, got {value!r}", key=key)
    return float(value)  # type: ignore[arg-type]


def _breaks_pairing(before: Sequence[Message], after: Sequence[Message]) -> bool:
    """Whether ``after`` has a kind of pairing problem more often than ``before``."""
    problems = check_history(after)
    if not problems:
        return False  # the common case: one validation, not two
    return bool(Counter(p.kind for p in problems) - Counter(p.kind for p in check_history(before)))


def _cut_large(
    history: Sequence[Message], cap: int, counter: TokenCounter, *, recall: bool = False
) -> list[Message] | None:
    """Every tool result over ``cap`` tokens cut head + tail to ``cap``; ``None`` when none
    is that large. With ``recall``, each cut names its handle (the call id stands in: the
    controller writes the real one)."""
    count = counter.count_message
    out: list[Message] | None = None
    for i, message in enumerate(history):
        if message.role != "tool" or count(message) <= cap:
            continue
        cut = shrink(message, cap, count, handle=message.tool_call_id if recall else None)
        if cut is None:
            continue
        if out is None:
            out = list(history)
        out[i] = cut
        logger.debug("tier truncate: cut the tool result at message %d to %d tokens", i, cap)
    return out
