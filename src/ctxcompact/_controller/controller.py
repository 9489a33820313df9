"""The trigger controller: *when* to compact, and a safe run of the strategy that says *how*.

Results are returned, never left on the controller: :meth:`CompactionController.compact`
gives a :class:`CompactionResult`, :meth:`~CompactionController.prepare` a
:class:`PreparedRequest`, :meth:`~CompactionController.step` both for one model call. What a
conversation accumulates between calls (the running token count, the loop guards) lives in a
:class:`ControllerState`; the controller keeps one for the single-conversation case, and
callers serving many conversations at once (the proxy) pass their own.

The engine receives ready objects: this module imports nothing from the configuration nor
from the composition root (:mod:`ctxcompact._wiring`, a layer above; an import-linter
contract in ``pyproject.toml`` keeps it so). :meth:`CompactionController.from_config` stays
the public way to build one from a config or a path: it calls the builder the composition
root hands over with :func:`use_config_builder` when it is imported, which ``import
ctxcompact`` always does. The root depends on the engine, never the reverse; the engine only
knows that *some* builder may be installed.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from .._contract.protocols import CompactionContext, CompactionStrategy, summarizes_ahead
from .._defaults import (
    DEFAULT_MAX_FAILURES,
    DEFAULT_MIN_PROGRESS,
    DEFAULT_PRECOMPUTE_RATIO,
    DEFAULT_RESERVED_CONTEXT_SIZE,
    TRIGGER_RATIO_RANGE,
)
from .._tokens.counters import HeuristicTokenCounter, TokenCounter
from ..exceptions import ConfigError, LLMUnavailableError, NotSmallerError, UserError
from ..kit import DEFAULT_RECALL_TEMPLATE, PinRules, pinned_indices, recall_extra
from ..llm._breaker import LLMOutages, watch_outages
from ..store._memory import DEFAULT_MEMORY_STORE_BYTES, MemoryStore
from ..store._records import DEFAULT_NAMESPACE
from .events import (
    AheadUse,
    CompactionEvent,
    CompactionResult,
    EventStatus,
    PreparedRequest,
    Step,
    Trigger,
    breaks_cache,
    rejection,
    same_messages,
    strategy_name,
)
from .payback import REWRITE_PRICING, payback
from .pins import restore_pins
from .problems import Problem, describe_error
from .state import ControllerState
from .store_hook import StoreHook
from .tracing import compaction_span, describe_compaction

if TYPE_CHECKING:
    from collections.abc import Mapping

    from opentelemetry.trace import Span

    from .._contract.protocols import LLM, SummaryAhead, ToolSpec, Usage
    from .._history.messages import Message
    from .._tokens.pricing import Pricing
    from ..llm._breaker import OutageStatus
    from ..store._records import OriginalsStore

__all__ = [
    "CompactionController",
    "CompactionEvent",
    "CompactionResult",
    "ControllerState",
    "EventStatus",
    "PreparedRequest",
    "Step",
    "Trigger",
    "use_config_builder",
]

logger = logging.getLogger("ctxcompact.controller")

EventCallback = Callable[[CompactionEvent], object]


class ConfigBuilder(Protocol):
    """Builds a controller of class ``cls`` from a config or a path, with
    :meth:`CompactionController.from_config`'s options."""

    def __call__(
        self,
        cls: type[CompactionController],
        config: object,
        /,
        *,
        strategy: CompactionStrategy | None,
        llm: LLM | None,
        token_counter: TokenCounter | None,
        dependencies: Mapping[type, object] | None,
        on_event: EventCallback | None,
        max_context_size: int | None,
    ) -> CompactionController: ...


_config_builder: ConfigBuilder | None = None


def use_config_builder(build: ConfigBuilder) -> None:
    """Install what :meth:`CompactionController.from_config` calls. The composition root
    (:mod:`ctxcompact._wiring`) does, when it is imported."""
    global _config_builder
    _config_builder = build


