"""Adversarial input against time: linear now, and no stall for other clients of the proxy.

1. Each super-linear input the security review found (issue 18) at 1x, 2x and 4x its size,
   through the code as it was (kept in ``tests/internals/redos.py``) and as it is: the time and
   its ratio to 1x. Linear is about 2x and 4x; the old code was quadratic (4x, 16x), cubic
   (8x, 64x) or, for the recall pattern, exponential (each character more doubled it). The
   old code runs at sizes where its 4x still ends in seconds; the new one at the same sizes
   and at sizes about a megabyte large.
2. The real proxy on loopback (its own process, uvicorn, a SQLite store, recall on, Schema 1
   masking on) in front of a fake upstream that answers a request marked ``ATTACK`` with a
   call to ``recall_tool_result`` with the pattern ``(a+)+$`` on a result of 10 lines
   ``"a" * 26 + "!"`` (11.8 s each before), or whose old tool result is the Schema 1
   placeholder attack of 6.8 kB (7.9 s a request before); ``--run`` and ``--mask-chars``
   make them smaller, for an older checkout. Another client sends one-message
   requests, alone and then while an attacker sends those requests back to back: the ratio of
   its median (and worst) latency with and without the attack.

    .venv/bin/python benchmarks/bench_redos.py [--quick] [--proxy-only]

``--proxy-only`` runs part 2 alone, which needs nothing but the installed ctxcompact (so it can
be pointed at an older checkout with ``PYTHONPATH=old/src``).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import string
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SCHEMA1 = (
    "[Observation masked: old tool result "
    "(tool_call_id={tool_call_id}, tool={tool_name}, chars={original_chars})]"
)
RECALL_PATTERN = "(a+)+$"


# -- part 1: time against size ---------------------------------------------------------------


def _best(fn: Any, text: str, runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        fn(text)
        best = min(best, time.perf_counter() - start)
    return best


def _row(label: str, fn: Any, make: Any, k: int, runs: int) -> None:
    times = [_best(fn, make(m * k), runs) for m in (1, 2, 4)]
    size = len(make(k))
    ratios = "  ".join(f"{t / times[0]:5.1f}x" for t in times[1:])
    cells = "  ".join(f"{t * 1e3:9.2f}" for t in times)
    print(f"  {label:6s} {size:>10,} {cells}   {ratios}")


def _size_for(fn: Any, make: Any, target: float) -> int:
    """The least power of two ``k`` whose input takes ``target`` seconds (the old code's 4x
    then ends in about 16 to 64 times that)."""
    k = 1
    while _best(fn, make(k), 1) < target and k < 1 << 22:
        k *= 2
    return k


def time_against_size(quick: bool) -> None:
    import re

    from tests.internals.redos import KNOWN_ATTACKS

    from ctxcompact import Message
    from ctxcompact.store import MemoryStore, StoredOriginal, execute_recall

    runs = 1 if quick else 3
    print("1. time against size (best of", runs, "runs; ms at 1x, 2x, 4x; ratio to 1x)")
    print(f"  {'code':6s} {'chars (1x)':>10s} {'1x':>9s}  {'2x':>9s}  {'4x':>9s}   2x/1x  4x/1x")
    for attack in KNOWN_ATTACKS:
        print(f"{attack.name}: {attack.what}")
        k_old = _size_for(attack.old, attack.make, 0.005 if quick else 0.02)
        _row("before", attack.old, attack.make, k_old, runs)
        _row("after", attack.new, attack.make, k_old, runs)
        k_new = max(k_old, 1_000_000 // max(1, len(attack.make(1))))
        _row("after", attack.new, attack.make, k_new, runs)

    # The recall pattern: exponential before, so "size" there is characters added one by one.
    print(f"recall pattern {RECALL_PATTERN!r} over a line of 'a' * n + '!'")
    old = re.compile(RECALL_PATTERN)
    base = 18 if quick else 20
    times = [_best(old.search, "a" * n + "!", 1) for n in (base, base + 1, base + 2)]
    print(
        f"  before n={base}, {base + 1}, {base + 2}: "
        + ", ".join(f"{t * 1e3:.1f} ms" for t in times)
        + f" (x{times[1] / times[0]:.1f} per character: n=26 is about "
        f"{times[0] * 2 ** (26 - base):.0f} s, 2x of it years)"
    )

    def recall(text: str) -> str:
        store = MemoryStore()
        store.put(StoredOriginal.from_message(Message.tool("c", text), position=1, kind="hidden"))
        return execute_recall(store, {"tool_call_id": "c", "pattern": RECALL_PATTERN})

    def lines(k: int) -> str:
        return ("a" * 26 + "!\n") * k

    _row("after", recall, lines, 40_000, runs)
    print("  (after: recall on the stored result, storing it included; 1x = 40,000 lines)")


# -- part 2: another client of the proxy under attack --------------------------------------------


def placeholder_attack(template: str, chars: int) -> str:
    literals = [lit for lit, _, _, _ in string.Formatter().parse(template)]
    middle = "".join(literals[1:-1])
    return literals[0] + middle * ((chars - len(literals[0])) // len(middle)) + "x"


def _upstream_app() -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route
    from tests.helpers.proxy_servers import _openai_completion, _openai_tool_completion

    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        messages = body["messages"]
        names = [(t.get("function") or {}).get("name") for t in body.get("tools") or []]
        head = json.dumps(messages[:2])
        pattern = RECALL_PATTERN if "RECALL-ATTACK" in head else "a!" if "RECALL" in head else ""
        answered = '"recall_tool_result"' in json.dumps(messages)  # the proxy's follow-up
        if pattern and "recall_tool_result" in names and not answered:
            arguments = json.dumps({"tool_call_id": "call_0", "pattern": pattern})
            return JSONResponse(_openai_tool_completion([("r1", "recall_tool_result", arguments)]))
        return JSONResponse(_openai_completion(len(messages)))

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def _run_upstream(port: int) -> None:
    import uvicorn

    uvicorn.run(_upstream_app(), host="127.0.0.1", port=port, log_level="error")


def _run_proxy(config_path: str, port: int) -> None:
    import uvicorn

    from ctxcompact import load_config
    from ctxcompact.proxy import create_app

    app = create_app(load_config(config_path))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="error")


def _write_config(folder: Path, upstream: str) -> Path:
    config = folder / "ctxcompact.toml"
    config.write_text(
        "[compaction]\n"
        'strategy = "tool-result-hiding"\n'
        "max_context_size = 4000\n"
        "reserved_context_size = 500\n"
        "[compaction.params]\n"
        "preserve_recent_n = 1\n"
        "[observation_masking.schema1]\n"
        "enabled = true\n"
        "window_turns = 1\n"
        "[proxy]\n"
        f'openai_base_url = "{upstream}/v1"\n'
        f'anthropic_base_url = "{upstream}"\n'
        "[store]\n"
        f'path = "{folder / "originals.db"}"\n'
        "recall = true\n",
        encoding="utf-8",
    )
    return config


def _wait(url: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.post(url, json={"model": "m", "messages": []}, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.05)
    raise RuntimeError(f"{url} did not come up")


def _conversation(marker: str, first_result: str, nonce: int = 0) -> list[dict[str, Any]]:
    """Three tool turns, the first result ``first_result``: Schema 1 (window 1) masks the
    first two on every request, and the conversation stays under the compaction trigger.
    ``nonce`` makes each request new, as an attacker's would be (nothing cached helps)."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": f"{marker} {nonce}: read the files"},
    ]
    for i in range(3):
        call = {"id": f"call_{i}", "type": "function"}
        call["function"] = {"name": "cat", "arguments": json.dumps({"path": f"f{i}"})}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        text = first_result + f"{nonce}" if i == 0 else f"line {i}\n" * 100
        messages.append({"role": "tool", "tool_call_id": f"call_{i}", "content": text})
    return messages


