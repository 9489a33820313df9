"""The TOML configuration: validated pydantic models and :func:`load_config`.

Every table forbids unknown keys, so a typo is an error with its dotted path instead of a
setting that silently does nothing. Every default lives here, and ``config.example.toml``
documents each key. Errors are :class:`~ctxcompact.exceptions.ConfigError` naming the file
and the key; see :mod:`ctxcompact._config_errors` for how they are worded.
"""

from __future__ import annotations

import os
import re
import string
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator
from pydantic import field_validator as _field_validator

from ._config_errors import config_error, field_error
from ._loader import spec_problem
from .exceptions import ConfigError
from .strategies._shared import SCHEMA1_FIELDS, SCHEMA1_PLACEHOLDER

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

__all__ = [
    "AgentConfig",
    "CompactionConfig",
    "Config",
    "ContextGuardConfig",
    "LLMConfig",
    "ObservationMaskingConfig",
    "ProxyConfig",
    "Schema1Config",
    "TokenCountingConfig",
    "TruncationConfig",
    "load_config",
]

DEFAULT_STRATEGY = "ctxcompact.strategies:LLMSummary"
DEFAULT_KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

DEFAULT_RESERVED = 50_000


class _Table(BaseModel):
    # strict: TOML already has types, so "5000" for an integer is a mistake worth reporting.
    model_config = ConfigDict(extra="forbid", strict=True, validate_assignment=True)


class LLMConfig(_Table):
    """The model a strategy summarizes with (``[compaction.llm]``) or an agent runs on.

    The API key is never stored: :meth:`api_key` reads the environment variable named by
    ``api_key_env`` each time it is called, so it cannot leak through a repr, a log or an
    error message.

    Example:
        >>> LLMConfig(provider="anthropic", model="claude-sonnet-4-5").api_key_env
        'ANTHROPIC_API_KEY'
    """

    model_config = ConfigDict(hide_input_in_errors=True)

    provider: Literal["openai", "anthropic"]
    model: str = Field(min_length=1)
    base_url: str | None = None
    api_key_env: str | None = None
    timeout: float = Field(default=60.0, gt=0)
    max_retries: int = Field(default=2, ge=0, le=20)
    max_tokens: int | None = Field(default=None, ge=1)

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
    reserved_context_size: int = Field(default=DEFAULT_RESERVED, ge=0)
    trigger_ratio: float | None = Field(default=None, ge=0.5, le=0.99)
    min_progress: float = Field(default=0.1, ge=0.0, lt=1.0)
    max_failures: int = Field(default=3, ge=1)
    params: dict[str, object] = Field(default_factory=dict)
    llm: LLMConfig | None = None

    @_field_validator("strategy")
    @classmethod
    def _spec(cls, value: str) -> str:
        problem = spec_problem(value)
        if problem is not None:
            raise ValueError(f"{problem}, such as 'hiding-then-summary'")
        return value

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
                else f"it is not set, and the default is {DEFAULT_RESERVED}"
            )
            raise field_error(
                type(self),
                ("reserved_context_size",),
                f"must be below max_context_size ({maximum}); {got}, which would compact on "
                "every call; set reserved_context_size lower (or max_context_size higher)",
                reserved,
            )
        return self


class Schema1Config(_Table):
    """``[observation_masking.schema1]``: Schema 1 masking, applied to every request.

    Example:
        >>> Schema1Config().window_turns
        8
    """

    enabled: bool = False
    window_turns: int = Field(default=8, ge=1)
    keep_errors: bool = True
    keep_last_k_per_tool: int = Field(default=0, ge=0)
    placeholder_template: str = SCHEMA1_PLACEHOLDER
    batch_turns: int = Field(default=0, ge=0)
    clear_at_least: int = Field(default=0, ge=0)

    @_field_validator("placeholder_template")
    @classmethod
    def _template(cls, value: str) -> str:
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(value) if f is not None]
        except ValueError as exc:
            raise ValueError(f"is not a valid template ({exc}); write {{{{ for a brace") from None
        unknown = sorted({f for f in fields if f not in SCHEMA1_FIELDS})
        if unknown:
            raise ValueError(
                f"uses unknown field(s) {', '.join('{' + f + '}' for f in unknown)}; "
                f"known fields: {', '.join('{' + f + '}' for f in sorted(SCHEMA1_FIELDS))}"
            )
        try:
            value.format(tool_call_id="call_1", tool_name="ls", original_chars=1234)
        except (ValueError, KeyError, IndexError) as exc:
            raise ValueError(f"cannot be formatted: {exc}") from None
        return value


class ObservationMaskingConfig(_Table):
    """``[observation_masking]``: per-request observation masking schemes."""

    schema1: Schema1Config = Field(default_factory=Schema1Config)


class TruncationConfig(_Table):
    """``[tool_result_truncation]``: cut huge tool results to head + tail on every request.

    Example:
        >>> TruncationConfig().max_chars
        50000
    """

    enabled: bool = False
    max_chars: int = Field(default=50_000, ge=1)
    head_chars: int = Field(default=2_000, ge=0)
    tail_chars: int = Field(default=2_000, ge=0)

    @_field_validator("tail_chars")
    @classmethod
    def _fits(cls, value: int, info: Any) -> int:
        return _head_tail_fit(info.data, value, "max_chars")


def _head_tail_fit(data: dict[str, Any], tail: int, limit: str) -> int:
    """``tail`` when ``head_chars + tail`` is below the ``limit`` key's value (if both are set)."""
    head, maximum = data.get("head_chars"), data.get(limit)
    if head is not None and maximum is not None and head + tail >= maximum:
        raise ValueError(
            f"head_chars + tail_chars ({head} + {tail}) must be below {limit} ({maximum}), "
            "or a cut result would not be shorter"
        )
    return tail


class ContextGuardConfig(_Table):
    """``[context_guard]``: drop the oldest turns of every request that would not fit.

    The window is ``[compaction] max_context_size``; the budget is that minus
    ``reserve_tokens``. See :class:`~ctxcompact.strategies.ContextGuard`.

    Example:
        >>> ContextGuardConfig().reserve_tokens
        8192
    """

    enabled: bool = False
    reserve_tokens: int = Field(default=8192, ge=0)
    truncate_first: bool = True
    max_tool_result_chars: int = Field(default=50_000, ge=1)
    head_chars: int = Field(default=2_000, ge=0)
    # validate_default: the check must also run when only max_tool_result_chars is written.
    tail_chars: int = Field(default=2_000, ge=0, validate_default=True)

    @_field_validator("tail_chars")
    @classmethod
    def _fits(cls, value: int, info: Any) -> int:
        return _head_tail_fit(info.data, value, "max_tool_result_chars")


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

    max_steps: int = Field(default=50, ge=1)
    system_prompt: str | None = None
    llm: LLMConfig | None = None


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
    timeout: float = Field(default=600.0, gt=0)
    max_body_bytes: int = Field(default=33_554_432, ge=1)

    @_field_validator("openai_base_url", "anthropic_base_url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value


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

    @model_validator(mode="after")
    def _guard_fits(self) -> Config:
        maximum = self.compaction.max_context_size
        guard = self.context_guard
        if guard.enabled and maximum is not None and guard.reserve_tokens >= maximum:
            raise field_error(
                type(self),
                ("context_guard", "reserve_tokens"),
                f"must be below [compaction] max_context_size ({maximum}), got "
                f"{guard.reserve_tokens}: the guard would leave no room for the history",
                guard.reserve_tokens,
            )
        return self

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
        >>> load_config("config.example.toml").compaction.strategy  # doctest: +SKIP
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
