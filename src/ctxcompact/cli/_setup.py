"""Turning command-line flags (and an optional config file) into a controller factory."""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._config.config import Config, load_config
from .._defaults import REPLAY_MAX_CONTEXT_SIZE, REPLAY_RESERVED_CONTEXT_SIZE
from .._wiring import Wiring, build_counter, build_summarizer, configured_window, wire
from ..exceptions import ConfigError, StrategyLoadError
from ..replay import MemoCounter, MeteredLLM
from ._io import CliError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib  # type: ignore[no-redef,import-not-found,unused-ignore]

if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping, Sequence

    from .._controller.controller import CompactionController

__all__ = ["DEFAULT_STRATEGY", "Setup", "build_setup", "parse_params"]

DEFAULT_STRATEGY = "tool-result-hiding"
"""What ``ctxcompact replay`` runs when neither ``--strategy`` nor ``--config`` is given."""


def parse_params(items: Sequence[str]) -> dict[str, Any]:
    """``key=value`` pairs; a value is a TOML or JSON literal when it parses as one, else text.

    Example:
        >>> parse_params(["preserve_recent_n=3", "placeholder=[hidden]", "keep_errors=true"])
        {'preserve_recent_n': 3, 'placeholder': '[hidden]', 'keep_errors': True}
    """
    params: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise CliError(f"--param {item!r}: expected key=value")
        params[key] = _literal(raw.strip())
    return params


def _literal(raw: str) -> Any:
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        pass
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


@dataclass(frozen=True, slots=True)
class Setup:
    """Everything a command needs to compact: a fresh controller per conversation.

    Attributes:
        label: How the strategy is named in reports (the spec as given).
        wiring: The parts :func:`~ctxcompact.wire` built from the configuration with the
            command line's overrides, one controller per conversation.
        counter: The token counter, shared by the controller and the cost model.
        counter_name: ``heuristic`` or ``tiktoken``.
        llm: The metered summarizer, when one is configured.
    """

    label: str
    wiring: Wiring
    counter: MemoCounter
    counter_name: str
    llm: MeteredLLM | None

    @property
    def config(self) -> Config:
        """The configuration with the command line's overrides applied."""
        return self.wiring.config

    @property
    def max_context_size(self) -> int:
        """The window the controller triggers against."""
        size = self.wiring.max_context_size
        assert size is not None  # build_setup always sets it
        return size

    @property
    def reserved_context_size(self) -> int:
        """Tokens kept free below the window."""
        return self.wiring.reserved_context_size

    async def aclose(self) -> None:
        """Close the summarizer this setup built (its HTTP client), inside the event loop."""
        close = getattr(self.llm.inner, "aclose", None) if self.llm is not None else None
        if close is not None:
            await close()

    def make_controller(self) -> CompactionController:
        """A new controller (and a new strategy object: strategies may keep state).

        It gets a fresh in-memory store (none with ``--no-store`` or ``[store] enabled =
        false``): a replay measures what recall gives and never writes the configured
        store's file.
        """
        return self.wiring.controller()


def build_setup(
    args: argparse.Namespace,
    *,
    spec: str | None,
    default_strategy: str | None,
    params: Sequence[str] = (),
    store: bool = True,
    config_file: str | None = None,
) -> Setup:
    """Read ``config_file`` (``--config``), the limits and the token counter for strategy
    ``spec``.

    ``spec`` (one ``--strategy``) overrides the config's strategy; ``params`` (the
    ``--param`` values given for it) override its params; ``--max-context-size`` and
    ``--reserved`` override its limits. The parts are built by :func:`~ctxcompact.wire`
    (which loads the strategy now, so a mistake fails before anything is read); the counter
    and the summarizer it is given are wire's own builders' with the replay's meters around
    them, so the strategy counts and summarizes through the meters. ``store=False`` (or
    ``--no-store``): no originals store, so the strategies' plain markers.
    """
    given: Config | None = load_config(config_file) if config_file else None
    config = given if given is not None else Config()
    if not store or getattr(args, "no_store", False):
        config = config.model_copy(update={"store": config.store.disabled()})
    config = _with_llm_flags(args, config)
    cli_params = parse_params(params)
    counter_name = args.token_counter or config.token_counting.method
    if counter_name not in ("heuristic", "tiktoken"):
        raise CliError(f"unknown token counter {counter_name!r}: use heuristic or tiktoken")
    settings = config.token_counting.model_copy(update={"method": counter_name})
    counter = MemoCounter(build_counter(config.model_copy(update={"token_counting": settings})))
    # No circuit breaker around a replay's summarizer: every failure is measured.
    summarizer = config.compaction.llm
    llm = (
        MeteredLLM(build_summarizer(summarizer, config.models, breakers=False), counter)
        if summarizer is not None
        else None
    )
    max_size, reserved = _limits(args, given)
    if spec is None and given is not None:
        spec = config.compaction.strategy
        strategy_params = {**config.compaction.params, **cli_params}
    elif spec is None:
        if default_strategy is None:
            raise CliError("give a strategy: --strategy SPEC or --config FILE")
        spec, strategy_params = default_strategy, cli_params
    else:
        strategy_params = cli_params
    file_params = {k: v for k, v in strategy_params.items() if k not in cli_params}
    limits = {"max_context_size": max_size, "reserved_context_size": reserved}
    try:
        config = config.with_compaction(strategy=spec, params=strategy_params, **limits)
        wiring = wire(config, llm=llm, token_counter=counter, per_conversation=True)
    except (ConfigError, StrategyLoadError) as exc:
        blamed = (
            _param_error(exc, cli_params)
            if cli_params and _params_fit(config, spec, file_params, limits)
            else None
        )
        if blamed is not None:
            raise blamed from None
        raise
    return Setup(spec, wiring, counter, counter_name, llm)


