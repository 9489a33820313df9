"""What the proxy's strict, bounded body parsing costs against plain ``json.loads``.

For every public trace, the chat request body (``{"model", "messages"}``, as an SDK sends it)
is parsed with ``json.loads`` and with ``ctxcompact.proxy._json.parse_body`` (NaN refused,
integer digits and float range checked, nesting depth walked without recursion),
alternating, ``--runs`` times each; prints the median of each per trace and the ratio of the
totals. Bounded: a fixed number of runs, no network.

    .venv/bin/python benchmarks/bench_proxy_json.py [--runs 15]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers.traces import load_trace, trace_names  # noqa: E402

from ctxcompact.proxy import parse_body  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    runs = parser.parse_args().runs
    total_plain = total_strict = 0.0
    total_bytes = 0
    print(f"{'trace':<48} {'KB':>7} {'json.loads ms':>14} {'parse_body ms':>14} {'ratio':>6}")
    for name in trace_names():
        raw = json.dumps({"model": "m", "messages": load_trace(name)}).encode()
        plain: list[float] = []
        strict: list[float] = []
        for _ in range(runs):
            start = time.perf_counter()
            json.loads(raw)
            plain.append(time.perf_counter() - start)
            start = time.perf_counter()
            parse_body(raw)
            strict.append(time.perf_counter() - start)
        p, s = statistics.median(plain), statistics.median(strict)
        total_plain += p
        total_strict += s
        total_bytes += len(raw)
        kb = len(raw) / 1024
        print(f"{name[:48]:<48} {kb:>7.0f} {p * 1e3:>14.2f} {s * 1e3:>14.2f} {s / p:>6.2f}")
    print(
        f"\n{len(trace_names())} traces, {total_bytes / 1e6:.1f} MB, medians of {runs} runs: "
        f"json.loads {total_plain * 1e3:.1f} ms, parse_body {total_strict * 1e3:.1f} ms, "
        f"ratio {total_strict / total_plain:.2f}"
    )


if __name__ == "__main__":
    main()
