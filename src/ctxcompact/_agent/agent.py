"""A small tool-calling agent whose history is kept inside the context window.

The loop is the one every agent has (call the model, run the tools it asks for, repeat) with
the compaction controller in front of each call: ``maybe_compact`` rewrites the stored history
when it has grown too big, ``prepare_request`` applies the per-request transforms, and the
provider's reported usage feeds back into the next decision. The full conversation is never
lost: :attr:`Agent.transcript` keeps every message and every compaction event in order.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypedDict

from .._contract.tools import ERROR_PREFIX, Tool, ToolLike, ToolResult, as_tool
from .._controller.controller import CompactionController
from .._controller.store_hook import store_cut_results
from .._defaults import DEFAULT_MAX_CONTEXT_SIZE, DEFAULT_MAX_STEPS, DEFAULT_RESERVED_CONTEXT_SIZE
from .._history.messages import Message, ToolCall
from .._wiring import wire
from ..exceptions import ContextTooLongError, MaxStepsExceeded, UserError
from ..store._recall import recall_tool
from ..strategies._summary import LLMSummary

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from typing_extensions import Unpack

    from .._contract.protocols import LLM, CompactionStrategy, Completion, ToolSpec
    from .._controller.events import CompactionEvent
    from .._tokens.counters import TokenCounter
    from .._wiring import ConfigSource
    from ..store._records import OriginalsStore
    from ..strategies._truncation import ToolResultTruncation

__all__ = ["Agent", "CompactionRecord", "StopReason", "StrategyOptions", "TranscriptEntry"]

StopReason = Literal["answer", "length", "max_steps"]
"""Why the last :meth:`Agent.run` ended: a final answer, an answer cut by ``max_tokens``
even after asking once for a concise one, or the step budget."""

CONTINUE_PROMPT = (
    "[system] Your previous answer was cut off because it reached the maximum output length. "
    "Give your answer again, more concisely."
)
"""Sent once per run when the model stops on ``finish_reason == "length"`` (seed 002, task 5)."""

MAX_CONTEXT_RETRIES = 2
"""How many times a context-too-long error triggers a forced compaction and a retry."""


@dataclass(frozen=True, slots=True)
class CompactionRecord:
    """A compaction event in :attr:`Agent.transcript`, where it happened.

    Attributes:
        event: What the controller reported (strategy, trigger, status, tokens...).
        history: The stored history right after the event when it was compacted (so the
            summary or placeholders that replaced older messages are kept too), else ``None``.
    """

    event: CompactionEvent
    history: tuple[Message, ...] | None = None


TranscriptEntry = Message | CompactionRecord
"""One entry of :attr:`Agent.transcript`."""


class StrategyOptions(TypedDict, total=False):
    """What the controller of :meth:`Agent.with_strategy` (or ``Agent(llm,
    compaction=strategy)``) is built with, beside the strategy. A ready controller has them
    already: with ``controller=``, none may be given."""

    max_context_size: int | None
    """The model's window in tokens (default 128,000)."""
    reserved_context_size: int | None
    """Tokens kept free for the answer and the next tool results (default 50,000);
    compaction triggers when ``tokens + reserved >= max_context_size``."""
    trigger_ratio: float | None
    """Also trigger when the tokens reach this fraction of the window."""
    token_counter: TokenCounter | None
    """Estimates tokens; the controller's default heuristic when ``None``."""
    transforms: Sequence[CompactionStrategy]
    """Per-request strategies applied to each request, never to the stored history
    (Schema 1 masking, a context guard...)."""
    store: OriginalsStore | None
    """An originals store (:mod:`ctxcompact.store`): every original compaction, a transform or
    ``tool_result_truncation`` takes out of the model's view is kept there, by its recall
    handle. Not given: a :class:`~ctxcompact.store.MemoryStore` of the agent's own, bounded at
    :data:`~ctxcompact.store.DEFAULT_MEMORY_STORE_BYTES`; ``None``: no store. Its failures
    never stop the agent (logged at WARNING)."""
    recall_placeholder: str | None
    """The template of the recall placeholders of hidden and masked results
    (``{tool_call_id}``, ``{tool_name}``); default
    :data:`~ctxcompact.store.DEFAULT_RECALL_TEMPLATE`."""


