"""Does any built-in default cost more than not compacting? Every one, on every trace.

Every strategy registered in the ``ctxcompact.strategies`` entry-point group (the built-ins
and the ``supersede`` plugin), with no params, as the controller's strategy; each per-request
table (``[observation_masking.schema1]``, ``[tool_result_truncation]``, ``[context_guard]``)
enabled with its defaults and nothing else; and ``examples/recommended.toml`` with and without
its LLM table. Strategies that summarize get a stand-in summarizer answering every request
with the same ~190-word summary; its tokens are billed at the agent's prices and included.

Each is replayed call by call over tests/data/traces (``ctxcompact.replay``, agent mode,
heuristic tokens, as ``ctxcompact replay`` does) at 16,000 / 4,000 and 32,000 / 8,000, with
flat, OpenAI and Anthropic pricing (``ctxcompact.replay.PRICING``). Printed per row, as a
percentage of no compaction in the same process: the cost summed over the traces, the worst
single trace, the worst trace among those that fit the window without compaction (there any
rewrite is optional), calls over the window, and removed-then-referenced (flat runs).

A default fails when its summed cost or its cost on a trace that fits the window is over
100%; ``examples/recommended.toml`` (issue 21's target) also when any single trace shows above
100.0%, the rounding ``ctxcompact replay`` calls a LOSS at. The recommended files, and the
defaults that fit the window (the guard, the summaries, the tiered strategy, the per-request
guard), must also keep every call inside the window. Token counts, not
timings: one run gives the figures. ``tests/test_defaults.py`` runs it and fails on any
failing default.

    .venv/bin/python benchmarks/bench_defaults.py           # ~6 minutes on 2 shared cores
    .venv/bin/python benchmarks/bench_defaults.py --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from ctxcompact import (
    CompactionController,
    Completion,
    Config,
    HeuristicTokenCounter,
    Message,
    load_config,
)
from ctxcompact.replay import MemoCounter, MeteredLLM, ReplayStats, provider, read_conversation
from ctxcompact.replay import replay as replay_one

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "tests" / "data" / "traces"
EXAMPLES = ROOT / "examples"
WINDOWS = ((16_000, 4_000), (32_000, 8_000))
PRICINGS = ("flat", "openai", "anthropic")
SUMMARY = " ".join(
    [
        "The agent is fixing the reported bug. It read the failing module and its tests,",
        "found the cause in the parsing function, changed it and re-ran the tests; two",
        "still fail on an edge case with empty input. Files touched: the module, its test.",
        "Next: handle the empty input, run the whole suite, then report what changed.",
    ]
    * 4
)
NO_STEPS = "pipeline"  # a strategy that changes nothing, for the per-request rows


class StandIn:
    """A summarizer that answers every request with :data:`SUMMARY` (no network)."""

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        system: str | None = None,
        tools: object = None,
        max_tokens: int | None = None,
    ) -> Completion:
        return Completion(Message.assistant(SUMMARY))


Build = Callable[[int, int, MemoCounter], tuple[CompactionController, MeteredLLM | None]]


@dataclass(frozen=True)
class Row:
    """One default: how to build a fresh controller for a window."""

    label: str
    build: Build
    recommended: bool = False  # every call inside the window
    every_trace: bool = False  # no single trace shown above 100.0%
    keeps_window: bool = False  # its defaults fit every request: every call inside too


def from_table(table: dict[str, Any], *, summarizer: bool = False) -> Build:
    """A controller from a config given as a dict (``[compaction]`` limits replaced)."""

    def build(window: int, reserved: int, counter: MemoCounter) -> tuple[Any, Any]:
        compaction = {**table.get("compaction", {}), "max_context_size": window}
        compaction["reserved_context_size"] = reserved
        config = Config.from_dict({**table, "compaction": compaction})
        llm = MeteredLLM(StandIn(), counter) if summarizer else None
        return CompactionController.from_config(config, llm=llm, token_counter=counter), llm

    return build


def from_file(path: Path, *, summarizer: bool) -> Build:
    """A controller from a TOML file, its window replaced (and its LLM by the stand-in)."""

    def build(window: int, reserved: int, counter: MemoCounter) -> tuple[Any, Any]:
        config = load_config(path).with_compaction(
            max_context_size=window, reserved_context_size=reserved
        )
        llm = MeteredLLM(StandIn(), counter) if summarizer else None
        return CompactionController.from_config(config, llm=llm, token_counter=counter), llm

    return build


def rows() -> list[Row]:
    """Every registered strategy's defaults, the per-request tables', the recommended files."""
    summarize = {"llm-summary", "hiding-then-summary"}
    # The strategies whose defaults fit the window: the guard, the summaries (they fit what
    # the summary could not free), the tiered strategy (the guard is its last tier).
    fitting = {"context-guard", "tiered", *summarize}
    found: list[Row] = []
    for ep in sorted(entry_points(group="ctxcompact.strategies"), key=lambda e: e.name):
        table = {"compaction": {"strategy": ep.name}}
        llm = ep.name in summarize
        found.append(
            Row(
                f"{ep.name}{' (stand-in summarizer)' if llm else ''}",
                from_table(table, summarizer=llm),
                keeps_window=ep.name in fitting,
            )
        )
        if ep.name == "tiered":
            found.append(
                Row(
                    "tiered (stand-in summarizer)",
                    from_table(table, summarizer=True),
                    keeps_window=True,
                )
            )
    for key, path in (
        ("observation_masking.schema1", {"observation_masking": {"schema1": {"enabled": True}}}),
        ("tool_result_truncation", {"tool_result_truncation": {"enabled": True}}),
        ("context_guard", {"context_guard": {"enabled": True}}),
    ):
        table = {"compaction": {"strategy": NO_STEPS}, **path}
        found.append(
            Row(
                f"[{key}] per request",
                from_table(table),
                keeps_window=key == "context_guard",
            )
        )
    found.append(
        Row(
            "examples/recommended.toml",
            from_file(EXAMPLES / "recommended.toml", summarizer=False),
            recommended=True,
            every_trace=True,
        )
    )
    found.append(
        Row(
            "examples/recommended-llm.toml (stand-in summarizer)",
            from_file(EXAMPLES / "recommended-llm.toml", summarizer=True),
            recommended=True,
        )
    )
    return found


@dataclass
class Cell:
    """One row at one window and pricing, with a ratio per trace."""

    cost: float = 0.0
    base: float = 0.0
    per_trace: list[float] = field(default_factory=list)
    inside: list[float] = field(default_factory=list)  # traces that fit without compaction
    over: int = 0
    calls: int = 0
    removed: int = 0
    referenced: int = 0
    summaries: int = 0

    def figures(self) -> dict[str, Any]:
        return {
            "cost": self.cost / self.base,
            "worst_trace": max(self.per_trace),
            "worst_inside": max(self.inside, default=None),
            "inside_traces": len(self.inside),
            "calls_over_window": self.over,
            "calls": self.calls,
            "removed_results": self.removed,
            "referenced_results": self.referenced,
            "summaries": self.summaries,
        }


async def measure(
    selected: Sequence[Row], traces: Sequence[tuple[str, list[Message]]]
) -> dict[str, Any]:
    """The report: per row, window and pricing, the :meth:`Cell.figures`."""
    report: dict[str, Any] = {"traces": [name for name, _ in traces], "rows": []}
    tables = {name: provider(name, cached_price=0.1) for name in PRICINGS}
    baselines: dict[tuple[int, str], list[ReplayStats]] = {}
    for window, reserved in WINDOWS:
        for pricing, table in tables.items():
            counter = MemoCounter(HeuristicTokenCounter())
            baselines[window, pricing] = []
            for _, conversation in traces:
                baselines[window, pricing].append(
                    await replay_one(
                        conversation,
                        None,
                        counter=counter,
                        window=(window, reserved),
                        pricing=table,
                    )
                )
                counter.clear()
    for row in selected:
        cells: dict[str, Any] = {}
        for window, reserved in WINDOWS:
            for pricing, table in tables.items():
                cell = Cell()
                counter = MemoCounter(HeuristicTokenCounter())
                for (_, conversation), base in zip(traces, baselines[window, pricing], strict=True):
                    controller, llm = row.build(window, reserved, counter)
                    stats = await replay_one(
                        conversation,
                        controller,
                        counter=counter,
                        window=(window, reserved),
                        pricing=table,
                        llm=llm,
                        referenced=pricing == "flat",
                    )
                    counter.clear()
                    cost = stats.cost + stats.summarizer_cost
                    cell.cost += cost
                    cell.base += base.cost
                    cell.per_trace.append(cost / base.cost)
                    if base.calls_over_window == 0:
                        cell.inside.append(cost / base.cost)
                    cell.over += stats.calls_over_window
                    cell.calls += stats.calls
                    cell.removed += stats.removed_results
                    cell.referenced += stats.referenced_results
                    cell.summaries += stats.summarizer_calls
                cells[f"{window}/{pricing}"] = cell.figures()
        report["rows"].append(
            {
                "label": row.label,
                "recommended": row.recommended,
                "every_trace": row.every_trace,
                "keeps_window": row.keeps_window,
                **cells,
            }
        )
    return report


def failures(report: dict[str, Any]) -> list[str]:
    """Each figure over 100% that a default may not have, in words."""
    found = []
    for row in report["rows"]:
        for key, cell in row.items():
            if not isinstance(cell, dict):
                continue
            if cell["cost"] > 1.0:
                found.append(f"{row['label']} {key}: summed {cell['cost']:.1%}")
            if cell["worst_inside"] is not None and cell["worst_inside"] > 1.0:
                found.append(f"{row['label']} {key}: a trace that fits {cell['worst_inside']:.1%}")
            if (row["recommended"] or row.get("keeps_window")) and cell["calls_over_window"]:
                found.append(f"{row['label']} {key}: {cell['calls_over_window']} calls over")
            if row.get("every_trace") and round(cell["worst_trace"], 3) > 1.0:
                found.append(f"{row['label']} {key}: a trace {cell['worst_trace']:.1%}")
    return found


def render(report: dict[str, Any]) -> str:
    """One Markdown table per window: a row per default, the three pricings side by side."""
    out = [f"{len(report['traces'])} traces; percentages of no compaction (same process)"]
    for window, reserved in WINDOWS:
        out += [
            "",
            f"window {window:,}, reserved {reserved:,}:",
            "",
            "| default | cost flat / OpenAI / Anthropic | worst trace | worst trace that fits "
            "| calls over | removed then referenced |",
            "|---|---|---|---|---|---|",
        ]
        for row in report["rows"]:
            cells = [row[f"{window}/{p}"] for p in PRICINGS]
            flat = cells[0]
            inside = [c["worst_inside"] for c in cells if c["worst_inside"] is not None]
            removed = flat["removed_results"]
            referenced = f"{flat['referenced_results'] / removed:.1%}" if removed else "-"
            costs = " / ".join(format(c["cost"], ".1%") for c in cells)
            fits = format(max(inside), ".1%") if inside else "-"
            out.append(
                f"| {row['label']} | {costs} | {max(c['worst_trace'] for c in cells):.1%} | "
                f"{fits} ({flat['inside_traces']} traces) | "
                f"{flat['calls_over_window']:,} / {flat['calls']:,} | {referenced} |"
            )
    bad = failures(report)
    out += ["", "over 100%: " + ("; ".join(bad) if bad else "none")]
    return "\n".join(out)


def read_traces(paths: Sequence[str]) -> list[tuple[str, list[Message]]]:
    files = (
        [Path(p) for p in paths]
        if paths
        else sorted(p for p in TRACES.glob("*.json") if not p.name.endswith(".meta.json"))
    )
    return [(p.stem, read_conversation(p)) for p in files]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--row", action="append", default=[], help="only rows starting so")
    parser.add_argument("--trace", action="append", default=[], help="a trace file (repeat)")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)  # the guard logs each drop, the tiers each failure
    selected = [r for r in rows() if not args.row or r.label.startswith(tuple(args.row))]
    report = asyncio.run(measure(selected, read_traces(args.trace)))
    print(json.dumps(report, indent=2) if args.json else render(report))
    sys.exit(0)


if __name__ == "__main__":
    main()
