"""The controller's own cost: per appended step (flat in the history length), and per
triggered run against the strategy alone.

For histories of 100, 1,000 and 10,000 messages (built from the public traces), the
controller is warmed on the history, then messages are appended one at a time and
``token_count`` (and ``maybe_compact`` below the threshold, what an agent calls every step)
is timed per step (median). The baseline is a full recount with the same counter. The 10,000 : 100
ratio of the per-step time must stay under 2.

A triggered run (``compact`` when the trigger fires, on a history the controller has
already counted, as an agent's is) does more than the strategy: it validates the output
(``check_history``), estimates the result (reusing the estimate of every kept message) and
reports; with the default store it also records every removed original and names it. It is
timed against ``strategy.compact(ctx)`` alone on the same 10,000 real messages, minimum of the
runs, GC off; the target is at most 3x. The same run with ``store=None`` is printed beside it.
``--cpu`` times the triggered runs in CPU time, which a loaded machine disturbs far less.

    .venv/bin/python benchmarks/bench_controller.py [--quick] [--cpu]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.helpers.traces import load_trace, trace_names

from ctxcompact import (
    CompactionContext,
    CompactionController,
    CompactionStrategy,
    HeuristicTokenCounter,
    Message,
    Usage,
    from_openai,
)
from ctxcompact.strategies import Schema1Masking, ToolResultHiding
from ctxcompact.testing import FunctionStrategy


def pool() -> list[Message]:
    return [m for name in trace_names() for m in from_openai(load_trace(name))]


def per_step(
    size: int, steps: int, messages: list[Message], *, new_list: bool
) -> tuple[float, float]:
    counter = HeuristicTokenCounter()
    controller = CompactionController(
        FunctionStrategy(lambda ctx: None),
        max_context_size=10**12,
        reserved_context_size=0,
        token_counter=counter,
    )
    history = [messages[i % len(messages)] for i in range(size)]
    controller.token_count(history)
    controller.observe_usage(Usage(input_tokens=12_345), history)
    # The same appended messages for every size, so only the history length differs.
    extra = [messages[-1 - i % len(messages)] for i in range(steps)]
    loop = asyncio.new_event_loop()
    times: list[float] = []
    for message in extra:
        if new_list:  # the agent replaces its list after a compaction; the proxy re-parses
            history = [*history, message]
        else:
            history.append(message)
        start = time.perf_counter()
        controller.token_count(history)
        loop.run_until_complete(controller.maybe_compact(history))
        times.append(time.perf_counter() - start)
    loop.close()
    start = time.perf_counter()
    counter.count(history)
    full = time.perf_counter() - start
    # The median: a garbage-collector pause landing in one step is not the step's cost.
    return statistics.median(times), full


def triggered(
    strategy: CompactionStrategy,
    history: list[Message],
    runs: int,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[float, float, float]:
    """Best time of ``strategy.compact`` alone, of a triggered ``controller.compact`` with
    the default store (a bounded ``MemoryStore`` recording every removed original and naming
    it) and of one with ``store=None``; the three alternate within each run."""
    counter = HeuristicTokenCounter()
    tokens = counter.count(history)
    ctx = CompactionContext(tuple(history), tokens, tokens, 1, token_counter=counter)
    loop = asyncio.new_event_loop()
    alone: list[float] = []
    run: dict[bool, list[float]] = {True: [], False: []}
    gc.disable()
    try:
        for _ in range(runs):
            start = clock()
            loop.run_until_complete(strategy.compact(ctx))
            alone.append(clock() - start)
            for stored in (True, False):
                controller = CompactionController(
                    strategy,
                    max_context_size=tokens,
                    reserved_context_size=1,
                    token_counter=counter,
                    **({} if stored else {"store": None}),
                )
                controller.token_count(history)  # an agent's history was counted at its last step
                start = clock()
                result = loop.run_until_complete(controller.compact(history))
                run[stored].append(clock() - start)
                assert result.changed, "the benchmark must time a run that compacts"
    finally:
        gc.enable()
        loop.close()
    return min(alone), min(run[True]), min(run[False])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer steps")
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="time triggered runs in CPU time (process_time): steadier on a loaded machine",
    )
    args = parser.parse_args()
    steps = 100 if args.quick else 1000
    messages = pool()
    print(f"{'messages':>9s} {'mode':>9s} {'per step':>10s} {'full recount':>13s} {'speedup':>8s}")
    results: dict[tuple[int, bool], float] = {}
    per_step(100, steps, messages, new_list=False)  # warm-up (imports, caches)
    for new_list in (False, True):
        for size in (100, 1_000, 10_000):
            step, full = per_step(size, steps, messages, new_list=new_list)
            results[(size, new_list)] = step
            mode = "new list" if new_list else "in place"
            print(
                f"{size:9d} {mode:>9s} {step * 1e6:8.1f}us {full * 1e3:11.2f}ms {full / step:7.0f}x"
            )
    for new_list in (False, True):
        ratio = results[(10_000, new_list)] / results[(100, new_list)]
        mode = "new list" if new_list else "in place"
        verdict = "flat" if ratio < 2 else "NOT FLAT"
        print(f"ratio 10,000 : 100 ({mode}): {ratio:.2f} ({verdict}, must be < 2)")
    runs = 5 if args.quick else 15
    history = (messages * (1 + 10_000 // len(messages)))[:10_000]
    print(f"\ntriggered run vs the strategy alone, 10,000 messages, best of {runs} runs")
    for strategy in (ToolResultHiding(), Schema1Masking(window_turns=8, batch_turns=0)):
        clock = time.process_time if args.cpu else time.perf_counter
        alone, run, bare = triggered(strategy, history, runs, clock)
        ratio = run / alone
        verdict = "ok" if ratio <= 3 else "OVER"
        print(
            f"{type(strategy).__name__:>18s}: alone {alone * 1e3:6.1f} ms, triggered "
            f"{run * 1e3:6.1f} ms, ratio {ratio:.2f} ({verdict}, target <= 3); "
            f"store=None {bare * 1e3:6.1f} ms, ratio {bare / alone:.2f}"
        )


if __name__ == "__main__":
    main()
