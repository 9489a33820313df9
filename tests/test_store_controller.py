"""CompactionController with an originals store: every removal recorded, recall placeholders,
and a failing store that never blocks a compaction."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from ctxcompact import (
    CompactionContext,
    CompactionController,
    ControllerState,
    Message,
    check_history,
)
from ctxcompact.exceptions import ConfigError, StoreError, UserError
from ctxcompact.store import (
    DEFAULT_RECALL_TEMPLATE,
    MemoryStore,
    SQLiteStore,
    StoredOriginal,
    execute_recall,
    recall_placeholder,
)
from ctxcompact.strategies import ContextGuard, Schema1Masking, ToolResultHiding
from ctxcompact.testing import FunctionStrategy

from .helpers.gen import assistant, call, system, tool, user

SECRET = "SECRET-CONTENT-7f3a"


def big(n: int) -> str:
    return f"{SECRET} line {n}\n" + "\n".join(f"row {n}.{k}: {'x' * 40}" for k in range(40))


def history(turns: int = 4) -> list[Message]:
    """A system prompt, a user turn, then ``turns`` tool turns with big results."""
    out = [system("be brief"), user("inspect the repo")]
    for n in range(turns):
        out += [assistant(None, call(f"c{n}", "cat")), tool(f"c{n}", big(n))]
    return [*out, assistant("done")]


def snapshot(messages: Sequence[Message]) -> list[dict[str, Any]]:
    return [m.model_dump() for m in messages]


def controller(store: Any = None, **kwargs: Any) -> CompactionController:
    kwargs.setdefault("max_context_size", 2_000)
    kwargs.setdefault("reserved_context_size", 100)
    strategy = kwargs.pop("strategy", ToolResultHiding(preserve_recent_n=1))
    return CompactionController(strategy, store=store, **kwargs)


def assert_recallable(store: Any, original: Message) -> None:
    assert original.tool_call_id is not None
    record = store.get("default", original.tool_call_id)
    assert record is not None
    assert record.message == original


# -- recording ------------------------------------------------------------------------------


async def test_every_hidden_result_is_recorded_and_comes_back_equal() -> None:
    store = MemoryStore()
    before = history()
    frozen = snapshot(before)
    result = await controller(store).compact(before)
    assert result.changed
    assert result.store_error is None
    assert snapshot(before) == frozen, "the input history was mutated"
    assert check_history(result.history) == []
    hidden = [i for i, (a, b) in enumerate(zip(before, result.history, strict=True)) if a is not b]
    assert hidden == [3, 5, 7]  # every tool turn but the newest
    for i in hidden:
        assert_recallable(store, before[i])
    assert store.get("default", "c3") is None  # kept: nothing to recall


async def test_the_store_namespace_keeps_conversations_apart() -> None:
    store = MemoryStore()
    await controller(store, store_namespace="alice").compact(history())
    assert store.get("alice", "c0") is not None
    assert store.get("default", "c0") is None


async def test_originals_survive_in_a_real_sqlite_file(tmp_path: Path) -> None:
    path = tmp_path / "originals.db"
    before = history()
    with SQLiteStore(path) as store:
        result = await controller(store).compact(before)
        assert result.changed
    with SQLiteStore(path) as reopened:
        assert_recallable(reopened, before[3])
        text = execute_recall(reopened, {"tool_call_id": "c0", "pattern": "SECRET"})
        assert f"1: {SECRET} line 0" in text


async def test_no_store_no_recording_and_the_result_is_the_strategys_own() -> None:
    # recall=False is the switch that keeps the originals without changing what the model is
    # sent (recall is on by default with a store, and then the placeholders name the tool).
    before = history()
    store = MemoryStore()
    with_store = await controller(store, recall=False).compact(before)
    without = await controller().compact(before)
    assert [m.text for m in with_store.history] == [m.text for m in without.history]
    assert_recallable(store, before[3])
    recalled = await controller(MemoryStore()).compact(before)
    assert recalled.history[3].text == recall_placeholder("c0")


async def test_what_the_transforms_remove_is_recorded_and_the_stored_history_kept() -> None:
    store = MemoryStore()
    ctl = controller(
        store,
        max_context_size=100_000,
        transforms=[Schema1Masking(window_turns=1, always=True)],
    )
    before = history()
    frozen = snapshot(before)
    prepared = await ctl.prepare(before)
    assert prepared.store_error is None
    assert snapshot(before) == frozen
    masked = [i for i, m in enumerate(prepared.messages) if m is not before[i]]
    assert masked == [3, 5, 7]
    for i in masked:
        assert_recallable(store, before[i])


async def test_a_guard_dropping_turns_records_them_as_dropped(tmp_path: Path) -> None:
    before = [system("s")]
    for n in range(6):
        before += [user(f"q{n}"), assistant(None, call(f"g{n}", "cat")), tool(f"g{n}", big(n))]
    before.append(user("last"))
    with SQLiteStore(tmp_path / "o.db") as store:
        ctl = controller(
            store,
            max_context_size=3_000,
            transforms=[ContextGuard(context_window=3_000, reserve_tokens=200)],
        )
        prepared = await ctl.prepare(before)
        assert len(prepared.messages) < len(before)
        kept = {m.tool_call_id for m in prepared.messages if m.role == "tool"}
        dropped = [m for m in before if m.role == "tool" and m.tool_call_id not in kept]
        assert dropped
        for message in dropped:
            assert_recallable(store, message)
            record = store.get("default", message.tool_call_id or "")
            assert record is not None
            assert record.kind == "dropped"


async def test_recording_is_not_counted_in_the_strategys_duration() -> None:
    class SlowStore(MemoryStore):
        def put(self, *records: StoredOriginal) -> None:
            time.sleep(0.05)
            super().put(*records)

    result = await controller(SlowStore()).compact(history())
    assert result.event is not None
    assert result.changed
    assert result.event.duration_s < 0.05


# -- recall placeholders --------------------------------------------------------------------


async def test_with_recall_hidden_results_name_the_tool_and_their_id() -> None:
    store = MemoryStore()
    ctl = controller(store, recall_placeholder='[gone: recall_tool_result("{tool_call_id}")]')
    before = history()
    result = await ctl.compact(before)
    texts = {m.tool_call_id: m.text for m in result.history if m.role == "tool"}
    assert texts["c0"] == '[gone: recall_tool_result("c0")]'
    assert texts["c3"] == before[-2].text  # the newest turn is kept
    assert check_history(result.history) == []
    assert "c0" in execute_recall(store, {"tool_call_id": "c0", "limit": 1})


async def test_recall_placeholders_are_stable_and_never_stored_as_originals() -> None:
    store = MemoryStore()
    ctl = controller(store, recall_placeholder=DEFAULT_RECALL_TEMPLATE)
    before = history()
    first = await ctl.compact(before)
    # Hiding runs again on its own output: the recall placeholders it would hide again are
    # put back, so nothing changes and nothing but originals is in the store.
    second = await ctl.compact(first.history, force=True)
    assert second.event is not None
    assert second.event.status == "noop"
    assert second.history is first.history
    for i in (3, 5, 7):
        assert_recallable(store, before[i])


async def test_a_later_compaction_dropping_placeholders_does_not_shadow_originals() -> None:
    store = MemoryStore()
    before = history()
    hiding = controller(store)
    first = await hiding.compact(before)

    def drop_old_turns(ctx: CompactionContext) -> list[Message]:
        h = list(ctx.history)
        return [h[0], h[1], *h[6:]]  # the first two tool turns go, with their placeholders

    dropping = controller(store, strategy=FunctionStrategy(drop_old_turns))
    dropping.state = hiding.state  # the same conversation
    second = await dropping.compact(first.history, force=True)
    assert second.changed
    for i in (3, 5):
        assert_recallable(store, before[i])  # the original, not the placeholder


async def test_a_result_shorter_than_the_recall_text_is_kept_whole() -> None:
    store = MemoryStore()
    short = "x" * 60  # hiding would hide it; the recall text is longer
    before = [user("go"), assistant(None, call("s1", "ls")), tool("s1", short)]
    before += [assistant(None, call("s2", "ls")), tool("s2", big(2)), assistant("ok")]
    ctl = controller(
        store,
        strategy=ToolResultHiding(preserve_recent_n=0),
        recall_placeholder="[result hidden: call recall_tool_result with {tool_call_id} "
        "(tool {tool_name}) to read it again]",
    )
    result = await ctl.compact(before, force=True)
    assert result.changed
    assert result.history[2] is before[2]  # whole in the view: nothing to recall
    assert "call recall_tool_result with s2 (tool ls)" in result.history[4].text


async def test_a_strategys_own_recall_text_is_kept() -> None:
    own = 'stale listing; recall_tool_result("c0") has it'

    def hide_first(ctx: CompactionContext) -> list[Message]:
        h = list(ctx.history)
        h[3] = h[3].replace(content=own)
        return h

    store = MemoryStore()
    ctl = controller(
        store, strategy=FunctionStrategy(hide_first), recall_placeholder="[{tool_call_id}]"
    )
    result = await ctl.compact(history(), force=True)
    assert result.history[3].text == own
    assert store.get("default", "c0") is not None


def test_recall_placeholder_needs_a_store_and_a_valid_template() -> None:
    with pytest.raises(UserError, match="needs an originals store: pass store="):
        controller(recall_placeholder="[{tool_call_id}]")
    with pytest.raises(UserError, match="recall=True needs an originals store"):
        controller(recall=True)
    with pytest.raises(UserError, match="recall=False"):
        controller(MemoryStore(), recall=False, recall_placeholder="[{tool_call_id}]")
    with pytest.raises(ConfigError, match="tool_call_id") as info:
        controller(MemoryStore(), recall_placeholder="[hidden {tool_nam}]")
    assert info.value.key == "recall_placeholder"


# -- a failing store ------------------------------------------------------------------------


class BrokenStore(MemoryStore):
    """A store whose writes fail, with an error message quoting what it was given."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error
        self.calls = 0

    def put(self, *records: StoredOriginal) -> None:
        self.calls += 1
        raise self.error


