"""Quickstart: keep your own agent loop's history inside the model's window.

    python examples/quickstart.py                        # offline: a scripted model
    python examples/quickstart.py --base-url http://127.0.0.1:8080/v1 --model my-model

An agent reads three big files, one per user request. Before each model call the
CompactionController checks whether the history still fits (window 4,000 tokens, 1,000 kept
free for the answer); when it does not, ToolResultHiding replaces old tool results with a
short placeholder naming recall_tool_result, which the model is offered to get one back (the
controller keeps the originals in a bounded in-memory store). After each call the provider's
token count is fed back with observe_usage, so the next check starts from a real count (a
provider may report none: then the controller keeps its own estimate). Offline, ScriptedLLM
plays the model; with --base-url any OpenAI-compatible server does (OPENAI_API_KEY, or
--api-key, if it needs one).
"""

from __future__ import annotations

import argparse
import asyncio
import json

from ctxcompact import LLM, CompactionController, CompactionEvent, Message, ToolCall, tool
from ctxcompact.store import RECALL_TOOL_NAME, recall_tool
from ctxcompact.strategies import ToolResultHiding
from ctxcompact.testing import ScriptedLLM

FILES = {
    name: "".join(f"def {name[0]}{i}(x):\n    return x * {i}\n\n" for i in range(120))
    for name in ("a.py", "b.py", "c.py")
}


@tool
def read_file(path: str) -> str:
    """Read one file of the project.

    Args:
        path: The file name: a.py, b.py or c.py.
    """
    return FILES[path]


def offline_model() -> ScriptedLLM:
    """For each request: a read_file call, then a one-line answer."""
    script: list[Message] = []
    for k, path in enumerate(FILES):
        call = ToolCall(id=f"call_{k}", name="read_file", arguments=json.dumps({"path": path}))
        script += [Message.assistant(None, tool_calls=[call]), Message.assistant(f"{path}: ok")]
    return ScriptedLLM(*script)


def online_model(args: argparse.Namespace) -> LLM:
    from ctxcompact.llm import OpenAIChatLLM  # needs the extra: pip install 'ctxcompact[openai]'

    return OpenAIChatLLM(args.model, base_url=args.base_url, api_key=args.api_key, max_tokens=200)


def show(event: CompactionEvent) -> None:
    print(
        f"  compaction {event.status} by {event.strategy}: {event.messages_before} -> "
        f"{event.messages_after} messages, {event.tokens_before:,} -> {event.tokens_after:,} "
        "tokens"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description="ctxcompact quickstart")
    parser.add_argument("--base-url", help="an OpenAI-compatible endpoint (default: offline)")
    parser.add_argument("--model", default="gpt-4o-mini", help="the model name to send")
    parser.add_argument("--api-key", help="the key (default: OPENAI_API_KEY)")
    args = parser.parse_args()
    if args.base_url:
        llm, name = online_model(args), f"{args.model} at {args.base_url}"
    else:
        llm, name = offline_model(), "offline:ScriptedLLM"
    print(f"model: {name}")

    controller = CompactionController(
        ToolResultHiding(preserve_recent_n=1),  # keep the newest tool turn whole
        max_context_size=4_000,
        reserved_context_size=1_000,
        on_event=show,
    )
    # What compaction removes is kept in controller.store, a bounded MemoryStore by default;
    # the placeholders name the tool that brings it back, so the model is offered it too.
    assert controller.store is not None
    tools = {t.name: t for t in (read_file, recall_tool(controller.store))}
    history = [Message.system("You are a coding agent. Use read_file, then answer briefly.")]
    for path in FILES:
        history.append(Message.user(f"Read {path} and say in a few words what it holds."))
        for _ in range(4):  # model calls for this request: a tool call, then the answer
            history = list(await controller.maybe_compact(history))
            tokens = controller.token_count(history)
            print(f"call: {len(history)} messages, {tokens:,} tokens")
            completion = await llm.complete(history, tools=[t.spec for t in tools.values()])
            history.append(completion.message)
            controller.observe_usage(completion.usage, history)
            if not completion.message.tool_calls:
                print(f"answer: {completion.message.text}")
                break
            for call in completion.message.tool_calls:
                result = await tools[call.name].call(call.arguments)
                history.append(Message.tool(call.id, result.text))

    hidden = sum(1 for m in history if m.role == "tool" and RECALL_TOOL_NAME in m.text)
    print(
        f"done: {len(history)} messages, {controller.token_count(history):,} tokens, "
        f"{hidden} old tool results hidden"
    )


if __name__ == "__main__":
    asyncio.run(main())
