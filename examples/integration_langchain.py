"""Compaction in a LangChain agent: a ``create_agent`` middleware whose edits persist.

    pip install 'ctxcompact[langchain]'
    python examples/integration_langchain.py

The agent reads ctxcompact's own source files with a tool. Its chat model here is a scripted
``BaseChatModel`` that calls the tool once per file, so the example runs offline; pass
``init_chat_model("openai:gpt-5")`` for the real thing. The middleware replaces the messages in
the graph state when it compacts, so the checkpointer keeps the compacted history: the next
turn on the same thread starts from it instead of compacting again.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

import ctxcompact
from ctxcompact.integrations.langchain import CompactionMiddleware
from ctxcompact.strategies import ToolResultHiding

SOURCE = Path(ctxcompact.__file__).parent
FILES = [p for p in sorted(SOURCE.glob("strategies/_*.py")) if not p.name.startswith("__")][:6]


class ScriptedChatModel(BaseChatModel):
    """Reads each file not read yet in this turn, then answers (a stand-in for a real model)."""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        turn_start = max(i for i, m in enumerate(messages) if isinstance(m, HumanMessage))
        done = sum(isinstance(m, ToolMessage) for m in messages[turn_start:])
        if "again" not in str(messages[turn_start].content) and done < len(FILES):
            call = {"id": f"call_{done}", "name": "read_file", "args": {"path": str(FILES[done])}}
            message = AIMessage(content="", tool_calls=[call])
        else:
            message = AIMessage(content=f"{len(messages)} messages in my context.")
        return ChatResult(generations=[ChatGeneration(message=message)])


@tool
def read_file(path: str) -> str:
    """Read a text file."""
    return Path(path).read_text(encoding="utf-8")


def report(event: ctxcompact.CompactionEvent) -> None:
    tokens = f"{event.tokens_before} -> {event.tokens_after} tokens"
    print(f"compaction: {event.strategy} {event.status}: {tokens}")


def main() -> None:
    middleware = CompactionMiddleware(
        ToolResultHiding(preserve_recent_n=2),
        max_context_size=12_000,
        reserved_context_size=2_000,
        on_event=report,
    )
    agent = create_agent(
        ScriptedChatModel(),
        tools=[read_file],
        middleware=[middleware],
        checkpointer=InMemorySaver(),
    )
    thread = {"configurable": {"thread_id": "reader-1"}}
    state = agent.invoke({"messages": [HumanMessage("Read the ctxcompact modules.")]}, thread)
    results = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    whole = sum(m.content == FILES[k].read_text("utf-8") for k, m in enumerate(results))
    print(f"state after turn 1: {len(results) - whole} of {len(results)} tool results hidden")
    state = agent.invoke({"messages": [HumanMessage("Say it again.")]}, thread)
    print(f"answer: {state['messages'][-1].content}")


if __name__ == "__main__":
    main()
