"""Example 1: the compaction strategy is chosen in a TOML file.

    python examples/01_strategy_in_toml.py                      # examples/agent.toml
    python examples/01_strategy_in_toml.py config.example.toml  # the documented defaults

``[compaction] strategy`` names the strategy (a registered name or ``module:ClassName``),
``[compaction.params]`` its keyword arguments; ``Agent.from_config`` loads it with the
agent's LLM and token counter injected.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from _shared import TASK, TOOLS, model, report

from ctxcompact import Agent

HERE = Path(__file__).resolve().parent


async def run(config_path: Path) -> None:
    async with model() as (llm, name):
        agent = Agent.from_config(config_path, llm=llm, tools=TOOLS)
        print(f"config: {config_path.name}; model: {name}")
        print(f"strategy: {type(agent.controller.strategy).__name__}")
        report(agent, await agent.run(TASK))


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    asyncio.run(run(Path(args[0]) if args else HERE / "agent.toml"))


if __name__ == "__main__":
    main()