def _params_fit(
    config: Config, spec: str, params: Mapping[str, object], limits: Mapping[str, int]
) -> bool:
    """Whether the strategy takes ``params`` (the config file's, without ``--param``)."""
    try:
        config.with_compaction(strategy=spec, params=dict(params), **limits)
    except (ConfigError, StrategyLoadError):
        return False
    return True


def _param_error(
    exc: ConfigError | StrategyLoadError, cli_params: Mapping[str, object]
) -> CliError | None:
    """The error in the command line's words, once the file's own params are known to be
    valid: a ``--param`` the strategy does not take or of the wrong type, or a value its
    constructor refused; ``None`` when the fault is elsewhere."""
    if isinstance(exc, ConfigError):
        if exc.key == "compaction.params":
            return CliError(f"--param: {exc.message}", flag="--param")
        return None
    cause = exc.__cause__
    if isinstance(cause, ConfigError) and cause.key in cli_params:
        return CliError(
            f"--param {cause.key}: {cause.message} (strategy {exc.spec!r})", flag="--param"
        )
    return None


def _with_llm_flags(args: argparse.Namespace, config: Config) -> Config:
    """``--llm-base-url`` / ``--llm-model`` (/ ``--llm-api-key-env``): an OpenAI-compatible
    summarizer that replaces the config's ``[compaction.llm]``; ``--llm-timeout`` and
    ``--llm-retries`` set its ``timeout`` and ``max_retries`` (or the config's summarizer's).

    Raises:
        CliError: A flag that needs a summarizer and none is given, or a value out of range.
    """
    url = getattr(args, "llm_base_url", None)
    model = getattr(args, "llm_model", None)
    key_env = getattr(args, "llm_api_key_env", None)
    window = getattr(args, "llm_context_window", None)
    limits = _llm_limits(args)
    if url is None and model is None:
        if key_env is not None or window is not None:
            flag = "--llm-api-key-env" if key_env is not None else "--llm-context-window"
            raise CliError(f"{flag} needs --llm-model (and usually --llm-base-url)")
        if not limits:
            return config
        if config.compaction.llm is None:
            flag = "--llm-timeout" if "timeout" in limits else "--llm-retries"
            raise CliError(
                f"{flag} needs a summarizer: --llm-base-url URL --llm-model NAME, or a "
                "[compaction.llm] table in --config FILE",
                flag=flag,
            )
        table = {**config.compaction.llm.model_dump(exclude_unset=True), **limits}
        return config.with_compaction(llm=table)
    if model is None:
        raise CliError("--llm-base-url needs --llm-model NAME (the summarizer's model)")
    table = {"provider": "openai", "model": model, "base_url": url, **limits}
    if key_env is not None:
        table["api_key_env"] = key_env
    if window is not None:
        table["context_window"] = window
    return config.with_compaction(llm=table)


def _llm_limits(args: argparse.Namespace) -> dict[str, Any]:
    """``--llm-timeout`` / ``--llm-retries`` as ``[compaction.llm]`` keys, checked."""
    limits: dict[str, Any] = {}
    timeout = getattr(args, "llm_timeout", None)
    retries = getattr(args, "llm_retries", None)
    if timeout is not None:
        if not (timeout > 0 and math.isfinite(timeout)):
            raise CliError(
                f"--llm-timeout must be a finite number of seconds > 0, got {timeout:g}",
                flag="--llm-timeout",
            )
        limits["timeout"] = float(timeout)
    if retries is not None:
        if not 0 <= retries <= 20:
            raise CliError(f"--llm-retries must be 0 to 20, got {retries}", flag="--llm-retries")
        limits["max_retries"] = retries
    return limits


def _limits(args: argparse.Namespace, config: Config | None) -> tuple[int, int]:
    configured_max = configured_window(config) if config is not None else None
    if args.max_context_size is not None:
        max_size: int = args.max_context_size
    else:
        max_size = configured_max if configured_max is not None else REPLAY_MAX_CONTEXT_SIZE
    if args.reserved is not None:
        reserved: int = args.reserved
    elif config is not None and (
        configured_max is not None or "reserved_context_size" in config.compaction.model_fields_set
    ):
        reserved = config.compaction.reserved_context_size
    else:
        # Without a configured window, the config's reserve (50,000 by default) is meant for
        # a real model and would exceed the replay default window.
        reserved = REPLAY_RESERVED_CONTEXT_SIZE
    if max_size <= 0 or reserved < 0:
        raise CliError("--max-context-size must be positive and --reserved not negative")
    if reserved >= max_size:
        raise CliError(f"--reserved ({reserved:,}) must be below --max-context-size ({max_size:,})")
    return max_size, reserved
