"""ctxcompact's strategies side by side with its peers', on the same traces and cost model.

Every trace in tests/data/traces is replayed call by call (``ctxcompact.replay``, agent mode,
heuristic tokens, as ``ctxcompact replay`` does) at a 16,000-token window with 4,000 reserved
and at 32,000 with 8,000, through:

* ours, loaded the public way so a change of our defaults shows here on the next run:
  ``examples/recommended.toml`` (its window replaced by the row's), and ``context-guard``
  (``fill=0.6``), ``tool-result-hiding`` and ``schema1-masking`` with their defaults, each a
  ``[compaction] strategy`` run by the controller when its trigger fires;
* LangChain's ``ContextEditingMiddleware`` (its default edit, ``ClearToolUsesEdit()``);
* pydantic-ai-harness's ``ClearToolResults``, ``SlidingWindowCompaction`` and
  ``TieredCompaction`` (clearing, then a summary written by a fixed stand-in model), each as
  its docstring example configures it.

Each peer runs its own code through ``benchmarks/_peers.py`` (its own trigger and its own
token estimate), the way its framework runs it: LangChain's middleware edits a copy of the
messages for each model call and leaves the agent's state whole, so it runs as a per-request
transform; the harness's capabilities run before each model request and their edits persist
into the run's history, so they run before every call (``max_messages=1``, ``min_progress=0``)
and what they return replaces the stored history. A peer whose documented trigger is above
the window (100,000 tokens) is also run with that trigger scaled to the window: it fires
where ours does, at the window minus the reserve, counted by the peer's own estimate (~4
characters a token, 18-21% below the replay's counter on these traces) and again by the
replay's counter given to the peer's tokenizer hook.

Printed per window, as percentages of no compaction in the same process: input tokens, the
cache-adjusted cost with flat pricing (cached prefix at 0.1), OpenAI's and Anthropic's
(``ctxcompact.replay.PRICING``), calls over the window (input + reserve > window), removed
then referenced, and how many calls sent something other than the recording (a peer row at 0
never fired). Token counts, not timings: one run gives the figures; nothing here is timed.

    .venv/bin/pip install -e '.[dev,bench]'
    .venv/bin/python benchmarks/bench_peers.py            # both windows, ~4 min
    .venv/bin/python benchmarks/bench_peers.py --quick    # 16k only, 4 traces
    .venv/bin/python benchmarks/bench_peers.py --json [--trace FILE ...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _peers import HarnessCapability, LangChainContextEditing, StandInSummarizer
from langchain.agents.middleware import ClearToolUsesEdit, ContextEditingMiddleware
from langchain_core.messages import BaseMessage
from pydantic_ai_harness.compaction import (
    ClearToolResults,
    SlidingWindowCompaction,
    SummarizingCompaction,
    TieredCompaction,
)

from ctxcompact import (
    CompactionController,
    Config,
    HeuristicTokenCounter,
    Message,
    check_history,
    load_config,
)
from ctxcompact.integrations import langchain as lc_integration
from ctxcompact.replay import MemoCounter, ReplayStats, provider, read_conversation, replay
from ctxcompact.testing import FunctionStrategy

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "tests" / "data" / "traces"
RECOMMENDED = ROOT / "examples" / "recommended.toml"
WINDOWS = ((16_000, 4_000), (32_000, 8_000))
QUICK_TRACES = (
    "claudecode__4d5611e5__post1compact",
    "msa-gemini3pro__django__django-14349",
    "msa-gemini3pro__astropy__astropy-12907",
    "taubench-gpt4o-airline__task3_trial0",
)
PRICINGS = ("flat", "openai", "anthropic")
# The stand-in summarizer's answer, in the harness's own summary sections (186 words).
SUMMARY = "\n".join(
    [
        "## Intent",
        "Fix the failing behaviour the user reported, keep the public API, make the tests pass.",
        "## Key decisions",
        "Change the smallest function that causes the bug; keep the existing error messages.",
        "## Artifacts",
        "The module under repair, its test file, the reproduction script, the commands run.",
        "## Current state",
        "The cause is found and a first patch is written; some tests still fail.",
        "## Next steps",
        "Run the whole test file, fix what still fails, review the diff, report what changed.",
        "## Open questions",
        "Whether the change needs a release note.",
    ]
    * 2
)

Built = tuple[CompactionController, StandInSummarizer | None]


@dataclass(frozen=True)
class Row:
    """One configuration: how to build a fresh controller for a window."""

    label: str
    side: str  # "ours" or the peer's package
    runs_as: str
    build: Callable[[int, int, MemoCounter], Built]


# -- ours: loaded as a user would (TOML file, or a [compaction] table by entry-point name) -------


def ours(strategy: str, params: dict[str, Any]) -> Callable[[int, int, MemoCounter], Built]:
    def build(window: int, reserved: int, counter: MemoCounter) -> Built:
        table = {
            "strategy": strategy,
            "params": params,
            "max_context_size": window,
            "reserved_context_size": reserved,
        }
        config = Config.from_dict({"compaction": table})
        return CompactionController.from_config(config, token_counter=counter), None

    return build


def recommended(window: int, reserved: int, counter: MemoCounter) -> Built:
    config = load_config(RECOMMENDED).with_compaction(
        max_context_size=window, reserved_context_size=reserved
    )
    return CompactionController.from_config(config, token_counter=counter), None


# -- the peers ---------------------------------------------------------------------------------


def per_request(make: Callable[[int, int], Any]) -> Callable[[int, int, MemoCounter], Built]:
    """The peer as a per-request transform: the stored history is never compacted."""

    def build(window: int, reserved: int, counter: MemoCounter) -> Built:
        controller = CompactionController(
            FunctionStrategy(lambda ctx: None, name="no compaction"),
            max_context_size=window,
            reserved_context_size=reserved,
            token_counter=counter,
            transforms=(make(window, reserved),),
            store=None,  # the peers keep nothing: their placeholders reach the model as written
        )
        return controller, None

    return build


def before_each_call(
    make: Callable[[int, int, StandInSummarizer], Any],
) -> Callable[[int, int, MemoCounter], Built]:
    """The peer before every call, its own trigger deciding; its result is the new history."""

    def build(window: int, reserved: int, counter: MemoCounter) -> Built:
        summarizer = StandInSummarizer(SUMMARY)
        controller = CompactionController(
            HarnessCapability(make(window, reserved, summarizer), model=summarizer.model),
            max_context_size=window,
            reserved_context_size=reserved,
            token_counter=counter,
            max_messages=1,
            min_progress=0.0,
            store=None,  # the peers keep nothing: their placeholders reach the model as written
        )
        return controller, summarizer

    return build


# How a peer's trigger is set: as its documentation configures it, scaled to fire where ours
# does (window - reserve) in its own token estimate, or scaled and counted as the replay counts
# (its documented tokenizer hook given ctxcompact's HeuristicTokenCounter: the peers' default
# estimates, ~4 characters a token, count 18-21% fewer tokens than it on these traces).
DOCUMENTED, SCALED, COUNTED = "documented", "scaled", "counted"
COUNTER = HeuristicTokenCounter()


def count_langchain(messages: Sequence[BaseMessage]) -> int:
    return COUNTER.count(lc_integration.to_history(messages))


def langchain(variant: str) -> Callable[[int, int, MemoCounter], Built]:
    def make(window: int, reserved: int) -> LangChainContextEditing:
        if variant == DOCUMENTED:
            # langchain/agents/middleware/context_editing.py:229: no edits given -> one
            # ClearToolUsesEdit(), whose fields (lines 61-76) are trigger=100_000,
            # clear_at_least=0, keep=3, clear_tool_inputs=False, placeholder "[cleared]";
            # line 205: token_count_method="approximate" (count_tokens_approximately).
            return LangChainContextEditing(ContextEditingMiddleware())
        edit = ClearToolUsesEdit(trigger=window - reserved)  # the other fields as above
        counter = count_langchain if variant == COUNTED else None  # line 206: token_counter
        return LangChainContextEditing(
            ContextEditingMiddleware(edits=[edit], token_counter=counter)
        )

    return per_request(make)


def harness_trigger(variant: str, window: int, reserved: int, documented: int) -> dict[str, Any]:
    """The ``max_tokens`` (and ``tokenizer``) of a harness capability for ``variant``."""
    if variant == DOCUMENTED:
        return {"max_tokens": documented}
    tokenizer = COUNTER.count_text if variant == COUNTED else None
    return {"max_tokens": window - reserved, "tokenizer": tokenizer}


def clear_tool_results(variant: str) -> Callable[[int, int, MemoCounter], Built]:
    def make(window: int, reserved: int, _: StandInSummarizer) -> ClearToolResults[Any]:
        # pydantic_ai_harness/compaction/_clear_tool_results.py: no default trigger (line 112
        # requires one); the docstring's example (line 55) is max_tokens=100_000, keep_pairs=3;
        # defaults keep_pairs=3 (line 86), placeholder "[tool result cleared]" (line 89),
        # min_clear_tokens=None (line 98: always clear), tokenizer=None (line 104: ~4
        # characters a token).
        return ClearToolResults(**harness_trigger(variant, window, reserved, 100_000))

    return before_each_call(make)


def sliding_window(variant: str) -> Callable[[int, int, MemoCounter], Built]:
    def make(window: int, reserved: int, _: StandInSummarizer) -> SlidingWindowCompaction[Any]:
        # pydantic_ai_harness/compaction/_sliding_window_compaction.py: no default trigger
        # (line 120); the docstring's example (line 59) is max_messages=80, keep_messages=40;
        # defaults keep_messages=40 (line 90), keep_tokens=None (line 93), tokenizer=None
        # (line 99), preserve_first_user_message=True (line 106), receipts=False (line 111).
        if variant == DOCUMENTED:
            return SlidingWindowCompaction(max_messages=80, keep_messages=40)
        return SlidingWindowCompaction(**harness_trigger(variant, window, reserved, 0))

    return before_each_call(make)


def tiered(variant: str) -> Callable[[int, int, MemoCounter], Built]:
    def make(window: int, reserved: int, summarizer: StandInSummarizer) -> TieredCompaction[Any]:
        # pydantic_ai_harness/compaction/_tiered_compaction.py:55-61, the docstring's example:
        # tiers=[ClearToolResults(max_tokens=1), SummarizingCompaction(model=..., max_messages=1)],
        # target_tokens=100_000 (a tier's own trigger is bypassed, line 41); tokenizer=None
        # (line 96). Summary defaults (_summarizing_compaction.py): keep_messages=20 (line 379),
        # incremental=True (line 414), tool_return_max_chars=500 (line 439),
        # preserve_first_user_message=True (line 409).
        trigger = harness_trigger(variant, window, reserved, 100_000)
        return TieredCompaction(
            tiers=[
                ClearToolResults(max_tokens=1),
                SummarizingCompaction(model=summarizer.model, max_messages=1),
            ],
            target_tokens=trigger["max_tokens"],
            tokenizer=trigger.get("tokenizer"),
        )

    return before_each_call(make)


VARIANTS = {
    DOCUMENTED: "",
    SCALED: ", trigger scaled",
    COUNTED: ", trigger scaled, our counter",
}
PERSISTS = "before every call, persists"
ROWS: tuple[Row, ...] = (
    Row("recommended.toml", "ours", "before every call (its TOML)", recommended),
    Row("context-guard (fill=0.6)", "ours", "triggered", ours("context-guard", {"fill": 0.6})),
    Row("tool-result-hiding (defaults)", "ours", "triggered", ours("tool-result-hiding", {})),
    Row("schema1-masking (defaults)", "ours", "triggered", ours("schema1-masking", {})),
    *(
        Row(
            ("ClearToolUsesEdit() (defaults)" if v == DOCUMENTED else "ClearToolUsesEdit")
            + VARIANTS[v],
            "langchain",
            "per request",
            langchain(v),
        )
        for v in VARIANTS
    ),
    *(
        Row(
            ("ClearToolResults(max_tokens=100_000)" if v == DOCUMENTED else "ClearToolResults")
            + VARIANTS[v],
            "harness",
            PERSISTS,
            clear_tool_results(v),
        )
        for v in VARIANTS
    ),
    *(
        Row(
            (
                "SlidingWindowCompaction(max_messages=80, keep_messages=40)"
                if v == DOCUMENTED
                else "SlidingWindowCompaction(keep_messages=40)"
            )
            + VARIANTS[v],
            "harness",
            PERSISTS,
            sliding_window(v),
        )
        for v in VARIANTS
    ),
    *(
        Row(
            (
                "TieredCompaction(clear, summary; target_tokens=100_000)"
                if v == DOCUMENTED
                else "TieredCompaction(clear, summary)"
            )
            + VARIANTS[v]
            + " (stand-in summary)",
            "harness",
            PERSISTS,
            tiered(v),
        )
        for v in VARIANTS
    ),
)


# -- measuring ---------------------------------------------------------------------------------


class Probe:
    """Per call: did the input differ from the recording, and does it pass check_history?"""

    def __init__(self, conversation: Sequence[Message]) -> None:
        self.conversation = conversation
        self.changed = 0
        self.invalid = 0

    def __call__(self, index: int, request: Sequence[Message]) -> None:
        recorded = self.conversation[:index]
        if len(request) != len(recorded) or any(
            a is not b and a != b for a, b in zip(request, recorded, strict=True)
        ):
            self.changed += 1
        if check_history(request):
            self.invalid += 1


@dataclass
class Result:
    """One configuration at one window, summed over the traces."""

    row: Row
    stats: dict[str, ReplayStats] = field(default_factory=dict)
    changed_calls: int = 0
    invalid_calls: int = 0
    summaries: int = 0
    summarizer_tokens: int = 0


async def measure(
    rows: Sequence[Row],
    traces: Sequence[tuple[str, list[Message]]],
    window: int,
    reserved: int,
    on_request: Callable[[Row, str, int, Sequence[Message]], None] | None = None,
) -> tuple[dict[str, ReplayStats], list[Result]]:
    """The baseline (no compaction) and each row, replayed over ``traces`` with each pricing.

    ``on_request(row, trace, index, request)`` sees what each call of the flat-priced run sent.
    """
    counter = MemoCounter(HeuristicTokenCounter())
    tables = {name: provider(name, cached_price=0.1) for name in PRICINGS}
    base = {name: ReplayStats() for name in PRICINGS}
    results = [Result(row, {name: ReplayStats() for name in PRICINGS}) for row in rows]
    for name, conversation in traces:
        for pricing, table in tables.items():
            base[pricing] += await replay(
                conversation, None, counter=counter, window=(window, reserved), pricing=table
            )
        for result in results:
            probe = Probe(conversation)

            def on_call(
                index: int,
                request: Sequence[Message],
                probe: Probe = probe,
                row: Row = result.row,
                trace: str = name,
            ) -> None:
                probe(index, request)
                if on_request is not None:
                    on_request(row, trace, index, request)

            for pricing, table in tables.items():
                controller, summarizer = result.row.build(window, reserved, counter)
                first = pricing == PRICINGS[0]
                result.stats[pricing] += await replay(
                    conversation,
                    controller,
                    counter=counter,
                    pricing=table,
                    on_call=on_call if first else None,
                    referenced=first,
                )
                if first and summarizer is not None:
                    result.summaries += summarizer.calls
                    result.summarizer_tokens += summarizer.tokens
            result.changed_calls += probe.changed
            result.invalid_calls += probe.invalid
        counter.clear()
    return base, results


def ratios(base: dict[str, ReplayStats], result: Result) -> dict[str, Any]:
    flat = result.stats["flat"]
    return {
        "label": result.row.label,
        "side": result.row.side,
        "runs_as": result.row.runs_as,
        "input": flat.input_tokens / base["flat"].input_tokens,
        **{f"cost_{p}": result.stats[p].cost / base[p].cost for p in PRICINGS},
        "calls": flat.calls,
        "calls_over_window": flat.calls_over_window,
        "removed_results": flat.removed_results,
        "referenced_results": flat.referenced_results,
        "changed_calls": result.changed_calls,
        "invalid_calls": result.invalid_calls,
        "compactions": flat.compactions,
        "failed_compactions": flat.failed_compactions,
        "summaries": result.summaries,
        "summarizer_tokens": result.summarizer_tokens,
    }


def table(item: dict[str, Any]) -> str:
    """One window's table, in Markdown."""
    base = item["baseline"]
    lines = [
        f"window {item['max_context_size']:,}, reserved {item['reserved_context_size']:,}: "
        f"{base['calls']:,} calls; no compaction: {base['input_tokens']:,} input tokens, "
        f"{base['calls_over_window']:,} calls over the window",
        "",
        "| configuration | from | runs | input | cost flat | cost OpenAI | cost Anthropic "
        "| calls over the window | removed then referenced | calls changed |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in item["rows"]:
        removed = r["removed_results"]
        referenced = (
            f"{r['referenced_results']} of {removed} ({r['referenced_results'] / removed:.1%})"
            if removed
            else "0 of 0"
        )
        notes = []
        if r["summaries"]:
            notes.append(f"{r['summaries']} summaries, {r['summarizer_tokens']:,} tokens")
        if r["failed_compactions"]:
            notes.append(f"{r['failed_compactions']} failed")
        if r["invalid_calls"]:
            notes.append(f"{r['invalid_calls']} INVALID")
        label = r["label"] + (f" [{', '.join(notes)}]" if notes else "")
        lines.append(
            f"| {label} | {r['side']} | {r['runs_as']} | {r['input']:.1%} | "
            f"{r['cost_flat']:.1%} | {r['cost_openai']:.1%} | {r['cost_anthropic']:.1%} | "
            f"{r['calls_over_window']:,} / {r['calls']:,} | {referenced} | "
            f"{r['changed_calls']:,} |"
        )
    return "\n".join(lines)


LEGEND = """\
runs: "triggered" = when tokens + reserve reach the window (the controller's default rule);
"per request" = edits what each call sends, the stored history stays whole (LangChain's
middleware); "before every call, persists" = the peer's own trigger is checked before each call
and its result replaces the stored history (the harness's capabilities). "trigger scaled" =
fires at window - reserve in the peer's own estimate (~4 characters a token); "our counter" =
the same, counted by the peer's tokenizer hook with the replay's HeuristicTokenCounter.
Summaries: a fixed 186-word stand-in; [N summaries, T tokens] = the summarizer's calls and
input + output tokens (the replay's counter), not in the cost columns.
calls changed = calls whose input differs from the recording (0: the trigger never fired)."""


def render(report: dict[str, Any]) -> str:
    """The whole printout: one table per window, then the legend."""
    head = f"{len(report['traces'])} traces; percentages of no compaction in the same process"
    return "\n\n".join([head, *(table(item) for item in report["windows"]), LEGEND])


def read_traces(paths: Sequence[str], quick: bool) -> list[tuple[str, list[Message]]]:
    if paths:
        files = [Path(p) for p in paths]
    elif quick:
        files = [TRACES / f"{name}.json" for name in QUICK_TRACES]
    else:
        files = sorted(p for p in TRACES.glob("*.json") if not p.name.endswith(".meta.json"))
    return [(p.stem, read_conversation(p)) for p in files]


async def run(
    args: argparse.Namespace,
    on_request: Callable[[Row, str, int, Sequence[Message]], None] | None = None,
) -> dict[str, Any]:
    """The report ``--json`` prints; ``on_request`` as in :func:`measure`."""
    traces = read_traces(args.trace, args.quick)
    windows = WINDOWS[:1] if args.quick else WINDOWS
    report: dict[str, Any] = {"traces": [name for name, _ in traces], "windows": []}
    for window, reserved in windows:
        base, results = await measure(ROWS, traces, window, reserved, on_request)
        report["windows"].append(
            {
                "max_context_size": window,
                "reserved_context_size": reserved,
                "baseline": {
                    "calls": base["flat"].calls,
                    "input_tokens": base["flat"].input_tokens,
                    "calls_over_window": base["flat"].calls_over_window,
                    **{f"cost_{p}": base[p].cost for p in PRICINGS},
                },
                "rows": [ratios(base, result) for result in results],
            }
        )
    return report


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the 16k window on 4 traces")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--trace", action="append", default=[], help="a trace file (repeat)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    logging.disable(logging.WARNING)  # ours log each compaction, the guard each drop
    report = asyncio.run(run(args))
    print(json.dumps(report, indent=2) if args.json else render(report))


if __name__ == "__main__":
    main()
