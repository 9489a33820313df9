"""Compaction for the OpenAI Agents SDK: a model-input filter and a compacting ``Session``.

Example:
    .. code-block:: python

        from agents import Agent, RunConfig, Runner
        from ctxcompact.integrations.openai_agents import CompactionFilter, CompactingSession
        from ctxcompact.strategies import ToolResultHiding

        hiding = ToolResultHiding()
        config = RunConfig(
            call_model_input_filter=CompactionFilter(hiding, max_context_size=128_000)
        )
        result = await Runner.run(agent, "fix the tests", run_config=config)

        # or: compact what a session stores between runs
        session = CompactingSession(SQLiteSession("user-1"), hiding, max_context_size=128_000)

Both take a strategy and a window (the short form) or a ready ``controller=`` (with a store,
transforms or ``cache_ttl``: the filter applies the transforms to what each call sends; a
session, which only stores, compacts). Both read the SDK's Responses items with
:func:`~ctxcompact.from_responses` and write them back with :func:`~ctxcompact.to_responses`:
reasoning items (``encrypted_content`` included) stay with the call they preceded, a hidden
``function_call_output`` keeps its ``call_id``, and items ctxcompact does not know pass through
in place.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ..exceptions import FormatError, MissingDependencyError

try:
    from agents.run_config import CallModelData, ModelInputData
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise MissingDependencyError("ctxcompact.integrations.openai_agents", "openai-agents") from exc

from .._controller.events import same_messages
from .._controller.state import ControllerState
from .._formats.common import copy_json
from .._formats.responses import from_responses, to_responses
from ._common import controller_for

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from agents import Session, TResponseInputItem
    from agents.memory import SessionSettings
    from typing_extensions import Unpack

    from .._contract.protocols import CompactionStrategy
    from .._controller.controller import CompactionController
    from ._common import ShortForm

__all__ = ["CompactingSession", "CompactionFilter"]

logger = logging.getLogger("ctxcompact.integrations.openai_agents")


def _plain(item: Any) -> Mapping[str, Any]:
    """An input item as a dict (the SDK's items are TypedDicts; output models are pydantic)."""
    dump = getattr(item, "model_dump", None)
    return dump(exclude_unset=True) if callable(dump) else item  # type: ignore[no-any-return]


class _Conversation:
    """What the filter remembers of one run: the items of its last call, the items it
    compacted and what it sends instead of them."""

    def __init__(self) -> None:
        self.state = ControllerState()  # the run's own count and loop guards
        self.seen: list[Any] = []
        self.source: list[Any] = []
        self.sent: list[dict[str, Any]] = []


class CompactionFilter:
    """A ``RunConfig.call_model_input_filter`` that compacts the run's items when they grow.

    The SDK calls it before every model call with the run's whole input. When the controller
    compacts, the filter remembers the items it replaced and, on later calls of the same run,
    sends the compacted items followed by only what is new: the compaction is done once and the
    rewritten prefix stays stable for the prompt cache (the SDK keeps its own items whole).
    Input it cannot read as Responses items is sent unchanged, with a warning.

    Args:
        strategy: How to compact (any :class:`~ctxcompact.CompactionStrategy`), with
            ``max_context_size`` among ``options``.
        controller: A ready :class:`~ctxcompact.CompactionController` instead (its store,
            transforms and ``cache_ttl`` included); then no strategy nor options.
        max_conversations: How many runs' state to keep (oldest forgotten first).
        **options: The short form's controller options: ``max_context_size`` (the model's
            window, required), ``reserved_context_size``, ``trigger_ratio``,
            ``token_counter``, ``llm`` (for summarizing strategies) and ``on_event``.

    Raises:
        UserError: Both forms, or a strategy without ``max_context_size``.
        ConfigError: An option is out of range.

    Example:
        >>> from ctxcompact.strategies import ToolResultHiding
        >>> CompactionFilter(ToolResultHiding(), max_context_size=128_000)
        CompactionFilter(ToolResultHiding(...), max_context_size=128000)
    """

    def __init__(
        self,
        strategy: CompactionStrategy | None = None,
        *,
        controller: CompactionController | None = None,
        max_conversations: int = 64,
        **options: Unpack[ShortForm],
    ) -> None:
        self.controller = controller_for("CompactionFilter", strategy, controller, options)
        self._max_conversations = max_conversations
        self._conversations: list[_Conversation] = []

    def __repr__(self) -> str:
        name = type(self.controller.strategy).__name__
        return f"CompactionFilter({name}(...), max_context_size={self.controller.max_context_size})"

    async def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        items = [_plain(item) for item in data.model_data.input]
        conversation = self._find(items)
        view: list[Any] = [*conversation.sent, *items[len(conversation.source) :]]
        try:
            history = from_responses(view)
        except FormatError as exc:  # fail open: the run goes on with its input as is
            logger.warning(
                "not compacting: the model input is not Responses items (%s)", _where(exc)
            )
            logger.debug("the model input is not Responses items: %s", exc)
            return data.model_data
        step = await self.controller.step(history, state=conversation.state)
        if step.history is not history:
            conversation.source = [copy_json(item) for item in items]
            conversation.sent = to_responses(step.history)
            view = list(conversation.sent)
        if not same_messages(step.request, step.history):  # the transforms: this call only
            view = to_responses(step.request)
        conversation.seen = [copy_json(item) for item in items]
        instructions = data.model_data.instructions
        return ModelInputData(input=view, instructions=instructions)

    def _find(self, items: list[Any]) -> _Conversation:
        """The run these items continue (its last call's items are their prefix), or a new one."""
        best: _Conversation | None = None
        for conversation in self._conversations:
            n = len(conversation.seen)
            longer = best is None or n > len(best.seen)
            if longer and 0 < n <= len(items) and items[:n] == conversation.seen:
                best = conversation
        if best is not None:
            self._conversations.remove(best)
            self._conversations.append(best)
            return best
        conversation = _Conversation()
        self._conversations.append(conversation)
        if len(self._conversations) > self._max_conversations:
            self._conversations.pop(0)
        return conversation


class CompactingSession:
    """A ``Session`` that compacts what it stores, wrapping any other session.

    After each ``add_items`` the wrapper reads the stored items, lets the controller decide,
    and when it compacts, replaces the stored items with the compacted ones (``clear_session``
    then ``add_items`` on the wrapped session). Later runs then start from the compacted
    history. Every other call goes straight to the wrapped session.

    Args:
        session: The session that stores (``SQLiteSession``, a Redis session...).
        strategy: How to compact, with ``max_context_size`` among ``options``.
        controller: A ready :class:`~ctxcompact.CompactionController` instead (its store
            keeps what compaction removes; its transforms are per model call, so they belong
            to :class:`CompactionFilter`, not to what a session stores).
        **options: The short form's controller options: ``max_context_size`` (required),
            ``reserved_context_size``, ``trigger_ratio``, ``token_counter``, ``llm`` and
            ``on_event``.

    Raises:
        UserError: Both forms, or a strategy without ``max_context_size``.

    Example:
        >>> from agents import SQLiteSession
        >>> from ctxcompact.strategies import ToolResultHiding
        >>> s = CompactingSession(SQLiteSession("u1"), ToolResultHiding(), max_context_size=90_000)
        >>> s.session_id
        'u1'
    """

    def __init__(
        self,
        session: Session,
        strategy: CompactionStrategy | None = None,
        *,
        controller: CompactionController | None = None,
        **options: Unpack[ShortForm],
    ) -> None:
        self.session = session
        # One session, one conversation: the controller's own state.
        self.controller = controller_for("CompactingSession", strategy, controller, options)

    @property
    def session_id(self) -> str:
        """The wrapped session's id."""
        return self.session.session_id

    @property
    def session_settings(self) -> SessionSettings | None:
        """The wrapped session's settings."""
        return self.session.session_settings

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The stored items (compacted when a compaction ran), oldest first."""
        return await self.session.get_items(limit)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Store ``items``, then compact the stored history if the trigger fires."""
        await self.session.add_items(items)
        await self.compact()

    async def compact(self, *, force: bool = False) -> bool:
        """Compact the stored items now if the trigger fires (or ``force``); whether it did."""
        stored: Sequence[Any] = [_plain(item) for item in await self.session.get_items()]
        try:
            history = from_responses(stored)
        except FormatError as exc:  # fail open: the session keeps what it stores
            logger.warning("not compacting session %r: %s", self.session_id, _where(exc))
            logger.debug("session %r is not Responses items: %s", self.session_id, exc)
            return False
        result = await self.controller.maybe_compact(history, force=force)
        if result is history:
            return False
        compacted: list[Any] = to_responses(result)
        await self.session.clear_session()
        await self.session.add_items(compacted)
        return True

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the newest stored item."""
        return await self.session.pop_item()

    async def clear_session(self) -> None:
        """Remove every stored item."""
        await self.session.clear_session()


def _where(exc: FormatError) -> str:
    """A format error by its fields (type, message index, field): its text may quote an item."""
    where = [type(exc).__name__]
    if exc.index is not None:
        where.append(f"message {exc.index}")
    if exc.field:
        where.append(f"field {exc.field!r:.80}")
    return ", ".join(where)
