"""The peers' compaction code as ctxcompact strategies, for ``bench_peers.py``.

Each adapter is a :class:`ctxcompact.CompactionStrategy`: it converts the history it is given to
the peer's message type, runs the peer's own hook (the code the peer's framework calls before a
model request, trigger included), and converts the result back. A message the peer left alone
comes back as the very ``Message`` object it was given (so the replay's cache meter sees an
unchanged prefix exactly as the provider would); a tool result the peer blanked comes back as a
copy of the original with only its content replaced; a message the peer wrote (a summary) is a
new message. The way back reuses :mod:`ctxcompact.integrations`' converters; the way in is built
here, since the integrations only ever convert the framework's own messages and back.

* :class:`LangChainContextEditing` runs ``ContextEditingMiddleware.awrap_model_call`` (LangChain's
  middleware around each model call; it edits a deep copy, the agent's state keeps every
  message).
* :class:`HarnessCapability` runs a pydantic-ai-harness capability's ``before_model_request``
  (its trigger, then its ``compact``); the messages it leaves in the request context are the
  result, which the harness documents as persisting into the run's history.

A change the adapters cannot map back (a peer rewriting an assistant or user message, which no
configuration benchmarked here does) raises instead of being measured wrongly.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from langchain.agents.middleware import ContextEditingMiddleware
from langchain.agents.middleware.types import ModelRequest as LCModelRequest
from langchain.agents.middleware.types import ModelResponse as LCModelResponse
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, convert_to_messages
from opentelemetry.trace import NoOpTracer
from pydantic_ai import messages as pai
from pydantic_ai.models import Model, ModelRequestContext, ModelRequestParameters
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import RunContext
from pydantic_ai.usage import RunUsage

from ctxcompact import CompactionContext, HeuristicTokenCounter, Message, to_openai
from ctxcompact.integrations import langchain as lc_integration
from ctxcompact.integrations import pydantic_ai as pai_integration

__all__ = [
    "HarnessCapability",
    "LangChainContextEditing",
    "StandInSummarizer",
    "from_pydantic_ai",
    "to_langchain",
    "to_pydantic_ai",
]

COUNTER = HeuristicTokenCounter()
TAG = "ctxcompact_index"
"""Where the adapters record which message of the history a peer message was built from."""


def _calls(message: Message) -> list[tuple[str, str, Any]]:
    return [(c.id, c.name, json.loads(c.arguments)) for c in message.tool_calls or ()]


def _restore(originals: Sequence[Message], index: int, converted: Message, peer: str) -> Message:
    """``originals[index]``, or a copy with the peer's new content for a tool result."""
    original = originals[index]
    if converted.text == original.text and _calls(converted) == _calls(original):
        return original
    if original.role != "tool":
        raise ValueError(
            f"{peer} rewrote message {index} ({original.role}); the adapter only maps back "
            "tool results whose content changed"
        )
    return original.replace(content=converted.content)


def _new(converted: Message, source_key: str) -> Message:
    """A message the peer wrote, without the integration's record of where it came from."""
    extra = {k: v for k, v in (converted.model_extra or {}).items() if k != source_key}
    return Message(
        role=converted.role,
        content=converted.content,
        tool_calls=converted.tool_calls,
        tool_call_id=converted.tool_call_id,
        **extra,
    )


# -- LangChain ---------------------------------------------------------------------------------


def to_langchain(history: Sequence[Message]) -> tuple[SystemMessage | None, list[BaseMessage]]:
    """The history as ``create_agent`` holds it: the leading system message apart (the agent's
    ``system_prompt``), every other message through LangChain's own OpenAI-dict reader, with
    ``id`` = its index in ``history``."""
    dicts = to_openai(history)
    for index, item in enumerate(dicts):
        item["id"] = f"{TAG}:{index}"
    messages = convert_to_messages(dicts)
    if history and history[0].role == "system":
        first = messages[0]
        assert isinstance(first, SystemMessage)
        return first, list(messages[1:])
    return None, list(messages)


class LangChainContextEditing:
    """LangChain's ``ContextEditingMiddleware`` around each model call (a per-request transform).

    Example:
        >>> from langchain.agents.middleware import ClearToolUsesEdit
        >>> LangChainContextEditing(ContextEditingMiddleware(edits=[ClearToolUsesEdit()])).name
        'ContextEditingMiddleware'
    """

    name = "ContextEditingMiddleware"

    def __init__(self, middleware: ContextEditingMiddleware[Any, Any]) -> None:
        self.middleware = middleware
        # Never called: the handler below answers; the request only needs a chat model.
        self._model = FakeListChatModel(responses=["unused"])

    async def compact(self, ctx: CompactionContext) -> list[Message] | None:
        history = list(ctx.history)
        system, messages = to_langchain(history)
        sent: list[list[BaseMessage]] = []

        async def handler(request: LCModelRequest[Any]) -> LCModelResponse[Any]:
            sent.append(list(request.messages))
            return LCModelResponse(result=[AIMessage(content="")])

        request = LCModelRequest(model=self._model, messages=messages, system_message=system)
        await self.middleware.awrap_model_call(request, handler)
        (edited,) = sent
        converted = lc_integration.to_history(edited)
        out: list[Message] = [history[0]] if system is not None else []
        for message, back in zip(edited, converted, strict=True):
            tag = str(message.id or "")
            if not tag.startswith(f"{TAG}:"):
                out.append(_new(back, lc_integration.SOURCE_KEY))
                continue
            out.append(_restore(history, int(tag.split(":")[1]), back, self.name))
        if len(out) == len(history) and all(a is b for a, b in zip(out, history, strict=True)):
            return None
        return out


