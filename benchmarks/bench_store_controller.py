"""What attaching an originals store costs the controller, per model call, on real traces.

Each trace is driven as an agent would: before every assistant message of the recording the
controller prepares the call (``step``: compaction of the stored history, then the
per-request transforms), the stored history becomes ``step.history`` and the recorded message
is appended. Strategy ToolResultHiding(preserve_recent_n=5), Schema1Masking(window_turns=5)
per request, a 16,000-token window with 4,000 reserved (the CLI's defaults). The baseline is
the same loop without a store, in the same process. Each configuration runs ``--runs`` times
(default 5); the median total is kept.

    .venv/bin/python benchmarks/bench_store_controller.py [--runs N]
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

from ctxcompact import CompactionController, Message, from_openai
from ctxcompact.store import DEFAULT_RECALL_TEMPLATE, MemoryStore, SQLiteStore
from ctxcompact.strategies import Schema1Masking, ToolResultHiding

TRACES = ("claudecode__fa812bfe__precompact", "msa-gemini3pro__django__django-16560")


async def drive(recording: list[Message], store: Any, recall: bool) -> tuple[float, int]:
    controller = CompactionController(
        ToolResultHiding(preserve_recent_n=5),
        max_context_size=16_000,
        reserved_context_size=4_000,
        transforms=[Schema1Masking(window_turns=5, batch_turns=0, always=True)],
        store=store,
        recall_placeholder=DEFAULT_RECALL_TEMPLATE if recall else None,
    )
    stored: list[Message] = []
    spent, calls = 0.0, 0
    for message in recording:
        if message.role == "assistant" and stored:
            start = time.perf_counter()
            step = await controller.step(stored)
            spent += time.perf_counter() - start
            calls += 1
            assert not step.store_errors
            stored = list(step.history)
        stored.append(message)
    return spent, calls


def run(recording: list[Message], kind: str, runs: int) -> tuple[float, int]:
    totals = []
    calls = 0
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as folder:
            store: Any = None
            if kind == "memory":
                store = MemoryStore()
            elif kind.startswith("sqlite"):
                store = SQLiteStore(Path(folder) / "originals.db")
            try:
                total, calls = asyncio.run(drive(recording, store, recall=kind.endswith("recall")))
            finally:
                if isinstance(store, SQLiteStore):
                    store.close()
        totals.append(total)
    return statistics.median(totals), calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5, help="runs per configuration")
    args = parser.parse_args()
    kinds = ("no store", "memory", "sqlite", "sqlite+recall")
    print(f"{'trace':40s} {'store':>14s} {'calls':>6s} {'per call':>10s} {'vs no store':>12s}")
    for name in TRACES:
        recording = from_openai(load_trace(name))
        run(recording, "no store", 1)  # warm-up (imports, caches)
        baseline = 0.0
        for kind in kinds:
            total, calls = run(recording, kind, args.runs)
            if kind == "no store":
                baseline = total
            print(
                f"{name[:40]:40s} {kind:>14s} {calls:6d} {total / calls * 1e3:8.2f}ms "
                f"{total / baseline:11.2f}x"
            )
    print(f"(median of {args.runs} runs per configuration)")


if __name__ == "__main__":
    main()