def _short_form_controller(
    llm: LLM,
    strategy: CompactionStrategy | None,
    *,
    recall: bool | None = None,
    **options: Unpack[StrategyOptions],
) -> CompactionController:
    """The controller of the short form: ``strategy`` (``None``: KLIP-13's default,
    :class:`~ctxcompact.strategies.LLMSummary` with ``llm``) with ``options``.

    Raises:
        UserError: ``recall=True`` or ``recall_placeholder`` with ``store=None``,
            ``recall_placeholder`` with ``recall=False``.
        ConfigError: Limits that do not fit.
    """
    # No store= at all: the controller's default, a bounded MemoryStore of its own.
    store: OriginalsStore | Literal["memory"] | None = options.get("store", "memory")
    max_size = options.get("max_context_size")
    reserved = options.get("reserved_context_size")
    return CompactionController(
        LLMSummary(llm) if strategy is None else strategy,
        max_context_size=DEFAULT_MAX_CONTEXT_SIZE if max_size is None else max_size,
        reserved_context_size=DEFAULT_RESERVED_CONTEXT_SIZE if reserved is None else reserved,
        trigger_ratio=options.get("trigger_ratio"),
        token_counter=options.get("token_counter"),
        llm=llm,
        transforms=tuple(options.get("transforms", ())),
        store=store,
        recall=recall,
        recall_placeholder=options.get("recall_placeholder"),
    )


