"""Tiered: cheapest tier first, measured after each, stopping at the target; the guard last."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from ctxcompact import (
    CompactionContext,
    CompactionController,
    HeuristicTokenCounter,
    Message,
    load_config,
    load_strategy,
)
from ctxcompact.exceptions import ConfigError, LLMTimeoutError, StrategyLoadError
from ctxcompact.strategies import SUMMARY_PREFIX, Tiered, ToolResultHiding
from ctxcompact.testing import FunctionStrategy, ScriptedLLM, assert_strategy_invariants
from tests.helpers.gen import assistant, call, system, tool, user

COUNT = HeuristicTokenCounter()
WINDOW, RESERVED = 16_000, 4_000
BUDGET = WINDOW - RESERVED - 1  # the guard's, as the controller triggers


def agent_run(steps: int, *, result: str = "r", size: int = 2_000) -> list[Message]:
    """A system prompt, a task, then ``steps`` tool calls whose results hold ``size`` chars."""
    h = [system("You are a coding agent."), user("Fix parse_config in src/app/config.py.")]
    for k in range(steps):
        h += [
            assistant(f"Reading part {k}.", call(f"c{k}", "cat", f'{{"path": "src/m{k}.py"}}')),
            tool(f"c{k}", f"module_{k}_body " + result * size),
        ]
    return h


def run(strategy: Tiered, history: list[Message], **kw: object) -> list[Message] | None:
    return assert_strategy_invariants(
        strategy,
        history,
        max_context_size=WINDOW,
        reserved_context_size=RESERVED,
        token_counter=COUNT,
        **kw,  # type: ignore[arg-type]
    )


def test_nothing_happens_at_or_under_the_target() -> None:
    h = agent_run(3, size=200)
    assert COUNT.count(h) <= BUDGET * 0.4
    assert run(Tiered(), h) is None


def test_the_first_tier_that_reaches_the_target_is_the_last_that_runs() -> None:
    # Old results are most of the history: masking them reaches the target, so nothing is
    # dropped and the last 5 groups stay whole.
    h = agent_run(20, size=2_200)
    assert COUNT.count(h) > BUDGET
    out = run(Tiered(), h)
    assert out is not None
    assert len(out) == len(h)  # no message dropped
    assert COUNT.count(out) <= BUDGET * 0.4
    assert [m.text for m in out[-10:]] == [m.text for m in h[-10:]]
    assert {m.text for m in out if m.role == "tool"} >= {"[masked]"}


def test_errors_are_kept_by_the_masking_tier() -> None:
    h = agent_run(20, size=2_200)
    h[5] = tool("c1", "Traceback (most recent call last):\n  ValueError: bad config")
    out = run(Tiered(), h)
    assert out is not None
    assert out[5] is h[5]


def test_when_masking_is_not_enough_the_guard_drops_and_always_fits() -> None:
    # The assistant messages alone outweigh the target: only dropping can reach it.
    h = [system("S"), user("Fix parse_config in src/app/config.py.")]
    for k in range(40):
        h += [assistant("thinking " * 150, call(f"c{k}", "cat")), tool(f"c{k}", "r" * 800)]
    out = run(Tiered(), h)
    assert out is not None
    assert COUNT.count(out) <= BUDGET * 0.4
    assert out[0] is h[0]
    assert out[1].text.startswith(h[1].text)  # the task, noting what was dropped
    assert out[-2].tool_calls == h[-2].tool_calls  # the newest step
    assert len(out) < len(h)


def test_a_huge_result_is_cut_to_its_share_of_the_budget_first() -> None:
    h = agent_run(3, size=200)
    h.append(assistant(None, call("big", "cat")))
    h.append(tool("big", "head " + "x" * 200_000 + " tail"))
    out = run(Tiered(), h)
    assert out is not None
    assert len(out) == len(h)
    assert COUNT.count_message(out[-1]) <= BUDGET // 16
    assert out[-1].text.startswith("head ")
    assert out[-1].text.endswith(" tail")
    assert all(a is b for a, b in zip(out[:-1], h[:-1], strict=True))


AT_TRIGGER = {"summarize_at_trigger": True}  # a summary written at the trigger, no ahead


def test_the_summary_tier_runs_with_an_llm_before_anything_is_dropped() -> None:
    h = [system("S"), user("Fix parse_config.")]
    for k in range(40):
        h += [assistant("thinking " * 150, call(f"c{k}", "cat")), tool(f"c{k}", "r" * 800)]
    llm = ScriptedLLM("The agent read 38 modules; parse_config is in src/app/config.py.")
    out = run(Tiered(summary=AT_TRIGGER), h, llm=llm, max_new_messages=1)
    assert out is not None
    assert len(llm.requests) == 1
    assert any(m.text.startswith(SUMMARY_PREFIX) for m in out)
    assert COUNT.count(out) <= BUDGET * 0.4


def test_a_failing_summary_falls_through_to_the_guard(caplog: pytest.LogCaptureFixture) -> None:
    h = [system("S"), user("Fix parse_config.")]
    for k in range(40):
        h += [assistant("thinking " * 150, call(f"c{k}", "cat")), tool(f"c{k}", "r" * 800)]
    llm = ScriptedLLM(LLMTimeoutError("the summarizer timed out"))
    with caplog.at_level(logging.WARNING, logger="ctxcompact.strategies._tiered"):
        out = run(Tiered(summary=AT_TRIGGER), h, llm=llm)
    assert out is not None
    assert COUNT.count(out) <= BUDGET * 0.4
    assert not any(m.text.startswith(SUMMARY_PREFIX) for m in out)
    assert "tier summary failed (LLMTimeoutError)" in caplog.text
    assert "timed out" not in caplog.text  # the exception's own text is not logged


def test_a_tier_that_does_not_shrink_the_history_is_skipped() -> None:
    def grow(ctx: CompactionContext) -> list[Message]:
        return [*ctx.history[:-1], ctx.history[-1].replace(content=ctx.history[-1].text * 3)]

    h = agent_run(20, size=2_200)
    bigger = FunctionStrategy(grow)
    out = run(Tiered(tiers=[bigger, ToolResultHiding(preserve_recent_n=5)]), h)
    assert len(bigger.calls) == 1
    assert out is not None
    assert out[-1] is h[-1]  # the growing tier's output was not used
    assert COUNT.count(out) <= BUDGET * 0.4


@pytest.mark.parametrize(
    ("params", "key"),
    [
        ({"fill": 1.0}, "fill"),
        ({"fill": 0}, "fill"),
        ({"max_result_share": 1.5}, "max_result_share"),
        ({"keep_recent": -1}, "keep_recent"),
        ({"tiers": "mask"}, "tiers"),
        ({"tiers": ["mask", "shrink"]}, "tiers[1]"),
        ({"guard": {"fill": 0.5}}, "guard.fill"),
        ({"summary": {"summarize_at_trigger": "yes"}}, "summary.summarize_at_trigger"),
    ],
)
def test_bad_settings_name_their_key(params: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        Tiered(**params)  # type: ignore[arg-type]
    assert info.value.key == key


def test_it_is_nameable_in_toml_with_its_tiers_and_params(tmp_path: Path) -> None:
    path = tmp_path / "tiered.toml"
    path.write_text(
        '[compaction]\nstrategy = "tiered"\nmax_context_size = 16000\n'
        "reserved_context_size = 4000\n"
        "[compaction.params]\nfill = 0.5\nkeep_recent = 3\n"
        'tiers = ["mask", {strategy = "tool-result-hiding", params = {preserve_recent_n = 2}}]\n'
        '[compaction.params.guard]\ndrop = "oldest"\n'
    )
    controller = CompactionController.from_config(load_config(path))
    strategy = controller.strategy
    assert isinstance(strategy, Tiered)
    assert (strategy.fill, strategy.keep_recent) == (0.5, 3)
    assert strategy._guard.drop == "oldest"
    assert [name for name, _ in strategy._tiers] == ["mask", "ToolResultHiding"]
    with pytest.raises(StrategyLoadError, match="unknown tier 'masks'"):
        load_strategy("tiered", params={"tiers": ["masks"]})


async def test_the_controller_runs_it_at_the_threshold_and_the_next_calls_fit() -> None:
    h = agent_run(60, size=600)
    controller = CompactionController(
        Tiered(), max_context_size=WINDOW, reserved_context_size=RESERVED, token_counter=COUNT
    )
    result = await controller.compact(h)
    assert result.event is not None
    assert result.event.status == "compacted"
    stored = list(result.history)
    # Room for several more steps before the next run: the cache holds meanwhile.
    for k in range(6):
        stored += [assistant(None, call(f"n{k}", "cat")), tool(f"n{k}", "s" * 1_500)]
        assert not controller.should_compact(stored), k
