"""OpenTelemetry spans, when the application has OpenTelemetry: a no-op otherwise.

ctxcompact uses the OpenTelemetry *API* only (the ``otel`` extra, ``opentelemetry-api``),
the way a library should: the application installs the SDK and an exporter and sets the
global tracer provider; ctxcompact's spans then go wherever the application's go. The API is
imported on the first compaction, not with ``import ctxcompact``; when it is not installed
every function here does nothing. When it is installed but no SDK is configured, its spans do
not record, and no attribute is computed (``is_recording()``).

One span per compaction event (:data:`COMPACTION_SPAN`): the controller opens it around the
strategy's run, so the summarizer's own HTTP spans (when the application instruments httpx)
are its children, and the proxy's request span is its parent. Attributes are counts, fixed
names and kinds (:func:`compaction_attributes`), never message content: a strategy's name goes
through :func:`~ctxcompact._controller.problems.shown_name`, an exception by its type name.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from .problems import shown_name

if TYPE_CHECKING:
    from collections.abc import Iterator

    from opentelemetry.trace import Span, Tracer

    from .events import CompactionEvent

__all__ = [
    "COMPACTION_SPAN",
    "compaction_attributes",
    "compaction_span",
    "describe_compaction",
    "tracer",
]

COMPACTION_SPAN = "ctxcompact.compaction"
"""The name of the span of one compaction event."""

_UNSET: Any = object()
_tracer: Any = _UNSET


def tracer() -> Tracer | None:
    """ctxcompact's tracer, or ``None`` when OpenTelemetry is not installed.

    The tracer comes from the global provider, looked up on each span: an application that
    configures OpenTelemetry after importing ctxcompact (or after its first compaction) gets
    the spans from then on.
    """
    global _tracer
    if _tracer is _UNSET:
        try:
            from opentelemetry import trace
        except ImportError:
            _tracer = None
        else:
            _tracer = trace.get_tracer("ctxcompact", _version())
    return _tracer  # type: ignore[no-any-return]


def _version() -> str:
    # The distribution's, as ``ctxcompact.__version__`` says it (the package itself is a
    # layer above the engine).
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ctxcompact")
    except PackageNotFoundError:
        return "0.0.0"


@contextlib.contextmanager
def compaction_span() -> Iterator[Span | None]:
    """The current span of one compaction, or ``None`` when nothing records it."""
    found = tracer()
    if found is None:
        yield None
        return
    from opentelemetry.trace import SpanKind

    # An exception's message may quote the conversation: none is recorded as a span event
    # (a strategy's own exception never gets here anyway; the controller reports it).
    with found.start_as_current_span(
        COMPACTION_SPAN, kind=SpanKind.INTERNAL, record_exception=False
    ) as span:
        yield span if span.is_recording() else None


def compaction_attributes(
    event: CompactionEvent, *, max_context_size: int, reserved_context_size: int
) -> dict[str, Any]:
    """The attributes of a compaction span (see the README's list).

    Example:
        >>> from ctxcompact import CompactionEvent
        >>> event = CompactionEvent("Hiding", "threshold", "compacted", 900, 300, 40, 40, 0.01)
        >>> attributes = compaction_attributes(
        ...     event, max_context_size=1000, reserved_context_size=100)
        >>> attributes["ctxcompact.tokens_after"], attributes["ctxcompact.cache_break"]
        (300, False)
    """
    attributes: dict[str, Any] = {
        "ctxcompact.strategy": shown_name(event.strategy),
        "ctxcompact.trigger": event.trigger,
        "ctxcompact.status": event.status,
        "ctxcompact.tokens_before": event.tokens_before,
        "ctxcompact.tokens_after": event.tokens_after,
        "ctxcompact.messages_before": event.messages_before,
        "ctxcompact.messages_after": event.messages_after,
        "ctxcompact.messages_rewritten": event.messages_rewritten,
        "ctxcompact.cache_break": event.cache_break,
        "ctxcompact.max_context_size": max_context_size,
        "ctxcompact.reserved_context_size": reserved_context_size,
    }
    if event.summarizer is not None:
        attributes["ctxcompact.summarizer"] = event.summarizer
    if event.problems:
        attributes["ctxcompact.problems"] = tuple(p.kind for p in event.problems)
    problem = event.problem
    if event.status in ("failed", "rejected") and problem is not None:
        # error.type: the exception's type name, else the kind (OpenTelemetry's general
        # convention for a failed operation).
        attributes["error.type"] = shown_name(problem.exception_type or problem.kind)
    return attributes


def describe_compaction(
    span: Span, event: CompactionEvent, *, max_context_size: int, reserved_context_size: int
) -> None:
    """Set the attributes of ``event`` on ``span``, and an error status when it failed or its
    output was rejected (the description: the problem's fields, no message)."""
    span.set_attributes(
        compaction_attributes(
            event, max_context_size=max_context_size, reserved_context_size=reserved_context_size
        )
    )
    problem = event.problem
    if event.status in ("failed", "rejected") and problem is not None:
        from opentelemetry.trace import Status, StatusCode

        span.set_status(Status(StatusCode.ERROR, problem.shown))
