"""Per-request windows: when ``[compaction] max_context_size`` is not set, each request is
compacted against the window of the model it names.

The window comes from :meth:`Config.model_window` (``[models]``, then the built-in table of
:func:`~ctxcompact.context_window`). One controller is built per distinct window by the
wiring (:meth:`~ctxcompact.Wiring.controller`: the strategy object and the counter are
shared; the transforms are rebuilt, since the guard's budget is the window), so the
per-request cost is a dictionary lookup. A model whose window
is not known is forwarded unchanged (``action=skipped``) with :data:`UNKNOWN_WINDOW`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .._controller.problems import Problem
from .._wiring import transform_names
from ..exceptions import ConfigError

if TYPE_CHECKING:
    from .._contract.protocols import CompactionStrategy
    from .._controller.controller import CompactionController
    from .._tokens.counters import TokenCounter
    from .._wiring import Wiring
    from ..store._records import OriginalsStore

__all__ = ["UNKNOWN_MODEL", "UNKNOWN_WINDOW", "WINDOW_TOO_SMALL", "ModelWindows"]

logger = logging.getLogger("ctxcompact.proxy")

UNKNOWN_MODEL = (
    "the model's context window is not known: set [compaction] max_context_size or add the "
    "model to [models]"
)
TOO_SMALL = "the model's window is too small for the configured transforms"
UNKNOWN_WINDOW = Problem.fixed("unknown_window", UNKNOWN_MODEL)
WINDOW_TOO_SMALL = Problem.fixed("window_too_small", TOO_SMALL)
_MAX_WINDOWS = 64  # distinct windows kept; past it the oldest controller is dropped


class ModelWindows:
    """Picks (and caches) the controller for the window of the model a request names.

    Args:
        wiring: The proxy's parts (``wire(config, per_model_windows=True)``): the strategy,
            counter, limits and store are shared; the window, the reserve and the transforms
            are per window.

    When the configured ``reserved_context_size`` is not below a model's window, a quarter of
    that window is reserved instead, so a small model still gets a trigger.

    Example:
        >>> from ctxcompact import Config, wire
        >>> config = Config.from_dict({"compaction": {"strategy": "tool-result-hiding"}})
        >>> windows = ModelWindows(wire(config, per_model_windows=True))
        >>> windows("gpt-4o").max_context_size, windows("no-such-model") == UNKNOWN_WINDOW
        (128000, True)
    """

    def __init__(self, wiring: Wiring) -> None:
        self.wiring = wiring
        self._controllers: dict[int, CompactionController | Problem] = {}

    @property
    def strategy(self) -> CompactionStrategy:
        """The strategy every window's controller runs."""
        return self.wiring.strategy

    @property
    def counter(self) -> TokenCounter:
        """The token counter every window's controller counts with."""
        return self.wiring.counter

    @property
    def store(self) -> OriginalsStore | None:
        """The store every window's controller records into."""
        return self.wiring.store

    @property
    def transform_names(self) -> tuple[str, ...]:
        """The names of the transforms every window's controller applies (built per window:
        the guard's budget is the window)."""
        return transform_names(self.wiring.config)

    def window(self, model: object) -> int | None:
        """The window of ``model`` (``[models]``, then the table), or ``None``."""
        return self.wiring.config.model_window(model)

    def __call__(self, model: object) -> CompactionController | Problem:
        window = self.window(model)
        if window is None:
            return UNKNOWN_WINDOW
        found = self._controllers.get(window)
        if found is None:
            found = self._build(window)
            if len(self._controllers) >= _MAX_WINDOWS:
                self._controllers.pop(next(iter(self._controllers)))
            self._controllers[window] = found
        return found

    def _build(self, window: int) -> CompactionController | Problem:
        w = self.wiring
        reserved = w.reserved_context_size
        if reserved >= window:
            reserved = window // 4
        try:
            return w.controller(max_context_size=window, reserved_context_size=reserved)
        except ConfigError:
            logger.warning("proxy: %s (%d tokens); such requests go unchanged", TOO_SMALL, window)
            return WINDOW_TOO_SMALL
