"""Summaries the proxy computes once per conversation: summarizer calls, prompt prefixes, time.

Each trace is sent to the proxy's rewriter as a client would: before every assistant message
of the recording, the whole recording so far (the client keeps everything; the proxy is
stateless) as an OpenAI body. Strategy LLMSummary(max_preserved_messages=4,
max_summary_tokens=500) with a summarizer that answers at once with a new text each call (as
a real model would: a re-summarised prefix reads differently), 16,000-token window, 4,000
reserved. Baseline: no store (every request over the trigger summarises again); against it,
a SQLiteStore (each rewrite kept and reused). Reported: summarizer calls, requests whose
forwarded messages start with the previous request's (the provider's prompt cache holds),
and the rewriter's time per request (median of ``--runs`` runs, default 3, same process).

    .venv/bin/python benchmarks/bench_proxy_reuse.py [--runs N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.helpers.traces import load_trace

from ctxcompact import CompactionController, Completion, Message, from_openai, to_openai
from ctxcompact.proxy import Rewriter
from ctxcompact.store import SQLiteStore
from ctxcompact.strategies import LLMSummary

TRACES = ("claudecode__fa812bfe__precompact", "msa-gemini3pro__django__django-16560")


class CountingSummarizer:
    """Answers at once, a different summary each call."""

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, messages: Any, **_: Any) -> Completion:
        self.calls += 1
        return Completion(Message.assistant(f"Summary {self.calls}: the task so far."))


async def drive(recording: list[Message], store: Any) -> tuple[float, int, int, int]:
    llm = CountingSummarizer()
    controller = CompactionController(
        LLMSummary(llm, max_preserved_messages=4, max_summary_tokens=500),
        max_context_size=16_000,
        reserved_context_size=4_000,
        store=store,
    )
    rewriter = Rewriter(controller, reuse_summaries=store is not None)
    spent, requests, kept = 0.0, 0, 0
    previous: list[Any] | None = None
    for i, message in enumerate(recording):
        if message.role != "assistant" or i == 0:
            continue
        body = {"model": "m", "messages": to_openai(recording[:i])}
        start = time.perf_counter()
        new_body, _ = await rewriter.rewrite_openai(body)
        spent += time.perf_counter() - start
        requests += 1
        sent = (new_body or body)["messages"]
        if previous is not None and sent[: len(previous)] == previous:
            kept += 1
        previous = sent
    return spent, requests, llm.calls, kept


def run(recording: list[Message], with_store: bool, runs: int) -> tuple[float, int, int, int]:
    totals = []
    figures = (0, 0, 0)
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as folder:
            store = SQLiteStore(Path(folder) / "store.db") if with_store else None
            try:
                total, *rest = asyncio.run(drive(recording, store))
            finally:
                if store is not None:
                    store.close()
        totals.append(total)
        figures = (rest[0], rest[1], rest[2])
    return statistics.median(totals), *figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3, help="runs per configuration")
    args = parser.parse_args()
    print(
        f"{'trace':40s} {'config':>10s} {'requests':>8s} {'summaries':>9s} "
        f"{'prefix kept':>11s} {'per request':>11s} {'vs baseline':>11s}"
    )
    for name in TRACES:
        recording = from_openai(load_trace(name))
        baseline = 0.0
        for with_store in (False, True):
            total, requests, calls, kept = run(recording, with_store, args.runs)
            baseline = baseline or total
            label = "sqlite" if with_store else "no store"
            print(
                f"{name[:40]:40s} {label:>10s} {requests:8d} {calls:9d} "
                f"{kept:5d}/{requests - 1:<5d} {total / requests * 1e3:9.2f}ms "
                f"{total / baseline:10.2f}x"
            )
    print(f"(median of {args.runs} runs per configuration; counts are deterministic)")


if __name__ == "__main__":
    main()
