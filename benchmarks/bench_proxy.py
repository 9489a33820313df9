"""Latency the proxy adds, and its throughput against going direct, on loopback, with real traces.

The fake upstream and the proxy each run in their own process, so the client, the proxy and
the upstream do not share a GIL; the proxy runs as ``ctxcompact proxy --config FILE`` does
(:func:`ctxcompact.proxy.serve`: uvicorn, one worker, its access log and the proxy's INFO line
per request written to stderr, here ``/dev/null``). Requests are prefixes of the public traces
(20 and 200 messages, cut before an assistant message, real tool outputs).

1. Latency, one client: the same request straight to the upstream and through the proxy,
   alternating; p50/p99 of both, of the per-request difference (the added latency) and the
   ratio of the medians: once with a window so large that nothing is rewritten (the proxy's
   own cost: parse, count, decide, forward, relay) and once with a 16,000-token window where
   every request is compacted and masked (the cost of a rewrite); each without a store and with
   the store the proxy keeps by default (a SQLite file; here in a temporary folder, not your
   cache folder, one per proxy). Each row also gives the CPU the proxy process used per
   request over the row's requests (``/proc``), steadier than wall-clock times.
2. Concurrency, the 200-message request, nothing rewritten, no store: 1, 10 and 50 clients (one
   asyncio task each, sending back to back) send ``--requests`` requests straight to the
   upstream, then as many through the proxy; ``--rounds`` rounds, the order alternating per
   round. Per target: p50/p99 latency and requests per second; per round the ratio of the
   throughputs (proxy / direct); printed: each target's medians over the rounds and the
   median ratio, with every round's ratio.

Each concurrency row also gives the CPU each process used per request (``/proc``: the
client, the upstream, the proxy), which a loaded machine disturbs far less than wall-clock
times: on a machine whose cores all three share, the throughput ratio is bounded by
``(client + upstream) / (client + upstream + proxy)``. ``--floor`` adds a no-op proxy on the
same stack (uvicorn, an httpx pool: read the body, forward it unparsed, relay the answer):
what any Python proxy of this shape costs before it does anything.

``--baseline SRC`` starts a second proxy from another checkout's ``src`` (e.g. a
``git worktree`` of the commit before a change) and measures it alongside, in the same run and
alternating, so a change is judged by the ratio of the two on the same (noisy) machine.
``--only concurrency`` or ``--only latency`` runs one part. Bounded: a fixed number of
requests, loopback only.

    .venv/bin/python benchmarks/bench_proxy.py [--quick] [--rounds 5] [--requests 400]
        [--clients 1,10,50] [--baseline ../base/src] [--floor] [--only latency|concurrency]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers.proxy_servers import FakeUpstream, free_port  # noqa: E402
from tests.helpers.traces import load_trace  # noqa: E402

TRACES = ("claudecode__fa812bfe__precompact", "msa-gemini3pro__django__django-16560")
NOTHING_REWRITTEN = 10_000_000
EVERY_REQUEST_REWRITTEN = 16_000


def _run_upstream(port: int) -> None:
    import uvicorn

    # It would keep every body it received; the benchmark reads none of them.
    upstream = FakeUpstream(received=collections.deque(maxlen=16))  # type: ignore[arg-type]
    uvicorn.run(
        upstream.app(), host="127.0.0.1", port=port, log_level="error", http="h11", loop="asyncio"
    )


def _run_noop(upstream: str, port: int) -> None:
    """The floor: a proxy on the same stack (uvicorn, one httpx pool) that reads the body and
    forwards it as it is, parsing nothing, and relays the answer."""
    import uvicorn

    client: httpx.AsyncClient | None = None
    dropped = {b"host", b"content-length", b"connection"}

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        nonlocal client
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                client = httpx.AsyncClient(timeout=120)
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        assert client is not None
        chunks = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        headers = [(k, v) for k, v in scope["headers"] if k not in dropped]
        request = client.build_request(
            scope["method"], upstream + scope["path"], headers=headers, content=b"".join(chunks)
        )
        answer = await client.send(request, stream=True)
        kept = [(k.encode(), v.encode()) for k, v in answer.headers.items()
                if k not in ("content-length", "connection", "transfer-encoding")]  # fmt: skip
        await send({"type": "http.response.start", "status": answer.status_code, "headers": kept})
        async for chunk in answer.aiter_raw():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await answer.aclose()
        await send({"type": "http.response.body", "body": b""})

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="error")


def _cpu(pid: int) -> float:
    """Seconds of CPU (user and system) process ``pid`` has used (Linux's /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wait(url: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.05)
    raise RuntimeError(f"{url} did not come up")


@dataclass
class Proxy:
    """A proxy process serving ``config`` from the ``src`` tree (``None``: this checkout)."""

    label: str
    url: str
    process: subprocess.Popen[bytes] | Any

    @classmethod
    def start(cls, label: str, config: Path, src: Path | None) -> Proxy:
        port = free_port()
        env = dict(os.environ)
        env["PYTHONPATH"] = str(src if src is not None else ROOT / "src")
        command = [sys.executable, "-m", "ctxcompact", "proxy", "--config", str(config)]
        process = subprocess.Popen(
            [*command, "--port", str(port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            _wait(f"{url}/v1/models")
        except RuntimeError:
            process.kill()
            raise
        return cls(label, url, process)

    @classmethod
    def noop(cls, upstream: str) -> Proxy:
        port = free_port()
        process = mp.get_context("spawn").Process(target=_run_noop, args=(upstream, port))
        process.start()
        url = f"http://127.0.0.1:{port}"
        _wait(f"{url}/v1/models")
        return cls("no-op", url, process)

    @property
    def pid(self) -> int:
        pid: int = self.process.pid
        return pid

    def stop(self) -> None:
        self.process.terminate()
        if isinstance(self.process, subprocess.Popen):
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        else:
            self.process.join(10)


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


def latency(upstream: str, proxies: list[Proxy], n_messages: int, rounds: int, trace: str) -> None:
    """One client, sequential requests: direct, then through each proxy, alternating."""
    messages = history(n_messages, trace)
    body = json.dumps({"model": "m", "messages": messages}).encode()
    direct: list[float] = []
    proxied: dict[str, list[float]] = {p.label: [] for p in proxies}
    with httpx.Client(timeout=30) as client:
        for _ in range(10):  # warm up every path and its connection pool
            client.post(f"{upstream}/v1/chat/completions", content=body)
            for p in proxies:
                client.post(f"{p.url}/v1/chat/completions", content=body)
        # Each proxy process serves only its own requests: its CPU over the run, per request.
        used = {p.label: _cpu(p.pid) for p in proxies}
        for _ in range(rounds):
            t0 = time.perf_counter()
            client.post(f"{upstream}/v1/chat/completions", content=body).raise_for_status()
            direct.append((time.perf_counter() - t0) * 1000)
            for p in proxies:
                t1 = time.perf_counter()
                client.post(f"{p.url}/v1/chat/completions", content=body).raise_for_status()
                proxied[p.label].append((time.perf_counter() - t1) * 1000)
        cpu = {p.label: (_cpu(p.pid) - used[p.label]) * 1000 / rounds for p in proxies}
    print(
        f"{len(messages):>4} msgs ({len(body) / 1024:6.1f} KiB, {trace[:22]})"
        f" | direct p50 {percentile(direct, 0.5):6.2f} p99 {percentile(direct, 0.99):6.2f} ms"
    )
    for label, times in proxied.items():
        added = [p - d for p, d in zip(times, direct, strict=True)]
        print(
            f"{'':>4}   {label:>10} | via proxy p50 {percentile(times, 0.5):6.2f}"
            f" p99 {percentile(times, 0.99):6.2f} ms | added p50 {percentile(added, 0.5):6.2f}"
            f" p99 {percentile(added, 0.99):6.2f} ms | ratio p50 "
            f"{statistics.median(times) / statistics.median(direct):.2f}x"
            f" | proxy CPU {cpu[label]:5.2f} ms/request"
        )


@dataclass
class Phase:
    """One target's run at one concurrency: request latencies (ms) and requests per second."""

    latencies: list[float]
    rate: float
    cpu: dict[str, float]
    """Milliseconds of CPU per request: ``client`` (this process), ``upstream``, ``proxy``."""


async def phase(url: str, body: bytes, total: int, clients: int, pids: dict[str, int]) -> Phase:
    """``clients`` tasks send ``total`` requests to ``url`` back to back, sharing one pool;
    the CPU the processes in ``pids`` and this one used meanwhile."""
    left = total
    latencies: list[float] = []
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        for _ in range(min(clients, 10)):  # warm the pool
            (await client.post(f"{url}/v1/chat/completions", content=body)).raise_for_status()

        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                t0 = time.perf_counter()
                r = await client.post(f"{url}/v1/chat/completions", content=body)
                r.raise_for_status()
                latencies.append((time.perf_counter() - t0) * 1000)

        used = {name: _cpu(pid) for name, pid in pids.items()}
        client_cpu = time.process_time()
        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        rate = total / (time.perf_counter() - t0)
        cpu = {name: (_cpu(pid) - used[name]) * 1000 / total for name, pid in pids.items()}
        cpu["client"] = (time.process_time() - client_cpu) * 1000 / total
        return Phase(latencies, rate, cpu)


def concurrency(
    upstream: tuple[str, int], proxies: list[Proxy], levels: list[int], total: int, rounds: int
) -> None:
    body = json.dumps({"model": "m", "messages": history(200)}).encode()
    print(
        f"\nconcurrency: {len(history(200))}-message request ({len(body) / 1024:.1f} KiB),"
        f" nothing rewritten, {total} requests per target per round, {rounds} rounds,"
        " order alternating"
    )
    up_url, up_pid = upstream
    targets = [("direct", up_url, {"upstream": up_pid})] + [
        (p.label, p.url, {"upstream": up_pid, "proxy": p.pid}) for p in proxies
    ]
    for clients in levels:
        runs: dict[str, list[Phase]] = {label: [] for label, _, _ in targets}
        for r in range(rounds):
            order = targets if r % 2 == 0 else targets[::-1]
            for label, url, pids in order:
                runs[label].append(asyncio.run(phase(url, body, total, clients, pids)))
        direct = runs["direct"]
        d50 = statistics.median(percentile(p.latencies, 0.5) for p in direct)
        d99 = statistics.median(percentile(p.latencies, 0.99) for p in direct)
        print(
            f"{clients:>3} clients | direct p50 {d50:7.2f} p99 {d99:7.2f} ms"
            f" {statistics.median(p.rate for p in direct):7.1f} req/s | CPU per request:"
            f" {_shown_cpu(direct)}"
        )
        for label, _, _ in targets[1:]:
            mine = runs[label]
            p50 = statistics.median(percentile(p.latencies, 0.5) for p in mine)
            p99 = statistics.median(percentile(p.latencies, 0.99) for p in mine)
            ratios = [m.rate / d.rate for m, d in zip(mine, direct, strict=True)]
            print(
                f"{'':>3} {label:>10} | proxy  p50 {p50:7.2f} p99 {p99:7.2f} ms"
                f" {statistics.median(p.rate for p in mine):7.1f} req/s | added p50"
                f" {p50 - d50:6.2f} p99 {p99 - d99:7.2f} ms | throughput ratio"
                f" {statistics.median(ratios):.2f} ({', '.join(f'{x:.2f}' for x in ratios)})"
                f" | CPU per request: {_shown_cpu(mine)}"
            )


def _shown_cpu(phases: list[Phase]) -> str:
    names = [n for n in ("client", "upstream", "proxy") if n in phases[0].cpu]
    return ", ".join(f"{n} {statistics.median(p.cpu[n] for p in phases):.2f} ms" for n in names)


def _write_config(path: Path, upstream: str, *, window: int, store: Path | None) -> None:
    rewrite = window < NOTHING_REWRITTEN  # the small window: masking on, and the trigger fires
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few requests (CI smoke run)")
    parser.add_argument("--rounds", type=int, default=5, help="concurrency rounds per level")
    parser.add_argument("--requests", type=int, default=400, help="per target per round")
    parser.add_argument("--clients", default="1,10,50", help="concurrency levels")
    parser.add_argument("--baseline", type=Path, help="another checkout's src to compare")
    parser.add_argument("--only", choices=("latency", "concurrency"))
    parser.add_argument(
        "--floor", action="store_true", help="also a no-op proxy on the same stack (the floor)"
    )
    args = parser.parse_args()
    rounds, total, sequential = (2, 60, 30) if args.quick else (args.rounds, args.requests, 300)
    levels = [int(n) for n in args.clients.split(",")]
    print(f"load average {os.getloadavg()[0]:.1f} {os.getloadavg()[1]:.1f} at start")
    ctx = mp.get_context("spawn")
    up_port = free_port()
    upstream = f"http://127.0.0.1:{up_port}"
    up = ctx.Process(target=_run_upstream, args=(up_port,), daemon=True)
    up.start()
    modes: list[tuple[str, int, str | None]] = [
        ("nothing rewritten, no store", NOTHING_REWRITTEN, None),
        ("nothing rewritten, the default store", NOTHING_REWRITTEN, "originals.db"),
        ("every request rewritten, no store", EVERY_REQUEST_REWRITTEN, None),
        ("every request rewritten, the default store", EVERY_REQUEST_REWRITTEN, "originals.db"),
    ]
    try:
        _wait(f"{upstream}/v1/models")
        with tempfile.TemporaryDirectory() as tmp:
            for label, window, store in modes:
                latency_part = args.only in (None, "latency")
                concurrency_part = args.only in (None, "concurrency")
                if window != NOTHING_REWRITTEN and not latency_part:
                    continue
                configs: dict[str, Path] = {}
                for who in ("this", "baseline"):
                    config = Path(tmp) / f"proxy-{who}-{window}-{store}.toml"
                    # The store, as the proxy keeps one by default, in the temporary folder:
                    # one file per proxy, so neither waits on the other's writes.
                    kept = Path(tmp) / f"{who}-{window}-{store}" if store is not None else None
                    _write_config(config, upstream, window=window, store=kept)
                    configs[who] = config
                proxies = [Proxy.start("this", configs["this"], None)]
                if args.baseline is not None:
                    proxies.append(
                        Proxy.start("baseline", configs["baseline"], args.baseline.resolve())
                    )
                if args.floor:
                    proxies.append(Proxy.noop(upstream))
                try:
                    if latency_part:
                        print(f"\n{label}: window {window:,}, {sequential} alternating requests")
                        for trace in TRACES:
                            for n in (20, 200):
                                latency(upstream, proxies, n, sequential, trace)
                    if concurrency_part and window == NOTHING_REWRITTEN and store is None:
                        assert up.pid is not None
                        concurrency((upstream, up.pid), proxies, levels, total, rounds)
                finally:
                    for p in proxies:
                        p.stop()
    finally:
        up.terminate()
        up.join(5)
    print(f"load average {os.getloadavg()[0]:.1f} {os.getloadavg()[1]:.1f} at end")


if __name__ == "__main__":
    main()
