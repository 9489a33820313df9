"""Latency the proxy adds, and its throughput, on loopback, with real trace content.

The fake upstream and the proxy each run in their own process (uvicorn, one worker), so the
client, the proxy and the upstream do not share a GIL. Requests are prefixes of the public
traces (20 and 200 messages, cut before an assistant message, real tool outputs). For each it
sends the same request straight to the upstream and through the proxy, alternating, and
prints p50/p99 of both, of the difference, and their ratio: once with a window so large that
nothing is rewritten (the proxy's own cost: parse, count, decide, forward, relay) and once
with a 16,000-token window where every request is compacted and masked (the cost of a
rewrite), without a store and then with the store the proxy keeps by default (a SQLite
file; here in a temporary folder, not your cache folder). Then requests per second through
the proxy with 16 concurrent clients. Bounded: a fixed number of requests, loopback only.

    .venv/bin/python benchmarks/bench_proxy.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
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

TRACES = ("claudecode__fa812bfe__precompact", "msa-gemini3pro__django__django-16560")


def _run_upstream(port: int) -> None:
    import uvicorn

    uvicorn.run(FakeUpstream().app(), host="127.0.0.1", port=port, log_level="error")


def _run_proxy(config_path: str, port: int) -> None:
    import uvicorn

    from ctxcompact import load_config
    from ctxcompact.proxy import create_app

    app = create_app(load_config(config_path))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="error")


def _wait(url: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.05)
    raise RuntimeError(f"{url} did not come up")


def history(n_messages: int, trace: str = TRACES[0]) -> list[dict[str, Any]]:
    """The longest prefix of ``trace`` of at most ``n_messages`` that ends before an assistant
    message: what an agent sends for its next call."""
    messages = load_trace(trace)
    end = max(k for k in range(1, min(n_messages, len(messages)) + 1)
              if k == len(messages) or messages[k]["role"] == "assistant")  # fmt: skip
    return messages[:end]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def latency(upstream: str, proxy: str, n_messages: int, rounds: int, trace: str) -> None:
    messages = history(n_messages, trace)
    body = json.dumps({"model": "m", "messages": messages}).encode()
    direct: list[float] = []
    proxied: list[float] = []
    with httpx.Client(timeout=30) as client:
        for _ in range(10):  # warm up both paths and their connection pools
            client.post(f"{upstream}/v1/chat/completions", content=body)
            client.post(f"{proxy}/v1/chat/completions", content=body)
        for _ in range(rounds):
            t0 = time.perf_counter()
            client.post(f"{upstream}/v1/chat/completions", content=body).raise_for_status()
            t1 = time.perf_counter()
            client.post(f"{proxy}/v1/chat/completions", content=body).raise_for_status()
            t2 = time.perf_counter()
            direct.append((t1 - t0) * 1000)
            proxied.append((t2 - t1) * 1000)
    added = [p - d for p, d in zip(proxied, direct, strict=True)]
    print(
        f"{len(messages):>4} msgs ({len(body) / 1024:6.1f} KiB, {trace[:22]})"
        f" | direct p50 {percentile(direct, 0.5):6.2f}"
        f" p99 {percentile(direct, 0.99):6.2f} ms | via proxy p50 {percentile(proxied, 0.5):6.2f}"
        f" p99 {percentile(proxied, 0.99):6.2f} ms | added p50 {percentile(added, 0.5):6.2f}"
        f" p99 {percentile(added, 0.99):6.2f} ms | ratio p50 "
        f"{statistics.median(proxied) / statistics.median(direct):.2f}x"
    )


async def throughput(url: str, body: bytes, total: int, concurrency: int = 16) -> float:
    queue = list(range(total))
    async with httpx.AsyncClient(timeout=60) as client:

        async def worker() -> None:
            while queue:
                queue.pop()
                r = await client.post(f"{url}/v1/chat/completions", content=body)
                r.raise_for_status()

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return total / (time.perf_counter() - t0)


def _write_config(path: Path, upstream: str, *, window: int, store: Path | None) -> None:
    rewrite = window < 10_000_000  # the small window: masking on, and the trigger fires
    table = f'path = "{store}"' if store is not None else "enabled = false"
    path.write_text(
        "[compaction]\n"
        'strategy = "tool-result-hiding"\n'
        f"max_context_size = {window}\n"
        "reserved_context_size = 4000\n"
        "[observation_masking.schema1]\n"
        f"enabled = {'true' if rewrite else 'false'}\n"
        "[proxy]\n"
        f'openai_base_url = "{upstream}/v1"\n'
        f'anthropic_base_url = "{upstream}"\n'
        f"[store]\n{table}\n",
        encoding="utf-8",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="few requests (CI smoke run)")
    args = parser.parse_args()
    rounds, total = (30, 100) if args.quick else (300, 1000)
    ctx = mp.get_context("spawn")
    up_port = free_port()
    upstream = f"http://127.0.0.1:{up_port}"
    up = ctx.Process(target=_run_upstream, args=(up_port,), daemon=True)
    up.start()
    try:
        _wait(f"{upstream}/v1/models")
        folder = Path(tempfile.mkdtemp(prefix="bench_proxy_"))
        for label, window, store in (
            ("nothing rewritten, no store", 10_000_000, None),
            ("every request rewritten, no store", 16_000, None),
            ("every request rewritten, the default store", 16_000, folder / "originals.db"),
        ):
            config = Path(__file__).with_name(".bench_proxy.toml")
            _write_config(config, upstream, window=window, store=store)
            proxy_port = free_port()
            proxy = f"http://127.0.0.1:{proxy_port}"
            proc = ctx.Process(target=_run_proxy, args=(str(config), proxy_port), daemon=True)
            proc.start()
            try:
                _wait(f"{proxy}/v1/models")
                print(f"\n{label}: window {window:,}, {rounds} alternating requests per size")
                for trace in TRACES:
                    for n in (20, 200):
                        latency(upstream, proxy, n, rounds, trace)
                if window < 10_000_000:
                    continue
                for n in (20, 200):
                    body = json.dumps({"model": "m", "messages": history(n)}).encode()
                    direct = asyncio.run(throughput(upstream, body, total))
                    via = asyncio.run(throughput(proxy, body, total))
                    print(
                        f"{n:>4} msgs | {total} requests, 16 concurrent | direct {direct:7.1f}"
                        f" req/s | via proxy {via:7.1f} req/s | ratio {via / direct:.2f}"
                    )
            finally:
                proc.terminate()
                proc.join(5)
                config.unlink(missing_ok=True)
    finally:
        up.terminate()
        up.join(5)


if __name__ == "__main__":
    main()
