from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxcompact import (
    CompactionContext,
    CompactionController,
    CompactionEvent,
    Config,
    HeuristicTokenCounter,
    Message,
    TiktokenCounter,
    Usage,
    check_history,
    from_openai,
    load_config,
    wire,
)
from ctxcompact.exceptions import CompactionError, ConfigError, StrategyLoadError
from ctxcompact.kit import strip_notes
from ctxcompact.strategies import ContextGuard
from ctxcompact.testing import FunctionStrategy, ScriptedLLM
from tests.helpers.gen import assistant, call, system, tool, user, valid_histories
from tests.helpers.traces import load_trace


class Fixed:
    """A counter where every message costs ``per`` tokens; counts count_message calls."""

    def __init__(self, per: int = 10) -> None:
        self.per = per
        self.calls = 0

    def count(self, messages: Iterable[Message]) -> int:
        return sum(self.count_message(m) for m in messages)

    def count_message(self, message: Message) -> int:
        self.calls += 1
        return self.per


def users(n: int) -> list[Message]:
    return [user(f"m{i}") for i in range(n)]


def keep_last(k: int) -> FunctionStrategy:
    """The task (the first message) and the last ``k`` messages. It keeps the task because the
    controller puts back a task a strategy lost (``pin_restored``, tested in
    test_controller_pins.py): these tests are about what the controller does with an output."""

    def run(ctx: CompactionContext) -> list[Message]:
        h = ctx.history
        return [*h[:1], *h[max(1, len(h) - k) :]]

    return FunctionStrategy(run, name=f"keep_last_{k}")


def make(
    strategy: object = None, **kw: object
) -> tuple[CompactionController, list[CompactionEvent]]:
    events: list[CompactionEvent] = []
    # These tests check the controller's mechanics on what the strategy returned: the
    # markers recall adds by default (a drop note naming a handle) are tested in
    # test_store_controller.py and test_recall_every_removal.py.
    kw.setdefault("recall", False)
    kw.setdefault("token_counter", Fixed())
    kw.setdefault("max_context_size", 100)
    kw.setdefault("reserved_context_size", 20)
    # These tests are about the trigger and the loop guards: every valid rewrite is kept.
    # Weighing rewrites against the cache (cache_pricing) has tests of its own.
    kw.setdefault("cache_pricing", None)
    controller = CompactionController(
        strategy or keep_last(2),  # type: ignore[arg-type]
        on_event=events.append,
        **kw,  # type: ignore[arg-type]
    )
    return controller, events


# -- counting and the trigger -------------------------------------------------------------------


def test_trigger_boundary_is_exact() -> None:
    controller, _ = make()  # fires when 10 * n + 20 >= 100, i.e. n >= 8
    assert controller.token_count(users(7)) == 70
    assert not controller.should_compact(users(7))
    assert controller.should_compact(users(8))


def test_ratio_rule_fires_before_the_threshold() -> None:
    controller, _events = make(max_context_size=1000, reserved_context_size=100, trigger_ratio=0.5)
    assert not controller.should_compact(users(49))  # 490 < 500, 490 + 100 < 1000
    assert controller.should_compact(users(50))
    plain, _ = make(max_context_size=1000, reserved_context_size=100)
    assert not plain.should_compact(users(50))


async def test_event_names_the_trigger() -> None:
    controller, events = make(max_context_size=1000, reserved_context_size=100, trigger_ratio=0.5)
    await controller.maybe_compact(users(50))
    assert events[-1].trigger == "ratio"
    await controller.maybe_compact(users(95))
    assert events[-1].trigger == "threshold"
    await controller.maybe_compact(users(3), force=True)
    assert events[-1].trigger == "forced"


def test_usage_plus_estimate_of_appended_messages() -> None:
    controller, _ = make()
    history = users(3)
    controller.observe_usage(Usage(input_tokens=500, output_tokens=7), history)
    assert controller.token_count(history) == 507
    history.append(tool("x", "result"))
    history.append(user("more"))
    assert controller.token_count(history) == 527


def test_usage_with_no_tokens_is_ignored() -> None:
    controller, _ = make()
    controller.observe_usage(Usage(), users(3))
    assert controller.token_count(users(3)) == 30


def test_usage_dropped_when_history_is_not_an_extension() -> None:
    controller, _ = make()
    history = users(5)
    controller.observe_usage(Usage(input_tokens=900), history)
    assert controller.token_count(history) == 900
    other = [user("different"), *history[1:]]  # first message replaced
    assert controller.token_count(other) == 50
    assert controller.token_count(history[:3]) == 30  # shorter: recounted


def test_cost_is_proportional_to_new_messages() -> None:
    counter = Fixed()
    controller, _ = make(token_counter=counter)
    history = users(1000)
    controller.token_count(history)
    assert counter.calls == 1000
    for i in range(5):
        history.append(user(f"new{i}"))
        controller.token_count(history)
    assert counter.calls == 1005
    controller.token_count(history)  # nothing new: nothing counted
    assert counter.calls == 1005


