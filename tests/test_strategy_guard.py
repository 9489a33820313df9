"""ContextGuard: seed 003 L2's test list, steps kept whole, the newest step cut to fit, the
task kept, the budget guarantee on every public trace, logging, where the window comes from."""

from __future__ import annotations

import asyncio
import itertools
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
    from_openai,
    to_anthropic,
)
from ctxcompact.exceptions import CompactionError, ConfigError, ContextBudgetError
from ctxcompact.kit import (
    DROP_NOTE_RE,
    STAND_IN_RANGE,
    TRUNCATION_RE,
    pinned_indices,
    recall_placeholder,
    strip_notes,
)
from ctxcompact.strategies import DROP_MARKER, ContextGuard
from tests.helpers.gen import (
    assistant,
    call,
    invalid_histories,
    system,
    tool,
    user,
    valid_histories,
)
from tests.helpers.strategy_checks import assert_safe, dump, run
from tests.helpers.traces import load_trace, trace_names

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


def attempt(
    history: list[Message], **params: Any
) -> tuple[list[Message] | None, ContextBudgetError | None]:
    """:func:`guard`'s output, or the budget error it raised."""
    try:
        return guard(history, **params), None
    except ContextBudgetError as exc:
        return None, exc


def test_short_conversation_is_not_trimmed() -> None:
    assert guard(chat(3), context_window=100_000, reserve_tokens=0) is None


def test_long_conversation_drops_the_oldest_and_fits() -> None:
    h = chat(20)
    budget = COUNT.count(h) // 3
    out = guard(h, context_window=budget, reserve_tokens=0, drop="oldest")
    assert out is not None
    assert COUNT.count(out) <= budget
    assert out[0] is h[0]  # the system prompt stays
    assert out[1] is h[1]  # so does the first user message, where the task was stated
    assert out[-1] is h[-1]  # the newest stays
    assert out[2].role == "assistant"  # what follows it opens an exchange: roles alternate
    assert out[2:] == h[len(h) - len(out) + 2 :]  # then a suffix of the conversation
    assert check_history(out) == []


