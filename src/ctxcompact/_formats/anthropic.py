"""Anthropic Messages (``system`` + ``messages``) <-> the provider-neutral history.

``to_anthropic(from_anthropic(m, system=s)) == (s, m)``: block order inside a message, extra
keys on any block (``cache_control``...), string versus list content and message boundaries
survive. Reading:

* ``system`` (a string or a list of text blocks) becomes one leading system message;
* assistant blocks: ``text`` -> :class:`TextPart`, ``image`` -> :class:`ImagePart`,
  ``tool_use`` -> :class:`ToolCall` (``arguments = json.dumps(input)``), anything else
  (``thinking``, ``redacted_thinking``, server tools...) -> :class:`RawPart` verbatim;
* a user message's ``tool_result`` blocks -> one tool message each, then its other blocks ->
  one user message.

What the neutral model has no field for goes in the reserved extra key ``anthropic`` (a dict)
of every message this module reads (its presence marks the message as Anthropic-made):

=============  ==========================================================================
key            meaning
=============  ==========================================================================
``start``      tool message: the first tool result of an Anthropic user message
``joined``     user message: split off the same Anthropic message as the results before it
``is_error``   tool message: the ``is_error`` of the block, as given
``block``      tool message: other keys of the ``tool_result`` block (``cache_control``)
``message``    other keys of the Anthropic message object (on the first message made from it)
``order``      assistant message: block kinds in order (``c`` part, ``t`` tool_use), only when
               a part comes after a tool_use
=============  ==========================================================================

and a tool call's ``anthropic`` extra holds ``block``: other keys of its ``tool_use`` block.

Normalisations: a user message whose text comes before its ``tool_result`` blocks (the API
rejects that order) comes back with the results first.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .._history.messages import Content, Message, ToolCall, construct
from ..exceptions import FormatError
from .common import (
    ANTHROPIC_KEY,
    AnthropicSystem,
    check_block,
    content_to_anthropic,
    copy_json,
    extra_of,
    new_part,
    parse_arguments,
    parts_to_anthropic,
    system_to_anthropic,
    type_name,
)

__all__ = ["from_anthropic", "to_anthropic"]


def _message(role: str, content: Content, present: bool, meta: dict[str, Any]) -> Message:
    values = {
        "role": role,
        "content": content,
        "tool_calls": None,
        "tool_call_id": None,
        "name": None,
    }
    fields_set = {"role", "content", ANTHROPIC_KEY} if present else {"role", ANTHROPIC_KEY}
    return construct(Message, values, fields_set, {ANTHROPIC_KEY: meta})


def from_anthropic(
    messages: Sequence[Mapping[str, Any]],
    system: str | Sequence[Mapping[str, Any]] | None = None,
) -> list[Message]:
    """Read an Anthropic Messages request into a history.

    Args:
        messages: The request's ``messages``, as decoded JSON.
        system: The request's ``system`` parameter (a string or a list of text blocks).

    Returns:
        The history: a leading system message when ``system`` is given, then one message per
        Anthropic message, except that a user message with ``tool_result`` blocks becomes one
        tool message per result followed by a user message holding its other blocks.

    Raises:
        FormatError: A malformed request, naming the message index and the field
            (``content[2].tool_use_id``); errors in ``system`` name the field only.

    Example:
        >>> history = from_anthropic([{"role": "user", "content": "hi"}], system="be brief")
        >>> [m.role for m in history]
        ['system', 'user']
    """
    if isinstance(messages, (str, bytes, bytearray, Mapping)) or not isinstance(messages, Sequence):
        raise FormatError(
            f"expected a list of message objects, got {type_name(messages)}; "
            "pass the request's 'messages' list (and 'system' separately)"
        )
    out: list[Message] = []
    if system is not None:
        out.append(_read_system(system))
    for index, raw in enumerate(messages):
        if type(raw) is not dict and not isinstance(raw, Mapping):
            raise FormatError(
                f"a message must be an object with 'role' and 'content', got {type_name(raw)}",
                index=index,
            )
        role = raw.get("role")
        if role != "user" and role != "assistant":
            what = "is missing" if role is None else f"{role!r} is not 'user' or 'assistant'"
            raise FormatError(
                f"the role {what} (put system prompts in the 'system' parameter)",
                index=index,
                field="role",
            )
        content = raw.get("content")
        if not isinstance(content, (str, list, tuple)):
            raise FormatError(
                f"content must be a string or a list of blocks, got {type_name(content)}",
                index=index,
                field="content",
            )
        meta: dict[str, Any] = {}
        if len(raw) > 2:
            meta["message"] = {
                k: copy_json(v) for k, v in raw.items() if k != "role" and k != "content"
            }
        if isinstance(content, str):
            out.append(_message(role, content, True, meta))
        elif role == "assistant":
            out.append(_read_assistant(content, index, meta))
        else:
            _read_user(content, index, meta, out)
    return out


def _read_system(system: object) -> Message:
    if isinstance(system, str):
        return _message("system", system, True, {})
    if not isinstance(system, (list, tuple)):
        raise FormatError(
            f"must be a string or a list of text blocks, got {type_name(system)}", field="system"
        )
    parts = tuple(
        new_part(check_block(block, None, f"system[{k}]"), "image")
        for k, block in enumerate(system)
    )
    return _message("system", parts, True, {})


def _read_assistant(content: Sequence[object], index: int, meta: dict[str, Any]) -> Message:
    parts = []
    calls = []
    order = []
    for k, block in enumerate(content):
        block = check_block(block, index, f"content[{k}]")
        if block["type"] == "tool_use":
            calls.append(_read_tool_use(block, index, k))
            order.append("t")
        else:
            parts.append(new_part(block, "image"))
            order.append("c")
    if not calls:
        return _message("assistant", tuple(parts), True, meta)
    layout = "".join(order)
    if "tc" in layout:  # a part after a tool_use: the default (parts first) would move it
        meta["order"] = layout
    values = {
        "role": "assistant",
        "content": tuple(parts) if parts else None,
        "tool_calls": tuple(calls),
        "tool_call_id": None,
        "name": None,
    }
    fields_set = {"role", "content", "tool_calls", ANTHROPIC_KEY}
    return construct(Message, values, fields_set, {ANTHROPIC_KEY: meta})


def _read_tool_use(block: Mapping[str, Any], index: int, k: int) -> ToolCall:
    where = f"content[{k}]"
    for key in ("id", "name"):
        if not isinstance(block.get(key), str):
            raise FormatError(
                f"a tool_use block needs a string {key!r}, got {type_name(block.get(key))}",
                index=index,
                field=f"{where}.{key}",
            )
    if "input" not in block:
        raise FormatError("a tool_use block needs an 'input'", index=index, field=f"{where}.input")
    if not isinstance(block["input"], dict):
        raise FormatError(
            f"a tool_use input must be a JSON object, got {type(block['input']).__name__}",
            index=index,
            field=f"{where}.input",
        )
    try:
        arguments = _to_json(block["input"])
    except (TypeError, ValueError) as exc:
        raise FormatError(
            f"the input is not JSON-serialisable: {exc}", index=index, field=f"{where}.input"
        ) from None
    extra: dict[str, Any] = {}
    if len(block) > 4:
        rest = {k: copy_json(v) for k, v in block.items() if k not in _TOOL_USE_KEYS}
        extra[ANTHROPIC_KEY] = {"block": rest}
    values = {"id": block["id"], "name": block["name"], "arguments": arguments, "type": "function"}
    return construct(ToolCall, values, {"id", "name", "arguments", "type", *extra}, extra)


_TOOL_USE_KEYS = frozenset({"type", "id", "name", "input"})
# ``json.dumps(x, ensure_ascii=False)`` builds an encoder per call; one serves every call.
_to_json = json.JSONEncoder(ensure_ascii=False).encode
_TOOL_RESULT_KEYS = frozenset({"type", "tool_use_id", "content", "is_error"})


def _read_user(
    content: Sequence[object], index: int, meta: dict[str, Any], out: list[Message]
) -> None:
    others = []
    first = True
    for k, block in enumerate(content):
        block = check_block(block, index, f"content[{k}]")
        if block["type"] != "tool_result":
            others.append(new_part(block, "image"))
            continue
        tool_meta: dict[str, Any] = {}
        if first:
            tool_meta["start"] = True
            if meta:
                tool_meta.update(meta)
                meta = {}
            first = False
        out.append(_read_tool_result(block, index, k, tool_meta))
    if first:
        out.append(_message("user", tuple(others), True, meta))
    elif others:
        meta["joined"] = True
        out.append(_message("user", tuple(others), True, meta))


def _read_tool_result(
    block: Mapping[str, Any], index: int, k: int, meta: dict[str, Any]
) -> Message:
    where = f"content[{k}]"
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str):
        raise FormatError(
            f"a tool_result block needs a string 'tool_use_id', got {type_name(call_id)}",
            index=index,
            field=f"{where}.tool_use_id",
        )
    fields_set = {"role", "tool_call_id", ANTHROPIC_KEY}
    content: Content = None
    if "content" in block:
        raw = block["content"]
        if isinstance(raw, str):
            content = raw
        elif isinstance(raw, (list, tuple)):
            content = tuple(
                new_part(check_block(b, index, f"{where}.content[{j}]"), "image")
                for j, b in enumerate(raw)
            )
        else:
            raise FormatError(
                f"must be a string or a list of blocks, got {type_name(raw)}",
                index=index,
                field=f"{where}.content",
            )
        fields_set.add("content")
    if "is_error" in block:
        meta["is_error"] = block["is_error"]
    if len(block) > len(_TOOL_RESULT_KEYS.intersection(block)):
        meta["block"] = {k: copy_json(v) for k, v in block.items() if k not in _TOOL_RESULT_KEYS}
    values = {
        "role": "tool",
        "content": content,
        "tool_calls": None,
        "tool_call_id": call_id,
        "name": None,
    }
    return construct(Message, values, fields_set, {ANTHROPIC_KEY: meta})


def to_anthropic(history: Sequence[Message]) -> tuple[AnthropicSystem, list[dict[str, Any]]]:
    """Write a history as Anthropic's ``system`` parameter and ``messages`` list.

    Leading system and developer messages become ``system``: a string when there is one with
    string content, else a list of text blocks (``None`` when there are none). Tool messages
    become ``tool_result`` blocks, consecutive ones grouped into one user message with the
    results first; OpenAI tool calls become ``tool_use`` blocks with ``input`` parsed from
    ``arguments`` (empty arguments become ``{}``).

    Raises:
        FormatError: A system or developer message after the first other message, a tool
            message without ``tool_call_id``, or tool-call arguments that are not valid JSON;
            the error names the message index and the field.

    Example:
        >>> to_anthropic([Message.system("be brief"), Message.user("hi")])
        ('be brief', [{'role': 'user', 'content': 'hi'}])
    """
    start = 0
    while start < len(history) and history[start].role in ("system", "developer"):
        start += 1
    system = system_to_anthropic(history[:start])
    out: list[dict[str, Any]] = []
    results: list[dict[str, Any]] | None = None  # the open tool-result message's blocks
    for index in range(start, len(history)):
        message = history[index]
        if not isinstance(message, Message):
            raise FormatError(f"expected a Message, got {type(message).__name__}", index=index)
        role = message.role
        # ``message.anthropic`` without the property's lookups: most messages have no extras.
        extra = message.__pydantic_extra__
        meta = extra.get(ANTHROPIC_KEY) if extra else None
        if type(meta) is not dict and not isinstance(meta, Mapping):
            meta = _NO_META
        if role == "tool":
            block = _write_tool_result(message, index, meta)
            if results is not None and not meta.get("start"):
                results.append(block)
                continue
            results = [block]
            out.append(_with_extra({"role": "user", "content": results}, meta))
        elif role == "user":
            content = content_to_anthropic(message.content)
            if results is not None and meta.get("joined"):
                results.extend(
                    [{"type": "text", "text": content}] if isinstance(content, str) else content
                )
            else:
                out.append(_with_extra({"role": "user", "content": content}, meta))
            results = None
        elif role == "assistant":
            out.append(_with_extra(_write_assistant(message, index, meta), meta))
            results = None
        else:
            raise FormatError(
                f"a {role} message after the start of the conversation cannot be expressed in "
                "Anthropic's format (its system prompt is one parameter); move it to the start "
                "or turn it into a user message",
                index=index,
                field="role",
            )
    return system, out


_NO_META: Mapping[str, Any] = {}


def _with_extra(message: dict[str, Any], meta: Mapping[str, Any]) -> dict[str, Any]:
    extra = meta.get("message")
    if extra and isinstance(extra, Mapping):  # ``extra and``: skips the ABC check for None
        message.update((k, copy_json(v)) for k, v in extra.items())
    return message


def _write_assistant(message: Message, index: int, meta: Mapping[str, Any]) -> dict[str, Any]:
    content = message.content
    calls = message.tool_calls
    if not calls:
        return {"role": "assistant", "content": content_to_anthropic(content)}
    if isinstance(content, str):
        parts = [{"type": "text", "text": content}] if content else []
    else:
        parts = parts_to_anthropic(content) if content else []
    uses = [_write_tool_use(call, index, j) for j, call in enumerate(calls)]
    order = meta.get("order")
    if (
        isinstance(order, str)
        and order.count("c") == len(parts)
        and order.count("t") == len(uses)
        and len(order) == len(parts) + len(uses)
    ):
        part_iter, use_iter = iter(parts), iter(uses)
        blocks = [next(use_iter) if kind == "t" else next(part_iter) for kind in order]
    else:
        blocks = parts + uses
    return {"role": "assistant", "content": blocks}


def _write_tool_use(call: ToolCall, index: int, j: int) -> dict[str, Any]:
    parsed = parse_arguments(call.arguments, index, j)
    block = {"type": "tool_use", "id": call.id, "name": call.name, "input": parsed}
    meta = extra_of(call).get(ANTHROPIC_KEY)
    if meta and isinstance(meta, Mapping) and isinstance(meta.get("block"), Mapping):
        block.update((k, copy_json(v)) for k, v in meta["block"].items())
    return block


def _write_tool_result(message: Message, index: int, meta: Mapping[str, Any]) -> dict[str, Any]:
    if message.tool_call_id is None:
        raise FormatError(
            "a tool message needs the 'tool_call_id' of the call it answers",
            index=index,
            field="tool_call_id",
        )
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.tool_call_id}
    if message.content is not None:
        block["content"] = content_to_anthropic(message.content)
    if "is_error" in meta:
        block["is_error"] = meta["is_error"]
    else:
        flag = extra_of(message).get("is_error")
        if isinstance(flag, bool):
            block["is_error"] = flag
    extra = meta.get("block")
    if extra and isinstance(extra, Mapping):
        block.update((k, copy_json(v)) for k, v in extra.items())
    return block