class CompactionController:
    """Decides when a history must be compacted and runs the strategy safely.

    It fires when ``token_count + reserved_context_size >= max_context_size`` (the KLIP-13
    rule), with ``trigger_ratio`` also when ``token_count >= trigger_ratio *
    max_context_size``, and with ``max_messages`` also when the history has more messages
    than that. A run never loses history: output that breaks tool-call pairing (a
    ``check_history`` problem its input did not have) is rejected and an exception keeps the
    original; both are reported in the returned event, to ``on_event`` and to the
    ``ctxcompact.controller`` logger.

    Nothing is lost for good: by default the controller keeps every original a compaction or
    a transform removes in a bounded :class:`~ctxcompact.store.MemoryStore` of its own
    (``store``), and every marker left in the view names the handle to recall it with (offer
    the model :func:`ctxcompact.store.recall_tool` of ``controller.store``; the
    :class:`~ctxcompact.Agent` does). ``recall=False`` keeps the originals but leaves the
    strategies' plain markers; ``store=None`` keeps nothing. The task (the first
    user message), the newest user message and the messages the user pins (``pin``,
    ``pin_patterns``) are checked after every rewrite and put back when a strategy lost them
    (a ``pin_restored`` problem); the built-in guard also keeps system messages.

    Loop guards: when a run saves less than ``min_progress`` of the (estimated) tokens, the
    controller waits until the history has grown by that fraction before trying again;
    after ``max_failures`` consecutive failures (raised or rejected) the circuit opens and
    triggered runs stop. ``compact(force=True)`` (the provider said the context is too long)
    bypasses both guards; its success closes the circuit. :meth:`reset` clears them. Every
    compaction must shrink the history: an output not smaller than its input (in the
    counter's estimate), or a strategy raising :class:`~ctxcompact.exceptions.NotSmallerError`,
    leaves the history as it was (a ``noop`` with a ``not_smaller`` problem, not a failure),
    and the next run waits for the history to grow by ``min_progress``: never a loop that
    fires at every call.

    Args:
        strategy: How to rewrite the history.
        max_context_size: The model's window in tokens.
        reserved_context_size: Tokens kept free for the answer and the next tool results.
        trigger_ratio: Also fire at this fraction of the window, 0.5 to 0.99 (``None``:
            only the threshold rule).
        max_messages: Also fire when the history has more messages than this.
        token_counter: Estimates messages (default :class:`HeuristicTokenCounter`).
        llm: Passed to the strategy in the context.
        transforms: Per-request strategies applied by :meth:`prepare`.
        on_event: Called with every event (exceptions it raises are logged, not raised).
        min_progress: Minimum fraction of tokens a run must save to be retried at once.
        max_failures: Consecutive failures that open the circuit.
        store: An originals store (:mod:`ctxcompact.store`): every original a compaction or a
            transform removes from what the model sees is recorded there, by its recall
            handle. ``"memory"`` (the default): a :class:`~ctxcompact.store.MemoryStore` of
            its own, bounded at :data:`~ctxcompact.store.DEFAULT_MEMORY_STORE_BYTES`;
            ``None``: no store. A store failure or eviction never blocks a rewrite: it is
            logged at WARNING and reported in ``CompactionResult.store_problem`` /
            ``PreparedRequest.store_problem``.
        store_namespace: Whose originals these are in the store.
        recall: Whether every marker names the handle to recall its original with: hidden
            and masked tool results show ``recall_placeholder`` instead of the strategy's
            own placeholder, and cuts, cleared arguments, the guard's drop note and
            summaries name their handles too, so the model knows how to recall them (see
            :mod:`ctxcompact._controller.store_hook` for the rules). ``None`` (the
            default): on whenever there is a store; ``False``: the originals are kept but
            the strategies' markers stay as they wrote them (what the model is sent is then
            what it was without a store); ``True``: on, and a store is required.
        recall_placeholder: The template (``{tool_call_id}``, ``{tool_name}``) of a hidden or
            masked result's recall placeholder (``None``:
            :data:`~ctxcompact.store.DEFAULT_RECALL_TEMPLATE`). Giving one asks for recall:
            it needs a store, and ``recall=False`` refuses it.
        pin: Pins more messages: ``message -> bool``.
        pin_patterns: Pins every message whose text matches one of these (literal texts, or
            RE2 patterns: linear time whatever the pattern; see
            :class:`ctxcompact.kit.PinRules` for the bounds).
        cache_ttl: Seconds after which the provider's prompt cache is cold: when more than
            this has passed since the last model call (:meth:`step` or
            :meth:`observe_usage`), the next :meth:`compact` runs the strategy even below
            the trigger (trigger ``cold``), since rewriting the prefix then breaks no cache.
            The result is kept only if it saves at least ``min_progress`` of the tokens;
            otherwise it is a ``noop`` (not a failure). ``None``: off.
        clock: The time source for ``cache_ttl`` (seconds; a replay passes the recording's).
        cache_pricing: The cache prices a rewrite the window does not need is weighed at:
            one that does not bring the history under the threshold, or that a ratio or
            ``max_messages`` trigger fired, is kept only if what it frees, over half as many
            calls as the conversation has made, pays for the cache writes it causes
            (:mod:`ctxcompact._controller.payback`); otherwise it is a ``noop`` with a
            ``no_payback`` problem. Default: reads at 0.1, writes at 1.25 (Anthropic's, the
            dearest). ``None``: every valid rewrite is kept. Only a conversation state that
            has seen a model call (:meth:`step`, :meth:`observe_usage`) weighs: a fresh
            state per request, as the proxy's, cannot know what the provider cached.
        precompute_ratio: With a strategy that can summarize ahead of time
            (:class:`~ctxcompact.SummarizesAhead`: ``LLMSummary``, ``HidingThenSummary``, a
            ``Pipeline`` with one of them), start its summary in the background once the
            conversation is past this fraction of the trigger (the KLIP-13 threshold, or
            ``trigger_ratio``'s when lower) and the next call may reach the trigger (the
            history plus the most one call has added to it so far: a conversation that ends
            below its trigger pays for no summary), and swap it in when it fires: the
            prompt cache holds until then, and the agent does not wait for the summarizer
            unless the summary is still being written (see :mod:`ctxcompact._controller.ahead`).
            ``None`` or ``0``: summaries are written when the trigger fires.

    Example:
        >>> from ctxcompact import Message
        >>> from ctxcompact.testing import FunctionStrategy
        >>> # The task (the first user message) and the newest: the controller would put
        >>> # them back if a strategy lost them (a ``pin_restored`` problem).
        >>> keep_last = FunctionStrategy(lambda ctx: [ctx.history[0], ctx.history[-1]])
        >>> controller = CompactionController(
        ...     keep_last, max_context_size=60, reserved_context_size=10
        ... )
        >>> history = [Message.user("task"), Message.assistant("x" * 200), Message.user("short")]
        >>> import asyncio
        >>> result = asyncio.run(controller.compact(history))
        >>> result.event.status, len(result.history)
        ('compacted', 2)
        >>> print(result.history[1].text)  # the default store keeps what went, and says so
        ... # doctest: +NORMALIZE_WHITESPACE
        short
        <BLANKLINE>
        [ctxcompact: 1 earlier message(s) were dropped to fit the window;
        recall_tool_result("#r...") lists them]
    """

    def __init__(
        self,
        strategy: CompactionStrategy,
        *,
        max_context_size: int,
        reserved_context_size: int = DEFAULT_RESERVED_CONTEXT_SIZE,
        trigger_ratio: float | None = None,
        max_messages: int | None = None,
        token_counter: TokenCounter | None = None,
        llm: LLM | None = None,
        transforms: Sequence[CompactionStrategy] = (),
        on_event: EventCallback | None = None,
        min_progress: float = DEFAULT_MIN_PROGRESS,
        max_failures: int = DEFAULT_MAX_FAILURES,
        store: OriginalsStore | Literal["memory"] | None = "memory",
        store_namespace: str = DEFAULT_NAMESPACE,
        recall: bool | None = None,
        recall_placeholder: str | None = None,
        cache_ttl: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        cache_pricing: Pricing | None = REWRITE_PRICING,
        precompute_ratio: float | None = DEFAULT_PRECOMPUTE_RATIO,
        pin: Callable[[Message], bool] | None = None,
        pin_patterns: Sequence[str] = (),
    ) -> None:
        if max_context_size <= 0:
            raise ConfigError(f"must be > 0, got {max_context_size}", key="max_context_size")
        if not 0 <= reserved_context_size < max_context_size:
            raise ConfigError(
                f"must be >= 0 and below max_context_size ({max_context_size}), got "
                f"{reserved_context_size}",
                key="reserved_context_size",
            )
        low, high = TRIGGER_RATIO_RANGE
        if trigger_ratio is not None and not low <= trigger_ratio <= high:
            raise ConfigError(
                f"{trigger_ratio!r} is out of range; allowed: {low} <= trigger_ratio <= {high}",
                key="trigger_ratio",
            )
        if max_messages is not None and max_messages < 1:
            raise ConfigError(f"must be >= 1, got {max_messages}", key="max_messages")
        if not 0 <= min_progress < 1:
            raise ConfigError(f"must be in [0, 1), got {min_progress}", key="min_progress")
        if max_failures < 1:
            raise ConfigError(f"must be >= 1, got {max_failures}", key="max_failures")
        if cache_ttl is not None and not cache_ttl > 0:
            raise ConfigError(f"must be > 0 seconds, got {cache_ttl}", key="cache_ttl")
        if precompute_ratio is not None and not 0 <= precompute_ratio < 1:
            raise ConfigError(
                f"must be in [0, 1) (0: off), got {precompute_ratio}", key="precompute_ratio"
            )
        self.strategy = strategy
        self.max_context_size = max_context_size
        self.reserved_context_size = reserved_context_size
        self.trigger_ratio = trigger_ratio
        self.max_messages = max_messages
        self.token_counter: TokenCounter = token_counter or HeuristicTokenCounter()
        self.llm = llm
        self.transforms = tuple(transforms)
        self.on_event = on_event
        self.min_progress = min_progress
        self.max_failures = max_failures
        self.cache_ttl = cache_ttl
        self.clock = clock
        self.cache_pricing = cache_pricing
        self.precompute_ratio = precompute_ratio or None
        self.state = ControllerState()
        """The conversation state used when a call passes none."""
        if store is None and (recall or recall_placeholder is not None):
            given = "recall=True" if recall else "recall_placeholder="
            raise UserError(
                f"{given} needs an originals store: pass store=MemoryStore() or "
                "SQLiteStore(path) (from ctxcompact.store), or leave store= out for a bounded "
                "in-memory one; markers may only promise a recall when the originals are kept"
            )
        if recall is False and recall_placeholder is not None:
            raise UserError(
                "recall_placeholder= is the recall marker's text, and recall=False turns "
                "recall off: give one or the other"
            )
        if store == "memory":
            store = MemoryStore(max_bytes=DEFAULT_MEMORY_STORE_BYTES)
        elif isinstance(store, str):
            raise UserError(f'store= takes a store, "memory" or None, got {store!r}')
        self.pin_rules = PinRules(pin_patterns, predicate=pin)
        """The user's pins (``pin``, ``pin_patterns``); the defaults apply besides."""
        self.store = store
        self.store_namespace = store_namespace
        template = (
            None
            if store is None or recall is False
            else (DEFAULT_RECALL_TEMPLATE if recall_placeholder is None else recall_placeholder)
        )
        self._store_hook = (
            None
            if store is None
            else StoreHook(store, namespace=store_namespace, recall_template=template)
        )
        self.recall_placeholder = template
        """The recall placeholder template in use, or ``None`` when recall is off."""

    @property
    def recall(self) -> bool:
        """Whether markers name the recall tool (a store, and ``recall`` not ``False``)."""
        return self._store_hook is not None and self._store_hook.recall

    @classmethod
    def from_config(
        cls,
        config: object,
        *,
        strategy: CompactionStrategy | None = None,
        llm: LLM | None = None,
        token_counter: TokenCounter | None = None,
        dependencies: Mapping[type, object] | None = None,
        on_event: EventCallback | None = None,
        max_context_size: int | None = None,
    ) -> CompactionController:
        """A controller built by :func:`ctxcompact.wire` from a :class:`~ctxcompact.Config`
        or the path of a TOML file.

        The strategy is ``[compaction] strategy`` loaded with ``[compaction.params]`` (unless
        ``strategy`` is given), offered the LLM (``llm``, else one built from
        ``[compaction.llm]``), the token counter and the config as dependencies; transforms
        are the enabled ``[observation_masking.schema1]``, ``[tool_result_truncation]`` and
        ``[context_guard]`` tables. ``max_context_size`` given here overrides the config's.
        ``controller.store`` is the store ``[store]`` describes (a bounded in-memory one when
        it names no ``path`` or ``url``; none with ``enabled = false``): close a file's or a
        server's (``controller.store.close()``) when done.

        Args:
            config: A :class:`~ctxcompact.Config`, or the path of a TOML file (``str`` or
                ``os.PathLike``). Typed ``object`` because the engine does not import the
                configuration (see the module docstring).
            strategy: Use this object instead of loading ``[compaction] strategy``.
            llm: The summarizer, instead of building ``[compaction.llm]``.
            token_counter: Instead of ``[token_counting]``'s.
            dependencies: More objects offered to the strategy's constructor, by type.
            on_event: Called with every event.
            max_context_size: Overrides ``[compaction] max_context_size``.

        Raises:
            ConfigError: The file cannot be read, no window in the config nor in the call,
                or limits that do not fit it (the error names the file and the
                ``compaction.`` key).
            StrategyLoadError: The strategy cannot be loaded.
            UserError: ``config`` is neither a config nor a path.
        """
        if _config_builder is None:  # only while ctxcompact itself is being imported
            raise UserError("CompactionController.from_config: import ctxcompact first")
        return _config_builder(
            cls,
            config,
            strategy=strategy,
            llm=llm,
            token_counter=token_counter,
            dependencies=dependencies,
            on_event=on_event,
            max_context_size=max_context_size,
        )

    def __repr__(self) -> str:
        return (
            f"CompactionController({strategy_name(self.strategy)}, max_context_size="
            f"{self.max_context_size}, reserved_context_size={self.reserved_context_size}, "
            f"trigger_ratio={self.trigger_ratio}, max_messages={self.max_messages})"
        )

    # -- counting -------------------------------------------------------------------------------

    def token_count(
        self, history: Sequence[Message], *, state: ControllerState | None = None
    ) -> int:
        """The context size of ``history``: the last provider usage plus an estimate of the
        messages added since, or an estimate of everything when there is no usage.

        Costs the new messages only when ``history`` extends the history seen last.
        """
        return (state or self.state).count.total(history, self.token_counter)

    def observe_usage(
        self,
        usage: Usage | None,
        history: Sequence[Message],
        *,
        state: ControllerState | None = None,
    ) -> None:
        """Record the provider's count for ``history`` (the stored history the call covered,
        its assistant reply appended). ``None`` (``Completion.usage`` when the provider sent
        none) and a usage with no tokens are ignored."""
        st = state or self.state
        st.last_call = self.clock()
        if usage is not None and usage.total_tokens > 0:
            st.count.observe(usage.total_tokens, history, self.token_counter)

    def _trigger(self, tokens: int, messages: int, reserved: int) -> Trigger | None:
        if tokens + reserved >= self.max_context_size:
            return "threshold"
        if self.trigger_ratio is not None and tokens >= self.trigger_ratio * self.max_context_size:
            return "ratio"
        if self.max_messages is not None and messages > self.max_messages:
            return "messages"
        return None

    def should_compact(
        self, history: Sequence[Message], *, state: ControllerState | None = None
    ) -> bool:
        """Whether a trigger rule fires for ``history``; the loop guards are not applied."""
        tokens = self.token_count(history, state=state)
        return self._trigger(tokens, len(history), self.reserved_context_size) is not None

    # -- compaction ---------------------------------------------------------------------------

    async def compact(
        self,
        history: Sequence[Message],
        *,
        force: bool = False,
        state: ControllerState | None = None,
        reserved_context_size: int | None = None,
        tools: Sequence[ToolSpec] | None = None,
    ) -> CompactionResult:
        """Compact ``history`` when a trigger fires (or ``force``).

        ``tools`` are the live request's tools, passed to the strategy in the context (a
        cache-aligned summary sends them to keep the provider's cached prefix).

        ``history`` is never mutated; the result holds the input object itself whenever
        nothing changed (not triggered, skipped, no-op, rejected, failed), otherwise a new
        list, and the event when the trigger fired. ``reserved_context_size`` overrides the
        controller's for this call (the proxy reserves the request's own ``max_tokens``).

        Three steps: :meth:`_decide` whether to run, :meth:`_run` the strategy, then
        :meth:`_accept` its output or not.
        """
        st = state or self.state
        reserved = (
            self.reserved_context_size if reserved_context_size is None else reserved_context_size
        )
        attempt = self._decide(history, st, force=force, reserved=reserved)
        if isinstance(attempt, CompactionResult):
            if attempt.event is None:  # below the trigger: maybe time to summarize ahead
                self._start_ahead(history, st, reserved, tools)
            else:  # decided without a run: a span all the same
                with compaction_span() as span:
                    self._describe(span, attempt.event, reserved)
            return attempt
        # The span is current during the run: the summarizer's own spans are its children.
        with compaction_span() as span:
            ahead, waited = await st.ahead.take(history)
            ran = await self._run(attempt, tools, ahead, waited)
            result = ran if isinstance(ran, CompactionResult) else await self._accept(attempt, ran)
            self._describe(span, result.event, reserved)
        if not isinstance(ran, CompactionResult) and result.changed:
            # Still near the trigger: the next summary starts now.
            self._start_ahead(result.history, st, reserved, tools)
        return result

    def _describe(self, span: Span | None, event: CompactionEvent | None, reserved: int) -> None:
        if span is not None and event is not None:
            describe_compaction(
                span,
                event,
                max_context_size=self.max_context_size,
                reserved_context_size=reserved,
            )

    # -- summaries ahead of time ---------------------------------------------------------------

    def _ahead_point(self, reserved: int) -> tuple[float, float] | None:
        """The token count from which a summary may be made ahead, and the trigger's
        (``None``: never ahead)."""
        ratio = self.precompute_ratio
        if ratio is None or not summarizes_ahead(self.strategy):
            return None
        trigger = float(self.max_context_size - reserved)
        if self.trigger_ratio is not None:
            trigger = min(trigger, self.trigger_ratio * self.max_context_size)
        return ratio * trigger, trigger

    def ahead_due(
        self,
        history: Sequence[Message],
        *,
        state: ControllerState | None = None,
        reserved_context_size: int | None = None,
    ) -> bool:
        """Whether ``history`` has reached the point where its summary is made ahead of the
        trigger, with a strategy that can: at least ``precompute_ratio`` of the trigger, and
        close enough that the next call may reach it (the history plus the most one call
        has added to it so far). The trigger itself is not checked: at the trigger the
        summary is made by the run.

        Example:
            >>> from ctxcompact import Message
            >>> from ctxcompact.strategies import LLMSummary
            >>> c = CompactionController(LLMSummary(), max_context_size=1000,
            ...                          reserved_context_size=200, precompute_ratio=0.5)
            >>> task, answer = Message.user("task"), Message.assistant("a")
            >>> big_steps = [task, answer, Message.user("x " * 900)]  # one call added ~560
            >>> small_steps = [task, *[answer, Message.user("x " * 70)] * 12]  # ~50 each
            >>> c.ahead_due(big_steps), c.ahead_due(small_steps), c.ahead_due([task])
            (True, False, False)
        """
        reserved = (
            self.reserved_context_size if reserved_context_size is None else reserved_context_size
        )
        points = self._ahead_point(reserved)
        if points is None:
            return False
        point, trigger = points
        st = state or self.state
        tokens = self.token_count(history, state=st)
        if tokens < point:
            return False
        # A summary made ahead that no trigger uses is a summarizer call for nothing (a
        # conversation that ends first): it is started only once the next call may reach
        # the trigger, i.e. the history plus the most one call has added to it so far;
        # that call's time is what the summarizer gets to write it.
        return tokens + st.count.largest_step(history, self.token_counter) >= trigger

    def _start_ahead(
        self,
        history: Sequence[Message],
        st: ControllerState,
        reserved: int,
        tools: Sequence[ToolSpec] | None,
    ) -> None:
        if not st.background or not summarizes_ahead(self.strategy):
            return
        if st.ahead.busy_for(history) or not self.ahead_due(
            history, state=st, reserved_context_size=reserved
        ):
            return
        ctx = self._context(history, self.token_count(history, state=st), reserved, tools)
        st.ahead.start(history, self.strategy.summarize_ahead(ctx))

    async def summarize_ahead(
        self,
        history: Sequence[Message],
        *,
        state: ControllerState | None = None,
        reserved_context_size: int | None = None,
        tools: Sequence[ToolSpec] | None = None,
    ) -> SummaryAhead | None:
        """The strategy's summary of ``history`` made now, for a later trigger: what the
        background task runs, for callers that keep it themselves (the proxy keeps it in its
        store, since its states last one request). ``None`` when the strategy cannot make
        one, sees no need, or fails (logged; the trigger's run then summarizes)."""
        strategy = self.strategy
        if not summarizes_ahead(strategy):
            return None
        reserved = (
            self.reserved_context_size if reserved_context_size is None else reserved_context_size
        )
        ctx = self._context(history, self.token_count(history, state=state), reserved, tools)
        try:
            return await strategy.summarize_ahead(ctx)
        except Exception as exc:
            logger.warning(
                "summary ahead of time failed (%s); the trigger's run writes one, or goes on "
                "without one (summarize_at_trigger = false)",
                type(exc).__name__,
            )
            logger.debug("summary ahead of time failed: %s", exc)
            return None

    def offer_ahead(
        self, history: Sequence[Message], ahead: SummaryAhead, *, state: ControllerState
    ) -> None:
        """Hand ``state`` a summary made ahead for the start of ``history`` (kept by the
        caller, e.g. the proxy's store): the next triggered run gets it as ``ctx.ahead``."""
        state.ahead.offer(history, ahead)

    async def settle(self, *, state: ControllerState | None = None) -> None:
        """Wait until the summary being made ahead for this conversation, if any, is done.

        A replay calls it after each model call it bills, standing for the time the agent's
        model takes to answer: the summary is written meanwhile, off the hot path."""
        await (state or self.state).ahead.settle()

    def _context(
        self,
        history: Sequence[Message],
        tokens: int,
        reserved: int,
        tools: Sequence[ToolSpec] | None,
        ahead: SummaryAhead | None = None,
    ) -> CompactionContext:
        return CompactionContext(
            history=tuple(history),  # a copy: a faulty strategy cannot mutate it
            token_count=tokens,
            max_context_size=self.max_context_size,
            reserved_context_size=reserved,
            llm=self.llm,
            token_counter=self.token_counter,
            tools=tools,
            ahead=ahead,
            recall=self.recall,
            pin=self.pin_rules or None,
        )

    def _decide(
        self, history: Sequence[Message], st: ControllerState, *, force: bool, reserved: int
    ) -> _Attempt | CompactionResult:
        """The attempt to make, or the result when no run is due (no trigger, an open
        circuit, a history that has not grown enough since a run that saved too little)."""
        tokens = self.token_count(history, state=st)
        trigger: Trigger | None = (
            "forced" if force else self._trigger(tokens, len(history), reserved)
        )
        if trigger is None and self._cold(st):
            trigger = "cold"
            st.last_call = None  # one cold run per idle period, whatever it does
        if trigger is None:
            return CompactionResult(history)
        name = strategy_name(self.strategy)
        estimate = st.count.estimate(history, self.token_counter)
        attempt = _Attempt(history, st, trigger, tokens, estimate, reserved, name)
        if not force and st.failures >= self.max_failures:
            circuit = Problem.fixed(
                "circuit_open",
                f"circuit open after {st.failures} consecutive failures; "
                "only a forced compaction runs (or reset())",
                source=name,
                count=st.failures,
            )
            return self._unchanged(attempt, "circuit_open", (circuit,))
        waits = st.retry_at is not None and estimate < st.retry_at
        # A wait after an optional rewrite that did not pay back its cache break ends when
        # the history no longer fits the window as it is: the window needs a run now. (A
        # wait after a run that could not shrink the history holds: re-running it at every
        # call would loop.)
        if waits and st.optional_wait and tokens + reserved >= self.max_context_size:
            waits = False
        if trigger != "cold" and not force and waits:
            waiting = Problem.fixed(
                "waiting",
                f"the last run saved less than {self.min_progress:.0%}; waiting "
                f"until the history grows to ~{st.retry_at} estimated tokens",
                source=name,
            )
            return self._unchanged(attempt, "skipped", (waiting,))
        return attempt

    async def _run(
        self,
        attempt: _Attempt,
        tools: Sequence[ToolSpec] | None,
        ahead: SummaryAhead | None = None,
        waited: float = 0.0,
    ) -> _Output | CompactionResult:
        """Run the strategy on a copy of the history, with the summary made ahead if any;
        when it raises, the ``failed`` result."""
        if ahead is not None:  # the positions it refers to are this history's
            ahead = dataclasses.replace(ahead, history_length=len(attempt.history))
            attempt = dataclasses.replace(attempt, ahead=ahead, waited=waited)
        elif waited:
            attempt = dataclasses.replace(attempt, waited=waited)
        ctx = self._context(attempt.history, attempt.tokens, attempt.reserved, tools, ahead)
        outages = LLMOutages()
        start = time.perf_counter()
        try:
            with watch_outages() as outages:
                output = await self.strategy.compact(ctx)
        except NotSmallerError as exc:
            # Nothing it could do would shrink the history: no failure, and no new run
            # before the history has grown (not one per call).
            duration = time.perf_counter() - start
            return self._not_smaller(attempt, str(exc), duration, outages.status)
        except Exception as exc:
            # A refusal by the summarizer's open breaker is the breaker's to count: counted
            # here too, it would open this conversation's circuit, which no recovery closes.
            if not isinstance(exc, LLMUnavailableError):
                attempt.state.failures += 1
            logger.debug("strategy %s raised", attempt.name, exc_info=True)
            raised = Problem.raised("strategy_raised", exc, source=attempt.name)
            problems = (raised, *self._circuit_opened(attempt))
            duration = time.perf_counter() - start
            return self._unchanged(attempt, "failed", problems, duration, outages.status)
        return _Output(output, time.perf_counter() - start, outages.status, attempt)

    async def _accept(self, attempt: _Attempt, ran: _Output) -> CompactionResult:
        """Keep the strategy's output when it is valid and worth it; record what was removed."""
        attempt = ran.attempt or attempt  # with the summary made ahead, when there was one
        history, st, estimate, name = attempt.history, attempt.state, attempt.estimate, attempt.name
        output, duration, outage = ran.output, ran.duration, ran.outage
        st.optional_wait = False
        if output is None or same_messages(output, history):
            st.failures = 0
            if attempt.trigger != "cold":
                st.retry_at = int(estimate * (1 + self.min_progress))
            return self._unchanged(attempt, "noop", (), duration, outage)
        reason = rejection(history, output)
        if reason is not None:
            st.failures += 1
            logger.debug("strategy %s output rejected: %s", name, reason)
            rejected = Problem.fixed("output_rejected", reason, source=name)
            problems = (rejected, *self._circuit_opened(attempt))
            return self._unchanged(attempt, "rejected", problems, duration, outage)
        if estimate and self.token_counter.count(output) >= estimate:
            note = f"its output (~{self.token_counter.count(output)} tokens) is not smaller"
            return self._not_smaller(attempt, note, duration, outage)
        if attempt.trigger == "cold" and estimate:
            freed = 1 - self.token_counter.count(output) / estimate
            if freed < self.min_progress:
                st.failures = 0
                note = f"cold cache: would save {freed:.0%}, below min_progress"
                cold = Problem.fixed("too_little_saved", note, source=name)
                return self._unchanged(attempt, "noop", (cold,), duration, outage)
        elif (
            self.cache_pricing is not None
            and st.last_call is not None
            and not self._needed(attempt, output)
        ):
            # The window does not need this rewrite: keep it only if it pays back the
            # prompt cache it breaks (_controller/payback.py). Only a state that has seen
            # this conversation's previous call weighs: then the history is what that call
            # sent, what the provider cached. A fresh state per request (the stateless
            # proxy) cannot know what was sent before, and keeps every valid rewrite.
            weighed = payback(history, output, self.token_counter, self.cache_pricing)
            if not weighed.pays:
                st.failures = 0
                st.retry_at = int(estimate * (1 + self.min_progress))
                # A refused rewrite that would have fitted: the wait ends when the history
                # no longer fits as it is (the window then needs it). One that would not have
                # fitted either waits like any run that saved too little (no loop).
                fitted = self._sent_tokens(history, output) + attempt.reserved
                st.optional_wait = fitted < self.max_context_size
                loss = Problem.fixed("no_payback", str(weighed), source=name)
                return self._unchanged(attempt, "noop", (loss,), duration, outage)
        result, pins = self._restore_pins(history, output, name)
        shaped = result  # before the store hook: its markers copy the messages they extend
        store_problem: Problem | None = None
        if same_messages(result, history):  # it only lost pins, which are back
            st.failures = 0
            if attempt.trigger != "cold":
                st.retry_at = int(estimate * (1 + self.min_progress))
            return self._unchanged(attempt, "noop", pins, duration, outage)
        if pins and estimate and self.token_counter.count(result) >= estimate:
            # The pins put back made the rewrite as large as the history: no compaction.
            note = "with the pinned messages it lost put back, its output is not smaller"
            return self._not_smaller(attempt, note, duration, outage)
        if self._store_hook is not None:  # after `duration`: recording is not the strategy's
            result, store_problem = await self._store_hook.akeep(history, result, st)
            if same_messages(result, history):  # only recall placeholders hidden again
                st.failures = 0
                st.retry_at = int(estimate * (1 + self.min_progress))
                noop = self._unchanged(attempt, "noop", (), duration, outage)
                return CompactionResult(history, noop.event, store_problem)
            st.produced.add(history, result)
        st.failures = 0
        # The new history is estimated (the old usage no longer applies), reusing the
        # estimate of every message the strategy kept.
        st.count.replace(result, self.token_counter)
        after = self.token_count(result, state=st)
        saved = 1 - after / estimate if estimate else 0.0
        # A run that brought the history under the threshold met the need, however little
        # it saved: when the history grows back over the threshold, that is a new need, and
        # holding it back would send calls over the window. Only a run that left the history
        # over the threshold waits: re-running it at every call would break the cache (or
        # call the summarizer) again and again for nothing.
        fits = after + attempt.reserved < self.max_context_size
        st.retry_at = (
            int(estimate * (1 + self.min_progress))
            if saved < self.min_progress and not fits
            else None
        )
        kept = {id(m) for m in result}
        rewritten = sum(1 for m in history if id(m) not in kept)
        # tokens_before may be the provider's count; state the result in the same units
        # (the estimate scaled by the provider's ratio), so before - after is the saving.
        tokens = attempt.tokens
        reported = round(after * tokens / estimate) if estimate and tokens != estimate else after
        event = attempt.event(
            "compacted",
            duration,
            pins,
            outage,
            after=(reported, len(result)),
            rewritten=rewritten,
            output=shaped,
            cache_break=breaks_cache(history, result),
        )
        self._emit(event, st)
        return CompactionResult(result, event, store_problem)

    def _needed(self, attempt: _Attempt, output: Sequence[Message]) -> bool:
        """Whether the window needs ``output``: forced (the provider refused the request),
        it fits a history that does not fit the window as it is, or fired at the threshold
        and brings the history under it with room to grow (it frees at least
        ``min_progress``). A rewrite that fits with less room keeps a call or two inside the
        window for a whole re-billed prompt: it is weighed like an optional one
        (:mod:`ctxcompact._controller.payback`). "Fits" counts the recall forms the store
        hook will give the plain placeholders and cleared values (:meth:`_sent_tokens`): a
        rewrite that fits only as written keeps no call inside the window."""
        if attempt.trigger == "forced":
            return True
        if attempt.trigger != "threshold":
            return False
        after = self._sent_tokens(attempt.history, output)
        freed = 1 - after / attempt.estimate if attempt.estimate else 1.0
        fits = after + attempt.reserved < self.max_context_size
        over = attempt.tokens + attempt.reserved >= self.max_context_size
        # A history over the window cannot be sent as it is: a rewrite that fits it is
        # needed, however little it frees. (One that does not fit either is weighed: it
        # would break the cache and the call would still not fit.)
        return fits and (over or freed >= self.min_progress)

    def _sent_tokens(self, history: Sequence[Message], output: Sequence[Message]) -> int:
        """The tokens of ``output`` (a rewrite of ``history``) as it will be sent: with recall
        on, the store hook writes its plain cleared values and hidden or masked results in
        their recall forms, which name a handle (``recall_extra``; a form shorter than the
        plain one is not counted, as the plain one stays when the store cannot keep it)."""
        counter = self.token_counter
        tokens = counter.count(output)
        hook = self._store_hook
        if hook is not None and hook.recall_template is not None:
            extra = recall_extra(history, output, counter, template=hook.recall_template)
            tokens += sum(e for e in extra if e > 0) if extra else 0
        return tokens

    def _not_smaller(
        self, attempt: _Attempt, note: str, duration: float, outage: OutageStatus | None
    ) -> CompactionResult:
        """A run that would not shrink the history: kept as it was (a ``noop``, not a
        failure), and the next run waits until the history has grown by ``min_progress``."""
        st = attempt.state
        st.failures = 0
        if attempt.trigger != "cold":
            st.retry_at = int(attempt.estimate * (1 + self.min_progress))
        problem = Problem.fixed("not_smaller", note, source=attempt.name)
        return self._unchanged(attempt, "noop", (problem,), duration, outage)

    def _restore_pins(
        self, history: Sequence[Message], output: Sequence[Message], name: str
    ) -> tuple[list[Message], tuple[Problem, ...]]:
        """``output`` with the pinned messages of ``history`` it lost put back, and the
        ``pin_restored`` problem when there were some (logged at WARNING)."""
        rules = self.pin_rules
        try:
            # What the user pinned, and the task and the newest user message (the built-in
            # strategies keep them: the guard never drops them, a summary leaves them verbatim
            # before it; a third-party strategy may not). System messages are left to the
            # strategies: one may document that it rewrites them.
            defaults = (i for i in pinned_indices(history) if history[i].role == "user")
            users = (i for i, m in enumerate(history) if rules(m)) if rules else ()
            pinned = frozenset((*defaults, *users))
            result, restored = restore_pins(history, output, pinned)
        except Exception:  # a bug or a pin predicate that raised: the output stands as it is
            logger.warning("checking the pins after %s raised; its output stands", name)
            logger.debug("pin check raised", exc_info=True)
            return list(output), ()
        if not restored:
            return result, ()
        problem = Problem.fixed(
            "pin_restored",
            f"{name} lost {restored} pinned message(s) (the task, the newest user message, "
            "pin, pin_patterns); the controller put them back where they were",
            source=name,
            count=restored,
        )
        logger.warning("%s", problem.shown)
        return result, (problem,)

    def _unchanged(
        self,
        attempt: _Attempt,
        status: EventStatus,
        problems: tuple[Problem, ...],
        duration: float = 0.0,
        outage: OutageStatus | None = None,
    ) -> CompactionResult:
        """The result that keeps the history as it was, after emitting its event."""
        event = attempt.event(status, duration, problems, outage)
        self._emit(event, attempt.state)
        return CompactionResult(attempt.history, event)

    async def maybe_compact(
        self,
        history: Sequence[Message],
        *,
        force: bool = False,
        state: ControllerState | None = None,
    ) -> Sequence[Message]:
        """:meth:`compact` for loops that only need the history (the event goes to
        ``on_event`` and the log). Returns the input object itself when nothing changed."""
        return (await self.compact(history, force=force, state=state)).history

    def _cold(self, state: ControllerState) -> bool:
        """Whether the cache has gone cold since the last model call (``cache_ttl``)."""
        ttl, last = self.cache_ttl, state.last_call
        return ttl is not None and last is not None and self.clock() - last > ttl

    def _circuit_opened(self, attempt: _Attempt) -> tuple[Problem, ...]:
        """``circuit_open`` when this failure opened the circuit, else nothing."""
        failures = attempt.state.failures
        if failures < self.max_failures:
            return ()
        note = f"circuit now open after {failures} consecutive failures"
        return (Problem.fixed("circuit_open", note, source=attempt.name, count=failures),)

    def reset(self, *, state: ControllerState | None = None) -> None:
        """Close the circuit, drop the min-progress wait and forget counts and usage."""
        (state or self.state).reset()

    def _emit(self, event: CompactionEvent, state: ControllerState) -> None:
        previous, state.last_status = state.last_status, event.status
        level = logging.INFO
        if event.status == "failed" and event.summarizer == "unavailable":
            level = logging.INFO  # the breaker warned once when it opened
        elif event.status in ("failed", "rejected"):
            level = logging.WARNING
        elif event.status == "skipped":
            level = logging.DEBUG
        elif event.status == "circuit_open":
            level = logging.WARNING if previous != "circuit_open" else logging.DEBUG
        logger.log(level, "%s", event)
        if self.on_event is not None:
            try:
                self.on_event(event)
            except Exception:
                logger.exception("on_event callback raised; compaction result kept")

    # -- per-request transforms -------------------------------------------------------------------

    async def prepare(
        self,
        history: Sequence[Message],
        *,
        max_output_tokens: int | None = None,
        state: ControllerState | None = None,
    ) -> PreparedRequest:
        """The messages to send: ``history`` through each transform, in order.

        The stored history is not touched. A transform that raises, or whose output breaks
        tool-call pairing, is left out of this request (the others still apply) and named in
        ``skipped``. ``max_output_tokens`` is the request's answer budget, when known:
        transforms that trim to the window keep it free.
        """
        current: Sequence[Message] = history
        if not self.transforms:
            return PreparedRequest(list(current))
        tokens = self.token_count(history, state=state)
        skipped: list[Problem] = []
        for transform in self.transforms:
            name = strategy_name(transform)
            ctx = CompactionContext(
                history=tuple(current),
                token_count=tokens,
                max_context_size=self.max_context_size,
                reserved_context_size=self.reserved_context_size,
                llm=self.llm,
                token_counter=self.token_counter,
                max_output_tokens=max_output_tokens,
                recall=self.recall,
                pin=self.pin_rules or None,
            )
            try:
                output = await transform.compact(ctx)
            except Exception as exc:
                logger.debug("transform %s raised", name, exc_info=True)
                message = f"{name} raised {describe_error(exc)}"
                skipped.append(
                    Problem.raised("transform_raised", exc, source=name, message=message)
                )
                logger.warning("%s, skipped", skipped[-1].shown)
                continue
            if output is None or same_messages(output, current):
                continue
            reason = rejection(current, output)
            if reason is not None:
                message = f"{name} output rejected: {reason}"
                skipped.append(Problem.fixed("transform_rejected", message, source=name))
                logger.warning("%s, skipped", skipped[-1].shown)
                logger.debug("transform %s output rejected: %s", name, reason)
                continue
            restored, pins = self._restore_pins(current, output, name)
            skipped.extend(pins)
            current = restored
            tokens = self.token_counter.count(current)
        store_problem: Problem | None = None
        if self._store_hook is not None and current is not history:
            current, store_problem = await self._store_hook.akeep(
                history, list(current), state or self.state
            )
        return PreparedRequest(list(current), tuple(skipped), store_problem)

    async def prepare_request(
        self, history: Sequence[Message], *, max_output_tokens: int | None = None
    ) -> list[Message]:
        """:meth:`prepare` for loops that only need the messages."""
        return (await self.prepare(history, max_output_tokens=max_output_tokens)).messages

    async def step(
        self,
        history: Sequence[Message],
        *,
        max_output_tokens: int | None = None,
        force: bool = False,
        state: ControllerState | None = None,
        reserved_context_size: int | None = None,
        tools: Sequence[ToolSpec] | None = None,
    ) -> Step:
        """Prepare one model call: :meth:`compact` the stored history, then :meth:`prepare`.

        The one order every caller uses (the agent, the replay engine, the proxy), so a
        replay predicts a deployment. Keep ``step.history`` as the stored history and send
        ``step.request``.
        """
        result = await self.compact(
            history,
            force=force,
            state=state,
            reserved_context_size=reserved_context_size,
            tools=tools,
        )
        prepared = await self.prepare(
            result.history, max_output_tokens=max_output_tokens, state=state
        )
        (state or self.state).last_call = self.clock()  # the call this step prepares
        stored = tuple(p for p in (result.store_problem, prepared.store_problem) if p is not None)
        return Step(
            result.history, prepared.messages, result.event, prepared.transform_problems, stored
        )