def test_equal_copy_of_history_counts_as_extension() -> None:
    # The proxy parses each request afresh: equal messages, new objects.
    counter = Fixed()
    controller, _ = make(token_counter=counter)
    raw = load_trace("taubench-gpt4o-airline__task11_trial0")
    controller.token_count(from_openai(raw[:20]))
    controller.token_count(from_openai(raw[:22]))
    assert counter.calls == 22


# -- maybe_compact -------------------------------------------------------------------------------


async def test_below_threshold_returns_the_input_object_and_no_event() -> None:
    strategy = keep_last(1)
    controller, events = make(strategy)
    history = users(3)
    assert await controller.maybe_compact(history) is history
    assert strategy.calls == []
    assert events == []


async def test_compaction_replaces_history_and_reports() -> None:
    llm = ScriptedLLM()
    strategy = keep_last(2)
    controller, events = make(strategy, llm=llm)
    history = users(9)
    snapshot = list(history)
    result = await controller.compact(history)
    out = result.history
    assert [m.text for m in out] == ["m0", "m7", "m8"]
    assert history == snapshot  # input untouched
    ctx = strategy.calls[0]
    assert isinstance(ctx, CompactionContext)
    assert (ctx.token_count, ctx.max_context_size, ctx.reserved_context_size) == (90, 100, 20)
    assert ctx.llm is llm
    assert ctx.token_counter is controller.token_counter
    (event,) = events
    assert event.status == "compacted"
    assert (event.tokens_before, event.tokens_after) == (90, 30)
    assert (event.messages_before, event.messages_after, event.messages_rewritten) == (9, 3, 6)
    assert event.strategy == "keep_last_2"
    assert result.event is event
    assert result.changed
    assert event.duration_s >= 0


async def test_usage_baseline_reset_after_compaction() -> None:
    controller, _ = make()
    history = users(9)
    controller.observe_usage(Usage(input_tokens=95), history)
    out = await controller.maybe_compact(history)
    assert controller.token_count(out) == 30  # estimated, not 95 + anything


async def test_noop_returns_input_object() -> None:
    for fn in (lambda ctx: None, lambda ctx: ctx.history, lambda ctx: list(ctx.history)):
        controller, events = make(FunctionStrategy(fn))
        history = users(9)
        assert await controller.maybe_compact(history) is history
        assert events[-1].status == "noop"


async def test_async_strategy_function() -> None:
    async def drop_second(ctx: CompactionContext) -> Sequence[Message]:
        return [ctx.history[0], *ctx.history[2:]]  # the first is the task: it stays

    controller, _ = make(FunctionStrategy(drop_second))
    assert len(await controller.maybe_compact(users(9))) == 8


async def test_output_breaking_tool_pairing_is_rejected_and_original_kept() -> None:
    history = [
        system("s"),
        user("go"),
        assistant(None, call("a"), call("b")),
        tool("a"),
        tool("b"),
        *users(6),
    ]
    assert check_history(history) == []
    drop_call = FunctionStrategy(lambda ctx: [m for m in ctx.history if m.role != "assistant"])
    controller, events = make(drop_call)
    assert await controller.maybe_compact(history) is history
    assert events[-1].status == "rejected"
    assert "orphan_result" in (events[-1].error or "")
    assert events[-1].messages_after == len(history)


async def test_input_with_problems_can_still_be_compacted() -> None:
    broken = [tool("orphan", "x"), *users(8)]  # already has an orphan
    controller, events = make(
        # the orphan, the task (m0: the controller would put it back) and the last two
        FunctionStrategy(lambda ctx: list(ctx.history[:2]) + list(ctx.history[-2:]))
    )
    out = await controller.maybe_compact(broken)
    assert events[-1].status == "compacted"
    assert len(out) == 4


@pytest.mark.parametrize(
    ("output", "reason"),
    [("not messages", "str"), ([1, 2], "output item 0"), ([], "empty history")],
)
async def test_output_that_is_not_a_history_is_rejected(output: object, reason: str) -> None:
    controller, events = make(FunctionStrategy(lambda ctx: output))  # type: ignore[arg-type,return-value]
    history = users(9)
    assert await controller.maybe_compact(history) is history
    assert events[-1].status == "rejected"
    assert reason in (events[-1].error or "")


async def test_strategy_raising_keeps_the_original() -> None:
    def boom(ctx: CompactionContext) -> None:
        raise RuntimeError("LLM down")

    controller, events = make(FunctionStrategy(boom))
    history = users(9)
    assert await controller.maybe_compact(history) is history
    assert events[-1].status == "failed"
    # Not ctxcompact's own error: its text may quote the history, so only the type is told.
    assert (events[-1].error or "").startswith("RuntimeError")
    assert "LLM down" not in (events[-1].error or "")


async def test_ctxcompacts_own_errors_keep_their_text_in_the_event() -> None:
    def refuse(ctx: CompactionContext) -> None:
        raise CompactionError("the summary was empty")

    controller, events = make(FunctionStrategy(refuse))
    await controller.maybe_compact(users(9))
    assert events[-1].error == "CompactionError: the summary was empty"


