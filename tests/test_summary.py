"""LLMSummary: the cut, the summary message, the summarizer's request, retries and failures."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import pytest

from ctxcompact import CompactionContext, Completion, HeuristicTokenCounter, Message, check_history
from ctxcompact.exceptions import (
    ConfigError,
    ContextTooLongError,
    LLMRequiredError,
    RateLimitError,
    ServerError,
    SummaryRejectedError,
)
from ctxcompact.strategies import SUMMARIZER_SYSTEM, SUMMARY_PREFIX, LLMSummary
from ctxcompact.testing import ScriptedLLM
from tests.helpers.gen import assistant, call, system, tool, user

COUNTER = HeuristicTokenCounter()


def make_ctx(
    history: Sequence[Message], llm: ScriptedLLM | None = None, *, max_context_size: int = 100_000
) -> CompactionContext:
    return CompactionContext(
        history=history,
        token_count=COUNTER.count(history),
        max_context_size=max_context_size,
        reserved_context_size=1_000,
        llm=llm,
    )


def snapshot(history: Sequence[Message]) -> list[dict[str, object]]:
    return [m.model_dump() for m in history]


def work_history() -> list[Message]:
    """A small coding session: a group with two parallel calls, an error, a fix."""
    return [
        system("You are a coding agent."),
        user("Fix the failing test in calc.py"),
        assistant(
            "Looking.",
            call("c1", "read_file", '{"path": "calc.py"}'),
            call("c2", "bash", '{"cmd": "pytest -q"}'),
        ),
        tool("c1", "def add(a, b):\n    return a - b\n"),
        tool("c2", "FAILED test_calc.py::test_add - assert -1 == 3"),
        assistant(None, call("c3", "write_file", '{"path": "calc.py", "text": "return a + b"}')),
        tool("c3", "written"),
        assistant("Fixed add(): it subtracted."),
        user("Now add a mul() function"),
        assistant("On it."),
    ]


def padded(text: str) -> str:
    """``text`` made long enough that a short summary costs less than it (summaries that do
    not shrink what they replace are refused)."""
    return text + " " + "lorem ipsum " * 20


def summary_text(message: Message) -> str:
    assert message.role == "user"
    assert message.text.startswith(SUMMARY_PREFIX)
    return message.text[len(SUMMARY_PREFIX) :]


# -- the cut -----------------------------------------------------------------------------------


async def test_keeps_the_last_messages_as_the_same_objects_and_summarizes_the_rest() -> None:
    history = work_history()
    before = snapshot(history)
    llm = ScriptedLLM("Task: add mul(). Done: fixed add().")
    out = await LLMSummary(llm).compact(make_ctx(history))
    assert out is not None
    assert out[0] is history[0]
    assert out[1] is history[1]  # the task: pinned, verbatim, before the summary
    assert summary_text(out[2]) == "Task: add mul(). Done: fixed add()."
    assert len(out) == 5
    assert out[3] is history[8]
    assert out[4] is history[9]
    assert check_history(out) == []
    assert snapshot(history) == before


async def test_the_cut_moves_before_a_group_with_parallel_calls_never_inside_it() -> None:
    history = [
        user("old question"),
        assistant(padded("old answer")),
        user("inspect both"),
        assistant(None, call("a", "ls"), call("b", "cat")),
        tool("b", "B"),
        tool("a", "A"),
        assistant("both done"),
    ]
    out = await LLMSummary(ScriptedLLM("s")).compact(make_ctx(history))
    assert out is not None
    # The task and the newest user message before the cut stay; "old answer" is summarized.
    assert out[0] is history[0]
    assert out[1] is history[2]
    summary_text(out[2])
    # The second-to-last user/assistant message is the one with the calls: its group is kept.
    assert [m is h for m, h in zip(out[3:], history[3:], strict=True)] == [True] * 4
    assert check_history(out) == []


async def test_a_result_separated_from_its_call_pulls_the_cut_back_to_the_call() -> None:
    # Malformed (a user message sits between the call and its result): the cut must not
    # summarize the call away and leave its result as an orphan.
    history = [
        user("start"),
        assistant(padded("thinking")),
        assistant(None, call("a", "ls")),
        user("interjection"),
        tool("a", "A"),
        assistant("done"),
    ]
    before_kinds = {p.kind for p in check_history(history)}
    out = await LLMSummary(ScriptedLLM("s")).compact(make_ctx(history))
    assert out is not None
    assert out[0] is history[0]  # the task, verbatim
    summary_text(out[1])  # "thinking"
    assert out[2:] == history[2:]
    assert {p.kind for p in check_history(out)} <= before_kinds


async def test_a_separated_result_inside_another_groups_run_also_pulls_the_cut_back() -> None:
    history = [
        user("start"),
        assistant(padded("thinking")),
        assistant(None, call("a", "ls")),
        user("interjection"),
        assistant(None, call("b", "cat")),
        tool("b", "B"),
        tool("a", "A"),  # answers the call two messages up, not its own group's
        assistant("done"),
    ]
    before_kinds = {p.kind for p in check_history(history)}
    out = await LLMSummary(ScriptedLLM("s"), max_preserved_messages=3).compact(make_ctx(history))
    assert out is not None
    assert out[0] is history[0]  # the task, verbatim
    summary_text(out[1])  # "thinking"
    assert out[2:] == history[2:]
    assert {p.kind for p in check_history(out)} <= before_kinds


async def test_keeps_pending_calls_when_nothing_is_preserved() -> None:
    history = [
        user("go"),
        assistant(padded("ok")),
        user("list"),
        assistant(None, call("p", "ls")),
    ]
    out = await LLMSummary(ScriptedLLM("s"), max_preserved_messages=0).compact(make_ctx(history))
    assert out is not None
    # The task and the newest user message stay verbatim; only "ok" is summarized.
    assert [out[0], out[1]] == [history[0], history[2]]
    summary_text(out[2])
    assert len(out) == 4
    assert out[3] is history[3]
    assert check_history(out) == []


async def test_system_messages_stay_first_and_mid_history_ones_are_kept() -> None:
    note = system("Reminder: the repo uses tabs.")
    history = [system("main"), user("a"), note, assistant(padded("b")), user("c"), assistant("d")]
    out = await LLMSummary(ScriptedLLM("s")).compact(make_ctx(history))
    assert out is not None
    assert out[0] is history[0]
    assert out[1] is history[1]  # the task
    assert out[2] is note
    summary_text(out[3])
    assert out[4:] == history[4:]


# -- pins (issue 20): never summarised away ---------------------------------------------------


def pinned_session() -> list[Message]:
    """A task, a rules message and a config file the user pins, work, then the newest turn."""
    return [
        system("You are a coding agent."),
        user("Fix the failing test in calc.py"),
        user("## Rules\n1. never push to main\n2. tests first"),
        assistant(None, call("r1", "read_file", '{"path": "setup.cfg"}')),
        tool("r1", "[tool:pytest]\naddopts = -q  # PINNED-CONFIG"),
        assistant(None, call("r2", "bash", '{"cmd": "pytest"}')),
        tool("r2", padded("FAILED test_calc.py::test_add")),
        assistant(padded("Fixed add(): it subtracted.")),
        user("Now add a mul() function"),
        assistant("On it."),
    ]


async def test_the_task_and_the_users_pins_stay_verbatim_before_the_summary() -> None:
    from ctxcompact.kit import PinRules

    history = pinned_session()
    llm = ScriptedLLM("Fixed add(); tests pass.")  # a summary that omits the rules
    ctx = CompactionContext(
        history,
        COUNTER.count(history),
        100_000,
        1_000,
        llm=llm,
        pin=PinRules(["## Rules", "PINNED-CONFIG"]),
    )
    out = await LLMSummary(llm).compact(ctx)
    assert out is not None
    # System, the task, the rules, the pinned result with its call (a result never loses its
    # call), then the summary of what is left, then the preserved tail: the same objects.
    assert out[:5] == history[:5]
    assert all(a is b for a, b in zip(out[:5], history[:5], strict=True))
    assert summary_text(out[5]) == "Fixed add(); tests pass."
    assert out[6:] == history[8:]
    assert check_history(out) == []
    text = llm.requests[0].messages[0].text
    assert "FAILED test_calc.py::test_add" in text
    for kept in ("Fix the failing test", "## Rules", "PINNED-CONFIG", "setup.cfg"):
        assert kept not in text, kept  # not summarised: it is in the view as it was


async def test_under_the_controller_a_summary_omitting_a_pinned_rule_leaves_it_in_view() -> None:
    from ctxcompact import CompactionController

    history = pinned_session()
    controller = CompactionController(
        LLMSummary(ScriptedLLM("Fixed add(); tests pass.")),
        max_context_size=10_000,
        reserved_context_size=100,
        pin_patterns=["## Rules"],
    )
    result = await controller.compact(history, force=True)
    assert result.event is not None
    assert result.event.status == "compacted"
    assert any(m is history[2] for m in result.history)  # the rule, verbatim
    assert any(m is history[1] for m in result.history)  # the task, verbatim
    # The strategy kept it: the controller had nothing to put back (a strategy that loses a
    # pin gets it back with a pin_restored problem: tests/test_recall_every_removal.py).
    assert [p.kind for p in result.event.problems] == []


async def test_a_summary_made_ahead_keeps_what_it_kept_when_a_newer_user_message_came() -> None:
    history = [
        user("Fix the failing test in calc.py"),
        assistant(padded("Reading calc.py.")),
        user("use pytest -x"),
        assistant(padded("Ran pytest -x.")),
        assistant("Fixed add()."),
        user("thanks"),
        assistant("welcome"),
    ]
    lazy = LLMSummary(ScriptedLLM("made ahead"), summarize_at_trigger=False)
    ahead = await lazy.summarize_ahead(make_ctx(history))
    assert ahead is not None
    assert (ahead.start, ahead.end) == (0, 5)
    # Later: a new user message makes "use pytest -x" no longer the newest one. The summary
    # made ahead did not cover it, so it still stays verbatim.
    later = [*history, user("now add mul()"), assistant("on it")]
    from dataclasses import replace

    ctx = replace(make_ctx(later), ahead=replace(ahead, history_length=len(later)))
    out = await lazy.compact(ctx)
    assert out is not None
    assert out[:2] == [history[0], history[2]]
    assert summary_text(out[2]) == "made ahead"
    assert out[3:] == later[5:]


async def test_returns_none_without_calling_the_llm_when_nothing_is_old_enough() -> None:
    llm = ScriptedLLM()  # any call would fail: it has no responses
    strategy = LLMSummary(llm)
    assert await strategy.compact(make_ctx([system("s"), user("a"), assistant("b")])) is None
    assert await strategy.compact(make_ctx([user("only one")])) is None
    assert await strategy.compact(make_ctx([system("s"), system("t"), user("a")])) is None
    assert llm.requests == []


async def test_returns_none_when_the_old_part_is_only_an_earlier_summary() -> None:
    llm = ScriptedLLM()
    history = [user(SUMMARY_PREFIX + "old summary"), user("q"), assistant("a")]
    assert await LLMSummary(llm).compact(make_ctx(history)) is None
    assert llm.requests == []


# -- the summarizer's request --------------------------------------------------------------


async def test_the_request_shows_tool_calls_results_and_the_priorities() -> None:
    llm = ScriptedLLM("s")
    await LLMSummary(llm, max_summary_tokens=2000).compact(make_ctx(work_history()))
    (request,) = llm.requests
    assert request.system == SUMMARIZER_SYSTEM
    assert request.max_tokens == 2000
    assert not request.tools
    assert len(request.messages) == 1
    text = request.messages[0].text
    for expected in (
        'call read_file (id c1) with arguments: {"path": "calc.py"}',
        'call bash (id c2) with arguments: {"cmd": "pytest -q"}',
        "tool result of bash (id c2)",
        "FAILED test_calc.py::test_add",
        "tool result of write_file (id c3)",
        "Fixed add(): it subtracted.",
        "Current task state",
        "Errors and how they were solved",
        "Files and code changed",
        "Decisions",
        "What is left to do",
    ):
        assert expected in text, expected
    # The preserved tail, the system prompt and the task (kept verbatim before the summary)
    # are not part of the summarized transcript.
    assert "Now add a mul() function" not in text
    assert "You are a coding agent." not in text
    assert "Fix the failing test in calc.py" not in text


async def test_oversized_items_are_cut_head_and_tail_to_fit_the_input_budget() -> None:
    big = "HEAD-MARK " + "x" * 200_000 + " TAIL-MARK"
    history = [
        user("read the log"),
        assistant(None, call("a", "cat", '{"path": "big.log"}')),
        tool("a", big),
        assistant("it is big"),
        user("next"),
        assistant("ok"),
    ]
    llm = ScriptedLLM("s")
    await LLMSummary(llm, max_input_tokens=6_000).compact(make_ctx(history))
    (request,) = llm.requests
    text = request.messages[0].text
    assert COUNTER.count([Message.system(request.system or ""), *request.messages]) <= 6_000
    assert "HEAD-MARK" in text
    assert "TAIL-MARK" in text
    assert "characters cut" in text
    assert "it is big" in text  # small items survive whole
    assert "read the log" not in text  # the task: kept verbatim, not summarized
    assert 'call cat (id a) with arguments: {"path": "big.log"}' in text


def two_long_answers() -> list[Message]:
    """A task, two 40,000-character answers (~23k tokens to summarize), a question, a reply."""
    return [user("go"), assistant("x" * 40_000), assistant("y" * 40_000), user("q"), assistant("a")]


async def test_a_summarizer_overflow_retries_once_with_a_smaller_input() -> None:
    history = two_long_answers()
    llm = ScriptedLLM(ContextTooLongError("prompt is too long"), "the summary")
    # ~23k tokens to summarize: within a 30k window, not within half of it.
    out = await LLMSummary(llm).compact(make_ctx(history, max_context_size=30_000))
    assert out is not None
    assert out[0] is history[0]
    assert summary_text(out[1]) == "the summary"
    first, second = llm.requests
    assert len(second.messages[0].text) < len(first.messages[0].text) * 0.75


async def test_an_overflow_halves_what_was_sent_even_when_the_budget_was_far_larger() -> None:
    # The declared window is huge but the summarizer's real one is not (a cheaper model).
    history = two_long_answers()
    llm = ScriptedLLM(ContextTooLongError("too long"), "the summary")
    out = await LLMSummary(llm).compact(make_ctx(history, max_context_size=1_000_000))
    assert out is not None
    first, second = llm.requests
    assert len(second.messages[0].text) < len(first.messages[0].text) * 0.6


async def test_a_second_overflow_propagates() -> None:
    history = work_history()
    before = snapshot(history)
    llm = ScriptedLLM(ContextTooLongError("too long"), ContextTooLongError("still too long"))
    with pytest.raises(ContextTooLongError, match="still too long"):
        await LLMSummary(llm).compact(make_ctx(history))
    assert snapshot(history) == before


async def test_length_retries_once_asking_for_a_shorter_summary() -> None:
    cut = Completion(Message.assistant("a very long summ"), finish_reason="length")
    llm = ScriptedLLM(cut, "short summary")
    out = await LLMSummary(llm).compact(make_ctx(work_history()))
    assert out is not None
    assert summary_text(out[2]) == "short summary"
    first, second = llm.requests
    assert "shorter" in second.messages[0].text
    assert "shorter" not in first.messages[0].text


async def test_length_twice_keeps_the_truncated_text_with_a_marker() -> None:
    llm = ScriptedLLM(
        Completion(Message.assistant("first cut"), finish_reason="length"),
        Completion(Message.assistant("second cut"), finish_reason="length"),
    )
    out = await LLMSummary(llm).compact(make_ctx(work_history()))
    assert out is not None
    text = summary_text(out[2])
    assert text.startswith("second cut")
    assert "summary truncated" in text


@pytest.mark.parametrize("error", [RateLimitError("429", status_code=429), ServerError("500")])
async def test_an_llm_error_propagates_typed_and_the_history_is_untouched(
    error: Exception,
) -> None:
    history = work_history()
    before = snapshot(history)
    with pytest.raises(type(error)):
        await LLMSummary(ScriptedLLM(error)).compact(make_ctx(history))
    assert snapshot(history) == before


@pytest.mark.parametrize("answer", ["", "   \n", Message.assistant(None)])
async def test_an_empty_answer_is_refused(answer: str | Message) -> None:
    with pytest.raises(SummaryRejectedError, match="no summary text") as info:
        await LLMSummary(ScriptedLLM(answer)).compact(make_ctx(work_history()))
    assert info.value.reason == "empty"


async def test_analysis_is_dropped_and_a_repeated_prefix_is_not_nested() -> None:
    answer = "<analysis>thinking aloud</analysis>\n<summary>\nThe real summary.\n</summary>"
    out = await LLMSummary(ScriptedLLM(answer)).compact(make_ctx(work_history()))
    assert out is not None
    assert summary_text(out[2]) == "The real summary."
    echoed = SUMMARY_PREFIX + "Echoed summary."
    out = await LLMSummary(ScriptedLLM(echoed)).compact(make_ctx(work_history()))
    assert out is not None
    assert summary_text(out[2]) == "Echoed summary."


# -- earlier summaries -----------------------------------------------------------------------


async def test_an_earlier_summary_is_resummarized_with_the_new_old_part() -> None:
    history = [
        system("sys"),
        user(SUMMARY_PREFIX + "Earlier: set up the repo."),
        user("now run the tests"),
        assistant(None, call("t", "bash", '{"cmd": "pytest"}')),
        tool("t", "3 passed"),
        assistant("All green."),
        user("ship it"),
        assistant("Shipping."),
    ]
    llm = ScriptedLLM("Merged: repo set up, tests pass.")
    out = await LLMSummary(llm).compact(make_ctx(history))
    assert out is not None
    # The first user message after the earlier summary is the task now: it stays verbatim.
    assert [m.role for m in out] == ["system", "user", "user", "user", "assistant"]
    assert out[1] is history[2]
    assert summary_text(out[2]) == "Merged: repo set up, tests pass."
    assert out[2].text.count(SUMMARY_PREFIX) == 1
    text = llm.requests[0].messages[0].text
    assert "[earlier summary]\nEarlier: set up the repo." in text
    assert SUMMARY_PREFIX not in text
    assert "3 passed" in text
    assert "now run the tests" not in text
    # A second round sees the first summary again, and still never nests it; the task and
    # the newest user message it would cover stay verbatim before the new summary.
    llm2 = ScriptedLLM("Merged again.")
    again = await LLMSummary(llm2).compact(make_ctx([*out, user("more"), assistant("sure")]))
    assert again is not None
    assert sum(m.text.startswith(SUMMARY_PREFIX) for m in again) == 1
    assert [again[1], again[2]] == [history[2], history[6]]
    assert summary_text(again[3]) == "Merged again."
    assert "[earlier summary]\nMerged: repo set up" in llm2.requests[0].messages[0].text


# -- the LLM and the parameters --------------------------------------------------------------


async def test_uses_the_context_llm_when_none_is_injected_and_prefers_the_injected_one() -> None:
    ctx_llm = ScriptedLLM("from ctx")
    out = await LLMSummary().compact(make_ctx(work_history(), ctx_llm))
    assert out is not None
    assert summary_text(out[2]) == "from ctx"
    injected = ScriptedLLM("from injection")
    unused = ScriptedLLM()
    out = await LLMSummary(injected).compact(make_ctx(work_history(), unused))
    assert out is not None
    assert summary_text(out[2]) == "from injection"
    assert unused.requests == []


async def test_without_any_llm_the_error_says_how_to_give_one() -> None:
    with pytest.raises(LLMRequiredError, match=r"LLMSummary needs an LLM.*compaction\.llm"):
        await LLMSummary().compact(make_ctx(work_history()))


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"max_preserved_messages": -1}, "max_preserved_messages"),
        ({"max_summary_tokens": 0}, "max_summary_tokens"),
        ({"max_input_tokens": 0}, "max_input_tokens"),
    ],
)
def test_bad_parameters_are_config_errors_naming_the_key(kwargs: dict[str, int], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        LLMSummary(**kwargs)
    assert info.value.key == key


async def test_max_preserved_messages_counts_only_user_and_assistant_messages() -> None:
    history = work_history()
    out = await LLMSummary(ScriptedLLM("s"), max_preserved_messages=4).compact(make_ctx(history))
    assert out is not None
    # user/assistant from the end: 9, 8, 7, 5 -> the tail starts at the group of message 5;
    # the task (message 1) stays before the summary, the group of message 2 is summarized.
    assert out[:2] == history[:2]
    summary_text(out[2])
    assert out[3:] == history[5:]
    assert out[3] is history[5]


async def test_the_input_is_not_mutated_even_when_given_as_a_tuple() -> None:
    history = tuple(work_history())
    before = copy.deepcopy(snapshot(history))
    out = await LLMSummary(ScriptedLLM("s")).compact(make_ctx(history))
    assert out is not None
    assert snapshot(history) == before


def test_the_loader_injects_the_llm_by_annotation_and_passes_params() -> None:
    from ctxcompact import LLM, load_strategy

    llm = ScriptedLLM()
    for spec in ("llm-summary", "ctxcompact.strategies:LLMSummary", "hiding-then-summary"):
        strategy = load_strategy(
            spec, dependencies={LLM: llm}, params={"max_preserved_messages": 3}
        )
        assert getattr(strategy, "llm", None) is llm, spec
        summary = getattr(strategy, "summary", strategy)
        assert isinstance(summary, LLMSummary)
        assert summary.max_preserved_messages == 3


async def test_under_the_controller_a_failure_keeps_the_history_and_a_success_replaces_it() -> None:
    from ctxcompact import CompactionController

    history = work_history()
    failing = CompactionController(
        LLMSummary(),
        max_context_size=10_000,
        reserved_context_size=100,
        llm=ScriptedLLM(RateLimitError("slow down", status_code=429)),
    )
    failed = await failing.compact(history, force=True)
    assert failed.history is history
    assert failed.event is not None
    assert failed.event.status == "failed"
    assert "RateLimitError: slow down" in (failed.event.error or "")

    working = CompactionController(
        LLMSummary(),
        max_context_size=10_000,
        reserved_context_size=100,
        llm=ScriptedLLM("short summary"),
    )
    result = await working.compact(history, force=True)
    out = result.history
    assert result.event is not None
    assert result.event.status == "compacted"
    # With the default store the summary ends with a note naming the range it replaces: the
    # 6 messages between the task, kept verbatim before it, and the preserved tail.
    assert out[1] is history[1]
    assert summary_text(out[2]).startswith(
        "short summary\n\n[ctxcompact: this summary replaces 6 message(s); recall_tool_result("
    )
    assert out[3] is history[8]


async def test_when_short_items_do_not_fit_the_oldest_are_left_out_not_the_summary() -> None:
    history = [user(SUMMARY_PREFIX + "EARLIER-SUMMARY")]
    for k in range(400):
        history += [user(f"question {k} " + "q" * 150), assistant(f"answer {k} " + "a" * 150)]
    llm = ScriptedLLM("s")
    await LLMSummary(llm, max_input_tokens=3_000).compact(make_ctx(history))
    (request,) = llm.requests
    text = request.messages[0].text
    assert COUNTER.count([Message.system(request.system or ""), *request.messages]) <= 3_000
    assert "[earlier summary]\nEARLIER-SUMMARY" in text
    assert "older messages left out" in text
    assert "question 0 " not in text
    assert "answer 398 " in text  # the newest summarized message is there


async def test_thinking_parts_of_the_answer_are_not_part_of_the_summary() -> None:
    answer = Message.assistant(
        [
            {"type": "thinking", "thinking": "private musing", "signature": "sig"},
            {"type": "text", "text": "Visible summary."},
        ]
    )
    out = await LLMSummary(ScriptedLLM(answer)).compact(make_ctx(work_history()))
    assert out is not None
    assert summary_text(out[2]) == "Visible summary."
    assert out[2].model_extra in (None, {})


# -- summary sanity (issue 11): what is refused, and that the history is kept ---------------------


def big_history() -> list[Message]:
    """~1,600 tokens: a dozen exchanges, the last two kept verbatim by the summary, the first
    user message (the task) and the last one before those (the newest it would cover) too,
    before it: the summary is message 3."""
    out = [system("You are a coding agent.")]
    for k in range(12):
        out += [
            user(f"step {k}: " + "please look at the file " * 8),
            assistant(f"Looking at part {k}. " + "checking the code " * 10),
        ]
    return out


async def refused(answer: str | Message | Completion, **params: int) -> SummaryRejectedError:
    """The error LLMSummary raises for ``answer`` on :func:`big_history` (asserted raised)."""
    history = big_history()
    before = snapshot(history)
    with pytest.raises(SummaryRejectedError) as info:
        await LLMSummary(ScriptedLLM(answer), **params).compact(make_ctx(history))
    assert snapshot(history) == before
    return info.value


async def test_a_million_character_reply_is_refused_and_the_controller_keeps_the_history() -> None:
    # The case: a server that ignores max_tokens took 1,605 tokens to 307,887.
    from ctxcompact import CompactionController

    history = big_history()
    reply = "word " * 200_000
    controller = CompactionController(
        LLMSummary(),
        max_context_size=100_000,
        reserved_context_size=500,
        llm=ScriptedLLM(reply),
        token_counter=COUNTER,
    )
    result = await controller.compact(history, force=True)
    out, event = result.history, result.event
    assert out is history
    assert event is not None
    assert event.status == "failed"
    assert event.tokens_after == event.tokens_before == COUNTER.count(history)
    assert event.error is not None
    assert event.error.startswith("SummaryRejectedError: LLMSummary: summary refused (too_long)")
    assert "word word" not in event.error  # sizes, never the text


async def test_control_character_garbage_is_refused() -> None:
    error = await refused("\x00\x01\x02\x1b[0m\x7f" * 50)
    assert error.reason == "garbage"
    error = await refused("Summary: " + "\ufffd\ue000" * 40)
    assert error.reason == "garbage"


@pytest.mark.parametrize("answer", ["1234 .... ---- 5678", "```\n{}\n```", "\U0001f600" * 9])
async def test_an_answer_without_a_letter_is_refused(answer: str) -> None:
    assert (await refused(answer)).reason == "no_letters"


async def test_tool_calls_instead_of_a_summary_are_refused() -> None:
    answer = Message.assistant(None, tool_calls=[call("x", "bash")])
    assert (await refused(answer)).reason == "not_text"


async def test_a_summary_not_smaller_than_what_it_replaces_is_refused() -> None:
    history = [user("fix it"), assistant("ok"), assistant("done"), user("thanks"), assistant("hi")]
    with pytest.raises(SummaryRejectedError, match="would replace 2 message") as info:
        await LLMSummary(ScriptedLLM("The user asked to fix it.")).compact(make_ctx(history))
    assert info.value.reason == "not_smaller"


async def test_the_length_cap_is_twice_max_summary_tokens_in_the_contexts_counter() -> None:
    # max_summary_tokens=100 caps the text the model wrote at 200 tokens (3.25 chars each).
    fits = "x" * 650
    over = "x" * 651
    out = await LLMSummary(ScriptedLLM(fits), max_summary_tokens=100).compact(
        make_ctx(big_history())
    )
    assert out is not None
    assert summary_text(out[3]) == fits
    assert (await refused(over, max_summary_tokens=100)).reason == "too_long"


@pytest.mark.parametrize(
    "answer",
    [
        "修复了 calc.py 的 add 函数；下一步：添加 mul。",  # letters of any script
        "Ran pytest: \x1b[31mFAILED\x1b[0m test_add, then fixed add() in calc.py. " * 3,
        "Summary\twith tabs\r\nand CRLF line ends, fine.",
    ],
)
async def test_real_summaries_in_any_script_with_a_little_noise_are_accepted(answer: str) -> None:
    out = await LLMSummary(ScriptedLLM(answer)).compact(make_ctx(big_history()))
    assert out is not None
    assert summary_text(out[3]) == answer.strip()


async def test_hiding_then_summary_keeps_the_hiding_when_the_summary_is_refused() -> None:
    from ctxcompact.strategies import HidingThenSummary

    history = big_history()[:1]
    history.append(user("read them"))
    for k in range(8):
        history += [assistant(None, call(f"c{k}", "cat")), tool(f"c{k}", f"file {k} " * 300)]
    history.append(assistant("done reading"))
    tokens = COUNTER.count(history)
    llm = ScriptedLLM("\x00" * 500)
    # A window hiding alone cannot meet, so the summary runs after it.
    ctx = CompactionContext(history, tokens, 1_500, 1_000, llm=llm)
    # fit_window=False: KLIP-13's outcome, the hidden history as it is (the default fits it
    # to the window: tests/test_summary_fit.py).
    strategy = HidingThenSummary(
        llm, preserve_recent_n=1, max_input_tokens=50_000, fit_window=False
    )
    out = await strategy.compact(ctx)
    assert out is not None
    assert len(llm.requests) == 1  # the summary was tried, refused, and hiding kept
    assert len(out) == len(history)
    assert not any(m.text.startswith(SUMMARY_PREFIX) for m in out)
    assert COUNTER.count(out) < tokens
