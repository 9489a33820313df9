"""The pydantic-ai capability in real ``Agent.run`` calls, with ``FunctionModel`` and tools."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.messages import (
    CompactionPart,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolAvailabilityDeltaPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from ctxcompact import CompactionController, CompactionEvent, check_history
from ctxcompact.exceptions import UserError
from ctxcompact.integrations.pydantic_ai import from_history, history_processor, to_history
from ctxcompact.store import MemoryStore
from ctxcompact.strategies import (
    HIDDEN_PLACEHOLDER,
    LLMSummary,
    ToolResultHiding,
    ToolResultTruncation,
)
from ctxcompact.testing import ScriptedLLM

BIG = 1_000


class ReadingModel:
    """Calls ``read`` ``calls`` times, thinking before each call, then answers; records inputs."""

    def __init__(self, calls: int) -> None:
        self.calls = calls
        self.seen: list[list[ModelMessage]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.seen.append(list(messages))
        k = len(self.seen) - 1
        if k < self.calls:
            return ModelResponse(
                parts=[
                    ThinkingPart(f"need file {k}", signature=f"sig-{k}"),
                    ToolCallPart("read", {"path": f"f{k}"}, tool_call_id=f"call_{k}"),
                ]
            )
        return ModelResponse(parts=[TextPart("done")])


def reading_agent(model: ReadingModel, capability: Any) -> Agent[None, str]:
    agent = Agent(FunctionModel(model), capabilities=[capability], instructions="Be brief.")
    failed: set[str] = set()

    @agent.tool_plain
    def read(path: str) -> str:
        if path == "f1" and path not in failed:
            failed.add(path)
            raise ModelRetry("f1 is locked, try again")
        return path * BIG

    return agent


def returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    return [
        p
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    ]


def assert_paired(messages: list[ModelMessage]) -> None:
    """Each tool return answers a call of the response right before its request."""
    for k, message in enumerate(messages):
        if isinstance(message, ModelRequest):
            ids = {p.tool_call_id for p in message.parts if isinstance(p, ToolReturnPart)}
            if ids:
                previous = messages[k - 1]
                assert isinstance(previous, ModelResponse)
                calls = {p.tool_call_id for p in previous.parts if isinstance(p, ToolCallPart)}
                assert ids <= calls, k


def dumped(messages: list[ModelMessage]) -> bytes:
    return ModelMessagesTypeAdapter.dump_json(messages)


async def test_a_run_hides_old_tool_returns_once_and_keeps_them_hidden() -> None:
    model = ReadingModel(calls=9)
    events: list[CompactionEvent] = []
    capability = history_processor(
        ToolResultHiding(preserve_recent_n=2),
        max_context_size=3_000,
        reserved_context_size=500,
        on_event=events.append,
    )
    result = await reading_agent(model, capability).run("read the files")
    assert result.output == "done"
    history = result.all_messages()
    assert_paired(history)
    assert check_history(to_history(history)) == []

    statuses = [e.status for e in events]
    assert "compacted" in statuses
    assert statuses.count("compacted") < len(model.seen) - 1  # not at every call
    outs = returns(history)
    assert [p.tool_call_id for p in outs] == [f"call_{k}" for k in range(9)]
    hidden = [p for p in outs if p.content == HIDDEN_PLACEHOLDER]
    assert hidden, "nothing was hidden"
    assert all(p.tool_name == "read" for p in hidden)
    assert outs[-1].content == "f8" * BIG  # the newest results stay whole
    assert outs[-2].content == "f7" * BIG
    # the retried call keeps its outcome, hidden or not
    assert [p.outcome for p in outs[:3]] == ["success", "retried", "success"]
    # every thinking part survives with its signature, in every response
    thinking = [
        p
        for m in history
        if isinstance(m, ModelResponse)
        for p in m.parts
        if isinstance(p, ThinkingPart)
    ]
    assert [p.signature for p in thinking] == [f"sig-{k}" for k in range(9)]
    # the model saw the hidden results, and between compactions its prefix did not move
    last = model.seen[-1]
    assert any(p.content == HIDDEN_PLACEHOLDER for p in returns(last))
    first_hidden = next(
        k
        for k, seen in enumerate(model.seen)
        if any(p.content == HIDDEN_PLACEHOLDER for p in returns(seen))
    )
    nxt = model.seen[first_hidden + 1]
    prefix = model.seen[first_hidden]
    assert dumped(nxt[: len(prefix)]) == dumped(prefix)


async def test_nothing_changes_below_the_threshold() -> None:
    model = ReadingModel(calls=2)
    events: list[CompactionEvent] = []
    capability = history_processor(
        ToolResultHiding(preserve_recent_n=1),
        max_context_size=1_000_000,
        reserved_context_size=1_000,
        on_event=events.append,
    )
    result = await reading_agent(model, capability).run("read")
    assert events == []
    assert all(p.content != HIDDEN_PLACEHOLDER for p in returns(result.all_messages()))


async def test_a_summary_replaces_the_old_turns_inside_the_run() -> None:
    model = ReadingModel(calls=5)
    llm = ScriptedLLM(*["Read f0 to f3; all fine."] * 3)
    capability = history_processor(
        LLMSummary(llm, max_preserved_messages=2, max_summary_tokens=256, max_input_tokens=2_000),
        max_context_size=2_500,
        reserved_context_size=500,
        llm=llm,
    )
    result = await reading_agent(model, capability).run("read the files")
    assert result.output == "done"
    history = result.all_messages()
    assert_paired(history)
    prompts = [
        p.content
        for m in history
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, UserPromptPart)
    ]
    assert any("Read f0 to f3; all fine." in str(c) for c in prompts)
    # The task stays verbatim, once, before the summary (pinned: never summarized away).
    assert prompts.count("read the files") == 1
    assert prompts.index("read the files") < next(
        k for k, c in enumerate(prompts) if "Read f0 to f3" in str(c)
    )
    assert len(history) < 2 + 2 * 6  # shorter than the uncompacted run
    assert llm.requests, "the summarizer was not called"


def test_conversion_round_trip_gives_back_the_same_objects() -> None:
    messages: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart("hi")], instructions="be brief"),
        ModelResponse(
            parts=[
                ThinkingPart("hmm", signature="s"),
                TextPart("looking"),
                ToolCallPart("read", {"path": "a"}, tool_call_id="c1"),
                ToolCallPart("read", '{"path": "b"}', tool_call_id="c2"),
            ],
            model_name="m",
        ),
        ModelRequest(
            parts=[
                ToolReturnPart("read", "A", tool_call_id="c1"),
                ToolReturnPart("read", {"big": "B"}, tool_call_id="c2", metadata={"k": 1}),
            ]
        ),
    ]
    history = to_history(messages)
    assert [m.role for m in history] == ["user", "assistant", "tool", "tool"]
    assert history[1].tool_call_ids == ("c1", "c2")
    assert history[1].text == "looking"
    assert history[3].text == '{"big":"B"}'
    back = from_history(history, messages, history)
    assert all(a is b for a, b in zip(back, messages, strict=True))
    assert len(back) == len(messages)


def test_an_edited_tool_return_is_a_copy_with_only_the_content_replaced() -> None:
    ret = ToolReturnPart("read", "A" * 100, tool_call_id="c1", metadata={"k": 1})
    messages: list[ModelMessage] = [
        ModelResponse(parts=[ToolCallPart("read", {}, tool_call_id="c1")]),
        ModelRequest(parts=[ret, UserPromptPart("and now?")]),
    ]
    history = to_history(messages)
    edited = [history[0], history[1].replace(content="[hidden]"), history[2]]
    back = from_history(edited, messages, history)
    assert back[0] is messages[0]
    new_ret, prompt = back[1].parts  # type: ignore[union-attr]
    assert isinstance(new_ret, ToolReturnPart)
    assert (new_ret.content, new_ret.tool_call_id, new_ret.metadata) == ("[hidden]", "c1", {"k": 1})
    assert prompt is messages[1].parts[1]
    assert ret.content == "A" * 100  # the original is untouched


def test_parts_without_a_message_ride_with_their_neighbour_and_survive() -> None:
    rider = ToolAvailabilityDeltaPart(tools_added=["read"])
    messages: list[ModelMessage] = [
        ModelRequest(parts=[rider]),  # only a rider: kept as an empty user message
        ModelRequest(parts=[UserPromptPart("go"), CompactionPart("earlier: read a.py"), rider]),
        ModelResponse(parts=[ToolCallPart("read", {}, tool_call_id="c1")]),
        ModelRequest(parts=[ToolReturnPart("read", "x" * 50, tool_call_id="c1")]),
    ]
    history = to_history(messages)
    assert [m.role for m in history] == ["user", "user", "user", "assistant", "tool"]
    assert history[2].text == "earlier: read a.py"  # a summary is context, not a rider
    assert check_history(history) == []
    hidden = [*history[:4], history[4].replace(content="[hidden]")]
    back = from_history(hidden, messages, history)
    assert all(a is b for a, b in zip(back[:3], messages[:3], strict=True))
    assert back[3].parts[0].content == "[hidden]"  # type: ignore[union-attr]
    # dropping the request's messages drops its riders with them, and nothing else
    assert [type(m).__name__ for m in from_history(history[3:], messages, history)] == [
        "ModelResponse",
        "ModelRequest",
    ]


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
    model = ReadingModel(calls=6)
    agent = Agent(FunctionModel(model), capabilities=[history_processor(controller=controller)])

    @agent.tool_plain
    def read(path: str) -> str:
        return path * BIG

    result = await agent.run("read the files")
    assert result.output == "done"
    history = result.all_messages()
    assert_paired(history)
    outs = returns(history)
    originals = {f"call_{k}": f"f{k}" * BIG for k in range(6)}
    hidden = [p for p in outs if p.content == HIDDEN_PLACEHOLDER]
    assert hidden, "nothing was hidden"
    # the transform cut what the model was sent, never the run's history
    assert [p.content for p in outs if p not in hidden] == ["f4" * BIG, "f5" * BIG]
    newest = returns(model.seen[-1])[-1]
    assert newest.tool_call_id == "call_5"
    assert len(newest.content) < 400
    assert "characters truncated" in newest.content
    # the store keeps the original of every result the model was not shown whole
    for part in hidden:
        kept = store.get("default", part.tool_call_id)
        assert kept is not None
        assert kept.message.text == originals[part.tool_call_id]
    kept = store.get("default", "call_5")
    assert kept is not None
    assert (kept.kind, kept.message.text) == ("truncated", originals["call_5"])


def test_a_controller_and_the_short_form_together_are_refused() -> None:
    controller = CompactionController(ToolResultHiding(), max_context_size=90_000)
    with pytest.raises(UserError, match="either controller= or strategy, not both"):
        history_processor(ToolResultHiding(), controller=controller)
    with pytest.raises(UserError, match="max_context_size"):
        history_processor(ToolResultHiding())
