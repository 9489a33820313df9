"""Compaction for pydantic-ai agents: a ``ProcessHistory`` capability.

Example:
    .. code-block:: python

        from pydantic_ai import Agent
        from ctxcompact.integrations.pydantic_ai import history_processor
        from ctxcompact.strategies import ToolResultHiding

        agent = Agent(
            "openai:gpt-5",
            capabilities=[history_processor(ToolResultHiding(), max_context_size=128_000)],
        )

Before each model request the capability converts the run's ``ModelMessage`` list to a
ctxcompact history, lets a :class:`~ctxcompact.CompactionController` decide whether to compact,
and converts the result back. pydantic-ai stores what the capability returns as the run's
history, so a compaction is done once and the rewritten prefix stays stable for the provider's
prompt cache. The controller's per-request transforms (a ready ``controller=`` may have them)
change only what this request sends, never the stored history. Nothing is lost in the
conversion: every part a strategy keeps comes back as the
original object (thinking with its signature, retries, tool returns with their metadata, parts
ctxcompact has no field for); a tool return a strategy hid comes back as a copy of the original
with only its ``content`` replaced. Parts pydantic-ai records besides messages (instruction
baselines, deltas) ride with the message next to them.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import TYPE_CHECKING, Any

from ..exceptions import MissingDependencyError

try:
    from pydantic_ai import messages as pai
    from pydantic_ai.capabilities import ProcessHistory

    # At run time: pydantic-ai reads the processor's first annotation to pass it the context.
    from pydantic_ai.tools import RunContext  # noqa: TC002
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    # pydantic-ai 2.x supports Python 3.11+: on 3.10 the extra installs nothing.
    what = "ctxcompact.integrations.pydantic_ai" + (
        " (pydantic-ai 2.x needs Python 3.11 or newer)" if sys.version_info < (3, 11) else ""
    )
    raise MissingDependencyError(what, "pydantic-ai") from exc

from .._controller.events import same_messages
from .._history.messages import Message, RawPart, TextPart, ToolCall
from ._common import Conversations, controller_for

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pydantic_ai.models import ModelRequestContext
    from typing_extensions import Unpack

    from .._contract.protocols import CompactionStrategy
    from .._controller.controller import CompactionController
    from ._common import ShortForm

__all__ = [
    "SOURCE_KEY",
    "CompactingProcessor",
    "from_history",
    "history_processor",
    "to_history",
]

SOURCE_KEY = "pydantic_ai"
"""The extra key recording which ``ModelMessage`` (and which of its parts) a message came from."""


def history_processor(
    strategy: CompactionStrategy | None = None,
    *,
    controller: CompactionController | None = None,
    **options: Unpack[ShortForm],
) -> ProcessHistory[Any]:
    """A ``ProcessHistory`` capability that compacts the run's history when it grows too big.

    Args:
        strategy: How to compact (any :class:`~ctxcompact.CompactionStrategy`), with
            ``max_context_size`` among ``options``.
        controller: A ready :class:`~ctxcompact.CompactionController` instead (its store,
            transforms and ``cache_ttl`` included); then no strategy nor options.
        **options: The short form's controller options: ``max_context_size`` (the model's
            window, required), ``reserved_context_size``, ``trigger_ratio``,
            ``token_counter``, ``llm`` (for summarizing strategies) and ``on_event``.

    Returns:
        The capability for ``Agent(..., capabilities=[...])``. Its ``processor`` is a
        :class:`CompactingProcessor` keeping one controller state per run.

    Raises:
        UserError: Both forms, or a strategy without ``max_context_size``.
        ConfigError: An option is out of range (raised here, not during the run).
    """
    chosen = controller_for("history_processor", strategy, controller, options)
    return _CompactingHistory(CompactingProcessor(Conversations(chosen)))


class CompactingProcessor:
    """The history processor behind :func:`history_processor`: one controller state per run.

    Example:
        >>> from ctxcompact.strategies import ToolResultHiding
        >>> cap = history_processor(ToolResultHiding(), max_context_size=100_000)
        >>> type(cap.processor).__name__
        'CompactingProcessor'
    """

    def __init__(self, conversations: Conversations) -> None:
        self.conversations = conversations

    async def __call__(
        self, ctx: RunContext[Any], messages: list[pai.ModelMessage]
    ) -> list[pai.ModelMessage]:
        """The run's history, compacted when the trigger fires (as a plain history processor:
        the transforms need :meth:`step`, which tells the stored history from the request)."""
        history = to_history(messages)
        result = await self.conversations.maybe_compact(ctx.run_id, history)
        if result is history:
            return messages
        return from_history(result, messages, history)

    async def step(
        self, ctx: RunContext[Any], messages: list[pai.ModelMessage]
    ) -> tuple[list[pai.ModelMessage], list[pai.ModelMessage]]:
        """One model request: the run's history to store (compacted when the trigger fires)
        and the messages to send (that history through the controller's transforms)."""
        history = to_history(messages)
        step = await self.conversations.step(ctx.run_id, history)
        stored = messages
        if step.history is not history:
            stored = from_history(step.history, messages, history)
        if same_messages(step.request, step.history):
            return stored, stored.copy()
        return stored, from_history(step.request, messages, history)


@dataclasses.dataclass
class _CompactingHistory(ProcessHistory[Any]):
    """``ProcessHistory`` that sends the transformed request but stores only the compaction
    (pydantic-ai's own stores what it sends)."""

    processor: CompactingProcessor

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        stored, sent = await self.processor.step(ctx, list(request_context.messages))
        request_context.messages = sent
        ctx.messages[:] = stored
        return request_context


# -- ModelMessage list -> history ------------------------------------------------------------------


def to_history(messages: Sequence[pai.ModelMessage]) -> list[Message]:
    """A pydantic-ai message list as a ctxcompact history.

    A ``ModelRequest`` becomes one message per system prompt, user prompt, compaction summary,
    retry feedback and tool return (a tool return is a ``tool`` message); a ``ModelResponse``
    becomes one assistant message (text -> text parts, thinking and other parts -> raw parts,
    tool calls -> tool calls). Each message records where it came from, for
    :func:`from_history`.

    Example:
        >>> from pydantic_ai.messages import ModelRequest
        >>> [m.text for m in to_history([ModelRequest.user_text_prompt("hi")])]
        ['hi']
    """
    out: list[Message] = []
    for i, message in enumerate(messages):
        if isinstance(message, pai.ModelResponse):
            out.append(_read_response(message, i))
        else:
            _read_request(message, i, out)
    return out


def _source(i: int, parts: list[int], main: int | None) -> dict[str, Any]:
    return {SOURCE_KEY: {"message": i, "parts": parts, "main": main}}


def _read_request(request: pai.ModelRequest, i: int, out: list[Message]) -> None:
    riders: list[int] = []  # parts ctxcompact has no message for: kept with a neighbour
    first = len(out)
    for j, part in enumerate(request.parts):
        made: Message | None = None
        if isinstance(part, pai.SystemPromptPart):
            made = Message(role="system", content=part.content, **_source(i, [*riders, j], j))
        elif isinstance(part, pai.UserPromptPart):
            made = Message(role="user", content=_user_content(part), **_source(i, [*riders, j], j))
        elif isinstance(part, pai.CompactionPart):  # an earlier summary: context the model reads
            made = Message(role="user", content=part.content or "", **_source(i, [*riders, j], j))
        elif isinstance(part, pai.RetryFeedbackPart):
            text = part.model_response()
            made = Message(role="user", content=text, **_source(i, [*riders, j], j))
        elif isinstance(part, pai.BaseToolReturnPart) and not isinstance(
            part, pai.NativeToolReturnPart
        ):
            made = Message(
                role="tool",
                tool_call_id=part.tool_call_id,
                content=part.model_response_str(),
                **_source(i, [*riders, j], j),
            )
        if made is None:
            riders.append(j)
        else:
            out.append(made)
            riders = []
    if riders:
        if len(out) > first:  # trailing riders join the request's last message
            last = out[-1]
            meta = last.model_extra[SOURCE_KEY]  # type: ignore[index]
            out[-1] = last.replace(**_source(i, [*meta["parts"], *riders], meta["main"]))
        else:  # nothing but riders: an empty user message keeps them in place
            out.append(Message(role="user", content=(), **_source(i, riders, None)))


def _user_content(part: pai.UserPromptPart) -> str | tuple[TextPart | RawPart, ...]:
    if isinstance(part.content, str):
        return part.content
    return tuple(
        TextPart(text=item) if isinstance(item, str) else RawPart(type=type(item).__name__)
        for item in part.content
    )


def _read_response(response: pai.ModelResponse, i: int) -> Message:
    content: list[TextPart | RawPart] = []
    calls: list[ToolCall] = []
    for part in response.parts:
        if isinstance(part, pai.TextPart):
            content.append(TextPart(text=part.content))
        elif isinstance(part, pai.ToolCallPart) and not isinstance(part, pai.NativeToolCallPart):
            calls.append(
                ToolCall(
                    id=part.tool_call_id, name=part.tool_name, arguments=part.args_as_json_str()
                )
            )
        elif isinstance(part, pai.ThinkingPart):
            content.append(RawPart(type="thinking", thinking=part.content))
        else:
            content.append(RawPart(type=part.part_kind))
    return Message(
        role="assistant",
        content=tuple(content),
        tool_calls=tuple(calls) if calls else None,
        **_source(i, list(range(len(response.parts))), None),
    )


# -- history -> ModelMessage list ------------------------------------------------------------------


def from_history(
    history: Sequence[Message],
    messages: Sequence[pai.ModelMessage],
    converted: Sequence[Message] | None = None,
) -> list[pai.ModelMessage]:
    """The pydantic-ai messages for a (compacted) history made by :func:`to_history`.

    Args:
        history: The history to write back, e.g. a strategy's output.
        messages: The pydantic-ai messages ``history`` was converted from.
        converted: ``to_history(messages)``, when the caller still has it: a message of it that
            comes back unchanged (the same object) is written back as its original parts.

    Returns:
        A new list. Parts of an original message that survive are the original part objects,
        or copies with only ``content`` (tool returns, prompts) or ``args`` (tool calls)
        replaced; messages a strategy created (a summary) become new requests or responses.
    """
    unchanged = {id(m) for m in converted or ()}
    out: list[pai.ModelMessage] = []
    group: list[Message] = []
    group_source = -1

    def flush() -> None:
        if group:
            out.append(_rebuild(messages[group_source], group, unchanged))
            group.clear()

    for message in history:
        meta = (message.model_extra or {}).get(SOURCE_KEY)
        if not isinstance(meta, dict) or not 0 <= meta.get("message", -1) < len(messages):
            flush()
            out.append(_new_message(message))
            continue
        if meta["message"] != group_source:
            flush()
            group_source = meta["message"]
        group.append(message)
    flush()
    return out


def _rebuild(
    original: pai.ModelMessage, group: list[Message], unchanged: set[int]
) -> pai.ModelMessage:
    if isinstance(original, pai.ModelResponse):
        (message,) = group  # a response is always one message
        if id(message) in unchanged:
            return original
        return dataclasses.replace(original, parts=_response_parts(original, message))
    parts: list[Any] = []
    for message in group:
        meta = message.model_extra[SOURCE_KEY]  # type: ignore[index]
        for j in meta["parts"]:
            part = original.parts[j]
            if j == meta["main"] and id(message) not in unchanged:
                part = _with_content(part, message)
            parts.append(part)
    if len(parts) == len(original.parts) and all(
        a is b for a, b in zip(parts, original.parts, strict=True)
    ):
        return original
    return dataclasses.replace(original, parts=parts)


def _with_content(part: Any, message: Message) -> Any:
    if isinstance(part, pai.UserPromptPart) and not isinstance(part.content, str):
        if message.content == _user_content(part):
            return part
    elif isinstance(part, pai.BaseToolReturnPart):
        if message.text == part.model_response_str():
            return part
    elif isinstance(part, pai.RetryFeedbackPart):
        if message.text == part.model_response():
            return part
        return pai.UserPromptPart(message.text, timestamp=part.timestamp)
    elif getattr(part, "content", None) == message.text:
        return part
    return dataclasses.replace(part, content=message.text)


def _response_parts(original: pai.ModelResponse, message: Message) -> list[Any]:
    texts = [p for p in message.content or () if isinstance(p, TextPart)]
    if isinstance(message.content, str):
        texts = [TextPart(text=message.content)]
    calls = {c.id: c for c in message.tool_calls or ()}
    parts: list[Any] = []
    n_text = 0
    for part in original.parts:
        if isinstance(part, pai.TextPart):
            if n_text < len(texts):
                text = texts[n_text].text
                parts.append(
                    part if text == part.content else dataclasses.replace(part, content=text)
                )
            n_text += 1
        elif isinstance(part, pai.ToolCallPart) and not isinstance(part, pai.NativeToolCallPart):
            call = calls.get(part.tool_call_id)
            if call is not None:
                same = call.arguments == part.args_as_json_str()
                parts.append(part if same else dataclasses.replace(part, args=call.arguments))
        else:
            parts.append(part)
    parts.extend(pai.TextPart(t.text) for t in texts[n_text:])
    return parts


def _new_message(message: Message) -> pai.ModelMessage:
    """A message a strategy created (a summary, a notice) as a pydantic-ai message."""
    if message.role == "assistant":
        return pai.ModelResponse(parts=[pai.TextPart(message.text)])
    if message.role in ("system", "developer"):
        return pai.ModelRequest(parts=[pai.SystemPromptPart(message.text)])
    return pai.ModelRequest(parts=[pai.UserPromptPart(message.text)])
