"""Telling Responses items from Chat Completions messages, for inputs of unknown format."""

from __future__ import annotations

from collections.abc import Mapping

from ._responses_format import MARKER_TYPES, TEXT_TYPES

__all__ = ["looks_like_responses"]


def looks_like_responses(data: object) -> bool:
    """Whether decoded JSON is Responses items rather than Chat Completions messages.

    Accepts a list of items, or a request / response body with an ``input`` or ``output``
    list. True when an item has a type only the Responses API has (``function_call``,
    ``reasoning``...) or a message uses ``input_text`` / ``output_text`` parts; a list of plain
    ``{"role", "content": "..."}`` messages, valid in both formats, gives False.

    Example:
        >>> looks_like_responses([{"type": "reasoning", "summary": []}])
        True
        >>> looks_like_responses([{"role": "user", "content": "hi"}])
        False
    """
    if isinstance(data, Mapping):
        for key in ("input", "output"):
            if isinstance(data.get(key), list):
                return looks_like_responses(data[key])
        return False
    if not isinstance(data, list):
        return False
    for item in data:
        if not isinstance(item, Mapping):
            return False
        kind = item.get("type")
        if kind in MARKER_TYPES:
            return True
        if kind == "message" or "role" in item:
            content = item.get("content")
            if isinstance(content, list) and any(
                isinstance(p, Mapping) and p.get("type") in TEXT_TYPES for p in content
            ):
                return True
    return False
