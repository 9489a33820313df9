"""OpenTelemetry spans from the proxy, over real HTTP on 127.0.0.1: one GenAI inference span
per proxied request, and the controller's compaction span as its child, in the SDK's
in-memory exporter."""

from __future__ import annotations

import json
from pathlib import Path

import anthropic
import httpx
import openai
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from ctxcompact import load_config
from ctxcompact.proxy import create_app
from tests.helpers.otel import named
from tests.helpers.proxy_servers import FakeUpstream, serve_in_thread
from tests.test_proxy import SECRET, anthropic_history, openai_history, write_config

CANARY = "CANARY-spans-91d0"


def fields(header: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in header.split("; "))


def test_a_compacted_request_is_one_request_span_with_its_compaction_span_inside(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    fake = FakeUpstream()
    messages = openai_history(turns=4, output_chars=300)
    messages[1]["content"] += CANARY
    with serve_in_thread(fake.app()) as url:
        app = create_app(load_config(write_config(tmp_path, url)))
        with (
            serve_in_thread(app) as proxy,
            openai.OpenAI(base_url=f"{proxy}/v1", api_key=SECRET, max_retries=0) as client,
        ):
            raw = client.chat.completions.with_raw_response.create(
                model="gpt-4o", messages=messages, max_tokens=50
            )
            httpx.get(f"{proxy}/metrics", timeout=30)  # not a proxied request: no span
    header = fields(raw.headers["x-ctxcompact"])
    assert header["action"] == "compacted"

    (request,) = named(spans, "chat gpt-4o")
    (compaction,) = named(spans, "ctxcompact.compaction")
    assert len(spans.get_finished_spans()) == 2
    assert request.kind is SpanKind.CLIENT
    assert compaction.parent is not None
    assert compaction.parent.span_id == request.context.span_id
    before, after = (int(n) for n in header["tokens"].split("->"))
    attributes = dict(request.attributes or {})
    assert attributes == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.request.max_tokens": 50,
        "server.address": "127.0.0.1",
        "server.port": int(url.rsplit(":", 1)[1]),
        "ctxcompact.route": "chat_completions",
        "ctxcompact.outcome": "compacted",
        "http.response.status_code": 200,
        "ctxcompact.action": "compacted",
        "ctxcompact.strategy": "ToolResultHiding",
        "ctxcompact.tokens_before": before,
        "ctxcompact.tokens_after": after,
        "ctxcompact.messages_before": len(messages),
        "ctxcompact.messages_after": len(messages),
        "ctxcompact.retried": 0,
        "ctxcompact.over_window": False,
        "ctxcompact.recall_offered": False,
    }
    inner = dict(compaction.attributes or {})
    assert inner["ctxcompact.status"] == "compacted"
    assert inner["ctxcompact.tokens_before"] == before
    assert inner["ctxcompact.max_context_size"] == 2000
    assert inner["ctxcompact.reserved_context_size"] == 50  # the request's max_tokens
    # The compaction lies within the request's span.
    assert request.start_time is not None
    assert compaction.start_time is not None
    assert request.end_time is not None
    assert compaction.end_time is not None
    assert request.start_time <= compaction.start_time <= compaction.end_time <= request.end_time
    everything = json.dumps([dict(s.attributes or {}) for s in spans.get_finished_spans()])
    assert CANARY not in everything
    assert SECRET not in everything


def test_a_streamed_anthropic_request_is_one_span_ended_after_its_stream(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    fake = FakeUpstream()
    with serve_in_thread(fake.app()) as url:
        app = create_app(load_config(write_config(tmp_path, url)))
        with (
            serve_in_thread(app) as proxy,
            anthropic.Anthropic(base_url=proxy, api_key=SECRET, max_retries=0) as client,
            client.messages.stream(
                model="claude-x", max_tokens=100, messages=anthropic_history(1, 2)
            ) as stream,
        ):
            text = stream.get_final_text()
    assert text == "alpha beta gamma"
    (request,) = named(spans, "chat claude-x")
    attributes = dict(request.attributes or {})
    assert attributes["gen_ai.provider.name"] == "anthropic"
    assert attributes["gen_ai.request.stream"] is True
    assert attributes["ctxcompact.route"] == "messages"
    assert attributes["ctxcompact.action"] == "unchanged"
    assert named(spans, "ctxcompact.compaction") == []  # below the trigger


def test_an_upstream_that_refuses_is_an_error_span(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    fake = FakeUpstream(status=429)
    with serve_in_thread(fake.app()) as url:
        app = create_app(load_config(write_config(tmp_path, url)))
        with serve_in_thread(app) as proxy:
            response = httpx.post(
                f"{proxy}/v1/chat/completions",
                json={"model": "m", "messages": openai_history(1, 2)},
                timeout=30,
            )
    assert response.status_code == 429
    (request,) = named(spans, "chat m")
    assert request.status.status_code is StatusCode.ERROR
    attributes = dict(request.attributes or {})
    assert attributes["error.type"] == "429"
    assert attributes["http.response.status_code"] == 429
