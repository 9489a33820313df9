"""Format conversion throughput and memory on the largest public trace.

Prints, for ``from_openai`` / ``to_openai`` (and the Anthropic pair on the same conversation):
messages per second, MB of JSON per second, the time ratio against ``copy.deepcopy`` and
``json.loads(json.dumps(x))`` of the same list measured in the same process, and peak memory
(``tracemalloc``) against the same baseline. A reference row builds the same history through
pydantic validation (``Message.model_validate`` on dicts whose tool calls were reshaped
beforehand, untimed), the alternative to the converters' direct construction.

Run: ``.venv/bin/python benchmarks/bench_formats.py [--quick]``.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.helpers.traces import load_trace, trace_paths

from ctxcompact import Message, from_anthropic, from_openai, to_anthropic, to_openai


def _shaped(raw: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The trace with tool calls already in the model's shape, so model_validate can read it."""
    out = []
    for message in raw:
        data = dict(message)
        if data.get("tool_calls") is not None:
            data["tool_calls"] = [
                {"id": c["id"], "type": c["type"], **c["function"]} for c in data["tool_calls"]
            ]
        out.append(data)
    return out


def _best(fn: Callable[[], object], repeat: int) -> float:
    """Best wall time of ``repeat`` runs (the least disturbed by the 8 other processes)."""
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _peak(fn: Callable[[], object]) -> tuple[int, int]:
    """(peak bytes during the call, bytes still held by its result)."""
    gc.collect()
    tracemalloc.start()
    result = fn()
    retained, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del result
    return peak, retained


def _table(title: str, raw: list[dict[str, Any]], repeat: int, *, anthropic: bool) -> None:
    megabytes = len(json.dumps(raw).encode()) / 1e6
    n = len(raw)
    history = from_openai(raw)
    shaped = _shaped(raw)
    cases: list[tuple[str, Callable[[], object]]] = [
        ("copy.deepcopy (baseline)", lambda: copy.deepcopy(raw)),
        ("json.loads(json.dumps) (baseline)", lambda: json.loads(json.dumps(raw))),
        ("from_openai", lambda: from_openai(raw)),
        ("to_openai", lambda: to_openai(history)),
        ("model_validate (reference)", lambda: [Message.model_validate(m) for m in shaped]),
    ]
    if anthropic:
        system, messages = to_anthropic(history)
        anthropic_history = from_anthropic(messages, system=system)
        cases += [
            ("from_anthropic", lambda: from_anthropic(messages, system=system)),
            ("to_anthropic", lambda: to_anthropic(anthropic_history)),
        ]
    print(f"\n{title}: {n} messages, {megabytes:.2f} MB of JSON; best of {repeat} runs")
    print(
        f"{'operation':34} {'ms':>7} {'msg/s':>9} {'MB/s':>7} {'x deepcopy':>10} "
        f"{'peak MB':>8} {'held MB':>8} {'peak x deepcopy':>15}"
    )
    times: dict[str, float] = {}
    peaks: dict[str, int] = {}
    for label, fn in cases:
        seconds = _best(fn, repeat)
        peak, held = _peak(fn)
        times[label] = seconds
        peaks[label] = peak
        base_t = times["copy.deepcopy (baseline)"]
        base_p = peaks["copy.deepcopy (baseline)"]
        print(
            f"{label:34} {seconds * 1e3:7.2f} {n / seconds:9,.0f} {megabytes / seconds:7.1f} "
            f"{seconds / base_t:10.2f} {peak / 1e6:8.2f} {held / 1e6:8.2f} {peak / base_p:15.2f}"
        )
    speedup = times["model_validate (reference)"] / times["from_openai"]
    print(
        f"from_openai takes {1 / speedup:.2f}x the time of Message.model_validate on dicts "
        "whose tool calls were reshaped beforehand (untimed)"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few repetitions (CI smoke run)")
    args = parser.parse_args(argv)
    repeat = 3 if args.quick else 30
    path = max(trace_paths(), key=lambda p: p.stat().st_size)
    _table(f"largest trace {path.stem}", load_trace(path.stem), repeat, anthropic=True)
    every = [m for p in trace_paths() for m in load_trace(p.stem)]
    _table("all public traces, one list", every, max(1, repeat // 3), anthropic=False)


if __name__ == "__main__":
    main()
