"""OpenAI Chat Completions message lists <-> the provider-neutral history.

``to_openai(from_openai(x)) == x`` for any list ``from_openai`` accepts: a key that was absent
stays absent, ``null`` stays ``null``, string content stays a string and list content a list,
and unknown keys (``reasoning_content``, ``refusal``, ...) come back unchanged, on messages,
content parts, tool calls and inside a tool call's ``function``. The one normalisation: a tool
call read without ``"type"`` is written back with ``"type": "function"`` (the API requires it,
and tool calls built in code rarely spell it out).

Where things are kept:

* unknown keys of a message, part or tool call: the model's extras;
* unknown keys inside a tool call's ``function`` (next to ``name`` and ``arguments``): the
  tool call's extra key ``function_extra`` (a dict), which is why a tool call may not carry a
  key of that name itself.

``to_openai`` never writes the reserved ``anthropic`` key. For messages read by
:func:`~ctxcompact.from_anthropic` it drops ``thinking`` / ``redacted_thinking`` parts (OpenAI
has no place for their signatures), turns Anthropic image blocks into ``image_url`` parts and
gives a tool result without content an empty string.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import itemgetter
from typing import Any

from .._history.messages import Content, ImagePart, Message, RawPart, ToolCall, construct
from ..exceptions import FormatError
from .common import (
    ANTHROPIC_KEY,
    anthropic_image_to_openai,
    check_block,
    copy_json,
    new_part,
    part_to_dict,
    type_name,
)

__all__ = ["FUNCTION_EXTRA_KEY", "from_openai", "to_openai"]

FUNCTION_EXTRA_KEY = "function_extra"
"""The tool-call extra key holding unknown keys of an OpenAI tool call's ``function``."""

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
_FIELDS = frozenset({"role", "content", "tool_calls", "tool_call_id", "name"})
_THINKING = frozenset({"thinking", "redacted_thinking"})
_RESERVED_CALL_KEYS = frozenset({FUNCTION_EXTRA_KEY, ANTHROPIC_KEY})


def from_openai(messages: Sequence[Mapping[str, Any]]) -> list[Message]:
    """Read an OpenAI Chat Completions message list into a history.

    Args:
        messages: The ``messages`` of a Chat Completions request, as decoded JSON.

    Returns:
        One :class:`Message` per input message, in order. Containers are copied: changing
        ``messages`` afterwards does not change the history.

    Raises:
        FormatError: The input is not a list of message objects, or a message has a missing or
            unknown role, a content or tool call of the wrong shape, or is a tool message
            without ``tool_call_id``. The error names the message index and the field.

    Example:
        >>> history = from_openai([{"role": "user", "content": "hi"}])
        >>> history[0].text
        'hi'
    """
    if isinstance(messages, (str, bytes, bytearray, Mapping)) or not isinstance(messages, Sequence):
        raise FormatError(
            f"expected a list of message objects, got {type_name(messages)}; "
            "pass the request's 'messages' list"
        )
    return [_read_message(raw, index) for index, raw in enumerate(messages)]


def _read_message(raw: object, index: int) -> Message:
    if type(raw) is not dict and not isinstance(raw, Mapping):
        raise FormatError(
            f"a message must be an object with a 'role', got {type_name(raw)}", index=index
        )
    fields_set = set(raw)
    if fields_set <= _FIELDS:  # the common case: every declared field from raw, in C
        values = {**_ABSENT, **raw}
        extra: dict[str, Any] = {}
    else:
        values = {key: raw.get(key) for key in _ABSENT}
        extra = _read_extra(raw, index)
    role, content, calls, call_id, name = values.values()
    if type(role) is not str or role not in _ROLES:
        what = "is missing" if role is None else f"{role!r} is not one of {sorted(_ROLES)}"
        raise FormatError(f"the role {what}", index=index, field="role")
    if content is not None and type(content) is not str:
        values["content"] = _read_content(content, index)
    if calls is not None:
        values["tool_calls"] = _read_tool_calls(calls, index)
    if call_id is None:
        if role == "tool":
            raise FormatError(
                "a tool message needs the 'tool_call_id' of the call it answers",
                index=index,
                field="tool_call_id",
            )
    elif type(call_id) is not str and not isinstance(call_id, str):
        raise FormatError(
            f"must be a string, got {type_name(call_id)}", index=index, field="tool_call_id"
        )
    if name is not None and type(name) is not str and not isinstance(name, str):
        raise FormatError(f"must be a string, got {type_name(name)}", index=index, field="name")
    return construct(Message, values, fields_set, extra)