@dataclass(frozen=True, slots=True)
class _Attempt:
    """A run :meth:`CompactionController.compact` decided to make."""

    history: Sequence[Message]
    state: ControllerState
    trigger: Trigger
    tokens: int  # the count the trigger saw (the provider's, when it gave one)
    estimate: int  # the counter's estimate of the same history
    reserved: int
    name: str  # the strategy's
    ahead: SummaryAhead | None = None  # the summary made ahead, offered to the run
    waited: float = 0.0  # seconds the run waited for it

    def event(
        self,
        status: EventStatus,
        duration: float,
        problems: tuple[Problem, ...],
        outage: OutageStatus | None,
        *,
        after: tuple[int, int] | None = None,
        rewritten: int = 0,
        output: Sequence[Message] = (),
        cache_break: bool = False,
    ) -> CompactionEvent:
        """The attempt's event; ``after`` is the result's (tokens, messages) when it changed,
        ``output`` the strategy's output (before the store hook's markers), to tell whether
        it used the summary made ahead."""
        n = len(self.history)
        tokens_after, messages_after = after or (self.tokens, n)
        ahead: AheadUse | None = None
        if self.ahead is not None:
            summary = self.ahead.summary
            # The summary itself, or it with a note appended (a tiered guard that drops
            # older steps adds its note to the first user message, which it may be).
            used = status == "compacted" and any(
                m is summary or (m.role == summary.role and m.text.startswith(summary.text))
                for m in output
            )
            ahead = "used" if used else "unused"
        return CompactionEvent(
            self.name,
            self.trigger,
            status,
            self.tokens,
            tokens_after,
            n,
            messages_after,
            duration,
            problems,
            rewritten,
            outage,
            ahead,
            self.waited,
            cache_break,
        )


@dataclass(frozen=True, slots=True)
class _Output:
    """What the strategy returned, how long it took and what its model calls met."""

    output: Sequence[Message] | None
    duration: float
    outage: OutageStatus | None
    attempt: _Attempt | None = None  # the attempt as run (with the summary made ahead)
