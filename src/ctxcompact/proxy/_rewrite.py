"""The proxy's decision for one request body: maybe compact, transform, report.

Stateless by design: one :class:`~ctxcompact.CompactionController` serves every request,
each with a fresh :class:`~ctxcompact.ControllerState`, so the decision depends on the
request alone and any number of proxies behind a load balancer rewrite the same request the
same way. The order is the controller's :meth:`~ctxcompact.CompactionController.step`, the
same as the agent's and the replay engine's.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from .._controller.events import strategy_name
from .._controller.problems import Problem
from .._controller.state import ControllerState
from .._formats.anthropic import from_anthropic, to_anthropic
from .._formats.openai_chat import from_openai, to_openai
from .._history.messages import Message
from ._ahead import AheadSummaries
from ._json import compact_json
from ._responses import responses_codec
from ._reuse import prefix_keys, remember_rewrite, reuse_rewrites

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .._contract.protocols import SummaryAhead
    from .._controller.controller import CompactionController
    from .._controller.events import CompactionEvent
    from .._tokens.counters import TokenCounter
    from ..store._records import OriginalsStore
    from ._recall import Recall
    from ._windows import ModelWindows

__all__ = [
    "Codec",
    "RewriteReport",
    "Rewriter",
    "codec",
    "max_output_tokens",
    "over_window",
    "raw_count",
]

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
        tokens_before: Estimated prompt tokens of the request as received (``None`` when
            the proxy could not read its history: the header then says ``tokens=unknown``).
        tokens_after: Estimated prompt tokens of the request as forwarded.
        messages_before: Messages of the request as received: its history as the proxy reads
            it (an Anthropic ``system`` or a Responses ``instructions`` is one message), else
            the length of its raw ``messages`` or ``input`` list.
        messages_after: Messages of the request as forwarded.
        problems: What went wrong, as fields (:class:`~ctxcompact.Problem`): why nothing was
            done (``skipped``, ``failed``), and any transform that raised and was skipped
            (the other transforms still applied). The header shows their fields only.
        retried: How many times the request was cut and sent again after the upstream
            answered that it was over the context window (:mod:`._retry`); the action is then
            ``compacted`` and the counts are those of the request finally sent.
        window: The window those retries compacted against.
        summarizer: In the header as ``summarizer=unavailable`` or ``summarizer=failed``.

    Example:
        >>> RewriteReport("unchanged", "ToolResultHiding", 10, 10, 2, 2).header()
        'action=unchanged; strategy=ToolResultHiding; tokens=10->10; messages=2->2'
    """

    action: str
    strategy: str | None
    tokens_before: int | None
    tokens_after: int | None
    messages_before: int
    messages_after: int
    problems: tuple[Problem, ...] = ()
    retried: int = 0
    window: int | None = None
    recall_namespace: str | None = None
    """Set when the recall tool was offered: whose originals its calls read (not a header)."""
    recall_added: bool = False
    """The proxy added the recall tool (the client did not offer one of that name): its
    calls must never reach the client (not a header)."""
    recall_room: int | None = None
    """Tokens the recall rounds may add to the request as forwarded and stay inside the
    window it was compacted for: the window less its tokens and its answer budget
    (``max_tokens``, else the reserve). ``None`` when recall was not offered (not a
    header)."""
    summarizer: str | None = None
    """``unavailable`` when the summarizer's circuit breaker refused a call (the request went
    without the summary, the cheaper tiers applied), ``failed`` when a call failed as in an
    outage (:attr:`ctxcompact.CompactionEvent.summarizer`)."""
    over_window: int | None = None
    """The window the request as forwarded is still estimated over (its tokens plus its
    ``max_tokens``), when it is: the header says ``over_window=W``. ``None`` when it fits or
    no window applies."""
    compaction: CompactionEvent | None = None
    """The compaction event, when the trigger fired (for the metrics; not a header)."""

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
        tokens = (
            f"{self.tokens_before}->{self.tokens_after}"
            if self.tokens_before is not None and self.tokens_after is not None
            else "unknown"
        )
        parts = [
            f"action={self.action}",
            f"strategy={self.strategy}",
            f"tokens={tokens}",
            f"messages={self.messages_before}->{self.messages_after}",
        ]
        if self.over_window is not None:
            parts.append(f"over_window={self.over_window}")
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
        recall: Offers the recall tool on the requests it changed (``[store] recall``), on
            every route; not on a Responses request that continues a conversation the
            upstream keeps (``previous_response_id``, ``conversation``), whose earlier turns
            the proxy neither sees nor could send back.
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
        counter = controller.token_counter if controller is not None else None
        if counter is None and per_model is not None:
            counter = per_model.counter
        assert counter is not None  # one or the other, checked above
        self.counter: TokenCounter = counter
        """Counts the requests it forwards unchanged (``skipped``) too."""
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
            return None, self._skipped(found, provider, body)
        decode, encode = found
        if self.per_model is not None:
            chosen = self.per_model(body.get("model"))
            if isinstance(chosen, Problem):
                return None, self._skipped(chosen, provider, body, decode)
            controller = chosen
        else:
            assert self.controller is not None  # __init__: one or the other
            controller = self.controller
        max_tokens = max_output_tokens(body)
        name = self.strategy_name
        try:
            history = decode()
        except ValueError as exc:  # FormatError: let the upstream answer the malformed request
            unreadable = Problem.raised("unreadable_messages", exc)
            return None, self._skipped(unreadable, provider, body)
        counter = controller.token_counter
        store = controller.store
        namespace = caller if caller is not None else controller.store_namespace
        # per request: the proxy keeps nothing between requests (but what the store keeps),
        # so nothing runs in the background of this state: the store holds those summaries
        state = ControllerState(
            namespace=namespace if store is not None else None, background=False
        )
        received, reused = history, 0
        # A compaction made for one window is not the one another window needs (with no
        # window configured, each model's): kept rewrites are per caller and per window.
        scope = f"window={controller.max_context_size}"
        keys: list[str] | None = None  # prefix_keys(received, scope): once per request
        if self.reuse_summaries and store is not None:
            keys = prefix_keys(received, scope)
            history, reused = await reuse_rewrites(
                store, namespace, history, scope=scope, keys=keys
            )
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
            made_ahead = await self._offer_ahead(
                controller, store, namespace, history, state, reserved, scope
            )
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
            await remember_rewrite(
                store, namespace, received, reused, history, step.history, scope=scope, keys=keys
            )
        if self.reuse_summaries and store is not None and (made_ahead is None or step.compacted):
            self.ahead.start(
                controller,
                store,
                namespace,
                step.history,
                state=state,
                reserved_context_size=reserved,
                scope=scope,
            )
        request: Sequence[Message] = step.request
        history = received
        n = len(history)
        window = controller.max_context_size
        if not _differs(request, history):
            action = "failed" if failed else "unchanged"
            return None, RewriteReport(
                action,
                name,
                before,
                before,
                n,
                n,
                tuple(problems),
                summarizer=summarizer,
                over_window=over_window(before, max_tokens, window),
                compaction=event,
            )
        try:
            new_body = encode(request)
        except ValueError as exc:
            # A strategy may produce what the request's format cannot say (a system message
            # mid-history has no place in Anthropic's): fail open without it.
            problems.append(Problem.raised("cannot_encode", exc, source=name))
            logger.warning("proxy: %s's output cannot be sent in this format", name)
            return None, RewriteReport(
                "failed",
                name,
                before,
                before,
                n,
                n,
                tuple(problems),
                summarizer=summarizer,
                over_window=over_window(before, max_tokens, window),
                compaction=event,
            )
        compacted = step.compacted or reused
        action = "compacted" if compacted else "failed" if failed else "transformed"
        after = controller.token_count(request, state=state)  # reuses the kept estimates
        offered = (
            self.recall is not None
            and store is not None
            and not step.store_problems
            and body.get("previous_response_id") is None
            and body.get("conversation") is None
        )
        added = False
        answer_room = max_tokens if max_tokens is not None else controller.reserved_context_size
        if offered and self.recall is not None:
            new_body, added = self.recall.offer(new_body, provider)
        return new_body, RewriteReport(
            action,
            name,
            before,
            after,
            n,
            len(request),
            tuple(problems),
            recall_namespace=namespace if offered else None,
            recall_added=added,
            recall_room=window - after - answer_room if offered else None,
            summarizer=summarizer,
            over_window=over_window(after, max_tokens, window),
            compaction=event,
        )

    async def _offer_ahead(
        self,
        controller: CompactionController,
        store: OriginalsStore,
        namespace: str,
        history: Sequence[Message],
        state: ControllerState,
        reserved: int | None,
        scope: str,
    ) -> SummaryAhead | None:
        """Offer ``state`` the summary made ahead for ``history`` that the store keeps, when
        the history is near enough its trigger for one to exist; returns it."""
        if not controller.ahead_due(history, state=state, reserved_context_size=reserved):
            return None
        ahead = await self.ahead.find(store, namespace, history, scope=scope)
        if ahead is not None:
            controller.offer_ahead(history, ahead, state=state)
        return ahead

    def _skipped(
        self,
        why: Problem,
        provider: str,
        body: Body,
        decode: Callable[[], list[Message]] | None = None,
    ) -> RewriteReport:
        """The report of a request forwarded as received: its real counts, when it can be
        read (the tokens are ``None`` when it cannot)."""
        history: list[Message] | None = None
        try:
            history = decode() if decode is not None else _unframed(provider, body)
        except ValueError:  # FormatError: the upstream will say what is wrong with it
            history = None
        name = self.strategy_name
        if history is None:
            n = raw_count(provider, body)
            tokens = 0 if n == 0 else None
            return RewriteReport("skipped", name, tokens, tokens, n, n, (why,))
        tokens = self.counter.count(history)
        n = len(history)
        return RewriteReport("skipped", name, tokens, tokens, n, n, (why,))


