"""No log record at INFO or above carries conversation content, anywhere in the library.

A canary string is planted everywhere content can come from: message text, tool names,
tool-call ids, tool results, and the messages of the exceptions a third-party strategy,
transform, summarizer, tool or store raises (a real one may build them from the history).
Then the controller, the built-in strategies and the agent run through every path that logs
(failures, rejections, an open circuit, a store that fails, a summary that fails, a context
guard that drops and cuts), and every record at INFO or above, its traceback included, is
searched for the canary. The detail stays available at DEBUG: the same runs must log the
canary there, or the test would pass for want of reaching the code that logs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest

from ctxcompact import (
    Agent,
    CompactionContext,
    CompactionController,
    HeuristicTokenCounter,
    Message,
    Tool,
)
from ctxcompact.exceptions import CompactionError, ContextTooLongError, ServerError, StoreError
from ctxcompact.store import MemoryStore, StoredOriginal
from ctxcompact.strategies import (
    ContextGuard,
    HidingThenSummary,
    LLMSummary,
    Schema1Masking,
    ToolInputClearing,
    ToolResultHiding,
    ToolResultTruncation,
)
from ctxcompact.testing import FunctionStrategy, ScriptedLLM
from tests.helpers.gen import assistant, call, tool, user

CANARY = "CANARY-7f3a"


def canary_history(turns: int = 8, result_chars: int = 1_500) -> list[Message]:
    """A history whose every text, tool name and tool-call id carries the canary."""
    history = [user(f"please fix the bug {CANARY}")]
    for k in range(turns):
        cid = f"{CANARY}-call-{k}"
        args = f'{{"path": "{CANARY}/{k}.py", "text": "{CANARY * 20}"}}'
        history.append(assistant(f"looking {CANARY}", call(cid, f"{CANARY}_tool", args)))
        history.append(tool(cid, f"{CANARY} " + "x" * result_chars))
    history.append(assistant(f"done {CANARY}"))
    return history


@pytest.fixture
def loud(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """Every record, DEBUG included; checked after the test: nothing at INFO or above has
    the canary, and something at DEBUG has it."""
    caplog.set_level(logging.DEBUG)
    return caplog


def assert_no_canary_above_debug(
    caplog: pytest.LogCaptureFixture, *, detail_at_debug: bool = True
) -> None:
    """No record at INFO or above (traceback included) has the canary; with
    ``detail_at_debug``, a DEBUG record has it (an exception that quoted it was logged)."""
    formatter = logging.Formatter("%(message)s")
    above = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert above, "nothing was logged at INFO or above: the paths were not reached"
    leaks = [formatter.format(r) for r in above if CANARY in formatter.format(r)]
    assert not leaks
    if detail_at_debug:
        debug = [formatter.format(r) for r in caplog.records if r.levelno == logging.DEBUG]
        assert any(CANARY in line for line in debug), "the detail must stay at DEBUG"


def raising(exc: BaseException) -> FunctionStrategy:
    def fail(ctx: CompactionContext) -> None:
        raise exc

    return FunctionStrategy(fail, name="third_party")


def orphaning(ctx: CompactionContext) -> list[Message]:
    """Drops the assistant messages: every tool result left is an orphan (an invalid output)."""
    return [m for m in ctx.history if m.role != "assistant"]


class FailingStore(MemoryStore):
    """A store that raises with the content of what it was given in the message."""

    def __init__(self, exc_type: type[Exception]) -> None:
        super().__init__()
        self.exc_type = exc_type

    def put(self, *records: StoredOriginal) -> None:
        raise self.exc_type(f"cannot keep {records[0].content!r} {CANARY}")


def controller(strategy: object, **options: object) -> CompactionController:
    return CompactionController(
        strategy,  # type: ignore[arg-type]
        max_context_size=4_000,
        reserved_context_size=1_000,
        max_failures=2,
        **options,  # type: ignore[arg-type]
    )


# -- the controller ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "exc",
    [RuntimeError(f"cannot summarize {CANARY}"), CompactionError(f"refused {CANARY}")],
    ids=["third-party", "ctxcompact"],
)
async def test_a_raising_strategy_and_the_open_circuit_log_no_content(
    loud: pytest.LogCaptureFixture, exc: Exception
) -> None:
    c = controller(raising(exc))
    history = canary_history()
    for _ in range(3):  # fails twice, opens the circuit, then refuses
        result = await c.compact(history)
    assert result.event is not None
    assert result.event.status == "circuit_open"
    assert_no_canary_above_debug(loud)


async def test_a_rejected_output_logs_no_content(loud: pytest.LogCaptureFixture) -> None:
    c = controller(FunctionStrategy(orphaning))
    result = await c.compact(canary_history())
    assert result.event is not None
    assert result.event.status == "rejected"
    assert CANARY in (result.event.error or "")  # the ids the validator names: API only
    assert_no_canary_above_debug(loud)


async def test_failing_transforms_log_no_content(loud: pytest.LogCaptureFixture) -> None:
    c = controller(
        ToolResultHiding(),
        transforms=[raising(KeyError(CANARY)), FunctionStrategy(orphaning, name="orphaning")],
    )
    prepared = await c.prepare(canary_history())
    assert len(prepared.transform_problems) == 2
    assert_no_canary_above_debug(loud)


@pytest.mark.parametrize("exc_type", [RuntimeError, StoreError])
async def test_a_failing_store_logs_no_content(
    loud: pytest.LogCaptureFixture, exc_type: type[Exception]
) -> None:
    c = controller(ToolResultHiding(preserve_recent_n=1), store=FailingStore(exc_type))
    result = await c.compact(canary_history())
    assert result.changed
    assert result.store_problem is not None
    assert_no_canary_above_debug(loud)


# -- the built-in strategies ------------------------------------------------------------------


async def test_a_failed_summary_after_hiding_logs_no_content(
    loud: pytest.LogCaptureFixture,
) -> None:
    llm = ScriptedLLM(ServerError(f"upstream echoed {CANARY}", status_code=502))
    c = controller(HidingThenSummary(llm, preserve_recent_n=1, max_summary_tokens=200), llm=llm)
    # Over the trigger, and hiding (small results) is not enough: the summary is asked.
    history = [*canary_history(turns=3, result_chars=40), user(CANARY * 1200)]
    result = await c.compact(history)
    assert result.changed  # the hiding stands
    assert_no_canary_above_debug(loud)


async def test_a_summarizer_refusing_the_input_as_too_long_logs_no_content(
    loud: pytest.LogCaptureFixture,
) -> None:
    too_long = ContextTooLongError(f"prompt is too long: {CANARY}", status_code=400)
    llm = ScriptedLLM(too_long, "The user asked for a fix; the files were read.")
    c = controller(LLMSummary(llm, max_summary_tokens=200), llm=llm)
    result = await c.compact(canary_history())
    assert result.changed
    assert len(llm.requests) == 2  # refused as too long, then asked with half the input
    assert_no_canary_above_debug(loud)


async def test_a_failing_summarizer_logs_no_content(loud: pytest.LogCaptureFixture) -> None:
    llm = ScriptedLLM(ServerError(f"upstream echoed {CANARY}", status_code=503))
    c = controller(LLMSummary(llm, max_summary_tokens=200), llm=llm)
    result = await c.compact(canary_history())
    assert result.event is not None
    assert result.event.status == "failed"
    assert result.event.problems[0].exception_type == "ServerError"
    assert_no_canary_above_debug(loud)


@pytest.mark.parametrize(
    "strategy",
    [
        ToolResultHiding(preserve_recent_n=1),
        Schema1Masking(),
        ToolResultTruncation(max_chars=100, head_chars=20, tail_chars=20),
        ContextGuard(context_window=4_000, reserve_tokens=1_000),
        ToolInputClearing(keep_recent=1, min_chars=200),
    ],
    ids=lambda s: type(s).__name__,
)
async def test_each_built_in_strategy_logs_no_content(
    loud: pytest.LogCaptureFixture, strategy: object
) -> None:
    c = controller(
        strategy,
        transforms=[ContextGuard(context_window=4_000, reserve_tokens=1_000)],
        token_counter=HeuristicTokenCounter(),
    )
    history = canary_history(turns=10, result_chars=3_000)  # over the guard's budget
    step = await c.step(history)
    assert step.request != history
    assert_no_canary_above_debug(loud, detail_at_debug=False)  # no exception here


# -- the agent --------------------------------------------------------------------------------


async def test_the_agent_logs_no_content(loud: pytest.LogCaptureFixture) -> None:
    def canary_tool(path: str) -> str:
        """Reads a file."""
        raise OSError(f"no such file {path} {CANARY}")

    spec = Tool(canary_tool, name=f"{CANARY}_read")
    calls: Sequence[Message] = [
        assistant(None, call(f"{CANARY}-{k}", spec.name, f'{{"path": "{CANARY}"}}'))
        for k in range(4)
    ]
    llm = ScriptedLLM(*calls, f"finished {CANARY}")
    agent = Agent(
        llm,
        tools=[spec],
        compaction=raising(RuntimeError(f"cannot compact {CANARY}")),
        max_context_size=300,
        reserved_context_size=100,
        transforms=[raising(ValueError(CANARY))],
        store=FailingStore(RuntimeError),
    )
    assert await agent.run(f"read the files {CANARY}") == f"finished {CANARY}"
    assert_no_canary_above_debug(loud)
