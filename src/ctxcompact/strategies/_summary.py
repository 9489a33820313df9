"""LLMSummary: old messages become one summary written by an LLM (KLIP-13 §5, fixed).

Taken from kimi-cli's ``SimpleCompaction`` (keep the last ``max_preserved_messages``
user/assistant messages, summarize what comes before), with these fixes:

* the cut never falls inside a tool-call group, system messages stay first;
* the summarizer sees tool calls (name, arguments) and tool results, not only text, and the
  oversized ones are cut head + tail so its own request fits ``max_input_tokens``;
* an earlier summary is recognized by :data:`SUMMARY_PREFIX` and merged, never nested;
* a summarizer that overflows retries once with a smaller input, one cut at its output limit
  retries once asking for a shorter summary, then keeps the truncated text with a marker;
* an answer that is not a usable summary is refused (:func:`check_summary`), so a server that
  ignores ``max_tokens`` or returns garbage cannot grow or corrupt the history;
* the summary can be written ahead of the trigger, in the background
  (:meth:`LLMSummary.summarize_ahead`, run by the controller), and swapped in when the trigger
  fires (``ctx.ahead``) with no model call on the hot path.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING

# LLM is needed at run time, not only for typing: the loader injects by resolved annotation.
from .._contract.protocols import LLM, SummaryAhead, has_context_window
from .._history.groups import tool_groups
from .._history.messages import ImagePart, Message, TextPart
from ..exceptions import (
    CompactionError,
    ContextTooLongError,
    LLMError,
    LLMRequiredError,
    SummaryNotSmallerError,
    SummaryRejectedError,
)
from ..kit import MAX_CHARS_PER_TOKEN, check_int, options_repr, pinned_indices
from ._summary_fit import fit_after_summary

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .._contract.protocols import CompactionContext, Completion, ToolSpec
    from .._tokens.counters import TokenCounter

__all__ = [
    "ALIGNED_SUMMARY_HEAD",
    "MAX_GARBAGE_FRACTION",
    "SUMMARIZER_SYSTEM",
    "SUMMARY_LENGTH_FACTOR",
    "SUMMARY_PREFIX",
    "SUMMARY_PROMPT",
    "LLMSummary",
    "check_summary",
    "is_summary",
]

logger = logging.getLogger(__name__)

SUMMARY_PREFIX = (
    "[ctxcompact] The earlier part of this conversation was compacted. Summary of it:\n\n"
)
"""The start of every summary message's text; how a later run recognizes an earlier summary."""

SUMMARIZER_SYSTEM = (
    "You compact the history of a conversation between a user and an AI agent that uses "
    "tools. You write a summary the agent will continue from as if it were its own memory. "
    "You only write the summary: never call tools, never continue the task."
)
"""The system prompt of the summarizer's request."""

_SUMMARY_BODY = """\
Cover, in this order of priority:
1. Current task state: what the user asked for (quote their requests and any feedback that \
changed them), what is being worked on right now and how far it has got.
2. Errors and how they were solved: exact error messages, their causes and the fixes that \
worked; approaches that failed and why.
3. Files and code changed: every file read, created or modified, with its path, what changed \
and why; short code snippets, signatures and commands that matter.
4. Decisions: design and technical choices and their reasons; constraints and preferences the \
user stated.
5. What is left to do: pending tasks, open questions and the next step.

Rules:
- Be specific: keep paths, names, identifiers, numbers, commands and error text exactly.
- Tool results are evidence: keep the facts they established, drop their bulk.
- If the conversation starts with an earlier summary, merge it in: keep what is still true, \
update what changed, drop what no longer matters. Do not nest or quote it whole.
- Leave out pleasantries, repetition and dead ends (keep their lesson).
- Plain text under the five headings above. No preamble, do not address the user."""
SUMMARY_PROMPT = (
    "The messages above are the older part of a conversation between a user and an AI agent "
    "that uses tools. The most recent messages are kept verbatim after your summary, and the "
    "user's first message (the task) and latest message verbatim before it; they are not "
    "shown here. Write a summary that lets the agent continue the work without the "
    "original messages.\n\n" + _SUMMARY_BODY
)
"""The default instructions, appended after the transcript of the messages to summarize."""

ALIGNED_SUMMARY_HEAD = (
    "[ctxcompact] Pause the task: this message is not from the user. Do not call tools and "
    "do not continue the work. {scope} is about to be replaced by a summary that you write "
    "now, and the agent will continue from it as if it were its own memory. Write a summary "
    "that lets the work go on without the original messages.\n\n"
)
"""How a cache-aligned request's instruction starts (``cache_aligned=True``); ``{scope}``
says what is replaced. The default prompt's priorities and rules follow it."""

