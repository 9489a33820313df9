"""removed_originals / record_removed: what a rewrite removed, found and stored."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from ctxcompact import CompactionContext, HeuristicTokenCounter, Message, from_openai
from ctxcompact.exceptions import StoreError
from ctxcompact.store import (
    MemoryStore,
    SQLiteStore,
    StoredOriginal,
    recall_placeholder,
    record_removed,
    removed_originals,
)
from ctxcompact.strategies import (
    ContextGuard,
    LLMSummary,
    Schema1Masking,
    ToolResultHiding,
    ToolResultTruncation,
)
from ctxcompact.testing import ScriptedLLM

from .helpers.gen import assistant, call, system, tool, user
from .helpers.traces import load_trace


def rh(message: Message) -> str:
    """The handle of a result whose id is re-used: id@ and 8 hex digits of its text's hash."""
    digest = hashlib.sha256(f"tool\x00{message.text}".encode()).hexdigest()
    return f"{message.tool_call_id}@{digest[:8]}"


BIG = "\n".join(f"line {i}: some output of the command" for i in range(60))


def session() -> list[Message]:
    """Three tool turns (the first with two parallel calls) and a final answer."""
    return [
        system("You are a coding agent."),
        user("find the bug"),
        assistant(None, call("c1", "grep"), call("c2", "cat")),
        tool("c1", BIG),
        tool("c2", BIG + " (cat)"),
        assistant(None, call("c3", "pytest")),
        tool("c3", BIG + " (pytest)"),
        assistant(None, call("c1", "grep")),  # a re-used id, as real traces do
        tool("c1", "grep again: " + BIG),
        assistant("The bug is in parse()."),
    ]


def summary(removals: Sequence[object]) -> list[tuple[int, str, str, str | None]]:
    return [(r.position, r.kind, r.tool_call_id, r.tool_name) for r in removals]  # type: ignore[attr-defined]


def test_an_unchanged_history_removed_nothing() -> None:
    h = session()
    assert removed_originals(h, h) == []
    assert removed_originals(h, list(h)) == []


def test_equal_copies_count_as_kept() -> None:
    h = session()
    copies = [m.model_copy() for m in h]
    assert removed_originals(h, copies) == []


def test_hiding_is_found_as_hidden_with_positions_ids_and_names() -> None:
    h = session()
    snapshot = list(h)
    after = ToolResultHiding(preserve_recent_n=1).hide(h)
    assert after is not None
    removals = removed_originals(h, after)
    assert summary(removals) == [
        (3, "hidden", rh(h[3]), "grep"),
        (4, "hidden", "c2", "cat"),
        (6, "hidden", "c3", "pytest"),
    ]
    assert [r.message for r in removals] == [h[3], h[4], h[6]]
    assert all(r.replacement is after[r.position] for r in removals)
    assert h == snapshot  # the input is untouched


def test_schema1_masking_is_found_as_masked() -> None:
    h = session()
    after = Schema1Masking(window_turns=1).mask(h)
    assert after is not None
    assert [(r.position, r.kind) for r in removed_originals(h, after)] == [
        (3, "masked"),
        (4, "masked"),
        (6, "masked"),
    ]


def test_a_recall_placeholder_names_the_id_and_reads_as_masked() -> None:
    h = session()
    after = [*h[:6], h[6].replace(content=recall_placeholder("c3")), *h[7:]]
    assert summary(removed_originals(h, after)) == [(6, "masked", "c3", "pytest")]


def test_head_and_tail_truncation_is_found_as_truncated() -> None:
    h = session()
    after = ToolResultTruncation(max_chars=500, head_chars=100, tail_chars=100).truncate(h)
    assert after is not None
    assert {r.kind for r in removed_originals(h, after)} == {"truncated"}
    assert [r.position for r in removed_originals(h, after)] == [3, 4, 6, 8]


