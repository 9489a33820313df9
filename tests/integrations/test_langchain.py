"""The LangChain middleware in real ``create_agent`` graphs, with a fake chat model calling tools
and LangGraph's in-memory checkpointer carrying the state between turns."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain.agents import create_agent
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import Field

from ctxcompact import CompactionEvent, check_history
from ctxcompact.integrations.langchain import CompactionMiddleware, from_history, to_history
from ctxcompact.strategies import HIDDEN_PLACEHOLDER, ToolResultHiding

BIG = 1_000


class ReadingChatModel(BaseChatModel):
    """Calls ``read`` ``calls`` times per turn (with a reasoning block), then answers."""

    calls: int
    seen: list[list[BaseMessage]] = Field(default_factory=list)
    made: int = 0
    in_turn: int = 0

    @property
    def _llm_type(self) -> str:
        return "reading-fake"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ReadingChatModel:
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.seen.append(list(messages))
        k = self.made
        self.made += 1
        if self.in_turn < self.calls:
            self.in_turn += 1
            message = AIMessage(
                content=[{"type": "reasoning", "reasoning": f"need f{k}", "signature": f"s{k}"}],
                tool_calls=[{"id": f"call_{k}", "name": "read", "args": {"path": f"f{k}"}}],
            )
        else:
            self.in_turn = 0
            message = AIMessage(content="done")
        return ChatResult(generations=[ChatGeneration(message=message)])


@tool
def read(path: str) -> str:
    """Read a file."""
    return path * BIG


def tool_messages(messages: Sequence[BaseMessage]) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage)]


def build(calls: int, events: list[CompactionEvent]) -> tuple[Any, ReadingChatModel]:
    model = ReadingChatModel(calls=calls, seen=[])
    middleware = CompactionMiddleware(
        ToolResultHiding(preserve_recent_n=2),
        max_context_size=3_000,
        reserved_context_size=500,
        on_event=events.append,
    )
    agent = create_agent(model, tools=[read], middleware=[middleware], checkpointer=InMemorySaver())
    return agent, model


async def test_the_edit_lands_in_the_graph_state_and_survives_the_next_turn() -> None:
    events: list[CompactionEvent] = []
    agent, model = build(calls=6, events=events)
    config = {"configurable": {"thread_id": "t1"}}
    first = await agent.ainvoke({"messages": [HumanMessage("read six files")]}, config)
    assert first["messages"][-1].content == "done"
    assert [e.status for e in events].count("compacted") >= 1

    state = first["messages"]
    results = tool_messages(state)
    assert [m.tool_call_id for m in results] == [f"call_{k}" for k in range(6)]
    hidden = [m for m in results if m.content == HIDDEN_PLACEHOLDER]
    assert hidden, "the state holds no hidden result"
    assert all(m.name == "read" and m.id for m in hidden)
    assert results[-1].content == "f5" * BIG
    assert check_history(to_history(state)) == []
    # reasoning blocks survive in every AI message, untouched
    blocks = [m.content[0] for m in state if isinstance(m, AIMessage) and m.tool_calls]
    assert [b["signature"] for b in blocks] == [f"s{k}" for k in range(6)]

    # next turn, same thread: the model's first call starts with the compacted state as is
    model.calls = 0  # the next turn is answered without tools
    calls_before = len(model.seen)
    compactions = [e.status for e in events].count("compacted")
    await agent.ainvoke({"messages": [HumanMessage("thanks, and now?")]}, config)
    next_call = model.seen[calls_before]
    assert [m.content for m in next_call[: len(state)]] == [m.content for m in state]
    assert [e.status for e in events].count("compacted") == compactions  # not redone


def test_the_synchronous_invoke_compacts_too() -> None:
    events: list[CompactionEvent] = []
    agent, _ = build(calls=6, events=events)
    out = agent.invoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "s"}})
    assert "compacted" in [e.status for e in events]
    assert any(m.content == HIDDEN_PLACEHOLDER for m in tool_messages(out["messages"]))


def test_conversion_round_trip_gives_back_the_same_objects() -> None:
    messages: list[BaseMessage] = [
        HumanMessage("hi", id="h1"),
        AIMessage(
            content=[{"type": "text", "text": "looking"}, {"type": "reasoning", "reasoning": "r"}],
            tool_calls=[{"id": "c1", "name": "read", "args": {"path": "a"}}],
            id="a1",
        ),
        ToolMessage("A" * 50, tool_call_id="c1", name="read", id="t1", artifact={"raw": 1}),
    ]
    history = to_history(messages)
    assert [m.role for m in history] == ["user", "assistant", "tool"]
    assert history[1].text == "looking"
    assert history[1].tool_call_ids == ("c1",)
    back = from_history(history, messages, history)
    assert all(a is b for a, b in zip(back, messages, strict=True))
    edited = [history[0], history[1], history[2].replace(content="[hidden]")]
    out = from_history(edited, messages, history)
    new = out[2]
    assert isinstance(new, ToolMessage)
    assert (new.content, new.tool_call_id, new.id, new.artifact) == (
        "[hidden]",
        "c1",
        "t1",
        {"raw": 1},
    )
    assert messages[2].content == "A" * 50
