"""What cache-aligned summaries save on the public traces: summarizer cost, aligned or not.

Every trace in tests/data/traces is replayed call by call (``ctxcompact.replay``, agent mode,
heuristic tokens, flat pricing with cached reads at 0.1) at a 16,000-token window with 4,000
reserved, through LLMSummary and HidingThenSummary, each with ``cache_aligned`` off and on.
The summarizer is a stand-in that answers every request with the same ~250-word summary, so
both modes produce the same histories and only the summarizer's requests differ; the
replay's ``MeteredLLM`` bills an aligned request's prefix shared with the previous model
call's input as cached. ``max_summary_tokens=2048``: an aligned request must fit the window
minus that (13,952 tokens), which a history that jumped past the 12,000-token trigger with a
big tool result often does not (those fall back to the transcript request); the last two rows
give the summarizer the larger window of the model the traces were recorded with.

    .venv/bin/python benchmarks/bench_cache_aligned.py      # one run, 8 configurations, ~10 s
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ctxcompact import CompactionController, Completion, HeuristicTokenCounter, Message
from ctxcompact.replay import (
    MemoCounter,
    MeteredLLM,
    ReplayStats,
    read_conversation,
    replay,
)
from ctxcompact.strategies import HidingThenSummary, LLMSummary

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "tests" / "data" / "traces"
WINDOW, RESERVED = 16_000, 4_000
SUMMARY = " ".join(["The agent read and changed files; tests pass; next: the report."] * 25)


class FixedSummarizer:
    """Answers every request with :data:`SUMMARY`; counts the aligned requests it saw."""

    def __init__(self) -> None:
        self.aligned = 0
        self.calls = 0

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        system: str | None = None,
        tools: object = None,
        max_tokens: int | None = None,
    ) -> Completion:
        self.calls += 1
        self.aligned += system is None  # the transcript request has the summarizer's system
        return Completion(Message.assistant(SUMMARY))


Make = Callable[[bool], object]
STRATEGIES: list[tuple[str, Make]] = [
    ("LLMSummary", lambda aligned: LLMSummary(max_summary_tokens=2048, cache_aligned=aligned)),
    (
        "HidingThenSummary",
        lambda aligned: HidingThenSummary(max_summary_tokens=2048, cache_aligned=aligned),
    ),
    # The agent's model has a larger window than the 16,000 compaction is triggered at.
    (
        "LLMSummary, summarizer input up to 128,000",
        lambda aligned: LLMSummary(
            max_summary_tokens=2048, max_input_tokens=128_000, cache_aligned=aligned
        ),
    ),
    (
        "HidingThenSummary, summarizer input up to 128,000",
        lambda aligned: HidingThenSummary(
            max_summary_tokens=2048, max_input_tokens=128_000, cache_aligned=aligned
        ),
    ),
]


async def run(
    make: Make, aligned: bool, traces: Sequence[list[Message]]
) -> tuple[ReplayStats, int, int]:
    total = ReplayStats()
    fixed = FixedSummarizer()
    for conversation in traces:
        counter = MemoCounter(HeuristicTokenCounter())
        llm = MeteredLLM(fixed, counter)
        controller = CompactionController(
            make(aligned),  # type: ignore[arg-type]
            max_context_size=WINDOW,
            reserved_context_size=RESERVED,
            token_counter=counter,
            llm=llm,
        )
        total += await replay(conversation, controller, counter=counter, llm=llm)
    return total, fixed.calls, fixed.aligned


async def main() -> None:
    logging.getLogger("ctxcompact").setLevel(logging.ERROR)  # one warning per fallback
    paths = sorted(p for p in TRACES.glob("*.json") if not p.name.endswith(".meta.json"))
    traces = [read_conversation(p) for p in paths]
    start = time.perf_counter()
    base = ReplayStats()
    for conversation in traces:
        base += await replay(conversation, None, counter=MemoCounter(HeuristicTokenCounter()))
    print(
        f"{len(traces)} traces, {base.calls:,} model calls, window {WINDOW:,}, reserved "
        f"{RESERVED:,}; no compaction cost {base.cost:,.0f} (heuristic tokens, reads at 0.1)\n"
    )
    print(
        "| strategy | cache_aligned | summaries | aligned requests | summarizer tokens | "
        "read from cache | summarizer cost | total cost (agent + summarizer) |"
    )
    print("|" + "---|" * 8)
    for name, make in STRATEGIES:
        costs = []
        for aligned in (False, True):
            stats, calls, aligned_calls = await run(make, aligned, traces)
            costs.append(stats.summarizer_cost)
            cached = stats.summarizer_cached_tokens / max(1, stats.summarizer_tokens)
            print(
                f"| {name} | {aligned} | {calls} | {aligned_calls} | "
                f"{stats.summarizer_tokens:,} | {cached:.1%} | {stats.summarizer_cost:,.0f} | "
                f"{(stats.cost + stats.summarizer_cost) / base.cost:.1%} |"
            )
        print(
            f"|   {name}: aligned summarizer cost / not aligned | | | | | | "
            f"{costs[1] / costs[0]:.1%} | |"
        )
    print(f"\none run, {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    asyncio.run(main())
