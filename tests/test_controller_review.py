"""What an independent review of the merged controller found (issue 20's pins beside issue
21's shrink rule and cost-aware trigger): each case failed before its fix."""

from __future__ import annotations

from pathlib import Path

from ctxcompact import CompactionContext, CompactionController, Message, ToolCall
from ctxcompact.store import DEFAULT_MEMORY_STORE_BYTES, MemoryStore
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


async def test_a_rewrite_is_weighed_as_it_will_be_sent_with_its_recall_markers() -> None:
    # Issue 21: input clearing's rewrite fitted the window as the strategy wrote it, but the
    # default store's recall markers (longer than the strategy's own) took it back over: it was
    # kept as needed, broke the prompt cache, and the call still did not fit. Here 20 results
    # of 60 characters become "[masked]", which fits; with recall placeholders it does not.
    def mask_all(ctx: CompactionContext) -> list[Message]:
        return [m.replace(content="[masked]") if m.role == "tool" else m for m in ctx.history]

    history: list[Message] = [Message.user("task")]
    for i in range(20):
        call = ToolCall(id=f"c{i:02d}", name="read", arguments="{}")
        history += [Message.assistant(None, tool_calls=[call]), Message.tool(call.id, "r" * 60)]

    def controller(**options: bool) -> CompactionController:
        built = CompactionController(
            FunctionStrategy(mask_all), max_context_size=700, reserved_context_size=100, **options
        )
        built.observe_usage(None, history)  # a call was made: the weighing applies
        return built

    marked = controller()
    assert marked.token_count(history) + 100 >= 700  # over the window as it is
    written = mask_all(CompactionContext(history, 0, 700, 100))
    assert marked.token_counter.count(written) + 100 < 700  # fits as the strategy wrote it
    result = await marked.compact(history)
    assert result.event is not None
    assert result.event.status == "noop", result.event
    assert [p.kind for p in result.event.problems] == ["no_payback"]
    assert result.history is history
    assert isinstance(marked.store, MemoryStore)
    assert marked.store.total_bytes == 0  # weighing stored nothing
    # With plain markers (recall off) the same rewrite fits: the window needs it, it is kept.
    plain = controller(recall=False)
    kept = await plain.compact(history)
    assert kept.event is not None
    assert kept.event.status == "compacted"
    assert plain.token_count(kept.history) + 100 < 700