async def test_a_strategys_message_reaches_only_debug_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def leak(ctx: CompactionContext) -> None:
        raise ValueError(f"cannot handle {ctx.history[0].text}")

    controller, _ = make(FunctionStrategy(leak))
    with caplog.at_level(logging.DEBUG, logger="ctxcompact.controller"):
        await controller.maybe_compact([user("SECRET-CONTENT"), *users(8)])
    above_debug = [r for r in caplog.records if r.levelno > logging.DEBUG]
    assert above_debug
    assert all("SECRET-CONTENT" not in r.getMessage() for r in above_debug)
    assert any("SECRET-CONTENT" in (r.exc_text or "") for r in caplog.records)


async def test_strategy_cannot_mutate_the_callers_list() -> None:
    def mutate(ctx: CompactionContext) -> None:
        ctx.history.clear()  # type: ignore[attr-defined]

    controller, events = make(FunctionStrategy(mutate))
    history = users(9)
    assert await controller.maybe_compact(history) is history
    assert len(history) == 9
    assert events[-1].status == "failed"


async def test_callback_exception_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    def bad(event: CompactionEvent) -> None:
        raise ValueError("callback bug")

    controller = CompactionController(
        keep_last(2),
        max_context_size=100,
        reserved_context_size=20,
        token_counter=Fixed(),
        on_event=bad,
    )
    with caplog.at_level(logging.ERROR, logger="ctxcompact.controller"):
        out = await controller.maybe_compact(users(9))
    assert len(out) == 3
    assert "on_event callback raised" in caplog.text


async def test_logging_levels(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="ctxcompact.controller")
    controller, _ = make(keep_last(2))
    await controller.maybe_compact(users(9))
    dropped = caplog.records[-1]
    # A routine compaction is INFO (an agent compacts hundreds of times); what a strategy
    # cut is its own WARNING (the guard's), failures are WARNING.
    assert dropped.levelno == logging.INFO
    assert "9 -> 3 messages" in dropped.getMessage()
    assert "6 messages dropped or rewritten" in dropped.getMessage()

    noop, _ = make(FunctionStrategy(lambda ctx: None))
    await noop.maybe_compact(users(9))
    assert caplog.records[-1].levelno == logging.INFO
    assert "noop" in caplog.records[-1].getMessage()

    def boom(ctx: CompactionContext) -> None:
        raise RuntimeError("x")

    failing, _ = make(FunctionStrategy(boom))
    await failing.maybe_compact(users(9))
    assert caplog.records[-1].levelno == logging.WARNING
    assert "failed" in caplog.records[-1].getMessage()


# -- loop guards -----------------------------------------------------------------------------------


async def test_min_progress_guard_skips_until_history_grows() -> None:
    strategy = FunctionStrategy(lambda ctx: None)
    controller, events = make(
        strategy, max_context_size=1000, reserved_context_size=900, min_progress=0.1
    )
    history = users(10)  # 100 tokens: fires
    await controller.maybe_compact(history)
    assert [e.status for e in events] == ["noop"]
    await controller.maybe_compact(history)  # unchanged: wait
    assert events[-1].status == "skipped"
    assert len(strategy.calls) == 1
    history += users(1)  # 110 tokens: grown by 10% since the attempt
    await controller.maybe_compact(history)
    assert events[-1].status == "noop"
    assert len(strategy.calls) == 2


async def test_small_saving_counts_as_low_progress() -> None:
    # saves 1 of 20 = 5% (drops the second message: the first is the task, which stays)
    strategy = FunctionStrategy(lambda ctx: [ctx.history[0], *ctx.history[2:]])
    controller, events = make(strategy, max_context_size=1000, reserved_context_size=900)
    out = await controller.maybe_compact(users(20))
    assert events[-1].status == "compacted"
    assert len(out) == 19
    stored = list(out)
    assert await controller.maybe_compact(stored) is stored
    assert events[-1].status == "skipped"
    assert len(strategy.calls) == 1


async def test_a_small_saving_that_fits_never_holds_back_the_next_needed_run() -> None:
    # Issue 21: a triggered guard left 5 calls over a 32k window because a run that saved
    # 7.3% (and fit) made the controller wait for 10% growth. 10 tokens a message here; the
    # threshold fires at 190 (200 - reserved 10).
    # saves one message (the second: the first is the task, which stays)
    strategy = FunctionStrategy(lambda ctx: [ctx.history[0], *ctx.history[2:]])
    controller, events = make(strategy, max_context_size=200, reserved_context_size=10)
    stored = list(await controller.maybe_compact(users(19)))  # 190 -> 180: fits, saved 5%
    for n in range(3):
        stored.append(user(f"more {n}"))  # back to 190: over the threshold again
        assert controller.should_compact(stored)
        stored = list(await controller.maybe_compact(stored))  # saves 5% again, and fits
        assert events[-1].status == "compacted", events[-1]
        assert not controller.should_compact(stored)
    # The same saving when it still leaves the history over the threshold: that one waits.
    controller, events = make(strategy, max_context_size=200, reserved_context_size=5)
    stored = list(await controller.maybe_compact(users(21)))  # 210 -> 200, still >= 195
    assert events[-1].status == "compacted"
    assert await controller.maybe_compact(stored) is stored
    assert events[-1].status == "skipped"
    assert len(strategy.calls) == 5


