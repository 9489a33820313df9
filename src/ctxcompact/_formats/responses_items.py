"""What the Responses converters share: the item types, and telling Responses items from Chat
Completions messages for inputs of unknown format."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "CALLS",
    "CALL_ITEM",
    "INPUT_ROLES",
    "MARKER_TYPES",
    "MODEL_ITEMS",
    "OUTPUTS",
    "RESPONSES_KEY",
    "TEXT_TYPES",
    "looks_like_responses",
]

RESPONSES_KEY = "responses"
"""The extra key holding Responses-only layout on messages and tool calls made here."""

TEXT_TYPES = frozenset({"input_text", "output_text"})
INPUT_ROLES = frozenset({"user", "system", "developer"})
CALLS = {"function_call": ("function", "arguments"), "custom_tool_call": ("custom", "input")}
CALL_ITEM = {"function": "function_call", "custom": "custom_tool_call"}
OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output"})
# Items the model produces: they join the assistant run they sit in, so a reasoning item is
# never separated from the item it preceded. Their ``*_output`` answers stay standalone.
MODEL_ITEMS = frozenset(
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
MARKER_TYPES = MODEL_ITEMS | OUTPUTS | frozenset(CALLS) | {"compaction", "item_reference"}
"""Item types no Chat Completions message has: one is enough to recognise the format."""


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
