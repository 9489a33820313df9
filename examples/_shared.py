"""What the examples share: a tiny fake project, its tools, the model to use, a report.

Offline (no API key in the environment) the model is a :class:`ctxcompact.testing.ScriptedLLM`
that lists the files, reads them one by one (``a.py`` twice) and answers: enough tool output
to make a small context window overflow. With ``OPENAI_API_KEY`` (or ``ANTHROPIC_API_KEY``)
set, a real model does the same task; ``CTXCOMPACT_EXAMPLE_MODEL`` picks the model and
``CTXCOMPACT_EXAMPLE_MAX_TOKENS`` its output limit (default 512).
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from itertools import count

from ctxcompact import LLM, Agent, Completion, Message, ToolCall
from ctxcompact.testing import LLMRequest, ScriptedLLM

TASK = "Read every file of the project, then tell me in one sentence what the project does."

FILES = {
    name: f'"""{doc}"""\n\n'
    + "".join(f"def {stem}_{i}(x):\n    return x + {i}\n\n" for i in range(170))
    for name, stem, doc in [
        ("a.py", "add", "Adders: small functions that add a constant."),
        ("b.py", "scale", "Scalers, built on the adders."),
        ("c.py", "report", "Reports over scaled values."),
    ]
}


def list_files() -> list[str]:
    """List the files of the project."""
    return sorted(FILES)


def read_file(path: str) -> str:
    """Read one file of the project.

    Args:
        path: The file name, as list_files returns it.
    """
    if path not in FILES:
        raise FileNotFoundError(path)
    return FILES[path]


TOOLS = [list_files, read_file]

_ids = count(1)


def _call(name: str, **arguments: str) -> Message:
    call = ToolCall(id=f"call_{next(_ids)}", name=name, arguments=json.dumps(arguments))
    return Message.assistant(None, tool_calls=[call])


def scripted_llm() -> ScriptedLLM:
    """The offline model: tool calls for the agent, a fixed text for summary requests."""
    steps = [
        _call("list_files"),
        _call("read_file", path="a.py"),
        _call("read_file", path="b.py"),
        _call("read_file", path="c.py"),
        _call("read_file", path="a.py"),  # a second look: the older copy is now stale
        Message.assistant("It is a small library of adders, scalers and reports."),
    ]

    def respond(request: LLMRequest) -> Completion:
        if request.tools is None:  # a summarizing strategy asking for a summary
            return Completion(Message.assistant("Summary: the agent listed and read files."))
        return Completion(steps.pop(0))

    return ScriptedLLM(*[respond] * 20)


@asynccontextmanager
async def model() -> AsyncIterator[tuple[LLM, str]]:
    """:func:`choose_llm`, closing the real model's HTTP client at the end."""
    llm, name = choose_llm()
    try:
        yield llm, name
    finally:
        close = getattr(llm, "aclose", None)
        if close is not None:
            await close()


def choose_llm() -> tuple[LLM, str]:
    """A real model when an API key is set, else the scripted one; and its name."""
    model = os.environ.get("CTXCOMPACT_EXAMPLE_MODEL")
    max_tokens = int(os.environ.get("CTXCOMPACT_EXAMPLE_MAX_TOKENS", "512"))
    if os.environ.get("OPENAI_API_KEY"):
        from ctxcompact.llm.openai import OpenAIChatLLM

        name = model or "gpt-4o-mini"
        return OpenAIChatLLM(name, max_tokens=max_tokens), f"openai:{name}"
    if os.environ.get("ANTHROPIC_API_KEY"):
        from ctxcompact.llm.anthropic import AnthropicLLM

        name = model or "claude-haiku-4-5"
        return AnthropicLLM(name, max_tokens=max_tokens), f"anthropic:{name}"
    return scripted_llm(), "offline:ScriptedLLM"


def report(agent: Agent, answer: str) -> None:
    """Print what happened: the answer, the compactions, history versus transcript."""
    print(f"answer: {answer}")
    print(f"model calls: {agent.steps}")
    events = [entry.event for entry in agent.transcript if not isinstance(entry, Message)]
    for e in events:
        print(
            f"compaction: {e.strategy} {e.status} ({e.trigger}) "
            f"{e.tokens_before} -> {e.tokens_after} tokens, "
            f"{e.messages_before} -> {e.messages_after} messages"
        )
    print(
        f"history: {len(agent.history)} messages "
        f"({agent.controller.token_count(agent.history)} tokens) sent to the model; "
        f"transcript: {len(agent.messages)} messages and {len(events)} compaction events kept"
    )
