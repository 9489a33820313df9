"""The composition root: the one place a :class:`~ctxcompact.Config` becomes working parts.

A config (plus what the caller overrides: a strategy object, a model, a counter, limits)
becomes a :class:`Wiring`: the token counter, the model(s), the strategy loaded with its
dependencies injected, the per-request transforms and the controller's limits.
:meth:`CompactionController.from_config`, :meth:`Agent.from_config`, the proxy, the CLI,
replay and the benchmarks all build through :func:`wire`; none repeats it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._contract.protocols import LLM, CompactionStrategy, Dependencies, needs_llm
from ._plugins.loader import load_strategy
from ._tokens.counters import TokenCounter, counter_from_config
from ._tokens.windows import context_window
from .exceptions import ConfigError, LLMRequiredError, StoreError
from .llm import CircuitBreakerLLM, build_llm
from .llm._base import SDKAdapter
from .store._memory import MemoryStore
from .store._recall import DEFAULT_RECALL_TEMPLATE
from .store._sqlite import SQLiteStore
from .strategies._guard import ContextGuard
from .strategies._schema1 import Schema1Masking
from .strategies._truncation import ToolResultTruncation

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ._config.config import Config, LLMConfig
    from .store._records import OriginalsStore

__all__ = [
    "Wiring",
    "build_llm_with_window",
    "build_summarizer",
    "build_transforms",
    "offered_dependencies",
    "open_store",
    "require_llm",
    "wire",
]


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
        transforms: The enabled per-request transforms, in the order they apply.
        max_context_size: The window the controller triggers against.
        reserved_context_size: Tokens kept free below the window.
        trigger_ratio: ``[compaction] trigger_ratio``.
        max_messages: ``[compaction] max_messages``.
        min_progress: ``[compaction] min_progress``.
        max_failures: ``[compaction] max_failures``.
        owned: Models built here (not passed in): their owner closes them.
        store: The originals store (``[store]``, or the one passed in), or ``None``.
        recall: ``[store] recall``: offer the model the recall tool, and make placeholders
            name it.
        recall_placeholder: ``[store] recall_placeholder``, the recall placeholder template.
        owned_store: Whether ``store`` was built here (then its owner closes it).

    Example:
        >>> from ctxcompact import Config
        >>> config = Config.from_dict({"compaction": {"strategy": "tool-result-hiding",
        ...     "max_context_size": 32_000, "reserved_context_size": 4_000}})
        >>> type(wire(config).strategy).__name__
        'ToolResultHiding'
    """

    config: Config
    counter: TokenCounter
    llm: LLM | None
    agent_llm: LLM | None
    strategy: CompactionStrategy
    transforms: tuple[CompactionStrategy, ...]
    max_context_size: int
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


def wire(
    config: Config,
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
) -> Wiring:
    """Build the parts ``config`` describes; each keyword overrides its part of the config.

    Args:
        config: A loaded (validated) configuration.
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
        build_store: Open the store ``[store]`` describes (a file is opened, so only callers
            that will use and close it ask: :meth:`Agent.from_config`,
            :meth:`CompactionController.from_config`). Otherwise ``store`` is only ``store``.

    Raises:
        ConfigError: No window anywhere, limits that do not fit, no model for an agent, a
            store file that cannot be opened (the error names the file and the key).
        StrategyLoadError: The strategy cannot be loaded.
        MissingDependencyError: A configured provider's SDK is not installed.
    """
    where = str(config.path) if config.path else None
    comp = config.compaction
    overrides: dict[str, Any] = {}
    if max_context_size is not None:
        overrides["max_context_size"] = max_context_size
    if reserved_context_size is not None:
        overrides["reserved_context_size"] = reserved_context_size
    if overrides:
        config = config.with_compaction(**overrides)
        comp = config.compaction
    size = comp.max_context_size
    if size is None and comp.model is not None:
        # The named model's window (``[models]`` first, then the built-in table).
        size = config.model_window(comp.model)
        if size is not None and comp.reserved_context_size >= size:
            raise ConfigError(
                f"the window of {comp.model!r} is {size} tokens, not above "
                f"reserved_context_size ({comp.reserved_context_size}): set it lower",
                path=where,
                key="compaction.reserved_context_size",
            )
    if size is None:
        raise ConfigError(
            "required: set it in [compaction] (or name a known model in [compaction] model, "
            "or give its window in [models]) or pass max_context_size=",
            path=where,
            key="compaction.max_context_size",
        )
    counter = token_counter or counter_from_config(config.token_counting)

    owned: list[LLM] = []
    agent_llm: LLM | None = None
    summarizer = llm
    if agent:
        agent_llm = llm
        if agent_llm is None:
            agent_config = config.agent.llm or comp.llm
            if agent_config is None:
                raise ConfigError(
                    "no model to talk to: add an [agent.llm] table (provider, model) or pass "
                    "llm= to Agent.from_config",
                    path=where,
                    key="agent.llm",
                )
            agent_llm = build_llm_with_window(agent_config, config.models)
            owned.append(agent_llm)
        summarizer = agent_llm
        if comp.llm is not None and config.agent.llm is not None:
            summarizer = build_summarizer(comp.llm, config.models)
            owned.append(summarizer)
    elif summarizer is None and comp.llm is not None:
        summarizer = build_summarizer(comp.llm, config.models)
        owned.append(summarizer)

    if strategy is None:
        offered = offered_dependencies(config, counter, summarizer, dependencies)
        strategy = load_strategy(comp.strategy, dependencies=offered, params=comp.params)
        if summarizer is None:
            require_llm(strategy, comp.strategy, where)
    elif summarizer is None and not (dependencies and LLM in dependencies):
        require_llm(strategy, type(strategy).__name__, where)
    transforms = tuple(build_transforms(config, size))
    owned_store = build_store and store is None and config.store.enabled
    if owned_store:
        store = open_store(config)
    return Wiring(
        config=config,
        counter=counter,
        llm=summarizer,
        agent_llm=agent_llm,
        strategy=strategy,
        transforms=transforms,
        max_context_size=size,
        reserved_context_size=comp.reserved_context_size,
        trigger_ratio=comp.trigger_ratio,
        max_messages=comp.max_messages,
        min_progress=comp.min_progress,
        max_failures=comp.max_failures,
        owned=tuple(owned),
        store=store,
        recall=config.store.recall,
        recall_placeholder=config.store.recall_placeholder,
        owned_store=owned_store,
    )


