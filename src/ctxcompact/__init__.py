"""ctxcompact: keep LLM agents inside their context window.

Pluggable compaction strategies, one trigger controller, lossless OpenAI/Anthropic history
conversion, TOML configuration and a ``module:ClassName`` plugin loader. ``import
ctxcompact`` imports neither ``openai`` nor ``anthropic``: the SDK adapters live in
:mod:`ctxcompact.llm` and load on use.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from ._agent.agent import CONTINUE_PROMPT, Agent, CompactionRecord
from ._config.config import (
    AgentConfig,
    CompactionConfig,
    Config,
    ContextGuardConfig,
    LLMConfig,
    ObservationMaskingConfig,
    PricingConfig,
    ProxyConfig,
    Schema1Config,
    StoreConfig,
    TokenCountingConfig,
    TruncationConfig,
    load_config,
)
from ._contract.protocols import (
    LLM,
    CompactionContext,
    CompactionOutput,
    CompactionStrategy,
    Completion,
    Dependencies,
    NeedsLLM,
    SummarizesAhead,
    SummaryAhead,
    ToolSpec,
    Usage,
    WindowedLLM,
    has_context_window,
    needs_llm,
    summarizes_ahead,
)
from ._contract.tools import Tool, ToolResult, tool
from ._controller.controller import (
    CompactionController,
    CompactionEvent,
    CompactionResult,
    ControllerState,
    PreparedRequest,
    Step,
)
from ._controller.problems import Problem
from ._formats.anthropic import from_anthropic, to_anthropic
from ._formats.files import Conversation, load_conversation, parse_conversation, read_conversation
from ._formats.openai_chat import from_openai, to_openai
from ._formats.responses import from_responses, to_responses
from ._formats.responses_items import looks_like_responses
from ._history.groups import ToolGroup, tool_groups
from ._history.messages import ImagePart, Message, RawPart, TextPart, ToolCall
from ._history.validate import HistoryProblem, check_history
from ._plugins.loader import ParamInfo, StrategyInfo, list_strategies, load_strategy
from ._tokens.counters import (
    CHARS_PER_TOKEN,
    IMAGE_TOKENS,
    PER_MESSAGE_TOKENS,
    HeuristicTokenCounter,
    TextTokenCounter,
    TiktokenCounter,
    TokenCounter,
    counts_text,
)
from ._tokens.windows import CONTEXT_WINDOWS, context_window, parse_context_error
from ._wiring import Wiring, wire

try:
    __version__ = version("ctxcompact")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0"

__all__ = [
    "CHARS_PER_TOKEN",
    "CONTEXT_WINDOWS",
    "CONTINUE_PROMPT",
    "IMAGE_TOKENS",
    "LLM",
    "PER_MESSAGE_TOKENS",
    "Agent",
    "AgentConfig",
    "CompactionConfig",
    "CompactionContext",
    "CompactionController",
    "CompactionEvent",
    "CompactionOutput",
    "CompactionRecord",
    "CompactionResult",
    "CompactionStrategy",
    "Completion",
    "Config",
    "ContextGuardConfig",
    "ControllerState",
    "Conversation",
    "Dependencies",
    "HeuristicTokenCounter",
    "HistoryProblem",
    "ImagePart",
    "LLMConfig",
    "Message",
    "NeedsLLM",
    "ObservationMaskingConfig",
    "ParamInfo",
    "PreparedRequest",
    "PricingConfig",
    "Problem",
    "ProxyConfig",
    "RawPart",
    "Schema1Config",
    "Step",
    "StoreConfig",
    "StrategyInfo",
    "SummarizesAhead",
    "SummaryAhead",
    "TextPart",
    "TextTokenCounter",
    "TiktokenCounter",
    "TokenCounter",
    "TokenCountingConfig",
    "Tool",
    "ToolCall",
    "ToolGroup",
    "ToolResult",
    "ToolSpec",
    "TruncationConfig",
    "Usage",
    "WindowedLLM",
    "Wiring",
    "__version__",
    "check_history",
    "context_window",
    "counts_text",
    "from_anthropic",
    "from_openai",
    "from_responses",
    "has_context_window",
    "list_strategies",
    "load_config",
    "load_conversation",
    "load_strategy",
    "looks_like_responses",
    "needs_llm",
    "parse_context_error",
    "parse_conversation",
    "read_conversation",
    "summarizes_ahead",
    "to_anthropic",
    "to_openai",
    "to_responses",
    "tool",
    "tool_groups",
    "wire",
]
