"""Example 3: a strategy from a separately installed package, named in TOML.

    pip install ./strategies/supersede
    python examples/03_third_party_package.py

``strategies/supersede`` is a distribution of its own (``ctxcompact-supersede``) that
registers ``supersede`` in the ``ctxcompact.strategies`` entry-point group. Its
``SupersededReadMasking`` masks the older copy of a file the agent read again, counting
tokens with the controller's own counter (``ctx.token_counter``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from _shared import TASK, TOOLS, model, report

from ctxcompact import Agent

CONFIG = Path(__file__).resolve().parent / "supersede.toml"


async def run() -> None:
    async with model() as (llm, name):
        agent = Agent.from_config(CONFIG, llm=llm, tools=TOOLS)
        strategy = agent.controller.strategy
        print(f"model: {name}; strategy: {type(strategy).__module__}.{type(strategy).__name__}")
        report(agent, await agent.run(TASK))


def main() -> None:
    asyncio.run(run())


if __name__ == "__main__":
    main()
