"""What the integrations share: the controller they receive (or build from the short form),
and one state per conversation."""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, TypedDict

from .._controller.controller import CompactionController
from .._controller.state import ControllerState
from .._defaults import DEFAULT_RESERVED_CONTEXT_SIZE
from ..exceptions import UserError

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable, Sequence

    from .._contract.protocols import LLM, CompactionStrategy
    from .._controller.events import CompactionEvent, Step
    from .._history.messages import Message
    from .._tokens.counters import TokenCounter

__all__ = ["Conversations", "ShortForm", "controller_for"]


class ShortForm(TypedDict, total=False):
    """The options of an integration's short form, beside its strategy: the controller is
    built from them. Anything else a controller can do (a store, transforms, ``cache_ttl``,
    ``max_messages``...) comes with a ready one: ``controller=``."""

    max_context_size: int
    """The model's context window, in tokens (required with a strategy)."""
    reserved_context_size: int
    """Tokens kept free for the answer; compaction runs when the history's tokens plus this
    reach ``max_context_size`` (default 50,000)."""
    trigger_ratio: float | None
    """Also compact at this fraction of ``max_context_size``."""
    token_counter: TokenCounter | None
    """Counts the history's tokens (default: the heuristic counter)."""
    llm: LLM | None
    """The LLM that summarizing strategies use."""
    on_event: Callable[[CompactionEvent], object] | None
    """Called with a :class:`~ctxcompact.CompactionEvent` after each attempt."""


def controller_for(
    where: str,
    strategy: CompactionStrategy | None,
    controller: CompactionController | None,
    options: ShortForm,
) -> CompactionController:
    """``controller`` itself, or the one the short form (``strategy`` and ``options``)
    describes. ``where`` names the integration in errors.

    The short form keeps the originals in the controller's default in-memory store but
    leaves the strategies' plain markers (``recall=False``): the framework's agent has no
    ``recall_tool_result`` unless its tools include :func:`ctxcompact.store.recall_tool`, so
    a marker naming it would send the model after a tool it does not have. A ready
    controller's markers are its own (recall is on by default with a store: give the
    framework ``recall_tool(controller.store)`` too, or build it with ``recall=False``).

    Raises:
        UserError: Both forms, or neither, or a strategy without ``max_context_size``.
        ConfigError: An option is out of range (raised here, not during the run).

    Example:
        >>> from ctxcompact.strategies import ToolResultHiding
        >>> built = controller_for("f", ToolResultHiding(), None, {"max_context_size": 90_000})
        >>> built.max_context_size
        90000
    """
    given = [k for k, v in options.items() if v is not None]
    if controller is not None:
        clash = (["strategy"] if strategy is not None else []) + given
        if clash:
            raise UserError(
                f"{where}: pass either controller= or {', '.join(clash)}, not both: the "
                "controller already has its strategy and limits"
            )
        return controller
    window = options.get("max_context_size")
    if strategy is None or window is None:
        raise UserError(
            f"{where}: pass a strategy with max_context_size= (the model's window in "
            "tokens), or a ready controller="
        )
    return CompactionController(
        strategy,
        max_context_size=window,
        reserved_context_size=options.get("reserved_context_size", DEFAULT_RESERVED_CONTEXT_SIZE),
        trigger_ratio=options.get("trigger_ratio"),
        token_counter=options.get("token_counter"),
        llm=options.get("llm"),
        on_event=options.get("on_event"),
        recall=False,
    )


class Conversations:
    """One :class:`CompactionController` for every conversation, and one
    :class:`ControllerState` per conversation key (a run id, a thread id...).

    What a conversation accumulates (its running count, its loop guards, the time of its
    last model call) is its own; the strategy, limits and options are shared and built once,
    so a bad option fails where the integration is set up, not mid-run. The states of the
    oldest keys are forgotten past ``max_conversations``.
    """

    def __init__(self, controller: CompactionController, *, max_conversations: int = 256) -> None:
        self.controller = controller
        self.max_conversations = max_conversations
        self._states: OrderedDict[Hashable, ControllerState] = OrderedDict()

    def state(self, key: Hashable) -> ControllerState:
        """The state of conversation ``key`` (a new one the first time)."""
        state = self._states.get(key)
        if state is None:
            state = self._states[key] = ControllerState()
            while len(self._states) > self.max_conversations:
                _, forgotten = self._states.popitem(last=False)
                forgotten.ahead.cancel()  # its summary made ahead would never be used
        else:
            self._states.move_to_end(key)
        return state

    async def maybe_compact(self, key: Hashable, history: Sequence[Message]) -> Sequence[Message]:
        """:meth:`CompactionController.maybe_compact` with conversation ``key``'s state."""
        return await self.controller.maybe_compact(history, state=self.state(key))

    async def step(self, key: Hashable, history: Sequence[Message]) -> Step:
        """:meth:`CompactionController.step` (compaction, then the transforms) with
        conversation ``key``'s state."""
        return await self.controller.step(history, state=self.state(key))