# -- weighing a rewrite the window does not need against the cache it breaks ----------------------


REWRITE_PRICING = CompactionController(keep_last(1), max_context_size=100_000).cache_pricing
"""The controller's default cache prices (reads 0.1, writes 1.25)."""


def chat(turns: int) -> list[Message]:
    """``turns`` user/assistant pairs: 10 tokens a message with :class:`Fixed`."""
    return [m for i in range(turns) for m in (user(f"q{i}"), assistant(f"a{i}"))]


async def test_an_optional_rewrite_that_does_not_pay_back_the_cache_is_a_noop() -> None:
    # max_messages fires with room to spare: the rewrite is optional. keep_last(6) of 8
    # messages (and the task) frees 10 tokens a call but changes the second message, so the
    # next call re-bills the 60 tokens after it at the write price: 0.1 x 10 x 2 < 1.15 x 60.
    history = chat(4)
    controller, events = make(
        keep_last(6), max_context_size=1000, reserved_context_size=100, max_messages=5
    )
    controller.cache_pricing = REWRITE_PRICING
    controller.observe_usage(None, history)  # the provider has seen (and cached) it
    result = await controller.compact(history)
    assert result.history is history
    assert events[-1].status == "noop"
    assert [p.kind for p in events[-1].problems] == ["no_payback"]
    assert "re-bills 60" in str(events[-1].problems[0])
    # With weighing off, or before any call (nothing cached to break), the rewrite is kept.
    assert (await controller.compact(history)).history is history  # waits for growth
    assert events[-1].status == "skipped"
    controller.cache_pricing = None
    controller.reset()
    assert len((await controller.compact(history)).history) == 7
    fresh, events = make(
        keep_last(6), max_context_size=1000, reserved_context_size=100, max_messages=5
    )
    fresh.cache_pricing = REWRITE_PRICING
    assert len((await fresh.compact(history)).history) == 7
    assert events[-1].status == "compacted"


async def test_an_optional_rewrite_that_pays_back_is_kept() -> None:
    # Only the newest message changes (4,000 characters to 5): nothing before it is
    # re-billed, and what it frees is saved at every call to come. (An answer: a rewritten
    # newest user message is a pin the controller would put back.)
    history = [user("task"), assistant("ok"), user("go on"), assistant("x" * 4_000)]
    shorten = FunctionStrategy(lambda ctx: [*ctx.history[:-1], assistant("short")])
    controller, events = make(
        shorten,
        token_counter=HeuristicTokenCounter(),
        max_context_size=100_000,
        reserved_context_size=100,
        max_messages=2,
    )
    controller.cache_pricing = REWRITE_PRICING
    controller.observe_usage(None, history)
    result = await controller.compact(history)
    assert events[-1].status == "compacted", events[-1]
    assert result.history[-1].content == "short"


async def test_a_rewrite_the_window_needs_is_kept_whatever_it_re_bills() -> None:
    # 8 messages + 20 reserved reach the 100-token window: keep_last(2) brings the history
    # to 30 tokens (the task and the last two). Weighed, it would not pay back
    # (0.1 x 50 x 2 < 1.15 x 20), but the next call does not fit without it.
    history = chat(4)
    controller, events = make(keep_last(2))
    controller.cache_pricing = REWRITE_PRICING
    controller.observe_usage(None, history)
    assert len((await controller.compact(history)).history) == 3
    assert events[-1].status == "compacted"


def test_cache_pricing_names_a_price_table_or_off(tmp_path: Path) -> None:
    def prices(value: object) -> object:
        return Config.from_dict({"compaction": {"cache_pricing": value}}).cache_prices()

    assert prices("off") is None
    assert REWRITE_PRICING is not None
    assert (REWRITE_PRICING.read, REWRITE_PRICING.write) == (0.1, 1.25)
    assert Config.from_dict({}).cache_prices() == REWRITE_PRICING
    anthropic = prices("anthropic")
    assert anthropic is not None
    assert anthropic.write > anthropic.read
    with pytest.raises(ConfigError) as info:
        prices("cheapest")
    assert info.value.key == "compaction.cache_pricing"
    assert "flat" in str(info.value)
    path = tmp_path / "c.toml"
    path.write_text(
        "[compaction]\nmax_context_size = 100000\nreserved_context_size = 1000\n"
        'strategy = "tiered"\ncache_pricing = "off"\n',
        encoding="utf-8",
    )
    assert wire(path).cache_pricing is None


