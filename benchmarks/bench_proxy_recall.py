"""What a recall round costs through the proxy itself, on loopback (no model time).

The official OpenAI SDK sends one compacted conversation (4 tool turns of 300 lines, hiding
with n=1, a SQLite store, ``recall = true``) to the proxy in front of the tests' fake upstream,
which answers at once. Compared, in the same process: an answer without a recall call (the
baseline: the recall tool offered, the stream relayed) and one whose first answer calls
``recall_tool_result`` once (the proxy holds the stream, runs the recall on the SQLite store,
asks again and relays the second stream). Time to the first content chunk and to the end of
the stream, median of ``--runs`` (default 20). A real model adds its own time to first token
for the follow-up, and the rest of the first answer after the call's first delta.

    .venv/bin/python benchmarks/bench_proxy_recall.py [--runs N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import openai
from tests.helpers.proxy_servers import FakeUpstream, serve_in_thread
from tests.test_proxy import openai_history, write_config

from ctxcompact import load_config
from ctxcompact.proxy import create_app


def timed(client: openai.OpenAI, messages: list[dict[str, object]]) -> tuple[float, float]:
    start = time.perf_counter()
    first = 0.0
    for chunk in client.chat.completions.create(
        model="m", messages=messages, max_tokens=100, stream=True
    ):
        if not first and chunk.choices and chunk.choices[0].delta.content:
            first = time.perf_counter() - start
    return first, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=20, help="requests per configuration")
    args = parser.parse_args()
    fake = FakeUpstream()
    messages = openai_history(turns=4, output_chars=300)
    with tempfile.TemporaryDirectory() as folder, serve_in_thread(fake.app()) as url:
        extra = f'[store]\npath = "{Path(folder) / "o.db"}"\nrecall = true\n'
        config = load_config(write_config(Path(folder), url, extra=extra))
        with serve_in_thread(create_app(config)) as proxy:
            client = openai.OpenAI(base_url=f"{proxy}/v1", api_key="sk-bench", max_retries=0)
            timed(client, messages)  # warm-up
            results: dict[str, list[tuple[float, float]]] = {"no recall": [], "1 recall": []}
            for _ in range(args.runs):
                results["no recall"].append(timed(client, messages))
                fake.recall_ids = ["call_0"]
                results["1 recall"].append(timed(client, messages))
    base = statistics.median(t for _, t in results["no recall"])
    print(f"{'answer':>10s} {'first content':>14s} {'whole stream':>13s} {'vs no recall':>13s}")
    for label, times in results.items():
        first = statistics.median(f for f, _ in times)
        total = statistics.median(t for _, t in times)
        print(f"{label:>10s} {first * 1e3:12.2f}ms {total * 1e3:11.2f}ms {total / base:12.2f}x")
    print(f"(median of {args.runs} requests each; loopback, fake upstream answering at once)")


if __name__ == "__main__":
    main()
