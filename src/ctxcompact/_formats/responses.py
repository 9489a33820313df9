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

from .._history.messages import Content, ImagePart, Message, RawPart, TextPart, ToolCall, construct
from ..exceptions import FormatError
from .common import copy_json, new_part, type_name
from .responses_items import (
    CALLS,
    INPUT_ROLES,
    MODEL_ITEMS,
    OUTPUTS,
    RESPONSES_KEY,
    TEXT_TYPES,
)
from .responses_write import to_responses

__all__ = ["RESPONSES_KEY", "from_responses", "to_responses"]


def from_responses(items: Sequence[Mapping[str, Any]]) -> list[Message]:
    """Read a list of Responses API items (a request's ``input``) into a history.

    Args:
        items: The items, as decoded JSON.

    Returns:
        The history, in item order (see the module docstring for the mapping). Containers
        are copied: changing ``items`` afterwards does not change the history.

    Raises:
        FormatError: The input is not a list of objects, or an item has no ``type`` and no
            ``role``, an unknown message role, a call / output without its string
            ``call_id``, ``name``, ``arguments``, content that is not a string or a list of
            parts, or an ``input_text`` / ``output_text`` part without a string ``text``. The
            error names the item index and field; no other exception escapes.

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
        if (is_message and role == "assistant") or kind in MODEL_ITEMS or kind in CALLS:
            if run is None:
                run = _Run()
            run.add(item, index, kind, is_message)
            continue
        if run is not None:
            out.append(run.message())
            run = None
        if is_message:
            out.append(_read_input_message(item, index, role))
        elif kind in OUTPUTS:
            out.append(_read_output(item, index, kind))
        else:
            part = _raw(item)
            values = _values("user", (part,))
            out.append(
                construct(Message, values, {"role", "content", RESPONSES_KEY}, _meta(opaque=True))
            )
    if run is not None:
        out.append(run.message())
    return out


def _raw(block: Mapping[str, Any]) -> RawPart:
    """A whole item or content part kept verbatim (its ``type`` was checked to be a string):
    a :class:`RawPart` whatever the type (``new_part`` would read ``"text"`` as a text part
    and ``""`` as an image), so it is written back exactly as it came."""
    extra = {k: copy_json(v) for k, v in block.items() if k != "type"}
    return construct(RawPart, {"type": block["type"]}, set(block), extra)


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
        if kind in TEXT_TYPES:
            if not isinstance(block.get("text"), str):
                raise FormatError(
                    f"an {kind} part needs a string 'text', got {type_name(block.get('text'))}",
                    index=index,
                    field=f"{field}[{k}].text",
                )
            types[str(k)] = kind
            parts.append(new_part({**block, "type": "text"}, ""))
        else:
            parts.append(_raw(block))  # no native image type: images stay verbatim
    return tuple(parts), types


def _read_input_message(item: Mapping[str, Any], index: int, role: object) -> Message:
    if not isinstance(role, str) or role not in INPUT_ROLES:
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
    return construct(Message, _values(str(role), content), {"role", "content", RESPONSES_KEY}, meta)


def _read_output(item: Mapping[str, Any], index: int, kind: str) -> Message:
    call_id = _string(item, "call_id", index)
    if "output" not in item:
        raise FormatError(f"a {kind} item needs 'output'", index=index, field="output")
    content, types = _read_parts(item["output"], index, "output")
    meta = _meta(item=_rest(item, ("call_id", "output")), types=types, order=list(item))
    values = _values("tool", content, tool_call_id=call_id)
    return construct(Message, values, {"role", "content", "tool_call_id", RESPONSES_KEY}, meta)


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
        elif kind in CALLS:
            call_type, args_key = CALLS[kind]
            call_id = _string(item, "call_id", index)
            name = _string(item, "name", index)
            arguments = _string(item, args_key, index)
            rest = _rest(item, ("type", "call_id", "name", args_key))
            values = {"id": call_id, "name": name, "arguments": arguments, "type": call_type}
            fields_set = {"id", "name", "arguments", "type", RESPONSES_KEY}
            extra = {RESPONSES_KEY: {"item": rest, "order": list(item)}}
            self.calls.append(construct(ToolCall, values, fields_set, extra))
            self.layout.append(["c"])
        else:
            self.parts.append(_raw(item))
            self.layout.append(["r"])

    def message(self) -> Message:
        calls = tuple(self.calls) if self.calls else None
        values = _values("assistant", tuple(self.parts), tool_calls=calls)
        fields_set = {"role", "content", RESPONSES_KEY}
        if calls:
            fields_set.add("tool_calls")
        return construct(Message, values, fields_set, _meta(layout=self.layout))
