"""Turning command-line flags (and an optional config file) into a controller factory."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._io import CliError
from ._replay import MemoCounter, MeteredLLM

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib  # type: ignore[no-redef,import-not-found,unused-ignore]

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Mapping, Sequence

    from .._config import Config
    from .._contract import CompactionStrategy
    from .._controller import CompactionController
    from .._tokens import TokenCounter

__all__ = [
    "DEFAULT_MAX_CONTEXT_SIZE",
    "DEFAULT_RESERVED",
    "DEFAULT_STRATEGY",
    "Setup",
    "build_setup",
    "parse_params",
]

DEFAULT_STRATEGY = "tool-result-hiding"
"""What ``ctxcompact replay`` runs when neither ``--strategy`` nor ``--config`` is given."""

# Small on purpose: replays exist to show compaction happening. Compaction fires at 12,000
# tokens, which the demo (about 18,000 tokens at its end) and 13 of the 17 public traces pass.
DEFAULT_MAX_CONTEXT_SIZE = 16_000
DEFAULT_RESERVED = 4_000


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
        max_context_size: The window the controller triggers against.
        reserved_context_size: Tokens kept free.
        counter: The token counter, shared by the controller and the cost model.
        counter_name: ``heuristic`` or ``tiktoken``.
        llm: The metered summarizer, when one is configured.
        make_controller: Builds a new controller (and a new strategy object) each call.
    """

    label: str
    max_context_size: int
    reserved_context_size: int
    counter: MemoCounter
    counter_name: str
    llm: MeteredLLM | None
    make_controller: Callable[[], CompactionController]


def build_setup(
    args: argparse.Namespace, *, spec: str | None, default_strategy: str | None
) -> Setup:
    """Read ``--config``, ``--param``, the limits and the token counter for strategy ``spec``.

    ``spec`` (one ``--strategy``) overrides the config's strategy; ``--param`` values override
    its params; ``--max-context-size`` and ``--reserved`` override its limits.
    """
    from .._config import load_config
    from .._controller import CompactionController

    config: Config | None = load_config(args.config) if args.config else None
    cli_params = parse_params(args.param or ())
    counter_name = args.token_counter or (
        config.token_counting.method if config is not None else "heuristic"
    )
    counter = MemoCounter(_token_counter(counter_name, config))
    llm = _metered_llm(config, counter)

    max_size, reserved = _limits(args, config)
    params: Mapping[str, Any] = cli_params
    if spec is None and config is not None:
        spec = config.compaction.strategy
        params = {**config.compaction.params, **cli_params}
    elif spec is None:
        if default_strategy is None:
            raise CliError("give a strategy: --strategy SPEC or --config FILE")
        spec = default_strategy
    from .._contract import LLM
    from .._tokens import TokenCounter as TokenCounterProtocol

    # What the loader may inject by annotation, as CompactionController.from_config offers.
    dependencies: dict[type, object] = {TokenCounterProtocol: counter}
    if config is not None:
        dependencies[type(config)] = config
    if llm is not None:
        dependencies[LLM] = llm
    label: str = spec
    _load(label, dependencies, params)  # fail fast, before reading or replaying anything

    def make_controller() -> CompactionController:
        # A new strategy object per conversation: strategies may keep state between runs.
        strategy = _load(label, dependencies, params)
        if config is not None:
            return CompactionController.from_config(
                _with_limits(config, max_size, reserved),
                strategy=strategy,
                llm=llm,
                token_counter=counter,
            )
        return CompactionController(
            strategy,
            max_context_size=max_size,
            reserved_context_size=reserved,
            token_counter=counter,
            llm=llm,
        )

    return Setup(label, max_size, reserved, counter, counter_name, llm, make_controller)


def _load(
    spec: str, dependencies: Mapping[type, object], params: Mapping[str, Any]
) -> CompactionStrategy:
    from .._loader import load_strategy

    return load_strategy(spec, dependencies=dependencies, params=params)


def _limits(args: argparse.Namespace, config: Config | None) -> tuple[int, int]:
    configured_max = config.compaction.max_context_size if config is not None else None
    if args.max_context_size is not None:
        max_size: int = args.max_context_size
    else:
        max_size = configured_max if configured_max is not None else DEFAULT_MAX_CONTEXT_SIZE
    if args.reserved is not None:
        reserved: int = args.reserved
    elif config is not None and configured_max is not None:
        reserved = config.compaction.reserved_context_size
    else:
        # Without a configured window, the config's reserve (50,000 by default) is meant for
        # a real model and would exceed the replay default window.
        reserved = DEFAULT_RESERVED
    if max_size <= 0 or reserved < 0:
        raise CliError("--max-context-size must be positive and --reserved not negative")
    if reserved >= max_size:
        raise CliError(f"--reserved ({reserved:,}) must be below --max-context-size ({max_size:,})")
    return max_size, reserved


def _with_limits(config: Config, max_size: int, reserved: int) -> Config:
    compaction = config.compaction.model_copy(
        update={"max_context_size": max_size, "reserved_context_size": reserved}
    )
    return config.model_copy(update={"compaction": compaction})


def _token_counter(name: str, config: Config | None) -> TokenCounter:
    from .._tokens import HeuristicTokenCounter

    if name == "heuristic":
        return HeuristicTokenCounter()
    if name == "tiktoken":
        from .._tokens import TiktokenCounter

        encoding = config.token_counting.encoding if config is not None else "cl100k_base"
        return TiktokenCounter(encoding=encoding)
    raise CliError(f"unknown token counter {name!r}: use heuristic or tiktoken")


def _metered_llm(config: Config | None, counter: TokenCounter) -> MeteredLLM | None:
    if config is None or config.compaction.llm is None:
        return None
    from ..llm import build_llm

    return MeteredLLM(build_llm(config.compaction.llm), counter)
