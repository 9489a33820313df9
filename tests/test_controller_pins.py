"""The controller puts back the default user pins a strategy lost: the task (the first user
message) and the newest user message, verbatim and in place, with a ``pin_restored`` problem.

The user's own pins (``pin``, ``pin_patterns``) are tested in test_recall_every_removal.py."""

from __future__ import annotations

import logging

import pytest

from ctxcompact import CompactionContext, CompactionController, Message, check_history
from ctxcompact.kit import drop_note, truncation_marker
from ctxcompact.testing import FunctionStrategy
from tests.helpers.gen import assistant, call, system, tool, user

TASK = user("fix the parser: it drops the last field of every line")
NEWEST = user("now add a test for an empty line")


def conversation() -> list[Message]:
    history = [system("you are a coding agent"), TASK]
    for n in range(5):
        history += [assistant(None, call(f"c{n}")), tool(f"c{n}", "r" * 400)]
    return [*history, NEWEST, assistant(None, call("c5")), tool("c5", "ok")]


def controller(strategy: FunctionStrategy) -> CompactionController:
    # recall=False: the markers the default store adds to what a strategy dropped are tested
    # in test_store_controller.py; here the messages are compared as they are.
    return CompactionController(
        strategy, max_context_size=500, reserved_context_size=0, recall=False
    )


async def test_a_strategy_that_drops_the_task_and_the_newest_user_message_gets_both_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    summary = user("[summary] read five files")

    def careless(ctx: CompactionContext) -> list[Message]:  # a third-party "summary"
        h = ctx.history
        return [h[0], summary, *h[-2:]]

    history = conversation()
    snapshot = list(history)
    with caplog.at_level(logging.WARNING, logger="ctxcompact.controller"):
        result = await controller(FunctionStrategy(careless, name="careless")).compact(
            history, force=True
        )
    assert history == snapshot
    assert result.changed
    assert result.event is not None
    assert result.event.status == "compacted"
    out = result.history
    # Both put back verbatim (the same objects), where they were relative to the messages of
    # the history that were kept: each after the nearest earlier one (the summary is new, so
    # the newest user message goes right after the task, before the last tool turn).
    assert out == [history[0], TASK, NEWEST, summary, *history[-2:]]
    assert out[1] is TASK
    assert out[2] is NEWEST
    assert check_history(out) == []
    (problem,) = result.event.problems
    assert (problem.kind, problem.count, problem.source) == ("pin_restored", 2, "careless")
    assert "the task, the newest user message" in str(problem)
    assert "careless lost 2 pinned message(s)" in caplog.text


async def test_the_check_costs_nothing_when_the_strategy_keeps_them() -> None:
    outputs: list[list[Message]] = []

    def careful(ctx: CompactionContext) -> list[Message]:
        h = ctx.history
        out = [h[0], h[1], user("[summary] read five files"), *h[-3:]]
        outputs.append(out)
        return out

    history = conversation()
    result = await controller(FunctionStrategy(careful)).compact(history, force=True)
    assert result.event is not None
    assert result.event.status == "compacted"
    assert result.event.problems == ()
    (output,) = outputs
    # The strategy's own messages, not copies: nothing was put back or rebuilt.
    assert len(result.history) == len(output)
    assert all(a is b for a, b in zip(result.history, output, strict=True))


async def test_a_rewritten_system_message_is_left_to_the_strategy() -> None:
    # A strategy may document that it rewrites the system prompt: only user pins are checked.
    shorter = system("you code")

    def rewrite(ctx: CompactionContext) -> list[Message]:
        h = ctx.history
        return [shorter, h[1], *h[-3:]]

    result = await controller(FunctionStrategy(rewrite)).compact(conversation(), force=True)
    assert result.event is not None
    assert result.event.problems == ()
    assert result.history[0] is shorter


async def test_a_transform_that_drops_the_task_gets_it_back_in_the_request() -> None:
    def drop_task(ctx: CompactionContext) -> list[Message]:
        return [m for m in ctx.history if m is not TASK]

    ctl = CompactionController(
        FunctionStrategy(lambda ctx: None),
        max_context_size=100_000,
        reserved_context_size=0,
        recall=False,
        transforms=[FunctionStrategy(drop_task, name="drop_task")],
    )
    history = conversation()
    prepared = await ctl.prepare(history)
    assert prepared.messages == history
    assert [(p.kind, p.source) for p in prepared.transform_problems] == [
        ("pin_restored", "drop_task")
    ]


async def test_a_task_cut_head_and_tail_with_a_note_after_it_is_kept_as_cut() -> None:
    # The guard cuts the task head + tail when it alone does not fit, and the note naming
    # what it dropped may follow the cut: still the task, cut, not a task lost.
    long_task = user("Fix the failing test. " * 700)
    text = long_task.text
    cut = long_task.replace(
        content=text[:4_000]
        + truncation_marker(len(text) - 8_000)
        + text[-4_000:]
        + "\n\n"
        + drop_note(3)
    )

    def cut_the_task(ctx: CompactionContext) -> list[Message]:
        h = ctx.history
        return [h[0], cut, *h[-3:]]

    history = [system("s"), long_task, *conversation()[2:]]
    result = await controller(FunctionStrategy(cut_the_task)).compact(history, force=True)
    assert result.event is not None
    assert result.event.problems == ()
    assert result.history[1] is cut
