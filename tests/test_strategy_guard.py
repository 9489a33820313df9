"""ContextGuard: seed 003 L2's test list, units kept whole, logging, where the window comes from."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from ctxcompact import HeuristicTokenCounter, Message, check_history
from ctxcompact.exceptions import ConfigError
from ctxcompact.strategies import ContextGuard
from tests.gen import assistant, call, system, tool, user
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
    max_context_size = params.pop("max_context_size", 200_000)
    out = run(ContextGuard(**params), history, max_context_size=max_context_size)
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
    assert guard(h, max_context_size=total, reserve_tokens=0) is None
    out = guard(h, max_context_size=total // 2, reserve_tokens=0)
    assert out is not None
    assert COUNT.count(out) <= total // 2
    # The parameter wins over the context.
    assert guard(h, context_window=total, max_context_size=10, reserve_tokens=0) is None


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
    h = [user("old " * 100), assistant(None, call("a"), call("b")), tool("a", "x" * 5000)]
    h.append(tool("b", "y" * 5000))
    out = guard(h, context_window=100, reserve_tokens=0, truncate_first=False)
    assert out == h[1:]


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
    with pytest.raises(ConfigError, match="reserve_tokens"):
        run(ContextGuard(), chat(2), max_context_size=4096)
