"""The window fit after a summary keeps the user's pins and writes the recall note, as the
guard itself does. White-box: ``fit_after_summary`` is private; through ``LLMSummary`` the
controller would put a lost pin back and hide the defect."""

from __future__ import annotations

import pytest

from ctxcompact import CompactionContext, HeuristicTokenCounter, Message
from ctxcompact.kit import PinRules
from ctxcompact.strategies._summary_fit import fit_after_summary


@pytest.mark.parametrize("recall", [False, True])
def test_the_fit_after_a_summary_never_drops_a_pinned_message(recall: bool) -> None:
    summary = Message.user("summary of what came before")
    history = [
        summary,
        Message.user("task"),
        Message.assistant("PINNED decision " + "a " * 2_000),
        Message.user("go on"),
        Message.assistant("b " * 1_500),
        Message.user("c " * 100),
    ]
    ctx = CompactionContext(
        history,
        3_000,
        1_200,
        200,
        token_counter=HeuristicTokenCounter(),
        pin=PinRules(["PINNED"]),
        recall=recall,
    )
    out = fit_after_summary(ctx, history, lambda m: m is summary)
    assert out is not history  # something had to go
    assert any(m.text.startswith("PINNED decision") for m in out)
    assert any("recall_tool_result" in m.text for m in out) == recall
