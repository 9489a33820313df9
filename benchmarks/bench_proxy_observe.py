"""What observing one proxied request costs: its metrics and its span, in one process.

The proxy counts every request (``GET /metrics``) and, with OpenTelemetry configured, traces
it. This measures that cost against the proxy's own work on the same request (parse and
rewrite a 200-message prefix of a public trace, the report of which is what gets counted), so
the ratio holds on a loaded machine: both are timed in this process, alternating, medians of
``--rounds`` runs. Three ways: OpenTelemetry absent from the path (the metrics only), installed
but not configured (non-recording spans, the default for a library's users), and configured
with an SDK and an in-memory exporter (every span recorded).

    .venv/bin/python benchmarks/bench_proxy_observe.py [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers.traces import load_trace  # noqa: E402

from ctxcompact import Config  # noqa: E402
from ctxcompact._controller import tracing  # noqa: E402
from ctxcompact.proxy import create_app, parse_body  # noqa: E402
from ctxcompact.proxy._observe import (  # noqa: E402
    ObserveRequests,
    observation,
    start_request_span,
    using,
)


def request_body(n_messages: int = 200) -> bytes:
    messages = load_trace("claudecode__fa812bfe__precompact")
    end = max(k for k in range(1, min(n_messages, len(messages)) + 1)
              if k == len(messages) or messages[k]["role"] == "assistant")  # fmt: skip
    return json.dumps({"model": "gpt-4o", "messages": messages[:end]}).encode()


async def run(rounds: int) -> dict[str, float]:
    config = Config.from_dict(
        {
            "compaction": {
                "strategy": "tool-result-hiding",
                "max_context_size": 16_000,
                "reserved_context_size": 4_000,
            },
            "observation_masking": {"schema1": {"enabled": True}},
        }
    )
    app = create_app(config)
    rewriter, metrics = app.state.rewriter, app.state.metrics
    raw = request_body()
    _, report = await rewriter.rewrite_openai(parse_body(raw))
    assert report.action == "compacted"
    assert report.compaction is not None

    from starlette.requests import Request

    async def handler(scope: dict[str, Any], receive: Any, send: Any) -> None:
        # What a chat route adds for observation, around work that is not timed here.
        seen = observation(Request(scope))
        seen.route = "chat_completions"
        start_request_span(seen, "chat_completions", {"model": "gpt-4o"}, "http://127.0.0.1:9")
        with using(seen.span):
            metrics.rewritten("chat_completions", 0.004)
            metrics.upstream("chat_completions", 0.2, 200)
            seen.report, seen.outcome = report, report.action
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}", "more_body": False})

    async def bare(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}", "more_body": False})

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        return None

    observed = ObserveRequests(handler, metrics=metrics)

    def scope() -> dict[str, Any]:
        return {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": []}

    async def timed(call: Any, n: int) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            await call(scope(), receive, send)
        return (time.perf_counter() - t0) / n

    rewrite: list[float] = []
    cost: list[float] = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        await rewriter.rewrite_openai(parse_body(raw))
        rewrite.append(time.perf_counter() - t0)
        cost.append(await timed(observed, 200) - await timed(bare, 200))
    return {"rewrite": statistics.median(rewrite), "observe": statistics.median(cost)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    print(f"200-message request (claudecode__fa812bfe__precompact), medians of {args.rounds}")
    modes = ["OpenTelemetry absent", "installed, not configured", "configured (SDK, recording)"]
    for mode in modes:
        if mode == modes[0]:
            tracing._tracer = None  # as when the import fails
        elif mode == modes[1]:
            tracing._tracer = tracing._UNSET
        else:
            from opentelemetry import trace
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import SimpleSpanProcessor
            from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
                InMemorySpanExporter,
            )

            provider = TracerProvider()
            provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
            trace.set_tracer_provider(provider)
        found = asyncio.run(run(args.rounds))
        print(
            f"  {mode:<28} observing {found['observe'] * 1e6:6.1f} us per request | the "
            f"proxy's rewrite {found['rewrite'] * 1e3:6.2f} ms | "
            f"{found['observe'] / found['rewrite']:.2%} of it"
        )


if __name__ == "__main__":
    main()