def _client(key: str) -> httpx.Client:
    return httpx.Client(
        headers={"content-type": "application/json", "authorization": f"Bearer {key}"},
        timeout=600,
    )


def _latencies(client: httpx.Client, url: str, body: bytes, n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        client.post(url, content=body).raise_for_status()
        out.append(time.perf_counter() - start)
    return out


def proxy_under_attack(quick: bool, run: int, mask_chars: int) -> None:
    n = 5 if quick else 40
    recalled = ("a" * run + "!\n") * 10
    crafted = placeholder_attack(SCHEMA1, mask_chars)
    plain = ("x" * 60 + "\n") * (mask_chars // 61)
    # Each attack beside a twin of the same shape and size that is not adversarial (a plain
    # pattern, an ordinary result): the twin's load is what any busy client costs the others.
    attacks: dict[str, tuple[Callable[[int], list[dict[str, Any]]], ...]] = {
        f"recall {RECALL_PATTERN} on 10 lines of {run} a": (
            lambda nonce: _conversation("RECALL-PLAIN", recalled, nonce),
            lambda nonce: _conversation("RECALL-ATTACK", recalled, nonce),
        ),
        f"schema1 placeholder attack of {mask_chars:,} chars": (
            lambda nonce: _conversation("MASK-PLAIN", plain, nonce),
            lambda nonce: _conversation("MASK-ATTACK", crafted, nonce),
        ),
    }
    victim = {"model": "m", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 5}
    victim_body = json.dumps(victim).encode()
    from tests.helpers.proxy_servers import free_port

    ctx = mp.get_context("spawn")
    up_port, proxy_port = free_port(), free_port()
    # Each server in its own process, run as `ctxcompact proxy` runs it (uvicorn.run), so the
    # clients here share no GIL with them.
    up = ctx.Process(target=_run_upstream, args=(up_port,), daemon=True)
    up.start()
    with tempfile.TemporaryDirectory() as folder:
        upstream = f"http://127.0.0.1:{up_port}"
        config = _write_config(Path(folder), upstream)
        proxy = ctx.Process(target=_run_proxy, args=(str(config), proxy_port), daemon=True)
        proxy.start()
        url = f"http://127.0.0.1:{proxy_port}/v1/chat/completions"
        try:
            _wait(f"{upstream}/v1/chat/completions")
            _wait(url)
            with _client("sk-victim") as victim_client:
                _latencies(victim_client, url, victim_body, 3)  # warm-up
                alone = _latencies(victim_client, url, victim_body, n)
                print(f"\n2. the proxy on loopback: another client's one-message request, {n} each")
                print(
                    f"  alone: median {statistics.median(alone) * 1e3:.2f} ms, "
                    f"worst {max(alone) * 1e3:.2f} ms"
                )
                for name, (benign, attack) in attacks.items():
                    print(f"  {name}:")
                    twin = _under(victim_client, url, victim_body, benign, "as busy, benign", n)
                    hit = _under(victim_client, url, victim_body, attack, "under the attack", n)
                    print(
                        f"    attack / benign: median {hit[0] / twin[0]:.2f}x, "
                        f"worst {hit[1] / twin[1]:.2f}x"
                    )
        finally:
            for process in (proxy, up):
                process.terminate()
                process.join(10)


def _under(
    victim_client: httpx.Client,
    url: str,
    victim: bytes,
    conversation: Callable[[int], list[dict[str, Any]]],
    label: str,
    n: int,
) -> tuple[float, float]:
    """The victim's ``n`` latencies while another client sends ``conversation`` back to back
    (each request new); prints them, returns their median and worst."""
    other_times: list[float] = []
    started, done = threading.Event(), threading.Event()

    def other() -> None:
        nonce = 0
        with _client("sk-other") as own:
            while not done.is_set():
                nonce += 1
                body = json.dumps({"model": "m", "messages": conversation(nonce)}).encode()
                started.set()
                other_times.extend(_latencies(own, url, body, 1))

    thread = threading.Thread(target=other)
    thread.start()
    started.wait()
    time.sleep(0.05)  # its first request is in the proxy's hands
    under = _latencies(victim_client, url, victim, n)
    done.set()
    thread.join()
    median, worst = statistics.median(under), max(under)
    print(
        f"    {label:17s} median {median * 1e3:8.2f} ms, worst {worst * 1e3:8.2f} ms "
        f"({len(other_times)} requests of the other client, median "
        f"{statistics.median(other_times) * 1e3:.1f} ms each)"
    )
    return median, worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer runs and requests")
    parser.add_argument("--proxy-only", action="store_true", help="part 2 alone")
    parser.add_argument("--run", type=int, default=26, help="part 2: a's per recalled line")
    parser.add_argument("--mask-chars", type=int, default=6_800, help="part 2: crafted result")
    args = parser.parse_args()
    if not args.proxy_only:
        time_against_size(args.quick)
    proxy_under_attack(args.quick, args.run, args.mask_chars)


if __name__ == "__main__":
    main()
