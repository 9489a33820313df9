"""Offline replay of a recorded conversation, call by call, with a cache-adjusted cost model.

Every assistant message of a recording is one model call. Its input is what
:meth:`CompactionController.step <ctxcompact.CompactionController.step>` prepares from the
history before it: triggered compaction, then the per-request transforms, the order the
agent and the proxy use. Two modes say what "the history before it" is:

* ``agent`` (default): an agent that stores its compacted history; a compaction replaces the
  stored history and later messages are appended to the compacted one.
* ``proxy``: a stateless proxy in front of an agent that keeps everything; every call
  starts again from the whole recording so far, with a fresh controller state, exactly as
  :mod:`ctxcompact.proxy` sees each request.

The engine measures each input with a token counter and bills it the way prompt caching
does: the part shared with the previous call's input, counted in whole messages from the
start, costs ``cached_price``; the rest costs 1 per token (the ``flat`` model). A provider's
:class:`Pricing` (``pricing=``) bills instead the way that provider
does: a write premium on the uncached part, its read price, no cache below its minimum
prefix, and no cache at all for a call further than its time-to-live from the previous one
when the recording carries timestamps (a ``timestamp`` on the assistant messages). The same
timestamps drive the controller's clock, so ``cache_ttl`` (cold-cache compaction) acts as it
would have live. ``ctxcompact replay`` and the benchmarks use this module.

Example:
    >>> import asyncio
    >>> from ctxcompact import CompactionController, HeuristicTokenCounter, Message
    >>> from ctxcompact.strategies import ToolResultHiding
    >>> counter = HeuristicTokenCounter()
    >>> conversation = [Message.user("hi"), Message.assistant("hello")]
    >>> stats = asyncio.run(replay(conversation, None, counter=counter))
    >>> stats.calls
    1
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Literal

from .._contract.protocols import has_context_window
from .._controller.ahead import in_background
from .._controller.state import ControllerState
from .._formats.files import read_conversation
from .._history.messages import Message
from .._tokens.counters import counts_text
from .._tokens.pricing import PRICING, CacheMeter, CallCost, Pricing, message_time, provider
from ..store._removed import Removal, removed_originals
from ._recoverable import RecallCheck
from ._referenced import (
    ReferencedReport,
    ReferencedResult,
    distinctive_tokens,
    removed_then_referenced,
)

__all__ = [
    "PRICING",
    "CacheMeter",
    "CallCost",
    "FileReplay",
    "MemoCounter",
    "MeteredLLM",
    "Pricing",
    "RecallCheck",
    "ReferencedReport",
    "ReferencedResult",
    "ReplayMode",
    "ReplayStats",
    "distinctive_tokens",
    "message_time",
    "provider",
    "read_conversation",
    "removed_then_referenced",
    "replay",
]

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from .._contract.protocols import LLM, Completion, ToolSpec
    from .._controller.controller import CompactionController
    from .._tokens.counters import TokenCounter

ReplayMode = Literal["agent", "proxy"]
"""``agent``: the stored history is compacted; ``proxy``: every call sees the whole recording."""


class MemoCounter:
    """A token counter that remembers the count of each message object it has seen.

    Replays count the same (immutable) messages at every call; remembering them by identity
    makes a replay linear in the messages counted rather than in their text. The messages
    are kept alive by the memo so an id is never re-used while it is in there. When the
    inner counter counts bare strings (:func:`~ctxcompact.counts_text`), its ``count_text``
    is this counter's too, the very method: strategies then run the code they run in
    production, not a slower path of their own.

    Example:
        >>> from ctxcompact import HeuristicTokenCounter, counts_text
        >>> message = Message.user("hello world")
        >>> counter = MemoCounter(HeuristicTokenCounter())
        >>> counter.count([message]) == HeuristicTokenCounter().count([message])
        True
        >>> counts_text(counter)
        True
    """

    def __init__(self, inner: TokenCounter) -> None:
        self.inner = inner
        self._memo: dict[int, tuple[Message, int]] = {}
        # What the counter charges for a list beyond its messages (reply priming, if any).
        self._base = inner.count(())
        if counts_text(inner):
            self.count_text: Callable[[str], int] = inner.count_text

    def count_message(self, message: Message) -> int:
        hit = self._memo.get(id(message))
        if hit is not None and hit[0] is message:
            return hit[1]
        tokens = self.inner.count_message(message)
        self._memo[id(message)] = (message, tokens)
        return tokens

    def count(self, messages: Iterable[Message]) -> int:
        return self._base + sum(self.count_message(m) for m in messages)

    def clear(self) -> None:
        """Forget every remembered message (between files, to bound memory)."""
        self._memo.clear()


class MeteredLLM:
    """Wraps the summarizer LLM to count its calls and tokens during a replay.

    Tokens are the provider's reported input plus output; when a call reports no usage, they
    are estimated with ``counter`` (the prompt and the answer). A call whose prompt starts
    with messages of the previous model call's input (``previous``, which :func:`replay` sets
    after each call it bills), as a cache-aligned summary's does, reads that prefix from the
    provider's cache: its tokens are counted in ``cached_tokens`` (at most the call's input).

    Each call is also timed, and counted as made in the background (a summary written ahead
    of the trigger, :func:`ctxcompact._controller.ahead.in_background`) or on the hot path
    (while the agent's next model call waited for it): ``background_calls`` /
    ``background_s`` and ``hot_calls`` / ``hot_s``.

    Example:
        >>> import asyncio
        >>> from ctxcompact import HeuristicTokenCounter
        >>> from ctxcompact.testing import ScriptedLLM
        >>> llm = MeteredLLM(ScriptedLLM("a summary"), HeuristicTokenCounter())
        >>> _ = asyncio.run(llm.complete([Message.user("summarize")]))
        >>> llm.calls
        1
    """

    def __init__(self, inner: LLM, counter: TokenCounter) -> None:
        self.inner = inner
        self.counter = counter
        self.calls = 0
        self.tokens = 0
        self.cached_tokens = 0
        self.hot_calls = 0
        self.hot_s = 0.0
        self.background_calls = 0
        self.background_s = 0.0
        self.previous: Sequence[Message] = ()
        # Forwarded so a summarizer still sees its model's own window (WindowedLLM).
        self.context_window = inner.context_window if has_context_window(inner) else None

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        system: str | None = None,
        tools: Sequence[ToolSpec] | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        background = in_background()
        start = time.perf_counter()
        try:
            completion = await self.inner.complete(
                messages, system=system, tools=tools, max_tokens=max_tokens
            )
        finally:
            elapsed = time.perf_counter() - start
            if background:
                self.background_calls += 1
                self.background_s += elapsed
            else:
                self.hot_calls += 1
                self.hot_s += elapsed
        self.calls += 1
        prompt = [Message.system(system), *messages] if system else list(messages)
        usage = completion.usage
        if usage is not None and usage.input_tokens + usage.output_tokens > 0:
            self.tokens += usage.input_tokens + usage.output_tokens
            input_tokens = usage.input_tokens
        else:
            input_tokens = self.counter.count(prompt)
            self.tokens += input_tokens + self.counter.count_message(completion.message)
        previous, shared = self.previous, 0
        limit = min(len(previous), len(prompt))
        while shared < limit and (
            previous[shared] is prompt[shared] or previous[shared] == prompt[shared]
        ):
            shared += 1
        if shared:
            cached = sum(self.counter.count_message(m) for m in prompt[:shared])
            self.cached_tokens += min(cached, input_tokens)
        return completion


@dataclass(slots=True)
class ReplayStats:
    """What one replay (or a sum of replays) cost.

    Attributes:
        calls: Model calls replayed (assistant messages).
        triggers: Calls before which a trigger rule fired (the strategy ran, or a loop guard
            held it back): what a compaction needs, whether or not one followed.
        compactions: Triggered compactions that replaced the stored history.
        failed_compactions: Compaction attempts the controller reported as failed, rejected or
            blocked by its circuit breaker (the history was kept).
        input_tokens: Input tokens summed over every call (what is billed without caching).
        peak_context_tokens: The largest single input.
        cost: Cache-adjusted cost in token units (1 per uncached token).
        cache_breaks: Calls whose input shares less than the whole previous input.
        cache_read_tokens: Input tokens billed as read from the cache.
        cache_write_tokens: Input tokens billed as written to it (the uncached ones).
        expired_calls: Calls made after the cache's TTL had run out (timestamped traces).
        calls_over_window: Calls whose input plus the reserve exceeds the window
            (``input + reserved > max``): the provider would refuse them, or the answer
            would have no room. Counted only when the replay knows the window.
        removed_results: Tool results the strategy took out of some later call's input
            (hidden, masked, truncated, dropped or summarised); measured only when asked
            (``referenced=True``), see
            :func:`ctxcompact.replay._referenced.removed_then_referenced`.
        referenced_results: Of those, the ones a later answer quoted while they were out of
            view ("removed then referenced").
        recallable_results: Of the referenced ones, those that really came back: the input of
            the call that quoted it names a handle of it (a recall marker, a drop note, a
            range it lists) and the recall executor, paged through as a model would, returns
            its text byte for byte (:class:`RecallCheck`).
            Nothing asks the store whether it holds an id.
        lost_results: Of the referenced ones, the others: lost for good at that call.
        removed_originals: Every original (a tool result, a call's arguments, a user or
            assistant message) some call's input no longer held as it was, counted once.
        lost_originals: Of those, the ones that did not come back (as for
            ``recallable_results``) from at least one input that lacked them.
        cleared_arguments: Of ``removed_originals``, the calls' arguments (cleared, or
            dropped with their call).
        lost_arguments: Of those, the ones lost at least once.
        summarizer_calls: Calls made to the summarizer LLM.
        summarizer_tokens: Tokens (input + output) those calls used.
        summarizer_cached_tokens: Of their input, the tokens repeating the previous model
            call's input prefix, read from the cache (cache-aligned summaries).
        summarizer_cost: Their cost in token units: the cached input at the replay's cached
            price, everything else at 1.
        summarizer_hot_calls: Summarizer calls (failed ones included) made on the hot path:
            while the agent's next model call waited for the compaction.
        summarizer_hot_s: Seconds those took.
        summarizer_background_calls: Summarizer calls made ahead of the trigger, in the
            background (``precompute_ratio``), while the agent went on.
        summarizer_background_s: Seconds those took.
        hot_calls_after_first: Of the hot-path calls, those made after the first compaction
            (with summaries made ahead, 0 unless a summary was not ready or did not suffice).
        hot_s_after_first: Seconds the hot path waited for the summarizer after the first
            compaction: its calls made then, plus the waits for a summary made ahead that
            had not finished (0 when every later compaction swapped one in, or none).
        summarizer_waited_s: Seconds compactions waited for a summary being made ahead that
            had not finished (on the hot path too). A replay lets each background summary
            finish before the next call (standing for the time the agent's model takes to
            answer), so this stays 0 there; a live agent reports it in its events.
        ahead_used: Compactions that put a summary made ahead in place.
        ahead_unused: Compactions offered one that did without it (hiding sufficed, or it no
            longer lined up).
        context_tokens: The input tokens of each call, in order (for plots).
        call_costs: The cache-adjusted cost of each call, in order.
        compaction_calls: The 1-based calls before which the history was compacted.
        failed_calls: The 1-based calls before which a compaction failed.
        cache_break_calls: The 1-based calls whose input broke the cache.

    Example:
        >>> (ReplayStats(calls=2, cost=3.0) + ReplayStats(calls=1, cost=1.5)).calls
        3
    """

    calls: int = 0
    triggers: int = 0
    compactions: int = 0
    failed_compactions: int = 0
    input_tokens: int = 0
    peak_context_tokens: int = 0
    cost: float = 0.0
    cache_breaks: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    expired_calls: int = 0
    calls_over_window: int = 0
    removed_results: int = 0
    referenced_results: int = 0
    recallable_results: int = 0
    lost_results: int = 0
    removed_originals: int = 0
    lost_originals: int = 0
    cleared_arguments: int = 0
    lost_arguments: int = 0
    summarizer_calls: int = 0
    summarizer_tokens: int = 0
    summarizer_cached_tokens: int = 0
    summarizer_cost: float = 0.0
    summarizer_hot_calls: int = 0
    summarizer_hot_s: float = 0.0
    summarizer_background_calls: int = 0
    summarizer_background_s: float = 0.0
    hot_calls_after_first: int = 0
    hot_s_after_first: float = 0.0
    summarizer_waited_s: float = 0.0
    ahead_used: int = 0
    ahead_unused: int = 0
    context_tokens: list[int] = field(default_factory=list)
    call_costs: list[float] = field(default_factory=list)
    compaction_calls: list[int] = field(default_factory=list)
    failed_calls: list[int] = field(default_factory=list)
    cache_break_calls: list[int] = field(default_factory=list)

    def add_call(self, bill: CallCost) -> None:
        self.calls += 1
        self.input_tokens += bill.input_tokens
        self.peak_context_tokens = max(self.peak_context_tokens, bill.input_tokens)
        self.cost += bill.cost
        self.cache_breaks += bill.cache_break
        self.cache_read_tokens += bill.cached_tokens
        self.cache_write_tokens += bill.cache_write_tokens
        self.expired_calls += bill.expired
        self.context_tokens.append(bill.input_tokens)
        self.call_costs.append(bill.cost)
        if bill.cache_break:
            self.cache_break_calls.append(self.calls)

    def __add__(self, other: ReplayStats) -> ReplayStats:
        total = ReplayStats()
        for f in fields(self):
            if f.name == "peak_context_tokens":
                value: object = max(self.peak_context_tokens, other.peak_context_tokens)
            elif isinstance(getattr(self, f.name), list):
                value = [*getattr(self, f.name), *getattr(other, f.name)]
            else:
                value = getattr(self, f.name) + getattr(other, f.name)
            setattr(total, f.name, value)
        return total


_FAILED = frozenset({"failed", "rejected", "circuit_open"})


async def replay(
    conversation: Sequence[Message],
    controller: CompactionController | None,
    *,
    counter: TokenCounter,
    cached_price: float = 0.1,
    llm: MeteredLLM | None = None,
    mode: ReplayMode = "agent",
    window: tuple[int, int] | None = None,
    on_failure: Callable[[str], None] | None = None,
    on_call: Callable[[int, Sequence[Message]], None] | None = None,
    pricing: Pricing | None = None,
    referenced: bool = False,
) -> ReplayStats:
    """Replay ``conversation`` through ``controller`` (``None``: no compaction).

    Args:
        conversation: The recorded messages, in order.
        controller: The controller deciding and running compaction; use a fresh one per
            conversation (its loop guards keep state).
        counter: Measures each call's input. Give the controller the same counter.
        cached_price: Price of a cached token relative to an uncached one (``flat``).
        llm: The metered summarizer the controller was given, to report its calls.
        mode: ``agent`` (the stored history is compacted) or ``proxy`` (every call starts
            from the whole recording, with a fresh controller state). In ``agent`` mode a
            summary the controller makes ahead of the trigger (``precompute_ratio``) is let
            finish after each call, standing for the time the agent's model takes to answer:
            its summarizer calls count as made in the background.
        window: ``(max_context_size, reserved_context_size)`` to count calls over the
            window; defaults to the controller's limits (no count without either).
        on_failure: Called with the controller's error text for each failed compaction.
        on_call: Called with the index of each assistant message in ``conversation`` and
            the input of that call (to check what the model would have seen).
        pricing: Bill as this provider does (``None``: flat at ``cached_price``). Its TTL
            applies where the assistant messages carry timestamps.
        referenced: Also measure what the strategy removed that a later answer quoted
            (``removed_results``, ``referenced_results``, ``recallable_results``,
            ``lost_results``) and whether every original removed from an input comes back
            through recall (``removed_originals`` and the others).

    Returns:
        The replay's statistics.
    """
    meter = CacheMeter(counter, cached_price=cached_price, pricing=pricing)
    clock = _TraceClock()
    driven = (
        controller is not None
        and controller.cache_ttl is not None
        and any(m.role == "assistant" and message_time(m) is not None for m in conversation)
    )
    inputs: dict[int, list[Message]] = {}
    if referenced:
        given = on_call

        def on_call(index: int, request: Sequence[Message]) -> None:
            inputs[index] = list(request)
            if given is not None:
                given(index, request)

    if not driven or controller is None:
        stats = await _replay(
            conversation, controller, meter, clock, llm, mode, window, on_failure, on_call
        )
        return _measure_referenced(stats, conversation, inputs, controller) if referenced else stats
    # The recording's timestamps are the controller's clock, so cold-cache compaction fires
    # where the recorded gaps were longer than its cache_ttl.
    saved, controller.clock = controller.clock, clock
    try:
        stats = await _replay(
            conversation, controller, meter, clock, llm, mode, window, on_failure, on_call
        )
    finally:
        controller.clock = saved
    return _measure_referenced(stats, conversation, inputs, controller) if referenced else stats


def _measure_referenced(
    stats: ReplayStats,
    conversation: Sequence[Message],
    inputs: dict[int, list[Message]],
    controller: CompactionController | None,
) -> ReplayStats:
    """Fill the removed-then-referenced counts from each call's input."""

    report = removed_then_referenced(conversation, inputs)
    stats.removed_results = report.removed
    stats.referenced_results = report.referenced
    store = controller.store if controller is not None else None
    check = (
        RecallCheck(store, namespace=controller.store_namespace)
        if store is not None and controller is not None
        else None
    )
    for detail in report.details:
        if not detail.referenced or detail.referenced_at is None:
            continue
        view = inputs.get(detail.referenced_at)
        original = conversation[detail.position]
        removal = Removal(
            detail.position, original, "dropped", detail.tool_call_id or "", None, None
        )
        back = check is not None and view is not None and check.comes_back(removal, view)
        stats.recallable_results += back
    stats.lost_results = stats.referenced_results - stats.recallable_results
    _measure_removals(stats, conversation, inputs, check)
    return stats