def build_llm_with_window(llm_config: LLMConfig, models: Mapping[str, int] | None = None) -> LLM:
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


def build_summarizer(llm_config: LLMConfig, models: Mapping[str, int] | None = None) -> LLM:
    """The summarizer ``[compaction.llm]`` describes: :func:`build_llm_with_window`'s model
    inside a :class:`~ctxcompact.llm.CircuitBreakerLLM` (``breaker_failures``,
    ``breaker_cooldown``; none when ``breaker_failures = 0``).

    One breaker per summarizer built: every controller, conversation and proxy request that
    the wiring serves shares it, so an outage is paid by the first calls only."""
    llm = build_llm_with_window(llm_config, models)
    if llm_config.breaker_failures == 0:
        return llm
    return CircuitBreakerLLM(
        llm, failure_threshold=llm_config.breaker_failures, cooldown=llm_config.breaker_cooldown
    )


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


def open_store(config: Config) -> OriginalsStore | None:
    """The store ``[store]`` describes: a :class:`SQLiteStore` at ``path`` (``~`` expanded,
    relative to the config file's folder), a :class:`MemoryStore` when only ``recall`` is on,
    else ``None``.

    Raises:
        ConfigError: The file cannot be opened or was written by a newer ctxcompact (named as
            ``store.path`` with the config file).
    """
    table = config.store
    path = table.resolved_path(config.path)
    if path is None:
        return MemoryStore(max_bytes=table.max_bytes) if table.recall else None
    try:
        return SQLiteStore(path, max_bytes=table.max_bytes)
    except StoreError as exc:
        raise ConfigError(
            str(exc), path=str(config.path) if config.path else None, key="store.path"
        ) from exc


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
    does not fit. The guard's window is explicit, so only its own ``reserve_tokens`` is kept
    free (the controller's reserve is about when to compact, not what fits).

    Raises:
        ConfigError: A table's settings do not fit (named as ``table.key`` with the file).
    """
    where = str(config.path) if config.path else None
    tables: list[tuple[str, bool, Any]] = [
        (
            "observation_masking.schema1",
            config.observation_masking.schema1.enabled,
            lambda: Schema1Masking(**config.observation_masking.schema1.params()),
        ),
        (
            "tool_result_truncation",
            config.tool_result_truncation.enabled,
            lambda: ToolResultTruncation(**config.tool_result_truncation.params()),
        ),
        (
            "context_guard",
            config.context_guard.enabled,
            lambda: ContextGuard(context_window=max_context_size, **config.context_guard.params()),
        ),
    ]
    transforms: list[CompactionStrategy] = []
    for table, enabled, build in tables:
        if not enabled:
            continue
        try:
            transforms.append(build())
        except ConfigError as exc:
            raise exc.located(path=where, table=table) from None
    return transforms
