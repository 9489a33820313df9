"""Replay every public trace through each built-in non-LLM strategy: tokens and cached cost.

Each trace in ../shared/traces is replayed call by call (``ctxcompact.cli._replay``): every
assistant message is a model call whose input is the history before it after triggered
compaction and per-request transforms. Printed per configuration, summed over the traces:
raw input tokens and cache-adjusted cost (cached prefix at 0.1) as percentages of no
compaction, cache breaks, compactions, and whether the last 5 tool groups and every error
result reached the model verbatim at every call.

    .venv/bin/python benchmarks/bench_replay.py           # all traces (~30-60 s)
    .venv/bin/python benchmarks/bench_replay.py --quick   # 5 traces, 4 configurations
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ctxcompact import CompactionController, HeuristicTokenCounter, Message, tool_groups
from ctxcompact.cli._io import read_conversation
from ctxcompact.cli._replay import MemoCounter, ReplayStats, replay
from ctxcompact.strategies import (
    ContextGuard,
    Schema1Masking,
    ToolResultHiding,
    ToolResultTruncation,
)
from ctxcompact.strategies._shared import is_error_result

ROOT = Path(__file__).resolve().parents[1]
TRACES = (ROOT / ".." / "shared" / "traces").resolve()
NEVER = 10**12  # a window no trace reaches: only the per-request transforms act
KEEP_GROUPS = 5


@dataclass(frozen=True)
class Config:
    """One row of the table: how to build a fresh controller for a trace."""

    name: str
    build: Callable[[MemoCounter], CompactionController]
    quick: bool = False


def triggered(strategy: Callable[[], object], window: int, reserved: int) -> Callable[..., object]:
    def build(counter: MemoCounter) -> CompactionController:
        return CompactionController(
            strategy(),  # type: ignore[arg-type]
            max_context_size=window,
            reserved_context_size=reserved,
            token_counter=counter,
        )

    return build


def per_request(transform: Callable[[], object]) -> Callable[..., object]:
    def build(counter: MemoCounter) -> CompactionController:
        return CompactionController(
            Schema1Masking(),
            max_context_size=NEVER,
            reserved_context_size=0,
            token_counter=counter,
            transforms=(transform(),),  # type: ignore[arg-type]
        )

    return build


CONFIGS = [
    Config(
        "hiding n=5, per request (slides every turn)",
        per_request(lambda: ToolResultHiding(preserve_recent_n=5)),
        quick=True,
    ),
    Config(
        "hiding n=5, per request, batch_turns=10",
        per_request(lambda: ToolResultHiding(preserve_recent_n=5, batch_turns=10)),
    ),
    Config(
        "hiding n=5, per request, clear_at_least=20k",
        per_request(lambda: ToolResultHiding(preserve_recent_n=5, clear_at_least=20_000)),
    ),
    Config(
        "schema1 window=5, per request (slides every turn)",
        per_request(lambda: Schema1Masking(window_turns=5)),
        quick=True,
    ),
    Config(
        "schema1 window=5, per request, batch_turns=10",
        per_request(lambda: Schema1Masking(window_turns=5, batch_turns=10)),
        quick=True,
    ),
    Config(
        "schema1 window=5, per request, clear_at_least=20k",
        per_request(lambda: Schema1Masking(window_turns=5, clear_at_least=20_000)),
    ),
    Config(
        "hiding n=5, triggered at 15k (20k - 5k)",
        triggered(lambda: ToolResultHiding(preserve_recent_n=5), 20_000, 5_000),
    ),
    Config(
        "schema1 window=5, triggered at 15k (20k - 5k)",
        triggered(lambda: Schema1Masking(window_turns=5), 20_000, 5_000),
    ),
    Config(
        "truncation 2k+2k, per request",
        per_request(lambda: ToolResultTruncation(max_chars=8_000)),
    ),
    Config(
        "context guard 20k window, triggered",
        triggered(lambda: ContextGuard(context_window=20_000, reserve_tokens=5_000), 20_000, 5_000),
    ),
]


@dataclass
class Row:
    name: str
    compacted: ReplayStats
    baseline: ReplayStats
    verbatim_ok: bool
    seconds: float


def verbatim_checker(conversation: Sequence[Message]) -> tuple[Callable[..., None], list[str]]:
    """Checks, per call, that the last 5 tool groups and every error result are unchanged."""
    problems: list[str] = []

    def check(index: int, request: Sequence[Message]) -> None:
        original = conversation[:index]
        if len(request) != len(original):
            problems.append(f"call at {index}: messages dropped ({len(request)}/{len(original)})")
            return
        groups = tool_groups(original)
        protected = {i for g in groups[-KEEP_GROUPS:] for i in g.result_indices}
        protected |= {i for i, m in enumerate(original) if m.role == "tool" and is_error_result(m)}
        for i in protected:
            if request[i].content != original[i].content:
                problems.append(f"call at {index}: message {i} changed")
                return

    return check, problems


async def run_config(config: Config, traces: Sequence[tuple[str, list[Message]]]) -> Row:
    counter = MemoCounter(HeuristicTokenCounter())
    compacted, baseline = ReplayStats(), ReplayStats()
    ok = True
    start = time.perf_counter()
    for _name, conversation in traces:
        check, problems = verbatim_checker(conversation)
        baseline += await replay(conversation, None, counter=counter)
        compacted += await replay(
            conversation, config.build(counter), counter=counter, on_call=check
        )
        ok = ok and not problems
        counter.clear()
    return Row(config.name, compacted, baseline, ok, time.perf_counter() - start)


def table(rows: Sequence[Row]) -> str:
    width = max(len(r.name) for r in rows)
    head = (
        f"| {'configuration':<{width}} | input | cost | breaks | compactions | "
        "last 5 groups + errors verbatim |"
    )
    lines = [head, "|" + "---|" * 6]
    for r in rows:
        inp = r.compacted.input_tokens / r.baseline.input_tokens
        cost = r.compacted.cost / r.baseline.cost
        lines.append(
            f"| {r.name:<{width}} | {inp:.1%} | {cost:.1%} | {r.compacted.cache_breaks} | "
            f"{r.compacted.compactions} | {'yes' if r.verbatim_ok else 'no'} |"
        )
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 traces, 4 configurations")
    args = parser.parse_args()
    paths = sorted(p for p in TRACES.glob("*.json") if not p.name.endswith(".meta.json"))
    if args.quick:
        paths = [p for p in paths if "subagent" in p.name or "task3" in p.name][:3] + [
            p for p in paths if "astropy" in p.name
        ]
    traces = [(p.stem, read_conversation(p).messages) for p in paths]
    configs = [c for c in CONFIGS if c.quick or not args.quick]
    configs.append(RECOMMENDED)
    rows = [await run_config(c, traces) for c in configs]
    base = rows[0].baseline
    print(
        f"{len(traces)} traces, {sum(len(t) for _, t in traces):,} messages, "
        f"{base.calls:,} model calls; no compaction: {base.input_tokens:,} input tokens, "
        f"cost {base.cost:,.0f} (heuristic tokens, cached price 0.1)\n"
    )
    print(table(rows))
    print(
        "\ninput and cost: percentage of no compaction (same process, same traces); "
        "cost bills the prefix shared with the previous call at 0.1."
    )
    print(f"replay time: {sum(r.seconds for r in rows):.1f} s for {len(rows)} configurations")


RECOMMENDED = Config(
    "recommended: schema1 window=5, triggered, batch",
    triggered(lambda: Schema1Masking(window_turns=5), 20_000, 5_000),
    quick=True,
)

if __name__ == "__main__":
    asyncio.run(main())
