"""LLM adapters over the official SDKs, and :func:`build_llm` for ``[compaction.llm]``.

* :class:`ctxcompact.llm.openai.OpenAIChatLLM`: OpenAI Chat Completions, and any compatible
  server through ``base_url`` (vLLM, llama.cpp, Ollama). Needs ``ctxcompact[openai]``.
* :class:`ctxcompact.llm.anthropic.AnthropicLLM`: Anthropic Messages. Needs
  ``ctxcompact[anthropic]``.
* :class:`CircuitBreakerLLM`: wraps any model so that an outage is paid once: after failed
  calls it refuses calls at once for a cool-down, then lets one probe through.
* :class:`FallbackLLM`: a chain of models tried in turn (``[compaction.llm] fallbacks``).

Importing :mod:`ctxcompact.llm` imports neither SDK; each adapter module imports its own and
raises :class:`~ctxcompact.exceptions.MissingDependencyError` with the ``pip install`` line
when it is missing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Protocol

from ..exceptions import AuthenticationError, ConfigError
from ._breaker import BreakerStats, CircuitBreakerLLM, LLMOutages, watch_outages
from ._fallback import FallbackLLM
from ._retry import RetryCallback, RetryEvent

if TYPE_CHECKING:
    import httpx2

    from .._contract.protocols import LLM
    from .anthropic import AnthropicLLM
    from .openai import OpenAIChatLLM

__all__ = [
    "LOCAL_PLACEHOLDER_KEY",
    "AnthropicLLM",
    "BreakerStats",
    "CircuitBreakerLLM",
    "FallbackLLM",
    "LLMOutages",
    "LLMSettings",
    "OpenAIChatLLM",
    "RetryEvent",
    "build_llm",
    "watch_outages",
]

LOCAL_PLACEHOLDER_KEY = "ctxcompact-no-key"
"""Sent as the key to a ``base_url`` server when the key variable is unset (local servers
without authentication ignore it; the SDKs refuse to send no key at all)."""

_ADAPTERS = {
    "OpenAIChatLLM": ".openai",
    "AnthropicLLM": ".anthropic",
}


_DEFAULT_KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}


class LLMSettings(Protocol):
    """What :func:`build_llm` reads: an ``[compaction.llm]`` / ``[agent.llm]`` table
    (``ctxcompact.LLMConfig``) has it. A Protocol, so the adapters' layer does not import the
    configuration's (the configuration sits above it)."""

    @property
    def provider(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def base_url(self) -> str | None: ...
    @property
    def api_key_env(self) -> str | None: ...
    @property
    def timeout(self) -> float: ...
    @property
    def max_retries(self) -> int: ...
    @property
    def max_tokens(self) -> int | None: ...
    def api_key(self) -> str | None:
        """The API key, read from the environment when called."""
        ...


def build_llm(
    llm_config: LLMSettings,
    *,
    on_retry: RetryCallback | None = None,
    http_client: httpx2.AsyncClient | None = None,
) -> LLM:
    """The adapter ``[compaction.llm]`` (or ``[agent.llm]``) describes.

    The API key is read from the environment variable the config names (``api_key_env``,
    default ``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY``), never from the file.

    Args:
        llm_config: An ``LLMConfig`` (``provider``, ``model``, ``base_url``, ``api_key_env``,
            ``timeout``, ``max_retries``, ``max_tokens``): :class:`LLMSettings`.
        on_retry: Called for each retry the SDK makes.
        http_client: An ``httpx2.AsyncClient`` to send with (proxies, tests).

    Raises:
        MissingDependencyError: the provider's SDK is not installed.
        AuthenticationError: no key in the environment and no ``base_url``.
        ConfigError: an unknown provider.

    Example:
        >>> from ctxcompact._config.config import LLMConfig
        >>> cfg = LLMConfig(provider="openai", model="llama", base_url="http://127.0.0.1:8080/v1",
        ...     api_key_env="NO_SUCH_VAR")
        >>> build_llm(cfg)
        OpenAIChatLLM(model='llama', base_url='http://127.0.0.1:8080/v1/')
    """
    provider = llm_config.provider
    if provider not in _DEFAULT_KEY_ENV:
        raise ConfigError(
            f"unknown provider {provider!r}; choose 'openai' or 'anthropic'",
            key="compaction.llm.provider",
        )
    key = llm_config.api_key()
    if not key:
        if llm_config.base_url is None:
            env = llm_config.api_key_env or _DEFAULT_KEY_ENV[provider]
            raise AuthenticationError(
                f"{provider}: no API key: set the environment variable {env} "
                "(or api_key_env in [compaction.llm] to the variable that holds it)"
            )
        key = LOCAL_PLACEHOLDER_KEY
    common: dict[str, Any] = {
        "api_key": key,
        "base_url": llm_config.base_url,
        "timeout": llm_config.timeout,
        "max_retries": llm_config.max_retries,
        "max_tokens": llm_config.max_tokens,
        "on_retry": on_retry,
        "http_client": http_client,
    }
    if provider == "openai":
        from .openai import OpenAIChatLLM

        return OpenAIChatLLM(llm_config.model, **common)
    from .anthropic import AnthropicLLM

    return AnthropicLLM(llm_config.model, **common)


def __getattr__(name: str) -> Any:
    module = _ADAPTERS.get(name)
    if module is None:
        raise AttributeError(f"module 'ctxcompact.llm' has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)


def __dir__() -> list[str]:
    return __all__