_ALL_SO_FAR = (
    "Everything in this conversation so far but the user's first message (the task) and "
    "latest message, which stay verbatim before the summary,"
)
_BEFORE_LAST = (
    "Everything in this conversation before its last {kept} user and assistant messages "
    "(those stay verbatim after the summary) but the user's first message (the task) and "
    "latest message, which stay verbatim before it,"
)

SUMMARY_LENGTH_FACTOR = 2
"""A summary's text (without :data:`SUMMARY_PREFIX`) may cost at most this many times
``max_summary_tokens``, in the context's counter (which may count more than the model's
tokenizer: the heuristic overcounts English by up to ~30%); beyond, the server ignored
``max_tokens`` and the answer is refused."""

MAX_GARBAGE_FRACTION = 0.05
"""The largest share of a summary's characters that may be control characters (other than
tab and newlines), surrogates, private-use characters or U+FFFD."""

_GARBAGE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ue000-\uf8ff\ufffd]")

_TRUNCATED_MARKER = "\n\n[summary truncated: the summarizer reached its output limit]"
_SHORTER = (
    "\n\nYour previous summary was cut off at the output limit. Write it again, much "
    "shorter: under about {words} words, same priorities."
)
_MIN_ITEM_TOKENS = 48  # below this a cut item says nothing useful: omit old items instead
_SYSTEM_ROLES = ("system", "developer")
_EARLIER = "[earlier summary]"


