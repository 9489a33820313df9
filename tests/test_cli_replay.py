"""The replay engine and its cache-adjusted cost model, on tiny hand-computed cases.

Token counts come from ``CharCounter`` (one token per character of text, no overhead), so
every expected number below is derived by hand in the comments.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import pytest

from ctxcompact import (
    CompactionContext,
    CompactionController,
    Completion,
    HeuristicTokenCounter,
    Message,
    ToolCall,
    Usage,
    from_openai,
)
from ctxcompact.replay import CacheMeter, MemoCounter, MeteredLLM, ReplayStats, replay
from ctxcompact.strategies import LLMSummary, ToolResultHiding
from ctxcompact.testing import FunctionStrategy, ScriptedLLM
from tests.helpers.traces import load_trace, trace_names


class CharCounter:
    """One token per character of text; counts how often it is asked about a message."""

    def __init__(self) -> None:
        self.asked = 0

    def count(self, messages: Iterable[Message]) -> int:
        return sum(self.count_message(m) for m in messages)

    def count_message(self, message: Message) -> int:
        self.asked += 1
        return len(message.text)


def user(n: int, ch: str = "a") -> Message:
    return Message.user(ch * n)


def test_append_only_inputs_bill_the_previous_input_at_the_cached_price() -> None:
    a, b, c = user(10, "a"), user(20, "b"), user(30, "c")
    meter = CacheMeter(CharCounter(), cached_price=0.1)
    first = meter.bill([a])  # nothing cached: 10 tokens at 1 -> 10
    second = meter.bill([a, b])  # a cached: 10 * 0.1 + 20 -> 21
    third = meter.bill([a, b, c])  # a, b cached: 30 * 0.1 + 30 -> 33
    assert (first.input_tokens, first.cached_tokens, first.cost) == (10, 0, 10.0)
    assert (second.input_tokens, second.cached_tokens) == (30, 10)
    assert second.cost == pytest.approx(21.0)
    assert (third.input_tokens, third.cached_tokens) == (60, 30)
    assert third.cost == pytest.approx(33.0)
    assert not any(bill.cache_break for bill in (first, second, third))


def test_rewriting_an_early_message_rebills_everything_after_it() -> None:
    a, b, c = user(10, "a"), user(20, "b"), user(30, "c")
    masked_b = user(5, "m")
    meter = CacheMeter(CharCounter(), cached_price=0.1)
    meter.bill([a, b])
    # Only a (10 tokens) is still a shared prefix: 10 * 0.1 + (5 + 30) -> 36, and a break,
    # because 1 shared message < 2 in the previous input.
    bill = meter.bill([a, masked_b, c])
    assert (bill.input_tokens, bill.cached_tokens, bill.cache_break) == (45, 10, True)
    assert bill.cost == pytest.approx(36.0)


def test_equal_but_not_identical_messages_count_as_cached() -> None:
    meter = CacheMeter(CharCounter(), cached_price=0.5)
    meter.bill([user(8, "x")])
    # A new object with the same content is the same prompt prefix: 8 * 0.5 + 4 -> 8
    bill = meter.bill([user(8, "x"), user(4, "y")])
    assert (bill.cached_tokens, bill.cost, bill.cache_break) == (8, 8.0, False)


def test_a_shorter_input_is_a_cache_break_even_if_it_is_a_prefix() -> None:
    a, b, c = user(1), user(2, "b"), user(3, "c")
    meter = CacheMeter(CharCounter(), cached_price=0.1)
    meter.bill([a, b, c])
    bill = meter.bill([a, b])  # shared 2 < 3 previous messages; 3 * 0.1 -> 0.3
    assert bill.cache_break
    assert bill.cost == pytest.approx(0.3)


def test_cached_price_bounds() -> None:
    a, b = user(10), user(20, "b")
    free = CacheMeter(CharCounter(), cached_price=0.0)
    free.bill([a])
    assert free.bill([a, b]).cost == 20.0  # cached part free: 0 + 20
    full = CacheMeter(CharCounter(), cached_price=1.0)
    full.bill([a])
    assert full.bill([a, b]).cost == 30.0  # no discount: 10 + 20
    with pytest.raises(ValueError, match="cached_price"):
        CacheMeter(CharCounter(), cached_price=1.5)


def test_empty_first_input_costs_nothing_and_breaks_nothing() -> None:
    meter = CacheMeter(CharCounter())
    bill = meter.bill([])
    assert (bill.input_tokens, bill.cost, bill.cache_break) == (0, 0.0, False)
    assert not meter.bill([user(3)]).cache_break  # 0 shared == 0 previous messages


def test_memo_counter_counts_each_message_object_once() -> None:
    inner = CharCounter()
    counter = MemoCounter(inner)
    a, b = user(10), user(20)
    assert counter.count([a, b]) == 30
    assert counter.count([a, b, a]) == 40
    assert inner.asked == 2  # a and b, once each (plus none for the base count of [])
    counter.clear()
    assert counter.count([a]) == 10
    assert inner.asked == 3


def _conversation() -> list[Message]:
    call = ToolCall(id="c1", name="ls", arguments="{}")
    return [
        Message.system("s" * 10),  # 10
        Message.user("u" * 20),  # 20
        Message.assistant(None, tool_calls=[call]),  # 0 (text only is counted)
        Message.tool("c1", "t" * 100),  # 100
        Message.assistant("a" * 5),  # 5
        Message.user("v" * 7),  # 7
        Message.assistant("b" * 3),  # 3
    ]


async def test_replay_without_compaction_bills_each_assistant_message_as_a_call() -> None:
    stats = await replay(_conversation(), None, counter=CharCounter(), cached_price=0.1)
    # Call inputs: [s,u] = 30; [s,u,a1,t] = 130; [s,u,a1,t,a2,v] = 142.
    assert stats.context_tokens == [30, 130, 142]
    assert (stats.calls, stats.input_tokens, stats.peak_context_tokens) == (3, 302, 142)
    # Cost: 30 + (30 * 0.1 + 100) + (130 * 0.1 + 12) = 30 + 103 + 25 = 158.
    assert stats.cost == pytest.approx(158.0)
    assert (stats.cache_breaks, stats.compactions, stats.summarizer_calls) == (0, 0, 0)


def test_stats_add_up_and_keep_the_peak() -> None:
    one = ReplayStats(calls=2, input_tokens=10, peak_context_tokens=7, cost=3.5)
    one.context_tokens.extend([3, 7])
    two = ReplayStats(calls=1, input_tokens=5, peak_context_tokens=5, cost=1.0, cache_breaks=1)
    two.context_tokens.append(5)
    total = one + two
    assert (total.calls, total.input_tokens, total.peak_context_tokens) == (3, 15, 7)
    assert (total.cost, total.cache_breaks, total.context_tokens) == (4.5, 1, [3, 7, 5])


# -- through the real controller -------------------------------------------------------------


def _shrink_tool_results(ctx: CompactionContext) -> list[Message]:
    return [m.replace(content="t") if m.role == "tool" else m for m in ctx.history]


def _controller(window: int, strategy: object, **kwargs: object) -> CompactionController:
    # The cache arithmetic below is on the strategy's own output: recall (on by default with
    # the default store) would put a recall placeholder where the strategy wrote "t".
    kwargs.setdefault("recall", False)
    return CompactionController(
        strategy,  # type: ignore[arg-type]
        max_context_size=window,
        reserved_context_size=0,
        token_counter=CharCounter(),
        **kwargs,  # type: ignore[arg-type]
    )


async def test_a_compaction_of_messages_not_yet_sent_breaks_no_cache() -> None:
    controller = _controller(100, FunctionStrategy(_shrink_tool_results))
    stats = await replay(_conversation(), controller, counter=CharCounter())
    # Call 1: [s,u] = 30 < 100, cost 30.
    # Call 2: [s,u,a1,t] = 130 >= 100 -> compacted to [s,u,a1,t'] = 31; [s,u] was the whole
    #   previous input and is unchanged: 30 * 0.1 + 1 = 4, no break.
    # Call 3: [s,u,a1,t',a2,v] = 43; all 4 previous messages shared: 31 * 0.1 + 12 = 15.1.
    assert stats.context_tokens == [30, 31, 43]
    assert (stats.compactions, stats.cache_breaks, stats.input_tokens) == (1, 0, 104)
    assert stats.cost == pytest.approx(49.1)


async def test_a_compaction_of_sent_messages_is_a_cache_break() -> None:
    controller = _controller(140, FunctionStrategy(_shrink_tool_results))
    stats = await replay(_conversation(), controller, counter=CharCounter())
    # Call 2: 130 < 140, not compacted: 30 * 0.1 + 100 = 103.
    # Call 3: [s,u,a1,t,a2,v] = 142 >= 140 -> [s,u,a1,t',a2,v] = 43; only s,u,a1 (30) are
    #   shared with the previous 4 messages: 30 * 0.1 + 13 = 16, a break.
    assert stats.context_tokens == [30, 130, 43]
    assert (stats.compactions, stats.cache_breaks, stats.peak_context_tokens) == (1, 1, 130)
    assert stats.cost == pytest.approx(30 + 103 + 16)


async def test_per_request_transforms_shape_the_input_but_not_the_stored_history() -> None:
    never = FunctionStrategy(lambda ctx: None)
    transform = FunctionStrategy(_shrink_tool_results)
    controller = _controller(10**9, never, transforms=(transform,))
    seen: list[tuple[int, list[str]]] = []
    stats = await replay(
        _conversation(),
        controller,
        counter=CharCounter(),
        on_call=lambda i, request: seen.append((i, [m.text for m in request])),
    )
    # Every call sees t' = "t" (1 token): [30, 31, 43], and no compaction is counted.
    assert stats.context_tokens == [30, 31, 43]
    assert stats.compactions == 0
    assert [i for i, _ in seen] == [2, 4, 6]
    assert seen[2][1][3] == "t"


async def test_failed_compactions_are_counted_and_reported() -> None:
    def boom(ctx: CompactionContext) -> None:
        raise RuntimeError("boom")

    errors: list[str] = []
    controller = _controller(100, FunctionStrategy(boom))
    stats = await replay(
        _conversation(), controller, counter=CharCounter(), on_failure=errors.append
    )
    # Calls 2 and 3 are over 100 tokens: two failures, the history kept whole.
    assert stats.failed_compactions == 2
    assert stats.context_tokens == [30, 130, 142]
    assert errors
    assert errors[0].startswith("RuntimeError")


async def test_summarizer_calls_and_tokens_are_metered() -> None:
    scripted = ScriptedLLM(
        Completion(
            Message.assistant("the summary"), usage=Usage(input_tokens=900, output_tokens=12)
        )
    )
    counter = CharCounter()
    llm = MeteredLLM(scripted, counter)
    controller = _controller(
        140, LLMSummary(max_preserved_messages=2, max_input_tokens=10_000), llm=llm
    )
    stats = await replay(_conversation(), controller, counter=counter, llm=llm)
    assert (stats.summarizer_calls, stats.summarizer_tokens) == (1, 912)  # 900 in + 12 out
    assert stats.compactions == 1
    assert len(scripted.requests) == 1


async def test_metered_llm_estimates_tokens_when_no_usage_is_reported() -> None:
    llm = MeteredLLM(ScriptedLLM("abcd"), CharCounter())
    await llm.complete([Message.user("x" * 10)], system="yyy")
    # Prompt: system "yyy" (3) + user (10); answer "abcd" (4) -> 17.
    assert (llm.calls, llm.tokens) == (1, 17)


@pytest.mark.parametrize("name", trace_names())
async def test_every_trace_replays_with_the_cli_defaults(name: str) -> None:
    conversation = from_openai(load_trace(name))
    counter = MemoCounter(HeuristicTokenCounter())
    baseline = await replay(conversation, None, counter=counter)
    controller = CompactionController(
        ToolResultHiding(),
        max_context_size=16_000,
        reserved_context_size=4_000,
        token_counter=counter,
    )
    compacted = await replay(conversation, controller, counter=counter)
    calls = sum(m.role == "assistant" for m in conversation)
    assert baseline.calls == compacted.calls == calls
    # A recording only grows: with no compaction nothing cached is ever changed.
    assert baseline.cache_breaks == 0
    assert baseline.cost <= baseline.input_tokens
    assert compacted.failed_compactions == 0
    # Hiding only ever shortens tool results, and a break needs a compaction.
    assert compacted.input_tokens <= baseline.input_tokens
    assert compacted.cache_breaks <= compacted.compactions
    if baseline.peak_context_tokens < 12_000:
        assert compacted.compactions == 0


@pytest.mark.parametrize(
    ("table", "window", "reserved"),
    [
        ('model = "gpt-4"\nreserved_context_size = 1000\n', 8_192, 1_000),  # the model's window
        ("reserved_context_size = 6000\n", 16_000, 6_000),  # a written reserve is kept
        ("", 16_000, 4_000),  # neither: the replay defaults
    ],
)
def test_replay_limits_follow_the_config_model_and_reserve(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], table: str, window: int, reserved: int
) -> None:
    from ctxcompact.cli import main

    path = tmp_path / "c.toml"
    path.write_text(f'[compaction]\nstrategy = "tool-result-hiding"\n{table}', encoding="utf-8")
    assert main(["replay", "--config", str(path), "--json"]) == 0
    settings = json.loads(capsys.readouterr().out)["settings"]
    assert (settings["max_context_size"], settings["reserved_context_size"]) == (window, reserved)
