"""Test doubles for code built on ctxcompact: a scripted LLM and a function-backed strategy.

They need no network and no SDK, and the library's own tests use them::

    llm = ScriptedLLM("a summary", Completion(Message.assistant("done"), usage=Usage(900, 12)))
    strategy = FunctionStrategy(lambda ctx: ctx.history[-2:])
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ._contract import CompactionContext, CompactionOutput, Completion
from ._messages import Message

if TYPE_CHECKING:
    from ._contract import ToolSpec

__all__ = ["FunctionStrategy", "LLMRequest", "ScriptedLLM", "ScriptedResponse"]


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
