"""The proxy's decision for one request body: maybe compact, transform, report.

Stateless by design: one :class:`~ctxcompact.CompactionController` serves every request,
each with a fresh :class:`~ctxcompact.ControllerState`, so the decision depends on the
request alone and any number of proxies behind a load balancer rewrite the same request the
same way. The order is the controller's :meth:`~ctxcompact.CompactionController.step`, the
same as the agent's and the replay engine's.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from .._controller.events import strategy_name
from .._controller.problems import Problem
from .._controller.state import ControllerState
from .._formats.anthropic import from_anthropic, to_anthropic
from .._formats.openai_chat import from_openai, to_openai
from ._ahead import AheadSummaries
from ._responses import responses_codec
from ._reuse import remember_rewrite, reuse_rewrites

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .._contract.protocols import SummaryAhead
    from .._controller.controller import CompactionController
    from .._history.messages import Message
    from ..store._records import OriginalsStore
    from ._recall import Recall
    from ._windows import ModelWindows

__all__ = ["Codec", "RewriteReport", "Rewriter", "codec", "max_output_tokens"]

logger = logging.getLogger("ctxcompact.proxy")

Body = dict[str, Any]

NO_MESSAGES = Problem.fixed("no_messages")


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
        problems: What went wrong, as fields (:class:`~ctxcompact.Problem`): why nothing was
            done (``skipped``, ``failed``), and any transform that raised and was skipped
            (the other transforms still applied). The header shows their fields only.
        retried: How many times the request was compacted and sent again after the upstream
            answered that it was over the context window (:mod:`._retry`).
        window: The window those retries compacted against.
        summarizer: In the header as ``summarizer=unavailable`` or ``summarizer=failed``.

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
    problems: tuple[Problem, ...] = ()
    retried: int = 0
    window: int | None = None
    recall_namespace: str | None = None
    """Set when the recall tool was offered: whose originals its calls read (not a header)."""
    summarizer: str | None = None
    """``unavailable`` when the summarizer's circuit breaker refused a call (the request went
    without the summary, the cheaper tiers applied), ``failed`` when a call failed as in an
    outage (:attr:`ctxcompact.CompactionEvent.summarizer`)."""

    @property
    def error(self) -> str | None:
        """The problems in words, for DEBUG logs: :attr:`Problem.explained
        <ctxcompact.Problem.explained>` (with exception messages), ``None`` when none."""
        return "; ".join(p.explained for p in self.problems) or None

    def header(self) -> str:
        """The ``x-ctxcompact`` header value: ``key=value`` pairs separated by ``; ``.

        ``error=`` gives each problem's fields (:attr:`Problem.shown
        <ctxcompact.Problem.shown>`: kind, strategy or transform name, exception type name),
        never an exception's message.

        Example:
            >>> failed = Problem.raised("strategy_raised", RuntimeError("user said hi"))
            >>> header = RewriteReport("failed", "S", 9, 9, 2, 2, (failed,)).header()
            >>> header.split("; ")[-1]
            'error=strategy raised RuntimeError'
        """
        parts = [
            f"action={self.action}",
            f"strategy={self.strategy}",
            f"tokens={self.tokens_before}->{self.tokens_after}",
            f"messages={self.messages_before}->{self.messages_after}",
        ]
        if self.problems:
            shown = "; ".join(dict.fromkeys(p.shown for p in self.problems))
            # Header values must be one line of visible ASCII.
            safe = " ".join(shown.split()).encode("ascii", "replace").decode("ascii")
            parts.append(f"error={safe[:300]}")
        if self.retried:
            parts.append(f"retried={self.retried}; window={self.window}")
        if self.summarizer in ("unavailable", "failed"):  # fixed tokens only
            parts.append(f"summarizer={self.summarizer}")
        return "; ".join(parts)


class Rewriter:
    """Applies a controller's strategy and transforms to OpenAI and Anthropic request bodies.

    Args:
        controller: Decides when to compact and how; shared by every request (each gets a
            fresh :class:`~ctxcompact.ControllerState`). ``None`` with ``per_model`` (no
            window is configured).
        per_model: When set, picks the controller for the model a request names instead
            (:class:`~ctxcompact.proxy._windows.ModelWindows`); a
            :class:`~ctxcompact.Problem` it returns is why the request is forwarded unchanged
            (``skipped``).
        recall: Offers the recall tool on Chat Completions and Messages requests it changed
            (``[store] recall``).
        reuse_summaries: With the controller's store, reuse a conversation's earlier
            compaction instead of computing it again (:mod:`ctxcompact.proxy._reuse`), and
            keep its summaries made ahead of time there (:mod:`ctxcompact.proxy._ahead`).

    Example:
        >>> from ctxcompact import CompactionController
        >>> from ctxcompact.strategies import ToolResultHiding
        >>> r = Rewriter(CompactionController(ToolResultHiding(), max_context_size=1000,
        ...                                   reserved_context_size=100))
    """

    def __init__(
        self,
        controller: CompactionController | None,
        *,
        per_model: ModelWindows | None = None,
        recall: Recall | None = None,
        reuse_summaries: bool = False,
    ) -> None:
        shared = controller if controller is not None else per_model
        if shared is None:
            raise TypeError("Rewriter needs a controller or per_model")
        self.controller = controller
        self.per_model = per_model
        self.recall = recall
        self.strategy = shared.strategy
        """The triggered strategy (every window's controller shares it)."""
        self.reuse_summaries = reuse_summaries and shared.store is not None
        self.ahead = AheadSummaries()
        """The summaries being made ahead of time, in the background."""

    async def aclose(self) -> None:
        """Cancel the summaries still being made ahead (the proxy's shutdown)."""
        await self.ahead.aclose()

    @property
    def strategy_name(self) -> str:
        """The triggered strategy's name, as reports give it."""
        return strategy_name(self.strategy)

    @property
    def transform_names(self) -> tuple[str, ...]:
        """The per-request transforms' names, in order (for the proxy's start-up line); with
        per-model windows, those every window's controller builds."""
        if self.controller is not None:
            return tuple(strategy_name(t) for t in self.controller.transforms)
        assert self.per_model is not None  # __init__: one or the other
        return self.per_model.transform_names

    async def rewrite_openai(
        self, body: Body, *, caller: str | None = None
    ) -> tuple[Body | None, RewriteReport]:
        """Rewrite a Chat Completions body. ``None`` means: forward the original bytes.

        ``caller`` is whose originals the request's are in the store
        (:func:`~ctxcompact.proxy._callers.caller_namespace`); ``None``: the controller's
        ``store_namespace``.
        """
        return await self._rewrite(body, codec("openai", body), "openai", caller)

    async def rewrite_anthropic(
        self, body: Body, *, caller: str | None = None
    ) -> tuple[Body | None, RewriteReport]:
        """Rewrite a Messages API body (see :meth:`rewrite_openai`)."""
        return await self._rewrite(body, codec("anthropic", body), "anthropic", caller)

    async def rewrite_responses(
        self, body: Body, *, caller: str | None = None
    ) -> tuple[Body | None, RewriteReport]:
        """Rewrite a Responses API body (see :meth:`rewrite_openai`)."""
        return await self._rewrite(body, codec("responses", body), "responses", caller)

    async def _rewrite(
        self, body: Body, found: Codec | Problem, provider: str, caller: str | None
    ) -> tuple[Body | None, RewriteReport]:
        if isinstance(found, Problem):
            return None, self._skipped(found)
        decode, encode = found
        if self.per_model is not None:
            chosen = self.per_model(body.get("model"))
            if isinstance(chosen, Problem):
                return None, self._skipped(chosen)
            controller = chosen
        else:
            assert self.controller is not None  # __init__: one or the other
            controller = self.controller
        max_tokens = max_output_tokens(body)
        name = self.strategy_name
        try:
            history = decode()
        except ValueError as exc:  # FormatError: let the upstream answer the malformed request
            return None, self._skipped(Problem.raised("unreadable_messages", exc))
        counter = controller.token_counter
        store = controller.store
        namespace = caller if caller is not None else controller.store_namespace
        # per request: the proxy keeps nothing between requests (but what the store keeps),
        # so nothing runs in the background of this state: the store holds those summaries
        state = ControllerState(
            namespace=namespace if store is not None else None, background=False
        )
        received, reused = history, 0
        if self.reuse_summaries and store is not None:
            history, reused = reuse_rewrites(store, namespace, history)
            state.produced.add(received, history)  # kept summaries are not originals
        before = controller.token_count(history, state=state)  # step() reuses this count
        if reused:
            before = counter.count(received)
        # A max_tokens as large as the window cannot fit at all; the trigger needs a reserve
        # below the window, and then fires on any history.
        reserved = (
            min(max_tokens, controller.max_context_size - 1) if max_tokens is not None else None
        )
        made_ahead = None
        if self.reuse_summaries and store is not None:
            made_ahead = self._offer_ahead(controller, store, namespace, history, state, reserved)
        step = await controller.step(
            history,
            max_output_tokens=max_tokens,
            state=state,
            reserved_context_size=reserved,
        )
        problems = list(step.transform_problems)
        event = step.event
        summarizer = event.summarizer if event is not None else None
        failed = event is not None and event.status in ("failed", "rejected")
        if failed and event is not None:
            problems += event.problems
        if step.compacted and self.reuse_summaries and store is not None:
            remember_rewrite(store, namespace, received, reused, history, step.history)
        if self.reuse_summaries and store is not None and (made_ahead is None or step.compacted):
            self.ahead.start(
                controller,
                store,
                namespace,
                step.history,
                state=state,
                reserved_context_size=reserved,
            )
        request: Sequence[Message] = step.request
        history = received
        n = len(history)
        if not _differs(request, history):
            action = "failed" if failed else "unchanged"
            return None, RewriteReport(
                action, name, before, before, n, n, tuple(problems), summarizer=summarizer
            )
        try:
            new_body = encode(request)
        except ValueError as exc:
            # A strategy may produce what the request's format cannot say (a system message
            # mid-history has no place in Anthropic's): fail open without it.
            problems.append(Problem.raised("cannot_encode", exc, source=name))
            logger.warning("proxy: %s's output cannot be sent in this format", name)
            return None, RewriteReport(
                "failed", name, before, before, n, n, tuple(problems), summarizer=summarizer
            )
        compacted = step.compacted or reused
        action = "compacted" if compacted else "failed" if failed else "transformed"
        after = controller.token_count(request, state=state)  # reuses the kept estimates
        offered = (
            self.recall is not None
            and store is not None
            and provider != "responses"  # its tools have another shape: not offered there
            and not step.store_problems
        )
        if offered and self.recall is not None:
            new_body = self.recall.offer(new_body, provider)
        return new_body, RewriteReport(
            action,
            name,
            before,
            after,
            n,
            len(request),
            tuple(problems),
            recall_namespace=namespace if offered else None,
            summarizer=summarizer,
        )

    def _offer_ahead(
        self,
        controller: CompactionController,
        store: OriginalsStore,
        namespace: str,
        history: Sequence[Message],
        state: ControllerState,
        reserved: int | None,
    ) -> SummaryAhead | None:
        """Offer ``state`` the summary made ahead for ``history`` that the store keeps, when
        the history is near enough its trigger for one to exist; returns it."""
        if not controller.ahead_due(history, state=state, reserved_context_size=reserved):
            return None
        ahead = self.ahead.find(store, namespace, history)
        if ahead is not None:
            controller.offer_ahead(history, ahead, state=state)
        return ahead

    def _skipped(self, why: Problem) -> RewriteReport:
        return RewriteReport("skipped", self.strategy_name, 0, 0, 0, 0, (why,))


Codec: TypeAlias = "tuple[Callable[[], list[Message]], Callable[[Sequence[Message]], Body]]"
"""``(decode, encode)``: read a body's history; write a history back into a copy of it."""


def codec(provider: str, body: Body) -> Codec | Problem:
    """How to read the history of a ``provider`` request body and write one back into a copy.

    ``provider`` is ``openai`` (Chat Completions), ``anthropic`` (Messages) or ``responses``.
    A :class:`~ctxcompact.Problem` says why the body is not understood (then it is forwarded
    as is).
    """
    if provider == "responses":
        return responses_codec(body)
    raw = body.get("messages")
    if not isinstance(raw, list):
        return NO_MESSAGES
    if provider == "openai":
        return (lambda: from_openai(raw)), (lambda h: {**body, "messages": to_openai(h)})

    def encode(history: Sequence[Message]) -> Body:
        system, messages = to_anthropic(history)
        out = {k: v for k, v in body.items() if k != "system"}
        if system is not None:
            out["system"] = system
        out["messages"] = messages
        return out

    return (lambda: from_anthropic(raw, system=body.get("system"))), encode


def max_output_tokens(body: Body) -> int | None:
    """The request's answer budget (``max_completion_tokens``, ``max_tokens`` or
    ``max_output_tokens``), when it gives one."""
    for key in ("max_completion_tokens", "max_tokens", "max_output_tokens"):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _differs(a: Sequence[Message], b: Sequence[Message]) -> bool:
    return len(a) != len(b) or any(x is not y and x != y for x, y in zip(a, b, strict=True))


def dumps(body: Body) -> bytes:
    """Compact JSON, UTF-8, as the SDKs send it."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
