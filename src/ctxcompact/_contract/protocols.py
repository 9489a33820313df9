"""The contracts outsiders implement or call: strategies, LLMs, token counters (KLIP-13)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeGuard, runtime_checkable

from .._history.messages import Message
from .._tokens.counters import HeuristicTokenCounter, TokenCounter

__all__ = [
    "LLM",
    "CompactionContext",
    "CompactionOutput",
    "CompactionStrategy",
    "Completion",
    "Dependencies",
    "NeedsLLM",
    "SummarizesAhead",
    "SummaryAhead",
    "ToolSpec",
    "Usage",
    "WindowedLLM",
    "has_context_window",
    "needs_llm",
    "summarizes_ahead",
]

CompactionOutput = Sequence[Message] | None
"""What a strategy returns: the rewritten history, or ``None`` for no change."""


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage reported by a provider for one model call.

    ``input_tokens`` is the whole prompt, cached parts included (adapters normalise
    Anthropic's split counts into this); the cache counts are the parts of it that were read
    from or written to the provider's prompt cache.

    Example:
        >>> Usage(input_tokens=1200, output_tokens=80, cache_read_tokens=1000).total_tokens
        1280
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion: the context the next call starts from."""
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True, slots=True)
class Completion:
    """One model answer.

    Attributes:
        message: The assistant message (text and/or tool calls).
        usage: Token usage, when the provider reported it.
        finish_reason: ``stop``, ``length``, ``tool_calls``, ``content_filter``, or the
            provider's own word when it is none of these.

    Example:
        >>> Completion(Message.assistant("hi")).finish_reason
        'stop'
    """

    message: Message
    usage: Usage | None = None
    finish_reason: str = "stop"


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool the model may call: a name, a description and a JSON schema of its arguments.

    Example:
        >>> ToolSpec("ls", "List files", {"type": "object", "properties": {}}).name
        'ls'
    """

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )


@runtime_checkable
class LLM(Protocol):
    """A chat model. Adapters for the official SDKs live in :mod:`ctxcompact.llm`.

    One method: answer a history with a :class:`Completion`. Summarizing strategies call it
    (as ``ctx.llm`` or their own), and so does :class:`~ctxcompact.Agent`. Scripted answers
    for tests: :class:`ctxcompact.testing.ScriptedLLM`.

    Example:
        >>> import asyncio
        >>> class Echo:
        ...     "Answers with the last message's text: a model of one's own."
        ...     async def complete(self, messages, *, system=None, tools=None, max_tokens=None):
        ...         return Completion(Message.assistant(messages[-1].text), Usage(3, 1))
        >>> isinstance(Echo(), LLM)
        True
        >>> asyncio.run(Echo().complete([Message.user("ping")])).message.text
        'ping'
    """

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        system: str | None = None,
        tools: Sequence[ToolSpec] | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        """Answer ``messages`` (a history that may start with system messages)."""
        ...


@runtime_checkable
class WindowedLLM(Protocol):
    """An optional ability of an :class:`LLM`: it knows its own context window.

    A summarizer reads it to bound its request and its answer by the summarizer model's
    window rather than the agent's (a small local summarizer has a much smaller one). The
    adapters :func:`ctxcompact.llm.build_llm` makes carry ``[compaction.llm] context_window``,
    else the model table's window for their model.

    Example:
        >>> class Local:
        ...     context_window = 2048
        ...     async def complete(self, messages, **kw): ...
        >>> has_context_window(Local())
        True
    """

    context_window: int | None


def has_context_window(llm: object) -> TypeGuard[WindowedLLM]:
    """Whether ``llm`` states its context window (an ``int``; ``None`` means unknown)."""
    window = getattr(llm, "context_window", None)
    return isinstance(window, int) and not isinstance(window, bool) and window > 0


@runtime_checkable
class NeedsLLM(Protocol):
    """An optional ability of a strategy: it can say, before any run, that it needs an LLM.

    The composition root (:func:`ctxcompact.wire`) and the command line ask it when
    no LLM is offered, so a summarizing strategy without one fails at setup rather than at
    its first compaction.

    Example:
        >>> class Summarizer:
        ...     def needs_llm(self) -> bool: return True
        ...     async def compact(self, ctx): ...
        >>> needs_llm(Summarizer())
        True
    """

    def needs_llm(self) -> bool:
        """True when running needs an LLM from the context (none of its own)."""
        ...


def needs_llm(strategy: object) -> bool:
    """Whether ``strategy`` says it needs an LLM it was not given (see :class:`NeedsLLM`)."""
    return isinstance(strategy, NeedsLLM) and strategy.needs_llm()


@dataclass(frozen=True, slots=True)
class SummaryAhead:
    """A summary made ahead of the trigger, in the background, of the start of a history.

    It stands for ``history[start:end]`` of the history it was made from (system messages
    among those are kept, before it); the messages from ``end`` on stay as they are. The
    controller hands it to the run that the trigger starts (``CompactionContext.ahead``) only
    while the conversation still starts with the very messages it was made from, and sets
    ``history_length`` to the length of the history that run gets: a strategy (or a tier of
    one) uses it only on a history of that length, whose positions line up with it.

    Attributes:
        start: Index of the first message it replaces (after the leading system messages).
        end: Index after the last message it replaces.
        summary: The message that stands for them.
        history_length: The length of the history the run was given (the controller's).

    Example:
        >>> ahead = SummaryAhead(1, 5, Message.user("[summary] the bug was in parse()"), 9)
        >>> ahead.end - ahead.start
        4
    """

    start: int
    end: int
    summary: Message
    history_length: int


@dataclass(frozen=True, slots=True)
class CompactionContext:
    """Everything a strategy may look at when it runs (KLIP-13, plus a token counter).

    Attributes:
        history: The history to rewrite. Never mutate it.
        token_count: The current context size in tokens, as the controller counts it.
        max_context_size: The model's window in tokens.
        reserved_context_size: Tokens kept free for the answer and the next tool results.
        llm: The model to summarize with, when there is one.
        token_counter: Estimates tokens of messages, for strategies that budget.
        max_output_tokens: The answer budget (``max_tokens``) of the request being prepared,
            when known: per-request transforms that trim to the window keep it free.
        tools: The tools the live request offers, when known: a cache-aligned summary sends
            them so the provider reads its cached prefix.
        ahead: A summary made ahead of this run, in the background, of the start of
            ``history`` (:class:`SummaryAhead`), when the controller has one: a summarizing
            strategy puts it in place instead of calling its model now.
        recall: The controller keeps what the rewrite removes and its markers name the
            recall tool: a strategy that budgets counts its markers in their recall forms
            (:mod:`ctxcompact.kit`'s ``truncation_marker``, ``drop_note``), which the
            controller then fills with the real handles.
        pin: The user's pins (``pin_patterns``, a predicate): ``message -> bool``. System
            messages and the first and newest user messages are pinned whatever it says;
            :func:`ctxcompact.kit.pinned_indices` gives them all. No built-in strategy drops,
            hides or summarises a pinned message away.

    Example:
        >>> ctx = CompactionContext([Message.user("hi")], 10, 1000, 100)
        >>> ctx.token_counter.count(ctx.history) > 0
        True
    """

    history: Sequence[Message]
    token_count: int
    max_context_size: int
    reserved_context_size: int
    llm: LLM | None = None
    token_counter: TokenCounter = field(default_factory=HeuristicTokenCounter)
    max_output_tokens: int | None = None
    tools: Sequence[ToolSpec] | None = None
    ahead: SummaryAhead | None = None
    recall: bool = False
    pin: Callable[[Message], bool] | None = None


@runtime_checkable
class SummarizesAhead(Protocol):
    """An optional ability of a strategy: it can make its summary before the trigger fires.

    When the conversation reaches ``precompute_ratio`` of the trigger, the controller runs
    :meth:`summarize_ahead` in the background (an asyncio task of the conversation's state),
    while the agent goes on with the history as it is, so the prompt cache holds; when the
    trigger fires, it hands the result to :meth:`CompactionStrategy.compact` as
    ``ctx.ahead``, and the strategy swaps it in without waiting for its model. The history
    ``ctx`` holds is the one it will compact later, minus what comes in meanwhile.

    Example:
        >>> from ctxcompact.strategies import LLMSummary, ToolResultHiding
        >>> summarizes_ahead(LLMSummary()), summarizes_ahead(ToolResultHiding())
        (True, False)
    """

    async def summarize_ahead(self, ctx: CompactionContext) -> SummaryAhead | None:
        """The summary the next compaction of ``ctx.history`` would put in place, made now;
        ``None`` when none would be needed or there is nothing to summarize."""
        ...


def summarizes_ahead(strategy: object) -> TypeGuard[SummarizesAhead]:
    """Whether ``strategy`` can make its summary ahead of time (see :class:`SummarizesAhead`)."""
    return isinstance(strategy, SummarizesAhead)


@runtime_checkable
class CompactionStrategy(Protocol):
    """How to rewrite a history. *When* is the controller's business, not the strategy's.

    A strategy returns a new sequence (reusing unchanged messages) or ``None`` for no
    change; it never mutates ``ctx.history``, keeps causal order and keeps tool calls paired
    with their results. Its keyword-only constructor parameters are its options
    (``[compaction.params]``); helpers the built-ins are made of are in :mod:`ctxcompact.kit`.

    Example:
        >>> import asyncio
        >>> from ctxcompact import ToolCall
        >>> class ElideLongResults:
        ...     "Replaces tool results over 100 characters with a short text."
        ...     async def compact(self, ctx):
        ...         out = [m.replace(content="[elided]") if m.role == "tool"
        ...                and len(m.text) > 100 else m for m in ctx.history]
        ...         changed = any(a is not b for a, b in zip(out, ctx.history))
        ...         return out if changed else None
        >>> cat = ToolCall(id="c1", name="cat", arguments="{}")
        >>> history = [Message.user("read it"), Message.assistant(None, tool_calls=[cat]),
        ...            Message.tool("c1", "x" * 500)]
        >>> isinstance(ElideLongResults(), CompactionStrategy)
        True
        >>> ctx = CompactionContext(history, token_count=200, max_context_size=300,
        ...                         reserved_context_size=100)
        >>> out = asyncio.run(ElideLongResults().compact(ctx))
        >>> out[2].text, out[2].tool_call_id, len(history[2].text)
        ('[elided]', 'c1', 500)
    """

    async def compact(self, ctx: CompactionContext) -> CompactionOutput:
        """Rewrite ``ctx.history``, or return ``None`` when there is nothing to do."""
        ...


class Dependencies(Mapping[type, object]):
    """Everything the loader offered a strategy, for strategies that load others.

    A keyword-only constructor parameter annotated ``Dependencies`` is not a param: the
    loader fills it with the whole offer, so a composite (``Pipeline``) can load its steps
    with the same LLM, token counter and config it was offered.

    Example:
        >>> from ctxcompact import HeuristicTokenCounter, TokenCounter
        >>> offer = Dependencies({TokenCounter: HeuristicTokenCounter()})
        >>> TokenCounter in offer, len(offer)
        (True, 1)
    """

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[type, object] | None = None) -> None:
        self._items: dict[type, object] = dict(items or {})

    def __getitem__(self, key: type) -> object:
        return self._items[key]

    def __iter__(self) -> Iterator[type]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        names = ", ".join(getattr(k, "__qualname__", str(k)) for k in self._items)
        return f"Dependencies({names})"
