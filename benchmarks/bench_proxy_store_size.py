"""What the proxy's default store costs on disk: its SQLite file after every trace went through.

Each of the 17 traces in ``tests/data/traces/`` is sent to the proxy's rewriter as a client
would: before every assistant message of the recording, the whole recording so far (the client
keeps everything; the proxy is stateless) as an OpenAI body, each trace its own caller. The
configuration is ``examples/recommended.toml`` (16,000-token window) with recall on, and the
store is a :class:`~ctxcompact.store.SQLiteStore` with the default bound (256 MiB), as
``ctxcompact proxy`` opens by default. Reported: the traces' JSON size, the JSON the store
keeps (originals, and kept compactions: each the rewritten prefix of a request, what
``max_bytes`` bounds too) and the file's size (database and write-ahead log, after the store
is closed). Deterministic: one run.

    .venv/bin/python benchmarks/bench_proxy_store_size.py
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.helpers.traces import load_trace, trace_names, trace_paths

from ctxcompact import Config, from_openai, load_config, to_openai, wire
from ctxcompact.proxy import Rewriter
from ctxcompact.store import SQLiteStore

ROOT = Path(__file__).resolve().parents[1]


def config() -> Config:
    base = load_config(ROOT / "examples" / "recommended.toml")
    data = base.model_dump(exclude_unset=True)
    data["store"] = {"recall": True}
    return Config.from_dict(data, path=base.path)


async def drive(store: SQLiteStore) -> int:
    """Every trace's requests through one rewriter; the number of requests."""
    wiring = wire(config(), store=store)
    rewriter = Rewriter(wiring.controller(), reuse_summaries=True)
    requests = 0
    for name in trace_names():
        recording = from_openai(load_trace(name))
        caller = f"caller-{name}"  # one caller per trace, as the proxy keys them
        for i, message in enumerate(recording):
            if message.role != "assistant" or i == 0:
                continue
            body = {"model": "m", "messages": to_openai(recording[:i])}
            await rewriter.rewrite_openai(body, caller=caller)
            requests += 1
    return requests


def main() -> None:
    traces = sum(p.stat().st_size for p in trace_paths())
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "originals.db"
        store = SQLiteStore(path)
        try:
            requests = asyncio.run(drive(store))
        finally:
            store.close()
        on_disk = sum(f.stat().st_size for f in Path(folder).iterdir())
        with sqlite3.connect(path) as db:
            query = "SELECT entry, COUNT(*), SUM(size) FROM entries GROUP BY entry ORDER BY entry"
            kept = db.execute(query).fetchall()
        db.close()
    print(f"{len(trace_names())} traces, {requests} requests, traces {traces / 2**20:.2f} MiB")
    for entry, count, size in kept:
        label = "originals" if entry == "original" else "compactions"
        print(f"kept {label}: {count}, {size / 2**20:.2f} MiB of JSON")
    print(f"store file after all of them: {on_disk / 2**20:.2f} MiB ({on_disk / traces:.2f}x)")


if __name__ == "__main__":
    main()
