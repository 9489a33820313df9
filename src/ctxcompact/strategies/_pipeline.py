"""Pipeline: strategies run in order, each on the previous one's output."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._contract.protocols import Dependencies, needs_llm, summarizes_ahead
from .._plugins.loader import load_strategy
from ..exceptions import ConfigError, LLMUnavailableError
from ..kit import options_repr

if TYPE_CHECKING:
    from .._contract.protocols import CompactionContext, CompactionStrategy, SummaryAhead
    from .._history.messages import Message

__all__ = ["Pipeline"]

logger = logging.getLogger(__name__)

Step = str | Mapping[str, Any]
"""A step named in TOML: a strategy spec, or ``{strategy = spec, params = {...}}``."""


class Pipeline:
    """Run strategies in order, each on the previous output; ``None`` if all were no-ops.

    Each step gets a context whose ``history`` is the current one and whose ``token_count``
    is re-counted (with the context's token counter) once a step has changed it.

    Ahead of time (:meth:`summarize_ahead`), the first step that can summarize ahead does,
    on the history the steps before it leave, as long as those keep every message at its
    place (hiding, masking, truncation do; a guard that drops steps does not, and then no
    summary is made ahead); the context the steps get carries the result (``ctx.ahead``).

    A step whose model is unavailable (:class:`~ctxcompact.exceptions.LLMUnavailableError`:
    its circuit breaker is open after failed calls) is skipped and the other steps still run
    (when none changes anything, that error is raised); any other error propagates, so the
    controller keeps the history and reports it.

    Args:
        *strategies: Strategy objects, in order (Python).
        steps: Strategies named as in TOML, resolved with :func:`ctxcompact.load_strategy`
            after the positional ones: each a spec string (``"tool-result-truncation"``,
            ``"pkg.mod:Class"``) or a table ``{strategy = "...", params = {...}}``.
        dependencies: What the steps are offered (an LLM, the token counter...). When the
            pipeline is itself loaded by :func:`ctxcompact.load_strategy`, the loader fills
            it with its own offer, so a step that needs an LLM gets the one offered.

    Raises:
        ConfigError: A step that is neither a string nor a table with a ``strategy`` key.
        StrategyLoadError: A step spec that cannot be loaded.

    Example:
        >>> from ctxcompact.strategies import ToolResultHiding, ToolResultTruncation
        >>> Pipeline(ToolResultTruncation(), ToolResultHiding(preserve_recent_n=3))
        Pipeline(ToolResultTruncation(), ToolResultHiding(preserve_recent_n=3))

        In TOML::

            [compaction]
            strategy = "pipeline"
            [compaction.params]
            steps = ["tool-result-truncation",
                     {strategy = "tool-result-hiding", params = {preserve_recent_n = 3}}]
    """

    def __init__(
        self,
        *strategies: CompactionStrategy,
        steps: Sequence[Step] = (),
        dependencies: Dependencies | None = None,
    ) -> None:
        resolved = list(strategies)
        if isinstance(steps, (str, Mapping)):
            raise ConfigError("must be a list of steps", key="steps")
        offer = dependencies if dependencies is not None else Dependencies()
        for k, step in enumerate(steps):
            resolved.append(_load_step(step, k, offer))
        self.strategies: tuple[CompactionStrategy, ...] = tuple(resolved)

    def needs_llm(self) -> bool:
        """True when any step needs an LLM it was not given (see ``NeedsLLM``)."""
        return any(needs_llm(step) for step in self.strategies)

    def __repr__(self) -> str:
        return options_repr(self, positional=self.strategies)

    async def summarize_ahead(self, ctx: CompactionContext) -> SummaryAhead | None:
        """The first summarizing step's summary made ahead (see the class docs), or ``None``."""
        if not any(summarizes_ahead(s) for s in self.strategies):
            return None
        history: Sequence[Message] = ctx.history
        for strategy in self.strategies:
            current = ctx
            if history is not ctx.history:
                current = dataclasses.replace(
                    ctx, history=history, token_count=ctx.token_counter.count(history)
                )
            if summarizes_ahead(strategy):
                return await strategy.summarize_ahead(current)
            out = await strategy.compact(current)
            if out is not None:
                if len(out) != len(ctx.history):  # positions moved: a summary would not line up
                    return None
                history = out
        return None

    async def compact(self, ctx: CompactionContext) -> Sequence[Message] | None:
        """Run every step; the last output, or ``None`` when no step changed anything."""
        history: Sequence[Message] = ctx.history
        current = ctx
        changed = False
        unavailable: LLMUnavailableError | None = None
        for strategy in self.strategies:
            if current.history is not history:
                # Re-counted only when a later step will look at it.
                current = dataclasses.replace(
                    ctx, history=history, token_count=ctx.token_counter.count(history)
                )
            try:
                out = await strategy.compact(current)
            except LLMUnavailableError as exc:
                # The model's breaker is open (it logged why): this step waits for it to
                # recover, the steps that need no model still run.
                logger.debug(
                    "pipeline step %s skipped: its model is unavailable", type(strategy).__name__
                )
                unavailable = exc
                continue
            if out is not None:
                history = out
                changed = True
        if not changed and unavailable is not None:
            raise unavailable  # a failure to report, not a no-op
        return history if changed else None


def _load_step(
    step: Step, k: int, offer: Dependencies, *, key: str = "steps"
) -> CompactionStrategy:
    """Step ``k`` of a list named ``key`` (a pipeline's ``steps``, a tiered ``tiers``)."""
    if isinstance(step, str):
        return load_strategy(step, dependencies=offer)
    if isinstance(step, Mapping) and isinstance(step.get("strategy"), str):
        unknown = sorted(set(step) - {"strategy", "params"})
        if unknown:
            raise ConfigError(f"unknown key(s) {unknown} in a step", key=f"{key}[{k}]")
        params = step.get("params") or {}
        if not isinstance(params, Mapping):
            raise ConfigError("params must be a table", key=f"{key}[{k}].params")
        return load_strategy(step["strategy"], dependencies=offer, params=params)
    raise ConfigError(
        f'a step is a strategy spec or {{strategy = "...", params = {{...}}}}, got {step!r}',
        key=f"{key}[{k}]",
    )
