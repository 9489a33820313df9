"""ContextGuard: seed 003 L2's test list, units kept whole, logging, where the window comes from."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxcompact import (
    CompactionContext,
    CompactionController,
    HeuristicTokenCounter,
    Message,
    check_history,
)
from ctxcompact.exceptions import ConfigError
from ctxcompact.strategies import ContextGuard
from tests.gen import (
    assistant,
    call,
    invalid_histories,
    system,
    tool,
    user,
    valid_histories,
)
from tests.strategy_checks import assert_safe, dump, run

COUNT = HeuristicTokenCounter()


def chat(n: int, *, size: int = 200) -> list[Message]:
    """System prompt, then ``n`` rounds of user / assistant-with-2-calls / results / answer."""
    out: list[Message] = [system("you are helpful")]
    for k in range(n):
        out += [
            user(f"question {k} " + "q" * size),
            assistant(None, call(f"a{k}", "ls"), call(f"b{k}", "cat")),
            tool(f"a{k}", "r" * size),
            tool(f"b{k}", "s" * size),
            assistant(f"answer {k} " + "w" * size),
        ]
    return out


def guard(history: list[Message], **params: Any) -> list[Message] | None:
    snap = dump(history)
    limits = {"max_context_size": params.pop("max_context_size", 200_000)}
    if "reserved" in params:
        limits["reserved"] = params.pop("reserved")
    out: list[Message] | None = run(ContextGuard(**params), history, **limits)
    assert_safe(history, snap, out)
    return out


def test_short_conversation_is_not_trimmed() -> None:
    assert guard(chat(3), context_window=100_000, reserve_tokens=0) is None


def test_long_conversation_drops_the_oldest_and_fits() -> None:
    h = chat(20)
    budget = COUNT.count(h) // 3
    out = guard(h, context_window=budget, reserve_tokens=0)
    assert out is not None
    assert COUNT.count(out) <= budget
    assert out[0] is h[0]  # the system prompt stays
    assert out[-1] is h[-1]  # the newest stays
    assert out[1:] == h[len(h) - len(out) + 1 :]  # a suffix of the conversation
    assert check_history(out) == []


def test_budget_is_window_minus_reserve() -> None:
    h = chat(20)
    total = COUNT.count(h)
    assert guard(h, context_window=total + 100, reserve_tokens=100) is None
    out = guard(h, context_window=total + 100, reserve_tokens=101)
    assert out is not None
    assert COUNT.count(out) <= total - 1


def test_window_comes_from_the_context_when_not_given() -> None:
    h = chat(20)
    total = COUNT.count(h)
    # From the context, the history must stay strictly below the controller's threshold
    # (tokens + reserved >= max fires), hence the + 1.
    assert guard(h, max_context_size=total + 1, reserved=0, reserve_tokens=0) is None
    assert guard(h, max_context_size=total, reserved=0, reserve_tokens=0) is not None
    out = guard(h, max_context_size=total // 2, reserved=0, reserve_tokens=0)
    assert out is not None
    assert COUNT.count(out) < total // 2
    # The parameter wins over the context, and the context's reserve is then ignored.
    assert guard(h, context_window=total, max_context_size=10, reserve_tokens=0) is None


def test_context_reserve_is_a_lower_bound_when_the_window_comes_from_the_context() -> None:
    h = chat(20)
    total = COUNT.count(h)
    window = total + 1000
    # The context's reserved_context_size (1000) is larger than reserve_tokens (10): it wins.
    out = guard(h, max_context_size=window, reserved=1000, reserve_tokens=10)
    assert out is not None
    assert COUNT.count(out) + 1000 < window
    # reserve_tokens larger than the context's reserve: reserve_tokens wins.
    out = guard(h, max_context_size=window, reserved=10, reserve_tokens=2000)
    assert out is not None
    assert COUNT.count(out) <= window - 2000
    assert guard(h, max_context_size=window, reserved=10, reserve_tokens=10) is None


def test_system_messages_always_stay_even_mid_history() -> None:
    h = chat(10)
    h.insert(12, system("a mid-history note"))
    out = guard(h, context_window=COUNT.count(h) // 4, reserve_tokens=0)
    assert out is not None
    assert [m for m in out if m.role == "system"] == [m for m in h if m.role == "system"]


def test_tool_call_groups_are_dropped_whole() -> None:
    h = chat(10)
    for budget in range(50, COUNT.count(h), 97):
        out = guard(h, context_window=budget, reserve_tokens=0)
        assert out is not None
        assert check_history(out) == []
        first = next(m for m in out if m.role != "system")
        assert first.role != "tool"


def test_system_and_one_user_message_are_not_trimmed() -> None:
    h = [system("s" * 1000), user("u" * 1000)]
    assert guard(h, context_window=100, reserve_tokens=0) is None


def test_single_message_over_budget_keeps_the_newest() -> None:
    h = [system("sys"), user("old"), assistant("reply"), user("x" * 10_000)]
    out = guard(h, context_window=50, reserve_tokens=0, truncate_first=False)
    assert out == [h[0], h[3]]


def test_newest_unit_with_its_results_is_kept_whole() -> None:
    h = [user("old " * 100), user("new"), assistant(None, call("a"), call("b"))]
    h += [tool("a", "x" * 5000), tool("b", "y" * 5000)]
    out = guard(h, context_window=100, reserve_tokens=0, truncate_first=False)
    assert out == h[1:]


def test_the_question_before_an_oversized_last_unit_is_never_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The review's probe: dropping the user message left [assistant(tool_calls), tool].
    h = [user("q"), assistant(None, call("x")), tool("x", "r" * 120_000)]
    with caplog.at_level(logging.WARNING, logger="ctxcompact.strategies.guard"):
        assert guard(h, context_window=1000, reserve_tokens=100, truncate_first=False) is None
    assert "still over budget" in caplog.text
    # With truncation, only the result is cut; the question stays.
    out = guard(h, context_window=1000, reserve_tokens=100)
    assert out is not None
    assert [m.role for m in out] == ["user", "assistant", "tool"]
    assert out[0] is h[0]
    assert len(out[2].text) < 5000


def test_the_last_user_message_and_everything_after_it_stay() -> None:
    # The review's probe: the old guard kept only [system, system, assistant("final")].
    h = [system("S"), user("a" * 3000), assistant("b" * 3000), system("mid"), user("c" * 3000)]
    h += [assistant(None, call("x"), call("y")), tool("x", "r" * 3000), tool("y", "r" * 3000)]
    h.append(assistant("final " * 2000))
    out = guard(h, context_window=1500, reserve_tokens=0, truncate_first=False)
    assert out == [h[0], h[3], *h[4:]]


def test_kept_history_always_starts_with_a_user_message() -> None:
    # Rounds whose tool-call unit and answer are separate units: the old guard could cut
    # between them and start the history with an assistant message.
    h = chat(12)
    last_user = max(i for i, m in enumerate(h) if m.role == "user")
    for budget in range(20, COUNT.count(h) + 40, 37):
        out = guard(h, context_window=budget, reserve_tokens=0, truncate_first=False)
        if out is None:
            continue
        first = next(m for m in out if m.role != "system")
        assert first.role == "user", budget
        assert out[-(len(h) - last_user) :] == h[last_user:]  # the protected tail, whole
        # Dropping stops at the first turn boundary that fits (or at the protected tail).
        fits = COUNT.count(out) <= budget
        assert fits or out[1] is h[last_user]


def test_history_without_a_user_message_keeps_its_newest_unit() -> None:
    h = [system("s"), assistant("a" * 4000), assistant(None, call("x")), tool("x", "r" * 4000)]
    out = guard(h, context_window=100, reserve_tokens=0, truncate_first=False)
    assert out == [h[0], *h[2:]]


def test_truncation_first_can_be_enough() -> None:
    big = "L" * 120_000
    h = [system("sys"), user("read it"), assistant(None, call("a", "read")), tool("a", big)]
    h.append(assistant("done"))
    out = guard(h, context_window=COUNT.count(h) // 2, reserve_tokens=0)
    assert out is not None
    assert len(out) == len(h)
    assert out[3].tool_call_id == "a"
    assert len(out[3].text) < 5_000


def test_truncation_and_dropping_combine() -> None:
    h = chat(10, size=30_000)
    h.insert(3, tool("a0", "z" * 80_000))  # oversized, inside the first group
    h.pop(4)
    budget = 60_000
    out = guard(h, context_window=budget, reserve_tokens=0)
    assert out is not None
    assert COUNT.count(out) <= budget
    assert all(len(m.text) <= 50_000 for m in out)


def test_truncate_first_false_only_drops() -> None:
    h = [user("q"), assistant(None, call("a")), tool("a", "L" * 120_000), user("next")]
    out = guard(h, context_window=1_000, reserve_tokens=0, truncate_first=False)
    assert out == [h[3]]


def test_drops_and_cuts_are_logged_at_warning(caplog: pytest.LogCaptureFixture) -> None:
    h = chat(10, size=30_000)
    h[3] = tool("a0", "z" * 80_000)
    with caplog.at_level(logging.WARNING, logger="ctxcompact.strategies.guard"):
        guard(h, context_window=60_000, reserve_tokens=0)
    text = caplog.text
    assert 'Context guard: truncated tool result for "ls" (80000 → ' in text
    assert "Context guard: dropped " in text
    assert "old messages (estimated " in text
    assert all(r.levelno == logging.WARNING for r in caplog.records)


def test_orphans_and_separated_results_never_lose_their_call() -> None:
    h = [system("s"), user("u" * 400), assistant(None, call("a"), call("b")), tool("a", "x" * 400)]
    h += [user("wait " * 80), tool("b", "late " * 80), tool("orphan", "o" * 400)]
    h += [user("now"), assistant("ok")]
    before = {p.kind for p in check_history(h)}
    for budget in range(10, COUNT.count(h) + 10, 23):
        out = guard(h, context_window=budget, reserve_tokens=0)
        if out is not None:
            assert {p.kind for p in check_history(out)} <= before


@pytest.mark.parametrize(
    ("params", "key"),
    [
        ({"context_window": 1000, "reserve_tokens": 1000}, "reserve_tokens"),
        ({"context_window": 0}, "context_window"),
        ({"reserve_tokens": -5}, "reserve_tokens"),
        ({"max_tool_result_chars": 100, "head_chars": 60, "tail_chars": 60}, "head_chars"),
    ],
)
def test_bad_parameters(params: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        ContextGuard(**params)
    assert info.value.key == key


def test_window_smaller_than_reserve_at_run_time_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="reserve_tokens") as info:
        run(ContextGuard(), chat(2), max_context_size=4096, reserved=0)
    assert info.value.key == "reserve_tokens"
    with pytest.raises(ConfigError) as info:
        run(ContextGuard(reserve_tokens=0), chat(2), max_context_size=4096, reserved=4096)
    assert info.value.key == "reserved_context_size"
    assert "minus reserved_context_size 4096 leaves no room" in str(info.value)


async def test_triggered_guard_brings_the_history_below_the_controllers_threshold() -> None:
    # The review's case: the controller fires at max - reserved (default reserve 50000) while
    # the guard's own budget was max - 8192, so a triggered guard did nothing.
    h = chat(40, size=8_000)
    total = COUNT.count(h)
    max_context_size = total + 40_000  # fires: total + 50_000 >= max
    controller = CompactionController(
        ContextGuard(), max_context_size=max_context_size, token_counter=COUNT
    )
    assert controller.should_compact(h)
    assert total <= max_context_size - 8192  # the old budget: a no-op
    result = await controller.compact(h)
    out = result.history
    assert result.event is not None
    assert result.event.status == "compacted"
    assert out is not h
    assert not controller.should_compact(out)
    assert check_history(out) == []
    assert out[0] is h[0]
    assert out[1].role == "user"


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    history=st.one_of(
        valid_histories(max_turns=4, max_steps=3),
        invalid_histories().map(lambda pair: pair[0]),
    ),
    budget=st.integers(1, 400),
    truncate=st.booleans(),
)
def test_property_protected_tail_and_user_first(
    history: list[Message], budget: int, truncate: bool
) -> None:
    out = guard(
        history,
        context_window=budget,
        reserve_tokens=0,
        truncate_first=truncate,
        max_tool_result_chars=10,
        head_chars=2,
        tail_chars=2,
    )
    if out is None:
        return
    pinned = ("system", "developer")
    assert [m for m in out if m.role in pinned] == [m for m in history if m.role in pinned]
    rest = [m for m in out if m.role not in pinned]
    users = [i for i, m in enumerate(history) if m.role == "user"]
    if users:
        # Never dropped: the last user message and everything after it (same roles, same
        # order; tool results may be cut copies), and the kept history opens with a user.
        tail = [m for m in history[users[-1] :] if m.role not in pinned]
        assert [(m.role, m.tool_call_id) for m in rest[-len(tail) :]] == [
            (m.role, m.tool_call_id) for m in tail
        ]
        assert rest[-len(tail)] is history[users[-1]]
        if len(rest) < sum(1 for m in history if m.role not in pinned):  # something dropped
            assert rest[0].role == "user"
    if COUNT.count(out) > budget and users and check_history(history) == []:
        # Over budget only when nothing but the protected tail is left.
        assert rest[0] is history[users[-1]]


def test_the_requests_answer_budget_is_kept_free_when_known() -> None:
    h = chat(20)
    total = COUNT.count(h)
    g = ContextGuard(context_window=total + 100, reserve_tokens=100)

    def ctx(max_output_tokens: int | None) -> CompactionContext:
        return CompactionContext(h, total, 10**6, 0, max_output_tokens=max_output_tokens)

    assert asyncio.run(g.compact(ctx(None))) is None
    assert asyncio.run(g.compact(ctx(100))) is None  # no larger than reserve_tokens
    out = asyncio.run(g.compact(ctx(2000)))  # a proxy request with max_tokens = 2000
    assert out is not None
    assert COUNT.count(out) <= total + 100 - 2000
    with pytest.raises(ConfigError, match="max_tokens"):
        asyncio.run(g.compact(ctx(total + 100)))
