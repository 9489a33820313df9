"""Compaction in a pydantic-ai agent, through its ProcessHistory capability.

    pip install 'ctxcompact[pydantic-ai]'
    python examples/integration_pydantic_ai.py

The agent reads ctxcompact's own source files with a tool. Its model here is pydantic-ai's
``FunctionModel`` (a scripted model, so the example runs offline): it thinks, calls the tool
once per file, then answers. Swap in ``"openai:gpt-5"`` or any model pydantic-ai supports.
When the history nears the window, the capability hides the oldest file contents, once, and
pydantic-ai keeps the compacted history for the rest of the run.
"""

from __future__ import annotations

from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

import ctxcompact
from ctxcompact.integrations.pydantic_ai import history_processor
from ctxcompact.strategies import ToolResultHiding

SOURCE = Path(ctxcompact.__file__).parent
FILES = [p for p in sorted(SOURCE.glob("strategies/_*.py")) if not p.name.startswith("__")][:6]


def scripted_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Read each file in turn, then answer (a stand-in for a real model)."""
    done = sum(isinstance(p, ToolReturnPart) for m in messages for p in m.parts)
    if done < len(FILES):
        path = FILES[done]
        return ModelResponse(
            parts=[
                ThinkingPart(f"Next: {path.name}.", signature=f"sig-{done}"),
                ToolCallPart("read_file", {"path": str(path)}, tool_call_id=f"call_{done}"),
            ]
        )
    return ModelResponse(parts=[TextPart(f"Read {done} modules of ctxcompact.")])


compaction = history_processor(
    ToolResultHiding(preserve_recent_n=2),
    max_context_size=12_000,
    reserved_context_size=2_000,
    on_event=lambda e: print(
        f"compaction: {e.strategy} {e.status}: {e.tokens_before} -> {e.tokens_after} tokens"
    ),
)
agent = Agent(FunctionModel(scripted_model), capabilities=[compaction])


@agent.tool_plain
def read_file(path: str) -> str:
    """Read a text file."""
    return Path(path).read_text(encoding="utf-8")


def main() -> None:
    result = agent.run_sync("Read the ctxcompact modules and say what you read.")
    returns = [
        p
        for m in result.all_messages()
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    ]
    whole = sum(p.content == Path(FILES[k]).read_text("utf-8") for k, p in enumerate(returns))
    print(f"tool results: {len(returns)}, {len(returns) - whole} hidden, {whole} whole")
    print(f"answer: {result.output}")


if __name__ == "__main__":
    main()
