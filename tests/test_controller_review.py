"""What an independent review of the merged controller found (issue 20's pins beside issue
21's shrink rule and cost-aware trigger): each case failed before its fix."""

from __future__ import annotations

import json
from pathlib import Path

from ctxcompact import (
    CompactionContext,
    CompactionController,
    CompactionResult,
    HeuristicTokenCounter,
    Message,
    ToolCall,
)
from ctxcompact.kit import recall_extra
from ctxcompact.store import DEFAULT_MEMORY_STORE_BYTES, MemoryStore
from ctxcompact.strategies import ToolInputClearing, ToolResultHiding
from ctxcompact.testing import FunctionStrategy


def _exchanges(n: int, size: int) -> list[Message]:
    history = [Message.user("task")]
    for i in range(n):
        history += [
            Message.assistant(f"step {i} " + "a" * size),
            Message.user(f"ok {i} " + "b" * 40),
        ]
    return history


async def test_a_history_over_the_window_takes_a_rewrite_that_fits_it_however_little_it_frees() -> (
    None
):
    # 942 tokens + 100 reserved do not fit 1,000: the call cannot go as it is. A rewrite to
    # 857 (9% freed, under min_progress) fits: the window needs it, it is not weighed as an
    # optional rewrite (before: a no_payback noop, then calls over the window "waiting").
    def drop_oldest(ctx: CompactionContext) -> list[Message]:
        history = list(ctx.history)
        return [history[0], *history[3:]]

    controller = CompactionController(
        FunctionStrategy(drop_oldest), max_context_size=1_000, reserved_context_size=100, store=None
    )
    history = _exchanges(11, 195)
    tokens = controller.token_count(history)
    assert tokens + 100 >= 1_000
    controller.observe_usage(None, history)  # a call was made: the cache-aware weighing applies
    result = await controller.compact(history)
    assert result.event is not None
    assert result.event.status == "compacted", [p.kind for p in result.event.problems]
    assert controller.token_count(result.history) + 100 < 1_000


async def test_a_strategy_that_only_loses_pins_waits_like_any_noop() -> None:
    calls = 0

    def drop_pinned(ctx: CompactionContext) -> list[Message]:
        nonlocal calls
        calls += 1
        return [m for m in ctx.history if "KEEPME" not in m.text]

    controller = CompactionController(
        FunctionStrategy(drop_pinned),
        max_context_size=100,
        reserved_context_size=10,
        pin_patterns=["KEEPME"],
    )
    history = [Message.user("task"), Message.assistant("KEEPME " + "x" * 400), Message.user("now")]
    statuses = []
    for _ in range(3):
        result = await controller.compact(history)
        assert result.event is not None
        statuses.append(result.event.status)
    assert statuses == ["noop", "skipped", "skipped"]
    assert calls == 1  # no re-run at every call


async def test_pins_put_back_that_make_the_output_no_smaller_are_no_compaction() -> None:
    def summarize(ctx: CompactionContext) -> list[Message]:
        history = ctx.history
        return [history[0], Message.user("summary: " + "s" * 300), history[-1]]

    controller = CompactionController(
        FunctionStrategy(summarize),
        max_context_size=200,
        reserved_context_size=10,
        pin_patterns=["KEEPME"],
        store=None,
    )
    history = [
        Message.user("task"),
        Message.assistant("KEEPME " + "x" * 800),
        Message.assistant("y" * 10),
        Message.user("now"),
    ]
    result = await controller.compact(history)
    assert result.event is not None
    assert result.event.status == "noop"
    assert "not_smaller" in [p.kind for p in result.event.problems]
    assert list(result.history) == history


def test_an_in_memory_store_from_a_config_has_the_documented_bound(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        '[compaction]\nstrategy = "tool-result-hiding"\n'
        "max_context_size = 8000\nreserved_context_size = 2000\n"
    )
    built = CompactionController.from_config(path)
    assert isinstance(built.store, MemoryStore)
    assert built.store.max_bytes == DEFAULT_MEMORY_STORE_BYTES  # as a controller built in Python
    path.write_text(path.read_text() + "[store]\nmax_bytes = 1000000\n")
    bounded = CompactionController.from_config(path)
    assert isinstance(bounded.store, MemoryStore)
    assert bounded.store.max_bytes == 1_000_000


