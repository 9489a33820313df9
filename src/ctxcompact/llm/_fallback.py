"""A chain of models: the first that answers writes the summary.

``[compaction.llm]`` names the summarizer and, in ``fallbacks``, the models to try when it
fails: a cheap compaction model first, a larger or more reliable one after it.
:func:`ctxcompact.wire` wraps each in its own circuit breaker (:mod:`._breaker`), so a model
that is down is skipped at once (its breaker refuses the call unsent) until it recovers.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .._contract.protocols import has_context_window
from ..exceptions import ArgumentError, LLMError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._contract.protocols import LLM, Completion, ToolSpec
    from .._history.messages import Message

__all__ = ["FallbackLLM"]

logger = logging.getLogger("ctxcompact.llm")


class FallbackLLM:
    """Try each model in turn until one answers; an :class:`~ctxcompact.LLM` itself.

    A call goes to the first model; when it raises an
    :class:`~ctxcompact.exceptions.LLMError` (down, refused by its breaker, rate-limited,
    too long for its window, a bad key, a malformed answer), the same request goes to the
    next, and so on. The last model's error is raised when none answers. Anything else (a
    programming error, a cancellation) propagates at once.

    Its window (``WindowedLLM``) is the smallest any model of the chain states, so a request
    fitted to it fits whichever model answers it (``None`` when none states one).

    Args:
        models: The models, in the order they are tried (at least one).

    Example:
        >>> import asyncio
        >>> from ctxcompact import Message
        >>> from ctxcompact.exceptions import LLMConnectionError
        >>> from ctxcompact.testing import ScriptedLLM
        >>> chain = FallbackLLM([ScriptedLLM(LLMConnectionError("down")), ScriptedLLM("hi")])
        >>> asyncio.run(chain.complete([Message.user("hello")])).message.text
        'hi'
    """

    def __init__(self, models: Sequence[LLM]) -> None:
        if not models:
            raise ArgumentError("models", "a fallback chain needs at least one model")
        self.models = tuple(models)

    def __repr__(self) -> str:
        return f"FallbackLLM({list(self.models)!r})"

    @property
    def context_window(self) -> int | None:
        """The smallest window a model of the chain states (``None`` when none states one)."""
        windows = [
            m.context_window
            for m in self.models
            if has_context_window(m) and m.context_window is not None
        ]
        return min(windows) if windows else None

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        system: str | None = None,
        tools: Sequence[ToolSpec] | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        """The first answer of the chain's models, in order.

        Raises:
            LLMError: The last model's error, when every model failed.
        """
        last = len(self.models) - 1
        for k, model in enumerate(self.models):
            try:
                return await model.complete(
                    messages, system=system, tools=tools, max_tokens=max_tokens
                )
            except LLMError as exc:
                if k == last:
                    raise
                # The type only: a provider's error text can echo the request.
                logger.info(
                    "summarizer %d of %d failed (%s); trying the next",
                    k + 1,
                    len(self.models),
                    type(exc).__name__,
                )
        raise AssertionError("unreachable: the loop returns or raises")  # pragma: no cover

    async def aclose(self) -> None:
        """Close every model of the chain that can be closed."""
        for model in self.models:
            close = getattr(model, "aclose", None)
            if close is not None:
                await close()
