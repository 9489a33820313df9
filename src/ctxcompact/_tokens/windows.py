"""Context windows of current models, and the window an upstream error message states.

:func:`context_window` answers from :data:`CONTEXT_WINDOWS`, a table of the windows the
providers document (input plus output, in tokens), so ``max_context_size`` can be left out
when the model is named (OwliaBot's ``getContextWindow``, seed 003). Names match
conservatively: exactly, or after removing a provider prefix (``openai/gpt-4o``,
``meta-llama/Llama-3.3-70B-Instruct``, Bedrock's ``us.anthropic.``), a routing variant
(OpenRouter's ``:free``), and then a dated or versioned snapshot suffix
(``claude-sonnet-4-5-20250929``, ``gpt-4o-2024-08-06``, ``mistral-large-2411``,
``claude-3-5-sonnet-v2@20241022``). Anything else is unknown (``None``): a guessed window is
worse than none. Local runtimes' tags (``llama3.1:8b`` in Ollama) are unknown on purpose:
their window is whatever the server was started with.

:func:`parse_context_error` reads the window from a provider's context-too-long error, for a
proxy that compacts and retries: the model's real window wins over any table;
:func:`says_context_too_long` tells such an error by its wording (the one list of markers the
LLM adapters and the proxy share).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..exceptions import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "CONTEXT_TOO_LONG_MARKERS",
    "CONTEXT_WINDOWS",
    "context_window",
    "parse_context_error",
    "says_context_too_long",
]

_128K = 128_000
_131K = 131_072
_200K = 200_000
_1M = 1_048_576

CONTEXT_WINDOWS: dict[str, int] = {
    # -- OpenAI: https://platform.openai.com/docs/models (each model's page, "Context window")
    "gpt-5.1": 400_000,
    "gpt-5.1-codex": 400_000,
    "gpt-5.1-chat-latest": _128K,
    "gpt-5": 400_000,
    "gpt-5-pro": 400_000,
    "gpt-5-mini": 400_000,
    "gpt-5-nano": 400_000,
    "gpt-5-codex": 400_000,
    "gpt-5-chat-latest": _128K,
    "gpt-4.1": 1_047_576,
    "gpt-4.1-mini": 1_047_576,
    "gpt-4.1-nano": 1_047_576,
    "gpt-4o": _128K,
    "gpt-4o-mini": _128K,
    "chatgpt-4o-latest": _128K,
    "gpt-4.5-preview": _128K,
    "gpt-4-turbo": _128K,
    "gpt-4-turbo-preview": _128K,
    "gpt-4-0125-preview": _128K,
    "gpt-4-1106-preview": _128K,
    "gpt-4": 8_192,
    "gpt-4-32k": 32_768,
    "gpt-3.5-turbo": 16_385,
    "gpt-3.5-turbo-16k": 16_385,
    "gpt-3.5-turbo-0613": 4_096,  # older snapshots had the 4k window
    "gpt-3.5-turbo-0301": 4_096,
    "o1": _200K,
    "o1-pro": _200K,
    "o1-mini": _128K,
    "o1-preview": _128K,
    "o3": _200K,
    "o3-pro": _200K,
    "o3-mini": _200K,
    "o3-deep-research": _200K,
    "o4-mini": _200K,
    "o4-mini-deep-research": _200K,
    "codex-mini-latest": _200K,
    "gpt-oss-120b": _131K,  # https://huggingface.co/openai/gpt-oss-120b (config.json)
    "gpt-oss-20b": _131K,
    # -- Anthropic: https://docs.anthropic.com/en/docs/about-claude/models/overview
    # ("Context window: 200K"; Sonnet 4 and 4.5 reach 1M only with a beta header).
    "claude-opus-4-5": _200K,
    "claude-sonnet-4-5": _200K,
    "claude-haiku-4-5": _200K,
    "claude-opus-4-1": _200K,
    "claude-opus-4": _200K,
    "claude-opus-4-0": _200K,
    "claude-sonnet-4": _200K,
    "claude-sonnet-4-0": _200K,
    "claude-3-7-sonnet": _200K,
    "claude-3-5-sonnet": _200K,
    "claude-3-5-haiku": _200K,
    "claude-3-opus": _200K,
    "claude-3-sonnet": _200K,
    "claude-3-haiku": _200K,
    # -- Google: https://ai.google.dev/gemini-api/docs/models ("Input token limit")
    "gemini-3-pro-preview": _1M,
    "gemini-2.5-pro": _1M,
    "gemini-2.5-flash": _1M,
    "gemini-2.5-flash-lite": _1M,
    "gemini-2.0-flash": _1M,
    "gemini-2.0-flash-lite": _1M,
    "gemini-1.5-pro": 2_097_152,
    "gemini-1.5-flash": _1M,
    "gemini-1.5-flash-8b": _1M,
    # Gemma 3: https://ai.google.dev/gemma/docs/core ("128K context window"; 1B: 32K)
    "gemma-3-27b-it": _131K,
    "gemma-3-12b-it": _131K,
    "gemma-3-4b-it": _131K,
    "gemma-3-1b-it": 32_768,
    # -- Mistral: https://docs.mistral.ai/getting-started/models/models_overview/
    "mistral-large": _131K,
    "mistral-medium": _131K,
    "mistral-small": _131K,
    "mistral-small-2501": 32_768,  # Small 3.0 had 32k; 3.1 and later 128k
    "mistral-small-2409": 32_768,
    "codestral": 262_144,
    "codestral-2405": 32_768,
    "devstral-small": _131K,
    "devstral-medium": _131K,
    "magistral-medium": 40_000,  # 1.0/1.1; the 2509 snapshots below have 128k
    "magistral-small": 40_000,
    "magistral-medium-2509": _131K,
    "magistral-small-2509": _131K,
    "ministral-8b": _131K,
    "ministral-3b": _131K,
    "pixtral-large": _131K,
    "pixtral-12b": _131K,
    "open-mistral-nemo": _131K,
    "mistral-nemo": _131K,
    # Open weights, https://huggingface.co/mistralai (each card's context length)
    "mistral-7b-instruct-v0.3": 32_768,
    "mixtral-8x7b-instruct-v0.1": 32_768,
    "mixtral-8x22b-instruct-v0.1": 65_536,
    "mistral-nemo-instruct-2407": _131K,
    "mistral-small-24b-instruct-2501": 32_768,
    "mistral-small-3.1-24b-instruct-2503": _131K,
    "mistral-small-3.2-24b-instruct-2506": _131K,
    "mistral-large-instruct-2411": _131K,
    # -- Qwen: https://www.alibabacloud.com/help/en/model-studio/models (API) and
    # https://huggingface.co/Qwen (open weights: the native length, without YaRN scaling)
    "qwen3-max": 262_144,
    "qwen3-coder-plus": _1M,
    "qwen-max": 32_768,
    "qwen-plus": _131K,
    "qwen3-235b-a22b-instruct-2507": 262_144,
    "qwen3-235b-a22b-thinking-2507": 262_144,
    "qwen3-30b-a3b-instruct-2507": 262_144,
    "qwen3-coder-480b-a35b-instruct": 262_144,
    "qwen3-coder-30b-a3b-instruct": 262_144,
    "qwen3-235b-a22b": 32_768,
    "qwen3-32b": 32_768,
    "qwen3-30b-a3b": 32_768,
    "qwen3-14b": 32_768,
    "qwen3-8b": 32_768,
    "qwq-32b": _131K,
    "qwen2.5-72b-instruct": 32_768,
    "qwen2.5-32b-instruct": 32_768,
    "qwen2.5-7b-instruct": 32_768,
    "qwen2.5-coder-32b-instruct": 32_768,
    # -- DeepSeek: https://api-docs.deepseek.com/quick_start/pricing ("Context length 128K")
    "deepseek-chat": _128K,
    "deepseek-reasoner": _128K,
    "deepseek-v3": _128K,  # https://huggingface.co/deepseek-ai (model cards)
    "deepseek-v3.1": _128K,
    "deepseek-v3.2-exp": _128K,
    "deepseek-r1": _128K,
    "deepseek-r1-distill-llama-70b": _131K,
    "deepseek-r1-distill-qwen-32b": _131K,
    # -- Llama: https://www.llama.com/docs/model-cards-and-prompt-formats/ and
    # https://huggingface.co/meta-llama (hosts often serve Llama 4 with far less: override)
    "llama-4-scout-17b-16e-instruct": 10_000_000,
    "llama-4-maverick-17b-128e-instruct": 1_000_000,
    "llama-3.3-70b-instruct": _131K,
    "llama-3.2-1b-instruct": _131K,
    "llama-3.2-3b-instruct": _131K,
    "llama-3.2-11b-vision-instruct": _131K,
    "llama-3.2-90b-vision-instruct": _131K,
    "llama-3.1-8b-instruct": _131K,
    "llama-3.1-70b-instruct": _131K,
    "llama-3.1-405b-instruct": _131K,
    "llama-3.1-8b": _131K,
    "llama-3.1-70b": _131K,
    "llama-3.1-405b": _131K,
    "llama-3-8b-instruct": 8_192,
    "llama-3-70b-instruct": 8_192,
}
"""Documented context windows (tokens), by model name as its provider spells it."""

# Routing variants that leave the model (and its window) as it is (OpenRouter).
_VARIANTS = (":free", ":beta", ":nitro", ":floor", ":thinking")
_REGION_PREFIX = re.compile(r"^(?:[a-z]{2,4}\.)?(?=anthropic\.)")  # Bedrock: us.anthropic.
_SNAPSHOT = re.compile(
    r"(?:@\d{8}"  # Vertex: claude-3-5-sonnet-v2@20241022
    r"|-v\d+(?::\d+)?"  # Bedrock and Vertex versions: -v2:0, -v2
    r"|-\d{4}-\d{2}-\d{2}"  # OpenAI: gpt-4o-2024-08-06
    r"|-\d{8}"  # Anthropic: claude-sonnet-4-5-20250929
    r"|-\d{3,4}"  # gpt-4-0613, mistral-large-2411, gemini-1.5-pro-002, qwen3-...-2507
    r"|-latest"
    r"|-preview-\d{2}-(?:\d{2}|\d{4})"  # gemini-2.5-pro-preview-05-06 / -09-2025
    r")$"
)
_DOTTED_VERSION = re.compile(r"(?<=\d)\.(?=\d)")


def _canonical(name: str) -> str:
    """Lower case, no provider prefix nor routing variant, ``3.5`` spelled ``3-5``."""
    key = name.strip().lower().rsplit("/", 1)[-1]
    key = _REGION_PREFIX.sub("", key).removeprefix("anthropic.")
    for variant in _VARIANTS:
        key = key.removesuffix(variant)
    key = _DOTTED_VERSION.sub("-", key)  # OpenRouter's claude-3.5-sonnet is claude-3-5-sonnet
    if key.startswith("meta-llama-"):  # Meta-Llama-3.1-8B-Instruct, the older repo names
        key = key.removeprefix("meta-")
    return key


_TABLE = {_canonical(name): tokens for name, tokens in CONTEXT_WINDOWS.items()}


def _lookup(table: Mapping[str, int], key: str) -> int | None:
    for _ in range(3):  # at most: a variant version, a date, a region-less name
        if key in table:
            return table[key]
        stripped = _SNAPSHOT.sub("", key)
        if stripped == key:
            return None
        key = stripped
    return table.get(key)


def context_window(model: str, *, overrides: Mapping[str, int] | None = None) -> int | None:
    """The context window of ``model`` in tokens, or ``None`` when it is not known.

    ``overrides`` (a ``[models]`` table in TOML: name -> tokens) is consulted first, with the
    same name matching, so a deployment's real window wins over the documented one.

    Raises:
        ConfigError: An override that is not a positive integer (key ``models.<name>``).

    Example:
        >>> context_window("anthropic/claude-sonnet-4-5-20250929")
        200000
        >>> context_window("my-finetune", overrides={"my-finetune": 32_768})
        32768
        >>> context_window("some-new-model") is None
        True
    """
    key = _canonical(model)
    if overrides:
        table: dict[str, int] = {}
        for name, tokens in overrides.items():
            if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens <= 0:
                raise ConfigError(
                    f"a context window must be a positive integer (tokens), got {tokens!r}",
                    key=f"models.{name}",
                )
            table[_canonical(name)] = tokens
        found = _lookup(table, key)
        if found is not None:
            return found
    return _lookup(_TABLE, key)


_NUMBER = r"(\d[\d,_]*)"
_CONTEXT_ERRORS = [
    # OpenAI, DeepSeek, vLLM: "This model's maximum context length is 128000 tokens."
    re.compile(r"maximum context length is " + _NUMBER + r" tokens", re.IGNORECASE),
    # Anthropic: "prompt is too long: 208310 tokens > 200000 maximum", and "input length and
    # `max_tokens` exceed context limit: 199000 + 21333 > 200000"
    # (``\d,*`` is ``\d[\d,]*`` ending where it must end: the same texts match, and a run of
    # n digits costs O(n), where ``\d[\d,]*`` restarted at every digit cost O(n^2).)
    re.compile(r"\d,* tokens? > " + _NUMBER + r" maximum", re.IGNORECASE),
    re.compile(r"exceed context limit: \d+ \+ \d+ > " + _NUMBER, re.IGNORECASE),
    # Gemini: "exceeds the maximum number of tokens allowed (1048576)"
    re.compile(r"maximum number of tokens allowed \(?" + _NUMBER, re.IGNORECASE),
    # Mistral: "too large for model with 32768 maximum context length"
    re.compile(r"too large for model with " + _NUMBER + r" maximum context length", re.I),
    # llama.cpp server: "exceeds the available context size (4096 tokens)"
    re.compile(r"available context size \(" + _NUMBER + r" tokens\)", re.IGNORECASE),
    # Hugging Face TGI: "`inputs` tokens + `max_new_tokens` must be <= 8192"
    re.compile(r"max_new_tokens`? must be <= " + _NUMBER, re.IGNORECASE),
]


def parse_context_error(message: str) -> int | None:
    """The context window an upstream context-too-long error states, or ``None``.

    Understands OpenAI's (and DeepSeek's, vLLM's) "maximum context length is N tokens",
    Anthropic's "N tokens > M maximum" and "X + Y > M", Gemini's "maximum number of tokens
    allowed (N)", Mistral's, llama.cpp's and TGI's wordings. A number outside 1 to 100
    million is not taken for a window.

    Example:
        >>> parse_context_error("prompt is too long: 208310 tokens > 200000 maximum")
        200000
        >>> parse_context_error("Please reduce the length of the messages.") is None
        True
    """
    if not isinstance(message, str):
        return None
    text = message[:10_000]  # an error body can be large; the sentence is near the start
    for pattern in _CONTEXT_ERRORS:
        match = pattern.search(text)
        if match is not None:
            value = int(re.sub(r"[,_]", "", match.group(1)))
            return value if 0 < value <= 100_000_000 else None
    return None


CONTEXT_TOO_LONG_MARKERS = (
    "context_length_exceeded",  # OpenAI's error code
    "maximum context length",  # OpenAI's, DeepSeek's and vLLM's wording
    "prompt is too long",  # Anthropic's
    "context window",  # OpenAI Responses' "exceeds the context window", llama.cpp's
    "too many tokens",  # several OpenAI-compatible servers
)
"""Wordings (lower case) of a context-too-long error that states no window. Status codes
decide first (413 is always too long, 429 never is); these are read only for a 4xx."""


def says_context_too_long(text: str) -> bool:
    """Whether a provider's error text says the request is over the model's window: one of
    :data:`CONTEXT_TOO_LONG_MARKERS`, or a wording :func:`parse_context_error` reads a window
    from.

    Example:
        >>> says_context_too_long('{"error": {"code": "context_length_exceeded"}}')
        True
        >>> says_context_too_long("input length and `max_tokens` exceed context limit: "
        ...                       "199000 + 21333 > 200000")
        True
        >>> says_context_too_long("bad tool schema")
        False
    """
    lowered = text.lower()
    return any(m in lowered for m in CONTEXT_TOO_LONG_MARKERS) or (
        parse_context_error(text) is not None
    )
