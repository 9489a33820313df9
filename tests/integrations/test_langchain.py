"""The LangChain middleware in real ``create_agent`` graphs, with a fake chat model calling tools
and LangGraph's in-memory checkpointer carrying the state between turns."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import Field

from ctxcompact import CompactionController, CompactionEvent, check_history
from ctxcompact.exceptions import UserError
from ctxcompact.integrations.langchain import CompactionMiddleware, from_history, to_history
from ctxcompact.store import MemoryStore
from ctxcompact.strategies import HIDDEN_PLACEHOLDER, ToolResultHiding, ToolResultTruncation

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


async def test_a_ready_controller_brings_its_store_and_its_transforms() -> None:
    store = MemoryStore()
    controller = CompactionController(
        ToolResultHiding(preserve_recent_n=2),
        max_context_size=3_000,
        reserved_context_size=500,
        transforms=[ToolResultTruncation(max_chars=300, head_chars=100, tail_chars=100)],
        store=store,
        recall=False,  # this framework's agent has no recall tool: the plain markers
    )
    model = ReadingChatModel(calls=6, seen=[])
    agent = create_agent(
        model,
        tools=[read],
        middleware=[CompactionMiddleware(controller=controller)],
        checkpointer=InMemorySaver(),
    )
    out = await agent.ainvoke(
        {"messages": [HumanMessage("read six files")]}, {"configurable": {"thread_id": "t"}}
    )
    assert out["messages"][-1].content == "done"
    results = tool_messages(out["messages"])
    originals = {f"call_{k}": f"f{k}" * BIG for k in range(6)}
    hidden = [m for m in results if m.content == HIDDEN_PLACEHOLDER]
    assert hidden, "the state holds no hidden result"
    # the transform cut what the model was sent; the graph state keeps the results whole
    assert [m.content for m in results if m not in hidden] == ["f4" * BIG, "f5" * BIG]
    newest = tool_messages(model.seen[-1])[-1]
    assert newest.tool_call_id == "call_5"
    assert len(newest.content) < 400
    assert "characters truncated" in newest.content
    assert check_history(to_history(model.seen[-1])) == []
    # the store keeps the original of every result the model was not shown whole
    for message in hidden:
        kept = store.get("default", message.tool_call_id)
        assert kept is not None
        assert kept.message.text == originals[message.tool_call_id]
    kept = store.get("default", "call_5")
    assert kept is not None
    assert (kept.kind, kept.message.text) == ("truncated", originals["call_5"])


def test_a_ready_controller_cuts_the_synchronous_requests_too() -> None:
    controller = CompactionController(
        ToolResultHiding(),
        max_context_size=1_000_000,
        reserved_context_size=1_000,
        transforms=[ToolResultTruncation(max_chars=300, head_chars=100, tail_chars=100)],
    )
    model = ReadingChatModel(calls=2, seen=[])
    agent = create_agent(
        model, tools=[read], middleware=[CompactionMiddleware(controller=controller)]
    )
    out = agent.invoke({"messages": [HumanMessage("go")]})
    assert [len(m.content) for m in tool_messages(out["messages"])] == [2 * BIG, 2 * BIG]
    sent = tool_messages(model.seen[-1])
    assert [m.tool_call_id for m in sent] == ["call_0", "call_1"]
    assert all("characters truncated" in m.content for m in sent)


def test_the_cache_ttl_of_a_ready_controller_counts_from_the_last_model_call() -> None:
    now = [0.0]
    events: list[CompactionEvent] = []
    controller = CompactionController(
        ToolResultHiding(preserve_recent_n=1),
        max_context_size=1_000_000,
        reserved_context_size=1_000,
        cache_ttl=300,
        clock=lambda: now[0],
        on_event=events.append,
        recall=False,  # this framework's agent has no recall tool: the plain markers
    )
    model = ReadingChatModel(calls=3, seen=[])
    agent = create_agent(
        model,
        tools=[read],
        middleware=[CompactionMiddleware(controller=controller)],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "idle"}}
    agent.invoke({"messages": [HumanMessage("read three files")]}, config)
    assert events == []  # far below the window: nothing to do while the cache is warm
    now[0] += 301  # the user comes back after the provider's cache expired
    model.calls = 0
    out = agent.invoke({"messages": [HumanMessage("and now?")]}, config)
    assert [(e.trigger, e.status) for e in events] == [("cold", "compacted")]
    assert [m.content == HIDDEN_PLACEHOLDER for m in tool_messages(out["messages"])] == [
        True,
        True,
        False,
    ]


def test_a_controller_and_the_short_form_together_are_refused() -> None:
    controller = CompactionController(ToolResultHiding(), max_context_size=90_000)
    with pytest.raises(UserError, match="either controller= or strategy, max_context_size"):
        CompactionMiddleware(ToolResultHiding(), controller=controller, max_context_size=9)
    with pytest.raises(UserError, match="a strategy with max_context_size"):
        CompactionMiddleware()
