"""The replay report says what its percentages are of, marks losses and says what to try.

White-box: the report's private text and plot builders (``cli._report``, ``cli._plot``) are
fed hand-made replay figures, which no recorded conversation would give one at a time.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ctxcompact.cli import main
from ctxcompact.cli._plot import draw_replays
from ctxcompact.cli._report import ReplaySettings, advice, is_loss, replay_text
from ctxcompact.replay import FileReplay, ReplayStats
from tests.helpers.traces import TRACES_DIR

BASE = ReplayStats(
    calls=4, input_tokens=1000, peak_context_tokens=400, cost=200.0, context_tokens=[1, 2, 3, 4]
)


def stats(input_tokens: int, cost: float, *, compactions: int = 1, breaks: int = 1) -> ReplayStats:
    return ReplayStats(
        calls=4,
        compactions=compactions,
        input_tokens=input_tokens,
        peak_context_tokens=300,
        cost=cost,
        cache_breaks=breaks,
        context_tokens=[100, 200, 150, 250],
    )


def settings(*labels: str) -> ReplaySettings:
    return ReplaySettings(labels, 16_000, 4_000, 0.1, "heuristic")


def test_a_single_file_report_says_what_its_percentages_are_of() -> None:
    text = replay_text(
        settings("tool-result-hiding"), [FileReplay("a.json", 9, BASE, (stats(557, 150.0),))]
    )
    assert "557 (55.7% of no compaction)" in text
    assert "150 (75.0% of no compaction)" in text
    assert not re.search(r"\(\d+\.\d%\)", text)  # never a bare "(55.7%)"
    assert "tool-result-hiding: saves 25.0% of the cost (cost 75.0% of no compaction" in text
    assert "LOSS" not in text
    assert "try:" not in text


def test_a_cost_above_no_compaction_is_a_loss_with_the_setting_to_try() -> None:
    losing = stats(557, 225.4, breaks=7)
    text = replay_text(settings("tool-result-hiding"), [FileReplay("a.json", 9, BASE, (losing,))])
    assert "225 (112.7% of no compaction, LOSS)" in text
    assert "557 (55.7% of no compaction)" in text  # the input still saves: not marked
    assert "tool-result-hiding: LOSS: cost 112.7% of no compaction, input 55.7%" in text
    assert "7 cache breaks against 0" in text
    # A third of the trigger (16,000 - 4,000) as the batch to try.
    assert "try: rewrite old results in batches" in text
    assert "--param clear_at_least=4000" in text


def test_an_input_above_no_compaction_is_a_loss_too() -> None:
    text = replay_text(
        settings("schema1-masking"), [FileReplay("a.json", 9, BASE, (stats(1100, 150.0),))]
    )
    assert "1,100 (110.0% of no compaction, LOSS)" in text
    assert "schema1-masking: LOSS:" in text


def test_a_strategy_that_never_fired_is_no_change() -> None:
    same = ReplayStats(calls=4, input_tokens=1000, peak_context_tokens=400, cost=200.0)
    text = replay_text(settings("llm-summary"), [FileReplay("a.json", 9, BASE, (same,))])
    assert "llm-summary: no change: the conversation never reached the trigger" in text
    assert "(100.0% of no compaction)" in text


def test_several_files_list_where_a_strategy_loses_even_when_the_total_saves() -> None:
    replays = [
        FileReplay("dir/a.json", 9, BASE, (stats(500, 100.0), stats(600, 120.0))),
        FileReplay("dir/b.json", 9, BASE, (stats(500, 300.0), stats(600, 180.0))),
    ]
    text = replay_text(settings("tool-result-hiding", "my.pkg:Custom"), replays)
    rows = [line for line in text.splitlines() if line.startswith(("a.json", "b.json"))]
    assert [row.rsplit("  ", 1)[-1] for row in rows] == ["saves", "saves", "LOSS (cost)", "saves"]
    assert "(percentages are of no compaction; LOSS: above 100%" in text
    assert "400 (100.0%)" in text  # the total cost of hiding: 100 + 300 against 400
    hiding = text[text.index("  tool-result-hiding:") :]
    assert hiding.splitlines()[1] == "    loses on 1 of 2 files: b.json (cost 150.0%)"
    assert "try: rewrite old results in batches" in hiding.splitlines()[2]
    # The custom strategy saves on both files: no advice for it.
    assert text.count("try:") == 1


def test_loss_is_what_shows_above_100_percent() -> None:
    assert not is_loss(1.0004)  # shown as 100.0%
    assert is_loss(1.0006)  # shown as 100.1%
    assert not is_loss(None)


@pytest.mark.parametrize(
    ("label", "expected"),
    [
        ("tool-result-hiding", "clear_at_least=4000"),
        ("ctxcompact.strategies:Schema1Masking", "batch_turns=5"),
        ("hiding-then-summary", "max_preserved_messages"),
        ("llm-summary", "smaller --reserved"),
        ("context-guard", "reserve_tokens"),
        ("tool-result-truncation", "max_chars"),
        ("other.pkg:Mine", "batching parameters"),
    ],
)
def test_advice_names_a_setting_of_that_strategy(label: str, expected: str) -> None:
    assert expected in advice(label, 12_000)


def test_a_real_losing_trace_gets_the_loss_and_the_advice(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Schema 1 moving its boundary at every turn (its default before issue 21) costs more
    # than no compaction on this mini-swe-agent trace.
    trace = TRACES_DIR / "msa-gemini3pro__astropy__astropy-12907.json"
    every_turn = ["--strategy", "schema1-masking", "--param", "batch_turns=0"]
    assert main(["replay", str(trace), *every_turn, "--no-progress"]) == 0
    text = capsys.readouterr().out
    cost = re.search(r"cost, cache-adjusted .*\((\d+\.\d)% of no compaction, LOSS\)", text)
    assert cost, text
    assert float(cost[1]) > 100
    assert "try: rewrite old results in batches" in text
    # And the advice holds: with it, the same trace costs less.
    assert main(["replay", str(trace), *every_turn, "--no-progress",
                 "--param", "clear_at_least=4000"]) == 0  # fmt: skip
    after = re.search(
        r"cost, cache-adjusted .*\((\d+\.\d)% of no compaction", capsys.readouterr().out
    )
    assert after
    assert float(after[1]) < float(cost[1])


# -- the plot ----------------------------------------------------------------------------------


def labels_of(ax: object) -> list[str]:
    return [line.get_label() for line in ax.get_lines()]  # type: ignore[attr-defined]


def test_the_plot_has_window_trigger_markers_settings_and_integer_calls() -> None:
    long_name = "/traces/" + "a-very-long-trace-name-" * 4 + ".json"
    replay = FileReplay(long_name, 9, ReplayStats(calls=4, context_tokens=[100, 200, 300, 400]),
                        (stats(500, 100.0),))  # fmt: skip
    fig = draw_replays(settings("tool-result-hiding"), [replay])
    try:
        ax = fig.axes[0]
        assert "tool-result-hiding" in fig._suptitle.get_text()
        assert "window 16,000 tokens" in fig._suptitle.get_text()
        assert "/traces/" + ax.get_title().replace("\n", "") == long_name  # wrapped, not cut
        assert "\n" in ax.get_title()
        horizontal = {line.get_label(): line.get_ydata()[0] for line in ax.get_lines()
                      if line.get_label() in ("window", "trigger")}  # fmt: skip
        assert horizontal == {"window": 16_000, "trigger": 12_000}
        assert "tool-result-hiding: compaction" not in labels_of(ax)  # none recorded
        assert all(float(t).is_integer() for t in ax.get_xticks())
        assert len(fig.axes) == 1  # no per-call costs recorded: no cost panel
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_recorded_compactions_failures_and_costs_are_drawn() -> None:
    recorded = ReplayStats(
        calls=4, compactions=1, context_tokens=[100, 200, 150, 250], compaction_calls=[3],
        failed_calls=[2], call_costs=[10.0, 20.0, 150.0, 30.0], cache_break_calls=[3],
    )  # fmt: skip
    base = ReplayStats(calls=4, context_tokens=[100, 200, 300, 400], call_costs=[10, 20, 30, 40])
    fig = draw_replays(settings("tool-result-hiding"), [FileReplay("a.json", 9, base, (recorded,))])
    try:
        context, cost = fig.axes
        assert {"tool-result-hiding: compaction", "tool-result-hiding: compaction failed"} <= set(
            labels_of(context)
        )
        assert "tool-result-hiding: cache break" in labels_of(cost)
        assert cost.get_ylabel().startswith("cost per call")
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_plot_replays_writes_a_png(tmp_path: Path) -> None:
    from ctxcompact.cli._report import plot_replays

    out = tmp_path / "r.png"
    plot_replays(settings("x"), [FileReplay("a.json", 9, BASE, (stats(500, 100.0),))], str(out))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_verdict_says_when_every_compaction_failed_rather_than_never_triggered(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ctxcompact.cli._report import ReplaySettings, replay_text
    from ctxcompact.replay import FileReplay, ReplayStats

    baseline = ReplayStats(calls=3, cost=30.0, input_tokens=300, peak_context_tokens=900)
    failing = ReplayStats(calls=3, cost=30.0, input_tokens=300, failed_compactions=2)
    settings = ReplaySettings(("llm-summary",), 1000, 200, 0.1, "heuristic")
    text = replay_text(settings, [FileReplay("a.json", 6, baseline, (failing,))])
    assert "all 2 compaction attempts failed" in text
    assert "never reached the trigger" not in text
