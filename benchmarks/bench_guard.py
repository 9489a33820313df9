"""ContextGuard as a per-request transform on the public traces: fit and cache-adjusted cost.

Every assistant message of every public trace is a model call whose input is the history
before it, passed through ``ContextGuard(context_window=W, reserve_tokens=W // 8,
drop_batch=B)``. For each window and batch this prints the largest request (it must be within
the budget), the input tokens summed over all calls, and the cost when the prefix a call
shares with the previous one is billed at the cached price (0.1 by default), against the
same calls without the guard (the baseline, computed in the same process). Token counts use
the heuristic counter. One run per setting: the figures are counts, not timings.

    .venv/bin/python benchmarks/bench_guard.py [--quick] [--cached-price P]
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.helpers.traces import load_trace, trace_names

from ctxcompact import HeuristicTokenCounter, Message, from_openai
from ctxcompact.strategies import ContextGuard

COUNTER = HeuristicTokenCounter()


def requests(
    history: list[Message], guard: ContextGuard | None, budget: int
) -> list[list[Message]]:
    out = []
    for i, message in enumerate(history):
        if message.role != "assistant" or i == 0:
            continue
        request = history[:i]
        if guard is not None:
            trimmed = guard.guard(request, budget=budget, token_counter=COUNTER)
            request = request if trimmed is None else trimmed
        out.append(request)
    return out


def cost(calls: list[list[Message]], cached_price: float) -> tuple[float, int, int]:
    """(cache-adjusted cost, input tokens, largest request) of consecutive calls."""
    total = 0.0
    tokens_in = peak = 0
    previous: list[Message] = []
    for request in calls:
        shared = 0
        limit = min(len(previous), len(request))
        while shared < limit and (
            previous[shared] is request[shared] or previous[shared] == request[shared]
        ):
            shared += 1
        sizes = [COUNTER.count_message(m) for m in request]
        total += cached_price * sum(sizes[:shared]) + sum(sizes[shared:])
        tokens_in += sum(sizes)
        peak = max(peak, sum(sizes))
        previous = request
    return total, tokens_in, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="the 16k window only")
    parser.add_argument("--cached-price", type=float, default=0.1)
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # the guard logs every drop at WARNING
    histories = [from_openai(load_trace(name)) for name in trace_names()]
    base = [cost(requests(h, None, 0), args.cached_price) for h in histories]
    base_cost = sum(c for c, _, _ in base)
    base_in = sum(n for _, n, _ in base)
    print(f"{len(histories)} traces, {sum(len(requests(h, None, 0)) for h in histories)} calls")
    print(f"no guard: input {base_in:,} tokens, cost {base_cost:,.0f}")
    print(
        f"{'window':>7s} {'batch':>5s} {'budget':>7s} {'largest':>8s} {'input':>12s} {'cost':>8s}"
    )
    windows = (16_000,) if args.quick else (8_000, 16_000, 32_000)
    for window in windows:
        budget = window - window // 8
        for batch in (1, 4, 8, 16):
            guard = ContextGuard(
                context_window=window, reserve_tokens=window // 8, drop_batch=batch
            )
            runs = [cost(requests(h, guard, budget), args.cached_price) for h in histories]
            total = sum(c for c, _, _ in runs)
            tokens_in = sum(n for _, n, _ in runs)
            peak = max(p for _, _, p in runs)
            verdict = "" if peak <= budget else "  OVER BUDGET"
            print(
                f"{window:7d} {batch:5d} {budget:7d} {peak:8,d} {tokens_in / base_in:11.1%} "
                f"{total / base_cost:7.1%}{verdict}"
            )


if __name__ == "__main__":
    main()