def _measure_removals(
    stats: ReplayStats,
    conversation: Sequence[Message],
    inputs: dict[int, list[Message]],
    check: RecallCheck | None,
) -> None:
    """Every original some input lacked, and whether it came back from each such input."""
    lost: dict[tuple[int, str], bool] = {}
    for index, view in sorted(inputs.items()):
        for removal in removed_originals(conversation[:index], view):
            if removal.kind == "range":
                continue
            key = (removal.position, removal.call.id if removal.call is not None else "")
            if lost.get(key):
                continue
            lost[key] = check is None or not check.comes_back(removal, view)
    stats.removed_originals = len(lost)
    stats.lost_originals = sum(lost.values())
    arguments = [v for (_, call), v in lost.items() if call]
    stats.cleared_arguments = len(arguments)
    stats.lost_arguments = sum(arguments)


class _TraceClock:
    """A clock that reads the time of the call being replayed."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def _replay(
    conversation: Sequence[Message],
    controller: CompactionController | None,
    meter: CacheMeter,
    clock: _TraceClock,
    llm: MeteredLLM | None,
    mode: ReplayMode,
    window: tuple[int, int] | None,
    on_failure: Callable[[str], None] | None,
    on_call: Callable[[int, Sequence[Message]], None] | None,
) -> ReplayStats:
    stats = ReplayStats()
    llm_calls, llm_tokens = (llm.calls, llm.tokens) if llm is not None else (0, 0)
    llm_cached = llm.cached_tokens if llm is not None else 0
    timings = _Timings.of(llm)
    compacted_once = False
    if window is None and controller is not None:
        window = (controller.max_context_size, controller.reserved_context_size)
    history: list[Message] = []
    for index, message in enumerate(conversation):
        if message.role == "assistant":
            at = message_time(message)
            if at is not None:
                clock.now = at
            request: Sequence[Message] = history
            if controller is not None:
                hot_before = llm.hot_calls if llm is not None else 0
                hot_s_before = llm.hot_s if llm is not None else 0.0
                if mode == "proxy":
                    # A request's state lives as long as the request: nothing in the background.
                    fresh = ControllerState(background=False)
                    step = await controller.step(conversation[:index], state=fresh)
                else:
                    step = await controller.step(history)
                    if step.compacted:
                        history = list(step.history)
                if compacted_once and llm is not None:
                    stats.hot_calls_after_first += llm.hot_calls - hot_before
                    stats.hot_s_after_first += llm.hot_s - hot_s_before
                    if step.event is not None:
                        stats.hot_s_after_first += step.event.waited_s
                if step.compacted:
                    compacted_once = True
                    stats.compactions += 1
                    stats.compaction_calls.append(stats.calls + 1)
                event = step.event
                if event is not None:
                    stats.triggers += 1
                    stats.summarizer_waited_s += event.waited_s
                    stats.ahead_used += event.ahead == "used"
                    stats.ahead_unused += event.ahead == "unused"
                if event is not None and event.status in _FAILED:
                    stats.failed_compactions += 1
                    stats.failed_calls.append(stats.calls + 1)
                    if on_failure is not None:
                        on_failure(event.error or event.status)
                request = step.request
            bill = meter.bill(request, at=at)
            stats.add_call(bill)
            if llm is not None:
                llm.previous = tuple(request)  # what a cache-aligned summary reads from cache
            if window is not None and bill.input_tokens + window[1] > window[0]:
                stats.calls_over_window += 1
            if on_call is not None:
                on_call(index, request)
            if controller is not None and mode == "agent":
                await controller.settle()  # while the agent's model answers
        history.append(message)
    if controller is not None and mode == "agent":
        controller.state.ahead.cancel()  # the recording ends: nothing more to summarize for
    timings.fill(stats, llm)
    if llm is not None:
        stats.summarizer_calls = llm.calls - llm_calls
        stats.summarizer_tokens = llm.tokens - llm_tokens
        cached = stats.summarizer_cached_tokens = llm.cached_tokens - llm_cached
        # The provider's prices: Anthropic bills the uncached part as a cache write (1.25x).
        stats.summarizer_cost = meter.pricing.cost(stats.summarizer_tokens, cached)
    return stats


@dataclass(frozen=True, slots=True)
class _Timings:
    """The metered summarizer's hot-path and background counters when a replay starts."""

    hot_calls: int = 0
    hot_s: float = 0.0
    background_calls: int = 0
    background_s: float = 0.0

    @classmethod
    def of(cls, llm: MeteredLLM | None) -> _Timings:
        if llm is None:
            return cls()
        return cls(llm.hot_calls, llm.hot_s, llm.background_calls, llm.background_s)

    def fill(self, stats: ReplayStats, llm: MeteredLLM | None) -> None:
        """Set ``stats``' timings to what ``llm`` recorded since."""
        if llm is None:
            return
        stats.summarizer_hot_calls = llm.hot_calls - self.hot_calls
        stats.summarizer_hot_s = llm.hot_s - self.hot_s
        stats.summarizer_background_calls = llm.background_calls - self.background_calls
        stats.summarizer_background_s = llm.background_s - self.background_s


@dataclass(frozen=True, slots=True)
class FileReplay:
    """One conversation replayed with no compaction and through each strategy.

    Attributes:
        name: The file (or the demo) the conversation came from.
        messages: Messages in the recording.
        baseline: The replay with no compaction at all.
        compacted: One replay per strategy, in the order they were given.

    Example:
        >>> FileReplay("demo", 3, ReplayStats(), (ReplayStats(),)).compacted[0].calls
        0
    """

    name: str
    messages: int
    baseline: ReplayStats
    compacted: tuple[ReplayStats, ...]
