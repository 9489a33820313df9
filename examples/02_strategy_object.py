"""Example 2: a strategy object passed to the agent in Python.

    python examples/02_strategy_object.py

The same knobs as the TOML file, as constructor arguments: the strategy that rewrites the
stored history when it grows too big, per-request transforms (here Schema 1 masking, which
changes what is sent but never what is stored), and truncation of huge tool results on arrival.
"""

from __future__ import annotations

import asyncio

from _shared import TASK, TOOLS, model, report

from ctxcompact import Agent
from ctxcompact.strategies import Schema1Masking, ToolResultHiding, ToolResultTruncation


async def run() -> None:
    async with model() as (llm, name):
        agent = Agent(
            llm,
            tools=TOOLS,
            system_prompt="You are a careful coding agent. Use the tools, then answer briefly.",
            compaction=ToolResultHiding(preserve_recent_n=1),
            max_context_size=6_000,
            reserved_context_size=2_000,
            transforms=[Schema1Masking(window_turns=3, batch_turns=2)],
            tool_result_truncation=ToolResultTruncation(max_chars=20_000),
            on_event=lambda event: print(f"  event: {event.strategy} {event.status}"),
        )
        print(f"model: {name}; strategy: {type(agent.controller.strategy).__name__}")
        report(agent, await agent.run(TASK))


def main() -> None:
    asyncio.run(run())


if __name__ == "__main__":
    main()
