"""The composition root: the one place a configuration becomes working parts.

A :class:`~ctxcompact.Config`, or the path of a TOML file (plus what the caller overrides: a
strategy object, a model, a counter, limits), becomes a :class:`Wiring`: the token counter,
the model(s), the strategy loaded with its dependencies injected, the per-request transforms,
the store and the controller's limits. :meth:`Wiring.controller` turns those parts into a
:class:`~ctxcompact.CompactionController`, for the wired window or for another one.

:func:`wire` is a short sequence of builders, one per part (:func:`build_counter`,
:func:`build_models`, :func:`build_strategy`, :func:`build_transforms`, :func:`open_store`);
the command line composes two of them with its replay meters. Everything that builds from a
config goes through here: :meth:`CompactionController.from_config`, :meth:`Agent.from_config`,
the proxy, the CLI, replay and the benchmarks; none repeats it.

The controller (the engine, a layer below) imports nothing from here nor from the config:
:meth:`CompactionController.from_config` calls the builder this module hands it at import
(:func:`~ctxcompact._controller.controller.use_config_builder`). ``import ctxcompact`` always
imports this module, so the builder is in place before any user code runs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

from ._config.config import Config, load_config
from ._config.tables import guard_window
from ._contract.protocols import LLM, CompactionStrategy, Dependencies, needs_llm
from ._controller.controller import CompactionController, use_config_builder
from ._plugins.loader import load_strategy
from ._tokens.counters import TokenCounter, counter_from_config
from ._tokens.pricing import REWRITE_PRICING, Pricing
from ._tokens.windows import context_window
from .exceptions import ConfigError, LLMRequiredError, StoreError, UserError
from .llm import CircuitBreakerLLM, FallbackLLM, build_llm
from .llm._base import SDKAdapter
from .store._memory import DEFAULT_MEMORY_STORE_BYTES, MemoryStore
from .store._recall import DEFAULT_RECALL_TEMPLATE
from .store._redis import RedisStore
from .store._sqlite import SQLiteStore

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from pathlib import Path

    from ._config.config import FallbackConfig, LLMConfig
    from ._config.store import StoreConfig
    from ._config.tables import TransformTable
    from ._controller.controller import EventCallback
    from .store._records import OriginalsStore
    from .strategies._truncation import ToolResultTruncation

__all__ = [
    "ConfigSource",
    "Models",
    "Wiring",
    "as_config",
    "build_counter",
    "build_llm_with_window",
    "build_models",
    "build_strategy",
    "build_summarizer",
    "build_transforms",
    "configured_window",
    "offered_dependencies",
    "open_store",
    "require_llm",
    "transform_names",
    "wire",
]

ConfigSource: TypeAlias = Config | str | os.PathLike[str]
"""What every entry point that takes a configuration accepts: a loaded config or a path."""


@dataclass(frozen=True, slots=True)
class Wiring:
    """Everything a config describes, built and ready to hand to a controller or an agent.

    Attributes:
        config: The configuration the parts were built from (overrides applied).
        counter: The token counter (``[token_counting]``, or the one passed in).
        llm: The summarizer offered to the strategy (``None`` when there is none); one built
            from ``[compaction.llm]`` is inside its circuit breaker (:func:`build_summarizer`).
        agent_llm: The model an agent talks to (only with ``agent=True``).
        strategy: ``[compaction] strategy`` loaded with its params and dependencies.
        transforms: The enabled per-request transforms, in the order they apply, for
            ``max_context_size`` (none when there is no window: see
            :meth:`controller`, which builds them for the window it is given).
        max_context_size: The window the controller triggers against; ``None`` only when
            :func:`wire` was asked for ``per_model_windows`` and nothing names a window.
        reserved_context_size: Tokens kept free below the window.
        trigger_ratio: ``[compaction] trigger_ratio``.
        max_messages: ``[compaction] max_messages``.
        min_progress: ``[compaction] min_progress``.
        max_failures: ``[compaction] max_failures``.
        owned: Models built here (not passed in): their owner closes them.
        store: The originals store (``[store]``, or the one passed in), or ``None``.
        recall: Whether markers name their handles and the recall tool is offered wherever
            there is a store: unless ``[store] recall = false`` or ``enabled = false``.
        recall_placeholder: ``[store] recall_placeholder``, the recall placeholder template.
        owned_store: Whether ``store`` was built here (then its owner closes it).
        cache_ttl: ``[compaction] cache_ttl``.
        cache_pricing: ``[compaction] cache_pricing``, resolved (``None``: weighing off).
        precompute_ratio: ``[compaction] precompute_ratio``.
        per_conversation: Each :meth:`controller` serves one conversation: a strategy object
            and transforms of its own and, with no store here (unless ``[store] enabled =
            false``), an in-memory store of its own (the command line's replays).
        arrival_truncation: With ``agent=True``, ``[tool_result_truncation]`` as the cut an
            agent applies to each tool result on arrival (``None`` when the table is off).
        reload_strategy: Loads the configured strategy again (``None`` when the strategy
            object was passed in): what ``per_conversation`` uses.

    Example:
        >>> from ctxcompact import Config
        >>> config = Config.from_dict({"compaction": {"strategy": "tool-result-hiding",
        ...     "max_context_size": 32_000, "reserved_context_size": 4_000}})
        >>> wiring = wire(config)
        >>> narrower = wiring.controller(max_context_size=8_000)
        >>> type(wiring.strategy).__name__, narrower.max_context_size
        ('ToolResultHiding', 8000)
    """

    config: Config
    counter: TokenCounter
    llm: LLM | None
    agent_llm: LLM | None
    strategy: CompactionStrategy
    transforms: tuple[CompactionStrategy, ...]
    max_context_size: int | None
    reserved_context_size: int
    trigger_ratio: float | None
    max_messages: int | None
    min_progress: float
    max_failures: int
    owned: tuple[LLM, ...] = ()
    store: OriginalsStore | None = None
    recall: bool = False
    recall_placeholder: str = DEFAULT_RECALL_TEMPLATE
    owned_store: bool = False
    cache_ttl: float | None = None
    cache_pricing: Pricing | None = REWRITE_PRICING
    precompute_ratio: float | None = None
    per_conversation: bool = False
    arrival_truncation: ToolResultTruncation | None = None
    reload_strategy: Callable[[], CompactionStrategy] | None = field(
        default=None, repr=False, compare=False
    )

    def controller(
        self,
        *,
        on_event: EventCallback | None = None,
        max_context_size: int | None = None,
        reserved_context_size: int | None = None,
        controller_class: type[CompactionController] = CompactionController,
    ) -> CompactionController:
        """A controller from these parts.

        Args:
            on_event: Called with every :class:`~ctxcompact.CompactionEvent`.
            max_context_size: Another window than the wired one (the proxy's per-model
                windows); the transforms are built again for it, since the guard's budget
                is the window.
            reserved_context_size: Another reserve than the wired one.
            controller_class: What to build (a subclass of your own).

        Raises:
            ConfigError: No window here nor in the call, or transforms that do not fit the
                window given (named as ``table.key`` with the file).
        """
        size = self.max_context_size if max_context_size is None else max_context_size
        if size is None:
            raise ConfigError(_NO_WINDOW, path=_where(self.config), key=_WINDOW_KEY)
        transforms = self.transforms
        if size != self.max_context_size or self.per_conversation:
            # The guard's budget is the window; a conversation's transforms may keep state.
            transforms = tuple(build_transforms(self.config, size))
        strategy, store = self.strategy, self.store
        if self.per_conversation:
            if self.reload_strategy is not None:
                strategy = self.reload_strategy()
            if store is None and self.config.store.enabled is not False:
                store = MemoryStore(max_bytes=_memory_bytes(self.config.store))
        return controller_class(
            strategy,
            max_context_size=size,
            reserved_context_size=(
                self.reserved_context_size
                if reserved_context_size is None
                else reserved_context_size
            ),
            trigger_ratio=self.trigger_ratio,
            max_messages=self.max_messages,
            token_counter=self.counter,
            llm=self.llm,
            transforms=transforms,
            on_event=on_event,
            min_progress=self.min_progress,
            max_failures=self.max_failures,
            store=store,
            recall=self.recall and store is not None,
            recall_placeholder=(
                self.recall_placeholder if self.recall and store is not None else None
            ),
            cache_ttl=self.cache_ttl,
            cache_pricing=self.cache_pricing,
            precompute_ratio=self.precompute_ratio,
            pin_patterns=self.config.compaction.pin_patterns,
        )


def wire(
    config: ConfigSource,
    *,
    strategy: CompactionStrategy | None = None,
    llm: LLM | None = None,
    token_counter: TokenCounter | None = None,
    dependencies: Mapping[type, object] | None = None,
    max_context_size: int | None = None,
    reserved_context_size: int | None = None,
    agent: bool = False,
    store: OriginalsStore | None = None,
    build_store: bool = False,
    default_store: Path | None = None,
    per_model_windows: bool = False,
    per_conversation: bool = False,
) -> Wiring:
    """Build the parts ``config`` describes; each keyword overrides its part of the config.

    Args:
        config: A loaded (validated) configuration, or the path of a TOML file.
        strategy: Use this object instead of loading ``[compaction] strategy``.
        llm: The model: the summarizer, and with ``agent=True`` the agent's model. When not
            given it is built from ``[agent.llm]`` / ``[compaction.llm]``.
        token_counter: Use this counter instead of ``[token_counting]``'s.
        dependencies: More objects offered to the strategy's constructor, by type; they win
            over the built-in offers (counter, model, config).
        max_context_size: Overrides ``[compaction] max_context_size``.
        reserved_context_size: Overrides ``[compaction] reserved_context_size``.
        agent: Also pick the agent's model: ``llm``, else ``[agent.llm]``, else
            ``[compaction.llm]``. The summarizer is then ``[compaction.llm]`` when
            ``[agent.llm]`` is set too, else the agent's model.
        store: Use this originals store instead of building ``[store]``'s.
        build_store: Open the store ``[store]`` describes, a bounded in-memory one when it
            names none (a file is opened, so only callers that will use and close it ask:
            :meth:`Agent.from_config`, :meth:`CompactionController.from_config`, the proxy).
            Otherwise ``store`` is only ``store``.
        default_store: With ``build_store``, the SQLite file to open when ``[store]`` names
            none and does not say ``enabled = false`` (the proxy passes
            :func:`~ctxcompact.store.default_store_path`).
        per_model_windows: When nothing names a window, build without one instead of
            failing (``max_context_size`` is then ``None``): the caller gives each
            :meth:`Wiring.controller` its model's window (the proxy).
        per_conversation: Each :meth:`Wiring.controller` serves one conversation (its own
            strategy object and transforms, and unless ``[store] enabled = false`` its own
            in-memory store).

    Raises:
        ConfigError: No window anywhere, limits that do not fit, no model for an agent, a
            store file that cannot be opened (the error names the file and the key).
        StrategyLoadError: The strategy cannot be loaded.
        MissingDependencyError: A configured provider's SDK is not installed.
    """
    config = _with_limits(as_config(config), max_context_size, reserved_context_size)
    window = _window(config, required=not per_model_windows)
    counter = token_counter or build_counter(config)
    models = build_models(config, llm, agent=agent)

    def load() -> CompactionStrategy:
        return build_strategy(config, counter, models.summarizer, dependencies)

    if strategy is None:
        strategy, reload = load(), load
    else:
        reload = None
        if models.summarizer is None and not (dependencies and LLM in dependencies):
            require_llm(strategy, type(strategy).__name__, _where(config))
    transforms = () if window is None else tuple(build_transforms(config, window))
    table = config.store
    use_default = default_store is not None and table.enabled is not False
    opened = build_store and store is None and table.enabled is not False
    if opened:
        store = open_store(config, default=default_store if use_default else None)
    comp = config.compaction
    return Wiring(
        config=config,
        counter=counter,
        llm=models.summarizer,
        agent_llm=models.agent,
        strategy=strategy,
        transforms=transforms,
        max_context_size=window,
        reserved_context_size=comp.reserved_context_size,
        trigger_ratio=comp.trigger_ratio,
        max_messages=comp.max_messages,
        min_progress=comp.min_progress,
        max_failures=comp.max_failures,
        owned=models.owned,
        store=store,
        recall=config.store.recall_on,
        recall_placeholder=config.store.recall_placeholder,
        owned_store=opened,
        cache_ttl=comp.cache_ttl,
        cache_pricing=config.cache_prices(),
        precompute_ratio=comp.precompute_ratio,
        per_conversation=per_conversation,
        arrival_truncation=_arrival_truncation(config) if agent else None,
        reload_strategy=reload,
    )


# -- the configuration and its window -------------------------------------------------------

_WINDOW_KEY = "compaction.max_context_size"
_NO_WINDOW = (
    "required: set it in [compaction] (or name a known model in [compaction] model, "
    "or give its window in [models]) or pass max_context_size="
)


def as_config(source: object) -> Config:
    """``source`` itself when it is a :class:`~ctxcompact.Config`, else the TOML file it names.

    Raises:
        ConfigError: The file cannot be read or is not a valid configuration.
        UserError: ``source`` is neither a config nor a path.

    Example:
        >>> as_config(Config()) is not None
        True
    """
    if isinstance(source, Config):
        return source
    if isinstance(source, (str, os.PathLike)):
        return load_config(source)
    raise UserError(f"expected a Config or the path of a TOML file, got {type(source).__name__}")


def configured_window(config: Config) -> int | None:
    """The window ``config`` gives: ``[compaction] max_context_size``, else the window of
    ``[compaction] model`` (``[models]`` first, then :func:`~ctxcompact.context_window`'s
    table), else ``None``.

    Example:
        >>> configured_window(Config.from_dict({"compaction": {"model": "gpt-4",
        ...     "reserved_context_size": 1_000}}))
        8192
    """
    comp = config.compaction
    if comp.max_context_size is not None:
        return comp.max_context_size
    return config.model_window(comp.model)


def _window(config: Config, *, required: bool) -> int | None:
    comp = config.compaction
    size = configured_window(config)
    if comp.max_context_size is None and size is not None and comp.reserved_context_size >= size:
        raise ConfigError(
            f"the window of {comp.model!r} is {size} tokens, not above "
            f"reserved_context_size ({comp.reserved_context_size}): set it lower",
            path=_where(config),
            key="compaction.reserved_context_size",
        )
    if size is None and required:
        raise ConfigError(_NO_WINDOW, path=_where(config), key=_WINDOW_KEY)
    return size


def _with_limits(config: Config, max_size: int | None, reserved: int | None) -> Config:
    overrides: dict[str, Any] = {}
    if max_size is not None:
        overrides["max_context_size"] = max_size
    if reserved is not None:
        overrides["reserved_context_size"] = reserved
    return config.with_compaction(**overrides) if overrides else config


def _where(config: Config) -> str | None:
    return str(config.path) if config.path else None


# -- the parts --------------------------------------------------------------------------------


def build_counter(config: Config) -> TokenCounter:
    """The token counter ``[token_counting]`` describes."""
    return counter_from_config(config.token_counting)


@dataclass(frozen=True, slots=True)
class Models:
    """The models :func:`build_models` picked or built.

    Attributes:
        summarizer: The model offered to the strategy, or ``None``.
        agent: The model an agent talks to (only when asked for one).
        owned: The ones built here: their owner closes them.
    """

    summarizer: LLM | None
    agent: LLM | None = None
    owned: tuple[LLM, ...] = ()


def build_models(config: Config, llm: LLM | None = None, *, agent: bool = False) -> Models:
    """The summarizer and, with ``agent``, the agent's model (see :func:`wire`).

    Raises:
        ConfigError: ``agent`` and no model given nor configured (``agent.llm``).
    """
    comp = config.compaction
    if not agent:
        if llm is not None or comp.llm is None:
            return Models(llm)
        summarizer = build_summarizer(comp.llm, config.models)
        return Models(summarizer, owned=(summarizer,))
    owned: list[LLM] = []
    agent_llm = llm
    if agent_llm is None:
        agent_config = config.agent.llm or comp.llm
        if agent_config is None:
            raise ConfigError(
                "no model to talk to: add an [agent.llm] table (provider, model) or pass "
                "llm= to Agent.from_config",
                path=_where(config),
                key="agent.llm",
            )
        agent_llm = build_llm_with_window(agent_config, config.models)
        owned.append(agent_llm)
    summarizer = agent_llm
    if comp.llm is not None and config.agent.llm is not None:
        summarizer = build_summarizer(comp.llm, config.models)
        owned.append(summarizer)
    return Models(summarizer, agent_llm, tuple(owned))


def build_llm_with_window(
    llm_config: FallbackConfig, models: Mapping[str, int] | None = None
) -> LLM:
    """The adapter ``llm_config`` describes, stating its model's own window
    (:class:`~ctxcompact.WindowedLLM`): ``context_window`` when configured, else the
    model table's (:func:`ctxcompact.context_window`, with the ``[models]`` overrides), else
    unknown. A summarizer bounds its
    request and answer by it, not by the agent's window."""
    llm = build_llm(llm_config)
    if isinstance(llm, SDKAdapter):
        llm.context_window = llm_config.context_window or context_window(
            llm_config.model, overrides=models
        )
    return llm


def build_summarizer(
    llm_config: LLMConfig, models: Mapping[str, int] | None = None, *, breakers: bool = True
) -> LLM:
    """The summarizer ``[compaction.llm]`` describes: :func:`build_llm_with_window`'s model
    inside a :class:`~ctxcompact.llm.CircuitBreakerLLM` (``breaker_failures``,
    ``breaker_cooldown``; none when ``breaker_failures = 0``), and with ``fallbacks`` a
    :class:`~ctxcompact.llm.FallbackLLM` of it and each fallback, each in its own breaker.

    One breaker per model built: every controller, conversation and proxy request that the
    wiring serves shares it, so an outage is paid by the first calls only. ``breakers=False``
    builds none (a replay measures every failure)."""
    chain = [
        _summarizer_model(table, models, breaker=breakers)
        for table in (llm_config, *llm_config.fallbacks)
    ]
    return chain[0] if len(chain) == 1 else FallbackLLM(chain)


def _summarizer_model(
    llm_config: FallbackConfig, models: Mapping[str, int] | None, *, breaker: bool
) -> LLM:
    llm = build_llm_with_window(llm_config, models)
    if not breaker or llm_config.breaker_failures == 0:
        return llm
    return CircuitBreakerLLM(
        llm, failure_threshold=llm_config.breaker_failures, cooldown=llm_config.breaker_cooldown
    )


def build_strategy(
    config: Config,
    counter: TokenCounter,
    llm: LLM | None,
    dependencies: Mapping[type, object] | None = None,
) -> CompactionStrategy:
    """``[compaction] strategy`` loaded with ``[compaction.params]``, offered the counter,
    the model and the config (:func:`offered_dependencies`).

    Raises:
        StrategyLoadError: The strategy cannot be loaded.
        LLMRequiredError: It needs a model and none is offered.
    """
    comp = config.compaction
    offered = offered_dependencies(config, counter, llm, dependencies)
    strategy = load_strategy(comp.strategy, dependencies=offered, params=comp.params)
    if llm is None:
        require_llm(strategy, comp.strategy, _where(config))
    return strategy


def require_llm(strategy: object, spec: str, where: str | None = None) -> None:
    """Fail at setup when ``strategy`` needs an LLM (:class:`~ctxcompact.NeedsLLM`)
    and none is offered, rather than at its first compaction.

    Raises:
        LLMRequiredError: Naming the strategy (and the config file) and how to give it one.
    """
    if not needs_llm(strategy):
        return
    source = f" (config {where})" if where else ""
    raise LLMRequiredError(
        f"strategy {spec!r}{source} needs an LLM and none is configured: add a "
        "[compaction.llm] table (provider, model, base_url), pass llm=..., or on the command "
        "line give --llm-base-url URL --llm-model NAME"
    )


def offered_dependencies(
    config: Config,
    counter: TokenCounter,
    llm: LLM | None,
    extra: Mapping[type, object] | None = None,
) -> Dependencies:
    """What the loader may inject by annotation: the counter, the model, the config, and
    ``extra`` (which wins on a shared key)."""
    offered: dict[type, object] = {TokenCounter: counter, type(config): config}
    if llm is not None:
        offered[LLM] = llm
    offered.update(extra or {})
    return Dependencies(offered)


def build_transforms(config: Config, max_context_size: int) -> list[CompactionStrategy]:
    """The per-request transforms the config enables, in the order they apply.

    Schema 1 masking first, so a masked result's placeholder gives its original size; then
    truncation of what is still there in full; then the guard, which only drops what still
    does not fit. The guard's window is ``max_context_size`` and, unless the table sets
    ``reserve_tokens``, it keeps ``[compaction] reserved_context_size`` free: a request fits
    when the controller's threshold would not fire for it, one meaning of "fits" for the
    trigger, the guard and replay's calls over the window.

    Raises:
        ConfigError: A table's settings do not fit (named as ``table.key`` with the file).
    """
    transforms: list[CompactionStrategy] = []
    for key, table in _transform_tables(config):
        if not table.enabled:
            continue
        fixed = guard_window(table, max_context_size, config.compaction.reserved_context_size)
        try:
            transforms.append(table.build(**fixed))
        except ConfigError as exc:
            raise exc.located(path=_where(config), table=key) from None
    return transforms


def transform_names(config: Config) -> tuple[str, ...]:
    """The class names of the transforms ``config`` enables, in the order they apply (what
    the proxy names at start-up, before a request tells it a window).

    Example:
        >>> transform_names(Config.from_dict({"context_guard": {"enabled": True}}))
        ('ContextGuard',)
    """
    return tuple(t.strategy_class.__name__ for _, t in _transform_tables(config) if t.enabled)


def _transform_tables(config: Config) -> list[tuple[str, TransformTable]]:
    return [
        ("observation_masking.schema1", config.observation_masking.schema1),
        ("tool_result_truncation", config.tool_result_truncation),
        ("context_guard", config.context_guard),
    ]


def open_store(config: Config, *, default: Path | None = None) -> OriginalsStore | None:
    """The store ``[store]`` describes: a :class:`RedisStore` at ``url``, a
    :class:`MemoryStore` for ``path = ":memory:"``, a :class:`SQLiteStore` at ``path`` (``~``
    expanded, relative to the config file's folder), else at ``default`` when given, else a
    :class:`MemoryStore` (``None`` with ``enabled = false``).

    Raises:
        ConfigError: The file cannot be opened or was written by a newer ctxcompact (named as
            ``store.path`` with the config file), or Redis cannot be reached (``store.url``,
            the URL shown without its credentials).
        MissingDependencyError: ``url`` without the ``redis`` extra installed.
    """
    table = config.store
    if table.url is not None:
        try:
            return RedisStore(
                table.url, max_bytes=table.max_bytes, prefix=table.prefix, ttl=table.ttl
            )
        except StoreError as exc:  # its text shows the URL without credentials
            raise ConfigError(str(exc), path=_where(config), key="store.url") from exc
    if table.in_memory:
        return MemoryStore(max_bytes=_memory_bytes(table))
    if table.enabled is False:
        return None
    path = table.resolved_path(config.path) or default
    if path is None:
        return MemoryStore(max_bytes=_memory_bytes(table))
    try:
        return SQLiteStore(path, max_bytes=table.max_bytes)
    except StoreError as exc:
        raise ConfigError(str(exc), path=_where(config), key="store.path") from exc


def _arrival_truncation(config: Config) -> ToolResultTruncation | None:
    table = config.tool_result_truncation
    return table.build() if table.enabled else None


# -- CompactionController.from_config ---------------------------------------------------------


def _controller_from_config(
    cls: type[CompactionController],
    config: object,
    /,
    *,
    strategy: CompactionStrategy | None,
    llm: LLM | None,
    token_counter: TokenCounter | None,
    dependencies: Mapping[type, object] | None,
    on_event: EventCallback | None,
    max_context_size: int | None,
) -> CompactionController:
    wiring = wire(
        as_config(config),
        strategy=strategy,
        llm=llm,
        token_counter=token_counter,
        dependencies=dependencies,
        max_context_size=max_context_size,
        build_store=True,
    )
    return wiring.controller(on_event=on_event, controller_class=cls)


use_config_builder(_controller_from_config)


def _memory_bytes(table: StoreConfig) -> int:
    """An in-memory store's bound: ``[store] max_bytes`` when given, else the library's
    in-memory default (:data:`~ctxcompact.store.DEFAULT_MEMORY_STORE_BYTES`, what a controller
    built in Python gets), not the 256 MiB a file store defaults to."""
    if "max_bytes" in table.model_fields_set:
        return table.max_bytes
    return DEFAULT_MEMORY_STORE_BYTES