# -- pydantic-ai-harness -----------------------------------------------------------------------


def to_pydantic_ai(history: Sequence[Message]) -> tuple[list[pai.ModelMessage], dict[int, int]]:
    """The history as a pydantic-ai run holds it, and ``id(part or response) -> index``.

    Consecutive system, user and tool messages are one ``ModelRequest`` (its system prompt, user
    prompt and tool return parts), each assistant message one ``ModelResponse`` (thinking, text,
    tool calls). A tool return is tagged with its index in ``metadata``, which pydantic-ai never
    sends to the model, so a blanked copy can still be traced to its original.
    """
    out: list[pai.ModelMessage] = []
    origin: dict[int, int] = {}
    parts: list[pai.ModelRequestPart] = []
    names: dict[str, str] = {}  # the tool names of the latest assistant message's calls

    def flush() -> None:
        if parts:
            out.append(pai.ModelRequest(parts=list(parts)))
            parts.clear()

    for index, message in enumerate(history):
        part: Any
        if message.role == "assistant":
            flush()
            response: list[pai.ModelResponsePart] = []
            reasoning = (message.model_extra or {}).get("reasoning_content")
            if isinstance(reasoning, str) and reasoning:
                response.append(pai.ThinkingPart(content=reasoning))
            if message.text:
                response.append(pai.TextPart(content=message.text))
            names = {}
            for call in message.tool_calls or ():
                names[call.id] = call.name
                response.append(
                    pai.ToolCallPart(tool_name=call.name, args=call.arguments, tool_call_id=call.id)
                )
            made = pai.ModelResponse(parts=response)
            origin[id(made)] = index
            out.append(made)
            continue
        if message.role == "tool":
            call_id = message.tool_call_id or ""
            part = pai.ToolReturnPart(
                tool_name=names.get(call_id, "tool"),
                content=message.text,
                tool_call_id=call_id,
                metadata={TAG: index},
            )
        elif message.role in ("system", "developer"):
            part = pai.SystemPromptPart(content=message.text)
        else:
            part = pai.UserPromptPart(content=message.text)
        origin[id(part)] = index
        parts.append(part)
    flush()
    return out, origin


def from_pydantic_ai(
    output: Sequence[pai.ModelMessage],
    origin: dict[int, int],
    history: Sequence[Message],
    peer: str,
) -> list[Message]:
    """The history for ``output``, a peer's rewrite of ``to_pydantic_ai(history)``."""
    result: list[Message] = []
    for back in pai_integration.to_history(output):
        meta = (back.model_extra or {})[pai_integration.SOURCE_KEY]
        message = output[meta["message"]]
        if isinstance(message, pai.ModelResponse):
            source: object = message
        else:
            source = message.parts[meta["main"]]
        index = origin.get(id(source))
        if index is None and isinstance(source, pai.ToolReturnPart):
            index = (source.metadata or {}).get(TAG)
        if index is None:
            if isinstance(message, pai.ModelResponse):
                raise ValueError(f"{peer} returned a model response the history never had")
            result.append(_new(back, pai_integration.SOURCE_KEY))
            continue
        result.append(_restore(history, index, back, peer))
    return result


class StandInSummarizer:
    """A pydantic-ai model that answers every summary request with the same fixed text.

    Attributes:
        model: The ``FunctionModel`` to give ``SummarizingCompaction(model=...)``.
        calls: Summary requests answered.
        tokens: Their input (system and user prompts) plus output, counted as the replay counts.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.calls = 0
        self.tokens = 0
        self.model = FunctionModel(self._answer, model_name="stand-in-summarizer")

    def _answer(self, messages: list[pai.ModelMessage], info: AgentInfo) -> pai.ModelResponse:
        self.calls += 1
        prompt = [
            str(part.content)
            for message in messages
            if isinstance(message, pai.ModelRequest)
            for part in message.parts
            if isinstance(part, (pai.UserPromptPart, pai.SystemPromptPart))
        ]
        if info.instructions:
            prompt.append(info.instructions)
        self.tokens += sum(map(COUNTER.count_text, prompt)) + COUNTER.count_text(self.text)
        return pai.ModelResponse(parts=[pai.TextPart(content=self.text)])


class HarnessCapability:
    """A pydantic-ai-harness compaction capability, before each model request (triggered: what
    it returns replaces the stored history, as the harness documents its edits persisting).

    Example:
        >>> from pydantic_ai_harness.compaction import ClearToolResults
        >>> HarnessCapability(ClearToolResults(max_tokens=100_000)).name
        'ClearToolResults'
    """

    def __init__(self, capability: Any, *, model: Model | None = None) -> None:
        self.capability = capability
        self.name = type(capability).__name__
        # The run's model: only a summarizing tier calls it (when it has no model of its own).
        self.model = model if model is not None else StandInSummarizer("unused").model

    async def compact(self, ctx: CompactionContext) -> list[Message] | None:
        history = list(ctx.history)
        messages, origin = to_pydantic_ai(history)
        run = RunContext[None](
            deps=None, model=self.model, usage=RunUsage(), tracer=NoOpTracer(), messages=messages
        )
        request = ModelRequestContext(
            model=self.model,
            messages=list(messages),
            model_settings=None,
            model_request_parameters=ModelRequestParameters(),
        )
        done = await self.capability.before_model_request(run, request)
        output = list(done.messages)
        if len(output) == len(messages) and all(
            a is b for a, b in zip(output, messages, strict=True)
        ):
            return None
        return from_pydantic_ai(output, origin, history, self.name)
