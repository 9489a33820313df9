"""The controller's running count alone, per appended step: what checking every message costs.

Every call compares every message seen before with the one now at its place (identity, then
equality), so a step is linear in the history length, with a C-level constant. For histories
of 100, 1,000 and 10,000 messages built from the public traces, one message is appended per
step and ``CompactionController.token_count`` is timed (median of the steps); the baseline
is a full recount with the same counter, in the same process. The last column is the
comparison's cost per message already seen. ``benchmarks/bench_controller.py`` shows the
controller's per-step cost, which this is a part of.

    .venv/bin/python benchmarks/bench_running_count.py [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.helpers.traces import load_trace, trace_names

from ctxcompact import CompactionController, HeuristicTokenCounter, Message, Usage, from_openai
from ctxcompact.testing import FunctionStrategy


def pool() -> list[Message]:
    return [m for name in trace_names() for m in from_openai(load_trace(name))]


def per_step(size: int, steps: int, messages: list[Message], *, new_list: bool) -> float:
    counter = HeuristicTokenCounter()
    running = CompactionController(
        FunctionStrategy(lambda ctx: None), max_context_size=10**12, token_counter=counter
    )
    history = [messages[i % len(messages)] for i in range(size)]
    running.observe_usage(Usage(input_tokens=12_345), history)
    extra = [messages[-1 - i % len(messages)] for i in range(steps)]
    times: list[float] = []
    for message in extra:
        if new_list:
            history = [*history, message]
        else:
            history.append(message)
        start = time.perf_counter()
        running.token_count(history)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def full_recount(size: int, messages: list[Message], runs: int) -> float:
    counter = HeuristicTokenCounter()
    history = [messages[i % len(messages)] for i in range(size)]
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        counter.count(history)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer steps")
    args = parser.parse_args()
    steps = 200 if args.quick else 2000
    messages = pool()
    per_step(100, steps, messages, new_list=False)  # warm-up
    print(f"{steps} steps per row (median); full recount: best of 5 runs")
    print(f"{'messages':>9s} {'mode':>9s} {'per step':>10s} {'recount':>10s} {'ns/msg':>7s}")
    for new_list in (False, True):
        base = per_step(100, steps, messages, new_list=new_list)
        for size in (100, 1_000, 10_000):
            step = base if size == 100 else per_step(size, steps, messages, new_list=new_list)
            full = full_recount(size, messages, 5)
            per_message = (step - base) / (size - 100) * 1e9 if size > 100 else float("nan")
            mode = "new list" if new_list else "in place"
            print(
                f"{size:9d} {mode:>9s} {step * 1e6:8.1f}us {full * 1e3:8.2f}ms {per_message:7.2f}"
            )


if __name__ == "__main__":
    main()