def over_window(tokens: int, max_output: int | None, window: int) -> int | None:
    """``window`` when ``tokens`` and the answer budget do not fit in it, else ``None``.

    Example:
        >>> over_window(900, 200, 1000), over_window(900, None, 1000)
        (1000, None)
    """
    return window if tokens + (max_output or 0) > window else None


def raw_count(provider: str, body: Body) -> int:
    """The length of the body's raw ``messages`` (``input`` for Responses) list: what a
    report says of a body whose history cannot be read (a string ``input`` is one).

    Example:
        >>> raw_count("responses", {"input": "hi"}), raw_count("openai", {"messages": 3})
        (1, 0)
    """
    raw = body.get("input" if provider == "responses" else "messages")
    if isinstance(raw, list):
        return len(raw)
    return 1 if provider == "responses" and isinstance(raw, str) else 0


def _unframed(provider: str, body: Body) -> list[Message] | None:
    """The history of a body the codec declines (a Responses string ``input``), or ``None``."""
    text = body.get("input")
    if provider != "responses" or not isinstance(text, str):
        return None
    instructions = body.get("instructions")
    head = [Message.system(instructions)] if isinstance(instructions, str) else []
    return [*head, Message.user(text)]


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
    """Compact JSON, UTF-8, as the SDKs send it (:func:`~ctxcompact.proxy._json.compact_json`)."""
    return compact_json(body)
