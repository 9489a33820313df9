"""The TOML configuration: validated pydantic models and :func:`load_config`.

Every table forbids unknown keys, so a typo is an error with its dotted path instead of a
setting that silently does nothing. Every default lives here, and ``config.example.toml``
documents each key. Errors are :class:`~ctxcompact.exceptions.ConfigError` naming the file
and the key; see :mod:`ctxcompact._config.errors` for how they are worded.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator
from pydantic import field_validator as _field_validator

from .._defaults import (
    DEFAULT_BREAKER_COOLDOWN,
    DEFAULT_BREAKER_FAILURES,
    DEFAULT_MAX_FAILURES,
    DEFAULT_MAX_STEPS,
    DEFAULT_MIN_PROGRESS,
    DEFAULT_PRECOMPUTE_RATIO,
    DEFAULT_RESERVED_CONTEXT_SIZE,
    MAX_RECALL_ROUNDS,
    TRIGGER_RATIO_RANGE,
)
from .._plugins.loader import params_problem, spec_problem
from .._tokens.pricing import PRICING, REWRITE_PRICING, Pricing, provider
from .._tokens.windows import context_window
from ..exceptions import ConfigError
from ..kit import PinRules
from ..strategies._guard import ContextGuard
from ..strategies._schema1 import Schema1Masking
from ..strategies._truncation import ToolResultTruncation
from .errors import config_error, field_error
from .store import StoreConfig
from .tables import TransformTable, guard_window, transform_table

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

__all__ = [
    "AgentConfig",
    "CompactionConfig",
    "Config",
    "ContextGuardConfig",
    "FallbackConfig",
    "LLMConfig",
    "ObservationMaskingConfig",
    "PricingConfig",
    "ProxyConfig",
    "Schema1Config",
    "StoreConfig",
    "TokenCountingConfig",
    "TruncationConfig",
    "load_config",
]

DEFAULT_STRATEGY = "ctxcompact.strategies:LLMSummary"
DEFAULT_KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class _Table(BaseModel):
    # strict: TOML already has types, so "5000" for an integer is a mistake worth reporting.
    model_config = ConfigDict(extra="forbid", strict=True, validate_assignment=True)


class FallbackConfig(_Table):
    """One model of ``[compaction.llm] fallbacks``: every key of :class:`LLMConfig` but
    ``fallbacks`` (the chain is one flat list).

    The API key is never stored: :meth:`api_key` reads the environment variable named by
    ``api_key_env`` each time it is called, so it cannot leak through a repr, a log or an
    error message.

    Example:
        >>> FallbackConfig(provider="anthropic", model="claude-haiku-4-5").api_key_env
        'ANTHROPIC_API_KEY'
    """

    model_config = ConfigDict(hide_input_in_errors=True)

    provider: Literal["openai", "anthropic"]
    model: str = Field(min_length=1)
    base_url: str | None = None
    api_key_env: str | None = None
    timeout: float = Field(default=60.0, gt=0, allow_inf_nan=False)
    max_retries: int = Field(default=2, ge=0, le=20)
    max_tokens: int | None = Field(default=None, ge=1)
    context_window: int | None = Field(default=None, ge=256)
    """This model's own window in tokens; bounds a summarizer's request and its answer
    (``None``: the model table's window for ``model``, see :func:`ctxcompact.context_window`)."""
    breaker_failures: int = Field(default=DEFAULT_BREAKER_FAILURES, ge=0)
    """Consecutive failed summarizer calls (each after its retries) that open its circuit
    breaker (:class:`~ctxcompact.llm.CircuitBreakerLLM`); ``0``: no breaker. Only
    ``[compaction.llm]`` has a breaker."""
    breaker_cooldown: float = Field(default=DEFAULT_BREAKER_COOLDOWN, gt=0)
    """Seconds an open breaker refuses summarizer calls at once before one probe goes."""

    @model_validator(mode="before")
    @classmethod
    def _default_key_env(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("api_key_env") is None:
            env = DEFAULT_KEY_ENV.get(str(data.get("provider")))
            if env is not None:
                data = {**data, "api_key_env": env}
        return data

    @_field_validator("api_key_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        if value is not None and not _ENV_NAME.fullmatch(value):
            # Never echo the value: it may be the key itself, pasted in the wrong place.
            raise ValueError(
                "must be the NAME of an environment variable (letters, digits, _), "
                "not the API key itself"
            )
        return value

    @_field_validator("base_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value

    def api_key(self) -> str | None:
        """The API key from the environment, or ``None`` when the variable is unset or empty."""
        if not self.api_key_env:
            return None
        return os.environ.get(self.api_key_env) or None


class LLMConfig(FallbackConfig):
    """The model a strategy summarizes with (``[compaction.llm]``) or an agent runs on.

    The API key is never stored: :meth:`api_key` reads the environment variable named by
    ``api_key_env`` each time it is called, so it cannot leak through a repr, a log or an
    error message.

    Example:
        >>> LLMConfig(provider="anthropic", model="claude-sonnet-4-5").api_key_env
        'ANTHROPIC_API_KEY'
    """

    fallbacks: list[FallbackConfig] = Field(default_factory=list)
    """``[compaction.llm]`` only: the models to summarize with, in order, when this one fails
    (:class:`~ctxcompact.llm.FallbackLLM`), each a table with the same keys but
    ``fallbacks``, each in its own circuit breaker. The summarizer's request is fitted to the
    smallest window among them."""


class CompactionConfig(_Table):
    """``[compaction]``: which strategy runs, and when (KLIP-13).

    Compaction fires when ``token_count + reserved_context_size >= max_context_size``, or,
    with ``trigger_ratio`` set, when ``token_count >= trigger_ratio * max_context_size``.

    Example:
        >>> CompactionConfig(max_context_size=128_000).reserved_context_size
        50000
    """

    strategy: str = DEFAULT_STRATEGY
    max_context_size: int | None = Field(default=None, ge=1)
    model: str | None = Field(default=None, min_length=1)
    reserved_context_size: int = Field(default=DEFAULT_RESERVED_CONTEXT_SIZE, ge=0)
    trigger_ratio: float | None = Field(
        default=None, ge=TRIGGER_RATIO_RANGE[0], le=TRIGGER_RATIO_RANGE[1]
    )
    max_messages: int | None = Field(default=None, ge=1)
    min_progress: float = Field(default=DEFAULT_MIN_PROGRESS, ge=0.0, lt=1.0)
    max_failures: int = Field(default=DEFAULT_MAX_FAILURES, ge=1)
    cache_ttl: float | None = Field(default=None, gt=0)
    cache_pricing: str | None = Field(default=None, min_length=1)
    precompute_ratio: float = Field(default=DEFAULT_PRECOMPUTE_RATIO, ge=0.0, lt=1.0)
    """Fraction of the trigger from which a summarizing strategy starts its summary in the
    background, once the next call may reach the trigger, to swap it in when the trigger
    fires (``0``: only at the trigger)."""
    pin_patterns: list[str] = Field(default_factory=list)
    """Messages whose text matches one of these (texts, or RE2 patterns) are pinned: never
    dropped or summarised away (:class:`ctxcompact.kit.PinRules`)."""
    params: dict[str, object] = Field(default_factory=dict)
    llm: LLMConfig | None = None

    @_field_validator("strategy")
    @classmethod
    def _spec(cls, value: str) -> str:
        problem = spec_problem(value)
        if problem is not None:
            raise ValueError(f"{problem}, such as 'hiding-then-summary'")
        return value

    @_field_validator("pin_patterns")
    @classmethod
    def _pins(cls, value: list[str]) -> list[str]:
        try:
            PinRules(value)
        except ConfigError as exc:
            raise ValueError(exc.message) from None
        return value

    @model_validator(mode="after")
    def _params_fit_the_strategy(self) -> CompactionConfig:
        problem = params_problem(self.strategy, self.params)
        if problem is not None:
            raise field_error(type(self), ("params",), problem, self.params)
        return self

    @model_validator(mode="after")
    def _reserve_below_max(self) -> CompactionConfig:
        maximum = self.max_context_size
        reserved = self.reserved_context_size
        if maximum is not None and reserved >= maximum:
            # Checked even when the key is not written: the default alone can break a small
            # window, and the error says so rather than blame a line the user never wrote.
            got = (
                f"got {reserved}"
                if "reserved_context_size" in self.model_fields_set
                else f"it is not set, and the default is {DEFAULT_RESERVED_CONTEXT_SIZE}"
            )
            raise field_error(
                type(self),
                ("reserved_context_size",),
                f"must be below max_context_size ({maximum}); {got}, which would compact on "
                "every call; set reserved_context_size lower (or max_context_size higher)",
                reserved,
            )
        return self


if TYPE_CHECKING:
    # Built at run time from the strategies' signatures; to the type checker they are the
    # common base (code reads them through params(), build() and enabled).
    Schema1Config = TransformTable
    TruncationConfig = TransformTable
    ContextGuardConfig = TransformTable
else:
    Schema1Config = transform_table(
        "Schema1Config",
        Schema1Masking,
        doc="``[observation_masking.schema1]``: Schema 1 masking, applied to every request. "
        "Keys: ``enabled`` and :class:`~ctxcompact.strategies.Schema1Masking`'s parameters.",
    )

    TruncationConfig = transform_table(
        "TruncationConfig",
        ToolResultTruncation,
        doc="``[tool_result_truncation]``: cut huge tool results to head + tail on every request. "
        "Keys: ``enabled`` and :class:`~ctxcompact.strategies.ToolResultTruncation`'s parameters.",
    )

    ContextGuardConfig = transform_table(
        "ContextGuardConfig",
        ContextGuard,
        fixed=frozenset({"context_window"}),
        doc="``[context_guard]``: drop the oldest turns of every request that would not fit. "
        "The window is ``[compaction] max_context_size``. Keys: ``enabled`` and "
        ":class:`~ctxcompact.strategies.ContextGuard`'s parameters but ``context_window``.",
    )


class ObservationMaskingConfig(_Table):
    """``[observation_masking]``: per-request observation masking schemes."""

    schema1: Schema1Config = Field(default_factory=Schema1Config)


class TokenCountingConfig(_Table):
    """``[token_counting]``: how tokens are estimated between provider usage reports.

    Example:
        >>> TokenCountingConfig().method
        'heuristic'
    """

    method: Literal["heuristic", "tiktoken"] = "heuristic"
    encoding: str = Field(default="cl100k_base", min_length=1)


class AgentConfig(_Table):
    """``[agent]``: the built-in agent loop."""

    max_steps: int = Field(default=DEFAULT_MAX_STEPS, ge=1)
    system_prompt: str | None = None
    llm: LLMConfig | None = None

    @model_validator(mode="after")
    def _no_fallbacks(self) -> AgentConfig:
        if self.llm is not None and self.llm.fallbacks:
            raise field_error(
                type(self),
                ("llm", "fallbacks"),
                "only the summarizer ([compaction.llm]) has fallbacks",
                "[...]",
            )
        return self


class ProxyConfig(_Table):
    """``[proxy]``: the OpenAI/Anthropic-compatible HTTP proxy.

    Example:
        >>> ProxyConfig().port
        8787
    """

    host: str = Field(default="127.0.0.1", min_length=1)
    port: int = Field(default=8787, ge=0, le=65535)
    openai_base_url: str = "https://api.openai.com/v1"
    anthropic_base_url: str = "https://api.anthropic.com"
    timeout: float = Field(default=600.0, gt=0, allow_inf_nan=False)
    max_body_bytes: int = Field(default=33_554_432, ge=1)
    keep_alive_timeout: int = Field(default=120, ge=1)
    """Seconds an idle client connection is kept open. Above the idle expiry of common HTTP
    client pools (httpx 5 s, Node's undici 4 s, aiohttp 15 s, Go and Rust's reqwest 90 s,
    .NET 60 s), so the client, not the proxy, closes an idle connection: a client that sends
    on a connection the server is closing at that moment gets a ``ReadError``."""
    max_recall_rounds: int = Field(default=MAX_RECALL_ROUNDS, ge=0)
    """Recall rounds the proxy answers per client request (``[store] recall``); then one
    closing round tells the model the budget is spent (0: only the closing round)."""

    @_field_validator("openai_base_url", "anthropic_base_url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value


class PricingConfig(_Table):
    """``[pricing.<name>]``: a provider's cache prices for replay, relative to its input price.

    Example:
        >>> PricingConfig(read=0.1, write=1.25, ttl_seconds=300).write
        1.25
    """

    read: float = Field(ge=0.0, le=1.0)
    write: float = Field(default=1.0, ge=1.0)
    ttl_seconds: float | None = Field(default=None, gt=0)
    min_tokens: int = Field(default=0, ge=0)


class Config(_Table):
    """The whole configuration file. Every table is optional.

    Attributes:
        path: The file it was loaded from (``None`` when built in code).

    Example:
        >>> config = Config.from_dict({"compaction": {"max_context_size": 128_000}})
        >>> config.compaction.strategy, config.observation_masking.schema1.enabled
        ('ctxcompact.strategies:LLMSummary', False)
    """

    compaction: CompactionConfig = Field(default_factory=CompactionConfig)
    observation_masking: ObservationMaskingConfig = Field(default_factory=ObservationMaskingConfig)
    tool_result_truncation: TruncationConfig = Field(default_factory=TruncationConfig)
    context_guard: ContextGuardConfig = Field(default_factory=ContextGuardConfig)
    token_counting: TokenCountingConfig = Field(default_factory=TokenCountingConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    proxy: ProxyConfig = Field(default_factory=ProxyConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    pricing: dict[str, PricingConfig] = Field(default_factory=dict)
    models: dict[str, int] = Field(default_factory=dict)
    """``[models]``: context windows by model name (tokens), consulted before the built-in
    table of :func:`~ctxcompact.context_window`."""

    @_field_validator("models")
    @classmethod
    def _windows(cls, value: dict[str, int]) -> dict[str, int]:
        for name, tokens in value.items():
            if tokens <= 0:
                raise ValueError(f"{name!r}: a context window must be a positive integer (tokens)")
        return value

    @model_validator(mode="after")
    def _cache_pricing_exists(self) -> Config:
        name = self.compaction.cache_pricing
        if name is None or name == "off" or name in PRICING or name in self.pricing:
            return self
        choices = ", ".join(sorted({"off", *PRICING, *self.pricing}))
        message = f"no price table {name!r}; choose one of {choices} (or a [pricing.NAME] table)"
        raise field_error(type(self), ("compaction", "cache_pricing"), message, name)

    def cache_prices(self) -> Pricing | None:
        """The prices the controller weighs a rewrite at (``[compaction] cache_pricing``):
        ``None`` for ``"off"``, the default table when unset."""
        name = self.compaction.cache_pricing
        if name == "off":
            return None
        if name is None:
            return REWRITE_PRICING
        extra = {key: Pricing(key, **table.model_dump()) for key, table in self.pricing.items()}
        return provider(name, extra=extra)

    def model_window(self, model: object) -> int | None:
        """The window of ``model`` from ``[models]``, else the built-in table, else ``None``."""
        if not isinstance(model, str) or not model:
            return None
        return context_window(model, overrides=self.models)

    @model_validator(mode="after")
    def _transforms_build(self) -> Config:
        # Each table is built once here (enabled or not: a mistake in the file is one
        # either way), so the strategy's own checks (ranges, head + tail below the limit,
        # the placeholder template) run when the file loads, in one place: the
        # constructor. Errors name the table's key. The guard's budget depends on the
        # window, so it is only checked when the guard is on.
        window = self.compaction.max_context_size
        reserved = self.compaction.reserved_context_size
        tables: list[tuple[tuple[str, ...], TransformTable]] = [
            (("observation_masking", "schema1"), self.observation_masking.schema1),
            (("tool_result_truncation",), self.tool_result_truncation),
            (("context_guard",), self.context_guard),
        ]
        for where, table in tables:
            fixed = guard_window(table, window if table.enabled else None, reserved)
            try:
                table.check(**fixed)
            except ConfigError as exc:
                key = exc.key or "enabled"
                value = table.params().get(key, window)
                message = exc.message
                if where == ("context_guard",) and key == "context_window":
                    key, message = (
                        "reserve_tokens",
                        (
                            f"must be below [compaction] max_context_size ({window}): the guard "
                            f"would leave no room for the history ({exc.message})"
                        ),
                    )
                    value = table.params()["reserve_tokens"]
                raise field_error(type(self), (*where, key), message, value) from None
        return self

    def with_compaction(self, **changes: Any) -> Config:
        """A copy with ``[compaction]`` keys changed (validated as if written in the file).

        Raises:
            ConfigError: A changed value is invalid (named as ``compaction.key``).
        """
        data = self.model_dump(exclude_unset=True)
        data["compaction"] = {**data.get("compaction", {}), **changes}
        return Config.from_dict(data, path=self.path)

    # Private, so that a `path = ...` line in the file is an unknown key, not a setting.
    _path: Path | None = PrivateAttr(default=None)

    @property
    def path(self) -> Path | None:
        """The file this configuration was loaded from."""
        return self._path

    @classmethod
    def from_dict(cls, data: object, *, path: str | os.PathLike[str] | None = None) -> Config:
        """Validate a parsed TOML document (a mapping), raising :class:`ConfigError`."""
        where = None if path is None else str(path)
        if not isinstance(data, dict):
            raise ConfigError(
                f"expected a table of settings, got {type(data).__name__}", path=where
            )
        try:
            config = cls.model_validate(data)
        except ValidationError as exc:
            # `from None`: pydantic's own message may echo values (an API key put in the
            # wrong place); ours never does for the llm tables.
            raise config_error(exc, cls, path=where) from None
        config._path = None if path is None else Path(path)
        return config


def load_config(path: str | os.PathLike[str]) -> Config:
    """Read and validate a TOML configuration file.

    Args:
        path: The ``.toml`` file.

    Returns:
        The validated configuration; ``config.path`` is ``path``.

    Raises:
        ConfigError: The file is missing or unreadable, is not valid TOML (line and column
            given), has an unknown key (with a suggestion) or a value out of range (with
            the allowed range).

    Example:
        >>> load_config("config.example.toml").compaction.strategy
        'hiding-then-summary'
    """
    where = str(path)
    try:
        with open(path, "rb") as file:
            data = tomllib.load(file)
    except FileNotFoundError:
        raise ConfigError("file not found", path=where) from None
    except IsADirectoryError:
        raise ConfigError("is a directory, not a TOML file", path=where) from None
    except OSError as exc:
        raise ConfigError(f"cannot read the file: {exc.strerror or exc}", path=where) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text (byte {exc.start})", path=where) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(_syntax(exc), path=where) from None
    return Config.from_dict(data, path=path)


def _syntax(exc: ValueError) -> str:
    text = str(exc)
    line, column = getattr(exc, "lineno", None), getattr(exc, "colno", None)
    found = re.search(r"\(at line (\d+), column (\d+)\)$", text)
    if found:  # Python < 3.14 only puts the position in the message
        line, column = int(found[1]), int(found[2])
        text = text[: found.start()].rstrip()
    elif text.endswith("(at end of document)"):
        return (
            f"invalid TOML at the end of the file: {text[: -len('(at end of document)')].strip()}"
        )
    if line is not None:
        return f"invalid TOML at line {line}, column {column}: {text}"
    return f"invalid TOML: {text}"
