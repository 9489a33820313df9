"""What the integrations share: one controller per conversation, built from the same options."""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from .._controller import CompactionController

if TYPE_CHECKING:
    from collections.abc import Hashable

    from .._contract import CompactionStrategy

__all__ = ["Controllers"]


class Controllers:
    """One :class:`CompactionController` per conversation key (a run id, a session id...).

    A controller keeps state between calls (failure count, the last compaction's size), so one
    conversation must keep its own; the oldest keys are forgotten past ``max_conversations``.
    """

    def __init__(
        self,
        strategy: CompactionStrategy,
        options: dict[str, Any],
        *,
        max_conversations: int = 256,
    ) -> None:
        self.strategy = strategy
        self.options = options
        self.max_conversations = max_conversations
        self._by_key: OrderedDict[Hashable, CompactionController] = OrderedDict()
        # Built now, so a bad option fails where the integration is set up, not mid-run.
        self.get(None)

    def get(self, key: Hashable) -> CompactionController:
        controller = self._by_key.get(key)
        if controller is None:
            controller = CompactionController(self.strategy, **self.options)
            self._by_key[key] = controller
            while len(self._by_key) > self.max_conversations:
                self._by_key.popitem(last=False)
        else:
            self._by_key.move_to_end(key)
        return controller
