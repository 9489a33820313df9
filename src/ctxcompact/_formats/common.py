"""Pieces shared by the OpenAI and Anthropic converters.

The converters build models with :func:`~._messages.construct`, without validation: the
input has been checked field by field here, and re-validating it through pydantic would cost
several times the conversion itself.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._history.messages import (
    ANTHROPIC_KEY,
    Content,
    ImagePart,
    Message,
    RawPart,
    TextPart,
    construct,
)
from ..exceptions import FormatError

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = [
    "ANTHROPIC_KEY",
    "JSON",
    "AnthropicSystem",
    "anthropic_image_to_openai",
    "check_block",
    "content_to_anthropic",
    "copy_json",
    "extra_of",
    "new_part",
    "openai_image_to_anthropic",
    "parse_arguments",
    "part_to_dict",
    "parts_to_anthropic",
    "system_to_anthropic",
    "type_name",
]

JSON = Any
"""A JSON value as decoded by :mod:`json` (kept as ``Any``: it is recursive and open)."""

AnthropicSystem = str | list[dict[str, Any]] | None
"""Anthropic's ``system`` parameter: a string, a list of text blocks, or absent."""


def new_part(block: Mapping[str, Any], native_image: str) -> TextPart | ImagePart | RawPart:
    """A part from a content block whose ``type`` (and ``text`` for text) was checked.

    Only images of the format being read (``native_image``: ``image_url`` or ``image``) become
    :class:`ImagePart`; the other format's image type is kept verbatim as a :class:`RawPart`, so
    the round trip of that format stays exact.
    """
    kind = block["type"]
    extra = {k: copy_json(v) for k, v in block.items() if k != "type" and k != "text"}
    fields_set = set(block)
    if kind == "text":
        return construct(TextPart, {"type": "text", "text": block["text"]}, fields_set, extra)
    if "text" in block:
        extra["text"] = copy_json(block["text"])
    if kind == native_image:
        return construct(ImagePart, {"type": kind}, fields_set, extra)
    return construct(RawPart, {"type": kind}, fields_set, extra)


def check_block(block: object, index: int | None, field: str) -> Mapping[str, Any]:
    """Check that a content block is an object with a string ``type`` (and ``text``)."""
    if type(block) is not dict and not isinstance(block, Mapping):
        raise FormatError(
            f"a content block must be an object with a 'type', got {type_name(block)}",
            index=index,
            field=field,
        )
    kind = block.get("type")
    if not isinstance(kind, str):
        raise FormatError(
            f"a content block needs a string 'type' (got {type_name(kind)})",
            index=index,
            field=f"{field}.type",
        )
    if kind == "text" and not isinstance(block.get("text"), str):
        raise FormatError(
            f"a text block needs a string 'text' (got {type_name(block.get('text'))})",
            index=index,
            field=f"{field}.text",
        )
    return block


def extra_of(model: BaseModel) -> dict[str, Any]:
    """The model's extra keys (an empty dict when it has none)."""
    return model.__pydantic_extra__ or {}


def part_to_dict(part: BaseModel) -> dict[str, Any]:
    """A part as a plain block, in the form it was read (extras copied)."""
    out: dict[str, Any] = {"type": part.__dict__["type"]}
    if isinstance(part, TextPart):
        out["text"] = part.text
    for key, value in extra_of(part).items():
        out[key] = copy_json(value)
    return out


def copy_json(value: JSON) -> JSON:
    """A copy of a JSON value's containers, so callers never share mutable state with a model."""
    kind = type(value)
    if kind is str or value is None or kind is int or kind is bool or kind is float:
        return value
    if kind is dict or isinstance(value, Mapping):
        return {k: copy_json(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [copy_json(v) for v in value]
    return value


def type_name(value: object) -> str:
    """The JSON-ish name of a value's type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, (list, tuple)):
        return "array"
    return type(value).__name__


def openai_image_to_anthropic(block: dict[str, Any]) -> dict[str, Any]:
    """``{"type": "image_url", ...}`` as an Anthropic image block (unchanged if it cannot be).

    A ``data:<media type>;base64,<data>`` URL becomes a ``base64`` source, any other URL a
    ``url`` source. OpenAI's ``detail`` has no Anthropic counterpart and is dropped.
    """
    image = block.get("image_url")
    url = image.get("url") if isinstance(image, Mapping) else image
    if not isinstance(url, str):
        return block
    source: dict[str, Any]
    if url.startswith("data:"):
        header, sep, data = url[5:].partition(",")
        media_type, _, encoding = header.partition(";")
        if not sep or encoding != "base64":
            return block
        source = {"type": "base64", "media_type": media_type, "data": data}
    else:
        source = {"type": "url", "url": url}
    out = {"type": "image", "source": source}
    out.update((k, v) for k, v in block.items() if k not in ("type", "image_url"))
    return out


def anthropic_image_to_openai(block: dict[str, Any]) -> dict[str, Any]:
    """``{"type": "image", "source": ...}`` as an OpenAI ``image_url`` block (unchanged if it
    cannot be: a ``file`` source has no OpenAI counterpart)."""
    source = block.get("source")
    if not isinstance(source, Mapping):
        return block
    kind = source.get("type")
    if kind == "base64":
        url = f"data:{source.get('media_type')};base64,{source.get('data')}"
    elif kind == "url" and isinstance(source.get("url"), str):
        url = source["url"]
    else:
        return block
    out: dict[str, Any] = {"type": "image_url", "image_url": {"url": url}}
    out.update((k, v) for k, v in block.items() if k not in ("type", "source"))
    return out


def system_to_anthropic(messages: Sequence[Message]) -> AnthropicSystem:
    """Leading system messages as Anthropic's ``system``: a string for one string message."""
    if not messages:
        return None
    if len(messages) == 1 and isinstance(messages[0].content, str):
        return messages[0].content
    blocks: list[dict[str, Any]] = []
    for message in messages:
        content = message.content
        if isinstance(content, str):
            if content:
                blocks.append({"type": "text", "text": content})
        elif content:
            blocks.extend(parts_to_anthropic(content))
    return blocks


def parts_to_anthropic(parts: Sequence[Any]) -> list[dict[str, Any]]:
    """Parts as Anthropic blocks (OpenAI ``image_url`` parts converted)."""
    out = []
    for part in parts:
        block = part_to_dict(part)
        if isinstance(part, ImagePart) and part.type == "image_url":
            block = openai_image_to_anthropic(block)
        out.append(block)
    return out


def content_to_anthropic(content: Content) -> str | list[dict[str, Any]]:
    """Content as Anthropic content (``None`` becomes an empty string)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return parts_to_anthropic(content)


def parse_arguments(arguments: str, index: int, j: int) -> JSON:
    """Tool-call arguments as Anthropic's ``input``, which must be a JSON object; empty
    arguments (some models send ``""`` for a call without parameters) become ``{}``."""
    field = f"tool_calls[{j}].arguments"
    try:
        parsed: JSON = json.loads(arguments) if arguments.strip() else {}
    except ValueError as exc:
        raise FormatError(
            f"tool-call arguments are not valid JSON ({exc}); Anthropic needs a JSON 'input'. "
            "Fix or drop this tool call before converting",
            index=index,
            field=field,
        ) from None
    if not isinstance(parsed, dict):
        raise FormatError(
            f"tool-call arguments are JSON but not an object ({type(parsed).__name__}); "
            "Anthropic's 'input' must be an object",
            index=index,
            field=field,
        )
    return parsed
