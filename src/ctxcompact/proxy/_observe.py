"""Each request observed: counted once its answer is sent, and its span (when traced) ended.

:class:`ObserveRequests` is an ASGI middleware inside the proxy's Starlette app. It puts an
:class:`Observation` in the request's scope; the route fills it in (the route, the outcome, the
final :class:`~ctxcompact.proxy._rewrite.RewriteReport`), and the middleware records it in
:class:`~ctxcompact.proxy._metrics.ProxyMetrics` and ends the request's span just before the
last byte of the answer goes (or when the app returns without one: an answer cut off), so a
client that has its whole answer finds it counted.

The request span (:func:`start_request_span`) is an OpenTelemetry GenAI inference span: the
proxy is the client of the upstream model. It exists only when OpenTelemetry is installed and
the application configured it (:mod:`ctxcompact._controller.tracing`); the controller's
compaction span is its child.
"""

from __future__ import annotations

import contextlib
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from .._controller.problems import shown_name
from .._controller.tracing import tracer
from ._rewrite import max_output_tokens

if TYPE_CHECKING:
    from collections.abc import Iterator

    from opentelemetry.trace import Span
    from starlette.requests import Request
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    from ._metrics import ProxyMetrics
    from ._rewrite import Body, RewriteReport

__all__ = [
    "OBSERVATION",
    "Observation",
    "ObserveRequests",
    "observation",
    "request_span_attributes",
    "start_request_span",
    "using",
]

OBSERVATION = "ctxcompact.observation"
"""The scope key of a request's :class:`Observation`."""

REQUEST_SPAN_OPERATION = "chat"
"""``gen_ai.operation.name`` of the request span: all three routes are chat inference."""

_PROVIDERS = {"chat_completions": "openai", "responses": "openai", "messages": "anthropic"}
_UNSAFE_MODEL = re.compile(r"[^\w.:/@+-]")


@dataclass(slots=True)
class Observation:
    """What one request did, filled in by the route.

    Attributes:
        started_ns: When it arrived (``time.time_ns()``, the span's start).
        route: The ``route`` label; ``None`` for what is not counted (``GET /metrics``).
        outcome: The ``outcome`` label: the report's action, ``forwarded`` (another path),
            ``rejected`` (the proxy answered 4xx itself, nothing forwarded) or
            ``upstream_error`` (it answered 502/504 itself).
        report: The final report of a chat request.
        status: The status the client got (read from the answer as it goes out).
        error_type: What failed, for the span's ``error.type``.
        span: The request's span, when one records.
    """

    started_ns: int
    route: str | None = None
    outcome: str = "rejected"
    report: RewriteReport | None = None
    status: int | None = None
    error_type: str | None = None
    span: Span | None = None
    done: bool = False


def observation(request: Request) -> Observation:
    """The request's observation (a detached one when the middleware is not in front)."""
    found = request.scope.get(OBSERVATION)
    return found if isinstance(found, Observation) else Observation(time.time_ns())


class ObserveRequests:
    """ASGI middleware: an :class:`Observation` per HTTP request, recorded when it is done."""

    def __init__(self, app: ASGIApp, *, metrics: ProxyMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        seen = Observation(time.time_ns())
        scope[OBSERVATION] = seen

        async def observed(message: Message) -> None:
            kind = message["type"]
            if kind == "http.response.start":
                seen.status = message["status"]
            elif kind == "http.response.body" and not message.get("more_body", False):
                # Recorded before the last byte goes: a client that has the whole answer
                # finds it counted.
                self._done(seen)
            await send(message)

        try:
            await self.app(scope, receive, observed)
        finally:
            self._done(seen)  # an answer cut off, or none at all

    def _done(self, seen: Observation) -> None:
        if seen.done:
            return
        seen.done = True
        if seen.route is not None:
            self.metrics.request(seen.route, seen.outcome, seen.report)
        if seen.span is not None:
            _end(seen.span, seen)


def start_request_span(seen: Observation, route: str, body: Body, upstream: str) -> None:
    """Start ``seen``'s span, when OpenTelemetry records one (see the module docs)."""
    found = tracer()
    if found is None:
        return
    from opentelemetry.trace import SpanKind

    model = body.get("model")
    shown = _UNSAFE_MODEL.sub("_", model)[:128] if isinstance(model, str) and model else None
    name = f"{REQUEST_SPAN_OPERATION} {shown}" if shown else REQUEST_SPAN_OPERATION
    span = found.start_span(name, kind=SpanKind.CLIENT, start_time=seen.started_ns)
    if not span.is_recording():
        return
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": REQUEST_SPAN_OPERATION,
        "gen_ai.provider.name": _PROVIDERS.get(route, "openai"),
        "ctxcompact.route": route,
    }
    if shown:
        attributes["gen_ai.request.model"] = shown
    max_tokens = max_output_tokens(body)
    if max_tokens is not None:
        attributes["gen_ai.request.max_tokens"] = max_tokens
    if isinstance(body.get("stream"), bool):
        attributes["gen_ai.request.stream"] = body["stream"]
    try:
        url = httpx.URL(upstream)
        attributes["server.address"] = url.host
        if url.port is not None:
            attributes["server.port"] = url.port
    except (httpx.InvalidURL, ValueError):
        pass
    span.set_attributes(attributes)
    seen.span = span


@contextlib.contextmanager
def using(span: Span | None) -> Iterator[None]:
    """``span`` as the current span inside the block (the compaction span's parent)."""
    if span is None:
        yield
        return
    from opentelemetry.trace import use_span

    with use_span(span, end_on_exit=False, record_exception=False):
        yield


def request_span_attributes(seen: Observation) -> dict[str, Any]:
    """The attributes a request span gets when it ends (see the README's list)."""
    attributes: dict[str, Any] = {"ctxcompact.outcome": seen.outcome}
    if seen.status is not None:
        attributes["http.response.status_code"] = seen.status
    report = seen.report
    if report is not None:
        attributes.update(
            {
                "ctxcompact.action": report.action,
                "ctxcompact.strategy": shown_name(report.strategy),
                "ctxcompact.messages_before": report.messages_before,
                "ctxcompact.messages_after": report.messages_after,
                "ctxcompact.retried": report.retried,
                "ctxcompact.over_window": report.over_window is not None,
                "ctxcompact.recall_offered": report.recall_namespace is not None,
            }
        )
        if report.tokens_before is not None and report.tokens_after is not None:
            attributes["ctxcompact.tokens_before"] = report.tokens_before
            attributes["ctxcompact.tokens_after"] = report.tokens_after
        if report.window is not None:
            attributes["ctxcompact.window"] = report.window
        if report.problems:
            attributes["ctxcompact.problems"] = tuple(p.kind for p in report.problems)
    error = seen.error_type
    if error is None and seen.status is not None and seen.status >= 400:
        error = str(seen.status)  # the HTTP convention: the status code as the error type
    if error is not None:
        attributes["error.type"] = error
    return attributes


def _end(span: Span, seen: Observation) -> None:
    attributes = request_span_attributes(seen)
    span.set_attributes(attributes)
    if "error.type" in attributes:
        from opentelemetry.trace import Status, StatusCode

        span.set_status(Status(StatusCode.ERROR))
    span.end()
