"""HidingThenSummary: tool-result hiding first, an LLM summary when that is not enough.

KLIP-13 §4 runs the summary only when hiding is a no-op, because its trigger counted no tool
results and so could not tell whether hiding helped. Here the trigger does count them, so by
default the strategy estimates what hiding saved and, when the history would still be at or
above the trigger, summarizes the hidden history in the same run instead of waiting a round.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Literal

# LLM is needed at run time, not only for typing: the loader injects by resolved annotation.
from .._contract.protocols import LLM  # noqa: TC001
from ..exceptions import (
    ConfigError,
    LLMError,
    LLMRequiredError,
    LLMUnavailableError,
    SummaryRejectedError,
)
from ..kit import HIDDEN_PLACEHOLDER, options_repr, recall_extra
from ._hiding import ToolResultHiding
from ._summary import SUMMARY_PROMPT, LLMSummary, is_summary
from ._summary_fit import fit_after_summary

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._contract.protocols import CompactionContext, SummaryAhead, ToolSpec
    from .._history.messages import Message
    from .._tokens.counters import TokenCounter

__all__ = ["HidingThenSummary"]

logger = logging.getLogger(__name__)


class HidingThenSummary:
    """Hide old tool results; summarize with an LLM when hiding does not suffice.

    1. :class:`~ctxcompact.strategies.ToolResultHiding` runs first.
    2. If it hides nothing, :class:`~ctxcompact.strategies.LLMSummary` runs (KLIP-13 §4).
    3. With ``fallback="estimate"`` (the default), if ``ctx.token_count`` minus the tokens
       hiding saved (estimated with ``ctx.token_counter``; with ``ctx.recall``, counting the
       recall placeholders the controller writes in place of hiding's) plus
       ``reserved_context_size`` is still at or above ``max_context_size``, the hidden
       history is summarized in the same run. ``fallback="noop-only"`` is KLIP-13's literal
       rule: the summary waits for the next trigger, when hiding has become a no-op.

    When the summary of step 3 fails with an :class:`~ctxcompact.exceptions.LLMError` or is
    refused (:class:`~ctxcompact.exceptions.SummaryRejectedError`: empty, not text, no
    letters, garbage, over twice ``max_summary_tokens``, or not smaller than what it
    replaces; see :class:`LLMSummary`), the hidden history is returned (KLIP-13's outcome;
    the next trigger tries the summary again) and the error is logged as a warning (at DEBUG
    when the summarizer's circuit breaker refused the call:
    :class:`~ctxcompact.exceptions.LLMUnavailableError`).
    When hiding changed nothing, the summary's failure propagates, and so does every other
    failure: the controller keeps the history and reports ``failed`` with the reason. A
    missing LLM raises :class:`~ctxcompact.exceptions.LLMRequiredError` before anything runs.

    Ahead of time (:meth:`summarize_ahead`, which the controller runs in the background at
    ``precompute_ratio`` of the trigger), the summary of the hidden history is written only
    when hiding would not hold the conversation under the trigger for long: when hiding now
    frees no more than the room left before the trigger. Otherwise the next trigger is
    expected to be met by hiding alone, and a summary written for it would be wasted.

    Args:
        llm: The summarizer (injected by the loader, else ``ctx.llm`` at run time).
        preserve_recent_n: Tool-call groups whose results hiding keeps.
        fallback: ``"estimate"`` or ``"noop-only"`` (see above).
        placeholder: The text that replaces a hidden result.
        max_preserved_messages: User/assistant messages the summary keeps verbatim.
        max_summary_tokens: The summarizer's ``max_tokens``.
        max_input_tokens: Budget of the summarizer's request (see :class:`LLMSummary`).
        prompt: The summarizer's instructions.
        cache_aligned: Ask for the summary as the continuation of the live history, which the
            provider has cached (see :class:`LLMSummary`); after hiding, the request sends the
            history as the agent last sent it, not the hidden one.
        tools: The agent's tool specs, sent with a cache-aligned request.
        summarize_at_trigger: ``False``: at the trigger, only a summary made ahead of time
            is put in place, never one written while the agent waits (see
            :class:`LLMSummary`); hiding still runs.
        fit_window: When neither hiding nor the summary brings the request inside the
            window (or the summary failed), fit what they could not free as a triggered
            :class:`~ctxcompact.strategies.ContextGuard` would (see :class:`LLMSummary`).

    Example:
        >>> import asyncio
        >>> from ctxcompact import CompactionContext, Message, ToolCall
        >>> from ctxcompact.testing import ScriptedLLM
        >>> h = [Message.user("look")]
        >>> for k in range(3):
        ...     call = ToolCall(id=f"c{k}", name="cat", arguments="{}")
        ...     h += [Message.assistant(None, tool_calls=[call]), Message.tool(f"c{k}", "x" * 3500)]
        >>> ctx = CompactionContext(h, 3100, 4000, 1000, llm=ScriptedLLM())  # 3100 + 1000 >= 4000
        >>> out = asyncio.run(HidingThenSummary(preserve_recent_n=1).compact(ctx))
        >>> [len(m.text) for m in out if m.role == "tool"]  # ~2000 tokens saved: no summary
        [24, 24, 3500]
    """

    def __init__(
        self,
        llm: LLM | None = None,
        *,
        preserve_recent_n: int = 5,
        fallback: Literal["estimate", "noop-only"] = "estimate",
        placeholder: str = HIDDEN_PLACEHOLDER,
        max_preserved_messages: int = 2,
        max_summary_tokens: int = 4096,
        max_input_tokens: int | None = None,
        prompt: str = SUMMARY_PROMPT,
        cache_aligned: bool = False,
        tools: Sequence[ToolSpec] | None = None,
        summarize_at_trigger: bool = True,
        fit_window: bool = True,
    ) -> None:
        if fallback not in ("estimate", "noop-only"):
            raise ConfigError(
                f"must be 'estimate' or 'noop-only', got {fallback!r}", key="fallback"
            )
        self.fallback: Literal["estimate", "noop-only"] = fallback
        self.hiding = ToolResultHiding(preserve_recent_n=preserve_recent_n, placeholder=placeholder)
        self.summary = LLMSummary(
            llm,
            max_preserved_messages=max_preserved_messages,
            max_summary_tokens=max_summary_tokens,
            max_input_tokens=max_input_tokens,
            prompt=prompt,
            cache_aligned=cache_aligned,
            tools=tools,
            summarize_at_trigger=summarize_at_trigger,
            fit_window=fit_window,
        )

    @property
    def llm(self) -> LLM | None:
        """The injected summarizer, if any."""
        return self.summary.llm

    def needs_llm(self) -> bool:
        """True when no LLM was given: it must come from the context (see ``NeedsLLM``)."""
        return self.summary.needs_llm()

    def __repr__(self) -> str:
        return options_repr(self, self.hiding, self.summary)  # its two steps keep theirs

    def _need_llm(self, ctx: CompactionContext) -> None:
        if self.summary.llm is None and ctx.llm is None:
            # Fail at the first run, not on the first run where hiding happens to be a no-op.
            raise LLMRequiredError(
                "HidingThenSummary needs an LLM for its summary: pass one "
                "(HidingThenSummary(llm)), give the controller or the agent llm=..., or set "
                "[compaction.llm] in the config"
            )

    async def summarize_ahead(self, ctx: CompactionContext) -> SummaryAhead | None:
        """The summary of the hidden history, made now for the next trigger, when hiding
        alone will not do for long (see the class docs); ``None`` otherwise."""
        self._need_llm(ctx)
        hidden = self.hiding.hide(ctx.history, token_counter=ctx.token_counter)
        if hidden is None:
            return await self.summary.summarize_ahead(ctx)
        saving = _saving(ctx, hidden)
        room = ctx.max_context_size - ctx.reserved_context_size - ctx.token_count
        if saving > room:
            return None
        hidden_ctx = dataclasses.replace(
            ctx, history=hidden, token_count=max(0, ctx.token_count - saving)
        )
        return await self.summary.summarize_ahead(hidden_ctx, live=ctx.history)

    async def compact(self, ctx: CompactionContext) -> Sequence[Message] | None:
        """Hide, then summarize when needed; ``None`` when neither changes anything."""
        self._need_llm(ctx)
        hidden = self.hiding.hide(ctx.history, token_counter=ctx.token_counter)
        if hidden is None:
            return await self.summary.compact(ctx)
        if self.fallback == "noop-only":
            return hidden
        estimate = ctx.token_count - _saving(ctx, hidden)
        if estimate + ctx.reserved_context_size < ctx.max_context_size:
            return hidden
        logger.info(
            "hiding leaves ~%d tokens (+%d reserved >= %d): summarizing the hidden history",
            estimate,
            ctx.reserved_context_size,
            ctx.max_context_size,
        )
        hidden_ctx = dataclasses.replace(ctx, history=hidden, token_count=max(0, estimate))
        try:
            summarized = await self.summary.compact(hidden_ctx, live=ctx.history)
        except LLMUnavailableError:
            # The breaker warned when it opened; each refused call is not news.
            logger.debug("summary after hiding skipped: the summarizer is unavailable")
            return self._fitted(hidden_ctx, ctx.history)
        except (LLMError, SummaryRejectedError) as exc:
            # The type only: a provider's error text can echo the conversation.
            logger.warning(
                "summary after hiding failed (%s), keeping the hidden history", type(exc).__name__
            )
            logger.debug("summary after hiding failed: %s", exc)
            return self._fitted(hidden_ctx, ctx.history)
        return hidden if summarized is None else summarized

    def _fitted(self, hidden_ctx: CompactionContext, live: Sequence[Message]) -> Sequence[Message]:
        """The hidden history, fitted to the window when the summary could not help
        (counting the recall placeholders the hook writes in place of hiding's)."""
        hidden = hidden_ctx.history
        if not self.summary.fit_window:
            return hidden
        return fit_after_summary(hidden_ctx, hidden, is_summary, live=live)


def _saving(ctx: CompactionContext, hidden: Sequence[Message]) -> int:
    """Tokens hiding saves, with the recall placeholders the store hook will write in place
    of the plain ones when ``ctx.recall`` (they are longer: ~22 tokens, not ~15)."""
    saving = hidden_saving(ctx.history, hidden, ctx.token_counter)
    if ctx.recall:
        extra = recall_extra(ctx.history, hidden, ctx.token_counter)
        saving -= sum(e for e in extra if e > 0) if extra else 0
    return saving


def hidden_saving(
    before: Sequence[Message], after: Sequence[Message], counter: TokenCounter
) -> int:
    """Estimated tokens saved going from ``before`` to ``after`` (same length, some replaced)."""
    if len(before) != len(after):
        return counter.count(before) - counter.count(after)
    return sum(
        counter.count_message(old) - counter.count_message(new)
        for old, new in zip(before, after, strict=True)
        if old is not new
    )