async def test_a_failing_store_never_blocks_compaction_and_is_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    leak = RuntimeError(f"cannot write {SECRET}")
    store = BrokenStore(leak)
    before = history()
    plain = await controller().compact(before)
    with caplog.at_level(logging.WARNING, logger="ctxcompact"):
        result = await controller(store, recall_placeholder="[{tool_call_id}]").compact(before)
    assert store.calls == 1
    assert result.changed
    assert result.event is not None
    assert result.event.status == "compacted"
    # The compaction stands, with the strategy's own placeholders: nothing can be recalled.
    assert [m.text for m in result.history] == [m.text for m in plain.history]
    assert result.store_error is not None
    assert "BrokenStore" in result.store_error
    assert "RuntimeError" in result.store_error
    assert SECRET not in result.store_error
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert SECRET not in warnings[0].getMessage()
    assert "BrokenStore" in warnings[0].getMessage()


async def test_a_store_error_is_reported_in_its_own_words_from_prepare_and_step() -> None:
    store = BrokenStore(StoreError("database is locked", path="/tmp/x.db"))
    ctl = controller(
        store,
        strategy=ToolResultHiding(preserve_recent_n=3),
        transforms=[Schema1Masking(window_turns=1, always=True)],
    )
    before = history()
    prepared = await ctl.prepare(before)
    assert prepared.store_error is not None
    assert "database is locked" in prepared.store_error
    assert [m.role for m in prepared.messages] == [m.role for m in before]
    step = await ctl.step(before)
    assert step.compacted
    assert len(step.store_errors) == 2  # the compaction's, then the transforms'
    assert all("database is locked" in e for e in step.store_errors)