async def test_circuit_opens_after_consecutive_failures_and_force_still_runs() -> None:
    llm = ScriptedLLM()
    attempts: list[int] = []

    def flaky(ctx: CompactionContext) -> Sequence[Message]:
        attempts.append(1)
        if len(attempts) <= 3:
            raise RuntimeError("down")
        return [ctx.history[0], *ctx.history[-2:]]  # the task and the last two

    controller, events = make(FunctionStrategy(flaky), max_failures=3, llm=llm)
    history = users(9)
    for _ in range(4):
        await controller.maybe_compact(history)
    assert [e.status for e in events] == ["failed", "failed", "failed", "circuit_open"]
    assert "circuit now open" in (events[2].error or "")
    assert len(attempts) == 3
    out = await controller.maybe_compact(history, force=True)
    assert events[-1].status == "compacted"
    assert len(out) == 3
    # closed again: a triggered run works
    assert len(await controller.maybe_compact(users(9))) == 3
    assert events[-1].status == "compacted"


async def test_rejections_count_as_failures() -> None:
    controller, events = make(FunctionStrategy(lambda ctx: [tool("zz")]), max_failures=2)
    for _ in range(3):
        await controller.maybe_compact(users(9))
    assert [e.status for e in events] == ["rejected", "rejected", "circuit_open"]


async def test_reset_closes_the_circuit() -> None:
    def boom(ctx: CompactionContext) -> None:
        raise RuntimeError("x")

    controller, events = make(FunctionStrategy(boom), max_failures=1)
    await controller.maybe_compact(users(9))
    await controller.maybe_compact(users(9))
    assert events[-1].status == "circuit_open"
    controller.reset()
    await controller.maybe_compact(users(9))
    assert events[-1].status == "failed"


async def test_force_runs_below_the_threshold() -> None:
    controller, events = make(keep_last(1))
    out = await controller.maybe_compact(users(3), force=True)
    assert [m.text for m in out] == ["m0", "m2"]
    assert events[-1].trigger == "forced"


# -- prepare_request -------------------------------------------------------------------------------


async def test_prepare_request_applies_transforms_in_order_and_keeps_history() -> None:
    # They rewrite the answers only: a user message rewritten is a pin the controller puts back.
    def rewrite(how: Callable[[str], str]) -> FunctionStrategy:
        return FunctionStrategy(
            lambda ctx: [
                m.replace(content=how(m.text)) if m.role == "assistant" else m for m in ctx.history
            ]
        )

    upper, exclaim = rewrite(str.upper), rewrite(lambda t: t + "!")
    controller, _ = make(transforms=[upper, FunctionStrategy(lambda ctx: None), exclaim])
    history = [user("go"), assistant("a0"), assistant("a1")]
    sent = await controller.prepare_request(history)
    assert [m.text for m in sent] == ["go", "A0!", "A1!"]
    assert [m.text for m in history] == ["go", "a0", "a1"]
    assert sent is not history