class Agent:
    """A tool-calling agent that compacts its history before every model call.

    The agent receives its controller ready-built (``Agent(llm, controller)``);
    :meth:`with_strategy` builds one from a strategy and a window, and :meth:`from_config`
    from a configuration (through :func:`ctxcompact.wire`).

    Args:
        llm: The chat model (anything satisfying :class:`ctxcompact.LLM`).
        controller: The ready :class:`~ctxcompact.CompactionController` that decides when
            and how to compact (its store is the agent's, and its ``recall`` and
            ``recall_placeholder`` decide what markers say).
        tools: :class:`~ctxcompact.Tool` objects or typed functions (sync or async).
        system_prompt: Sent as the first, system message of the history.
        compaction: Short for :meth:`with_strategy`: a strategy, built into a controller
            with the :class:`StrategyOptions` given as keywords (or the defaults; ``None``
            and no ``controller`` means KLIP-13's default, ``LLMSummary`` with ``llm``). A
            controller here is the same as ``controller=``.
        max_steps: The most model calls one :meth:`run` may make (default 50).
        max_tokens: The output limit passed to every model call.
        tool_result_truncation: Cuts each tool result on arrival into the history (the
            transcript keeps it whole), e.g. ``ToolResultTruncation(max_chars=8000)``.
        on_event: Called with each :class:`~ctxcompact.CompactionEvent` as it happens
            (compaction events only: every status, from ``compacted`` to ``skipped``; tool
            calls and steps are visible in :attr:`transcript`).
        recall: Offer the model ``recall_tool_result`` (:func:`ctxcompact.store.recall_tool`)
            to get back what compaction removed, every marker naming the handle to recall it
            with. ``None`` (the default): whenever the controller's markers name the tool,
            which they do whenever there is a store (the default one included); ``False``:
            no tool, and in the short form the strategies' plain markers (the originals are
            still kept); ``True``: the tool, and a store is required.
        **strategy_options: With ``compaction=`` a strategy (or neither): the
            :class:`StrategyOptions` of its controller.

    Raises:
        UserError: ``controller`` and strategy options together, ``recall=True`` without a
            store, two tools of one name (``recall_tool_result`` is the agent's while recall
            is on), ``max_steps`` below 1.

    Example:
        >>> from ctxcompact.testing import ScriptedLLM
        >>> llm = ScriptedLLM("Hello!")
        >>> agent = Agent(llm, max_context_size=32_000, reserved_context_size=4_000)
        >>> asyncio.run(agent.run("hi"))
        'Hello!'
    """

    def __init__(
        self,
        llm: LLM,
        controller: CompactionController | None = None,
        *,
        tools: Iterable[ToolLike] = (),
        system_prompt: str | None = None,
        compaction: CompactionStrategy | CompactionController | None = None,
        max_steps: int = DEFAULT_MAX_STEPS,
        max_tokens: int | None = None,
        tool_result_truncation: ToolResultTruncation | None = None,
        on_event: Callable[[CompactionEvent], object] | None = None,
        recall: bool | None = None,
        **strategy_options: Unpack[StrategyOptions],
    ) -> None:
        if max_steps < 1:
            raise UserError(f"max_steps must be at least 1, got {max_steps}")
        if isinstance(compaction, CompactionController):
            if controller is not None:
                raise UserError("pass the controller once: controller= or compaction=")
            controller, compaction = compaction, None
        if controller is None:
            controller = _short_form_controller(llm, compaction, recall=recall, **strategy_options)
        else:
            _refuse_beside(controller, compaction, strategy_options)
        self.llm = llm
        self.controller = controller
        self.tools: dict[str, Tool] = {}
        for item in tools:
            t = as_tool(item)
            if t.name in self.tools:
                raise UserError(f"two tools are named {t.name!r}; tool names must be unique")
            self.tools[t.name] = t
        self.system_prompt = system_prompt
        self.max_steps = max_steps
        self.max_tokens = max_tokens
        self.tool_result_truncation = tool_result_truncation
        self.on_event = on_event
        self._running = False
        self._owned: list[LLM] = []  # models built by from_config, closed by aclose()
        self.store = self.controller.store
        """Where removed originals are kept (the controller's), or ``None``."""
        self._owned_store = False  # a store built by from_config, closed by aclose()
        offer = recall if recall is not None else self.controller.recall
        if offer:
            self._offer_recall(given=recall is True)
        self.recall = offer
        """Whether the model is offered ``recall_tool_result``."""
        self.history: list[Message] = []
        """The stored history, compacted: each request is this through the transforms."""
        self.transcript: list[TranscriptEntry] = []
        """Every message ever added and every compaction event, in order. Never compacted."""
        self.stop_reason: StopReason | None = None
        self.steps = 0
        """Model calls made by the last :meth:`run`."""
        if system_prompt:
            self.add(Message.system(system_prompt))

    def _offer_recall(self, *, given: bool) -> None:
        if self.store is None:
            raise UserError(
                "recall=True needs an originals store: pass store=MemoryStore() or "
                "SQLiteStore(path) (from ctxcompact.store), or set [store] path in the "
                "config; the recall tool reads removed results from it"
            )
        recall_spec = recall_tool(self.store, namespace=self.controller.store_namespace)
        if recall_spec.name in self.tools:
            how = "drop recall=True" if given else "pass recall=False"
            raise UserError(
                f"a tool is already named {recall_spec.name!r}; with recall on (the default "
                f"with a store) the agent adds its own: rename yours or {how}"
            )
        self.tools[recall_spec.name] = recall_spec

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def with_strategy(
        cls,
        llm: LLM,
        strategy: CompactionStrategy | None = None,
        /,
        *,
        tools: Iterable[ToolLike] = (),
        system_prompt: str | None = None,
        max_steps: int = DEFAULT_MAX_STEPS,
        max_tokens: int | None = None,
        tool_result_truncation: ToolResultTruncation | None = None,
        on_event: Callable[[CompactionEvent], object] | None = None,
        recall: bool | None = None,
        **strategy_options: Unpack[StrategyOptions],
    ) -> Agent:
        """An agent whose controller runs ``strategy`` (``None``: ``LLMSummary`` with
        ``llm``) with the :class:`StrategyOptions` given (window 128,000 and reserve 50,000
        unless given). The other keywords are the agent's own, as in :class:`Agent`.

        Raises:
            UserError: ``recall=True`` or ``recall_placeholder`` with ``store=None``,
                ``recall_placeholder`` with ``recall=False``, two tools of one name.
            ConfigError: Limits that do not fit.

        Example:
            >>> from ctxcompact.strategies import ToolResultHiding
            >>> from ctxcompact.testing import ScriptedLLM
            >>> agent = Agent.with_strategy(ScriptedLLM(), ToolResultHiding(),
            ...                             max_context_size=32_000, reserved_context_size=4_000)
            >>> agent.controller.max_context_size
            32000
        """
        controller = _short_form_controller(llm, strategy, recall=recall, **strategy_options)
        return cls(
            llm,
            controller,
            tools=tools,
            system_prompt=system_prompt,
            max_steps=max_steps,
            max_tokens=max_tokens,
            tool_result_truncation=tool_result_truncation,
            on_event=on_event,
            recall=recall,
        )

    @classmethod
    def from_config(
        cls,
        config: ConfigSource,
        *,
        llm: LLM | None = None,
        tools: Iterable[ToolLike] = (),
        on_event: Callable[[CompactionEvent], object] | None = None,
    ) -> Agent:
        """An agent configured by a TOML file, or a loaded :class:`~ctxcompact.Config`
        (``[agent]``, ``[compaction]``...), built by :func:`ctxcompact.wire`.

        The model is ``llm`` when given, else built from ``[agent.llm]`` or, failing that,
        ``[compaction.llm]``. The strategy named by ``[compaction] strategy`` is loaded with
        ``[compaction.params]`` as keyword arguments and, injected by annotation, the
        summarizing LLM, the token counter (``[token_counting]``) and the config. The
        summarizing LLM is ``[compaction.llm]`` when ``[agent.llm]`` is set too, else the
        agent's own model. The agent keeps removed originals where ``[store]`` says (in
        memory without one; ``enabled = false``: nowhere) and offers the model the recall
        tool whenever it keeps them (``recall = false``: plain markers, no tool). Models and
        the store built here are closed by :meth:`aclose`.

        Raises:
            ConfigError: The file is invalid, or no LLM is given or configured.
            StrategyLoadError: The strategy cannot be loaded.
        """
        wiring = wire(config, llm=llm, agent=True, build_store=True)
        assert wiring.agent_llm is not None  # wire(agent=True) finds one or raises
        settings = wiring.config.agent
        agent = cls(
            wiring.agent_llm,
            wiring.controller(),
            tools=tools,
            system_prompt=settings.system_prompt,
            max_steps=settings.max_steps,
            tool_result_truncation=wiring.arrival_truncation,
            on_event=on_event,
        )
        agent._owned = list(wiring.owned)
        agent._owned_store = wiring.owned_store
        return agent

    # -- events -------------------------------------------------------------------------------

    def _record(self, event: CompactionEvent | None) -> None:
        if event is None:
            return
        compacted = event.status == "compacted"
        self.transcript.append(CompactionRecord(event, tuple(self.history) if compacted else None))
        if self.on_event is not None:
            self.on_event(event)

    async def aclose(self) -> None:
        """Close the models and the store this agent built from a config file (not the ones
        passed in), after cancelling a summary still being made ahead of time."""
        self.controller.state.ahead.cancel()
        owned, self._owned = self._owned, []
        for llm in owned:
            close = getattr(llm, "aclose", None)
            if close is not None:
                await close()
        if self._owned_store:
            self._owned_store = False
            close_store = getattr(self.store, "close", None)
            if close_store is not None:
                close_store()

    async def __aenter__(self) -> Agent:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- the loop -----------------------------------------------------------------------------

    @property
    def tool_specs(self) -> list[ToolSpec]:
        """What the model is told about the tools."""
        return [t.spec for t in self.tools.values()]

    @property
    def messages(self) -> list[Message]:
        """Every message of the transcript (the full, uncompacted conversation)."""
        return [e for e in self.transcript if isinstance(e, Message)]

    def add(self, *messages: Message) -> None:
        """Append messages to the history and the transcript, e.g. to resume a stored
        conversation before the next :meth:`run`."""
        self.history.extend(messages)
        self.transcript.extend(messages)

    async def run(self, user_input: str | Message) -> str:
        """Add the user's input, loop until the model answers, and return the answer's text.

        Raises:
            MaxStepsExceeded: ``max_steps`` model calls were made and the model still asks
                for tools. The history and transcript are complete; ``run`` may be called
                again to go on.
            ContextTooLongError: The provider still refused the request after two forced
                compactions.
            LLMError: Any other provider failure (after the adapter's own retries).
        """
        if self._running:
            raise UserError("this agent is already running; await run() before calling it again")
        self._running = True
        try:
            return await self._run(user_input)
        finally:
            self._running = False

    async def _run(self, user_input: str | Message) -> str:
        message = user_input if isinstance(user_input, Message) else Message.user(user_input)
        self.add(message)
        self.stop_reason = None
        self.steps = 0
        asked_to_continue = False
        while True:
            if self.steps >= self.max_steps:
                self.stop_reason = "max_steps"
                raise MaxStepsExceeded(
                    f"the agent made {self.steps} model calls (max_steps={self.max_steps}) "
                    "and the model is still calling tools; raise max_steps or call run() "
                    "again to continue",
                    steps=self.steps,
                )
            completion = await self.step()
            if completion.message.tool_calls:
                continue
            if completion.finish_reason == "length" and not asked_to_continue:
                asked_to_continue = True
                self.add(Message.user(CONTINUE_PROMPT))
                continue
            self.stop_reason = "length" if completion.finish_reason == "length" else "answer"
            return completion.message.text

    async def step(self) -> Completion:
        """One model call, then the tools it asked for. Returns the model's completion.

        The assistant message and the tool results are added to the history and transcript.
        """
        completion = await self._call_model()
        self.steps += 1
        reply = completion.message
        self.add(reply)
        self.controller.observe_usage(completion.usage, self.history)
        if reply.tool_calls:
            self._add_results(await self._run_tools_answering_all(reply.tool_calls))
        return completion

    async def _call_model(self) -> Completion:
        error: ContextTooLongError | None = None
        for _ in range(MAX_CONTEXT_RETRIES + 1):
            step = await self.controller.step(
                self.history,
                max_output_tokens=self.max_tokens,
                force=error is not None,
                tools=self.tool_specs or None,
            )
            if step.compacted:
                self.history = list(step.history)
            self._record(step.event)
            if error is not None and not step.compacted:
                # The forced compaction could not shrink the history: the same request
                # would be refused again.
                raise error
            try:
                return await self.llm.complete(
                    step.request, tools=self.tool_specs or None, max_tokens=self.max_tokens
                )
            except ContextTooLongError as exc:
                # Reactive trigger: the provider knows its window better than our estimate.
                error = exc
        assert error is not None
        raise error

    async def _run_tools_answering_all(self, calls: Sequence[ToolCall]) -> list[Message]:
        tasks = [asyncio.ensure_future(self._run_one(c)) for c in calls]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            # Cancelled mid-tools: still answer every call (finished ones with their result),
            # so the history stays valid for the next run instead of holding unanswered calls.
            for task in tasks:
                task.cancel()
            self._add_results(
                [
                    t.result() if t.done() and not t.cancelled() else _cancelled(c)
                    for t, c in zip(tasks, calls, strict=True)
                ]
            )
            raise

    async def _run_one(self, call: ToolCall) -> Message:
        tool = self.tools.get(call.name)
        if tool is None:
            known = ", ".join(sorted(self.tools)) or "none"
            result = ToolResult(
                f"{ERROR_PREFIX}unknown tool {call.name!r}; the available tools are: {known}",
                is_error=True,
            )
        else:
            result = await tool.call(call.arguments)
        if result.is_error:
            return _error_result(call, result.text)
        return Message.tool(call.id, result.text)

    def _add_results(self, results: Sequence[Message]) -> None:
        # The transcript keeps each result whole (it is the record for storage); the history
        # gets it truncated on arrival when configured, since that is what the model sees.
        self.transcript.extend(results)
        truncation = self.tool_result_truncation
        if truncation is None:
            self.history.extend(results)
            return
        start = len(self.history)
        cut = [truncation.truncate_message(m) for m in results]
        if self.store is not None:
            # The cut copies are not originals: the store keeps the whole ones instead, and
            # with recall their markers name the handle to recall them with.
            kept = store_cut_results(
                self.store,
                self.controller.store_namespace,
                start,
                results,
                cut,
                history=self.history,
                recall=self.controller.recall,
            )
            cut = cut if kept is None else kept
            self.controller.state.produced.add(results, cut)
        self.history.extend(cut)


def _error_result(call: ToolCall, text: str) -> Message:
    # Flagged for Anthropic's is_error (the OpenAI wire format never carries this key) and
    # for the strategies that keep error results (Message.is_error).
    return Message(role="tool", tool_call_id=call.id, content=text, anthropic={"is_error": True})


def _cancelled(call: ToolCall) -> Message:
    return _error_result(
        call, f"{ERROR_PREFIX}the call to {call.name!r} was cancelled before it finished"
    )


def _refuse_beside(
    controller: CompactionController,
    strategy: CompactionStrategy | None,
    options: StrategyOptions,
) -> None:
    """A ready controller has its strategy and limits: refuse them given again."""
    clash = ["compaction"] if strategy is not None else []
    clash += [k for k, v in options.items() if v is not None and (k != "transforms" or v)]
    if clash:
        raise UserError(
            f"pass either controller= or {', '.join(clash)}, not both: the controller "
            "already has its strategy and limits"
        )