async def test_a_conversation_state_can_name_its_own_namespace() -> None:
    store = MemoryStore()
    ctl = controller(store, store_namespace="shared")
    await ctl.compact(history(), state=ControllerState(namespace="caller-1"))
    assert store.get("caller-1", "c0") is not None
    assert store.get("shared", "c0") is None


# -- found by review: re-used ids and placeholders after a restart -----------------------------


def task_turn(i: int, call_id: str, text: str) -> list[Message]:
    return [
        user(f"task {i}"),
        assistant(None, call(call_id, "read")),
        tool(call_id, text + " " + "y" * 1500),
        assistant(f"done {i}"),
    ]


async def test_results_sharing_an_id_are_each_recalled_by_their_position() -> None:
    from ctxcompact.store import execute_recall

    store = MemoryStore()
    controller = CompactionController(
        ToolResultHiding(preserve_recent_n=0),
        max_context_size=1_200,
        reserved_context_size=200,
        store=store,
        recall_placeholder='[hidden: recall_tool_result("{tool_call_id}")]',
    )
    history = [
        *task_turn(0, "call_0", "TURN-0"),
        *task_turn(1, "call_0", "TURN-1"),  # the same id again, as real traces do
        *task_turn(2, "call_1", "TURN-2"),
    ]
    result = await controller.compact(history)
    texts = [m.text for m in result.history if m.role == "tool"]
    handles = [t.split('"')[1] for t in texts]
    # A re-used id gets "@" and 8 hex digits of its result's hash: stable across compactions.
    assert [h.split("@")[0] for h in handles] == ["call_0", "call_0", "call_1"]
    assert all(len(h.split("@")[1]) == 8 for h in handles[:2])
    assert handles[0] != handles[1]
    assert handles[2] == "call_1"
    assert "TURN-0 " in execute_recall(store, {"tool_call_id": handles[0]})
    assert "TURN-1 " in execute_recall(store, {"tool_call_id": handles[1]})
    assert "TURN-2 " in execute_recall(store, {"tool_call_id": handles[2]})
    assert "cannot be recalled" in execute_recall(store, {"tool_call_id": "call_0@3"})
    # The placeholder, hidden again by a later run, is recognised and kept as it is.
    again = await controller.compact(result.history, force=True)
    assert [m.text for m in again.history if m.role == "tool"] == texts


async def test_a_built_in_placeholder_is_never_stored_over_its_original(tmp_path: Path) -> None:
    path = tmp_path / "originals.db"
    history = [*task_turn(0, "c0", "ORIGINAL-0"), *task_turn(1, "c1", "ORIGINAL-1")]
    with SQLiteStore(path) as store:
        first = CompactionController(
            ToolResultHiding(preserve_recent_n=1),
            max_context_size=1_000,
            reserved_context_size=100,
            store=store,
            recall=False,  # the strategy's own placeholder, as another process resumes it
        )
        hidden = list((await first.compact(history)).history)
    assert hidden[2].text == "[old tool result hidden]"
    # Another process (or a restart) resumes the hidden history and summarises it away.
    with SQLiteStore(path) as store:

        def summarise(ctx: Any) -> list[Message]:
            return [user("summary of earlier work"), *ctx.history[4:]]

        second = CompactionController(
            FunctionStrategy(summarise),
            max_context_size=1_000,
            reserved_context_size=100,
            store=store,
        )
        result = await second.compact(hidden, force=True)
        assert result.changed
        original = store.get("default", "c0")
    assert original is not None
    assert original.message.text.startswith("ORIGINAL-0 ")
