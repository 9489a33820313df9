"""ctxcompact: keep LLM agents inside their context window.

Pluggable compaction strategies, one trigger controller, lossless OpenAI/Anthropic history
conversion, TOML configuration and a ``module:ClassName`` plugin loader. ``import
ctxcompact`` imports neither ``openai`` nor ``anthropic``.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._agent import Agent
    from ._anthropic_format import from_anthropic, to_anthropic
    from ._config import Config, LLMConfig, load_config
    from ._contract import (
        LLM,
        CompactionContext,
        CompactionOutput,
        CompactionStrategy,
        Completion,
        ToolSpec,
        Usage,
    )
    from ._controller import CompactionController, CompactionEvent
    from ._groups import ToolGroup, tool_groups
    from ._loader import load_strategy
    from ._messages import ImagePart, Message, RawPart, TextPart, ToolCall
    from ._openai_format import from_openai, to_openai
    from ._tokens import HeuristicTokenCounter, TiktokenCounter, TokenCounter
    from ._tools import Tool
    from ._validate import HistoryProblem, check_history

try:
    __version__ = version("ctxcompact")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0"

# Public name -> private module. Resolved on first access so that importing ctxcompact stays
# cheap and so that a module needing an optional dependency is only imported when used.
_EXPORTS: dict[str, str] = {
    "Agent": "._agent",
    "CompactionContext": "._contract",
    "CompactionController": "._controller",
    "CompactionEvent": "._controller",
    "CompactionOutput": "._contract",
    "CompactionStrategy": "._contract",
    "Completion": "._contract",
    "Config": "._config",
    "HeuristicTokenCounter": "._tokens",
    "HistoryProblem": "._validate",
    "ImagePart": "._messages",
    "LLM": "._contract",
    "LLMConfig": "._config",
    "Message": "._messages",
    "RawPart": "._messages",
    "TextPart": "._messages",
    "TiktokenCounter": "._tokens",
    "TokenCounter": "._tokens",
    "Tool": "._tools",
    "ToolCall": "._messages",
    "ToolGroup": "._groups",
    "ToolSpec": "._contract",
    "Usage": "._contract",
    "check_history": "._validate",
    "from_anthropic": "._anthropic_format",
    "from_openai": "._openai_format",
    "load_config": "._config",
    "load_strategy": "._loader",
    "to_anthropic": "._anthropic_format",
    "to_openai": "._openai_format",
    "tool_groups": "._groups",
}

__all__ = sorted([*_EXPORTS, "__version__"])


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ctxcompact' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
