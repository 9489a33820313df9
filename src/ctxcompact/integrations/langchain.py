"""Compaction for LangChain agents: an ``AgentMiddleware`` for ``create_agent``.

Example:
    .. code-block:: python

        from langchain.agents import create_agent
        from ctxcompact.integrations.langchain import CompactionMiddleware
        from ctxcompact.strategies import ToolResultHiding

        agent = create_agent(
            model,
            tools=[read_file],
            middleware=[CompactionMiddleware(ToolResultHiding(), max_context_size=128_000)],
        )

The middleware runs before each model call (``before_model``). When the controller compacts,
it *replaces the messages in the graph state* (``RemoveMessage(REMOVE_ALL_MESSAGES)`` followed by
the compacted list), so the edit is made once and persists, in the checkpointer too: later
calls and later turns send the same compacted prefix and the provider's prompt cache keeps
hitting. (LangChain's own ``ContextEditingMiddleware`` edits a per-call copy instead, so its
edit is redone, and the cached prefix broken, on every call.) Messages a strategy keeps are the
original objects; a hidden tool result is a copy of the original ``ToolMessage`` (same id,
``tool_call_id``, ``name``, ``status``, ``artifact``) with only ``content`` replaced. A ready
``controller=``'s per-request transforms apply to each model call's request only
(``wrap_model_call``): the graph state keeps the compacted history whole.
"""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar, cast

from ..exceptions import MissingDependencyError

try:
    from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        HumanMessage,
        RemoveMessage,
        SystemMessage,
        ToolMessage,
    )
    from langgraph.graph.message import REMOVE_ALL_MESSAGES
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise MissingDependencyError("ctxcompact.integrations.langchain", "langchain") from exc

from .._controller.events import same_messages
from .._history.messages import Message, RawPart, TextPart, ToolCall
from ._common import Conversations, controller_for

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine, Sequence

    from langchain.agents.middleware import ModelCallResult, ModelResponse
    from langchain_core.messages import AnyMessage
    from langgraph.runtime import Runtime
    from typing_extensions import Unpack

    from .._contract.protocols import CompactionStrategy
    from .._controller.controller import CompactionController
    from ._common import ShortForm

T = TypeVar("T")

__all__ = ["SOURCE_KEY", "CompactionMiddleware", "from_history", "to_history"]

SOURCE_KEY = "langchain"
"""The extra key recording the index of the LangChain message a message came from."""


class CompactionMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Compacts the agent's messages in the graph state when they grow too big.

    Args:
        strategy: How to compact (any :class:`~ctxcompact.CompactionStrategy`), with
            ``max_context_size`` among ``options``.
        controller: A ready :class:`~ctxcompact.CompactionController` instead (its store,
            transforms and ``cache_ttl`` included); then no strategy nor options.
        **options: The short form's controller options: ``max_context_size`` (the model's
            window, required), ``reserved_context_size``, ``trigger_ratio``,
            ``token_counter``, ``llm`` (for summarizing strategies) and ``on_event``.

    Raises:
        UserError: Both forms, or a strategy without ``max_context_size``.
        ConfigError: An option is out of range.

    Example:
        >>> from ctxcompact.strategies import ToolResultHiding
        >>> CompactionMiddleware(ToolResultHiding(), max_context_size=128_000).name
        'CompactionMiddleware'
    """

    def __init__(
        self,
        strategy: CompactionStrategy | None = None,
        *,
        controller: CompactionController | None = None,
        **options: Unpack[ShortForm],
    ) -> None:
        super().__init__()
        chosen = controller_for("CompactionMiddleware", strategy, controller, options)
        self.conversations = Conversations(chosen)

    async def abefore_model(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Compact ``state["messages"]`` if the trigger fires; the state update, or ``None``."""
        messages: list[BaseMessage] = list(state["messages"])
        if not messages:
            return None
        history = to_history(messages)
        # One conversation = one thread; its first message's id is stable across turns.
        result = await self.conversations.maybe_compact(messages[0].id, history)
        if result is history:
            return None
        return {
            "messages": [
                RemoveMessage(id=REMOVE_ALL_MESSAGES),
                *from_history(result, messages, history),
            ]
        }

    def before_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """The synchronous path (``agent.invoke``): the same, on a private event loop."""
        return _run(self.abefore_model(state, runtime))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelCallResult[Any]:
        """Send the request through the controller's transforms (the state keeps the
        messages whole) and note the call's time for ``cache_ttl``."""
        return await handler(await self._prepare(request))

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelCallResult[Any]:
        """The synchronous path of :meth:`awrap_model_call`."""
        return handler(_run(self._prepare(request)))

    async def _prepare(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        controller = self.conversations.controller
        messages: list[BaseMessage] = list(request.messages)
        if not messages or (not controller.transforms and controller.cache_ttl is None):
            return request
        state = self.conversations.state(messages[0].id)  # the key abefore_model uses
        controller.observe_usage(None, (), state=state)  # a model call now: cache_ttl's clock
        if not controller.transforms:
            return request
        history = to_history(messages)
        prepared = await controller.prepare(history, state=state)
        if same_messages(prepared.messages, history):
            return request
        sent = from_history(prepared.messages, messages, history)
        return request.override(messages=cast("list[AnyMessage]", sent))


def _run(work: Coroutine[Any, Any, T]) -> T:
    """``work`` to its end from synchronous code, inside a running event loop or not."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(work)
    with ThreadPoolExecutor(max_workers=1) as pool:  # called inside a running loop
        return pool.submit(asyncio.run, work).result()


# -- LangChain messages <-> history ----------------------------------------------------------------


def to_history(messages: Sequence[BaseMessage]) -> list[Message]:
    """LangChain messages as a ctxcompact history (one message each, in order).

    ``SystemMessage`` -> system, ``HumanMessage`` -> user, ``AIMessage`` -> assistant (its
    ``tool_calls`` -> tool calls with the ``args`` as JSON text; text blocks -> text parts,
    other blocks, e.g. reasoning, -> raw parts), ``ToolMessage`` -> tool. Any other message
    type is a user message holding it opaquely.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> [m.text for m in to_history([HumanMessage("hi")])]
        ['hi']
    """
    return [_read(message, i) for i, message in enumerate(messages)]


def _content(content: Any) -> str | tuple[TextPart | RawPart, ...]:
    if isinstance(content, str):
        return content
    parts: list[TextPart | RawPart] = []
    for block in content:
        if isinstance(block, str):
            parts.append(TextPart(text=block))
        elif isinstance(block, dict) and block.get("type") == "text":
            parts.append(TextPart(text=str(block.get("text", ""))))
        else:
            kind = block.get("type") if isinstance(block, dict) else None
            parts.append(RawPart(type=str(kind or "block"), block=block))
    return tuple(parts)


def _read(message: BaseMessage, i: int) -> Message:
    source = {SOURCE_KEY: i}
    if isinstance(message, ToolMessage):
        return Message(
            role="tool",
            tool_call_id=message.tool_call_id,
            content=_content(message.content),
            **source,
        )
    if isinstance(message, AIMessage):
        calls = [
            ToolCall(id=str(call["id"]), name=call["name"], arguments=json.dumps(call["args"]))
            for call in message.tool_calls
        ]
        return Message(
            role="assistant",
            content=_content(message.content),
            tool_calls=tuple(calls) if calls else None,
            **source,
        )
    if isinstance(message, SystemMessage):
        return Message(role="system", content=_content(message.content), **source)
    if isinstance(message, HumanMessage):
        return Message(role="user", content=_content(message.content), **source)
    return Message(role="user", content=(RawPart(type=message.type),), **source)


def from_history(
    history: Sequence[Message],
    messages: Sequence[BaseMessage],
    converted: Sequence[Message] | None = None,
) -> list[BaseMessage]:
    """The LangChain messages for a (compacted) history made by :func:`to_history`.

    Args:
        history: The history to write back, e.g. a strategy's output.
        messages: The LangChain messages ``history`` was converted from.
        converted: ``to_history(messages)``, when the caller still has it: a message of it that
            comes back unchanged (the same object) is written back as the original object.

    Returns:
        A new list: original messages, copies of originals with ``content`` (or a tool call's
        ``args``) replaced, and new ``HumanMessage`` / ``AIMessage`` / ``SystemMessage`` for
        messages a strategy created (a summary).
    """
    unchanged = {id(m) for m in converted or ()}
    out: list[BaseMessage] = []
    for message in history:
        index = (message.model_extra or {}).get(SOURCE_KEY)
        if not isinstance(index, int) or not 0 <= index < len(messages):
            out.append(_new(message))
            continue
        original = messages[index]
        if id(message) in unchanged:
            out.append(original)
        else:
            out.append(_edited(original, message))
    return out


def _text_or_blocks(message: Message, original: BaseMessage) -> Any:
    if _content(original.content) == message.content:
        return original.content
    if isinstance(message.content, tuple):
        return [_block(part) for part in message.content]
    return message.text


def _block(part: Any) -> Any:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    extra = part.model_extra or {}
    return extra["block"] if "block" in extra else part.model_dump()


def _edited(original: BaseMessage, message: Message) -> BaseMessage:
    update: dict[str, Any] = {"content": _text_or_blocks(message, original)}
    if isinstance(original, AIMessage) and original.tool_calls:
        arguments = {c.id: c.arguments for c in message.tool_calls or ()}
        calls = []
        for call in original.tool_calls:
            text = arguments.get(str(call["id"]))
            if text is None:
                continue  # a strategy never drops one call of a group; be safe anyway
            args = call["args"] if text == json.dumps(call["args"]) else json.loads(text)
            calls.append({**call, "args": args})
        update["tool_calls"] = calls
    return original.model_copy(update=update)


def _new(message: Message) -> BaseMessage:
    if message.role == "assistant":
        return AIMessage(content=message.text)
    if message.role in ("system", "developer"):
        return SystemMessage(content=message.text)
    return HumanMessage(content=message.text)
