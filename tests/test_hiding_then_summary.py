"""HidingThenSummary: hiding enough, hiding a no-op, hiding not enough, KLIP-13's literal rule."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest

from ctxcompact import (
    CompactionContext,
    CompactionController,
    HeuristicTokenCounter,
    Message,
    check_history,
)
from ctxcompact.exceptions import ConfigError, LLMRequiredError, ServerError
from ctxcompact.strategies import (
    HIDDEN_PLACEHOLDER,
    SUMMARY_PREFIX,
    HidingThenSummary,
    ToolResultHiding,
)
from ctxcompact.testing import ScriptedLLM
from tests.helpers.gen import assistant, call, system, tool, user

COUNTER = HeuristicTokenCounter()
RESERVED = 1_000


def history_with_groups(
    n_groups: int, *, result_chars: int = 7_000, chat_chars: int = 10
) -> list[Message]:
    """``n_groups`` tool-call groups with big results, each after a user turn."""
    out = [system("agent")]
    for k in range(n_groups):
        out.append(user(f"step {k} " + "u" * chat_chars))
        out.append(assistant(None, call(f"c{k}", "cat", f'{{"n": {k}}}')))
        out.append(tool(f"c{k}", f"RESULT-{k} " + "r" * result_chars))
        out.append(assistant(f"done {k}"))
    return out


def ctx_over_by(
    history: Sequence[Message], over: int, llm: ScriptedLLM | None
) -> CompactionContext:
    """A context whose trigger fired: ``token_count + reserved`` exceeds the window by ``over``."""
    tokens = COUNTER.count(history)
    return CompactionContext(
        history=history,
        token_count=tokens,
        max_context_size=tokens + RESERVED - over,
        reserved_context_size=RESERVED,
        llm=llm,
    )


def hiding_saving(history: Sequence[Message]) -> int:
    hidden = ToolResultHiding().hide(history)
    assert hidden is not None
    return COUNTER.count(history) - COUNTER.count(hidden)


async def test_hiding_enough_returns_the_hidden_history_without_calling_the_llm() -> None:
    history = history_with_groups(7)
    saving = hiding_saving(history)  # two groups hidden: ~4,000 tokens
    llm = ScriptedLLM()
    out = await HidingThenSummary(llm).compact(ctx_over_by(history, saving // 2, llm))
    assert out == ToolResultHiding().hide(history)
    assert llm.requests == []
    assert out is not None
    assert check_history(out) == []


async def test_hiding_a_noop_falls_back_to_the_summary() -> None:
    history = history_with_groups(3)  # fewer groups than preserve_recent_n: nothing to hide
    llm = ScriptedLLM("summary of the work")
    out = await HidingThenSummary(llm).compact(ctx_over_by(history, 100, llm))
    assert out is not None
    assert len(llm.requests) == 1
    assert out[0] is history[0]
    # The task and the newest user message stay verbatim before the summary.
    assert [out[1], out[2]] == [history[1], history[-4]]
    assert out[3].text == SUMMARY_PREFIX + "summary of the work"
    assert out[4:] == history[-3:]
    assert "RESULT-0" in llm.requests[0].messages[0].text  # nothing hidden before the summary


async def test_hiding_not_enough_summarizes_the_hidden_history_in_the_same_run() -> None:
    history = history_with_groups(7)
    saving = hiding_saving(history)
    llm = ScriptedLLM("summary after hiding")
    out = await HidingThenSummary(llm).compact(ctx_over_by(history, saving + 500, llm))
    assert out is not None
    assert out[1] is history[1]  # the task, verbatim
    assert out[2] is history[-4]  # the newest user message, verbatim
    assert out[3].text == SUMMARY_PREFIX + "summary after hiding"
    assert out[4:] == history[-3:]
    (request,) = llm.requests
    text = request.messages[0].text
    # The summarizer read the hidden history: old results are placeholders, recent ones not.
    assert "RESULT-0" not in text
    assert "RESULT-1" not in text
    assert HIDDEN_PLACEHOLDER in text
    assert "RESULT-2" in text
    assert "step 1 u" in text
    assert "step 0 u" not in text  # the task is not summarized: it stays verbatim
    assert check_history(out) == []


async def test_at_the_trigger_exactly_still_summarizes() -> None:
    history = history_with_groups(7)
    saving = hiding_saving(history)
    llm = ScriptedLLM("s")
    out = await HidingThenSummary(llm).compact(ctx_over_by(history, saving, llm))
    assert out is not None
    assert len(llm.requests) == 1


async def test_noop_only_is_klip13_literal_the_summary_waits_for_the_next_round() -> None:
    history = history_with_groups(7)
    saving = hiding_saving(history)
    llm = ScriptedLLM("next round summary")
    strategy = HidingThenSummary(llm, fallback="noop-only")
    first = await strategy.compact(ctx_over_by(history, saving + 500, llm))
    assert first == ToolResultHiding().hide(history)
    assert llm.requests == []
    assert first is not None
    second = await strategy.compact(ctx_over_by(first, 500, llm))
    assert second is not None
    assert second[1:3] == [history[1], history[-4]]  # the task and the newest user message
    assert second[3].text == SUMMARY_PREFIX + "next round summary"
    assert len(llm.requests) == 1


async def test_a_failed_summary_after_hiding_keeps_the_hiding_and_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    history = history_with_groups(7)
    saving = hiding_saving(history)
    llm = ScriptedLLM(ServerError("502 bad gateway"))
    with caplog.at_level(logging.DEBUG, logger="ctxcompact"):
        # fit_window=False: the hidden history as it is (by default it is then fitted to
        # the window: tests/test_summary_fit.py).
        strategy = HidingThenSummary(llm, fit_window=False)
        out = await strategy.compact(ctx_over_by(history, saving + 500, llm))
    assert out == ToolResultHiding().hide(history)
    # The warning names the error's type; its text (a provider may echo the transcript in
    # it) is there only for whoever turns DEBUG on.
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "ServerError" in warning.getMessage()
    assert "502 bad gateway" not in warning.getMessage()
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert any("502 bad gateway" in line for line in debug)


async def test_a_failed_summary_when_hiding_did_nothing_propagates() -> None:
    history = history_with_groups(2)
    before = [m.model_dump() for m in history]
    llm = ScriptedLLM(ServerError("503"))
    with pytest.raises(ServerError):
        await HidingThenSummary(llm).compact(ctx_over_by(history, 100, llm))
    assert [m.model_dump() for m in history] == before


async def test_without_an_llm_it_fails_at_once_even_when_hiding_would_do() -> None:
    history = history_with_groups(7)
    with pytest.raises(LLMRequiredError, match="HidingThenSummary needs an LLM"):
        await HidingThenSummary().compact(ctx_over_by(history, 10, None))


async def test_returns_none_when_neither_hiding_nor_summary_changes_anything() -> None:
    history = [user("hi"), assistant("hello")]
    llm = ScriptedLLM()
    assert await HidingThenSummary(llm).compact(ctx_over_by(history, 10, llm)) is None
    assert llm.requests == []


async def test_parameters_reach_the_parts() -> None:
    strategy = HidingThenSummary(
        preserve_recent_n=2, placeholder="[gone]", max_preserved_messages=3, max_summary_tokens=500
    )
    assert strategy.hiding.preserve_recent_n == 2
    assert strategy.hiding.placeholder == "[gone]"
    assert strategy.summary.max_preserved_messages == 3
    assert strategy.summary.max_summary_tokens == 500
    with pytest.raises(ConfigError) as info:
        HidingThenSummary(fallback="sometimes")  # type: ignore[arg-type]
    assert info.value.key == "fallback"


async def test_hiding_is_not_enough_when_its_recall_placeholders_do_not_fit() -> None:
    # With the default store the hook writes the recall placeholder (~22 tokens) in place of
    # hiding's (~15): "is hiding enough?" counts that, so a history that hiding would fit
    # only with the plain placeholders is summarized in the same run (before: the hidden
    # history was kept and the call went over the window; 33 of 1,044 at 16k on the traces).
    # (A long system prompt: the summarizer's request is fitted to the same window.)
    history = [system("you are an agent. " * 600), user("fix the failing test in parser.py")]
    for k in range(150):
        cid = f"toolu_01{k:03d}ABCDEFGHJKMNPQRSTVWXYZ"
        history += [assistant(None, call(cid, "read", f'{{"n": {k}}}')), tool(cid, "r" * 200)]
    strategy = HidingThenSummary(ScriptedLLM("Read 150 files; the bug is in parse()."))
    hidden = strategy.hiding.hide(history, token_counter=COUNTER)
    assert hidden is not None
    reserved = 1_000
    # Hiding's plain output fits this window with 100 tokens to spare; its recall form not.
    window = COUNTER.count(hidden) + reserved + 100
    controller = CompactionController(
        strategy, max_context_size=window, reserved_context_size=reserved, token_counter=COUNTER
    )
    result = await controller.compact(history)
    assert result.event is not None
    assert result.event.status == "compacted", [str(p) for p in result.event.problems]
    assert any(m.text.startswith(SUMMARY_PREFIX) for m in result.history)
    assert COUNTER.count(result.history) + reserved < window
