"""What the integrations share: one controller, one state per conversation."""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from .._controller.controller import CompactionController, ControllerState

if TYPE_CHECKING:
    from collections.abc import Hashable, Sequence

    from .._contract.protocols import CompactionStrategy
    from .._history.messages import Message

__all__ = ["Conversations"]


class Conversations:
    """One :class:`CompactionController` for every conversation, and one
    :class:`ControllerState` per conversation key (a run id, a thread id...).

    What a conversation accumulates (its running count, its loop guards) is its own; the
    strategy, limits and options are shared and built once, so a bad option fails where the
    integration is set up, not mid-run. The states of the oldest keys are forgotten past
    ``max_conversations``.
    """

    def __init__(
        self,
        strategy: CompactionStrategy,
        options: dict[str, Any],
        *,
        max_conversations: int = 256,
    ) -> None:
        self.controller = CompactionController(strategy, **options)
        self.max_conversations = max_conversations
        self._states: OrderedDict[Hashable, ControllerState] = OrderedDict()

    def state(self, key: Hashable) -> ControllerState:
        """The state of conversation ``key`` (a new one the first time)."""
        state = self._states.get(key)
        if state is None:
            state = self._states[key] = ControllerState()
            while len(self._states) > self.max_conversations:
                self._states.popitem(last=False)
        else:
            self._states.move_to_end(key)
        return state

    async def maybe_compact(self, key: Hashable, history: Sequence[Message]) -> Sequence[Message]:
        """:meth:`CompactionController.maybe_compact` with conversation ``key``'s state."""
        return await self.controller.maybe_compact(history, state=self.state(key))
