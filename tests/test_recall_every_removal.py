"""Nothing lost for good: every kind of removal leaves a marker naming its handle, and recall
brings back exactly what was removed (issue 20). Every check does the recalls, as a model
would, through the recall executor; none asks the store whether it holds an id."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest

from ctxcompact import (
    Agent,
    CompactionContext,
    CompactionController,
    Message,
    ToolCall,
    check_history,
    from_openai,
    load_config,
)
from ctxcompact.exceptions import ConfigError
from ctxcompact.kit import HIDDEN_PLACEHOLDER
from ctxcompact.replay import RecallCheck
from ctxcompact.store import (
    DEFAULT_MEMORY_STORE_BYTES,
    DEFAULT_RECALL_TEMPLATE,
    MemoryStore,
    StoredOriginal,
    execute_recall,
    recall_whole,
    removed_originals,
)
from ctxcompact.strategies import ContextGuard, ToolInputClearing, ToolResultHiding
from ctxcompact.testing import FunctionStrategy, ScriptedLLM

from .helpers.gen import assistant, call, system, tool, user
from .helpers.traces import load_trace

NAMED = re.compile(r'recall_tool_result\(\\?"([^"\\]+)\\?"')


def recall_controller(strategy: object, **kwargs: object) -> CompactionController:
    """A controller with the defaults: its own bounded store, and recall on."""
    kwargs.setdefault("max_context_size", 2_000)
    kwargs.setdefault("reserved_context_size", 0)
    return CompactionController(
        strategy,  # type: ignore[arg-type]
        **kwargs,  # type: ignore[arg-type]
    )


# -- byte for byte ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "ends with a newline\n",
        "two\n\n",
        "crlf\r\nlines\r\n",
        "lone\rcarriage return",
        "x" * 45_000,  # one line over 20,000 characters: reachable piece by piece
        "head\n" + "y" * 30_001 + "\ntail\n",
        "",
    ],
    ids=["newline", "blank-lines", "crlf", "cr", "long-line", "long-middle", "empty"],
)
def test_recall_returns_the_original_byte_for_byte(text: str) -> None:
    store = MemoryStore()
    store.put(StoredOriginal.from_message(Message.tool("c1", text), position=3, kind="hidden"))
    assert recall_whole(store, "c1") == text


def test_a_long_line_says_where_to_go_on_and_char_offset_continues_it() -> None:
    store = MemoryStore()
    line = "".join(chr(ord("a") + k % 26) for k in range(25_000))
    store.put(StoredOriginal.from_message(Message.tool("c1", line), position=1, kind="hidden"))
    first = execute_recall(store, {"tool_call_id": "c1"})
    assert "offset=1 and char_offset=20001" in first
    second = execute_recall(store, {"tool_call_id": "c1", "offset": 1, "char_offset": 20_001})
    assert second.splitlines()[1] == "1 (from char 20001): " + line[20_000:]


def test_an_unknown_or_evicted_handle_gets_a_sentence_not_an_error() -> None:
    answer = execute_recall(MemoryStore(), {"tool_call_id": "gone_1"})
    assert not answer.startswith("Error")
    assert "'gone_1'" in answer
    assert "cannot be recalled" in answer


# -- cleared arguments ---------------------------------------------------------------------------


def written(n: int) -> ToolCall:
    body = f"def f{n}():\r\n" + "    return 1\n" * 40
    return call(f"w{n}", "write_file", json.dumps({"path": f"f{n}.py", "content": body}))


def clearing_history() -> list[Message]:
    out = [user("write the files")]
    for n in range(4):
        out += [assistant(None, written(n)), tool(f"w{n}", "ok")]
    return [*out, assistant("done")]


async def test_cleared_arguments_name_their_handle_and_recall_returns_the_arguments() -> None:
    history = clearing_history()
    controller = recall_controller(ToolInputClearing(keep_recent=1, min_chars=31))
    result = await controller.compact(history, force=True)
    assert result.changed
    assert check_history(result.history) == []
    cleared = [r for r in removed_originals(history, result.history) if r.kind == "cleared"]
    assert [r.handle for r in cleared] == ["args:w0", "args:w1", "args:w2"]
    check = RecallCheck(controller.store)  # type: ignore[arg-type]
    for removal in cleared:
        assert removal.call is not None
        shown = result.history[removal.position].tool_calls
        assert shown is not None
        assert f'recall_tool_result(\\"{removal.handle}\\")' in shown[0].arguments
        assert recall_whole(controller.store, removal.handle) == removal.call.arguments
        assert check.comes_back(removal, result.history)


async def test_arguments_cleared_then_dropped_are_named_by_the_drop_and_come_back() -> None:
    # Issue 20, found on the tiered recommended configuration: a call cleared by one
    # compaction and dropped by a later one was listed under a digest of its cleared text,
    # which names nothing the store holds. A call the clearing left whole, in the same
    # message, was never stored at all.
    listed = call("s0", "ls", json.dumps({"path": "."}))
    history = [
        user("write the files"),
        assistant(None, written(0), listed),
        tool("w0", "ok"),
        tool("s0", "a.py b.py"),
        assistant(None, written(1)),
        tool("w1", "ok"),
        assistant(None, written(2)),
        tool("w2", "ok"),
        assistant("done"),
    ]
    clearing = ToolInputClearing(keep_recent=1, min_chars=31)

    def clear_then_drop(ctx: CompactionContext) -> object:
        if len(clear_then_drop.calls) == 1:  # type: ignore[attr-defined]
            return clearing.compact(ctx)
        return [ctx.history[0], *ctx.history[6:]]  # the two oldest steps go

    strategy = FunctionStrategy(clear_then_drop)
    clear_then_drop.calls = strategy.calls  # type: ignore[attr-defined]
    controller = recall_controller(strategy)
    first = await controller.compact(history, force=True)
    cleared = first.history[1].tool_calls
    assert cleared is not None
    assert 'recall_tool_result(\\"args:w0\\")' in cleared[0].arguments
    assert cleared[1].arguments == listed.arguments  # left whole
    second = await controller.compact(first.history, force=True)
    assert second.changed
    assert check_history(second.history) == []
    view = second.history
    removals = removed_originals(history, view)
    arguments = {r.handle for r in removals if r.call is not None}
    assert {"args:w0", "args:s0", "args:w1"} <= arguments
    check = RecallCheck(controller.store)  # type: ignore[arg-type]
    assert check.lost(removals, view) == []
    assert recall_whole(controller.store, "args:w0") == written(0).arguments
    assert recall_whole(controller.store, "args:s0") == listed.arguments


# -- the guard's drops ----------------------------------------------------------------------------


def long_task() -> list[Message]:
    out = [system("be brief"), user("TASK: fix the parser, keep the tests green")]
    for n in range(12):
        out += [
            assistant(f"step {n}", call(f"c{n}", "Read" if n % 2 else "Bash")),
            tool(f"c{n}", f"result {n}\n" + "z" * 600 + "\n"),
        ]
    return [*out, user("continue"), assistant("ok")]


async def test_the_guards_note_names_the_dropped_results_and_each_comes_back() -> None:
    history = long_task()
    controller = recall_controller(ContextGuard(), max_context_size=1_500)
    result = await controller.compact(history, force=True)
    assert result.changed
    assert check_history(result.history) == []
    view = result.history
    removals = removed_originals(history, view)
    dropped = [r for r in removals if r.kind == "dropped"]
    assert dropped, "the guard dropped nothing: the test needs a smaller window"
    notes = [m.text for m in view if "earlier message(s) were dropped" in m.text]
    assert len(notes) == 1
    assert re.search(r'recall_tool_result\("#r[0-9a-f]{10}"\) lists them; results: ', notes[0])
    check = RecallCheck(controller.store)  # type: ignore[arg-type]
    assert check.lost(removals, view) == []
    # The note is short: it costs far less than what it freed.
    freed = sum(len(r.original) for r in dropped)
    assert len(notes[0]) < freed / 10


async def test_the_guard_keeps_the_task_and_the_newest_user_message() -> None:
    history = long_task()
    out = await ContextGuard().compact(CompactionContext(history, 0, 1_200, 0))
    assert out is not None
    texts = [m.text for m in out]
    assert any(t.startswith("TASK: fix the parser") for t in texts)
    assert any(t.startswith("continue") for t in texts)


@pytest.mark.parametrize("window", [8_000, 16_000, 32_000])
async def test_on_a_real_trace_the_guard_keeps_the_first_and_newest_user_message(
    window: int,
) -> None:
    history = from_openai(load_trace("claudecode__4d5611e5__precompact"))
    users = [m for m in history if m.role == "user" and m.text.strip()]
    out = await ContextGuard().compact(
        CompactionContext(history, 0, window, window // 4, max_output_tokens=None)
    )
    assert out is not None
    kept = {id(m) for m in out}
    texts = [m.text for m in out]
    for pinned in (users[0], users[-1]):
        assert id(pinned) in kept or any(t.startswith(pinned.text[:200]) for t in texts)


async def test_an_answer_the_guard_cut_and_a_later_run_dropped_comes_back_whole() -> None:
    # The pins (the task) and the newest answer do not fit together: the guard cuts the answer
    # (not pinned) head + tail, naming its handle. A later run drops the cut copy: the range
    # must list the original's handle, not the cut copy's, and recall must return it whole.
    task = user("Refactor the parser. " + "Keep the public API. " * 80)
    answer = assistant("THOUGHT: " + "".join(f"step {k} of the plan.\n" for k in range(500)))
    history = [system("s"), task, answer]
    controller = recall_controller(ContextGuard())
    first = await controller.compact(history, force=True)
    assert first.changed
    cut = first.history[-1]
    assert first.history[1] is task  # the pin stays whole
    assert 'recall_tool_result("#' in cut.text
    assert len(cut.text) < len(answer.text)
    later = [*first.history, user("go on"), assistant("step " * 1_500)]
    second = await controller.compact(later, force=True)
    assert second.changed
    assert not any(m is cut for m in second.history)  # the cut copy was dropped
    whole = [*history, *later[len(first.history) :]]
    removals = removed_originals(whole, second.history)
    assert any(r.message is answer for r in removals)
    assert controller.store is not None
    assert RecallCheck(controller.store).lost(removals, second.history) == []


# -- eviction ---------------------------------------------------------------------------------


async def test_a_marker_never_promises_what_the_store_evicted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    history = long_task()
    store = MemoryStore(max_bytes=1_500)  # holds about one original
    controller = recall_controller(ContextGuard(), max_context_size=1_500, store=store)
    with caplog.at_level(logging.WARNING, logger="ctxcompact.controller"):
        result = await controller.compact(history, force=True)
    assert result.changed
    problem = result.store_problem
    assert problem is not None
    assert problem.kind == "store_evicted"
    assert "evicted" in caplog.text
    assert "z" * 50 not in caplog.text
    for message in result.history:
        for text in (message.text, *(c.arguments for c in message.tool_calls or ())):
            for handle in NAMED.findall(text):
                answer = execute_recall(store, {"tool_call_id": handle})
                assert "cannot be recalled" not in answer, f"{handle} is promised but gone"


def hiding_steps(first: int, last: int) -> list[Message]:
    out: list[Message] = []
    for n in range(first, last):
        out += [assistant(None, call(f"h{n}", "cat")), tool(f"h{n}", f"file {n}\n" + "y" * 600)]
    return out


def promised_handles(view: list[Message]) -> set[str]:
    return {
        handle
        for message in view
        for text in (message.text, *(c.arguments for c in message.tool_calls or ()))
        for handle in NAMED.findall(text)
    }


async def test_a_later_eviction_takes_back_the_promise_an_earlier_marker_made(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The first compaction's markers name originals the store held then; the second one's
    # write evicts them: the view it returns must not promise them any more.
    store = MemoryStore(max_bytes=2_800)  # about three originals
    controller = recall_controller(
        ToolResultHiding(preserve_recent_n=1), max_context_size=100, store=store
    )
    first = await controller.compact([user("task"), *hiding_steps(0, 4)], force=True)
    assert first.store_problem is None
    early = promised_handles(first.history)
    assert early >= {"h0", "h1", "h2"}
    grown = [*first.history, *hiding_steps(4, 8)]
    with caplog.at_level(logging.WARNING, logger="ctxcompact.controller"):
        second = await controller.compact(grown, force=True)
    assert second.store_problem is not None
    assert second.store_problem.kind == "store_evicted"
    assert "evicted" in caplog.text
    assert check_history(second.history) == []
    promised = promised_handles(second.history)
    assert promised, "nothing is promised any more: the test needs a larger bound"
    for handle in promised:
        answer = execute_recall(store, {"tool_call_id": handle})
        assert "cannot be recalled" not in answer, f"{handle} is promised but gone"
    withdrawn = early - promised
    assert withdrawn, "no earlier marker was taken back: the test needs a smaller bound"
    for handle in withdrawn:  # its plain placeholder stands, and a recall says it is gone
        assert "cannot be recalled" in execute_recall(store, {"tool_call_id": handle})
    assert sum(m.text == HIDDEN_PLACEHOLDER for m in second.history) >= len(withdrawn)


# -- pins -------------------------------------------------------------------------------------


async def test_a_summary_that_loses_a_pinned_rule_gets_it_back_and_says_so() -> None:
    rules = user("## Rules\n1. never push to main\n2. tests first")
    history = [system("s"), user("task"), rules]
    for n in range(6):
        history += [assistant(None, call(f"c{n}")), tool(f"c{n}", "r" * 400)]
    history += [user("go on"), assistant("ok")]

    def summarise(ctx: CompactionContext) -> list[Message]:
        h = ctx.history
        return [h[0], h[1], Message.user("[summary] worked on it"), *h[-2:]]

    controller = CompactionController(
        FunctionStrategy(summarise),
        max_context_size=500,
        reserved_context_size=0,
        pin_patterns=["## Rules"],
    )
    result = await controller.compact(history, force=True)
    assert result.changed
    assert check_history(result.history) == []
    assert any(m is rules for m in result.history)
    assert result.event is not None
    kinds = [p.kind for p in result.event.problems]
    assert kinds == ["pin_restored"]


# -- the default store -------------------------------------------------------------------------


def test_the_controller_and_the_agent_keep_originals_in_memory_by_default() -> None:
    controller = CompactionController(
        ContextGuard(), max_context_size=1_000, reserved_context_size=0
    )
    assert isinstance(controller.store, MemoryStore)
    assert controller.store.max_bytes == DEFAULT_MEMORY_STORE_BYTES
    assert (
        CompactionController(
            ContextGuard(), max_context_size=1_000, reserved_context_size=0, store=None
        ).store
        is None
    )
    agent = Agent(ScriptedLLM(), compaction=ContextGuard())
    assert isinstance(agent.store, MemoryStore)
    assert Agent(ScriptedLLM(), compaction=ContextGuard(), store=None).store is None


async def test_by_default_markers_name_their_handles_and_the_agent_offers_recall() -> None:
    history = long_task()
    controller = CompactionController(
        ContextGuard(), max_context_size=1_500, reserved_context_size=0
    )
    assert controller.recall
    assert controller.recall_placeholder == DEFAULT_RECALL_TEMPLATE
    result = await controller.compact(history, force=True)
    assert result.changed
    removals = removed_originals(history, result.history)
    assert [r for r in removals if r.kind == "dropped"]
    assert controller.store is not None
    assert RecallCheck(controller.store).lost(removals, result.history) == []
    agent = Agent(ScriptedLLM(), compaction=ContextGuard())
    assert agent.recall
    assert "recall_tool_result" in [s.name for s in agent.tool_specs]
    for off in (
        Agent(ScriptedLLM(), compaction=ContextGuard(), recall=False),
        Agent(ScriptedLLM(), compaction=ContextGuard(), store=None),
    ):
        assert not off.recall
        assert not off.controller.recall
        assert "recall_tool_result" not in [s.name for s in off.tool_specs]


async def test_without_recall_markers_stay_plain_but_originals_are_kept() -> None:
    # recall=False: the off switch keeps the originals and the strategies' plain markers.
    history = long_task()
    controller = CompactionController(
        ContextGuard(), max_context_size=1_500, reserved_context_size=0, recall=False
    )
    result = await controller.compact(history, force=True)
    assert result.changed
    assert not any("recall_tool_result" in m.text for m in result.history)
    dropped = [r for r in removed_originals(history, result.history) if r.kind == "dropped"]
    assert dropped
    tool_results = [r for r in dropped if r.message.role == "tool"]
    assert tool_results
    for removal in tool_results:
        assert recall_whole(controller.store, removal.handle) == removal.original


def test_pin_patterns_come_from_toml_and_a_bad_one_names_its_key(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        '[compaction]\nstrategy = "context-guard"\nmax_context_size = 8000\n'
        'reserved_context_size = 1000\npin_patterns = ["## Rules", "never (push|merge)"]\n'
    )
    controller = CompactionController.from_config(path)
    assert controller.pin_rules(Message.user("## Rules\n1. tests first"))
    assert controller.pin_rules(Message.user("we never merge on friday"))
    assert not controller.pin_rules(Message.user("hello"))
    path.write_text(
        '[compaction]\nstrategy = "context-guard"\nmax_context_size = 8000\n'
        'reserved_context_size = 1000\npin_patterns = ["(unclosed"]\n'
    )
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.key is not None
    assert "pin_patterns" in info.value.key
