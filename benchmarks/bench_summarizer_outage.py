"""What a summarizer outage costs each proxy request, on loopback, with real trace content.

The proxy runs ``hiding-then-summary`` with ``[compaction.llm]`` pointing at a summarizer
that is down, in one of two ways: ``hang`` (a port that accepts connections and never
answers: every attempt waits for the timeout) or ``refused`` (nothing listens: every attempt
fails at once, the SDK backs off between retries). Each scenario sends the same triggered
request (a prefix of a public trace, cut before an assistant message) ``--requests`` times
and prints each request's latency, the time it added over the baseline and the ratio to the
baseline. The baseline is the same request through a proxy whose strategy is
``tool-result-hiding`` (no summarizer at all: what the degraded path should cost). The three
proxies take turns (baseline, hang, refused, baseline...), so the machine's drift hits all
three alike; request k of each is compared with the baseline's request k.

The upstream and the proxy each run in their own process (uvicorn, one worker). The
summarizer's timeout is 2 s and its retries 2 (the figures the issue measured with), the
breaker's cool-down 600 s (so no probe falls inside a run). Bounded: a fixed number of
requests, loopback only.

    .venv/bin/python benchmarks/bench_summarizer_outage.py [--requests N] [--quick]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers.proxy_servers import FakeUpstream, free_port  # noqa: E402
from tests.helpers.traces import load_trace  # noqa: E402

TRACE = "claudecode__fa812bfe__precompact"
MESSAGES = 200
TIMEOUT_S = 2.0
MAX_RETRIES = 2


def _run_upstream(port: int) -> None:
    import uvicorn

    uvicorn.run(FakeUpstream().app(), host="127.0.0.1", port=port, log_level="error")


def _run_proxy(config_path: str, port: int) -> None:
    import logging

    from ctxcompact import load_config
    from ctxcompact.proxy import serve

    logging.disable(logging.WARNING)  # the outage's one warning per proxy, not the figures
    serve(load_config(config_path), host="127.0.0.1", port=port)  # as `ctxcompact proxy` runs


def _wait(url: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.05)
    raise RuntimeError(f"{url} did not come up")


def history(n_messages: int) -> list[dict[str, Any]]:
    """The longest prefix of the trace of at most ``n_messages`` that ends before an
    assistant message: what an agent sends for its next call."""
    messages = load_trace(TRACE)
    end = max(k for k in range(1, min(n_messages, len(messages)) + 1)
              if k == len(messages) or messages[k]["role"] == "assistant")  # fmt: skip
    return messages[:end]


def config(upstream: str, strategy: str, summarizer: str | None) -> str:
    text = (
        "[compaction]\n"
        f'strategy = "{strategy}"\n'
        "max_context_size = 16000\n"
        "reserved_context_size = 4000\n"
        "[proxy]\n"
        f'openai_base_url = "{upstream}/v1"\n'
    )
    if summarizer is not None:
        text += (
            "[compaction.llm]\n"
            'provider = "openai"\n'
            'model = "summarizer"\n'
            f'base_url = "{summarizer}/v1"\n'
            'api_key_env = "CTXCOMPACT_BENCH_NO_KEY"\n'
            f"timeout = {TIMEOUT_S}\n"
            f"max_retries = {MAX_RETRIES}\n"
            "context_window = 32000\n"
            "breaker_cooldown = 600\n"
        )
    return text


class Proxy:
    """A proxy process serving ``config_text``; :meth:`post` times one request."""

    def __init__(self, config_text: str, label: str) -> None:
        with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
            f.write(config_text)
        self.path = Path(f.name)
        self.label = label
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.process = mp.Process(target=_run_proxy, args=(f.name, port), daemon=True)
        self.process.start()

    def post(self, client: httpx.Client, body: dict[str, Any], show: bool = False) -> float:
        start = time.perf_counter()
        response = client.post(f"{self.url}/v1/chat/completions", json=body)
        seconds = time.perf_counter() - start
        response.raise_for_status()
        if show:
            print(f"  {self.label}: x-ctxcompact: {response.headers['x-ctxcompact']}")
        return seconds

    def stop(self) -> None:
        self.process.terminate()
        self.process.join(timeout=10)
        self.path.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=10, help="triggered requests per proxy")
    parser.add_argument("--quick", action="store_true", help="4 requests per proxy")
    args = parser.parse_args()
    if args.quick:
        args.requests = 4

    up_port = free_port()
    upstream = mp.Process(target=_run_upstream, args=(up_port,), daemon=True)
    upstream.start()
    up = f"http://127.0.0.1:{up_port}"
    hanging = socket.socket()  # accepts (the kernel's backlog) and never answers
    hanging.bind(("127.0.0.1", 0))
    hanging.listen(64)
    hang_url = f"http://127.0.0.1:{hanging.getsockname()[1]}"
    refused_url = f"http://127.0.0.1:{free_port()}"
    proxies = [
        Proxy(config(up, "tool-result-hiding", None), "baseline"),
        Proxy(config(up, "hiding-then-summary", hang_url), "hang"),
        Proxy(config(up, "hiding-then-summary", refused_url), "refused"),
    ]
    try:
        _wait(f"{up}/v1/models")
        for proxy in proxies:
            _wait(f"{proxy.url}/healthz")
        messages = history(MESSAGES)
        body = {"model": "fake-model", "messages": messages, "max_tokens": 512}
        print(
            f"trace {TRACE}: {len(messages)} messages, {len(json.dumps(body)) // 1024} KiB; "
            f"summarizer timeout {TIMEOUT_S} s, {MAX_RETRIES} retries; {args.requests} "
            "triggered requests per proxy, the proxies taking turns from the 2nd on"
        )
        times: dict[str, list[float]] = {p.label: [] for p in proxies}
        with httpx.Client(timeout=120) as client:
            proxies[0].post(client, body)  # warm-up, not counted
            for k in range(args.requests):
                for proxy in proxies:
                    times[proxy.label].append(proxy.post(client, body, show=k < 2))
        base = times["baseline"]
        median = statistics.median(base) * 1000
        print(
            f"baseline (tool-result-hiding, no summarizer): median {median:.1f} ms, max "
            f"{max(base) * 1000:.1f} ms (the machine's noise)"
        )
        for label in ("hang", "refused"):
            runs = times[label]
            print(f"summarizer down ({label}):")
            for k, (s, b) in enumerate(zip(runs, base, strict=True), 1):
                if k > 12 and k != len(runs):
                    continue  # the first ones and the last show the pattern
                print(f"  request {k:2}: {s * 1000:8.1f} ms  baseline {b * 1000:6.1f} ms  "
                      f"added {(s - b) * 1000:8.1f} ms  ratio {s / b:6.2f}x")  # fmt: skip
            ratios = [s / b for s, b in zip(runs[1:], base[1:], strict=True)]
            added = [(s - b) * 1000 for s, b in zip(runs[1:], base[1:], strict=True)]
            p90 = sorted(added)[round(0.9 * (len(added) - 1))]
            print(
                f"  requests 2..{args.requests}: median ratio {statistics.median(ratios):.2f}x, "
                f"added median {statistics.median(added):.1f} ms, p90 {p90:.1f} ms, "
                f"max {max(added):.1f} ms"
            )
    finally:
        for proxy in proxies:
            proxy.stop()
        hanging.close()
        upstream.terminate()
        upstream.join(timeout=10)


if __name__ == "__main__":
    main()
