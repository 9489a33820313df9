"""One OpenTelemetry SDK for the whole test session, its spans kept in memory.

OpenTelemetry's global tracer provider can be set once per process, so every test that reads
spans shares this one and empties the exporter first (the ``spans`` fixture).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


class _Listening(InMemorySpanExporter):
    """Keeps spans only while a test listens: the tests after one that set the provider
    compact too, and their spans would pile up for the rest of the session."""

    active = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return super().export(spans) if self.active else SpanExportResult.SUCCESS


_EXPORTER: _Listening | None = None


def exporter() -> _Listening:
    """The session's in-memory exporter (the global provider is set on the first call)."""
    global _EXPORTER
    if _EXPORTER is None:
        _EXPORTER = _Listening()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    return _EXPORTER


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The exporter, emptied before and after the test."""
    found = exporter()
    found.clear()
    found.active = True
    try:
        yield found
    finally:
        found.active = False
        found.clear()


def named(exported: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    """The finished spans called ``name``, in the order they ended."""
    return [s for s in exported.get_finished_spans() if s.name == name]
