"""context_window(model) and parse_context_error(message): the model table and the window an
upstream error states (issue 11, items 4 and 5)."""

from __future__ import annotations

import pytest

import ctxcompact
from ctxcompact import CONTEXT_WINDOWS, context_window, parse_context_error
from ctxcompact.exceptions import ConfigError


@pytest.mark.parametrize(
    ("model", "tokens"),
    [
        # exact names, one or more per provider
        ("gpt-4o", 128_000),
        ("gpt-4.1", 1_047_576),
        ("gpt-5", 400_000),
        ("o3-mini", 200_000),
        ("gpt-4", 8_192),
        ("claude-sonnet-4-5", 200_000),
        ("claude-3-5-haiku", 200_000),
        ("gemini-2.5-pro", 1_048_576),
        ("gemini-1.5-pro", 2_097_152),
        ("mistral-large", 131_072),
        ("codestral", 262_144),
        ("qwen3-max", 262_144),
        ("deepseek-chat", 128_000),
        ("llama-3.3-70b-instruct", 131_072),
        # dated and versioned snapshots
        ("claude-sonnet-4-5-20250929", 200_000),
        ("claude-3-5-sonnet-20241022", 200_000),
        ("claude-3-5-sonnet-latest", 200_000),
        ("gpt-4o-2024-08-06", 128_000),
        ("gpt-4o-mini-2024-07-18", 128_000),
        ("gpt-4-0613", 8_192),
        ("mistral-large-2411", 131_072),
        ("mistral-large-latest", 131_072),
        ("gemini-1.5-pro-002", 2_097_152),
        ("gemini-2.5-flash-preview-05-20", 1_048_576),
        ("deepseek-r1-0528", 128_000),
        # provider prefixes and hosts
        ("openai/gpt-4o", 128_000),
        ("anthropic/claude-3.5-sonnet", 200_000),  # OpenRouter spells versions with dots
        ("anthropic/claude-sonnet-4.5", 200_000),
        ("anthropic/claude-3.7-sonnet:thinking", 200_000),
        ("google/gemini-2.5-flash", 1_048_576),
        ("models/gemini-2.0-flash", 1_048_576),  # Gemini API resource name
        ("meta-llama/Llama-3.1-70B-Instruct", 131_072),
        ("meta-llama/Meta-Llama-3-8B-Instruct", 8_192),
        ("meta-llama/llama-3.3-70b-instruct:free", 131_072),
        ("Qwen/Qwen2.5-72B-Instruct", 32_768),
        ("mistralai/Mistral-7B-Instruct-v0.3", 32_768),
        ("deepseek-ai/DeepSeek-V3", 128_000),
        ("us.anthropic.claude-sonnet-4-20250514-v1:0", 200_000),  # Bedrock
        ("anthropic.claude-3-5-sonnet-20241022-v2:0", 200_000),
        ("claude-3-5-sonnet-v2@20241022", 200_000),  # Vertex
        # a snapshot listed apart wins over its family
        ("gpt-3.5-turbo-0613", 4_096),
        ("gpt-3.5-turbo-0125", 16_385),
        ("mistral-small-2501", 32_768),
        ("mistral-small-2503", 131_072),
    ],
)
def test_known_models(model: str, tokens: int) -> None:
    assert context_window(model) == tokens


@pytest.mark.parametrize(
    "model",
    [
        "",
        "some-new-model",
        "gpt-4o-audio-preview",  # a different model of the family: no prefix matching
        "claude",
        "gpt",
        "llama3.1:8b",  # Ollama: the window is the server's num_ctx, not the model's
        "qwen2.5:72b",
        "anthropic/claude-3.7-sonnet:extended",  # a variant with its own window
        "deepseek-v2",
        "mistral-large-99",
    ],
)
def test_unknown_models_are_none(model: str) -> None:
    assert context_window(model) is None


def test_every_provider_the_issue_names_is_in_the_table() -> None:
    names = " ".join(CONTEXT_WINDOWS)
    for family in ("gpt-", "claude-", "gemini-", "mistral-", "qwen", "deepseek-", "llama-"):
        assert family in names
    assert all(isinstance(v, int) and v >= 4_096 for v in CONTEXT_WINDOWS.values())


def test_overrides_extend_and_win_over_the_table() -> None:
    overrides = {"my-finetune": 32_768, "openai/gpt-4o": 64_000}
    assert context_window("my-finetune", overrides=overrides) == 32_768
    assert context_window("my-finetune-20250101", overrides=overrides) == 32_768
    assert context_window("gpt-4o-2024-08-06", overrides=overrides) == 64_000
    assert context_window("gpt-4.1", overrides=overrides) == 1_047_576  # table still used
    assert context_window("unknown", overrides=overrides) is None


@pytest.mark.parametrize("bad", [0, -5, 1.5, "128k", True, None])
def test_a_bad_override_names_its_key(bad: object) -> None:
    with pytest.raises(ConfigError) as info:
        context_window("x", overrides={"my-model": bad})  # type: ignore[dict-item]
    assert info.value.key == "models.my-model"
    assert "positive integer" in str(info.value)


@pytest.mark.parametrize(
    ("message", "tokens"),
    [
        (
            "This model's maximum context length is 128000 tokens. However, your messages "
            "resulted in 130211 tokens. Please reduce the length of the messages.",
            128_000,
        ),
        (
            "This model's maximum context length is 8192 tokens, however you requested 9000 "
            "tokens (8000 in your prompt; 1000 for the completion).",
            8_192,
        ),
        ("prompt is too long: 208310 tokens > 200000 maximum", 200_000),
        (
            '{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too '
            'long: 1000001 tokens > 1000000 maximum"}}',
            1_000_000,
        ),
        (
            "input length and `max_tokens` exceed context limit: 199000 + 21333 > 200000, "
            "decrease input length or `max_tokens` and try again",
            200_000,
        ),
        (
            "The input token count (1200000) exceeds the maximum number of tokens allowed "
            "(1048576).",
            1_048_576,
        ),
        (
            "Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768 "
            "maximum context length",
            32_768,
        ),
        ("request (5000 tokens) exceeds the available context size (4096 tokens)", 4_096),
        ("Input validation error: `inputs` tokens + `max_new_tokens` must be <= 8192.", 8_192),
        ("maximum context length is 131,072 tokens", 131_072),
    ],
)
def test_parse_context_error_reads_the_stated_window(message: str, tokens: int) -> None:
    assert parse_context_error(message) == tokens


@pytest.mark.parametrize(
    "message",
    [
        "",
        "Please reduce the length of the messages or completion.",
        "Your input exceeds the context window of this model.",
        "rate limit: 429 after 30000 tokens per minute",
        "maximum context length is 0 tokens",
        "maximum context length is 999999999999 tokens",
    ],
)
def test_parse_context_error_without_a_window_is_none(message: str) -> None:
    assert parse_context_error(message) is None


def test_both_are_exported_from_the_package() -> None:
    assert ctxcompact.context_window is context_window
    assert ctxcompact.parse_context_error is parse_context_error
    assert {"context_window", "parse_context_error"} <= set(ctxcompact.__all__)
