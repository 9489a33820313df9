"""Token counters against cl100k_base on the public traces: signed error and speed.

The reference is the OpenAI cookbook recipe on the raw OpenAI messages with cl100k_base:
3 tokens per message + the role + every string value (content, name, reasoning_content),
tool calls as the JSON of their ``function`` object, + 3 to prime the reply. Both counters
are measured against it: TiktokenCounter (same encoding, our own piece accounting) and the
HeuristicTokenCounter (no tokenizer).

    .venv/bin/python benchmarks/bench_tokens.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.helpers.traces import load_trace, trace_names

from ctxcompact import HeuristicTokenCounter, TiktokenCounter, from_openai


def cookbook_tokens(messages: list[dict], encode) -> int:  # type: ignore[no-untyped-def,type-arg]
    total = 3  # every reply is primed with <|start|>assistant<|message|>
    for m in messages:
        total += 3 + len(encode(m["role"]))
        content = m.get("content")
        if isinstance(content, str):
            total += len(encode(content))
        elif isinstance(content, list):
            for part in content:
                text = part.get("text") if part.get("type") == "text" else json.dumps(part)
                total += len(encode(text))
        for key in ("name", "reasoning_content"):
            if isinstance(m.get(key), str):
                total += len(encode(m[key]))
        for call in m.get("tool_calls") or ():
            total += len(encode(json.dumps(call["function"], ensure_ascii=False)))
    return total


def timed(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer traces, one timing run")
    args = parser.parse_args()
    names = trace_names()
    if args.quick:
        names = names[::4]
    heuristic = HeuristicTokenCounter()
    reference = TiktokenCounter("cl100k_base")
    raw = {name: load_trace(name) for name in names}
    histories = {name: from_openai(messages) for name, messages in raw.items()}
    encode = reference._encode

    print(
        f"{'trace':48s} {'msgs':>5s} {'cl100k':>8s} {'tiktoken':>9s} {'err':>6s}"
        f" {'heuristic':>9s} {'err':>6s}"
    )
    totals = [0, 0, 0]
    heu_errors = []
    for name, history in histories.items():
        ref = cookbook_tokens(raw[name], encode)
        tik = reference.count(history)
        heu = heuristic.count(history)
        for i, v in enumerate((ref, tik, heu)):
            totals[i] += v
        heu_errors.append((heu - ref) / ref * 100)
        print(
            f"{name:48s} {len(history):5d} {ref:8d} {tik:9d} {(tik - ref) / ref * 100:+5.1f}%"
            f" {heu:9d} {heu_errors[-1]:+5.1f}%"
        )
    ref, tik, heu = totals
    print(
        f"{'TOTAL':48s} {'':5s} {ref:8d} {tik:9d} {(tik - ref) / ref * 100:+5.1f}%"
        f" {heu:9d} {(heu - ref) / ref * 100:+5.1f}%"
    )
    print(
        f"heuristic per-trace error: min {min(heu_errors):+.1f}%, max {max(heu_errors):+.1f}%"
        " (min >= 0: no trace undercounted)"
    )

    everything = [m for h in histories.values() for m in h]
    repeat = 1 if args.quick else 3

    # Warm: the accuracy pass above already counted these texts once (the heuristic keeps
    # the weight of recent non-ASCII texts), as an agent's counter has at every step.
    t_warm = timed(lambda: heuristic.count(everything), repeat)
    # A proxy parses every request anew: equal texts, other string objects.
    reparsed = [from_openai(messages) for messages in (load_trace(n) for n in names)]
    t_parsed = timed(lambda: sum(heuristic.count(h) for h in reparsed), 1)
    t_ref = timed(lambda: reference.count(everything), repeat)
    print(
        f"speed on {len(everything)} messages: heuristic {t_warm * 1000:.1f} ms counted "
        f"again, {t_parsed * 1000:.1f} ms on the same texts parsed anew; tiktoken "
        f"{t_ref * 1000:.1f} ms, the heuristic is {t_ref / t_warm:.1f}x faster"
    )


if __name__ == "__main__":
    main()
