"""Compaction in an OpenAI Agents SDK agent: a model-input filter, and a compacting session.

    pip install 'ctxcompact[openai-agents]'
    python examples/integration_openai_agents.py

The agent reads ctxcompact's own source files with a tool. Its model here is a scripted
implementation of the SDK's ``Model`` interface that emits Responses items (an encrypted
reasoning item, then a ``function_call``), so the example runs offline; use
``model="gpt-5"`` for the real thing. ``CompactionFilter`` rewrites what each model call sends
(the SDK keeps its own items whole); ``CompactingSession`` rewrites what a session stores
between runs.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from agents import (
    Agent,
    Model,
    ModelResponse,
    RunConfig,
    Runner,
    SQLiteSession,
    function_tool,
)
from agents.testing.model import assistant_message
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseReasoningItem

import ctxcompact
from ctxcompact.integrations.openai_agents import CompactingSession, CompactionFilter
from ctxcompact.strategies import ToolResultHiding

SOURCE = Path(ctxcompact.__file__).parent
FILES = [p for p in sorted(SOURCE.glob("strategies/_*.py")) if not p.name.startswith("__")][:6]


class ScriptedModel(Model):
    """Reads each file in turn, then answers (a stand-in for a real model)."""

    def __init__(self) -> None:
        self.sent: list[int] = []  # how many items each call received

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        items = args[1] if len(args) > 1 else kwargs["input"]
        self.sent.append(len(items))
        done = sum(1 for it in items if it.get("type") == "function_call_output")
        k = len(self.sent)
        if done < len(FILES):
            output: list[Any] = [
                ResponseReasoningItem(
                    id=f"rs_{k}", type="reasoning", summary=[], encrypted_content=f"gAAAA{k}"
                ),
                ResponseFunctionToolCall(
                    id=f"fc_{k}",
                    call_id=f"call_{k}",
                    type="function_call",
                    name="read_file",
                    arguments=json.dumps({"path": str(FILES[done])}),
                ),
            ]
        else:
            output = [assistant_message(f"Read {done} modules of ctxcompact.", item_id=f"m{k}")]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


@function_tool
def read_file(path: str) -> str:
    """Read a text file."""
    return Path(path).read_text(encoding="utf-8")


def report(event: ctxcompact.CompactionEvent) -> None:
    tokens = f"{event.tokens_before} -> {event.tokens_after} tokens"
    print(f"compaction: {event.strategy} {event.status}: {tokens}")


async def main() -> None:
    hiding = ToolResultHiding(preserve_recent_n=2)
    agent = Agent(name="reader", model=ScriptedModel(), tools=[read_file])

    print("-- per call: CompactionFilter")
    only_filter = CompactionFilter(
        hiding, max_context_size=12_000, reserved_context_size=2_000, on_event=report
    )
    config = RunConfig(call_model_input_filter=only_filter, tracing_disabled=True)
    result = await Runner.run(agent, "Read the ctxcompact modules.", run_config=config)
    print(f"answer: {result.final_output}")

    print("-- between runs: CompactingSession over a SQLite file")
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteSession("reader-1", db_path=Path(tmp) / "sessions.db")
        session = CompactingSession(
            store, hiding, max_context_size=12_000, reserved_context_size=2_000, on_event=report
        )
        plain = RunConfig(tracing_disabled=True)
        await Runner.run(agent, "Read the ctxcompact modules.", session=session, run_config=plain)
        stored = await store.get_items()
        outputs = [it for it in stored if it.get("type") == "function_call_output"]
        whole = sum(o["output"] == FILES[k].read_text("utf-8") for k, o in enumerate(outputs))
        n_hidden = len(outputs) - whole
        print(f"stored: {len(stored)} items, {n_hidden} of {len(outputs)} tool outputs hidden")


if __name__ == "__main__":
    asyncio.run(main())