def _writes(n: int, size: int, result: int) -> list[Message]:
    history = [Message.user("task")]
    for i in range(n):
        call = ToolCall(id=f"w{i}", name="Write", arguments=json.dumps({"text": "x" * size}))
        history += [Message.assistant(None, tool_calls=[call]), Message.tool(f"w{i}", "r" * result)]
    return [*history, Message.assistant("done"), Message.user("next")]


async def test_a_rewrite_that_fits_only_with_plain_markers_is_not_taken_as_needed() -> None:
    # With the default store, the hook writes each cleared value as "[cleared: 300 chars;
    # recall_tool_result("args:w3")]": a rewrite whose plain form fits the window but whose
    # recall form does not keeps no call inside it, and re-bills the whole prompt. It is
    # weighed as an optional rewrite (and refused: it frees ~7% and re-bills the long results
    # after the first call), not kept as one the window needs (before: kept, and the next
    # call still over the window).
    history = _writes(10, 300, 1_500)
    clearing = ToolInputClearing(keep_recent=0, min_chars=200)
    plain = clearing.clear(history)
    assert plain is not None
    counter = HeuristicTokenCounter()
    extra = sum(recall_extra(history, plain, counter) or [0])
    assert extra > 20
    reserved = 100
    window = counter.count(plain) + reserved + extra // 2  # plain fits, recall form does not
    assert counter.count(history) + reserved >= window  # the history is over the window

    def build(**kwargs: object) -> CompactionController:
        controller = CompactionController(
            clearing, max_context_size=window, reserved_context_size=reserved, **kwargs
        )
        controller.observe_usage(None, history)  # a call was made: the weighing applies
        return controller

    stored = build()
    result = await stored.compact(history)
    assert result.event is not None
    assert result.event.status == "noop", result.event.status
    assert [p.kind for p in result.event.problems] == ["no_payback"]
    assert result.history is history
    # It would not have fitted either: the next calls wait for growth, they do not re-run
    # the strategy at every call (a refusal weighed on the plain count ended the wait).
    for _ in range(2):
        again = await stored.compact(history)
        assert again.event is not None
        assert again.event.status == "skipped", again.event.status
    # Without a store the markers stay plain: the same rewrite fits and is kept.
    bare = build(store=None)
    result = await bare.compact(history)
    assert result.event is not None
    assert result.event.status == "compacted"
    assert bare.token_count(result.history) + reserved < window


async def test_the_fit_is_weighed_with_the_controller_s_own_recall_template() -> None:
    # Hiding frees the old results but the newest two are long, so re-billing them costs
    # more than the saving pays back: the rewrite is kept only as one the window needs.
    # With the default template the recall placeholders fit the window; with a longer
    # template of the controller's (recall_placeholder=) they do not, and the rewrite,
    # weighed, is refused: the window was judged with the default template before.
    history = [Message.system("S"), Message.user("task")]
    for k in range(30):
        cid = f"toolu_01{k:03d}ABCDEFGHJKMNPQRSTVWXYZ"
        call = ToolCall(id=cid, name="Read", arguments="{}")
        size = 20_000 if k >= 28 else 400
        history += [Message.assistant(None, tool_calls=[call]), Message.tool(cid, "r" * size)]
    hiding = ToolResultHiding(preserve_recent_n=2)
    plain = hiding.hide(history, token_counter=HeuristicTokenCounter())
    assert plain is not None
    counter = HeuristicTokenCounter()
    extra = sum(recall_extra(history, plain, counter) or [0])
    reserved = 100
    window = counter.count(plain) + extra + reserved + 5  # the default recall form fits
    template = "[this result was hidden; call recall_tool_result with {tool_call_id} to read it]"

    async def run(recall_placeholder: str | None) -> CompactionResult:
        controller = CompactionController(
            hiding,
            max_context_size=window,
            reserved_context_size=reserved,
            recall_placeholder=recall_placeholder,
        )
        controller.observe_usage(None, history)
        return await controller.compact(history)

    default = await run(None)
    assert default.event is not None
    assert default.event.status == "compacted"
    assert counter.count(default.history) + reserved < window
    longer = await run(template)
    assert longer.event is not None
    assert longer.event.status == "noop", longer.event.status
    assert [p.kind for p in longer.event.problems] == ["no_payback"]
