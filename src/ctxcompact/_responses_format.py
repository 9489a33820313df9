"""OpenAI Responses API items (``input`` / ``output`` lists) <-> the provider-neutral history.

``to_responses(from_responses(items)) == items`` for any list ``from_responses`` accepts. How
items map onto messages:

* a ``message`` item of role ``user``, ``system`` or ``developer`` (typed, or the short
  ``{"role", "content"}`` form) -> one message of that role; ``input_text`` / ``output_text``
  parts -> :class:`TextPart`, any other part -> :class:`RawPart`;
* a run of model-output items -> **one** assistant message: ``reasoning`` items and other
  output items (``web_search_call``...) -> :class:`RawPart` verbatim (``encrypted_content``
  included), assistant ``message`` items -> their parts, ``function_call`` /
  ``custom_tool_call`` -> :class:`ToolCall` (``type`` ``"function"`` / ``"custom"``, the
  ``call_id`` as its id). A reasoning item thus stays with the call or text it preceded, which
  the API demands, and a tool-call group is the run plus the outputs that directly follow it,
  exactly as for Chat Completions: pairing is positional;
* ``function_call_output`` / ``custom_tool_call_output`` -> a tool message (``tool_call_id``
  = ``call_id``), its ``output`` string or parts as content;
* any other item (``compaction``, ``item_reference``, ``*_output`` of built-in tools, types
  this module does not know) -> a user message whose only part is the item, verbatim, in
  place.

What the neutral model has no field for goes in the reserved extra key ``responses`` of the
message (item keys such as ``id``, ``status``, ``phase``; how a run splits into items) and of
the tool call (keys of the call item). A strategy's new or edited messages are written in the
canonical form: a string stays a string, text parts become ``input_text`` (``output_text``
for the assistant), a hidden output keeps its ``call_id`` and item keys.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ._format_common import (
    copy_json,
    extra_of,
    new_message,
    new_part,
    new_tool_call,
    part_to_dict,
    type_name,
)
from ._messages import Content, ImagePart, Message, RawPart, TextPart, ToolCall
from .exceptions import FormatError

__all__ = ["MARKER_TYPES", "RESPONSES_KEY", "TEXT_TYPES", "from_responses", "to_responses"]

RESPONSES_KEY = "responses"
"""The extra key holding Responses-only layout on messages and tool calls made here."""

TEXT_TYPES = frozenset({"input_text", "output_text"})
_INPUT_ROLES = frozenset({"user", "system", "developer"})
_CALLS = {"function_call": ("function", "arguments"), "custom_tool_call": ("custom", "input")}
_CALL_ITEM = {"function": "function_call", "custom": "custom_tool_call"}
_OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output"})
# Items the model produces: they join the assistant run they sit in, so a reasoning item is
# never separated from the item it preceded. Their ``*_output`` answers stay standalone.
_MODEL_ITEMS = frozenset(
    {
        "reasoning",
        "web_search_call",
        "file_search_call",
        "computer_call",
        "code_interpreter_call",
        "image_generation_call",
        "local_shell_call",
        "shell_call",
        "apply_patch_call",
        "mcp_call",
        "mcp_list_tools",
        "mcp_approval_request",
    }
)
MARKER_TYPES = _MODEL_ITEMS | _OUTPUTS | frozenset(_CALLS) | {"compaction", "item_reference"}
"""Item types no Chat Completions message has: one is enough to recognise the format."""


def from_responses(items: Sequence[Mapping[str, Any]]) -> list[Message]:
    """Read a list of Responses API items (a request's ``input``) into a history.

    Args:
        items: The items, as decoded JSON.

    Returns:
        The history, in item order (see the module docstring for the mapping). Containers
        are copied: changing ``items`` afterwards does not change the history.

    Raises:
        FormatError: The input is not a list of objects, or an item has no ``type`` and no
            ``role``, an unknown message role, or a call / output without its string
            ``call_id``, ``name``, ``arguments``. The error names the item index and field.

    Example:
        >>> history = from_responses([
        ...     {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"},
        ...     {"type": "function_call_output", "call_id": "c1", "output": "a.py"},
        ... ])
        >>> [(m.role, m.tool_call_ids or m.tool_call_id) for m in history]
        [('assistant', ('c1',)), ('tool', 'c1')]
    """
    if isinstance(items, (str, bytes, bytearray, Mapping)) or not isinstance(items, Sequence):
        raise FormatError(
            f"expected a list of Responses items, got {type_name(items)}; pass the request's "
            "'input' list (a plain string input is one user message: wrap it yourself)"
        )
    out: list[Message] = []
    run: _Run | None = None
    for index, item in enumerate(items):
        if type(item) is not dict and not isinstance(item, Mapping):
            raise FormatError(f"an item must be an object, got {type_name(item)}", index=index)
        kind = item.get("type")
        role = item.get("role")
        if kind is None and role is None:
            raise FormatError("an item needs a 'type' or a 'role'", index=index, field="type")
        if kind is not None and not isinstance(kind, str):
            raise FormatError(f"must be a string, got {type_name(kind)}", index=index, field="type")
        is_message = kind is None or kind == "message"
        if (is_message and role == "assistant") or kind in _MODEL_ITEMS or kind in _CALLS:
            if run is None:
                run = _Run()
            run.add(item, index, kind, is_message)
            continue
        if run is not None:
            out.append(run.message())
            run = None
        if is_message:
            out.append(_read_input_message(item, index, role))
        elif kind in _OUTPUTS:
            out.append(_read_output(item, index, kind))
        else:
            part = RawPart.model_validate(copy_json(dict(item)))
            values = _values("user", (part,))
            out.append(new_message(values, {"role", "content", RESPONSES_KEY}, _meta(opaque=True)))
    if run is not None:
        out.append(run.message())
    return out


def _values(role: str, content: Content, **fields: Any) -> dict[str, Any]:
    values = {"role": role, "content": content, "tool_calls": None, "tool_call_id": None}
    values["name"] = None
    values.update(fields)
    return values


def _meta(**meta: Any) -> dict[str, Any]:
    return {RESPONSES_KEY: meta}


def _rest(item: Mapping[str, Any], skip: tuple[str, ...]) -> dict[str, Any]:
    return {k: copy_json(v) for k, v in item.items() if k not in skip}


def _read_parts(value: object, index: int, field: str) -> tuple[Content, dict[str, str]]:
    """Content as a string or parts, plus the original type of text parts by position."""
    if isinstance(value, str):
        return value, {}
    if not isinstance(value, (list, tuple)):
        raise FormatError(
            f"must be a string or a list of content parts, got {type_name(value)}",
            index=index,
            field=field,
        )
    parts: list[TextPart | ImagePart | RawPart] = []
    types: dict[str, str] = {}
    for k, block in enumerate(value):
        if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
            raise FormatError(
                f"a content part must be an object with a string 'type', got {type_name(block)}",
                index=index,
                field=f"{field}[{k}]",
            )
        kind = block["type"]
        if kind in TEXT_TYPES and isinstance(block.get("text"), str):
            types[str(k)] = kind
            parts.append(new_part({**block, "type": "text"}, ""))
        else:
            parts.append(new_part(block, ""))  # no native image type: images stay verbatim
    return tuple(parts), types


def _read_input_message(item: Mapping[str, Any], index: int, role: object) -> Message:
    if role not in _INPUT_ROLES:
        what = "is missing" if role is None else f"{role!r} is not one of"
        raise FormatError(
            f"the message role {what} user, system, developer, assistant",
            index=index,
            field="role",
        )
    if "content" not in item:
        raise FormatError("a message item needs 'content'", index=index, field="content")
    content, types = _read_parts(item["content"], index, "content")
    meta = _meta(item=_rest(item, ("role", "content")), types=types, order=list(item))
    return new_message(_values(str(role), content), {"role", "content", RESPONSES_KEY}, meta)


def _read_output(item: Mapping[str, Any], index: int, kind: str) -> Message:
    call_id = _string(item, "call_id", index)
    if "output" not in item:
        raise FormatError(f"a {kind} item needs 'output'", index=index, field="output")
    content, types = _read_parts(item["output"], index, "output")
    meta = _meta(item=_rest(item, ("call_id", "output")), types=types, order=list(item))
    values = _values("tool", content, tool_call_id=call_id)
    return new_message(values, {"role", "content", "tool_call_id", RESPONSES_KEY}, meta)


def _string(item: Mapping[str, Any], key: str, index: int) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        what = "is missing" if value is None else f"must be a string, got {type_name(value)}"
        raise FormatError(f"{key!r} {what}", index=index, field=key)
    return value


class _Run:
    """Consecutive model-output items, becoming one assistant message."""

    def __init__(self) -> None:
        self.parts: list[TextPart | ImagePart | RawPart] = []
        self.calls: list[ToolCall] = []
        # Per item: ["r"] a verbatim part, ["c"] a call, ["m", n, keys, is_str, types].
        self.layout: list[list[Any]] = []

    def add(self, item: Mapping[str, Any], index: int, kind: str | None, is_message: bool) -> None:
        if is_message:
            if "content" not in item:
                raise FormatError("a message item needs 'content'", index=index, field="content")
            content, types = _read_parts(item["content"], index, "content")
            is_str = isinstance(content, str)
            parts = (TextPart(text=content),) if isinstance(content, str) else content or ()
            self.parts.extend(parts)
            keys = _rest(item, ("role", "content"))
            self.layout.append(["m", len(parts), keys, is_str, types, list(item)])
        elif kind in _CALLS:
            call_type, args_key = _CALLS[kind]
            call_id = _string(item, "call_id", index)
            name = _string(item, "name", index)
            arguments = _string(item, args_key, index)
            rest = _rest(item, ("type", "call_id", "name", args_key))
            values = {"id": call_id, "name": name, "arguments": arguments, "type": call_type}
            fields_set = {"id", "name", "arguments", "type", RESPONSES_KEY}
            extra = {RESPONSES_KEY: {"item": rest, "order": list(item)}}
            self.calls.append(new_tool_call(values, fields_set, extra))
            self.layout.append(["c"])
        else:
            self.parts.append(RawPart.model_validate(copy_json(dict(item))))
            self.layout.append(["r"])

    def message(self) -> Message:
        calls = tuple(self.calls) if self.calls else None
        values = _values("assistant", tuple(self.parts), tool_calls=calls)
        fields_set = {"role", "content", RESPONSES_KEY}
        if calls:
            fields_set.add("tool_calls")
        return new_message(values, fields_set, _meta(layout=self.layout))


def to_responses(history: Sequence[Message]) -> list[dict[str, Any]]:
    """Write a history as a list of Responses API items (a request's ``input``).

    Args:
        history: The messages, e.g. from :func:`from_responses` or a strategy.

    Returns:
        New dicts and lists (nothing is shared with the history), ready to send.

    Raises:
        FormatError: An item of ``history`` is not a :class:`Message`, or a call or call id
            sits on a message of the wrong role (items have no place for it).

    Example:
        >>> to_responses([Message.user("hi")])
        [{'role': 'user', 'content': 'hi'}]
    """
    out: list[dict[str, Any]] = []
    for index, message in enumerate(history):
        if not isinstance(message, Message):
            raise FormatError(f"expected a Message, got {type(message).__name__}", index=index)
        meta = extra_of(message).get(RESPONSES_KEY)
        meta = meta if isinstance(meta, Mapping) else {}
        role = message.role
        _check_pairing_fields(message, index)
        if role == "assistant":
            out.extend(_write_run(message, meta))
        elif role == "tool":
            out.append(_write_output(message, meta))
        elif meta.get("opaque") and (raw := _single_raw(message.content)) is not None:
            out.append(part_to_dict(raw))
        else:
            item = copy_json(meta.get("item", {}))
            item["role"] = role
            item["content"] = _write_content(message.content, meta.get("types"), "input_text")
            out.append(_reorder(item, meta.get("order")))
    return out


def _check_pairing_fields(message: Message, index: int) -> None:
    """Items have no place for a call or a call id on the wrong role: refuse, never drop."""
    role = message.role
    if message.tool_calls and role != "assistant":
        raise FormatError(
            f"a {role} message has tool_calls; only assistant messages can carry calls",
            index=index,
            field="tool_calls",
        )
    if (message.tool_call_id is None) == (role == "tool"):
        what = (
            "needs the 'tool_call_id' of the call it answers"
            if role == "tool"
            else (f"has a tool_call_id ({message.tool_call_id!r}); only tool results answer calls")
        )
        raise FormatError(f"a {role} message {what}", index=index, field="tool_call_id")


def _single_raw(content: Content) -> RawPart | None:
    """The item an opaque message holds, unless a strategy replaced its content."""
    if isinstance(content, tuple) and len(content) == 1 and isinstance(content[0], RawPart):
        return content[0]
    return None


def _write_content(content: Content, types: object, default: str) -> Any:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    types = types if isinstance(types, Mapping) else {}
    return [_write_part(part, types.get(str(k)), default) for k, part in enumerate(content)]


def _write_part(part: TextPart | ImagePart | RawPart, kind: object, default: str) -> dict[str, Any]:
    block = part_to_dict(part)
    if isinstance(part, TextPart):
        block["type"] = kind if kind in TEXT_TYPES else default
    elif isinstance(part, ImagePart) and part.type == "image_url":
        # Chat Completions' image part, as the Responses API spells it.
        image = block.pop("image_url", None)
        del block["type"]
        url = image.get("url") if isinstance(image, Mapping) else image
        if isinstance(image, Mapping) and "detail" in image:
            block["detail"] = image["detail"]
        block = {"type": "input_image", "image_url": url, **block}
    return block


def _write_output(message: Message, meta: Mapping[str, Any]) -> dict[str, Any]:
    item = copy_json(meta.get("item", {"type": "function_call_output"}))
    item["call_id"] = message.tool_call_id
    item["output"] = _write_content(message.content, meta.get("types"), "input_text")
    return _reorder(item, meta.get("order"))


def _write_call(call: ToolCall) -> dict[str, Any]:
    kind = call.type
    item: dict[str, Any] = {"type": _CALL_ITEM.get(kind, "function_call")}
    meta = extra_of(call).get(RESPONSES_KEY)
    meta = meta if isinstance(meta, Mapping) else {}
    item.update(copy_json(meta.get("item") or {}))
    item["call_id"] = call.id
    item["name"] = call.name
    item["input" if kind == "custom" else "arguments"] = call.arguments
    return _reorder(item, meta.get("order"))


def _write_run(message: Message, meta: Mapping[str, Any]) -> list[dict[str, Any]]:
    content = message.content
    calls = message.tool_calls or ()
    layout = meta.get("layout")
    if isinstance(content, tuple) and isinstance(layout, list) and _fits(layout, content, calls):
        return _write_layout(layout, content, calls)
    out: list[dict[str, Any]] = []
    if isinstance(content, str):
        out.append({"role": "assistant", "content": content})
    elif content:
        texts: list[dict[str, Any]] = []
        for part in content:
            if isinstance(part, RawPart) and part.type in _MODEL_ITEMS:
                if texts:
                    out.append({"type": "message", "role": "assistant", "content": texts})
                    texts = []
                out.append(part_to_dict(part))
            else:
                texts.append(_write_part(part, None, "output_text"))
        if texts:
            out.append({"type": "message", "role": "assistant", "content": texts})
    out.extend(_write_call(call) for call in calls)
    return out


def _fits(layout: list[list[Any]], content: tuple[Any, ...], calls: Sequence[ToolCall]) -> bool:
    """Whether the recorded item layout still describes this content (a strategy may edit)."""
    n_parts = n_calls = 0
    for entry in layout:
        tag = entry[0]
        if tag == "r":
            if n_parts >= len(content) or not isinstance(content[n_parts], RawPart):
                return False
            n_parts += 1
        elif tag == "c":
            n_calls += 1
        else:
            n_parts += entry[1]
    return n_parts == len(content) and n_calls == len(calls)


def _write_layout(
    layout: list[list[Any]], content: tuple[Any, ...], calls: Sequence[ToolCall]
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    p = c = 0
    for entry in layout:
        tag = entry[0]
        if tag == "r":
            out.append(part_to_dict(content[p]))
            p += 1
        elif tag == "c":
            out.append(_write_call(calls[c]))
            c += 1
        else:
            _, n, keys, is_str, types, order = entry
            item = copy_json(keys)
            item["role"] = "assistant"
            parts = content[p : p + n]
            if is_str and n == 1 and isinstance(parts[0], TextPart) and not extra_of(parts[0]):
                item["content"] = parts[0].text
            else:
                item["content"] = _write_content(parts, types, "output_text")
            out.append(_reorder(item, order))
            p += n
    return out


def _reorder(item: dict[str, Any], order: object) -> dict[str, Any]:
    """The item with its keys in the order they were read (JSON text round-trips too)."""
    if not isinstance(order, list) or len(order) != len(item) or not all(k in item for k in order):
        return item
    return {k: item[k] for k in order}