_ABSENT: dict[str, Any] = dict.fromkeys(("role", "content", "tool_calls", "tool_call_id", "name"))
"""Every declared field of :class:`Message`, in order, as absent (``None``)."""


def _read_extra(raw: Mapping[str, Any], index: int) -> dict[str, Any]:
    """The keys of ``raw`` that are no field, copied."""
    extra: dict[str, Any] = {}
    for key, value in raw.items():
        if key in _FIELDS:
            continue
        if key == ANTHROPIC_KEY:
            raise FormatError(
                "'anthropic' is reserved for Anthropic layout and cannot be read from an "
                "OpenAI message; rename the key",
                index=index,
                field=key,
            )
        extra[key] = copy_json(value)
    return extra


def _read_content(value: object, index: int) -> Content:
    if value is None or isinstance(value, str):
        return value
    if not isinstance(value, (list, tuple)):
        raise FormatError(
            f"content must be a string, a list of content parts or null, got {type_name(value)}",
            index=index,
            field="content",
        )
    return tuple(
        new_part(check_block(block, index, f"content[{k}]"), "image_url")
        for k, block in enumerate(value)
    )


def _read_tool_calls(value: object, index: int) -> tuple[ToolCall, ...] | None:
    if value is None:
        return None
    if not isinstance(value, (list, tuple)):
        raise FormatError(
            f"tool_calls must be a list or null, got {type_name(value)}",
            index=index,
            field="tool_calls",
        )
    if len(value) == 1:  # most turns make one call
        return (_read_tool_call(value[0], index, 0),)
    return tuple([_read_tool_call(call, index, j) for j, call in enumerate(value)])


_CALL = itemgetter("id", "type", "function")
_FUNCTION = itemgetter("name", "arguments")


def _read_tool_call(call: object, index: int, j: int) -> ToolCall:
    if type(call) is dict and len(call) == 3:  # the common shape, with no extras: at C speed
        try:
            call_id, kind, function = _CALL(call)
            name, arguments = _FUNCTION(function)
        except (KeyError, TypeError):
            pass
        else:
            if (
                type(function) is dict
                and len(function) == 2
                and type(call_id) is str
                and type(kind) is str
                and type(name) is str
                and type(arguments) is str
            ):
                values = {"id": call_id, "name": name, "arguments": arguments, "type": kind}
                return construct(ToolCall, values, {"id", "name", "arguments", "type"}, {})
    return _read_any_tool_call(call, index, j)


def _read_any_tool_call(call: object, index: int, j: int) -> ToolCall:
    """Any tool call: every check, with an error naming what is wrong; extras kept."""
    where = f"tool_calls[{j}]"
    if not isinstance(call, Mapping):
        raise FormatError(
            f"a tool call must be an object {{id, type, function}}, got {type_name(call)}",
            index=index,
            field=where,
        )
    call_id = call.get("id")
    if not isinstance(call_id, str):
        what = "is missing" if call_id is None else f"must be a string, got {type_name(call_id)}"
        raise FormatError(f"the tool call id {what}", index=index, field=f"{where}.id")
    function = call.get("function")
    if not isinstance(function, Mapping):
        raise FormatError(
            f"must be an object {{name, arguments}}, got {type_name(function)}",
            index=index,
            field=f"{where}.function",
        )
    name = function.get("name")
    if not isinstance(name, str):
        raise FormatError(
            f"the function name must be a string, got {type_name(name)}",
            index=index,
            field=f"{where}.function.name",
        )
    arguments = function.get("arguments")
    if not isinstance(arguments, str):
        raise FormatError(
            f"arguments must be a JSON string, got {type_name(arguments)} "
            "(serialize them with json.dumps)",
            index=index,
            field=f"{where}.function.arguments",
        )
    kind = call.get("type", "function")
    if not isinstance(kind, str):
        raise FormatError(
            f"must be a string, got {type_name(kind)}", index=index, field=f"{where}.type"
        )
    values = {"id": call_id, "name": name, "arguments": arguments, "type": kind}
    extra: dict[str, Any] = {}
    fields_set = {"id", "name", "arguments"}
    for key, value in call.items():
        if key == "type":
            fields_set.add(key)
        elif key in _RESERVED_CALL_KEYS:
            raise FormatError(
                f"{key!r} is reserved by ctxcompact on tool calls; rename the key",
                index=index,
                field=f"{where}.{key}",
            )
        elif key != "id" and key != "function":
            extra[key] = copy_json(value)
            fields_set.add(key)
    if len(function) > 2:
        extra[FUNCTION_EXTRA_KEY] = {
            k: copy_json(v) for k, v in function.items() if k != "name" and k != "arguments"
        }
        fields_set.add(FUNCTION_EXTRA_KEY)
    return construct(ToolCall, values, fields_set, extra)


