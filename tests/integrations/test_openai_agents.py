"""The Agents SDK integration in real ``Runner.run`` calls, against a model of the SDK's own
``Model`` interface, with a real ``SQLiteSession`` file for the session wrapper."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Model, ModelResponse, RunConfig, Runner, SQLiteSession, function_tool
from agents.testing.model import assistant_message
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseReasoningItem

from ctxcompact import CompactionController, CompactionEvent
from ctxcompact.exceptions import UserError
from ctxcompact.integrations.openai_agents import CompactingSession, CompactionFilter
from ctxcompact.store import MemoryStore
from ctxcompact.strategies import HIDDEN_PLACEHOLDER, ToolResultHiding, ToolResultTruncation
from tests.helpers.responses_items import item_problems

BIG = 1_000


class ReadingModel(Model):
    """Reasons, then calls ``read`` ``calls`` times per run, then answers; records its inputs."""

    def __init__(self, calls: int) -> None:
        self.calls = calls
        self.inputs: list[list[dict[str, Any]]] = []
        self._in_run = 0

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        items = args[1] if len(args) > 1 else kwargs["input"]
        self.inputs.append(copy.deepcopy(items))
        k = len(self.inputs) - 1
        if self._in_run < self.calls:
            self._in_run += 1
            output: list[Any] = [
                ResponseReasoningItem(
                    id=f"rs_{k}", type="reasoning", summary=[], encrypted_content=f"gAAAA-{k}"
                ),
                ResponseFunctionToolCall(
                    id=f"fc_{k}",
                    call_id=f"call_{k}",
                    type="function_call",
                    name="read",
                    arguments=json.dumps({"path": f"f{k}"}),
                ),
            ]
        else:
            self._in_run = 0
            output = [assistant_message("done", item_id=f"msg_{k}")]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the tests run without streaming")


@function_tool
def read(path: str) -> str:
    """Read a file."""
    return path * BIG


def outputs(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [it for it in items if it.get("type") == "function_call_output"]


async def test_the_filter_compacts_once_and_keeps_the_sent_prefix_stable() -> None:
    model = ReadingModel(calls=9)
    events: list[CompactionEvent] = []
    config = RunConfig(
        call_model_input_filter=CompactionFilter(
            ToolResultHiding(preserve_recent_n=2),
            max_context_size=3_000,
            reserved_context_size=500,
            on_event=events.append,
        ),
        tracing_disabled=True,
    )
    agent = Agent(name="reader", model=model, tools=[read])
    result = await Runner.run(agent, "read the files", run_config=config)
    assert result.final_output == "done"

    statuses = [e.status for e in events]
    assert "compacted" in statuses
    assert statuses.count("compacted") < len(model.inputs) - 1
    for sent in model.inputs:
        assert item_problems(sent) == []
    last = model.inputs[-1]
    hidden = [o for o in outputs(last) if o["output"] == HIDDEN_PLACEHOLDER]
    assert hidden, "the model never saw a hidden output"
    assert [o["call_id"] for o in outputs(last)] == [f"call_{k}" for k in range(9)]
    assert outputs(last)[-1]["output"] == "f8" * BIG
    # every reasoning item reaches the model verbatim, right before its call
    for k in range(9):
        at = next(i for i, it in enumerate(last) if it.get("id") == f"rs_{k}")
        assert last[at]["encrypted_content"] == f"gAAAA-{k}"
        assert last[at + 1]["call_id"] == f"call_{k}"
    # after the first compaction, the next call extends what was sent: the cache prefix holds
    first = next(
        i
        for i, sent in enumerate(model.inputs)
        if any(o["output"] == HIDDEN_PLACEHOLDER for o in outputs(sent))
    )
    assert model.inputs[first + 1][: len(model.inputs[first])] == model.inputs[first]
    # the SDK's own items stay whole
    full = [it for it in result.to_input_list() if it.get("type") == "function_call_output"]
    assert all(o["output"] != HIDDEN_PLACEHOLDER for o in full)


async def test_the_filter_sends_the_input_unchanged_below_the_threshold() -> None:
    model = ReadingModel(calls=2)
    config = RunConfig(
        call_model_input_filter=CompactionFilter(
            ToolResultHiding(preserve_recent_n=1), max_context_size=1_000_000
        ),
        tracing_disabled=True,
    )
    await Runner.run(Agent(name="r", model=model, tools=[read]), "go", run_config=config)
    unfiltered = ReadingModel(calls=2)
    no_filter = RunConfig(tracing_disabled=True)
    await Runner.run(Agent(name="r", model=unfiltered, tools=[read]), "go", run_config=no_filter)
    assert model.inputs == unfiltered.inputs


async def test_a_session_stores_the_compacted_history_for_the_next_run(tmp_path: Path) -> None:
    store = SQLiteSession("user-1", db_path=tmp_path / "sessions.db")
    events: list[CompactionEvent] = []
    session = CompactingSession(
        store,
        ToolResultHiding(preserve_recent_n=1),
        max_context_size=3_000,
        reserved_context_size=500,
        on_event=events.append,
    )
    model = ReadingModel(calls=3)
    agent = Agent(name="reader", model=model, tools=[read])
    config = RunConfig(tracing_disabled=True)
    await Runner.run(agent, "read three files", session=session, run_config=config)
    await Runner.run(agent, "and three more", session=session, run_config=config)

    assert [e.status for e in events] == ["compacted"]  # once, when run 2 was stored
    reopened = SQLiteSession("user-1", db_path=tmp_path / "sessions.db")
    stored = await reopened.get_items()
    assert item_problems(stored) == []
    outs = outputs(stored)
    assert [o["call_id"] for o in outs] == [f"call_{k}" for k in (0, 1, 2, 4, 5, 6)]
    assert [o["output"] == HIDDEN_PLACEHOLDER for o in outs] == [True] * 3 + [False] * 3
    reasoning = [it for it in stored if it.get("type") == "reasoning"]
    assert [it["encrypted_content"] for it in reasoning] == [
        f"gAAAA-{k}" for k in (0, 1, 2, 4, 5, 6)
    ]
    # the next run starts from what the session holds: the compacted history
    await Runner.run(agent, "one more time", session=session, run_config=config)
    third_run_first_call = model.inputs[8]
    assert third_run_first_call[: len(stored)] == stored
    assert session.session_id == "user-1"


async def test_the_filter_fails_open_on_input_it_cannot_read(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from agents.run_config import CallModelData, ModelInputData

    bad = [{"role": "user", "content": "hi"}, {"no": "type or role"}]
    data = ModelInputData(input=bad, instructions="be brief")  # type: ignore[arg-type]
    compaction = CompactionFilter(ToolResultHiding(), max_context_size=10, reserved_context_size=0)
    agent = Agent(name="r", model=ReadingModel(calls=0))
    out = await compaction(CallModelData(model_data=data, agent=agent, context=None))
    assert out is data
    assert out.input == [{"role": "user", "content": "hi"}, {"no": "type or role"}]
    assert "message 1" in caplog.text
    assert not re.search(r"\bhi\b", caplog.text)  # no message content in the log line


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
    config = RunConfig(
        call_model_input_filter=CompactionFilter(controller=controller), tracing_disabled=True
    )
    agent = Agent(name="reader", model=model, tools=[read])
    result = await Runner.run(agent, "read the files", run_config=config)
    assert result.final_output == "done"
    originals = {f"call_{k}": f"f{k}" * BIG for k in range(6)}
    last = outputs(model.inputs[-1])
    assert item_problems(model.inputs[-1]) == []
    assert [o["call_id"] for o in last] == list(originals)
    hidden = [o for o in last if o["output"] == HIDDEN_PLACEHOLDER]
    assert hidden, "the model never saw a hidden output"
    # the transform cut what each call sent: the newest outputs went out head + tail
    assert [o["call_id"] for o in last if o not in hidden] == ["call_4", "call_5"]
    assert all("characters truncated" in o["output"] for o in last if o not in hidden)
    # after the first compaction, the next call extends what was sent: the cache prefix holds
    first = next(
        i
        for i, sent in enumerate(model.inputs)
        if any(o["output"] == HIDDEN_PLACEHOLDER for o in outputs(sent))
    )
    assert model.inputs[first + 1][: len(model.inputs[first])] == model.inputs[first]
    # the SDK's own items stay whole; the store keeps the originals the model did not see
    full = [it for it in result.to_input_list() if it.get("type") == "function_call_output"]
    assert [o["output"] for o in full] == list(originals.values())
    for output in hidden:
        kept = store.get("default", output["call_id"])
        assert kept is not None
        assert kept.message.text == originals[output["call_id"]]
    kept = store.get("default", "call_5")
    assert kept is not None
    assert (kept.kind, kept.message.text) == ("truncated", originals["call_5"])


async def test_a_session_with_a_ready_controller_keeps_what_it_hid_in_the_store(
    tmp_path: Path,
) -> None:
    store = MemoryStore()
    controller = CompactionController(
        ToolResultHiding(preserve_recent_n=1),
        max_context_size=3_000,
        reserved_context_size=500,
        store=store,
        recall=False,  # this framework's agent has no recall tool: the plain markers
    )
    session = CompactingSession(
        SQLiteSession("user-2", db_path=tmp_path / "sessions.db"), controller=controller
    )
    agent = Agent(name="reader", model=ReadingModel(calls=3), tools=[read])
    config = RunConfig(tracing_disabled=True)
    await Runner.run(agent, "read three files", session=session, run_config=config)
    await Runner.run(agent, "and three more", session=session, run_config=config)
    outs = outputs(await session.get_items())
    hidden = [o["call_id"] for o in outs if o["output"] == HIDDEN_PLACEHOLDER]
    assert hidden == ["call_0", "call_1", "call_2"]
    for call_id in hidden:
        kept = store.get("default", call_id)
        assert kept is not None
        assert kept.message.text == f"f{call_id[-1]}" * BIG


def test_a_controller_and_the_short_form_together_are_refused() -> None:
    controller = CompactionController(ToolResultHiding(), max_context_size=90_000)
    with pytest.raises(UserError, match="either controller= or strategy, not both"):
        CompactionFilter(ToolResultHiding(), controller=controller)
    with pytest.raises(UserError, match="CompactingSession: pass a strategy with max_context"):
        CompactingSession(SQLiteSession("u"), ToolResultHiding())
