"""The proxy's decision for one request body: transform, maybe compact, report.

Stateless by design: every request gets a fresh :class:`~ctxcompact.CompactionController`,
so the decision depends on the request alone and any number of proxies behind a load
balancer rewrite the same request the same way.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._anthropic_format import from_anthropic, to_anthropic
from .._controller import CompactionController
from .._events import strategy_name
from .._openai_format import from_openai, to_openai

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .._contract import LLM, CompactionStrategy
    from .._messages import Message
    from .._tokens import TokenCounter

__all__ = ["RewriteReport", "Rewriter"]

logger = logging.getLogger("ctxcompact.proxy")

Body = dict[str, Any]


@dataclass(frozen=True, slots=True)
class RewriteReport:
    """What the proxy did to one request, sent back in the ``x-ctxcompact`` header.

    Attributes:
        action: ``compacted`` (the strategy ran), ``transformed`` (only the per-request
            transforms changed it), ``unchanged``, ``skipped`` (the body was not a chat
            request the proxy understands: forwarded as received) or ``failed`` (the strategy
            raised, produced an invalid history or one the format cannot express: forwarded
            without its changes).
        strategy: The strategy's class name.
        tokens_before: Estimated prompt tokens of the request as received.
        tokens_after: Estimated prompt tokens of the request as forwarded.
        error: What went wrong: why nothing was done (``skipped``, ``failed``), and any
            transform that raised and was skipped (the other transforms still applied).

    Example:
        >>> RewriteReport("unchanged", "ToolResultHiding", 10, 10, 2, 2).header()
        'action=unchanged; strategy=ToolResultHiding; tokens=10->10; messages=2->2'
    """

    action: str
    strategy: str | None
    tokens_before: int
    tokens_after: int
    messages_before: int
    messages_after: int
    error: str | None = None

    def header(self) -> str:
        """The ``x-ctxcompact`` header value: ``key=value`` pairs separated by ``; ``."""
        parts = [
            f"action={self.action}",
            f"strategy={self.strategy}",
            f"tokens={self.tokens_before}->{self.tokens_after}",
            f"messages={self.messages_before}->{self.messages_after}",
        ]
        if self.error:
            # Header values must be one line of visible ASCII.
            safe = " ".join(self.error.split()).encode("ascii", "replace").decode("ascii")
            parts.append(f"error={safe[:300]}")
        return "; ".join(parts)


class Rewriter:
    """Applies the configured transforms and strategy to OpenAI and Anthropic request bodies.

    Args:
        strategy: The triggered compaction strategy.
        max_context_size: The model window the trigger compares against.
        reserved_context_size: Tokens kept free when the request names no ``max_tokens``.
        token_counter: Estimates the tokens of a request.
        llm: The summarizer model for strategies that need one.
        transforms: Per-request transforms (Schema 1 masking, truncation), applied first.

    Example:
        >>> from ctxcompact.strategies import ToolResultHiding
        >>> from ctxcompact import HeuristicTokenCounter
        >>> r = Rewriter(ToolResultHiding(), max_context_size=1000, reserved_context_size=100,
        ...              token_counter=HeuristicTokenCounter())
    """

    def __init__(
        self,
        strategy: CompactionStrategy,
        *,
        max_context_size: int,
        reserved_context_size: int,
        token_counter: TokenCounter,
        llm: LLM | None = None,
        transforms: Sequence[CompactionStrategy] = (),
    ) -> None:
        self.strategy = strategy
        self.max_context_size = max_context_size
        self.reserved_context_size = reserved_context_size
        self.token_counter = token_counter
        self.llm = llm
        self.transforms = tuple(transforms)

    async def rewrite_openai(self, body: Body) -> tuple[Body | None, RewriteReport]:
        """Rewrite a Chat Completions body. ``None`` means: forward the original bytes."""
        raw = body.get("messages")
        if not isinstance(raw, list):
            return None, self._skipped("body has no 'messages' list")

        def encode(history: Sequence[Message]) -> Body:
            return {**body, "messages": to_openai(history)}

        return await self._rewrite(lambda: from_openai(raw), encode, _max_tokens(body))

    async def rewrite_anthropic(self, body: Body) -> tuple[Body | None, RewriteReport]:
        """Rewrite a Messages API body. ``None`` means: forward the original bytes."""
        raw = body.get("messages")
        if not isinstance(raw, list):
            return None, self._skipped("body has no 'messages' list")

        def encode(history: Sequence[Message]) -> Body:
            system, messages = to_anthropic(history)
            out = {k: v for k, v in body.items() if k != "system"}
            if system is not None:
                out["system"] = system
            out["messages"] = messages
            return out

        return await self._rewrite(
            lambda: from_anthropic(raw, system=body.get("system")), encode, _max_tokens(body)
        )

    async def _rewrite(
        self,
        decode: Callable[[], list[Message]],
        encode: Callable[[Sequence[Message]], Body],
        max_tokens: int | None,
    ) -> tuple[Body | None, RewriteReport]:
        name = strategy_name(self.strategy)
        try:
            history = decode()
        except ValueError as exc:  # FormatError: let the upstream answer the malformed request
            return None, self._skipped(f"messages not understood: {exc}")
        before = self.token_counter.count(history)
        controller = CompactionController(
            self.strategy,
            max_context_size=self.max_context_size,
            # A max_tokens as large as the window cannot fit at all; the controller needs a
            # reserve below the window, and the trigger then fires on any history.
            reserved_context_size=(
                min(max_tokens, self.max_context_size - 1)
                if max_tokens is not None
                else self.reserved_context_size
            ),
            token_counter=self.token_counter,
            llm=self.llm,
            transforms=self.transforms,
        )
        # A transform that raises is skipped by the controller (the others still apply) and
        # listed in last_transform_errors, reported below.
        sent: Sequence[Message] = await controller.prepare_request(
            history, max_output_tokens=max_tokens
        )
        skipped = [f"transform {e}" for e in controller.last_transform_errors]
        compacted = await controller.maybe_compact(sent)
        event = controller.last_event
        errors = list(skipped)
        if event is not None and event.status in ("failed", "rejected"):
            errors.append(event.error or event.status)
        error = "; ".join(errors) or None
        failed = False
        if compacted is not sent:
            try:
                body = encode(compacted)
            except ValueError as exc:
                # A strategy may produce what the request's format cannot say (a system
                # message mid-history has no place in Anthropic's): fail open without it.
                unsendable = f"{name}'s output cannot be sent in this format: {exc}"
                logger.warning("proxy: %s", unsendable)
                error = "; ".join([*skipped, unsendable])
                failed = True
            else:
                after = self.token_counter.count(compacted)
                return body, RewriteReport(
                    "compacted", name, before, after, len(history), len(compacted), error
                )
        failed = failed or (event is not None and event.status in ("failed", "rejected"))
        transformed = _differs(sent, history)
        if not transformed:
            action = "failed" if failed else "unchanged"
            return None, RewriteReport(
                action, name, before, before, len(history), len(history), error
            )
        report = RewriteReport(
            "failed" if failed else "transformed",
            name,
            before,
            self.token_counter.count(sent),
            len(history),
            len(sent),
            error,
        )
        return encode(sent), report

    def _skipped(self, why: str) -> RewriteReport:
        return RewriteReport("skipped", strategy_name(self.strategy), 0, 0, 0, 0, why)


def _max_tokens(body: Body) -> int | None:
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _differs(a: Sequence[Message], b: Sequence[Message]) -> bool:
    return len(a) != len(b) or any(x is not y and x != y for x, y in zip(a, b, strict=True))


def dumps(body: Body) -> bytes:
    """Compact JSON, UTF-8, as the SDKs send it."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
