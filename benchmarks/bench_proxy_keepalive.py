"""Keep-alive races through the proxy on loopback: connections closed under a client's request.

An HTTP client pool reuses an idle connection until its own expiry (httpx: 5 s). A server
that closes idle connections after the same time (uvicorn's default: 5 s) sometimes closes
one just as the client sends on it; the client gets a ``ReadError``. The same race exists
between the proxy's own pool and an upstream served with a 5 s keep-alive (vLLM, LiteLLM,
llama.cpp's server), where it becomes a 502.

``--clients`` httpx clients (default pool settings, as the OpenAI and Anthropic SDKs use) each
send ``--rounds`` compacted chat requests through the proxy to the tests' fake upstream (uvicorn,
5 s keep-alive), pausing a random 4.9-5.0 s between requests, where the race lives. Compared,
in the same process: the proxy as it was (uvicorn's 5 s keep-alive, httpx's 5 s upstream pool
expiry) and as it is (``[proxy] keep_alive_timeout``, 120 s by default, and a 4 s upstream pool
expiry). Counts, not times; each configuration runs once (about ``rounds`` x 5 s).

    .venv/bin/python benchmarks/bench_proxy_keepalive.py [--clients N] [--rounds N] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
from tests.helpers.proxy_servers import FakeUpstream, serve_in_thread
from tests.test_proxy import openai_history, write_config

from ctxcompact import ProxyConfig, load_config
from ctxcompact.proxy import UPSTREAM_KEEPALIVE_EXPIRY, create_app


async def one_client(url: str, body: bytes, rounds: int, outcomes: list[str]) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        for _ in range(rounds):
            try:
                r = await client.post(
                    url, content=body, headers={"content-type": "application/json"}
                )
                outcomes.append(str(r.status_code))
            except httpx.TransportError as exc:
                outcomes.append(type(exc).__name__)
            await asyncio.sleep(random.uniform(4.9, 5.0))


def run(keep_alive: int, upstream_expiry: float, clients: int, rounds: int) -> list[str]:
    fake = FakeUpstream()
    body = json.dumps({"model": "m", "messages": openai_history(4, 300), "max_tokens": 100})
    outcomes: list[str] = []
    with tempfile.TemporaryDirectory() as folder, serve_in_thread(fake.app()) as upstream:
        config = load_config(write_config(Path(folder), upstream))
        limits = httpx.Limits(max_connections=100, keepalive_expiry=upstream_expiry)
        pool = httpx.AsyncClient(timeout=httpx.Timeout(config.proxy.timeout), limits=limits)
        app = create_app(config, client=pool)
        with serve_in_thread(app, timeout_keep_alive=keep_alive) as proxy:
            url = f"{proxy}/v1/chat/completions"

            async def main() -> None:
                await asyncio.gather(
                    *(one_client(url, body.encode(), rounds, outcomes) for _ in range(clients))
                )

            asyncio.run(main())
    return outcomes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=100, help="concurrent clients")
    parser.add_argument("--rounds", type=int, default=5, help="requests per client")
    parser.add_argument("--quick", action="store_true", help="20 clients x 2 requests")
    args = parser.parse_args()
    if args.quick:
        args.clients, args.rounds = 20, 2
    logging.getLogger("ctxcompact").setLevel(logging.ERROR)  # the 502s' warnings
    keep_alive = ProxyConfig().keep_alive_timeout
    configurations = {
        "before (5 s, pool 5 s)": (5, 5.0),
        f"now ({keep_alive} s, pool {UPSTREAM_KEEPALIVE_EXPIRY:g} s)": (
            keep_alive,
            UPSTREAM_KEEPALIVE_EXPIRY,
        ),
    }
    print(f"{'proxy':>26s} {'requests':>9s} {'ReadError':>10s} {'502':>5s} {'other':>6s}")
    for label, (keep_alive, expiry) in configurations.items():
        outcomes = run(keep_alive, expiry, args.clients, args.rounds)
        read_errors = sum(not o.isdigit() for o in outcomes)  # the client's transport errors
        bad_gateway = outcomes.count("502")
        other = sum(o.isdigit() and o not in ("200", "502") for o in outcomes)
        print(f"{label:>26s} {len(outcomes):9d} {read_errors:10d} {bad_gateway:5d} {other:6d}")
    print(f"({args.clients} clients x {args.rounds} requests, 4.9-5.0 s apart; loopback, one run)")


if __name__ == "__main__":
    main()
