"""Does the proxy's memory stay flat over many conversations? RSS sampled as requests go by.

A long-running proxy serves conversation after conversation; whatever it keeps per
conversation or per caller must be bounded, or its memory grows until the machine runs out.
Here 500 conversations (each its own API key, so its own store namespace) send 10 requests
each, 5,000 in all: request ``k`` of a conversation is a prefix of a public trace (cut before
an assistant message, up to 200 messages, real tool outputs), growing with ``k`` as an agent's
history does. Conversations arrive over time, ``--concurrent`` of them active at once (their
requests interleaved, sent one at a time), so a conversation's state, were it kept for good,
would add up over the run. Every request is rewritten (tool-result hiding against a
16,000-token window, Schema 1 masking) with ``[store] recall = true``, so the proxy keeps the
removed originals and reuses its rewrites.

The fake upstream and the proxy each run in their own process (uvicorn, loopback); the proxy's
resident memory (``VmRSS`` from ``/proc``, Linux) is sampled every ``--every`` requests, and with
``--tracemalloc`` also the bytes Python allocated (traced in the proxy process, which makes it
slower). Printed: the samples, and the growth ratio between the 1,000th and the 5,000th
request (1.00 = flat), with the growth per conversation in between. One run per invocation;
not a timed test.

    .venv/bin/python benchmarks/bench_proxy_memory.py [--store memory|sqlite|redis]
        [--max-bytes N] [--redis-url URL] [--conversations 500] [--tracemalloc] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers.proxy_servers import free_port  # noqa: E402
from tests.helpers.redis_server import start_redis  # noqa: E402
from tests.helpers.traces import load_trace, trace_names  # noqa: E402

REQUESTS_PER_CONVERSATION = 10
MAX_MESSAGES = 200
MEMORY_ROUTE = "/__bench_memory"


def _run_upstream(port: int) -> None:
    """An upstream that answers every chat request at once and keeps nothing."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def chat(request: Request) -> JSONResponse:
        await request.body()
        return JSONResponse(
            {
                "id": "chatcmpl-bench",
                "object": "chat.completion",
                "model": "m",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "ok"},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        )

    async def models(_: Request) -> JSONResponse:
        return JSONResponse({"data": []})

    app = Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/models", models),
        ]
    )
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="error")