def test_the_first_user_message_is_kept_when_later_user_messages_come() -> None:
    # mini-swe-agent's shape: the task, then format reminders as user messages; the old
    # guard kept only the newest user message and dropped the task statement.
    h = [system("S"), user("fix parse_config in src/app.py " + "detail " * 200)]
    for k in range(20):
        h += [assistant(f"step {k}", call(f"c{k}", "cat")), tool(f"c{k}", f"{k} " * 300)]
        if k % 5 == 4:
            h += [assistant("two actions"), user("Please give EXACTLY ONE action.")]
    for drop in ("oldest", "relevance"):
        out = guard(h, context_window=COUNT.count(h) // 4, reserve_tokens=0, drop=drop)
        assert out is not None
        assert COUNT.count(out) <= COUNT.count(h) // 4
        assert out[:2] == h[:2]
        assert out[-2:] == h[-2:]
        assert [m for m in out if m.role == "user"][-1].text.startswith("Please give")
        _, anthropic = to_anthropic(out)
        assert same_role_pairs(anthropic) == 0
        assert check_history(out) == []


def test_relevance_keeps_the_step_whose_names_nothing_else_shows() -> None:
    # Nine steps that all show the same names, one older step that alone shows others: when
    # some must go, relevance keeps the one whose names would otherwise leave the view.
    h = [user("task")]
    h += [assistant(None, call("u", "grep")), tool("u", "unique_helper in src/only_here.py")]
    for k in range(9):
        h += [assistant(None, call(f"c{k}", "cat")), tool(f"c{k}", "shared_name " * 40)]
    budget = COUNT.count(h) - COUNT.count(h[3:7]) + 5  # two of the steps must go
    oldest = guard(h, context_window=budget, reserve_tokens=0, drop="oldest")
    relevant = guard(h, context_window=budget, reserve_tokens=0, drop="relevance")
    assert oldest is not None
    assert relevant is not None
    assert h[2] not in oldest
    assert h[2] in relevant  # kept, and the repeats of shared_name went instead
    assert COUNT.count(relevant) <= budget
    assert check_history(relevant) == []


def test_an_unknown_drop_order_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as info:
        ContextGuard(drop="newest")
    assert info.value.key == "drop"
    assert "'relevance', 'oldest'" in str(info.value)


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
    # From the least that can hold the system prompt, the first user message (pinned), the
    # task and the newest answer.
    for budget in range(COUNT.count([h[0], h[1], h[-5], h[-1]]), COUNT.count(h), 97):
        out = guard(h, context_window=budget, reserve_tokens=0)
        assert out is not None
        assert COUNT.count(out) <= budget
        assert check_history(out) == []
        first = next(m for m in out if m.role != "system")
        assert first.role != "tool"


def test_system_and_one_user_message_are_not_trimmed() -> None:
    h = [system("s" * 1000), user("u" * 1000)]
    assert guard(h, context_window=COUNT.count(h), reserve_tokens=0) is None


def test_a_task_alone_over_the_budget_is_cut_head_and_tail() -> None:
    h = [system("sys"), user("old"), assistant("reply"), user("x" * 5_000 + "y" * 5_000)]
    out = guard(h, context_window=50, reserve_tokens=0, truncate_first=False)
    assert out is not None
    assert [m.role for m in out] == ["system", "user", "assistant", "user"]
    assert out[:3] == h[:3]  # the first user message fits, and the reply keeps turns apart
    assert COUNT.count(out) <= 50
    text = out[3].text
    assert text.startswith("x")
    assert text.endswith("y")
    assert "characters truncated" in text


def test_a_task_within_the_budget_is_never_cut() -> None:
    # The task fits the budget alone, but not with the system prompt: a typed error, not a cut.
    h = [system("s" * 300), user("t" * 300)]
    budget = COUNT.count_message(h[1]) + 20
    with pytest.raises(ContextBudgetError) as info:
        guard(h, context_window=budget, reserve_tokens=0)
    assert info.value.budget == budget
    assert list(info.value.required) == ["system and pinned messages", "task (message 1)"]
    assert sum(info.value.required.values()) > budget
    assert isinstance(info.value, CompactionError)


def test_the_newest_steps_results_are_cut_to_fit() -> None:
    h = [user("old " * 100), user("new"), assistant(None, call("a"), call("b"))]
    h += [tool("a", "x" * 5000), tool("b", "y" * 500)]
    out = guard(h, context_window=700, reserve_tokens=0, truncate_first=False)
    assert out is not None
    # The first user message (pinned), the task and the call: the very same objects.
    assert out[:3] == h[:3]
    assert [(m.role, m.tool_call_id) for m in out[3:]] == [("tool", "a"), ("tool", "b")]
    assert COUNT.count(out) <= 700
    # Water-filling: the big result is cut, the small one kept whole when it fits.
    assert out[4] is h[4]
    assert out[3].text.startswith("x")
    assert "characters truncated" in out[3].text
    # With no room for the first user message whole, it stays all the same (pinned: issue
    # 20), cut head + tail as the last resort, and nothing else before the task is kept.
    tight = guard(h, context_window=150, reserve_tokens=0, truncate_first=False)
    assert tight is not None
    assert tight[0].text.startswith("old ")
    assert "characters truncated" in tight[0].text
    assert tight[1:3] == h[1:3]
    assert COUNT.count(tight) <= 150


def test_the_question_before_an_oversized_last_unit_is_never_dropped() -> None:
    # The review's probe: dropping the user message left [assistant(tool_calls), tool].
    h = [user("q"), assistant(None, call("x")), tool("x", "r" * 120_000)]
    for truncate in (False, True):
        out = guard(h, context_window=1000, reserve_tokens=100, truncate_first=truncate)
        assert out is not None
        assert [m.role for m in out] == ["user", "assistant", "tool"]
        assert out[0] is h[0]
        assert out[1] is h[1]
        assert COUNT.count(out) <= 900


def test_steps_after_the_task_are_dropped_oldest_first_with_a_note() -> None:
    # The commonest agent shape: one task, then many tool calls (issue 11).
    h = [system("S"), user("fix the bug")]
    for k in range(30):
        h += [assistant(f"step {k}", call(f"c{k}", "cat")), tool(f"c{k}", f"{k} " * 300)]
    budget = COUNT.count(h) // 4
    out = guard(h, context_window=budget, reserve_tokens=0)
    assert out is not None
    assert COUNT.count(out) <= budget
    assert out[0] is h[0]
    assert out[1].role == "user"
    kept = len(out) - 2
    assert out[2:] == h[len(h) - kept :]  # the newest steps, whole, in order
    dropped = (len(h) - 2 - kept) // 2
    assert out[1].text == "fix the bug\n\n" + DROP_MARKER.format(count=dropped)
    assert check_history(out) == []


def test_a_second_run_updates_the_note_instead_of_adding_one() -> None:
    h = [user("task")]
    for k in range(20):
        h += [assistant(None, call(f"c{k}")), tool(f"c{k}", "r" * 400)]
    first = guard(h, context_window=COUNT.count(h) // 2, reserve_tokens=0)
    assert first is not None
    n1 = (len(h) - len(first)) // 2
    more = [*first, assistant(None, call("d")), tool("d", "r" * 4000)]
    second = guard(more, context_window=COUNT.count(h) // 2, reserve_tokens=0)
    assert second is not None
    n2 = (len(more) - len(second)) // 2
    assert second[0].text == "task\n\n" + DROP_MARKER.format(count=n1 + n2)
    assert second[0].text.count("[ctxcompact:") == 1


def test_no_note_when_disabled_or_when_only_older_turns_were_dropped() -> None:
    h = [user("task")]
    for k in range(20):
        h += [assistant(None, call(f"c{k}")), tool(f"c{k}", "r" * 400)]
    out = guard(h, context_window=COUNT.count(h) // 2, reserve_tokens=0, drop_marker=False)
    assert out is not None
    assert out[0] is h[0]
    turns = chat(10)
    out = guard(turns, context_window=COUNT.count(turns) // 2, reserve_tokens=0)
    assert out is not None
    assert all(m is next(x for x in turns if x is m) for m in out)  # nothing rewritten


def test_the_note_is_left_out_rather_than_fail() -> None:
    h = [user("task")]
    for k in range(3):
        h += [assistant(None, call(f"c{k}")), tool(f"c{k}", "r" * 400)]
    with_note = COUNT.count_message(h[0]) + COUNT.count(h[-2:])
    # Room for the task and the newest step cut to its marker, not for the note too.
    minimum = COUNT.count(
        [h[0], h[-2], Message.tool("c2", "\n\n... [400 characters truncated] ...\n\n")]
    )
    out = guard(h, context_window=minimum + 2, reserve_tokens=0)
    assert out is not None
    assert out[0] is h[0]
    assert COUNT.count(out) <= minimum + 2 < with_note


def oversized_newest_answer() -> list[Message]:
    h = [system("S"), user("a" * 3000), assistant("b" * 3000), user("c" * 3000)]
    h += [assistant(None, call("x"), call("y")), tool("x", "r" * 3000), tool("y", "r" * 3000)]
    return [*h, assistant("final " * 2000)]


def test_an_oversized_newest_assistant_message_is_cut_never_a_pin() -> None:
    # Pins are absolute (issue 20): the first and the newest user message (~930 tokens each)
    # fit the budget, the newest assistant message (~3,700) does not fit beside them. It is
    # not pinned: it is cut head + tail, and both user messages stay verbatim.
    h = oversized_newest_answer()
    out = guard(h, context_window=2500, reserve_tokens=0, truncate_first=False)
    assert out is not None
    assert COUNT.count(out) <= 2500
    assert out[1] is h[1]
    assert [m.role for m in out] == ["system", "user", "user", "assistant"]
    assert strip_notes(out[2].text) == h[3].text  # the task, with the drop note after it
    assert out[3].text.startswith("final final")
    assert TRUNCATION_RE.search(out[3].text)
    assert out[3].text.endswith("final ")


def test_pins_that_leave_no_room_even_cut_are_a_typed_error_naming_each_part() -> None:
    h = oversized_newest_answer()
    with pytest.raises(ContextBudgetError) as info:
        guard(h, context_window=40, reserve_tokens=0, truncate_first=False)
    required = info.value.required
    assert "newest assistant message (message 7)" in required
    assert "task (message 3)" in required
    assert sum(required.values()) > 40  # each part at the least it can be cut to
    assert "a budget of 40 tokens cannot hold" in str(info.value)
    assert "ccc" not in str(info.value)  # sizes only, never content


def test_kept_history_always_starts_with_a_user_message() -> None:
    # Rounds whose tool-call unit and answer are separate units: the old guard could cut
    # between them and start the history with an assistant message.
    h = chat(12)
    last_user = max(i for i, m in enumerate(h) if m.role == "user")
    for budget in range(20, COUNT.count(h) + 40, 37):
        out, error = attempt(h, context_window=budget, reserve_tokens=0, truncate_first=False)
        if error is not None:
            assert sum(error.required.values()) > budget
            continue
        if out is None:
            continue
        first = next(m for m in out if m.role != "system")
        assert first.role == "user", budget
        assert COUNT.count(out) <= budget
        assert out[-1].role == "assistant"  # the newest step is never dropped
        kept_task = [m for m in out if m.role == "user"][-1]
        if COUNT.count_message(h[last_user]) > budget:
            # Over the budget alone (the pins alone exceed it): cut head + tail, never dropped.
            assert TRUNCATION_RE.search(kept_task.text), budget
            assert h[last_user].text.endswith(strip_notes(kept_task.text)[-1:])
        else:
            assert kept_task.text.startswith(h[last_user].text[:100])


def test_history_without_a_user_message_keeps_its_newest_step() -> None:
    h = [system("s"), assistant("a" * 4000), assistant(None, call("x")), tool("x", "r" * 4000)]
    out = guard(h, context_window=100, reserve_tokens=0, truncate_first=False)
    assert out is not None
    assert out[:2] == [h[0], h[2]]
    assert out[2].tool_call_id == "x"
    assert COUNT.count(out) <= 100


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


def test_truncate_first_false_leaves_the_cut_to_the_fitting() -> None:
    h = [user("q"), assistant(None, call("a")), tool("a", "L" * 120_000), user("next")]
    out = guard(h, context_window=2_000, reserve_tokens=0, truncate_first=False)
    assert out is not None
    assert [out[0], out[1], out[3]] == [h[0], h[1], h[3]]
    # Cut to what fits, not to truncate_first's 4,000 characters.
    assert 4_000 < len(out[2].text) < 120_000
    assert COUNT.count(out) <= 2_000


def test_drops_and_cuts_are_logged_at_warning(caplog: pytest.LogCaptureFixture) -> None:
    h = chat(10, size=30_000)
    h[3] = tool("a0", "z" * 80_000)
    with caplog.at_level(logging.WARNING, logger="ctxcompact.strategies.guard"):
        guard(h, context_window=60_000, reserve_tokens=0)
    text = caplog.text
    assert "Context guard: truncated the tool result at message 3 (80000 → " in text
    assert "Context guard: dropped " in text
    assert "old messages (estimated " in text
    assert all(r.levelno == logging.WARNING for r in caplog.records)


def test_the_clients_tool_name_is_logged_only_at_debug_and_escaped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    forged = "ls\n2026-01-01 WARNING ctxcompact forged line"
    h = [user("q"), assistant(None, call("a", name=forged)), tool("a", "L" * 120_000)]
    with caplog.at_level(logging.DEBUG, logger="ctxcompact.strategies.guard"):
        guard([*h, user("next")], context_window=20_000, reserve_tokens=0)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert "Context guard: truncated the tool result at message 2 (120000 → " in warnings[0]
    assert not [line for line in warnings if "forged" in line]
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert [line for line in debug if "'ls\\n2026-01-01 WARNING" in line]
    assert all("\n" not in line for line in debug)


def test_orphans_and_separated_results_never_lose_their_call() -> None:
    h = [system("s"), user("u" * 400), assistant(None, call("a"), call("b")), tool("a", "x" * 400)]
    h += [user("wait " * 80), tool("b", "late " * 80), tool("orphan", "o" * 400)]
    h += [user("now"), assistant("ok")]
    before = {p.kind for p in check_history(h)}
    for budget in range(10, COUNT.count(h) + 10, 23):
        try:
            out = guard(h, context_window=budget, reserve_tokens=0)
        except ContextBudgetError:
            assert budget < COUNT.count([h[0], h[-2], h[-1]])
            continue
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
        run(ContextGuard(reserve_tokens=8192), chat(2), max_context_size=4096, reserved=0)
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
def test_property_fits_or_says_what_does_not(
    history: list[Message], budget: int, truncate: bool
) -> None:
    out, error = attempt(
        history,
        context_window=budget,
        reserve_tokens=0,
        truncate_first=truncate,
        max_tool_result_chars=10,
        head_chars=2,
        tail_chars=2,
    )
    if error is not None:
        assert sum(error.required.values()) > budget
        return
    if out is None:
        assert COUNT.count(history) <= budget
        return
    assert COUNT.count(out) <= budget
    pinned = ("system", "developer")
    assert [m for m in out if m.role in pinned] == [m for m in history if m.role in pinned]
    rest = [m for m in out if m.role not in pinned]
    users = [i for i, m in enumerate(history) if m.role == "user"]
    assert rest, "something is always kept"
    if users:
        # Never dropped: the task (the very object, or its cut or noted copy), and the kept
        # history opens with a user message when anything was dropped.
        task = history[users[-1]]
        kept_users = [m for m in rest if m.role == "user"]
        assert kept_users[-1] is task or (
            kept_users[-1].model_extra == task.model_extra and kept_users[-1] is not task
        )
        # When something was dropped the kept history opens with a user message, if the
        # input's own opening was one: the guard drops what precedes the first user message
        # (test_what_precedes_the_first_user_message_goes), but an exchange that opens with an
        # assistant turn and holds that user message with a result after it stays whole.
        opened = next(m for m in history if m.role not in pinned).role
        dropped = len(rest) < sum(1 for m in history if m.role not in pinned)
        if dropped and opened == "user":
            assert rest[0].role == "user"
    # The newest message stays (its tool result may be a cut copy).
    newest = [m for m in history if m.role not in pinned][-1]
    assert rest[-1] is newest or (rest[-1].role, rest[-1].tool_call_id) == (
        newest.role,
        newest.tool_call_id,
    )


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


# -- the guarantee on every public trace (issue 11) ---------------------------------------------

WINDOWS = (8_000, 16_000, 32_000)
NOTE_TOKENS = 40  # the drop note's cost, at most
RESULT_MIN_TOKENS = 16  # a tool result cut down to its marker, at most


@pytest.fixture(scope="module")
def traces() -> dict[str, list[Message]]:
    return {name: from_openai(load_trace(name)) for name in trace_names()}


def must_fit(history: list[Message], budget: int) -> bool:
    """The documented guarantee's condition: system + task + newest assistant message (plus
    the markers the newest results are cut to and the drop note) fit ``budget``."""
    pinned = sum(COUNT.count_message(m) for m in history if m.role in ("system", "developer"))
    users = [i for i, m in enumerate(history) if m.role == "user"]
    task = users[-1] if users else -1
    need = pinned + (COUNT.count_message(history[task]) if users else 0)
    after = [i for i in range(task + 1, len(history)) if history[i].role == "assistant"]
    if after:
        need += COUNT.count_message(history[after[-1]])
        results = sum(1 for m in history[after[-1] + 1 :] if m.role == "tool")
        need += RESULT_MIN_TOKENS * results + NOTE_TOKENS
    return need <= budget


def prefixes(history: list[Message]) -> list[int]:
    """Ends of eight evenly spread prefixes and the whole trace: every shape a request has
    (ending on a result, on an assistant message, on the task)."""
    n = len(history)
    return sorted({max(1, n * k // 8) for k in range(1, 9)})


@pytest.mark.parametrize("window", WINDOWS)
def test_every_public_trace_fits_the_window_or_says_why(
    window: int, traces: dict[str, list[Message]], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="ctxcompact.strategies.guard")
    g = ContextGuard(context_window=window, reserve_tokens=window // 8)
    budget = window - window // 8
    errors = 0
    failures: list[tuple[str, int, ContextBudgetError]] = []
    for name, full in traces.items():
        for end in prefixes(full):
            history = full[:end]
            snap = dump(history) if end == len(full) else None
            try:
                out = run(g, history)
            except ContextBudgetError as exc:
                errors += 1
                failures.append((name, end, exc))
                continue
            if snap is not None:
                assert_safe(history, snap, out)
            result = history if out is None else out
            assert COUNT.count(result) <= budget, (name, end)
            assert check_history(result) == [], (name, end)
            # Valid in Anthropic's format too: it converts, opens with a user turn, and no
            # two turns in a row share a role unless the input had such a pair already.
            _, before = to_anthropic(history)
            _, after = to_anthropic(result)
            assert after[0]["role"] == "user", (name, end)
            # The one exception: the pinned first user message followed by the next kept
            # user message once everything between was dropped (both providers accept
            # consecutive user turns; Anthropic combines them).
            pinned_pair = int(len(after) > 1 and after[0]["role"] == after[1]["role"] == "user")
            assert same_role_pairs(after) <= same_role_pairs(before) + pinned_pair, (name, end)
            # The newest message and the task are kept (results and task possibly cut).
            assert (result[-1].role, result[-1].tool_call_id) == (
                history[-1].role,
                history[-1].tool_call_id,
            )
            users = [m for m in history if m.role == "user"]
            kept_users = [m for m in result if m.role == "user"]
            assert kept_users[-1].text.startswith(users[-1].text[:200]), (name, end)
    for name, end, exc in failures:
        assert not must_fit(traces[name][:end], budget), (name, end, str(exc))
        assert sum(exc.required.values()) > budget
    assert errors == 0  # on the public traces, system + task + newest step always fit


def same_role_pairs(messages: list[dict[str, Any]]) -> int:
    return sum(1 for a, b in itertools.pairwise(messages) if a["role"] == b["role"])


def test_the_issues_figure_a_long_task_run_now_fits_8k(traces: dict[str, list[Message]]) -> None:
    # Issue 11: an 8k-window guard left this Claude Code sub-agent at 57,877 tokens against
    # a 7,000-token budget, because it never dropped anything after the task message.
    history = traces["claudecode-subagent__4d5611e5__a2898e3"]
    assert COUNT.count(history) == 57_877
    assert [i for i, m in enumerate(history) if m.role == "user"] == [0]  # one task
    out = run(ContextGuard(context_window=8_000, reserve_tokens=1_000), history)
    assert out is not None
    assert COUNT.count(out) <= 7_000
    assert out[0].text.startswith(history[0].text)
    assert "[ctxcompact: " in out[0].text
    assert out[-1] is history[-1]


async def test_triggered_guard_at_8k_takes_its_budget_from_the_context(
    traces: dict[str, list[Message]],
) -> None:
    history = traces["claudecode-subagent__4d5611e5__a2898e3"]
    controller = CompactionController(
        ContextGuard(), max_context_size=8_000, reserved_context_size=1_000, token_counter=COUNT
    )
    result = await controller.compact(history)
    out = result.history
    assert result.event is not None
    assert result.event.status == "compacted"
    assert COUNT.count(out) <= 8_000 - 1_000 - 1
    assert not controller.should_compact(out)
    assert check_history(out) == []


def test_fill_keeps_older_steps_only_up_to_its_share_of_the_budget() -> None:
    h = [user("task")]
    for k in range(40):
        h += [assistant(None, call(f"c{k}")), tool(f"c{k}", "r" * 300)]
    budget = COUNT.count(h) // 2
    full = guard(h, context_window=budget, reserve_tokens=0, drop="oldest")
    part = guard(h, context_window=budget, reserve_tokens=0, fill=0.5, drop="oldest")
    assert full is not None
    assert part is not None
    assert COUNT.count(part) <= budget // 2 < COUNT.count(full) <= budget
    assert part[-2:] == h[-2:]  # the newest step is kept either way
    assert part[1:] == full[len(full) - len(part) + 1 :]  # fewer of the same newest steps


def test_fill_never_costs_the_newest_step() -> None:
    # The newest step alone is over fill x budget but within the budget: kept whole.
    h = [user("task"), assistant(None, call("a")), tool("a", "r" * 300)]
    h += [assistant(None, call("b")), tool("b", "r" * 2000)]
    budget = COUNT.count([h[0], *h[3:]]) + 60
    out = guard(h, context_window=budget, reserve_tokens=0, fill=0.3)
    assert out is not None
    assert out[1:] == h[3:]


def test_fill_defaults_to_the_whole_budget_per_request_and_80_percent_triggered() -> None:
    assert ContextGuard(context_window=10_000).fill_ratio() == 1.0
    assert ContextGuard().fill_ratio() == 0.8
    assert ContextGuard(fill=0.6).fill_ratio() == 0.6


@pytest.mark.parametrize("bad", [0, -0.5, 1.5, True, "0.8"])
def test_a_fill_outside_zero_to_one_is_a_config_error(bad: object) -> None:
    with pytest.raises(ConfigError) as info:
        ContextGuard(fill=bad)  # type: ignore[arg-type]
    assert info.value.key == "fill"


def test_steps_are_dropped_in_batches_so_the_prefix_holds_for_several_requests() -> None:
    history = [system("S"), user("task")]
    for k in range(60):
        history += [assistant(None, call(f"c{k}", "cat")), tool(f"c{k}", f"{k} " * 200)]
    budget = COUNT.count(history[:42])
    firsts = []
    for end in range(44, len(history) + 1, 2):  # one more step per request
        request = history[:end]
        out = guard(request, context_window=budget, reserve_tokens=0, drop_batch=4, drop="oldest")
        assert out is not None
        assert COUNT.count(out) <= budget
        dropped = (len(request) - len(out)) // 2
        older = (end - 2) // 2 - 1  # every step but the newest
        assert dropped % 4 == 0 or dropped == older
        assert out[1].text == "task\n\n" + DROP_MARKER.format(count=dropped)
        firsts.append(out[2].tool_calls[0].id if out[2].tool_calls else None)
    # The first kept step changes at most once per batch of requests, not at every one.
    changes = sum(1 for a, b in itertools.pairwise(firsts) if a != b)
    assert 0 < changes <= len(firsts) // 3


def test_a_drop_batch_below_one_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as info:
        ContextGuard(drop_batch=0)
    assert info.value.key == "drop_batch"


def test_per_request_it_drops_oldest_in_batches_of_8_triggered_by_relevance_one_at_a_time() -> None:
    # Per request the guard rebuilds each request from the whole history: only a fixed order
    # and batches keep the cached prefix in place (drop_batch=1 cost more than no compaction).
    per_request, triggered = ContextGuard(context_window=16_000), ContextGuard()
    assert (per_request.drop_order(), per_request.batch_size()) == ("oldest", 8)
    assert (triggered.drop_order(), triggered.batch_size()) == ("relevance", 1)
    chosen = ContextGuard(context_window=16_000, drop="relevance", drop_batch=2)
    assert (chosen.drop_order(), chosen.batch_size()) == ("relevance", 2)


def test_what_precedes_the_first_user_message_goes() -> None:
    # An orphan result or an assistant turn before the first user message: when the guard
    # trims, the kept history still opens with a user message.
    def trimmed(history: list[Message]) -> list[str]:
        out = ContextGuard(context_window=COUNT.count(history) - 1, reserve_tokens=0).guard(
            history, budget=COUNT.count(history) - 1, token_counter=COUNT
        )
        assert out is not None
        return [m.role for m in out]

    orphan = [tool("orphan", "x"), user("task"), *chat(6)[1:]]
    assert trimmed(orphan)[0] == "user"
    opening = [assistant(None, call("c0", "ls")), tool("c0", "x"), user("task"), *chat(6)[1:]]
    assert trimmed(opening)[0] == "user"


# -- the merge of issue 20 (pins, recall notes) with issue 21 (dropping by relevance) -----------


def test_dropping_by_relevance_never_drops_a_pinned_message() -> None:
    h = chat(20)
    pinned_at = next(i for i, m in enumerate(h) if m.text.startswith("question 5 "))
    pins = pinned_indices(h, lambda m: m.text.startswith("question 5 "))
    assert pinned_at in pins
    budget = COUNT.count(h) // 3
    guard = ContextGuard(drop="relevance")
    out = guard.guard(h, budget=budget, token_counter=COUNT, pinned=pins)
    assert out is not None
    assert COUNT.count(out) <= budget
    assert any(m is h[pinned_at] for m in out)  # its exchange went, the pin stayed
    assert not any(m is h[pinned_at + 1] for m in out)
    assert check_history(out) == []
    # Without the pin, the same message goes with its exchange.
    unpinned = guard.guard(h, budget=budget, token_counter=COUNT, pinned=pinned_indices(h))
    assert unpinned is not None
    assert not any(m is h[pinned_at] for m in unpinned)


def test_the_recall_note_counts_every_message_dropped_by_relevance() -> None:
    # Relevance keeps exchanges with gaps between them: the note's count and its results
    # still cover every dropped message, and the note is costed within the budget.
    h = chat(20)
    budget = COUNT.count(h) // 3
    out = ContextGuard(drop="relevance").guard(h, budget=budget, token_counter=COUNT, recall=True)
    assert out is not None
    assert COUNT.count(out) <= budget
    kept = {id(m) for m in out}
    task = max(i for i, m in enumerate(h) if m.role == "user")
    gone = [i for i, m in enumerate(h) if id(m) not in kept and i != task]
    note = [m for m in out if m.role == "user"][-1].text
    match = DROP_NOTE_RE.search(note)
    assert match is not None, note
    assert int(match.group(1)) == len(gone)
    assert STAND_IN_RANGE in note
    dropped_results = [h[i].tool_call_id for i in gone if h[i].role == "tool"]
    assert dropped_results[-1] in note  # the newest dropped result is named by its handle


def test_relevance_counts_no_marker_handle_as_a_name() -> None:
    # A masked step's recall placeholder names a handle seen nowhere else: were it a name,
    # the cheap stub would look like the best news per token and push out a step whose
    # names the agent may quote. Only the step holding real names is kept.
    handle = "toolu_01ABCDEFGHJKMNPQRSTVWXYZ"
    h = [user("task")]
    h += [assistant(None, call(handle, "cat")), tool(handle, recall_placeholder(handle))]
    h += [
        assistant(None, call("c1", "grep")),
        tool("c1", "unique_helper in src/only_here.py " + "lines " * 30),
    ]
    h += [assistant(None, call("c2", "cat")), tool("c2", "newest")]
    stub = COUNT.count(h[1:3])
    assert stub < COUNT.count(h[3:5])  # the stub is the cheaper one to keep
    budget = COUNT.count(h) - stub  # one of the two older steps must go
    out = ContextGuard(drop="relevance", drop_marker=False).guard(
        h, budget=budget, token_counter=COUNT, target=budget
    )
    assert out is not None
    assert h[4] in out
    assert h[2] not in out
