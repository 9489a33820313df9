"""Cold-cache compaction: after cache_ttl seconds idle, compact even below the trigger."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from ctxcompact import (
    CompactionContext,
    CompactionController,
    Config,
    Message,
    Usage,
    check_history,
    from_openai,
)
from ctxcompact.exceptions import ConfigError
from ctxcompact.replay import replay
from ctxcompact.strategies import ToolResultHiding
from ctxcompact.testing import FunctionStrategy
from tests.helpers.gen import assistant, call, tool, user


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def history_of(groups: int) -> list[Message]:
    out = [user("fix the bug")]
    for k in range(groups):
        out += [assistant(None, call(f"c{k}", "read")), tool(f"c{k}", "file text " * 200)]
    return out


def controller(clock: FakeClock, **kw: object) -> CompactionController:
    return CompactionController(
        ToolResultHiding(preserve_recent_n=1),
        max_context_size=1_000_000,  # far above the history: only the cold rule can fire
        reserved_context_size=0,
        cache_ttl=300,
        clock=clock,
        **kw,  # type: ignore[arg-type]
    )


async def test_no_compaction_below_the_trigger_while_the_cache_is_warm() -> None:
    clock = FakeClock()
    ctl = controller(clock)
    history = history_of(4)
    await ctl.step(history)  # a model call at t=1000
    clock.now += 299
    result = await ctl.compact(history)
    assert result.event is None
    assert result.history is history


async def test_after_the_ttl_the_next_call_compacts_below_the_trigger() -> None:
    clock = FakeClock()
    ctl = controller(clock)
    history = history_of(4)
    await ctl.step(history)
    clock.now += 301
    step = await ctl.step(history)
    assert step.event is not None
    assert (step.event.trigger, step.event.status) == ("cold", "compacted")
    assert step.compacted
    assert len(step.history) == len(history)  # masked, nothing dropped
    assert check_history(step.history) == []
    assert [m.content for m in step.history[-2:]] == [m.content for m in history[-2:]]
    # The call it prepared warmed the cache again: the next one is not cold.
    after = await ctl.compact(list(step.history))
    assert after.event is None


async def test_no_call_observed_yet_means_not_cold() -> None:
    clock = FakeClock()
    ctl = controller(clock)
    clock.now += 10**6
    assert (await ctl.compact(history_of(4))).event is None


async def test_observe_usage_records_the_call_time() -> None:
    clock = FakeClock()
    ctl = controller(clock)
    history = history_of(4)
    ctl.observe_usage(Usage(input_tokens=10, output_tokens=5), history)
    clock.now += 301
    result = await ctl.compact(history)
    assert result.event is not None
    assert result.event.trigger == "cold"


async def test_a_cold_run_saving_too_little_is_a_noop_not_a_failure() -> None:
    clock = FakeClock()

    def trim_one(ctx: CompactionContext) -> Sequence[Message]:
        return [*ctx.history[:-1], Message.tool(ctx.history[-1].tool_call_id or "", "short")]

    ctl = CompactionController(
        FunctionStrategy(trim_one),
        max_context_size=1_000_000,
        reserved_context_size=0,
        cache_ttl=60,
        clock=clock,
        min_progress=0.5,
    )
    history = history_of(4)  # the last result is ~1/4 of the tokens: below 50%
    await ctl.step(history)
    clock.now += 61
    result = await ctl.compact(history)
    assert result.event is not None
    assert (result.event.trigger, result.event.status) == ("cold", "noop")
    assert result.history is history
    assert ctl.state.failures == 0
    assert ctl.state.retry_at is None  # a threshold run later is not held back


def test_cache_ttl_must_be_positive() -> None:
    with pytest.raises(ConfigError) as err:
        CompactionController(ToolResultHiding(), max_context_size=100, reserved_context_size=0,
                             cache_ttl=0)  # fmt: skip
    assert err.value.key == "cache_ttl"


def test_cache_ttl_comes_from_the_config() -> None:
    config = Config.from_dict(
        {
            "compaction": {
                "strategy": "tool-result-hiding",
                "max_context_size": 16_000,
                "reserved_context_size": 4_000,
                "cache_ttl": 300,
            }
        }
    )
    assert CompactionController.from_config(config).cache_ttl == 300
    with pytest.raises(ConfigError, match="cache_ttl"):
        Config.from_dict({"compaction": {"cache_ttl": -1}})


async def test_replay_drives_the_clock_with_the_recorded_timestamps() -> None:
    raw: list[dict[str, object]] = [{"role": "user", "content": "fix the bug"}]
    times = [0, 30, 60, 90, 90 + 3600, 3700]  # an hour's pause before the fifth call
    for k, t in enumerate(times):
        raw.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": f"c{k}", "type": "function",
                     "function": {"name": "read", "arguments": "{}"}}
                ],
                "timestamp": t,
            }
        )  # fmt: skip
        raw.append({"role": "tool", "tool_call_id": f"c{k}", "content": "file text " * 200})
    conversation = from_openai(raw)
    clock = FakeClock()
    ctl = controller(clock)
    stats = await replay(conversation, ctl, counter=ctl.token_counter)
    assert stats.compaction_calls == [5]
    assert ctl.clock is clock  # restored after the replay
    # Without timestamps (or without cache_ttl) nothing fires below the trigger.
    for entry in raw:
        entry.pop("timestamp", None)
    plain = await replay(from_openai(raw), controller(FakeClock()), counter=ctl.token_counter)
    assert plain.compactions == 0
