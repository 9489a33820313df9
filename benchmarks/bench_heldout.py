"""Held-out check of the tiered defaults: chosen on one family of traces, measured on the other.

The tiered strategy's defaults (``fill``, ``keep_recent``) were swept on the same 17 public
traces they are reported on. This splits the traces by a fixed rule, the agent that recorded
them: half A is Claude Code (6 traces), half B mini-swe-agent and tau-bench (11). On each half
it replays a small grid around the defaults (``examples/recommended.toml``, the default store,
16k/4k and 32k/8k, flat pricing, cached reads at 0.1), picks the setting with the lowest mean
cost among those that leave no call over the window, and measures that pick on the other half
against the other half's own best: the gap is what choosing on traces you have costs on traces
you do not. One run, token counts (deterministic), a few minutes on 2 cores.

    python benchmarks/bench_heldout.py
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import logging
from pathlib import Path

from ctxcompact import CompactionController, HeuristicTokenCounter, load_config
from ctxcompact.replay import MemoCounter, ReplayStats, read_conversation, replay

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "tests" / "data" / "traces"
RECOMMENDED = ROOT / "examples" / "recommended.toml"
WINDOWS = ((16_000, 4_000), (32_000, 8_000))
FILLS = (0.3, 0.4, 0.5)
KEEP_RECENT = (3, 5, 8)
DEFAULT = (0.4, 5)


def half(name: str) -> str:
    """The fixed rule: which agent recorded the trace."""
    return "A" if name.startswith("claudecode") else "B"


async def measure(
    names: list[str], fill: float, keep: int, window: tuple[int, int]
) -> tuple[float, int, float]:
    """Cost (% of no compaction), calls over the window, removed then referenced (%)."""
    base, ours = ReplayStats(), ReplayStats()
    for name in names:
        conversation = read_conversation(TRACES / f"{name}.json")
        counter = MemoCounter(HeuristicTokenCounter())
        base += await replay(conversation, None, counter=counter, window=window)
        config = load_config(RECOMMENDED).with_compaction(
            max_context_size=window[0],
            reserved_context_size=window[1],
            params={"fill": fill, "keep_recent": keep},
        )
        controller = CompactionController.from_config(config, token_counter=counter)
        ours += await replay(
            conversation, controller, counter=counter, window=window, referenced=True
        )
    rate = ours.referenced_results / ours.removed_results if ours.removed_results else 0.0
    return 100 * ours.cost / base.cost, ours.calls_over_window, 100 * rate


async def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    logging.getLogger("ctxcompact").setLevel(logging.ERROR)
    names = sorted(p.stem for p in TRACES.glob("*.json") if not p.name.endswith(".meta.json"))
    halves = {h: [n for n in names if half(n) == h] for h in "AB"}
    table: dict[tuple[str, float, int], list[tuple[float, int, float]]] = {}
    for h, (fill, keep) in itertools.product("AB", itertools.product(FILLS, KEEP_RECENT)):
        table[h, fill, keep] = [await measure(halves[h], fill, keep, w) for w in WINDOWS]

    def score(h: str, fill: float, keep: int) -> float:
        return sum(c for c, _, _ in table[h, fill, keep]) / len(WINDOWS)

    def fits(h: str, fill: float, keep: int) -> bool:
        return all(over == 0 for _, over, _ in table[h, fill, keep])

    grid = list(itertools.product(FILLS, KEEP_RECENT))
    print("half  fill keep | 16k cost over rtr | 32k cost over rtr | mean cost")
    for h, (fill, keep) in itertools.product("AB", grid):
        cells = " | ".join(f"{c:5.1f}% {o:3d} {r:4.1f}%" for c, o, r in table[h, fill, keep])
        mark = " (default)" if (fill, keep) == DEFAULT else ""
        mean = score(h, fill, keep)
        print(f"{h} ({len(halves[h])})  {fill:.1f} {keep:4d} | {cells} | {mean:5.1f}%{mark}")
    for chosen_on, held_out in (("A", "B"), ("B", "A")):
        pick = min((g for g in grid if fits(chosen_on, *g)), key=lambda g: score(chosen_on, *g))
        best = min((g for g in grid if fits(held_out, *g)), key=lambda g: score(held_out, *g))
        gap = score(held_out, *pick) - score(held_out, *best)
        print(
            f"chosen on {chosen_on}: fill={pick[0]}, keep_recent={pick[1]}; on {held_out} it costs "
            f"{score(held_out, *pick):.1f}% (mean of 16k and 32k), {held_out}'s own best "
            f"fill={best[0]}, keep_recent={best[1]} {score(held_out, *best):.1f}%: "
            f"{gap:.1f} points more; calls over the window on {held_out}: "
            f"{sum(o for _, o, _ in table[held_out, pick[0], pick[1]])}"
        )


if __name__ == "__main__":
    asyncio.run(main())
