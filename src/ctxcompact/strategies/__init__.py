"""The built-in compaction strategies. Each satisfies :class:`ctxcompact.CompactionStrategy`.

| strategy | needs an LLM | what it does |
|---|---|---|
| ToolResultHiding | no | replaces old tool results with a short placeholder (KLIP-13) |
| Schema1Masking | no | masks old tool results by tool turns, keeps errors (Schema 1) |
| LLMSummary | yes | summarizes old messages into one user message (KLIP-13) |
| HidingThenSummary | yes | hiding first, summary when hiding is not enough |
| ToolResultTruncation | no | cuts huge tool results to head + tail |
| ContextGuard | no | keeps system, task and the newest steps that fit; cuts the newest step |
| ToolInputClearing | no | clears long string arguments of old tool calls |
| Pipeline | - | runs strategies in order |
| Tiered | optional | cheapest tier first until the history fits; the guard last |
"""

from __future__ import annotations

from ..kit import (
    DROP_MARKER,
    HIDDEN_PLACEHOLDER,
    KLIP13_PLACEHOLDER,
    SCHEMA1_PLACEHOLDER,
    SCHEMA1_SEED_PLACEHOLDER,
)
from ._clear_inputs import ToolInputClearing
from ._guard import ContextGuard
from ._hiding import ToolResultHiding
from ._hiding_then_summary import HidingThenSummary
from ._pipeline import Pipeline
from ._schema1 import MaskPolicy, Schema1Masking, mask_old_tool_results
from ._summary import ALIGNED_SUMMARY_HEAD, SUMMARIZER_SYSTEM, SUMMARY_PREFIX, LLMSummary
from ._tiered import Tiered
from ._truncation import ToolResultTruncation

__all__ = [
    "ALIGNED_SUMMARY_HEAD",
    "DROP_MARKER",
    "HIDDEN_PLACEHOLDER",
    "KLIP13_PLACEHOLDER",
    "SCHEMA1_PLACEHOLDER",
    "SCHEMA1_SEED_PLACEHOLDER",
    "SUMMARIZER_SYSTEM",
    "SUMMARY_PREFIX",
    "ContextGuard",
    "HidingThenSummary",
    "LLMSummary",
    "MaskPolicy",
    "Pipeline",
    "Schema1Masking",
    "Tiered",
    "ToolInputClearing",
    "ToolResultHiding",
    "ToolResultTruncation",
    "mask_old_tool_results",
]
