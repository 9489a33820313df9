"""Test doubles and checks for code built on ctxcompact.

They need no network and no SDK, and the library's own tests use them:

- :class:`ScriptedLLM`: an LLM that answers from a script and records every call.
- :class:`FunctionStrategy`: a strategy from a function of the context.
- :func:`assert_strategy_invariants` (and :func:`check_strategy_invariants` in async code):
  run a strategy and raise :class:`StrategyInvariantError` (an :class:`AssertionError`)
  naming every invariant of DESIGN.md it breaks.
- :func:`assert_output_invariants`: the same checks on an output you already have.

::

    llm = ScriptedLLM("a summary", Completion(Message.assistant("done"), usage=Usage(900, 12)))
    strategy = FunctionStrategy(lambda ctx: ctx.history[-2:])
    assert_strategy_invariants(MyStrategy(), history)
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._contract.protocols import CompactionContext, CompactionOutput, Completion
from .._defaults import DEFAULT_RESERVED_CONTEXT_SIZE
from .._history.messages import Message
from .._tokens.counters import HeuristicTokenCounter
from ._invariants import INVARIANTS, Invariant, Snapshot, output_problems

if TYPE_CHECKING:
    from .._contract.protocols import LLM, CompactionStrategy, ToolSpec
    from .._tokens.counters import TokenCounter

__all__ = [
    "INVARIANTS",
    "FunctionStrategy",
    "Invariant",
    "LLMRequest",
    "ScriptedLLM",
    "ScriptedResponse",
    "StrategyFunction",
    "StrategyInvariantError",
    "assert_output_invariants",
    "assert_strategy_invariants",
    "check_strategy_invariants",
]


@dataclass(frozen=True, slots=True)
class LLMRequest:
    """One call made to a :class:`ScriptedLLM`, as it was received.

    Attributes:
        messages: The messages passed (a copy of the sequence; the messages themselves are
            immutable).
        system: The ``system`` argument.
        tools: The ``tools`` argument.
        max_tokens: The ``max_tokens`` argument.

    Example:
        >>> LLMRequest((Message.user("hi"),), None, None, None).messages[0].text
        'hi'
    """

    messages: tuple[Message, ...]
    system: str | None
    tools: tuple[ToolSpec, ...] | None
    max_tokens: int | None


ScriptedResponse = Completion | Message | str | BaseException | Callable[[LLMRequest], Completion]
"""One scripted answer: a completion, an assistant message, assistant text, an exception to
raise, or a function of the request returning a completion."""


class ScriptedLLM:
    """An :class:`~ctxcompact.LLM` that answers from a script, in order, and records calls.

    Each response is a :class:`~ctxcompact.Completion` (returned as is), a
    :class:`~ctxcompact.Message` (wrapped in a completion without usage), a ``str`` (an
    assistant message with that text), an exception instance (raised), or a callable taking
    the :class:`LLMRequest` and returning a completion. A call after the script is used up
    raises :class:`AssertionError` naming how many responses there were.

    Attributes:
        requests: Every call received, oldest first (failed ones included).

    Example:
        >>> import asyncio
        >>> llm = ScriptedLLM("first", "second")
        >>> asyncio.run(llm.complete([Message.user("hi")])).message.text
        'first'
        >>> llm.requests[0].messages[0].text, llm.remaining
        ('hi', 1)
    """

    def __init__(self, *responses: ScriptedResponse) -> None:
        self._responses = list(responses)
        self._next = 0
        self.requests: list[LLMRequest] = []

    @property
    def remaining(self) -> int:
        """How many scripted responses are left."""
        return len(self._responses) - self._next

    def __repr__(self) -> str:
        return f"ScriptedLLM({len(self._responses)} responses, {self.remaining} left)"

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        system: str | None = None,
        tools: Sequence[ToolSpec] | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        """Record the request and return (or raise) the next scripted response."""
        request = LLMRequest(
            tuple(messages), system, tuple(tools) if tools is not None else None, max_tokens
        )
        self.requests.append(request)
        if self._next >= len(self._responses):
            raise AssertionError(
                f"ScriptedLLM ran out of responses: it was scripted with "
                f"{len(self._responses)} and received call {len(self.requests)}"
            )
        response = self._responses[self._next]
        self._next += 1
        if isinstance(response, BaseException):
            raise response
        if isinstance(response, Completion):
            return response
        if isinstance(response, Message):
            return Completion(response)
        if isinstance(response, str):
            return Completion(Message.assistant(response))
        result = response(request)
        if not isinstance(result, Completion):
            raise TypeError(
                f"scripted callable must return a Completion, got {type(result).__name__}"
            )
        return result


StrategyFunction = Callable[[CompactionContext], CompactionOutput | Awaitable[CompactionOutput]]
"""What :class:`FunctionStrategy` wraps: a sync or async function of the context."""


class FunctionStrategy:
    """A :class:`~ctxcompact.CompactionStrategy` from a sync or async function of the context.

    Args:
        fn: ``fn(ctx) -> Sequence[Message] | None`` (or a coroutine function returning that).
        name: The name shown in events and reprs (default: the function's name).

    Attributes:
        calls: The contexts it was run with, oldest first.

    Example:
        >>> import asyncio
        >>> from ctxcompact import CompactionContext
        >>> keep_last = FunctionStrategy(lambda ctx: list(ctx.history[-1:]))
        >>> ctx = CompactionContext([Message.user("a"), Message.user("b")], 10, 100, 10)
        >>> [m.text for m in asyncio.run(keep_last.compact(ctx))]
        ['b']
    """

    def __init__(self, fn: StrategyFunction, *, name: str | None = None) -> None:
        self.fn = fn
        self.name = name or getattr(fn, "__name__", type(fn).__name__)
        self.calls: list[CompactionContext] = []

    def __repr__(self) -> str:
        return f"FunctionStrategy({self.name})"

    async def compact(self, ctx: CompactionContext) -> CompactionOutput:
        """Run the function (awaiting it when it returns an awaitable)."""
        self.calls.append(ctx)
        result = self.fn(ctx)
        if inspect.isawaitable(result):
            return await result
        return result


# -- invariant checks --------------------------------------------------------------------------


class StrategyInvariantError(AssertionError):
    """A strategy's output broke one or more of DESIGN.md's invariants.

    The message names each broken invariant and says where (output and input message
    indices); ``invariants`` lists them, in the order of :data:`INVARIANTS`.

    Attributes:
        strategy: The strategy's ``repr``.
        invariants: The names of the broken invariants.
        details: One sentence per broken invariant, in the same order.

    Example:
        >>> err = StrategyInvariantError("S()", [("causal order", "message 2 moved")])
        >>> err.invariants, str(err)
        (('causal order',), "S() broke invariant 'causal order': message 2 moved")
    """

    def __init__(self, strategy: str, problems: Sequence[tuple[Invariant, str]]) -> None:
        self.strategy = strategy
        self.invariants = tuple(name for name, _ in problems)
        self.details = tuple(detail for _, detail in problems)
        if len(problems) == 1:
            text = f"{strategy} broke invariant {problems[0][0]!r}: {problems[0][1]}"
        else:
            lines = "".join(f"\n- {name!r}: {detail}" for name, detail in problems)
            text = f"{strategy} broke {len(problems)} invariants:{lines}"
        super().__init__(text)


def assert_output_invariants(
    history: Sequence[Message],
    output: object,
    *,
    strategy: object = "the strategy",
    max_new_messages: int = 0,
    keeps_system_messages: bool = True,
) -> None:
    """Check a strategy's ``output`` for ``history`` against every invariant but one.

    The one left out is "input untouched", which needs a copy taken before the run: use
    :func:`assert_strategy_invariants` to check it too. The arguments are theirs.

    Raises:
        StrategyInvariantError: Naming each broken invariant.

    Example:
        >>> h = [Message.system("be brief"), Message.user("hi"), Message.assistant("hello")]
        >>> try:
        ...     assert_output_invariants(h, h[1:])
        ... except AssertionError as exc:
        ...     print(exc)
        the strategy broke invariant 'system messages kept': input message 0 (system) is not in the output
    """  # noqa: E501 - a doctest's output is one line
    problems = output_problems(
        history,
        output,
        max_new_messages=max_new_messages,
        keeps_system_messages=keeps_system_messages,
    )
    if problems:
        raise StrategyInvariantError(
            strategy if isinstance(strategy, str) else repr(strategy), problems
        )


async def check_strategy_invariants(
    strategy: CompactionStrategy,
    history: Sequence[Message] | CompactionContext,
    *,
    token_count: int | None = None,
    max_context_size: int = 200_000,
    reserved_context_size: int = DEFAULT_RESERVED_CONTEXT_SIZE,
    llm: LLM | None = None,
    token_counter: TokenCounter | None = None,
    max_output_tokens: int | None = None,
    max_new_messages: int = 0,
    keeps_system_messages: bool = True,
) -> list[Message] | None:
    """:func:`assert_strategy_invariants` for async code (a test already in an event loop)."""
    if isinstance(history, CompactionContext):
        given = {
            "token_count": token_count,
            "llm": llm,
            "token_counter": token_counter,
            "max_output_tokens": max_output_tokens,
        }
        extra = [k for k, v in given.items() if v is not None]
        if extra or (max_context_size, reserved_context_size) != (
            200_000,
            DEFAULT_RESERVED_CONTEXT_SIZE,
        ):
            raise TypeError(
                "pass either a CompactionContext or a history with context arguments, not "
                f"both (got a context and {extra or 'max/reserved sizes'})"
            )
        ctx = history
    else:
        if token_counter is None:
            token_counter = HeuristicTokenCounter()
        ctx = CompactionContext(
            history,
            token_counter.count(history) if token_count is None else token_count,
            max_context_size,
            reserved_context_size,
            llm=llm,
            token_counter=token_counter,
            max_output_tokens=max_output_tokens,
        )
    snapshot = Snapshot(ctx.history)
    output = await strategy.compact(ctx)
    changed = snapshot.changes(ctx.history)
    problems: list[tuple[Invariant, str]] = [("input untouched", changed)] if changed else []
    problems += output_problems(
        ctx.history,
        output,
        max_new_messages=max_new_messages,
        keeps_system_messages=keeps_system_messages,
    )
    if problems:
        raise StrategyInvariantError(repr(strategy), problems)
    return None if output is None else list(output)


def assert_strategy_invariants(
    strategy: CompactionStrategy,
    history: Sequence[Message] | CompactionContext,
    *,
    token_count: int | None = None,
    max_context_size: int = 200_000,
    reserved_context_size: int = DEFAULT_RESERVED_CONTEXT_SIZE,
    llm: LLM | None = None,
    token_counter: TokenCounter | None = None,
    max_output_tokens: int | None = None,
    max_new_messages: int = 0,
    keeps_system_messages: bool = True,
) -> list[Message] | None:
    """Run ``strategy`` on ``history`` and check its output keeps every invariant.

    The invariants (DESIGN.md), by the names :class:`StrategyInvariantError` uses:

    - ``returns messages``: the output is ``None`` or a sequence of :class:`Message`.
    - ``input untouched``: the input list and its messages are exactly as before (compared
      with a deep copy taken before the run).
    - ``None for no change``: nothing changed is said with ``None``, not with the input
      list itself or an equal copy.
    - ``causal order``: every output message comes from an input message (the same object,
      a copy with the same tool-call ids, or an equal message), in input order; at most
      ``max_new_messages`` are new (a summary is one).
    - ``tool-call integrity``: tool-call ids and names unchanged, changed arguments still a
      JSON object with the same keys, an assistant message's parallel calls kept together,
      and a kept call keeps all its results right after it (a dropped one drops them all).
    - ``system messages kept`` (unless ``keeps_system_messages=False``): every system and
      developer message is in the output, unchanged.
    - ``valid history``: :func:`~ctxcompact.check_history` finds no kind of problem in the
      output that the input did not already have.

    What a strategy hides, and how, is its own business: contents may change freely.

    Args:
        strategy: Any :class:`~ctxcompact.CompactionStrategy`.
        history: The history, or a whole :class:`~ctxcompact.CompactionContext` (then pass
            no other context argument).
        token_count: The context's ``token_count`` (default: ``token_counter`` counts it).
        max_context_size: The context's window.
        reserved_context_size: The context's reserve.
        llm: The context's LLM (a :class:`ScriptedLLM` for a summarizing strategy).
        token_counter: The context's counter (default: the heuristic).
        max_output_tokens: The context's answer budget.
        max_new_messages: How many messages the strategy may add (documented ones only).
        keeps_system_messages: ``False`` for a strategy documented to rewrite them.

    Returns:
        The output as a list, or ``None`` when the strategy changed nothing.

    Raises:
        StrategyInvariantError: An :class:`AssertionError` naming each broken invariant.
        RuntimeError: Called inside a running event loop (use
            :func:`check_strategy_invariants` there).

    Example:
        >>> drop_oldest = FunctionStrategy(lambda ctx: list(ctx.history[1:]))
        >>> history = [Message.user("a"), Message.assistant("b"), Message.user("c")]
        >>> [m.text for m in assert_strategy_invariants(drop_oldest, history)]
        ['b', 'c']
        >>> reverse = FunctionStrategy(lambda ctx: list(reversed(ctx.history)))
        >>> try:
        ...     assert_strategy_invariants(reverse, history)
        ... except StrategyInvariantError as exc:
        ...     print(exc.invariants, exc.details[0][:47])
        ('causal order',) output message 1 (assistant) is input message 1
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError(
            "assert_strategy_invariants runs its own event loop; in async code use "
            "'await check_strategy_invariants(...)' with the same arguments"
        )
    return asyncio.run(
        check_strategy_invariants(
            strategy,
            history,
            token_count=token_count,
            max_context_size=max_context_size,
            reserved_context_size=reserved_context_size,
            llm=llm,
            token_counter=token_counter,
            max_output_tokens=max_output_tokens,
            max_new_messages=max_new_messages,
            keeps_system_messages=keeps_system_messages,
        )
    )
