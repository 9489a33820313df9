"""White-box: the summary tier Tiered builds leaves the fitting to the tiered guard.

Why white-box: ``fit_window`` changes which messages are dropped after a summary (the
summary's own oldest-first fit or the tiered guard's relevance), not the output's size, and
both pass every invariant; what this pins is the wiring decided at the merge of issue 20/21.
"""

from __future__ import annotations

from ctxcompact.strategies import LLMSummary, Tiered
from ctxcompact.testing import ScriptedLLM


def _summary_tier(tiered: Tiered) -> LLMSummary:
    tiers = [tier for _, tier in tiered._tiers if isinstance(tier, LLMSummary)]
    assert len(tiers) == 1
    return tiers[0]


def test_the_summary_tier_does_not_fit_the_window_itself() -> None:
    assert _summary_tier(Tiered(llm=ScriptedLLM("s"))).fit_window is False


def test_a_summary_option_given_explicitly_is_honoured() -> None:
    tiered = Tiered(llm=ScriptedLLM("s"), summary={"fit_window": True, "max_summary_tokens": 500})
    tier = _summary_tier(tiered)
    assert tier.fit_window is True
    assert tier.max_summary_tokens == 500