def test_the_guard_dropping_old_turns_is_found_as_dropped() -> None:
    h = session()
    h.insert(7, user("now fix it"))  # the guard cuts only before a user message
    counter = HeuristicTokenCounter()
    after = ContextGuard(truncate_first=False).guard(
        h, budget=counter.count(h) * 2 // 3, token_counter=counter
    )
    assert after is not None
    removals = removed_originals(h, after)
    assert removals
    assert {r.kind for r in removals} == {"dropped"}
    kept_positions = set(range(len(h))) - {r.position for r in removals}
    assert [h[i] for i in sorted(kept_positions)] == list(after)
    # Tool results are kept under their id (with @hash when re-used), other messages under
    # "#" and 10 hex digits of their hash, a call's arguments under "args:" and the id.
    for r in removals:
        if r.call is not None:
            assert r.tool_call_id.startswith(f"args:{r.call.id}")
        elif r.message.role == "tool":
            assert r.tool_call_id.split("@")[0] == r.message.tool_call_id
        else:
            assert re.fullmatch(r"#[0-9a-f]{10}", r.tool_call_id)


async def test_a_summary_replacing_old_turns_is_found_as_summarised() -> None:
    h = session()
    ctx = CompactionContext(
        h, 5000, 8000, 1000, llm=ScriptedLLM("The agent grepped and ran tests.")
    )
    after = await LLMSummary(max_preserved_messages=1).compact(ctx)
    assert after is not None
    removals = removed_originals(h, after)
    assert {r.kind for r in removals} == {"summarised"}
    # The system message and the task (pinned) stay; everything between them and the kept
    # last message was summarised.
    assert after[:2] == h[:2]
    assert sorted({r.position for r in removals}) == list(range(2, len(h) - 1))
    # A summarised call's arguments are a removal of their own.
    assert sorted(r.call.id for r in removals if r.call is not None) == ["c1", "c1", "c2", "c3"]


def test_a_reused_id_is_matched_by_position_not_by_id() -> None:
    h = session()
    # Only the second result answering "c1" is hidden.
    after = [*h[:8], h[8].replace(content="[hidden]"), h[9]]
    assert summary(removed_originals(h, after)) == [(8, "hidden", rh(h[8]), "grep")]
    after = [*h[:3], h[3].replace(content="[hidden]"), *h[4:]]
    assert summary(removed_originals(h, after)) == [(3, "hidden", rh(h[3]), "grep")]
    assert rh(h[3]) != rh(h[8])


def test_record_removed_stores_each_original_recallable_by_id_and_position() -> None:
    h = session()
    store = MemoryStore()
    after = ToolResultHiding(preserve_recent_n=0).hide(h)
    assert after is not None
    assert record_removed(store, h, after, namespace="ns") == 4
    assert store.get("ns", rh(h[3])).message == h[3]  # type: ignore[union-attr]
    assert store.get("ns", rh(h[8])).message == h[8]  # type: ignore[union-attr]
    assert store.get("ns", "c2").tool_name == "cat"  # type: ignore[union-attr]
    assert store.get("default", "c2") is None
    # The same rewrite on the next request stores nothing new.
    assert record_removed(store, h, after, namespace="ns") == 4
    assert len(store) == 4


def test_record_removed_on_a_real_trace_keeps_every_hidden_result(tmp_path: Path) -> None:
    h = from_openai(load_trace("taubench-gpt4o-airline__task3_trial0"))
    after = ToolResultHiding(preserve_recent_n=2).hide(h)
    assert after is not None
    changed = [i for i, (a, b) in enumerate(zip(h, after, strict=True)) if a is not b]
    with SQLiteStore(tmp_path / "o.db") as store:
        assert record_removed(store, h, after) == len(changed)
        handles = {r.position: r.handle for r in removed_originals(h, after)}
        for i in changed:
            got = store.get("default", handles[i], position=i)
            assert got is not None
            assert got.message == h[i]


class BrokenStore:
    def put(self, *records: StoredOriginal) -> None:
        raise ConnectionError("redis is down")

    def get(self, namespace: str, tool_call_id: str, *, position: int | None = None) -> None:
        return None

    def put_summary(self, namespace: str, key: str, messages: Sequence[Message]) -> None:
        raise ConnectionError("redis is down")

    def get_summary(self, namespace: str, key: str) -> None:
        return None


def test_a_third_party_store_failure_becomes_one_store_error() -> None:
    h = session()
    with pytest.raises(
        StoreError, match=r"BrokenStore.put failed on 1 record\(s\): ConnectionError"
    ):
        record_removed(BrokenStore(), h, h[:-1])
    assert record_removed(BrokenStore(), h, h) == 0  # nothing removed: the store is not called


def test_a_full_store_raises_store_error_through_record_removed() -> None:
    h = session()
    with pytest.raises(StoreError, match="larger than the store's whole bound"):
        record_removed(MemoryStore(max_bytes=100), h, h[:3])
