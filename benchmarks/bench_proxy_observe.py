"""What observing one proxied request costs: its metrics and its span, in one process.

The proxy counts every request (``GET /metrics``) and, with OpenTelemetry configured, traces
it. This measures, against the proxy's whole handling of the same request in the same process
(a 200-message prefix of a public trace, compacted and masked; the ASGI app called in-process,
its upstream an ``httpx.MockTransport``), so the ratios hold on a loaded machine:

* the metrics: the calls one compacted chat request makes on ``app.state.metrics``;
* the span: the request's time with OpenTelemetry absent (a child process where it cannot be
  imported), installed but not configured (a library user's default), and configured with an
  SDK recording every span to memory.

Medians of ``--rounds`` rounds of 50 requests.

    .venv/bin/python benchmarks/bench_proxy_observe.py [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

if "--no-otel" in sys.argv:  # the child process: OpenTelemetry cannot be imported
    sys.modules["opentelemetry"] = None  # type: ignore[assignment]

import httpx  # noqa: E402
from tests.helpers.traces import load_trace  # noqa: E402

from ctxcompact import Config  # noqa: E402
from ctxcompact.proxy import create_app, parse_body  # noqa: E402

PER_ROUND = 50
ANSWER = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}]}


def request_body(n_messages: int = 200) -> bytes:
    messages = load_trace("claudecode__fa812bfe__precompact")
    end = max(k for k in range(1, min(n_messages, len(messages)) + 1)
              if k == len(messages) or messages[k]["role"] == "assistant")  # fmt: skip
    return json.dumps({"model": "gpt-4o", "messages": messages[:end]}).encode()


def proxy_app() -> object:
    config = Config.from_dict(
        {
            "compaction": {
                "strategy": "tool-result-hiding",
                "max_context_size": 16_000,
                "reserved_context_size": 4_000,
            },
            "observation_masking": {"schema1": {"enabled": True}},
            "proxy": {"openai_base_url": "http://upstream.invalid/v1"},
        }
    )
    body = json.dumps(ANSWER).encode()

    def answer(request: httpx.Request) -> httpx.Response:
        # A stream, as a real upstream's answer: the proxy relays it chunk by chunk.
        headers = {"content-type": "application/json"}
        return httpx.Response(200, headers=headers, stream=httpx.ByteStream(body))

    upstream = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    return create_app(config, client=upstream)


async def request_times(rounds: int) -> list[float]:
    """Seconds per request through the whole app, one median per round."""
    app = proxy_app()
    raw = request_body()
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    times = []
    async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as client:
        for _ in range(5):  # warm up
            await client.post("/v1/chat/completions", content=raw)
        for _ in range(rounds):
            t0 = time.perf_counter()
            for _ in range(PER_ROUND):
                r = await client.post("/v1/chat/completions", content=raw)
                assert r.headers["x-ctxcompact"].startswith("action=compacted")
            times.append((time.perf_counter() - t0) / PER_ROUND)
    return times


async def metrics_time(rounds: int) -> float:
    """Seconds of the metrics calls one compacted request makes."""
    app = proxy_app()
    metrics, rewriter = app.state.metrics, app.state.rewriter  # type: ignore[attr-defined]
    _, report = await rewriter.rewrite_openai(parse_body(request_body()))
    assert report.compaction is not None
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(PER_ROUND * 20):
            metrics.rewritten("chat_completions", 0.004)
            metrics.upstream("chat_completions", 0.2, 200)
            metrics.request("chat_completions", report.action, report)
        times.append((time.perf_counter() - t0) / (PER_ROUND * 20))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--no-otel", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.no_otel:  # the child: print the median request time only
        print(statistics.median(asyncio.run(request_times(args.rounds))))
        return
    child = subprocess.run(
        [sys.executable, __file__, "--no-otel", "--rounds", str(args.rounds)],
        capture_output=True,
        text=True,
        check=True,
    )
    absent = float(child.stdout.strip().splitlines()[-1])
    unconfigured = statistics.median(asyncio.run(request_times(args.rounds)))
    counted = asyncio.run(metrics_time(args.rounds))

    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    trace.set_tracer_provider(provider)
    recording = statistics.median(asyncio.run(request_times(args.rounds)))

    print(f"200-message request (claudecode__fa812bfe__precompact), compacted and masked, "
          f"in-process ASGI, medians of {args.rounds} x {PER_ROUND}")  # fmt: skip
    print(f"  whole request, OpenTelemetry absent:         {absent * 1e3:7.2f} ms")
    print(f"  metrics calls of that request:               {counted * 1e6:7.1f} us "
          f"({counted / absent:.2%} of it)")  # fmt: skip
    print(f"  whole request, installed but not configured: {unconfigured * 1e3:7.2f} ms "
          f"({unconfigured / absent:.3f}x absent)")  # fmt: skip
    print(f"  whole request, SDK recording both spans:     {recording * 1e3:7.2f} ms "
          f"({recording / absent:.3f}x absent)")  # fmt: skip


if __name__ == "__main__":
    main()
