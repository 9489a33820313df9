"""The built-in compaction strategies. Each satisfies :class:`ctxcompact.CompactionStrategy`.

| strategy | needs an LLM | what it does |
|---|---|---|
| ToolResultHiding | no | replaces old tool results with a short placeholder (KLIP-13) |
| Schema1Masking | no | masks old tool results by tool turns, keeps errors (Schema 1) |
| LLMSummary | yes | summarizes old messages into one user message (KLIP-13) |
| HidingThenSummary | yes | hiding first, summary when hiding is not enough |
| ToolResultTruncation | no | cuts huge tool results to head + tail |
| ContextGuard | no | drops the oldest turns until the history fits |
| Pipeline | - | runs strategies in order |
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._guard import ContextGuard
    from ._hiding import ToolResultHiding
    from ._hiding_then_summary import HidingThenSummary
    from ._pipeline import Pipeline
    from ._schema1 import MaskPolicy, Schema1Masking, mask_old_tool_results
    from ._summary import LLMSummary
    from ._truncation import ToolResultTruncation

_EXPORTS: dict[str, str] = {
    "ContextGuard": "._guard",
    "HidingThenSummary": "._hiding_then_summary",
    "LLMSummary": "._summary",
    "MaskPolicy": "._schema1",
    "Pipeline": "._pipeline",
    "Schema1Masking": "._schema1",
    "ToolResultHiding": "._hiding",
    "ToolResultTruncation": "._truncation",
    "mask_old_tool_results": "._schema1",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ctxcompact.strategies' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
