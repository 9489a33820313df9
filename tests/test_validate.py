from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings

from ctxcompact import HistoryProblem, Message, check_history, from_openai
from tests.helpers.gen import (
    PROBLEM_KINDS,
    assistant,
    call,
    invalid_histories,
    system,
    tool,
    user,
    valid_histories,
)
from tests.helpers.traces import load_trace, trace_names


def kinds(history: list[Message]) -> list[tuple[int, str]]:
    return [(p.index, p.kind) for p in check_history(history)]


def trace_history(name: str) -> list[Message]:
    return from_openai(load_trace(name))


# -- valid ----------------------------------------------------------------------------------


def test_empty_and_plain_histories_are_valid() -> None:
    assert check_history([]) == []
    assert check_history([system("s"), user("hi"), assistant("hello")]) == []


def test_parallel_calls_answered_in_any_order_are_valid() -> None:
    h = [
        user("go"),
        assistant(None, call("a"), call("b"), call("c")),
        tool("c"),
        tool("a"),
        tool("b"),
        assistant("done"),
    ]
    assert check_history(h) == []


def test_ids_reused_across_turns_pair_by_position() -> None:
    h = [
        user("1"),
        assistant(None, call("x")),
        tool("x"),
        user("2"),
        assistant(None, call("x")),
        tool("x"),
        assistant("ok"),
    ]
    assert check_history(h) == []


def test_pending_calls_on_the_last_assistant_message_are_allowed() -> None:
    assert check_history([user("go"), assistant(None, call("a"), call("b"))]) == []
    # partially answered: still pending, nothing but its results follow
    assert check_history([user("go"), assistant(None, call("a"), call("b")), tool("b")]) == []


@pytest.mark.parametrize("name", trace_names())
def test_every_public_trace_is_valid(name: str) -> None:
    assert check_history(trace_history(name)) == []


@settings(max_examples=100, deadline=None)
@given(valid_histories())
def test_generated_valid_histories_have_no_problem(history: list[Message]) -> None:
    assert check_history(history) == []


# -- each problem kind by hand ----------------------------------------------------------------


def test_orphan_result_without_any_call() -> None:
    assert kinds([user("hi"), tool("x")]) == [(1, "orphan_result")]


def test_orphan_result_with_id_from_an_answered_earlier_turn() -> None:
    # "x" was called and answered in turn 1; a second result for it is an orphan, not a pair.
    h = [assistant(None, call("x")), tool("x"), user("again"), tool("x")]
    assert kinds(h) == [(3, "orphan_result")]


def test_second_result_for_one_call_is_an_orphan() -> None:
    assert kinds([assistant(None, call("a")), tool("a"), tool("a")]) == [(2, "orphan_result")]


def test_tool_message_without_tool_call_id_is_an_orphan() -> None:
    bad = Message(role="tool", content="x")
    problems = check_history([user("hi"), bad])
    assert [(p.index, p.kind) for p in problems] == [(1, "orphan_result")]
    assert "no tool_call_id" in problems[0].message


def test_unanswered_call_followed_by_a_user_message() -> None:
    h = [user("go"), assistant(None, call("a"), call("b")), tool("a"), user("?")]
    problems = check_history(h)
    assert [(p.index, p.kind) for p in problems] == [(1, "unanswered_call")]
    assert "'b'" in problems[0].message


def test_unanswered_call_on_an_earlier_assistant_even_at_the_end() -> None:
    h = [assistant(None, call("a")), assistant(None, call("b"))]
    assert kinds(h) == [(0, "unanswered_call")]


def test_separated_result_after_an_interruption() -> None:
    h = [assistant(None, call("a"), call("b")), tool("a"), user("wait"), tool("b")]
    problems = check_history(h)
    assert [(p.index, p.kind) for p in problems] == [(3, "separated_result")]
    assert "message 0" in problems[0].message  # names where its call is


def test_separated_result_pairs_with_the_nearest_earlier_call() -> None:
    # Both groups leave "x" unanswered; one late result takes the nearest (index 2), the
    # other call stays unanswered.
    h = [assistant(None, call("x")), user("u"), assistant(None, call("x")), user("v"), tool("x")]
    assert kinds(h) == [(0, "unanswered_call"), (4, "separated_result")]


def test_duplicate_call_id_in_one_message_is_reported_once() -> None:
    h = [assistant(None, call("d"), call("d"), call("d")), tool("d"), tool("d"), tool("d")]
    assert kinds(h) == [(0, "duplicate_call_id")]


def test_duplicate_ids_need_one_result_each() -> None:
    h = [assistant(None, call("d"), call("d")), tool("d"), user("?")]
    assert kinds(h) == [(0, "duplicate_call_id"), (0, "unanswered_call")]


def test_tool_calls_on_a_non_assistant_message() -> None:
    bad = Message(role="user", content="x", tool_calls=(call("a"),))
    assert kinds([bad]) == [(0, "misplaced_tool_calls")]


def test_tool_call_id_on_a_non_tool_message() -> None:
    bad = Message(role="assistant", content="x", tool_call_id="a")
    assert kinds([user("hi"), bad]) == [(1, "misplaced_tool_call_id")]


def test_problem_str_names_index_and_kind() -> None:
    problem = check_history([user("hi"), tool("zz")])[0]
    assert isinstance(problem, HistoryProblem)
    assert str(problem).startswith("message 1: orphan_result:")
    assert "'zz'" in str(problem)


def test_problems_come_in_message_order() -> None:
    h = [assistant(None, call("a")), user("x"), tool("q"), Message(role="user", tool_call_id="z")]
    indices = [p.index for p in check_history(h)]
    assert indices == sorted(indices) == [0, 2, 3]


# -- generated invalid histories ---------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(invalid_histories())
def test_generated_defects_are_caught(case: tuple[list[Message], str]) -> None:
    history, kind = case
    # The defect is reported, and nothing else: the valid part stays valid around it.
    assert {p.kind for p in check_history(history)} == {kind}


@pytest.mark.parametrize("kind", PROBLEM_KINDS)
def test_each_kind_is_generated_and_caught(kind: str) -> None:
    seen: Counter[str] = Counter()

    @settings(max_examples=20, deadline=None)
    @given(invalid_histories([kind]))
    def run(case: tuple[list[Message], str]) -> None:
        history, expected = case
        found = {p.kind for p in check_history(history)}
        assert expected in found
        seen[expected] += 1

    run()
    assert seen[kind] > 0


def test_long_history_reusing_one_id_is_valid() -> None:
    # 20,000 messages, one id re-used by every call: pairing must stay positional.
    h: list[Message] = []
    for _ in range(5000):
        h += [user("q"), assistant(None, call("same")), tool("same"), assistant("a")]
    assert check_history(h) == []
