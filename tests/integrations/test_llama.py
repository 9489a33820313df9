"""The pydantic-ai and Agents SDK integrations against the local llama.cpp server (Gemma 3 270M),
through each framework's own OpenAI-compatible Chat Completions model.

A real history of four big tool results is compacted before the request, and the server
answers the compacted request. (The 270M model cannot be trusted to call tools, so the tool
turns are given as history.)
"""

from __future__ import annotations

from typing import Any

import pytest
from agents import Agent as SdkAgent
from agents import ModelSettings, OpenAIChatCompletionsModel, RunConfig, Runner
from agents.run_config import CallModelData, ModelInputData
from openai import AsyncOpenAI
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from ctxcompact import CompactionEvent
from ctxcompact.integrations.openai_agents import CompactionFilter
from ctxcompact.integrations.pydantic_ai import history_processor
from ctxcompact.strategies import HIDDEN_PLACEHOLDER, ToolResultHiding
from tests.helpers.llama_server import LlamaServer
from tests.helpers.responses_items import item_problems

pytestmark = pytest.mark.llama

RESERVED = 512


async def test_pydantic_ai_agent_answers_from_a_compacted_history(
    llama_server: LlamaServer,
) -> None:
    events: list[CompactionEvent] = []
    client = AsyncOpenAI(base_url=llama_server.base_url, api_key="local", max_retries=0)
    model = OpenAIChatModel(llama_server.model, provider=OpenAIProvider(openai_client=client))
    capability = history_processor(
        ToolResultHiding(preserve_recent_n=1),
        max_context_size=llama_server.n_ctx,
        reserved_context_size=RESERVED,
        on_event=events.append,
    )
    agent = Agent(model, capabilities=[capability])
    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart("Read the files.")])]
    for k in range(4):
        # a text part too: llama.cpp's server refuses an assistant message with null content
        call = ToolCallPart("read", {"path": f"f{k}"}, tool_call_id=f"c{k}")
        history.append(ModelResponse(parts=[TextPart(f"Reading f{k}."), call]))
        result = ToolReturnPart("read", f"line {k}\n" * 300, tool_call_id=f"c{k}")
        history.append(ModelRequest(parts=[result]))
    settings: Any = {"max_tokens": 8, "extra_body": {"max_tokens": 8}}
    try:
        run = await agent.run(
            "In one word: done?", message_history=history, model_settings=settings
        )
    finally:
        await client.close()

    assert [e.status for e in events] == ["compacted"]
    assert run.output.strip()
    returns = [
        p
        for m in run.all_messages()
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    ]
    assert [p.tool_call_id for p in returns] == ["c0", "c1", "c2", "c3"]
    assert [p.content == HIDDEN_PLACEHOLDER for p in returns] == [True, True, True, False]


async def test_agents_sdk_filter_sends_a_compacted_request(llama_server: LlamaServer) -> None:
    events: list[CompactionEvent] = []
    compaction = CompactionFilter(
        ToolResultHiding(preserve_recent_n=1),
        max_context_size=llama_server.n_ctx,
        reserved_context_size=RESERVED,
        on_event=events.append,
    )
    sent: list[list[Any]] = []

    async def spy(data: CallModelData[Any]) -> ModelInputData:
        out = await compaction(data)
        sent.append(list(out.input))
        return out

    client = AsyncOpenAI(base_url=llama_server.base_url, api_key="local", max_retries=0)
    model = OpenAIChatCompletionsModel(model=llama_server.model, openai_client=client)
    agent = SdkAgent(name="reader", model=model, model_settings=ModelSettings(max_tokens=8))
    items: list[Any] = [{"role": "user", "content": "Read the files."}]
    for k in range(4):
        text = {"type": "output_text", "text": f"Reading f{k}.", "annotations": []}
        items += [
            {
                "type": "message",
                "id": f"msg_{k}",
                "status": "completed",
                "role": "assistant",
                "content": [text],
            },
            {
                "type": "function_call",
                "call_id": f"c{k}",
                "name": "read",
                "arguments": f'{{"path": "f{k}"}}',
            },
            {"type": "function_call_output", "call_id": f"c{k}", "output": f"line {k}\n" * 300},
        ]
    items.append({"role": "user", "content": "In one word: done?"})
    config = RunConfig(call_model_input_filter=spy, tracing_disabled=True)
    try:
        result = await Runner.run(agent, items, run_config=config)
    finally:
        await client.close()

    assert [e.status for e in events] == ["compacted"]
    assert str(result.final_output).strip()
    (request,) = sent
    assert item_problems(request) == []
    outputs = [it for it in request if it.get("type") == "function_call_output"]
    assert [o["call_id"] for o in outputs] == ["c0", "c1", "c2", "c3"]
    assert [o["output"] == HIDDEN_PLACEHOLDER for o in outputs] == [True, True, True, False]
