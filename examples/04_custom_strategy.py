"""Example 4: a custom strategy in about twenty lines.

    python examples/04_custom_strategy.py

A strategy is any object with ``async def compact(ctx) -> list[Message] | None``. This one
shortens every tool result except the newest ``recent`` ones to its first ``keep_chars``
characters. It only changes tool results' content, so tool calls stay paired; it never
mutates ``ctx.history``; and it returns ``None`` when there is nothing to shorten.
"""

from __future__ import annotations

import asyncio

from _shared import TASK, TOOLS, model, report

from ctxcompact import Agent, CompactionContext, Message


class ShortenOldResults:
    """Cut old tool results to their first ``keep_chars`` characters."""

    def __init__(self, *, keep_chars: int = 200, recent: int = 1) -> None:
        self.keep_chars = keep_chars
        self.recent = recent

    async def compact(self, ctx: CompactionContext) -> list[Message] | None:
        history = list(ctx.history)
        results = [i for i, m in enumerate(history) if m.role == "tool"]
        old = results[: len(results) - self.recent] if self.recent else results
        changed = False
        for i in old:
            text = history[i].text
            if len(text) > self.keep_chars:
                history[i] = history[i].replace(content=text[: self.keep_chars] + " [...]")
                changed = True
        return history if changed else None


async def run() -> None:
    async with model() as (llm, name):
        agent = Agent(
            llm,
            tools=TOOLS,
            compaction=ShortenOldResults(keep_chars=200),
            max_context_size=6_000,
            reserved_context_size=2_000,
        )
        print(f"model: {name}; strategy: ShortenOldResults")
        report(agent, await agent.run(TASK))


def main() -> None:
    asyncio.run(run())


if __name__ == "__main__":
    main()
