"""No built-in default costs more than not compacting (issue 21): ``benchmarks/bench_defaults.py``.

The benchmark replays every registered strategy with no params, each per-request table with its
defaults, and the recommended files, over the 17 public traces at 16k/4k and 32k/8k with flat,
OpenAI and Anthropic pricing. The whole run takes minutes (``slow``); the check it applies is
tested on its own here, fast.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_defaults  # noqa: E402


def cell(cost: float, worst: float, inside: float | None, over: int = 0) -> dict[str, Any]:
    return {
        "cost": cost,
        "worst_trace": worst,
        "worst_inside": inside,
        "inside_traces": 0 if inside is None else 1,
        "calls_over_window": over,
        "calls": 10,
        "removed_results": 0,
        "referenced_results": 0,
        "summaries": 0,
    }


def test_the_check_names_each_default_over_what_not_compacting_costs() -> None:
    report = {
        "traces": ["a", "b"],
        "rows": [
            {"label": "fine", "recommended": False, "16000/flat": cell(0.9, 1.3, 0.99)},
            {"label": "summed", "recommended": False, "16000/flat": cell(1.01, 1.2, None)},
            {"label": "fits", "recommended": False, "32000/openai": cell(0.8, 1.02, 1.02)},
            {
                "label": "rec",
                "recommended": True,
                "every_trace": True,
                "16000/anthropic": cell(0.5, 1.001, 0.9),
                "32000/flat": cell(0.5, 1.0003, 0.9),  # shown as 100.0%: no LOSS
            },
            {"label": "llm", "recommended": True, "16000/flat": cell(0.5, 1.2, 0.9, over=2)},
            {"label": "weak", "recommended": False, "16000/flat": cell(0.7, 1.1, 0.9, over=5)},
            {
                "label": "guard",
                "recommended": False,
                "keeps_window": True,
                "16000/flat": cell(0.7, 1.1, 0.9, over=1),
            },
        ],
    }
    found = bench_defaults.failures(report)
    # A trace over the window may cost more than not compacting (there compaction is what
    # lets it run at all), except for the recommended configurations. Calls over the window
    # fail the recommended files and the defaults that fit the window, not the others.
    assert found == [
        "summed 16000/flat: summed 101.0%",
        "fits 32000/openai: a trace that fits 102.0%",
        "rec 16000/anthropic: a trace 100.1%",
        "llm 16000/flat: 2 calls over",
        "guard 16000/flat: 1 calls over",
    ]
    assert "over 100%: none" not in bench_defaults.render(
        {"traces": ["a"], "rows": [{"label": "x", "recommended": True, **all_cells(1.5)}]}
    )


def all_cells(cost: float) -> dict[str, Any]:
    return {
        f"{window}/{pricing}": cell(cost, cost, None)
        for window, _ in bench_defaults.WINDOWS
        for pricing in bench_defaults.PRICINGS
    }


def test_every_registered_strategy_and_table_has_a_row() -> None:
    labels = [row.label for row in bench_defaults.rows()]
    for name in ("tiered", "context-guard", "tool-input-clearing", "schema1-masking", "supersede"):
        assert any(label.startswith(name) for label in labels), name
    assert "[context_guard] per request" in labels
    assert sum(row.recommended for row in bench_defaults.rows()) == 2
    assert [row.label for row in bench_defaults.rows() if row.every_trace] == [
        "examples/recommended.toml"
    ]
    assert {row.label for row in bench_defaults.rows() if row.keeps_window} == {
        "context-guard",
        "hiding-then-summary (stand-in summarizer)",
        "llm-summary (stand-in summarizer)",
        "tiered",
        "tiered (stand-in summarizer)",
        "[context_guard] per request",
    }


@pytest.mark.slow
def test_no_built_in_default_costs_more_than_not_compacting() -> None:
    report = asyncio.run(
        bench_defaults.measure(bench_defaults.rows(), bench_defaults.read_traces([]))
    )
    assert bench_defaults.failures(report) == []
