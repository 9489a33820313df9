"""The trigger controller: *when* to compact, and a safe run of the strategy that says *how*.

Token accounting is incremental (:mod:`._running_count`): the provider's usage for a prefix
of the history plus an estimate of the messages appended since.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from ._contract import CompactionContext, CompactionStrategy
from ._events import (
    CompactionEvent,
    EventStatus,
    Trigger,
    rejection,
    same_messages,
    strategy_name,
)
from ._running_count import RunningCount
from ._tokens import HeuristicTokenCounter, TokenCounter
from .exceptions import ConfigError

if TYPE_CHECKING:
    from ._config import Config
    from ._contract import LLM, Usage
    from ._messages import Message

__all__ = ["CompactionController", "CompactionEvent", "EventStatus", "Trigger"]

logger = logging.getLogger("ctxcompact.controller")

EventCallback = Callable[[CompactionEvent], object]

# The range, shared with [compaction] trigger_ratio in the config.
TRIGGER_RATIO_RANGE = (0.5, 0.99)


class CompactionController:
    """Decides when a history must be compacted and runs the strategy safely.

    It fires when ``token_count + reserved_context_size >= max_context_size`` (KLIP-13) or,
    with ``trigger_ratio``, when ``token_count >= trigger_ratio * max_context_size``. A run
    never loses history: output that breaks tool-call pairing (a ``check_history`` problem
    its input did not have) is rejected and an exception keeps the original; both are
    reported in a :class:`CompactionEvent` sent to ``on_event`` and to the
    ``ctxcompact.controller`` logger.

    Loop guards: when a run saves less than ``min_progress`` of the (estimated) tokens, the
    controller waits until the history has grown by that fraction before trying again;
    after ``max_failures`` consecutive failures (raised or rejected) the circuit opens and
    triggered runs stop. ``maybe_compact(force=True)`` (the provider said the context is too
    long) bypasses both guards; its success closes the circuit. :meth:`reset` clears them.

    Args:
        strategy: How to rewrite the history.
        max_context_size: The model's window in tokens.
        reserved_context_size: Tokens kept free for the answer and the next tool results.
        trigger_ratio: Also fire at this fraction of the window, 0.5 to 0.99 (``None``:
            only the threshold rule).
        token_counter: Estimates messages (default :class:`HeuristicTokenCounter`).
        llm: Passed to the strategy in the context.
        transforms: Per-request strategies applied by :meth:`prepare_request`.
        on_event: Called with every event (exceptions it raises are logged, not raised).
        min_progress: Minimum fraction of tokens a run must save to be retried at once.
        max_failures: Consecutive failures that open the circuit.

    Example:
        >>> from ctxcompact import Message
        >>> from ctxcompact.testing import FunctionStrategy
        >>> keep_last = FunctionStrategy(lambda ctx: list(ctx.history[-1:]))
        >>> controller = CompactionController(
        ...     keep_last, max_context_size=60, reserved_context_size=10
        ... )
        >>> history = [Message.user("x" * 200), Message.user("short")]
        >>> controller.should_compact(history)
        True
        >>> import asyncio
        >>> [m.text for m in asyncio.run(controller.maybe_compact(history))]
        ['short']
    """

    def __init__(
        self,
        strategy: CompactionStrategy,
        *,
        max_context_size: int,
        reserved_context_size: int = 50_000,
        trigger_ratio: float | None = None,
        token_counter: TokenCounter | None = None,
        llm: LLM | None = None,
        transforms: Sequence[CompactionStrategy] = (),
        on_event: EventCallback | None = None,
        min_progress: float = 0.1,
        max_failures: int = 3,
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
            # Worded like the config's range errors (ctxcompact._config_errors).
            raise ConfigError(
                f"{trigger_ratio!r} is out of range; allowed: {low} <= trigger_ratio <= {high}",
                key="trigger_ratio",
            )
        if not 0 <= min_progress < 1:
            raise ConfigError(f"must be in [0, 1), got {min_progress}", key="min_progress")
        if max_failures < 1:
            raise ConfigError(f"must be >= 1, got {max_failures}", key="max_failures")
        self.strategy = strategy
        self.max_context_size = max_context_size
        self.reserved_context_size = reserved_context_size
        self.trigger_ratio = trigger_ratio
        self.token_counter: TokenCounter = token_counter or HeuristicTokenCounter()
        self.llm = llm
        self.transforms = tuple(transforms)
        self.on_event = on_event
        self.min_progress = min_progress
        self.max_failures = max_failures
        self.last_event: CompactionEvent | None = None
        self.last_transform_errors: list[str] = []
        self._failures = 0
        self._retry_at: int | None = None  # estimate the history must reach before a retry
        self._count = RunningCount()

    @classmethod
    def from_config(
        cls,
        config: Config,
        *,
        strategy: CompactionStrategy | None = None,
        llm: LLM | None = None,
        token_counter: TokenCounter | None = None,
        dependencies: Mapping[type, object] | None = None,
        on_event: EventCallback | None = None,
        max_context_size: int | None = None,
    ) -> CompactionController:
        """A controller built from a loaded :class:`~ctxcompact.Config`.

        The strategy is ``[compaction] strategy`` loaded with ``[compaction.params]`` (unless
        ``strategy`` is given), offered the LLM (``llm``, else one built from
        ``[compaction.llm]``), the token counter and the config as dependencies; transforms
        are ``[observation_masking.schema1]``, ``[tool_result_truncation]`` and then
        ``[context_guard]`` (window: the controller's ``max_context_size``), each when
        enabled; the counter follows ``[token_counting]`` unless ``token_counter`` is given.
        ``max_context_size`` given here overrides the config's.

        Raises:
            ConfigError: No ``max_context_size`` in the config nor in the call, or limits
                that do not fit it (the error names the file and the ``compaction.`` key).
            StrategyLoadError: The strategy cannot be loaded.
        """
        from ._contract import LLM as LLMProtocol
        from ._tokens import TokenCounter as TokenCounterProtocol
        from ._tokens import counter_from_config

        comp = config.compaction
        size = max_context_size if max_context_size is not None else comp.max_context_size
        if size is None:
            raise ConfigError(
                "required: set it in [compaction] or pass max_context_size=",
                path=str(config.path) if config.path else None,
                key="compaction.max_context_size",
            )
        counter = token_counter or counter_from_config(config.token_counting)
        if llm is None and comp.llm is not None:
            from .llm import build_llm

            llm = build_llm(comp.llm)
        if strategy is None:
            from ._loader import load_strategy

            offered: dict[type, object] = {TokenCounterProtocol: counter, type(config): config}
            if llm is not None:
                offered[LLMProtocol] = llm
            offered.update(dependencies or {})
            strategy = load_strategy(comp.strategy, dependencies=offered, params=comp.params)
        from ._transforms import transforms_from_config

        transforms = transforms_from_config(config, size)
        try:
            return cls(
                strategy,
                max_context_size=size,
                reserved_context_size=comp.reserved_context_size,
                trigger_ratio=comp.trigger_ratio,
                token_counter=counter,
                llm=llm,
                transforms=transforms,
                on_event=on_event,
                min_progress=comp.min_progress,
                max_failures=comp.max_failures,
            )
        except ConfigError as exc:
            # The config checks its own limits, so this comes from max_context_size= (or a
            # config changed after loading): name the file and key all the same.
            message = str(exc).split(": ", 1)[-1] if exc.key else str(exc)
            if max_context_size is not None:
                message += f" (max_context_size={max_context_size} was passed to from_config)"
            raise ConfigError(
                message,
                path=str(config.path) if config.path else None,
                key=f"compaction.{exc.key}" if exc.key else "compaction",
            ) from exc

    def __repr__(self) -> str:
        return (
            f"CompactionController({strategy_name(self.strategy)}, max_context_size="
            f"{self.max_context_size}, reserved_context_size={self.reserved_context_size}, "
            f"trigger_ratio={self.trigger_ratio})"
        )

    # -- counting -------------------------------------------------------------------------------

    def token_count(self, history: Sequence[Message]) -> int:
        """The context size of ``history``: the last provider usage plus an estimate of the
        messages added since, or an estimate of everything when there is no usage.

        Costs the new messages only when ``history`` extends the history seen last (its
        first, middle and last previously seen messages are still in place).
        """
        return self._count.total(history, self.token_counter)

    def observe_usage(self, usage: Usage | None, history: Sequence[Message]) -> None:
        """Record the provider's count for ``history`` (the stored history the call covered,
        its assistant reply appended). ``None`` (``Completion.usage`` when the provider sent
        none) and a usage with no tokens are ignored."""
        if usage is not None and usage.total_tokens > 0:
            self._count.observe(usage.total_tokens, history, self.token_counter)

    def _trigger(self, tokens: int) -> Trigger | None:
        if tokens + self.reserved_context_size >= self.max_context_size:
            return "threshold"
        if self.trigger_ratio is not None and tokens >= self.trigger_ratio * self.max_context_size:
            return "ratio"
        return None

    def should_compact(self, history: Sequence[Message]) -> bool:
        """Whether the threshold (or ratio) rule fires for ``history``; guards not applied."""
        return self._trigger(self.token_count(history)) is not None

    # -- compaction ---------------------------------------------------------------------------

    async def maybe_compact(
        self, history: Sequence[Message], *, force: bool = False
    ) -> Sequence[Message]:
        """Compact ``history`` when the trigger fires (or ``force``), else return it as is.

        Returns the input object itself whenever nothing changed (not triggered, skipped,
        no-op, rejected, failed); otherwise a new list. ``history`` is never mutated.
        """
        tokens = self.token_count(history)
        trigger = "forced" if force else self._trigger(tokens)
        if trigger is None:
            return history
        n = len(history)
        estimate = self._count.estimate(history, self.token_counter)

        def event(status: EventStatus, error: str | None, duration: float = 0.0) -> None:
            self._emit(
                CompactionEvent(
                    strategy_name(self.strategy),
                    trigger,
                    status,
                    tokens,
                    tokens,
                    n,
                    n,
                    duration,
                    error,
                )
            )

        if not force and self._failures >= self.max_failures:
            event(
                "circuit_open",
                f"circuit open after {self._failures} consecutive failures; "
                "only a forced compaction runs (or reset())",
            )
            return history
        if not force and self._retry_at is not None and estimate < self._retry_at:
            event(
                "skipped",
                f"the last run saved less than {self.min_progress:.0%}; waiting "
                f"until the history grows to ~{self._retry_at} estimated tokens",
            )
            return history

        ctx = CompactionContext(
            history=tuple(history),  # a copy: a faulty strategy cannot mutate the caller's list
            token_count=tokens,
            max_context_size=self.max_context_size,
            reserved_context_size=self.reserved_context_size,
            llm=self.llm,
            token_counter=self.token_counter,
        )
        start = time.perf_counter()
        try:
            output = await self.strategy.compact(ctx)
        except Exception as exc:
            self._failures += 1
            logger.debug("strategy %s raised", strategy_name(self.strategy), exc_info=True)
            event(
                "failed",
                f"{type(exc).__name__}: {exc}{self._circuit_note()}",
                time.perf_counter() - start,
            )
            return history
        duration = time.perf_counter() - start

        if output is None or same_messages(output, history):
            self._failures = 0
            self._retry_at = int(estimate * (1 + self.min_progress))
            event("noop", None, duration)
            return history
        reason = rejection(history, output)
        if reason is not None:
            self._failures += 1
            event("rejected", reason + self._circuit_note(), duration)
            return history

        result = list(output)
        self._failures = 0
        self._count.reset()  # the new history is estimated, the old usage no longer applies
        after = self.token_count(result)
        saved = 1 - after / estimate if estimate else 0.0
        self._retry_at = (
            int(estimate * (1 + self.min_progress)) if saved < self.min_progress else None
        )
        kept = {id(m) for m in result}
        rewritten = sum(1 for m in history if id(m) not in kept)
        self._emit(
            CompactionEvent(
                strategy_name(self.strategy),
                trigger,
                "compacted",
                tokens,
                after,
                n,
                len(result),
                duration,
                None,
                rewritten,
            )
        )
        return result

    def _circuit_note(self) -> str:
        if self._failures >= self.max_failures:
            return f"; circuit now open after {self._failures} consecutive failures"
        return ""

    def reset(self) -> None:
        """Close the circuit, drop the min-progress wait and forget counts and usage."""
        self._failures = 0
        self._retry_at = None
        self._count.reset()

    def _emit(self, event: CompactionEvent) -> None:
        previous = self.last_event
        self.last_event = event
        level = logging.INFO
        if event.status in ("failed", "rejected") or event.messages_rewritten:
            level = logging.WARNING  # seed 003 L3: dropped or truncated content is a warning
        elif event.status == "skipped":
            level = logging.DEBUG
        elif event.status == "circuit_open":
            opened = previous is None or previous.status != "circuit_open"
            level = logging.WARNING if opened else logging.DEBUG
        logger.log(level, "%s", event)
        if self.on_event is not None:
            try:
                self.on_event(event)
            except Exception:
                logger.exception("on_event callback raised; compaction result kept")

    # -- per-request transforms -------------------------------------------------------------------

    async def prepare_request(
        self, history: Sequence[Message], *, max_output_tokens: int | None = None
    ) -> list[Message]:
        """The messages to send: ``history`` through each transform, in order.

        The stored history is not touched. A transform that raises, or whose output breaks
        tool-call pairing, is skipped with a warning (the request goes out without it) and
        listed in :attr:`last_transform_errors`. ``max_output_tokens`` is the request's
        answer budget, when known: transforms that trim to the window keep it free.
        """
        current: Sequence[Message] = history
        tokens = self.token_count(history)
        self.last_transform_errors = []
        for transform in self.transforms:
            ctx = CompactionContext(
                history=tuple(current),
                token_count=tokens,
                max_context_size=self.max_context_size,
                reserved_context_size=self.reserved_context_size,
                llm=self.llm,
                token_counter=self.token_counter,
                max_output_tokens=max_output_tokens,
            )
            try:
                output = await transform.compact(ctx)
            except Exception as exc:
                error = f"{strategy_name(transform)} raised {type(exc).__name__}: {exc}"
                logger.warning("transform %s, skipped", error)
                self.last_transform_errors.append(error)
                continue
            if output is None or same_messages(output, current):
                continue
            reason = rejection(current, output)
            if reason is not None:
                error = f"{strategy_name(transform)} output rejected: {reason}"
                logger.warning("transform %s, skipped", error)
                self.last_transform_errors.append(error)
                continue
            current = list(output)
            tokens = self.token_counter.count(current)
            logger.debug(
                "transform %s applied: %d messages, ~%d tokens",
                strategy_name(transform),
                len(current),
                tokens,
            )
        return list(current)