def to_openai(history: Sequence[Message]) -> list[dict[str, Any]]:
    """Write a history as an OpenAI Chat Completions message list.

    Args:
        history: The messages, e.g. from :func:`from_openai` or a strategy.

    Returns:
        New dicts and lists (nothing is shared with the history), ready to send.

    Raises:
        FormatError: An item of ``history`` is not a :class:`Message`.

    Example:
        >>> to_openai([Message.user("hi")])
        [{'role': 'user', 'content': 'hi'}]
    """
    return [_write_message(message, index) for index, message in enumerate(history)]


def _write_message(message: Message, index: int) -> dict[str, Any]:
    if not isinstance(message, Message):
        raise FormatError(f"expected a Message, got {type(message).__name__}", index=index)
    values = message.__dict__
    present = message.__pydantic_fields_set__
    extra = message.__pydantic_extra__ or {}
    role = values["role"]
    out: dict[str, Any] = {"role": role}
    content = values["content"]
    if type(content) is str:
        out["content"] = content
    elif content is not None or "content" in present:
        out["content"] = _write_content(content, ANTHROPIC_KEY in extra, role)
    elif role == "tool" and ANTHROPIC_KEY in extra:
        out["content"] = ""  # OpenAI requires it; Anthropic allows a result without content
    calls = values["tool_calls"]
    if calls is not None:
        out["tool_calls"] = [_write_tool_call(call) for call in calls]
    elif "tool_calls" in present:
        out["tool_calls"] = None
    value = values["tool_call_id"]
    if value is not None or "tool_call_id" in present:
        out["tool_call_id"] = value
    value = values["name"]
    if value is not None or "name" in present:
        out["name"] = value
    for key, value in extra.items():
        if key != ANTHROPIC_KEY:
            out[key] = copy_json(value)
    return out


def _write_content(content: Content, from_anthropic: bool, role: str) -> Any:
    if content is None or isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for part in content:
        kind = part.type
        if isinstance(part, ImagePart) and kind == "image":
            parts.append(anthropic_image_to_openai(part_to_dict(part)))
        elif from_anthropic and isinstance(part, RawPart) and kind in _THINKING:
            continue
        else:
            parts.append(part_to_dict(part))
    if not parts and content and role == "assistant":
        return None  # only thinking blocks: OpenAI wants null, not an empty list
    return parts


def _write_tool_call(call: ToolCall) -> dict[str, Any]:
    values = call.__dict__
    function: dict[str, Any] = {"name": values["name"], "arguments": values["arguments"]}
    out: dict[str, Any] = {"id": values["id"], "type": values["type"], "function": function}
    extra = call.__pydantic_extra__
    if not extra:
        return out
    for key, value in extra.items():
        if key == FUNCTION_EXTRA_KEY and isinstance(value, Mapping):
            for k, v in value.items():
                function[k] = copy_json(v)
        elif key != ANTHROPIC_KEY:
            out[key] = copy_json(value)
    return out