async def test_prepare_request_skips_a_failing_or_breaking_transform(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def boom(ctx: CompactionContext) -> None:
        raise RuntimeError("bad transform")

    breaking = FunctionStrategy(lambda ctx: [m for m in ctx.history if m.role != "assistant"])
    controller, _ = make(transforms=[FunctionStrategy(boom), breaking])
    history = [user("go"), assistant(None, call("a")), tool("a")]
    with caplog.at_level(logging.WARNING, logger="ctxcompact.controller"):
        sent = await controller.prepare_request(history)
    assert sent == history
    assert "RuntimeError" in caplog.text
    assert "bad transform" not in caplog.text
    assert "rejected" in caplog.text


async def test_prepare_request_without_transforms_is_a_copy() -> None:
    controller, _ = make()
    history = users(2)
    sent = await controller.prepare_request(history)
    assert sent == history
    assert sent is not history


# -- construction and config ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"max_context_size": 0}, "max_context_size"),
        ({"reserved_context_size": 100}, "reserved_context_size"),
        ({"trigger_ratio": 1.5}, "trigger_ratio"),
        ({"trigger_ratio": 1.0}, "trigger_ratio"),
        ({"trigger_ratio": 0.3}, "trigger_ratio"),
        ({"min_progress": 1.0}, "min_progress"),
        ({"max_failures": 0}, "max_failures"),
    ],
)
def test_bad_limits_are_config_errors(kwargs: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        make(**kwargs)
    assert info.value.key == key


@pytest.mark.parametrize("ratio", [0.49, 0.995, 1.0, 0.1])
def test_trigger_ratio_range_and_wording_match_the_config(ratio: float) -> None:
    # The controller used to accept (0, 1] while the config allows 0.5-0.99.
    with pytest.raises(ConfigError) as direct:
        make(trigger_ratio=ratio)
    with pytest.raises(ConfigError) as loaded:
        Config.from_dict({"compaction": {"trigger_ratio": ratio}})
    assert direct.value.key == "trigger_ratio"
    assert loaded.value.key == "compaction.trigger_ratio"
    wording = f"{ratio!r} is out of range; allowed: 0.5 <= trigger_ratio <= 0.99"
    assert wording in str(direct.value)
    assert wording in str(loaded.value)


@pytest.mark.parametrize("ratio", [0.5, 0.99])
def test_trigger_ratio_bounds_are_accepted(ratio: float) -> None:
    controller, _ = make(trigger_ratio=ratio)
    assert controller.trigger_ratio == ratio
    assert Config.from_dict({"compaction": {"trigger_ratio": ratio}}).compaction.trigger_ratio


def config(**compaction: object) -> Config:
    return Config.model_validate({"compaction": compaction})


def test_from_config_missing_max_context_size() -> None:
    with pytest.raises(ConfigError) as info:
        CompactionController.from_config(config(), strategy=keep_last(1))
    assert info.value.key == "compaction.max_context_size"
    controller = CompactionController.from_config(
        config(), strategy=keep_last(1), max_context_size=90_000
    )
    assert controller.max_context_size == 90_000


def test_from_config_loads_strategy_with_params_and_limits() -> None:
    cfg = config(
        strategy="tool-result-hiding",
        max_context_size=200_000,
        reserved_context_size=1000,
        trigger_ratio=0.8,
        min_progress=0.2,
        max_failures=5,
        params={"preserve_recent_n": 2},
    )
    controller = CompactionController.from_config(cfg)
    from ctxcompact.strategies import ToolResultHiding

    assert isinstance(controller.strategy, ToolResultHiding)
    assert controller.strategy.preserve_recent_n == 2
    assert (controller.max_context_size, controller.reserved_context_size) == (200_000, 1000)
    assert (controller.trigger_ratio, controller.min_progress, controller.max_failures) == (
        0.8,
        0.2,
        5,
    )
    assert isinstance(controller.token_counter, HeuristicTokenCounter)
    assert controller.transforms == ()


def test_from_config_injects_llm_and_builds_transforms_and_counter() -> None:
    llm = ScriptedLLM()
    cfg = Config.model_validate(
        {
            "compaction": {"strategy": "llm-summary", "max_context_size": 100_000},
            "observation_masking": {"schema1": {"enabled": True, "window_turns": 3}},
            "tool_result_truncation": {"enabled": True, "max_chars": 10_000},
            "token_counting": {"method": "tiktoken"},
        }
    )
    events: list[CompactionEvent] = []
    controller = CompactionController.from_config(cfg, llm=llm, on_event=events.append)
    assert controller.llm is llm
    assert getattr(controller.strategy, "llm", None) is llm
    names = [type(t).__name__ for t in controller.transforms]
    # Masking first, so a placeholder's chars= is the original size, not a truncated one.
    assert names == ["Schema1Masking", "ToolResultTruncation"]
    assert controller.transforms[1].max_chars == 10_000  # type: ignore[attr-defined]
    assert isinstance(controller.token_counter, TiktokenCounter)
    assert controller.on_event == events.append


def test_transform_error_names_the_table_when_the_config_loads() -> None:
    with pytest.raises(ConfigError) as info:
        Config.from_dict(
            {
                "compaction": {"max_context_size": 100_000},
                "tool_result_truncation": {"enabled": True, "max_chars": 1000},
            }
        )
    assert info.value.key == "tool_result_truncation.head_chars"
    assert str(info.value).count("head_chars") >= 2


def test_from_config_bad_strategy_is_a_load_error() -> None:
    with pytest.raises(StrategyLoadError):
        CompactionController.from_config(
            config(strategy="no.such.module:X", max_context_size=10, reserved_context_size=1)
        )


def test_from_config_adds_the_context_guard_last_with_the_controllers_window() -> None:
    from ctxcompact.strategies import ContextGuard

    cfg = Config.model_validate(
        {
            "compaction": {"max_context_size": 100_000},
            "observation_masking": {"schema1": {"enabled": True}},
            "tool_result_truncation": {"enabled": True},
            "context_guard": {
                "enabled": True,
                "reserve_tokens": 1000,
                "truncate_first": False,
                "max_tool_result_chars": 9000,
                "head_chars": 100,
                "tail_chars": 200,
            },
        }
    )
    controller = CompactionController.from_config(cfg, strategy=keep_last(1))
    names = [type(t).__name__ for t in controller.transforms]
    assert names == ["Schema1Masking", "ToolResultTruncation", "ContextGuard"]
    guard = controller.transforms[-1]
    assert isinstance(guard, ContextGuard)
    assert (guard.context_window, guard.reserve_tokens, guard.truncate_first) == (
        100_000,
        1000,
        False,
    )
    trunc = guard.truncation
    assert (trunc.max_chars, trunc.head_chars, trunc.tail_chars) == (9000, 100, 200)
    # Overriding the window in the call moves the guard's window too.
    other = CompactionController.from_config(cfg, strategy=keep_last(1), max_context_size=60_000)
    assert other.transforms[-1].context_window == 60_000  # type: ignore[attr-defined]
    # Disabled (the default): no guard.
    off = Config.model_validate({"compaction": {"max_context_size": 100_000}})
    assert CompactionController.from_config(off, strategy=keep_last(1)).transforms == ()


async def test_guard_transform_trims_requests_only() -> None:
    cfg = Config.model_validate(
        {
            "compaction": {"max_context_size": 3_000, "reserved_context_size": 100},
            "context_guard": {"enabled": True, "reserve_tokens": 500},
        }
    )
    counter = HeuristicTokenCounter()
    controller = CompactionController.from_config(cfg, strategy=keep_last(1), token_counter=counter)
    history = [system("s")]
    for k in range(30):
        history += [user(f"q{k} " + "x" * 400), assistant(f"a{k} " + "y" * 400)]
    history.append(user("last"))
    copy = list(history)
    sent = await controller.prepare_request(history)
    assert history == copy
    assert len(sent) < len(history)
    assert counter.count(sent) <= 3_000 - 500
    assert sent[0] is history[0]
    assert sent[1] is history[1]  # the first user message is pinned
    # The newest too; with the default store it carries the note naming what was dropped.
    assert sent[-1].text.startswith("last\n\n[ctxcompact: ")
    assert 'recall_tool_result("#r' in sent[-1].text
    assert check_history(sent) == []


def test_guard_reserve_too_big_names_the_table_at_load_and_at_build() -> None:
    data: dict[str, object] = {
        "compaction": {"max_context_size": 8_000, "reserved_context_size": 100},
        "context_guard": {"enabled": True, "reserve_tokens": 8192},  # 8192 >= 8000
    }
    with pytest.raises(ConfigError) as info:
        Config.from_dict(data)  # caught when the file loads
    assert info.value.key == "context_guard.reserve_tokens"
    assert "8192" in str(info.value)
    # A window passed in code instead of the file is checked when the controller is built.
    cfg = Config.from_dict(
        {**data, "compaction": {"max_context_size": 100_000, "reserved_context_size": 100}}
    )
    with pytest.raises(ConfigError) as built:
        CompactionController.from_config(cfg, strategy=keep_last(1), max_context_size=8_000)
    assert built.value.key == "context_guard.reserve_tokens"


def test_the_guard_table_keeps_the_controllers_reserve_free_unless_it_sets_its_own() -> None:
    # One meaning of "fits": the per-request guard used to keep 8,192 tokens free whatever
    # the controller reserved, so it trimmed requests the window held (a trace at 8,053
    # tokens in a 16,000 window with 4,000 reserved).
    table: dict[str, object] = {"enabled": True}
    limits = {"strategy": "tool-result-hiding", "max_context_size": 16_000}
    limits["reserved_context_size"] = 4_000

    def guard() -> ContextGuard:
        built = wire(Config.from_dict({"compaction": limits, "context_guard": table}))
        assert isinstance(built.transforms[0], ContextGuard)
        return built.transforms[0]

    assert guard().budget(None) == 12_000
    # Per request it drops oldest first, in batches of 8: a fixed order keeps the prefix.
    assert (guard().drop_order(), guard().batch_size()) == ("oldest", 8)
    table["reserve_tokens"] = 8_192
    assert guard().budget(None) == 16_000 - 8_192


def test_from_config_window_override_below_reserved_names_the_key(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[compaction]\nmax_context_size = 100000\n", encoding="utf-8")
    cfg = load_config(path)
    with pytest.raises(ConfigError) as info:
        CompactionController.from_config(cfg, strategy=keep_last(1), max_context_size=40_000)
    assert info.value.key == "compaction.reserved_context_size"
    assert info.value.path == str(path)
    assert "must be below max_context_size (40000)" in str(info.value)


async def test_from_config_transforms_mask_old_results_in_requests_only() -> None:
    cfg = Config.model_validate(
        {
            "compaction": {"max_context_size": 10_000_000},
            "observation_masking": {
                "schema1": {"enabled": True, "window_turns": 1, "always": True}
            },
        }
    )
    controller = CompactionController.from_config(cfg, strategy=keep_last(1))
    history = from_openai(load_trace("msa-gemini3pro__astropy__astropy-12907"))
    sent = await controller.prepare_request(history)
    assert len(sent) == len(history)
    pairs = enumerate(zip(history, sent, strict=True))
    changed = [i for i, (a, b) in pairs if a.content != b.content]
    assert changed
    assert all(history[i].role == "tool" for i in changed)
    assert check_history(sent) == []
    assert history == from_openai(load_trace("msa-gemini3pro__astropy__astropy-12907"))


@pytest.mark.parametrize(
    "name", ["claudecode__fa812bfe__precompact", "taubench-gpt4o-airline__task3_trial0"]
)
async def test_real_strategy_on_a_trace_through_the_controller(name: str) -> None:
    from ctxcompact.strategies import ToolResultHiding

    history = from_openai(load_trace(name))
    controller, events = make(
        ToolResultHiding(preserve_recent_n=2),
        token_counter=HeuristicTokenCounter(),
        max_context_size=10_000,
        reserved_context_size=5_000,
    )
    out = await controller.maybe_compact(history)
    assert events[-1].status == "compacted"
    assert check_history(out) == []
    assert len(out) == len(history)
    assert events[-1].tokens_after < events[-1].tokens_before
    assert controller.token_count(out) == events[-1].tokens_after


# -- properties ----------------------------------------------------------------------------------


@pytest.mark.parametrize("recall", [False, True], ids=["plain", "recall"])
@settings(max_examples=60, deadline=None)
@given(valid_histories(), st.data())
async def test_result_is_the_original_or_a_valid_history(
    recall: bool, history: list[Message], data: st.DataObject
) -> None:
    # A careless strategy dropping random messages: whatever it returns, the controller
    # hands back either the input object untouched or a history check_history accepts.
    # With the default store and recall (the default), a message may carry the note naming
    # what was dropped: the message itself, its text followed by the note.
    keep = data.draw(st.lists(st.booleans(), min_size=len(history), max_size=len(history)))
    strategy = FunctionStrategy(
        lambda ctx: [m for m, k in zip(ctx.history, keep, strict=True) if k]
    )
    controller, events = make(
        strategy, max_context_size=100, reserved_context_size=99, recall=recall
    )

    kept = [m for m, k in zip(history, keep, strict=True) if k]

    def source(m: Message, taken: list[Message]) -> Message | None:
        for h in history:
            if m is h:
                return h
        for h in [*kept, *history]:  # equal messages: the one the strategy kept
            if any(h is t for t in taken):
                continue  # each message of the history is in the output once
            noted = h.model_copy(update={"content": m.content})
            # Its text followed by a note, nothing else (an empty text starts every text).
            # (Compared without trailing newlines: two empty parts read "\n".)
            noted_text = m.text != h.text and (
                strip_notes(m.text).rstrip("\n") == h.text.rstrip("\n")
            )
            if recall and noted == m and noted_text:
                return h
        return None

    snapshot = list(history)
    out = await controller.maybe_compact(history)
    assert history == snapshot
    if out is history:
        assert events[-1].status in ("noop", "rejected")
    else:
        assert events[-1].status == "compacted"
        assert check_history(out) == []
        # What the strategy kept, in order, plus pinned messages (and their tool-call groups)
        # the controller put back: nothing new.
        # Equal messages (two empty user messages, one kept, one put back with a note) are
        # matched once each, in order.
        taken = [m for m in out if any(m is h for h in history)]
        sources: list[Message | None] = []
        for m in out:
            sources.append(source(m, taken))
            if sources[-1] is not None and sources[-1] is not m:
                taken.append(sources[-1])
        assert None not in sources
        assert [s for s in sources if any(s is k for k in kept)] == kept


@settings(max_examples=50, deadline=None)
@given(
    valid_histories(max_turns=4),
    st.lists(st.sampled_from(["append", "pop", "copy", "usage", "replace_first"]), max_size=12),
)
def test_running_count_matches_a_full_recount(history: list[Message], ops: list[str]) -> None:
    counter = HeuristicTokenCounter()
    controller, _ = make(token_counter=counter)
    usage: tuple[int, int] | None = None  # (tokens, length) the provider reported
    current = list(history[:1])
    for step, op in enumerate(ops):
        if op == "append" and len(current) < len(history):
            current.append(history[len(current)])
        elif op == "pop" and current:
            current.pop()
            usage = None
        elif op == "copy":
            current = [m.model_copy() for m in current]  # equal, new objects
        elif op == "replace_first" and current:
            current[0] = user(f"replaced {step}")
            usage = None
        elif op == "usage":
            controller.observe_usage(Usage(input_tokens=1000 + step), current)
            usage = (1000 + step, len(current))
        expected = counter.count(current)
        if usage is not None:
            expected = usage[0] + counter.count(current[usage[1] :])
        assert controller.token_count(current) == expected


async def test_prepare_request_records_skipped_transforms_and_passes_the_answer_budget() -> None:
    seen: list[int | None] = []

    def record(ctx: CompactionContext) -> None:
        seen.append(ctx.max_output_tokens)

    def boom(ctx: CompactionContext) -> None:
        raise RuntimeError("kaput")

    controller = CompactionController(
        keep_last(1),
        max_context_size=1000,
        reserved_context_size=100,
        transforms=[FunctionStrategy(record), FunctionStrategy(boom, name="boom")],
    )
    history = [user("hi")]
    prepared = await controller.prepare(history, max_output_tokens=300)
    assert prepared.messages == history
    assert seen == [300]
    assert len(prepared.skipped) == 1
    # A third-party exception's text may carry message content: only its type is reported.
    assert prepared.skipped[0].startswith("boom raised RuntimeError")
    assert "kaput" not in prepared.skipped[0]
    controller.transforms = (FunctionStrategy(record),)
    again = await controller.prepare(history)
    assert seen == [300, None]
    assert again.skipped == ()