def _run_proxy(config_path: str, port: int, traced: bool) -> None:
    """The proxy, with one extra route answering the Python heap's size (tracemalloc)."""
    import tracemalloc

    import uvicorn

    from ctxcompact import load_config
    from ctxcompact.proxy import create_app

    if traced:
        tracemalloc.start()
    app = create_app(load_config(config_path))

    async def with_memory(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == MEMORY_ROUTE:
            current = tracemalloc.get_traced_memory()[0] if traced else -1
            body = json.dumps({"traced": current}).encode()
            headers = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        await app(scope, receive, send)

    uvicorn.run(with_memory, host="127.0.0.1", port=port, log_level="error")


def _wait(url: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.05)
    raise RuntimeError(f"{url} did not come up")


def rss_bytes(pid: int) -> int:
    """Resident memory of process ``pid`` (``VmRSS`` in ``/proc/PID/status``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def conversation_bodies(index: int) -> list[bytes]:
    """The request bodies of conversation ``index``: growing prefixes of one trace, each cut
    before an assistant message, the last of at most :data:`MAX_MESSAGES` messages."""
    names = trace_names()
    messages = load_trace(names[index % len(names)])
    limit = min(MAX_MESSAGES, len(messages))
    cuts = [
        k for k in range(2, limit + 1) if k == len(messages) or messages[k]["role"] == "assistant"
    ]
    n = REQUESTS_PER_CONVERSATION
    picked = [cuts[min(len(cuts) - 1, (len(cuts) * (i + 1)) // n - 1)] for i in range(n)]
    return [
        json.dumps({"model": "m", "messages": messages[:end], "max_tokens": 500}).encode()
        for end in picked
    ]


def write_config(path: Path, upstream: str, store: str, max_bytes: int | None, redis: str) -> None:
    table = ["[store]", "recall = true"]
    if store == "sqlite":
        table.append(f'path = "{path.with_suffix(".db")}"')
    elif store == "redis":
        table.append(f'url = "{redis}"')
    else:  # the proxy's default is a file in the cache folder: memory is asked for by name
        table.append('path = ":memory:"')
    if max_bytes is not None:
        table.append(f"max_bytes = {max_bytes}")
    path.write_text(
        "[compaction]\n"
        'strategy = "tool-result-hiding"\n'
        "max_context_size = 16000\n"
        "reserved_context_size = 4000\n"
        "[observation_masking.schema1]\n"
        "enabled = true\n"
        "[proxy]\n"
        f'openai_base_url = "{upstream}/v1"\n'
        f'anthropic_base_url = "{upstream}"\n' + "\n".join(table) + "\n",
        encoding="utf-8",
    )


async def drive(
    proxy: str, pid: int, conversations: int, concurrent: int, every: int, actions: dict[str, int]
) -> list[tuple[int, int, int, int]]:
    """Send every conversation's requests; ``(requests, conversations started, RSS, traced)``
    after every ``every`` requests."""
    samples: list[tuple[int, int, int, int]] = []
    sent = 0
    started = 0
    async with httpx.AsyncClient(timeout=120) as client:

        async def sample() -> None:
            traced = (await client.get(f"{proxy}{MEMORY_ROUTE}")).json()["traced"]
            samples.append((sent, started, rss_bytes(pid), traced))

        async def one(conversation: int, body: bytes) -> None:
            nonlocal sent
            headers = {
                "authorization": f"Bearer sk-bench-{conversation}",
                "content-type": "application/json",
            }
            r = await client.post(f"{proxy}/v1/chat/completions", content=body, headers=headers)
            r.raise_for_status()
            action = r.headers.get("x-ctxcompact", "action=none").split(";")[0]
            actions[action] = actions.get(action, 0) + 1
            sent += 1

        await sample()
        for wave in range(0, conversations, concurrent):
            members = range(wave, min(conversations, wave + concurrent))
            bodies = {c: conversation_bodies(c) for c in members}
            started += len(members)
            for k in range(REQUESTS_PER_CONVERSATION):
                for c in members:  # one at a time: a sample falls exactly on a multiple
                    await one(c, bodies[c][k])
                    if sent % every == 0:
                        await sample()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store", choices=["memory", "sqlite", "redis"], default="memory")
    parser.add_argument("--max-bytes", type=int, default=None, help="[store] max_bytes")
    parser.add_argument(
        "--redis-url", help="with --store redis (default: a redis-server started for the run)"
    )
    parser.add_argument("--conversations", type=int, default=500)
    parser.add_argument("--concurrent", type=int, default=20, help="conversations active at once")
    parser.add_argument("--every", type=int, default=500, help="requests between samples")
    parser.add_argument("--tracemalloc", action="store_true", help="also trace Python's heap")
    parser.add_argument("--quick", action="store_true", help="100 conversations (smoke run)")
    args = parser.parse_args()
    if args.quick:
        args.conversations, args.every = min(args.conversations, 100), 100
    ctx = mp.get_context("spawn")
    up_port, proxy_port = free_port(), free_port()
    upstream = f"http://127.0.0.1:{up_port}"
    proxy = f"http://127.0.0.1:{proxy_port}"
    with contextlib.ExitStack() as stack:
        folder = stack.enter_context(tempfile.TemporaryDirectory())
        redis_url = args.redis_url
        if args.store == "redis" and redis_url is None:
            redis_url = stack.enter_context(start_redis()).url
        config = Path(folder) / "bench.toml"
        write_config(config, upstream, args.store, args.max_bytes, redis_url or "")
        up = ctx.Process(target=_run_upstream, args=(up_port,), daemon=True)
        up.start()
        proc = ctx.Process(
            target=_run_proxy, args=(str(config), proxy_port, args.tracemalloc), daemon=True
        )
        proc.start()
        try:
            _wait(f"{upstream}/v1/models")
            _wait(f"{proxy}{MEMORY_ROUTE}")
            assert proc.pid is not None
            actions: dict[str, int] = {}
            t0 = time.perf_counter()
            samples = asyncio.run(
                drive(proxy, proc.pid, args.conversations, args.concurrent, args.every, actions)
            )
            elapsed = time.perf_counter() - t0
        finally:
            proc.terminate()
            proc.join(10)
            up.terminate()
            up.join(10)
    bound = "default" if args.max_bytes is None else f"{args.max_bytes:,} bytes"
    print(
        f"store {args.store} (max_bytes {bound}), recall on; {args.conversations} conversations "
        f"x {REQUESTS_PER_CONVERSATION} requests, {args.concurrent} in flight; {elapsed:.0f} s; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    print("proxy actions: " + ", ".join(f"{k} {v}" for k, v in sorted(actions.items())))
    print(f"{'requests':>9} {'conversations':>14} {'RSS MiB':>9} {'traced MiB':>11}")
    for sent, started, rss, traced in samples:
        shown = f"{traced / 2**20:11.1f}" if traced >= 0 else f"{'-':>11}"
        print(f"{sent:>9} {started:>14} {rss / 2**20:9.1f} {shown}")
    # From the first fifth of the run on (the 1,000th request of 5,000) to its end.
    total = samples[-1][0]
    first = next((s for s in samples if s[0] >= total // 5), None)
    last = samples[-1]
    if first is None or first is last:
        print("(too few samples for a growth ratio)")
        return
    ratio = last[2] / first[2]
    per = (last[2] - first[2]) / max(1, last[1] - first[1])
    line = (
        f"RSS growth {first[0]:,}th -> {last[0]:,}th request: x{ratio:.2f} "
        f"({per / 1024:+.1f} KiB/conversation)"
    )
    if first[3] >= 0:
        line += f"; traced x{last[3] / first[3]:.2f}"
    print(line)


if __name__ == "__main__":
    main()
