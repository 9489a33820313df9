"""Where issue 14's recommendation sat on the cost/input frontier of the public traces.

Issue 14 recommended a masking + input-clearing pipeline run before every call; issue 21
replaced it with the tiered strategy (examples/recommended.toml, the last row here). The
candidates are built as issue 14 measured them: every valid rewrite kept (``cache_pricing=None``;
today's controller weighs an optional rewrite against the cache it breaks).

Every trace in tests/data/traces is replayed call by call (``ctxcompact.replay``, agent mode,
heuristic tokens) at a 16,000-token window with 4,000 reserved, through the recommended
configuration (loaded from its TOML file, as a user would) and through candidate
configurations around it: result masking alone, masking plus ToolInputClearing with
other batch sizes and thresholds, masking or hiding with their own ``clear_tool_inputs``.
Printed, summed over the traces, as percentages of no compaction in the same process: input
tokens, cache-adjusted cost with cached reads at 0.1 (flat pricing, the issue 14 target) and
at Anthropic's prices, cache breaks, and whether the last 5 tool groups (calls and results),
every error result and every message reached the model at every call. Then the floor: what
no configuration of this family can go under.

    .venv/bin/python benchmarks/bench_recommended.py      # one run of ~25 configurations, ~1 min
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxcompact import (
    CompactionController,
    HeuristicTokenCounter,
    Message,
    load_config,
    tool_groups,
)
from ctxcompact.kit import is_error_result
from ctxcompact.replay import MemoCounter, ReplayStats, provider, read_conversation, replay
from ctxcompact.strategies import Pipeline, Schema1Masking, ToolInputClearing, ToolResultHiding

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "tests" / "data" / "traces"
RECOMMENDED = ROOT / "examples" / "recommended.toml"
WINDOW, RESERVED, KEEP = 16_000, 4_000, 5
TARGET_COST, TARGET_INPUT = 0.65, 0.50
SHORT = "[masked: {tool_name} result, {original_chars} chars]"

Build = Callable[[MemoCounter], CompactionController]


def every_call(*steps: Callable[[], object]) -> Build:
    """The pipeline before every call (``max_messages=1, min_progress=0``), as the TOML does."""

    def build(counter: MemoCounter) -> CompactionController:
        return CompactionController(
            Pipeline(*(s() for s in steps)),  # type: ignore[arg-type]
            max_context_size=WINDOW,
            reserved_context_size=RESERVED,
            token_counter=counter,
            max_messages=1,
            min_progress=0.0,
            cache_pricing=None,  # as issue 14 measured: each batch kept
        )

    return build


def at_threshold(*steps: Callable[[], object]) -> Build:
    """The pipeline only when the threshold fires (``tokens + reserved >= window``)."""

    def build(counter: MemoCounter) -> CompactionController:
        return CompactionController(
            Pipeline(*(s() for s in steps)),  # type: ignore[arg-type]
            max_context_size=WINDOW,
            reserved_context_size=RESERVED,
            token_counter=counter,
            cache_pricing=None,
        )

    return build


def mask(placeholder: str = "[masked]", **kw: Any) -> Callable[[], object]:
    # Seed 001's behaviour unless told otherwise: every run may mask, the boundary moving
    # every turn (the strategy's own defaults now batch by its window, and mask only what
    # does not fit).
    options = {"batch_turns": 0, "always": True, **kw}
    return lambda: Schema1Masking(window_turns=KEEP, placeholder_template=placeholder, **options)


def hide(**kw: Any) -> Callable[[], object]:
    return lambda: ToolResultHiding(preserve_recent_n=KEEP, placeholder="[masked]", **kw)


def clear(**kw: Any) -> Callable[[], object]:
    return lambda: ToolInputClearing(keep_recent=KEEP, **kw)


def from_toml(counter: MemoCounter) -> CompactionController:
    return CompactionController.from_config(load_config(RECOMMENDED), token_counter=counter)


CANDIDATES: list[tuple[str, Build]] = [
    (
        "previous recommendation: mask, clear_at_least=5000 (at threshold)",
        at_threshold(mask(SHORT, clear_at_least=5_000)),
    ),
    (
        "mask + clear inputs, clear_at_least=5000 (at threshold)",
        at_threshold(mask(clear_at_least=5_000), clear(clear_at_least=5_000, min_chars=200)),
    ),
    ("mask + clear inputs, no batching (at threshold)", at_threshold(mask(), clear(min_chars=31))),
    ("mask only, batch_turns=12 (every call)", every_call(mask(batch_turns=12))),
    *[
        (
            f"mask + clear inputs, batch_turns={b}, min_chars={m}",
            every_call(mask(batch_turns=b), clear(batch_turns=b, min_chars=m)),
        )
        for b in (4, 8, 10, 11, 12, 13, 16)
        for m in ((31, 200) if b == 12 else (31,))
    ],
    (
        "mask + clear inputs, batch_turns=12, verbose placeholder",
        every_call(mask(SHORT, batch_turns=12), clear(batch_turns=12, min_chars=31)),
    ),
    (
        "mask + clear inputs, clear_at_least=5000 each (every call)",
        every_call(mask(clear_at_least=5_000), clear(clear_at_least=5_000, min_chars=31)),
    ),
    # One strategy instead of a pipeline: clear_tool_inputs clears the calls of the masked
    # turns (a call whose error result is kept keeps its arguments).
    *[
        (
            f"schema1 clear_tool_inputs, batch_turns={b}, min_chars={m}",
            every_call(mask(batch_turns=b, clear_tool_inputs=True, clear_inputs_min_chars=m)),
        )
        for b in (10, 11, 12)
        for m in ((31, 200) if b == 12 else (31,))
    ],
    (
        "hiding clear_tool_inputs, batch_turns=12, min_chars=31 (errors hidden too)",
        every_call(hide(batch_turns=12, clear_tool_inputs=True, clear_inputs_min_chars=31)),
    ),
    ("recommended.toml", from_toml),
]


@dataclass
class Row:
    name: str
    flat: ReplayStats
    anthropic: ReplayStats
    base_flat: ReplayStats
    base_anthropic: ReplayStats
    groups_ok: bool
    errors_ok: bool
    turns_ok: bool


class Checker:
    """Per call: no message dropped, the last 5 groups and every error result unchanged."""

    def __init__(self, conversation: Sequence[Message]) -> None:
        self.conversation = conversation
        self.groups = tool_groups(conversation)
        self.errors = [
            i for i, m in enumerate(conversation) if m.role == "tool" and is_error_result(m)
        ]
        self.groups_ok = self.errors_ok = self.turns_ok = True

    def __call__(self, index: int, request: Sequence[Message]) -> None:
        if len(request) != index:
            self.turns_ok = False
            return
        conv = self.conversation
        for g in [g for g in self.groups if g.call_index < index][-KEEP:]:
            for i in (g.call_index, *g.result_indices):
                if i < index and request[i] != conv[i]:
                    self.groups_ok = False
        if any(request[i].content != conv[i].content for i in self.errors if i < index):
            self.errors_ok = False


async def run(name: str, build: Build, traces: Sequence[tuple[str, list[Message]]]) -> Row:

    counter = MemoCounter(HeuristicTokenCounter())
    row = Row(name, ReplayStats(), ReplayStats(), ReplayStats(), ReplayStats(), True, True, True)
    anthropic = provider("anthropic")
    for _trace, conversation in traces:
        check = Checker(conversation)
        row.base_flat += await replay(conversation, None, counter=counter)
        row.base_anthropic += await replay(conversation, None, counter=counter, pricing=anthropic)
        row.flat += await replay(conversation, build(counter), counter=counter, on_call=check)
        row.anthropic += await replay(
            conversation, build(counter), counter=counter, pricing=anthropic
        )
        row.groups_ok &= check.groups_ok
        row.errors_ok &= check.errors_ok
        row.turns_ok &= check.turns_ok
        counter.clear()
    return row


def ratios(row: Row) -> tuple[float, float, float]:
    return (
        row.flat.input_tokens / row.base_flat.input_tokens,
        row.flat.cost / row.base_flat.cost,
        row.anthropic.cost / row.base_anthropic.cost,
    )


def table(rows: Sequence[Row]) -> str:
    width = max(len(r.name) for r in rows)
    yes = {True: "yes", False: "no"}
    lines = [
        f"| {'configuration':<{width}} | input | cost (0.1) | cost (Anthropic) | breaks | "
        "last 5 groups | errors | no turn dropped | target |",
        "|" + "---|" * 9,
    ]
    for r in rows:
        inp, cost, anth = ratios(r)
        met = inp <= TARGET_INPUT and cost <= TARGET_COST and r.groups_ok and r.errors_ok
        lines.append(
            f"| {r.name:<{width}} | {inp:.1%} | {cost:.1%} | {anth:.1%} | "
            f"{r.flat.cache_breaks} | {yes[r.groups_ok]} | {yes[r.errors_ok]} | "
            f"{yes[r.turns_ok]} | {'met' if met and r.turns_ok else '-'} |"
        )
    return "\n".join(lines)


async def fresh_cost(traces: Sequence[tuple[str, list[Message]]]) -> float:
    """No compaction with free cached reads: what the first sending of each message costs."""
    total = 0.0
    for _, conversation in traces:
        stats = await replay(conversation, None, counter=HeuristicTokenCounter(), cached_price=0.0)
        total += stats.cost
    return total


async def main() -> None:
    logging.getLogger("ctxcompact").setLevel(logging.ERROR)  # one line per compaction
    paths = sorted(p for p in TRACES.glob("*.json") if not p.name.endswith(".meta.json"))
    traces = [(p.stem, read_conversation(p)) for p in paths]
    start = time.perf_counter()
    rows = [await run(name, build, traces) for name, build in CANDIDATES]
    base = rows[0].base_flat
    print(
        f"{len(traces)} traces, {base.calls:,} model calls, window {WINDOW:,}, reserved "
        f"{RESERVED:,}; no compaction: {base.input_tokens:,} input tokens, cost "
        f"{base.cost:,.0f} (heuristic tokens; cached reads 0.1)\n"
    )
    print(table(rows))
    fresh = await fresh_cost(traces) / base.cost
    scale = 0.1 * base.input_tokens / base.cost
    print(
        f"\nfloor: each message's first sending is billed in full whatever the strategy "
        f"({fresh:.1%} of the no-compaction cost) and everything else at least at 0.1, so a "
        f"configuration at input ratio r costs at least {fresh:.1%} + {scale:.3f} x r "
        f"(minus the cached share of first sendings) with no cache break: "
        f"{fresh + TARGET_INPUT * scale - 0.1 * fresh:.1%} at r = {TARGET_INPUT:.0%}, which "
        f"leaves {TARGET_COST - fresh - TARGET_INPUT * scale + 0.1 * fresh:.1%} of the "
        "no-compaction cost for re-billing after cache breaks."
    )
    inp, cost, _ = ratios(rows[-1])
    met = inp <= TARGET_INPUT and cost <= TARGET_COST and rows[-1].groups_ok
    print(
        f"recommended.toml (tiered since issue 21, which drops turns to fit): input {inp:.1%}, "
        f"cost {cost:.1%}: issue 14's target (input <= "
        f"{TARGET_INPUT:.0%}, cost <= {TARGET_COST:.0%}, last {KEEP} groups and errors "
        f"verbatim, no turn dropped) {'met' if met and rows[-1].errors_ok else 'NOT met'}."
    )
    print("\nrecommended.toml by agent (in-sample: the batch size was chosen on these traces):")
    for family in sorted({name.split("__")[0] for name, _ in traces}):
        subset = [t for t in traces if t[0].split("__")[0] == family]
        row = await run(family, from_toml, subset)
        inp, cost, anth = ratios(row)
        print(
            f"  {family:<32} {len(subset):>2} traces: input {inp:.1%}, cost {cost:.1%}, "
            f"Anthropic-priced {anth:.1%}"
        )
    print(f"one run, {len(rows)} configurations in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    asyncio.run(main())
