"""OpenTelemetry spans around each compaction of a plain controller (no proxy, no agent):
the SDK's in-memory exporter receives one span per compaction event with its attributes."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from ctxcompact import CompactionContext, CompactionController, Message
from ctxcompact.strategies import ToolResultHiding
from ctxcompact.testing import FunctionStrategy
from tests.helpers.gen import assistant, call, tool, user
from tests.helpers.otel import named

SECRET = "CANARY-tracing-7c1f"
SPAN = "ctxcompact.compaction"


def history(turns: int = 4) -> list[Message]:
    messages = [user(f"task {SECRET}")]
    for i in range(turns):
        output = f"{SECRET} " + "x" * 400
        messages += [assistant(None, call(f"c{i}", "bash")), tool(f"c{i}", output)]
    return messages


async def test_one_span_per_compaction_with_its_event_attributes(
    spans: InMemorySpanExporter,
) -> None:
    controller = CompactionController(
        ToolResultHiding(preserve_recent_n=1), max_context_size=300, reserved_context_size=50
    )
    result = await controller.compact(history())
    assert result.event is not None
    assert result.event.status == "compacted"
    found = named(spans, SPAN)
    assert len(found) == 1
    attributes = dict(found[0].attributes or {})
    event = result.event
    assert attributes == {
        "ctxcompact.strategy": "ToolResultHiding",
        "ctxcompact.trigger": "threshold",
        "ctxcompact.status": "compacted",
        "ctxcompact.tokens_before": event.tokens_before,
        "ctxcompact.tokens_after": event.tokens_after,
        "ctxcompact.messages_before": 9,
        "ctxcompact.messages_after": 9,
        "ctxcompact.messages_rewritten": 3,
        "ctxcompact.cache_break": True,  # results the earlier calls had sent were hidden
        "ctxcompact.max_context_size": 300,
        "ctxcompact.reserved_context_size": 50,
    }
    assert event.tokens_after < event.tokens_before
    assert found[0].status.status_code is StatusCode.UNSET


async def test_no_span_when_the_trigger_does_not_fire(spans: InMemorySpanExporter) -> None:
    controller = CompactionController(ToolResultHiding(), max_context_size=100_000)
    result = await controller.compact(history())
    assert result.event is None
    assert named(spans, SPAN) == []


async def test_rewriting_only_the_newest_turn_is_no_cache_break(
    spans: InMemorySpanExporter,
) -> None:
    def cut_newest(ctx: CompactionContext) -> list[Message]:
        messages = list(ctx.history)
        messages[-1] = tool("c3", "cut")
        return messages

    controller = CompactionController(
        FunctionStrategy(cut_newest), max_context_size=300, reserved_context_size=50
    )
    result = await controller.compact(history())
    assert result.event is not None
    assert result.event.status == "compacted"
    assert result.event.cache_break is False
    (span,) = named(spans, SPAN)
    assert span.attributes is not None
    assert span.attributes["ctxcompact.cache_break"] is False


async def test_a_failed_compaction_is_an_error_span_without_the_exception_message(
    spans: InMemorySpanExporter,
) -> None:
    def boom(ctx: CompactionContext) -> None:
        raise RuntimeError(f"the history says {SECRET}")

    controller = CompactionController(
        FunctionStrategy(boom, name="leaky"), max_context_size=300, reserved_context_size=50
    )
    result = await controller.compact(history())
    assert result.event is not None
    assert result.event.status == "failed"
    (span,) = named(spans, SPAN)
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "strategy raised RuntimeError"
    attributes = dict(span.attributes or {})
    assert attributes["error.type"] == "RuntimeError"
    assert attributes["ctxcompact.problems"] == ("strategy_raised",)
    assert attributes["ctxcompact.strategy"] == "leaky"
    assert span.events == ()  # no exception event: its message may quote the history
    assert SECRET not in repr(attributes) + repr(span.status)


async def test_a_compaction_inside_an_application_span_is_its_child(
    spans: InMemorySpanExporter,
) -> None:
    from opentelemetry import trace

    controller = CompactionController(
        ToolResultHiding(preserve_recent_n=1), max_context_size=300, reserved_context_size=50
    )
    with trace.get_tracer("app").start_as_current_span("agent step") as outer:
        await controller.compact(history())
    (span,) = named(spans, SPAN)
    assert span.parent is not None
    assert span.parent.span_id == outer.get_span_context().span_id


def test_without_opentelemetry_nothing_is_imported_and_compaction_works() -> None:
    # A fresh interpreter where the opentelemetry package cannot be imported.
    script = textwrap.dedent(
        """
        import asyncio, sys
        sys.modules["opentelemetry"] = None  # import opentelemetry -> ImportError
        import ctxcompact
        from ctxcompact import CompactionContext, CompactionController, Message
        from ctxcompact.strategies import ToolResultHiding
        assert not any(m.startswith("opentelemetry") and sys.modules[m] for m in sys.modules)
        history = [Message.user("x" * 2000), Message.assistant("ok"), Message.user("y")]
        controller = CompactionController(ToolResultHiding(), max_context_size=300,
                                          reserved_context_size=50)
        print(asyncio.run(controller.compact(history)).event.status)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "noop"


def test_importing_ctxcompact_does_not_import_opentelemetry() -> None:
    script = (
        "import sys, ctxcompact; print(any(m.startswith('opentelemetry') for m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
