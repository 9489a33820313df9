"""Writing a history as Responses items (see :mod:`ctxcompact._formats.responses`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._history.messages import Content, ImagePart, Message, RawPart, TextPart, ToolCall
from ..exceptions import FormatError
from .common import copy_json, extra_of, part_to_dict
from .responses_items import CALL_ITEM, MODEL_ITEMS, RESPONSES_KEY, TEXT_TYPES

__all__ = ["to_responses"]


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
    item: dict[str, Any] = {"type": CALL_ITEM.get(kind, "function_call")}
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
            if isinstance(part, RawPart) and part.type in MODEL_ITEMS:
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
