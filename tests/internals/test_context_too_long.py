"""One list of context-too-long wordings: the LLM adapters and the proxy's compact-and-retry
tell the same answers apart (they had drifted: 5 wordings in one, 3 in the other).

White-box: the proxy side is its private ``is_context_error``, asked directly with each
wording; the adapters are asked through the real SDK over HTTP."""

from __future__ import annotations

import json

import pytest

from ctxcompact import Message
from ctxcompact.exceptions import ContextTooLongError, LLMError, RateLimitError
from ctxcompact.llm.openai import OpenAIChatLLM
from ctxcompact.proxy._retry import is_context_error
from tests.helpers.llm_wire import FAKE_KEY, Wire, error_body

TOO_LONG = [
    "This model's maximum context length is 8192 tokens.",  # OpenAI, vLLM
    "prompt is too long: 208310 tokens > 200000 maximum",  # Anthropic
    "Your input exceeds the context window of this model.",  # OpenAI Responses
    "too many tokens in the request",  # OpenAI-compatible servers
    "the request exceeds the available context size (4096 tokens)",  # llama.cpp
    "exceeds the maximum number of tokens allowed (1048576)",  # Gemini
]
NOT_TOO_LONG = ["bad temperature", "Invalid schema for function 'ls'"]


async def _adapter_error(status: int, message: str) -> LLMError:
    llm = OpenAIChatLLM(
        "gpt-test",
        api_key=FAKE_KEY,
        max_retries=0,
        http_client=Wire(error_body(status, message)).client(),
    )
    with pytest.raises(LLMError) as caught:
        await llm.complete([Message.user("hi")])
    return caught.value


@pytest.mark.parametrize("message", TOO_LONG)
async def test_the_adapters_and_the_proxy_agree_a_400_is_too_long(message: str) -> None:
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error"}})
    assert is_context_error(400, body)
    assert type(await _adapter_error(400, message)) is ContextTooLongError


@pytest.mark.parametrize("message", NOT_TOO_LONG)
async def test_the_adapters_and_the_proxy_agree_a_400_is_not_too_long(message: str) -> None:
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error"}})
    assert not is_context_error(400, body)
    assert type(await _adapter_error(400, message)) is LLMError


async def test_a_429_that_talks_about_tokens_is_a_rate_limit() -> None:
    error = await _adapter_error(429, "too many tokens per minute for the context window")
    assert type(error) is RateLimitError
    assert not is_context_error(429, "too many tokens per minute for the context window")
