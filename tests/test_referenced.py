"""Removed then referenced: results a strategy removed that the model quoted afterwards."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from ctxcompact import CompactionController, HeuristicTokenCounter, Message, from_openai
from ctxcompact.replay import ReferencedReport, distinctive_tokens, removed_then_referenced, replay
from ctxcompact.strategies import ToolResultHiding, ToolResultTruncation

from .helpers.gen import assistant, call, tool, user
from .helpers.traces import load_trace

Rewrite = Callable[[Sequence[Message]], "list[Message] | None"]


def hide_all(history: Sequence[Message]) -> list[Message] | None:
    return ToolResultHiding(preserve_recent_n=0).hide(history)


def inputs_with(recording: Sequence[Message], rewrite: Rewrite) -> dict[int, Sequence[Message]]:
    """The input of every model call: the history before its answer, rewritten."""
    return {
        i: rewrite(recording[:i]) or recording[:i]
        for i, m in enumerate(recording)
        if m.role == "assistant"
    }


LISTING = "total 3\n" + "\n".join(f"-rw-r--r-- 1 dev dev {n} {f}" for n, f in [(1, "x"), (2, "y")])
CONFIG_RESULT = (
    'Traceback (most recent call last):\n  File "src/app/settings.py", line 88\n'
    "KeyError: 'database_url' is not defined for the staging profile\n" + LISTING
)


def conversation(final_answer: Message, *, extra_user: str | None = None) -> list[Message]:
    """A run: the agent reads a traceback, runs one more command, then answers."""
    messages = [
        user("why does the app crash on start?"),
        assistant(None, call("c1", "bash", '{"cmd": "python -m app"}')),
        tool("c1", CONFIG_RESULT),
        assistant(None, call("c2", "bash", '{"cmd": "ls"}')),
        tool("c2", "a.txt b.txt"),
    ]
    if extra_user is not None:
        messages.append(user(extra_user))
    return [*messages, final_answer]


# -- hand-built cases -------------------------------------------------------------------------


def test_a_hidden_result_quoted_later_counts() -> None:
    rec = conversation(assistant("The key database_url is missing in src/app/settings.py."))
    report = removed_then_referenced(rec, inputs_with(rec, hide_all))
    assert (report.results, report.removed, report.referenced) == (2, 1, 1)
    assert report.rate == 1.0
    (detail,) = report.details
    assert (detail.position, detail.tool_call_id, detail.removed_at) == (2, "c1", 3)
    assert detail.referenced_at == len(rec) - 1
    assert detail.quoted == ("database_url", "src/app/settings.py")
    assert detail.distinctive > len(detail.quoted)


def test_a_quote_that_is_still_visible_elsewhere_does_not_count() -> None:
    rec = conversation(
        assistant("The key database_url is missing in src/app/settings.py."),
        extra_user="I think database_url and src/app/settings.py matter here.",
    )
    report = removed_then_referenced(rec, inputs_with(rec, hide_all))
    assert (report.removed, report.referenced) == (1, 0)
    assert report.details[0].referenced_at is None
    assert report.details[0].quoted == ()


def test_a_result_with_no_distinctive_tokens_is_removed_but_never_referenced() -> None:
    rec = [
        user("go"),
        assistant(None, call("c1")),
        tool("c1", "ok. " * 100),
        assistant(None, call("c2")),
        tool("c2", "fine"),
        assistant("ok. " * 100),
    ]
    assert distinctive_tokens(rec[2].text) == frozenset()
    report = removed_then_referenced(rec, inputs_with(rec, hide_all))
    assert (report.removed, report.referenced) == (1, 0)
    assert report.details[0].distinctive == 0


def test_quoting_while_the_result_is_still_visible_does_not_count() -> None:
    rec = conversation(assistant("Checking database_url in src/app/settings.py."))
    # Nothing is hidden at any call: the answer could read it.
    report = removed_then_referenced(rec, inputs_with(rec, lambda h: None))
    assert (report.results, report.removed, report.referenced) == (2, 0, 0)
    assert report.rate == 0.0


def test_tool_call_arguments_count_as_quoting() -> None:
    rec = conversation(assistant(None, call("c3", "edit", '{"path": "src/app/settings.py"}')))
    rec.append(tool("c3", "edited"))
    report = removed_then_referenced(rec, inputs_with(rec, hide_all))
    assert report.referenced == 1
    assert report.details[0].quoted == ("src/app/settings.py",)


def test_part_of_a_longer_identifier_is_not_a_quote() -> None:
    rec = conversation(assistant("I will add database_url_override and staging_profiles."))
    assert removed_then_referenced(rec, inputs_with(rec, hide_all)).referenced == 0


def test_a_six_word_span_counts_as_a_quote() -> None:
    rec = conversation(assistant("It says: is not defined for the staging profile!"))
    report = removed_then_referenced(rec, inputs_with(rec, hide_all))
    assert report.referenced == 1
    assert report.details[0].quoted == (
        "6g:is not defined for the staging",
        "6g:not defined for the staging profile",
    )


def test_a_truncated_result_counts_only_for_what_was_cut() -> None:
    middle = "error code 48213 in worker_pool_manager"
    big = "HEAD " + "a " * 200 + middle + " b" * 200 + " TAIL keep_this_identifier"
    rec = [
        user("go"),
        assistant(None, call("c1")),
        tool("c1", big),
        assistant("Seen: keep_this_identifier. The worker_pool_manager failed with 48213."),
    ]
    cut = ToolResultTruncation(max_chars=300, head_chars=100, tail_chars=100).truncate
    report = removed_then_referenced(rec, inputs_with(rec, cut))
    assert report.referenced == 1
    assert report.details[0].quoted == ("48213", "worker_pool_manager")


def test_a_reused_id_is_judged_by_position() -> None:
    rec = [
        user("go"),
        assistant(None, call("c1")),
        tool("c1", "first run: value_alpha_one"),
        assistant(None, call("c1")),
        tool("c1", "second run: value_beta_two"),
        assistant("Both: value_alpha_one and value_beta_two."),
    ]

    def hide_first(history: Sequence[Message]) -> list[Message] | None:
        if len(history) < 3:
            return None
        return [*history[:2], history[2].replace(content="[hidden]"), *history[3:]]

    report = removed_then_referenced(rec, inputs_with(rec, hide_first))
    assert [(d.position, d.quoted) for d in report.details] == [(2, ("value_alpha_one",))]


def test_the_recording_and_inputs_are_not_changed() -> None:
    rec = conversation(assistant("database_url"))
    inputs = inputs_with(rec, hide_all)
    snapshot = (list(rec), {k: list(v) for k, v in inputs.items()})
    removed_then_referenced(rec, inputs)
    assert (list(rec), {k: list(v) for k, v in inputs.items()}) == snapshot


def test_reports_add_up() -> None:
    a, b = ReferencedReport(10, 4, 1), ReferencedReport(6, 4, 3)
    total = a + b
    assert (total.results, total.removed, total.referenced, total.rate) == (16, 8, 4, 0.5)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("call parseConfig and load_all_settings now", {"parseConfig", "load_all_settings"}),
        ("ab_c and x_y are too short; getX too", set()),
        (
            "see /etc/nginx/nginx.conf and ./run.sh and docs/notes.md or notes.md",
            {"/etc/nginx/nginx.conf", "./run.sh", "docs/notes.md"},
        ),
        ("and/or </div> /tmp are not paths", set()),
        ("port 8080, pi 3.14159, v1.2, id a1234", {"8080"}),
    ],
)
def test_distinctive_tokens_follow_the_documented_rules(text: str, expected: set[str]) -> None:
    assert {t for t in distinctive_tokens(text) if not t.startswith("6g:")} == expected


def test_six_grams_need_25_characters() -> None:
    assert not [t for t in distinctive_tokens("a b c d e f g h") if t.startswith("6g:")]
    grams = [
        t
        for t in distinctive_tokens("Alpha, beta gamma delta epsilon zeta.")
        if t.startswith("6g:")
    ]
    assert grams == ["6g:alpha beta gamma delta epsilon zeta"]


# -- a real trace -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["taubench-gpt4o-airline__task3_trial0", "msa-gemini3pro__astropy__astropy-12907"]
)
def test_on_a_trace_every_reference_is_in_the_answer_and_not_in_its_input(name: str) -> None:
    rec = from_openai(load_trace(name))
    inputs = inputs_with(rec, ToolResultHiding(preserve_recent_n=2).hide)
    report = removed_then_referenced(rec, inputs)
    assert 0 < report.referenced <= report.removed <= report.results
    for detail in report.details:
        assert rec[detail.position].role == "tool"
        assert detail.position < detail.removed_at
        assert rec[detail.position] not in inputs[detail.removed_at]
        if not detail.referenced:
            continue
        assert detail.referenced_at is not None
        answer = rec[detail.referenced_at]
        written = answer.text + "".join(c.arguments for c in answer.tool_calls or ())
        seen = "\n".join(
            m.text + "".join(c.name + c.arguments for c in m.tool_calls or ())
            for m in inputs[detail.referenced_at]
        )
        for token in detail.quoted:
            if token.startswith("6g:"):
                continue  # normalised words; checked by the hand-built cases
            assert token in written
            assert token in rec[detail.position].text
            assert token not in seen


async def test_inputs_recorded_by_replay_give_the_same_figures() -> None:
    rec = from_openai(load_trace("msa-gemini3pro__astropy__astropy-8872"))
    counter = HeuristicTokenCounter()
    controller = CompactionController(
        ToolResultHiding(),
        max_context_size=10**12,
        reserved_context_size=0,
        token_counter=counter,
        transforms=(ToolResultHiding(preserve_recent_n=3),),
        # Compared with hide() by hand: the strategy's own output. With recall (the default
        # with a store) a result shorter than its recall placeholder is not hidden at all.
        recall=False,
    )
    recorded: dict[int, Sequence[Message]] = {}
    await replay(
        rec, controller, counter=counter, on_call=lambda i, r: recorded.__setitem__(i, list(r))
    )
    direct = inputs_with(rec, ToolResultHiding(preserve_recent_n=3).hide)
    assert recorded.keys() == direct.keys()
    by_replay, by_hand = (
        removed_then_referenced(rec, recorded),
        removed_then_referenced(rec, direct),
    )
    assert by_replay.removed > 0
    assert by_replay == by_hand
