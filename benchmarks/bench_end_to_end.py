"""Dicts in, dicts out: what a user of the library or the proxy pays for hiding, end to end.

An agent or the proxy holds OpenAI (or Anthropic) message dicts; compacting them means
reading them into a history, running the strategy and writing the result back. This prints
each step and the whole path as a ratio to ``[dict(m) for m in raw]``, a shallow copy of every
message dict (the least any code that looks at every message costs), all on one history of
about 10,000 messages built by concatenating the public traces.

Every time is the minimum of N runs (15 by default) with the garbage collector off; each case
is timed in alternate blocks of three runs with the baseline, and its ratio is against the
baseline timed with it, so load drifting on a shared machine skews both sides alike. Times
are the CPU time of this thread (``time.thread_time``): on a busy machine a run of 50 ms is
rarely left alone for its whole length while one of 1 ms often is, so wall-clock minima
(``--wall``) favour the short baseline and inflate every ratio.
Target (issue 10): the OpenAI end-to-end path (``to_openai(hide(from_openai(raw)))``) within
25x of the baseline.

    .venv/bin/python benchmarks/bench_end_to_end.py [--quick] [--runs N] [--wall]
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.helpers.traces import load_trace, trace_names

from ctxcompact import from_anthropic, from_openai, to_anthropic, to_openai
from ctxcompact.strategies import ToolResultHiding

TARGET = 25.0
"""The end-to-end OpenAI path, as a multiple of the shallow copy (issue 10)."""


def build_history(n: int) -> list[dict[str, Any]]:
    """The public traces concatenated (repeated) to about ``n`` messages, ending on a whole
    tool-call group."""
    traces = [load_trace(name) for name in trace_names()]
    raw: list[dict[str, Any]] = []
    while len(raw) < n:
        for trace in traces:
            raw.extend(trace)
    while len(raw) > n or (raw and raw[-1]["role"] == "tool"):
        raw.pop()
    while raw and raw[-1].get("tool_calls"):
        raw.pop()
    return raw


def best_against(
    fn: Callable[[], object],
    floor_fn: Callable[[], object],
    runs: int,
    clock: Callable[[], float] = time.thread_time,
) -> tuple[float, float]:
    """The best times of ``fn`` and ``floor_fn`` over ``runs`` runs each, GC off, timed in
    alternate blocks of three runs."""
    gc.collect()
    gc.disable()
    try:
        best = best_floor = float("inf")
        done = 0
        while done < runs:
            block = min(3, runs - done)
            for _ in range(block):
                start = clock()
                floor_fn()
                best_floor = min(best_floor, clock() - start)
            for _ in range(block):
                start = clock()
                fn()
                best = min(best, clock() - start)
            done += block
        return best, best_floor
    finally:
        gc.enable()


def _table(
    title: str,
    cases: dict[str, Callable[[], object]],
    floor: Callable[[], object],
    runs: int,
    clock: Callable[[], float],
    target: str | None,
) -> list[str]:
    print(f"\n{title}")
    missed = []
    for label, fn in cases.items():
        t, t_floor = best_against(fn, floor, runs, clock)
        ratio = t / t_floor
        verdict = ""
        if label == target:
            ok = ratio <= TARGET
            verdict = f"  target <= {TARGET:.0f}x: {'ok' if ok else 'MISSED'}"
            if not ok:
                missed.append(label)
        print(
            f"  {label:40} {t * 1e3:8.2f} ms {ratio:6.1f}x  (baseline {t_floor * 1e3:.3f} ms)"
            f"{verdict}"
        )
    return missed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2,000 messages, 3 runs")
    parser.add_argument("--runs", type=int, default=None, help="runs per case (default 15)")
    parser.add_argument("--wall", action="store_true", help="wall-clock time, not CPU time")
    args = parser.parse_args(argv)
    n, runs = (2_000, 3) if args.quick else (10_000, 15)
    if args.runs:
        runs = args.runs
    clock = time.perf_counter if args.wall else time.thread_time

    raw = build_history(n)
    history = from_openai(raw)
    hiding = ToolResultHiding()
    n_hidden = len(hiding.hidden_indices(history))
    print(
        f"History: {len(raw):,} OpenAI messages from the public traces, {n_hidden:,} results "
        f"hidden by ToolResultHiding(). Minimum of {runs} runs per case, GC off, "
        f"{'wall-clock' if args.wall else 'CPU'} time; ratio = time / the baseline "
        "[dict(m) for m in messages], timed alternately with it."
    )

    def end_to_end() -> object:
        messages = from_openai(raw)
        return to_openai(hiding.hide(messages) or messages)

    missed = _table(
        "OpenAI: dicts in, dicts out",
        {
            "from_openai(raw)": lambda: from_openai(raw),
            "to_openai(history)": lambda: to_openai(history),
            "ToolResultHiding().hide(history)": lambda: hiding.hide(history),
            "to_openai(hide(from_openai(raw)))": end_to_end,
        },
        lambda: [dict(m) for m in raw],
        runs,
        clock,
        "to_openai(hide(from_openai(raw)))",
    )

    # Anthropic has one system prompt: the traces' later system messages become user ones.
    as_user = [
        m if i == 0 or m["role"] != "system" else {**m, "role": "user"} for i, m in enumerate(raw)
    ]
    system, messages = to_anthropic(from_openai(as_user))
    a_history = from_anthropic(messages, system=system)

    def a_end_to_end() -> object:
        read = from_anthropic(messages, system=system)
        return to_anthropic(hiding.hide(read) or read)

    _table(
        f"Anthropic: the same conversation as {len(messages):,} Anthropic messages",
        {
            "from_anthropic(messages, system)": lambda: from_anthropic(messages, system=system),
            "to_anthropic(history)": lambda: to_anthropic(a_history),
            "ToolResultHiding().hide(history)": lambda: hiding.hide(a_history),
            "to_anthropic(hide(from_anthropic(...)))": a_end_to_end,
        },
        lambda: [dict(m) for m in messages],
        runs,
        clock,
        None,
    )
    if missed:
        print(f"\nMISSED: {', '.join(missed)}")


if __name__ == "__main__":
    main()