class LLMSummary:
    """Replace the older messages with one summary written by an LLM.

    The last ``max_preserved_messages`` user/assistant messages and everything after the
    first of them are kept as they are (the very same objects); the cut moves earlier rather
    than split a tool-call group. Leading system messages stay first. The pinned messages
    before the cut are never summarized (:func:`~ctxcompact.kit.pinned_indices`: system
    messages, the first user message, which states the task, the newest user message, and
    what ``ctx.pin`` pins, each with the rest of its tool-call group): they stay verbatim,
    in order, right after the leading system messages. Everything else before the cut
    becomes one ``user`` message after them whose text starts with :data:`SUMMARY_PREFIX`
    (a user message, because Anthropic allows no system message mid-history). An earlier
    summary in the summarized part is merged into the new one, not nested.

    Failures keep the history: an LLM error propagates as its :class:`~ctxcompact.exceptions.
    LLMError` subclass, and an answer that is no usable summary raises
    :class:`~ctxcompact.exceptions.SummaryRejectedError` (the controller reports ``failed``
    with the reason). Refused: an empty answer; one that is not text (tool calls); one with no
    letter; one more than 5% control, surrogate, private-use or U+FFFD characters
    (:data:`MAX_GARBAGE_FRACTION`); one costing more than twice ``max_summary_tokens``
    (:data:`SUMMARY_LENGTH_FACTOR`: the server ignored ``max_tokens``); and a summary message
    that is not smaller, in ``ctx.token_counter`` tokens, than the messages it replaces.

    Args:
        llm: The summarizer. Injected by the loader (a cheaper compaction model), or taken
            from ``ctx.llm`` at run time when ``None``.
        max_preserved_messages: User/assistant messages kept verbatim at the end (>= 0).
        max_summary_tokens: The summarizer's ``max_tokens``; the prompt asks for fewer words.
            When the summarizer states its own window (``context_window``, see
            :class:`~ctxcompact.WindowedLLM`: ``[compaction.llm] context_window``
            or the model table), at most a quarter of that window is asked for.
        max_input_tokens: Budget of the summarizer's whole request (``None``: the
            summarizer's own window when it states one, else the context's
            ``max_context_size``, minus the summary's tokens), estimated with
            ``ctx.token_counter``. Oversized items are cut head + tail to fit it.
        prompt: The instructions placed after the transcript (default :data:`SUMMARY_PROMPT`).
        system_prompt: The summarizer's system prompt (default :data:`SUMMARIZER_SYSTEM`).
        cache_aligned: Send the live history itself, unchanged, plus one appended user
            instruction (:data:`ALIGNED_SUMMARY_HEAD`, then ``prompt``'s priorities), with no
            system prompt of the summarizer's and the agent's ``tools``: the request starts
            with the prefix the provider has cached from the agent's last call, so most of
            it is billed as a cache read. It pays off only when the summarizer *is* the
            agent's model (a cache belongs to one model) and the history is the request as
            sent (no per-request transform rewrote it). When the history plus the
            instruction do not fit the input budget (``max_input_tokens``, else the window
            minus ``max_summary_tokens``), when it ends with unanswered tool calls, when
            the model says it is too long, or when it calls a tool instead of answering, the
            normal transcript request is sent instead and a warning says why.
        tools: The agent's tool specs, sent with a cache-aligned request (a provider's
            cached prefix includes the tool definitions); ignored otherwise.
        summarize_at_trigger: When the trigger fires and no summary made ahead of time
            (``ctx.ahead``, see :meth:`summarize_ahead`) lines up with the history, write one
            then, while the agent waits (``True``); or do nothing (``False``) and leave the
            history to the next step of a pipeline or tier (a guard after it keeps the
            window) while the background summary catches up: the summarizer is then never
            awaited on the hot path. ``False`` needs summaries ahead of time (the
            controller's ``precompute_ratio``, on by default): without them this strategy
            never summarizes.
        fit_window: When the summary leaves the request over the window (the kept messages
            are too big on their own), or there is nothing to summarize, fit what it could
            not free as a triggered :class:`~ctxcompact.strategies.ContextGuard` would (the
            newest results cut head + tail, older kept steps dropped with a note; the
            summary is never dropped). ``False`` leaves that to the next step of a
            pipeline. With ``summarize_at_trigger=False`` too, the window is then kept
            without ever waiting for the summarizer. A tier calling :meth:`compact` with
            ``ahead_only=True`` gets no fit (its next tier fits).

    Example:
        >>> import asyncio
        >>> from ctxcompact import CompactionContext
        >>> from ctxcompact.testing import ScriptedLLM
        >>> h = [Message.user("fix calc.py"), Message.assistant("I read calc.py. " * 20),
        ...      Message.assistant("fixed"), Message.user("thanks"), Message.assistant("hi")]
        >>> ctx = CompactionContext(h, 1000, 8000, 1000, llm=ScriptedLLM("Bug fixed."))
        >>> [m.text.replace(SUMMARY_PREFIX, "<prefix>") for m in asyncio.run(
        ...     LLMSummary().compact(ctx))]  # the task stays, verbatim
        ['fix calc.py', '<prefix>Bug fixed.', 'thanks', 'hi']
    """

    def __init__(
        self,
        llm: LLM | None = None,
        *,
        max_preserved_messages: int = 2,
        max_summary_tokens: int = 4096,
        max_input_tokens: int | None = None,
        prompt: str = SUMMARY_PROMPT,
        system_prompt: str = SUMMARIZER_SYSTEM,
        cache_aligned: bool = False,
        tools: Sequence[ToolSpec] | None = None,
        summarize_at_trigger: bool = True,
        fit_window: bool = True,
    ) -> None:
        check_int("max_preserved_messages", max_preserved_messages)
        check_int("max_summary_tokens", max_summary_tokens, minimum=16)
        if max_input_tokens is not None:
            check_int("max_input_tokens", max_input_tokens, minimum=1)
        self.llm = llm
        self.max_preserved_messages = max_preserved_messages
        self.max_summary_tokens = max_summary_tokens
        self.max_input_tokens = max_input_tokens
        self.prompt = prompt
        self.system_prompt = system_prompt
        self.cache_aligned = bool(cache_aligned)
        self.tools = None if tools is None else list(tools)
        self.summarize_at_trigger = bool(summarize_at_trigger)
        self.fit_window = bool(fit_window)

    def __repr__(self) -> str:
        return options_repr(self)

    def needs_llm(self) -> bool:
        """True when no LLM was given: it must come from the context (see ``NeedsLLM``)."""
        return self.llm is None

    async def compact(
        self,
        ctx: CompactionContext,
        *,
        live: Sequence[Message] | None = None,
        ahead_only: bool = False,
    ) -> Sequence[Message] | None:
        """Summarize the old part of ``ctx.history``; ``None`` when there is none.

        ``live``: the request the agent last sent, when ``ctx.history`` is a rewrite of it
        with the same messages at the same positions (hidden results); a cache-aligned
        request sends it instead of ``ctx.history`` (the provider cached it).

        With a summary made ahead that lines up with ``ctx.history`` (``ctx.ahead``), that
        summary is put in place instead (see :meth:`summarize_ahead`). ``ahead_only``: never
        call the summarizer now, only put a summary made ahead in place (``None`` when
        there is none): for a tiered strategy whose next tier keeps the window without the
        wait (``summarize_at_trigger=False`` always does this).

        Otherwise, with ``fit_window``, what the summary could not free is fitted to the
        window (:func:`~ctxcompact.strategies._summary_fit.fit_after_summary`).
        """
        out = await self._compact(
            ctx, live=live, ahead_only=ahead_only or not self.summarize_at_trigger
        )
        if ahead_only or not self.fit_window:  # a tier's next step fits, not this one
            return out
        output = ctx.history if out is None else out
        fitted = fit_after_summary(ctx, output, is_summary, live=live)
        return None if fitted is ctx.history else fitted

    async def _compact(
        self, ctx: CompactionContext, *, live: Sequence[Message] | None, ahead_only: bool
    ) -> Sequence[Message] | None:
        llm = self._llm(ctx)
        history = ctx.history
        head = _leading_systems(history)
        cut = self.cut_index(history)
        if cut <= head:
            return None
        ahead = ctx.ahead
        if ahead is not None and self._fits(ahead, history, head, cut):
            if ahead_only:
                return self._swap_in(ctx, ahead, head, live)
            return await self._put_ahead(ctx, ahead, head, cut, live)
        if ahead_only:
            return None
        kept, to_summarize = _split(history, head, cut, ctx.pin, live)
        if not to_summarize or (len(to_summarize) == 1 and is_summary(to_summarize[0])):
            return None
        summary = await self._summary_of(llm, ctx, to_summarize, live)
        return [*history[:head], *kept, summary, *history[cut:]]

    def _llm(self, ctx: CompactionContext) -> LLM:
        llm = self.llm if self.llm is not None else ctx.llm
        if llm is None:
            raise LLMRequiredError(
                "LLMSummary needs an LLM to summarize with: pass one (LLMSummary(llm)), give "
                "the controller or the agent llm=..., or set [compaction.llm] in the config"
            )
        return llm

    async def _summary_of(
        self,
        llm: LLM,
        ctx: CompactionContext,
        to_summarize: Sequence[Message],
        live: Sequence[Message] | None,
        *,
        aligned: bool = True,
    ) -> Message:
        """The summary message of ``to_summarize``, checked (:func:`check_summary`);
        ``aligned=False``: never as a cache-aligned request (which summarizes everything
        before the kept messages, not ``to_summarize``)."""
        text = None
        if self.cache_aligned and aligned:
            text = await self._summarize_aligned(llm, ctx, ctx.history if live is None else live)
        if text is None:
            text = await self._summarize(llm, _render(to_summarize), ctx)
        summary = Message.user(SUMMARY_PREFIX + text)
        check_summary(
            text,
            summary,
            to_summarize,
            ctx.token_counter,
            max_tokens=SUMMARY_LENGTH_FACTOR * self.max_summary_tokens,
        )
        return summary

    # -- ahead of time ---------------------------------------------------------------------------

    async def summarize_ahead(
        self, ctx: CompactionContext, *, live: Sequence[Message] | None = None
    ) -> SummaryAhead | None:
        """The summary :meth:`compact` would put in place for ``ctx.history``, made now, for
        the controller to hand back when the trigger fires (``ctx.ahead``); ``None`` when
        there is nothing to summarize. Refused summaries raise as in :meth:`compact`.

        Like every summary of this strategy it is incremental: a history that starts with
        an earlier summary sends that summary and the messages after it, never the messages
        it replaced. ``live``: as in :meth:`compact`.
        """
        llm = self._llm(ctx)
        history = ctx.history
        head = _leading_systems(history)
        cut = self.cut_index(history)
        if cut <= head:
            return None
        to_summarize = _split(history, head, cut, ctx.pin, live)[1]
        if not to_summarize or (len(to_summarize) == 1 and is_summary(to_summarize[0])):
            return None
        summary = await self._summary_of(llm, ctx, to_summarize, live)
        return SummaryAhead(head, cut, summary, len(history))

    @staticmethod
    def _fits(ahead: SummaryAhead, history: Sequence[Message], head: int, cut: int) -> bool:
        """Whether ``ahead`` lines up with ``history``: made for the same leading systems,
        for a part that is still older than what is kept, on a history of this length."""
        return ahead.history_length == len(history) and ahead.start == head and ahead.end <= cut

    def _swap_in(
        self,
        ctx: CompactionContext,
        ahead: SummaryAhead,
        head: int,
        live: Sequence[Message] | None,
    ) -> list[Message]:
        """``ctx.history`` with the summary made ahead in place, and nothing else changed."""
        return self._swapped(ctx, ahead, head, live)[0]

    @staticmethod
    def _swapped(
        ctx: CompactionContext,
        ahead: SummaryAhead,
        head: int,
        live: Sequence[Message] | None,
    ) -> tuple[list[Message], int]:
        """The history with the summary made ahead in place, and its estimated tokens. The
        messages kept verbatim before it are those kept when it was made (:func:`_split`
        reads the history up to its end only, which has not changed since).

        Raises:
            SummaryNotSmallerError: The summary costs at least what it replaces.
        """
        history, counter = ctx.history, ctx.token_counter
        kept, replaced = _split(history, head, ahead.end, ctx.pin, live)
        tokens = counter.count_message(ahead.summary)
        before = sum(counter.count_message(m) for m in replaced)
        if tokens >= before:
            raise SummaryNotSmallerError(
                f"LLMSummary: the summary made ahead of time (~{tokens} tokens) would replace "
                f"{len(replaced)} message(s) of {before}; the history is kept",
                tokens_before=before,
                tokens_after=tokens,
            )
        swapped = [*history[:head], *kept, ahead.summary, *history[ahead.end :]]
        return swapped, ctx.token_count - before + tokens

    async def _put_ahead(
        self,
        ctx: CompactionContext,
        ahead: SummaryAhead,
        head: int,
        cut: int,
        live: Sequence[Message] | None,
    ) -> list[Message]:
        """``ctx.history`` with the summary made ahead in place of what it stands for.

        The messages that came after it stay whole. When the result would still be at the
        trigger (much came in since, or the summary freed little), the part of those older
        than the kept messages is summarized now, alone, into a second summary message
        after the first (the pinned messages of that part between them, verbatim): the one
        case where the summarizer is called on the hot path,
        and it reads only what came in since. Should that call fail, the result with the
        summary made ahead stands (smaller than the history; the next trigger tries again).

        Raises:
            SummaryNotSmallerError: The summary made ahead costs at least what it replaces.
        """
        history = ctx.history
        swapped, estimate = self._swapped(ctx, ahead, head, live)
        first = swapped[: len(swapped) - (len(history) - ahead.end)]
        kept, rest = _split(history, ahead.end, cut, ctx.pin, live)
        if estimate + ctx.reserved_context_size < ctx.max_context_size or not rest:
            return [*first, *history[ahead.end :]]
        logger.info(
            "the summary made ahead leaves ~%d tokens (+%d reserved >= %d): summarizing the "
            "%d message(s) that came after it now",
            estimate,
            ctx.reserved_context_size,
            ctx.max_context_size,
            len(rest),
        )
        try:
            second = await self._summary_of(self._llm(ctx), ctx, rest, None, aligned=False)
        except (LLMError, SummaryRejectedError) as exc:
            logger.warning(
                "summarizing after the summary made ahead failed (%s); keeping it alone",
                type(exc).__name__,
            )
            logger.debug("summarizing after the summary made ahead failed: %s", exc)
            return [*first, *history[ahead.end :]]
        return [*first, *kept, second, *history[cut:]]

    def cut_index(self, history: Sequence[Message]) -> int:
        """Index of the first preserved message (``len(history)`` keeps none).

        Returns 0 when fewer than ``max_preserved_messages`` user/assistant messages exist.
        """
        n = len(history)
        cut = n
        if self.max_preserved_messages > 0:
            seen = 0
            for i in range(n - 1, -1, -1):
                if history[i].role in ("user", "assistant"):
                    seen += 1
                    if seen == self.max_preserved_messages:
                        cut = i
                        break
            else:
                return 0
        elif n and history[-1].tool_calls:
            cut = n - 1  # calls still waiting for results: their results would be orphans
        return _safe_cut(history, cut)

    # -- the summarizer call -------------------------------------------------------------------

    def _window(self, llm: LLM) -> int | None:
        return llm.context_window if has_context_window(llm) else None

    def output_tokens(self, llm: LLM) -> int:
        """The summary's ``max_tokens``: ``max_summary_tokens``, at most a quarter of the
        summarizer's own window when it states one."""
        window = self._window(llm)
        if window is None:
            return self.max_summary_tokens
        return max(16, min(self.max_summary_tokens, window // 4))

    async def _summarize(self, llm: LLM, items: list[str], ctx: CompactionContext) -> str:
        counter = ctx.token_counter
        out = self.output_tokens(llm)
        window = self._window(llm) or ctx.max_context_size
        budget = self.max_input_tokens or (window - out)
        words = max(16, int(out * 0.6))
        instructions = f"{self.prompt}\n\nKeep the summary under about {words} words."
        fixed = counter.count(
            [Message.system(self.system_prompt), Message.user(instructions + _SHORTER)]
        )
        room = budget - fixed
        if room < _MIN_ITEM_TOKENS:
            raise CompactionError(
                f"LLMSummary: an input budget of {budget} tokens leaves no room for the "
                f"transcript (the prompt alone is ~{fixed}); raise max_input_tokens"
            )
        fitted = _fit(items, room, counter)
        request = _request(fitted, instructions)
        try:
            completion = await self._complete(llm, request, out)
        except ContextTooLongError as exc:
            # Half of what was sent, not of the budget: the model's real window may be smaller.
            sent = sum(counter.count_message(Message.user(t)) for t in fitted)
            # The type only: a provider's error text can echo the transcript.
            logger.warning(
                "summarizer input too long (%s); retrying with half the input", type(exc).__name__
            )
            logger.debug("summarizer input too long: %s", exc)
            request = _request(_fit(items, max(_MIN_ITEM_TOKENS, sent // 2), counter), instructions)
            completion = await self._complete(llm, request, out)
        text = _answer_text(completion)
        if completion.finish_reason != "length":
            return _nonempty(text, completion)
        logger.info("summary cut at the output limit; asking for a shorter one")
        shorter = request[0].text + _SHORTER.format(words=max(8, words // 2))
        retry = await self._complete(llm, [Message.user(shorter)], out)
        retry_text = _answer_text(retry)
        if retry.finish_reason != "length":
            return _nonempty(retry_text, retry)
        return _nonempty(retry_text or text, retry) + _TRUNCATED_MARKER

    async def _summarize_aligned(
        self, llm: LLM, ctx: CompactionContext, history: Sequence[Message]
    ) -> str | None:
        """The summary asked as the continuation of the live ``history``; ``None`` (after a
        warning) when the normal request must be sent instead."""
        out = self.output_tokens(llm)
        budget = self.max_input_tokens or ((self._window(llm) or ctx.max_context_size) - out)
        words = max(16, int(out * 0.6))
        kept = self.max_preserved_messages
        scope = _BEFORE_LAST.format(kept=kept) if kept else _ALL_SO_FAR
        body = _SUMMARY_BODY if self.prompt == SUMMARY_PROMPT else self.prompt
        instructions = (
            ALIGNED_SUMMARY_HEAD.format(scope=scope)
            + f"{body}\n\nKeep the summary under about {words} words."
        )
        request = [*history, Message.user(instructions)]
        # Its own tools when given, else the live request's (the agent passes them).
        tools = self.tools if self.tools is not None else ctx.tools
        if history and history[-1].role == "assistant" and history[-1].tool_calls:
            reason = "the history ends with tool calls that have no results yet"
        elif (tokens := ctx.token_counter.count(request)) > budget:
            reason = (
                f"the live history and the instruction (~{tokens} tokens) exceed the "
                f"summarizer's input budget of {budget}"
            )
        else:
            try:
                completion = await self._complete(llm, request, out, aligned=True, tools=tools)
            except ContextTooLongError:
                reason = "the model refused the live history as too long"
            else:
                text = _answer_text(completion)
                if not text and completion.message.tool_calls:
                    reason = "the model called tools instead of writing the summary"
                elif completion.finish_reason != "length":
                    return _nonempty(text, completion)
                else:
                    logger.info("summary cut at the output limit; asking for a shorter one")
                    shorter = instructions + _SHORTER.format(words=max(8, words // 2))
                    retry = await self._complete(
                        llm, [*history, Message.user(shorter)], out, aligned=True, tools=tools
                    )
                    retry_text = _answer_text(retry)
                    if retry.finish_reason != "length":
                        return _nonempty(retry_text, retry)
                    return _nonempty(retry_text or text, retry) + _TRUNCATED_MARKER
        logger.warning(
            "cache-aligned summary not possible, sending a transcript instead: %s", reason
        )
        return None

    async def _complete(
        self,
        llm: LLM,
        messages: list[Message],
        out: int,
        *,
        aligned: bool = False,
        tools: Sequence[ToolSpec] | None = None,
    ) -> Completion:
        if aligned:  # the live request's own system messages and tools: its cached prefix
            return await llm.complete(messages, tools=tools, max_tokens=out)
        return await llm.complete(messages, system=self.system_prompt, max_tokens=out)


# -- choosing the cut --------------------------------------------------------------------------


def _leading_systems(history: Sequence[Message]) -> int:
    i = 0
    while i < len(history) and history[i].role in _SYSTEM_ROLES:
        i += 1
    return i


def _split(
    history: Sequence[Message],
    start: int,
    end: int,
    pin: Callable[[Message], bool] | None,
    live: Sequence[Message] | None = None,
) -> tuple[list[Message], list[Message]]:
    """``history[start:end]`` split into what stays verbatim before the summary and what the
    summary stands for, both in order.

    Kept: system messages and the messages pinned in ``history[:end]``
    (:func:`~ctxcompact.kit.pinned_indices`: the first user message, the last user message
    before ``end``, which is the newest one whenever the newest is in the range, and the
    user's ``pin``), each with the rest of its tool-call group, so a kept result keeps its
    call. Only ``history[:end]`` is read, so a summary made ahead of time keeps, when it is
    put in place on a longer history, exactly what it kept when it was made. ``live``: the
    history as the agent sent it, when ``history`` is a rewrite of it at the same positions
    (hidden results): a pin that matches a result's text is read there.
    """
    source = live if live is not None and len(live) == len(history) else history
    keep = {i for i in pinned_indices(source[:end], pin) if i >= start}
    if keep:
        for group in tool_groups(history[:end]):
            members = (group.call_index, *group.result_indices)
            if any(k in keep for k in members):
                keep.update(members)
    kept = [history[i] for i in range(start, end) if i in keep]
    summarized = [history[i] for i in range(start, end) if i not in keep]
    return kept, summarized


def _safe_cut(history: Sequence[Message], cut: int) -> int:
    """Move ``cut`` earlier until no tool call in the summarized part has a result kept.

    The cut sits on a user or assistant message, so it never falls inside a positional group
    (an assistant message and the tool messages right after it). In a malformed history a
    result can sit apart from its call, though: such a stray result in the kept part pulls
    the cut back to the nearest earlier message calling its id, so compaction never turns it
    into an orphan.
    """
    while True:
        pulled = _pull_back_for_strays(history, cut)
        if pulled == cut:
            return cut
        cut = pulled


def _pull_back_for_strays(history: Sequence[Message], cut: int) -> int:
    group_ids: set[str] = set()  # ids called by the group the current tool run follows
    for i in range(cut, len(history)):
        msg = history[i]
        if msg.role == "assistant" and msg.tool_calls:
            group_ids = set(msg.tool_call_ids)
        elif msg.role != "tool":
            group_ids = set()
        elif msg.tool_call_id is not None and msg.tool_call_id not in group_ids:
            for j in range(min(i, cut) - 1, -1, -1):
                if msg.tool_call_id in history[j].tool_call_ids:
                    return j
    return cut


# -- what the summarizer reads -----------------------------------------------------------------


def is_summary(message: Message) -> bool:
    """Whether ``message`` is a summary this strategy wrote (:data:`SUMMARY_PREFIX`)."""
    return message.role == "user" and message.text.startswith(SUMMARY_PREFIX)


def _render(messages: Sequence[Message]) -> list[str]:
    """One text item per message: role, text, tool calls and, for results, the tool name."""
    names: dict[int, str] = {}
    for group in tool_groups(messages):
        by_id = {c.id: c.name for c in messages[group.call_index].tool_calls or ()}
        for i in group.result_indices:
            names[i] = by_id.get(messages[i].tool_call_id or "", "?")
    items: list[str] = []
    for i, msg in enumerate(messages):
        if is_summary(msg):
            items.append(f"{_EARLIER}\n{msg.text[len(SUMMARY_PREFIX) :]}")
            continue
        if msg.role == "tool":
            error = ", error" if msg.is_error else ""
            label = f"tool result of {names.get(i, '?')} (id {msg.tool_call_id}{error})"
        else:
            label = msg.role
        lines = [f"[{label}]"]
        body = _content_text(msg)
        if body:
            lines.append(body)
        lines.extend(
            f"-> call {c.name} (id {c.id}) with arguments: {c.arguments}"
            for c in msg.tool_calls or ()
        )
        items.append("\n".join(lines))
    return items


def _content_text(msg: Message) -> str:
    content = msg.content
    if content is None or isinstance(content, str):
        return content or ""
    out: list[str] = []
    for part in content:
        if isinstance(part, TextPart):
            out.append(part.text)
        elif isinstance(part, ImagePart):
            out.append("[image]")
        else:
            out.append(f"[{part.type} block]")
    return "\n".join(out)


def _fit(items: list[str], budget: int, counter: TokenCounter) -> list[str]:
    """Cut the largest items head + tail (water-filling) until the total fits ``budget``.

    When even items of ``_MIN_ITEM_TOKENS`` do not fit, the oldest are left out with a note.
    """
    sizes = [counter.count_message(Message.user(t)) for t in items]
    if sum(sizes) <= budget:
        return items
    cap = _water_level(sizes, budget)
    # The cut marker and rounding cost a few tokens: aim a little below the cap.
    target = max(_MIN_ITEM_TOKENS // 2, cap - 16)
    fitted = [
        _head_tail(t, int(len(t) * target / s)) if s > cap else t
        for t, s in zip(items, sizes, strict=True)
    ]
    sizes = [counter.count_message(Message.user(t)) for t in fitted]
    # An earlier summary stands for everything before it: the last thing to leave out.
    first = 1 if fitted and fitted[0].startswith(_EARLIER) else 0
    total, start = sum(sizes), first
    while total > budget and start < len(fitted) - 1:
        total -= sizes[start]
        start += 1
    if start == first:
        return fitted
    note = f"[{start - first} older messages left out: too long for the summarizer]"
    return [*fitted[:first], note, *fitted[start:]]


def _water_level(sizes: list[int], budget: int) -> int:
    """The largest cap ``c`` with ``sum(min(s, c)) <= budget`` (at least ``_MIN_ITEM_TOKENS``)."""
    remaining, left = budget, len(sizes)
    for size in sorted(sizes):
        if size * left > remaining:
            return max(_MIN_ITEM_TOKENS, remaining // left)
        remaining -= size
        left -= 1
    return max(sizes)


def _head_tail(text: str, keep: int) -> str:
    cut = len(text) - keep
    if cut <= 0:
        return text
    half = keep // 2
    return f"{text[:half]}\n[... {cut} characters cut ...]\n{text[len(text) - (keep - half) :]}"


def _request(items: list[str], instructions: str) -> list[Message]:
    transcript = "\n\n".join(items)
    return [Message.user(f"{transcript}\n\n---\n\n{instructions}")]


# -- reading the answer ------------------------------------------------------------------------

_SUMMARY_TAG = re.compile(r"<summary>(.*?)(?:</summary>|$)", re.DOTALL)


def _without_analysis(text: str) -> str:
    """``text`` without its ``<analysis>...</analysis>`` blocks (an unclosed one stays).

    What ``re.sub(r"<analysis>.*?</analysis>", "", text, flags=re.DOTALL)`` did, by
    ``str.find``: the regex rescanned the rest of the text from every unclosed
    ``<analysis>``, O(n^2) on a model's output of n characters.
    """
    out, start = [], 0
    while (open_at := text.find("<analysis>", start)) >= 0:
        close_at = text.find("</analysis>", open_at + len("<analysis>"))
        if close_at < 0:
            break  # no close after this one: none after any later one either
        out.append(text[start:open_at])
        start = close_at + len("</analysis>")
    out.append(text[start:])
    return "".join(out)


def _answer_text(completion: Completion) -> str:
    """The summary text: thinking parts dropped, ``<analysis>`` dropped, prefix not repeated."""
    text = completion.message.text
    match = _SUMMARY_TAG.search(text)
    text = match.group(1) if match else _without_analysis(text)
    text = text.strip()
    while text.startswith(SUMMARY_PREFIX.strip()):
        text = text[len(SUMMARY_PREFIX.strip()) :].strip()
    return text


def _nonempty(text: str, completion: Completion) -> str:
    if not text:
        if completion.message.tool_calls:
            raise SummaryRejectedError(
                "LLMSummary: the summarizer called tools instead of writing a summary "
                f"({len(completion.message.tool_calls)} call(s)); the history is kept",
                reason="not_text",
            )
        raise SummaryRejectedError(
            "LLMSummary: the summarizer returned no summary text "
            f"(finish_reason={completion.finish_reason!r}); the history is kept",
            reason="empty",
        )
    return text


def check_summary(
    text: str,
    summary: Message,
    replaced: Sequence[Message],
    counter: TokenCounter,
    *,
    max_tokens: int,
) -> None:
    """Refuse a summary that is no usable replacement for ``replaced``.

    ``text`` is the summarizer's answer and ``summary`` the message built from it. The error
    says why with sizes only, never the text (it may be anything, even a leaked secret).

    Raises:
        SummaryRejectedError: ``reason`` is ``not_text`` (not a string), ``empty``,
            ``too_long`` (the text, without the prefix, over ``max_tokens`` in ``counter``
            tokens), ``no_letters``,
            ``garbage`` (over :data:`MAX_GARBAGE_FRACTION` control or similar characters)
            or ``not_smaller`` (the summary message costs at least what it replaces: then a
            :class:`~ctxcompact.exceptions.SummaryNotSmallerError`, also a
            :class:`~ctxcompact.exceptions.NotSmallerError`).
    """

    def refuse(reason: str, detail: str) -> SummaryRejectedError:
        return SummaryRejectedError(
            f"LLMSummary: summary refused ({reason}): {detail}; the history is kept",
            reason=reason,
        )

    if not isinstance(text, str):
        raise refuse("not_text", f"the answer is a {type(text).__name__}, not text")
    if not text.strip():
        raise refuse("empty", "the answer has no text")
    if len(text) > MAX_CHARS_PER_TOKEN * max_tokens:  # too long, uncounted
        raise refuse("too_long", f"{len(text)} characters, the limit is ~{max_tokens} tokens")
    # What the model wrote: without our prefix, our truncation note and the message overhead.
    written = counter.count_message(Message.user(text.removesuffix(_TRUNCATED_MARKER)))
    written -= counter.count_message(Message.user(""))
    if written > max_tokens:
        raise refuse("too_long", f"{written} tokens written, over the limit of {max_tokens}")
    if not any(ch.isalpha() for ch in text):
        raise refuse("no_letters", f"{len(text)} characters and not one letter")
    garbage = len(_GARBAGE.findall(text))
    if garbage > MAX_GARBAGE_FRACTION * len(text):
        raise refuse(
            "garbage", f"{garbage} of {len(text)} characters are control or invalid characters"
        )
    tokens = counter.count_message(summary)
    before = sum(counter.count_message(m) for m in replaced)
    if tokens >= before:
        raise SummaryNotSmallerError(
            f"LLMSummary: summary refused (not_smaller): {tokens} tokens would replace "
            f"{len(replaced)} message(s) of {before}; the history is kept",
            tokens_before=before,
            tokens_after=tokens,
        )
