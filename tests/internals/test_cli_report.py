"""The replay report says what its percentages are of, marks losses and says what to try.

White-box: the report's private text and plot builders (``cli._report``, ``cli._plot``) are
fed hand-made replay figures, which no recorded conversation would give one at a time.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from ctxcompact.cli import main
from ctxcompact.cli._plot import draw_replays
from ctxcompact.cli._report import (
    ReplaySettings,
    advice,
    is_loss,
    replay_text,
    window_advice,
)
from ctxcompact.cli._setup import parse_params
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


def test_advice_follows_the_strategy_not_its_config_file_s_name() -> None:
    from ctxcompact.cli._report import advice

    # The label names the file when two configs run one strategy; "summary" in that name
    # must not bring the summaries' advice to the guard.
    assert advice("context-guard (summary-a.toml)", 12_000) == advice("context-guard", 12_000)
    assert "max_preserved_messages" not in advice("context-guard (summary-a.toml)", 12_000)


def test_a_total_that_never_fired_speaks_of_every_conversation() -> None:
    same = ReplayStats(calls=4, input_tokens=1000, peak_context_tokens=400, cost=200.0)
    files = [FileReplay(f"{k}.json", 9, BASE, (same,)) for k in range(3)]
    text = replay_text(settings("llm-summary"), files)
    assert "llm-summary: no change: none of the 3 conversations reached the trigger" in text
    assert "the conversation never reached" not in text


def test_one_cache_break_is_singular_and_nothing_removed_has_no_rate() -> None:
    text = replay_text(
        settings("schema1-masking"), [FileReplay("a.json", 9, BASE, (stats(1100, 250.0),))]
    )
    assert "1 cache break against 0" in text
    assert "removed then referenced" in text
    assert "0 of 0" not in text  # nothing removed: "-", not a rate of nothing


def test_a_trigger_that_fired_is_never_reported_as_not_reached() -> None:
    # The strategy ran three times and changed nothing (its runs were no-ops).
    same = ReplayStats(calls=4, triggers=3, input_tokens=1000, peak_context_tokens=400, cost=200.0)
    text = replay_text(settings("context-guard"), [FileReplay("a.json", 9, BASE, (same,))])
    assert "never reached the trigger" not in text
    assert "context-guard: no change: the trigger fired 3 times and the strategy found " in text


def over(calls_over_window: int, cost: float) -> ReplayStats:
    return ReplayStats(
        calls=10,
        compactions=2,
        input_tokens=500,
        peak_context_tokens=300,
        cost=cost,
        calls_over_window=calls_over_window,
        context_tokens=[1] * 10,
    )


def test_the_verdict_ranks_the_window_first_and_the_cost_second() -> None:
    base = ReplayStats(calls=10, input_tokens=1000, peak_context_tokens=400, cost=200.0,
                       calls_over_window=6, context_tokens=[1] * 10)  # fmt: skip
    runs = (over(4, 100.0), over(0, 230.0), over(0, 150.0), over(4, 90.0))
    labels = ("cheap-but-over", "fits-dear", "fits-cheaper", "cheapest-over")
    text = replay_text(settings(*labels), [FileReplay("a.json", 9, base, runs)])
    verdict = text[text.index("verdict") :].splitlines()
    assert verdict[0] == "verdict (calls over the window first, then the cache-adjusted cost):"
    assert verdict[1].startswith("  no compaction could not have run: 6 of 10 calls are over")
    ranked = [line.split(":")[0].strip() for line in verdict if line.startswith("  ") and
              line.strip()[:2] in ("1.", "2.", "3.", "4.")]  # fmt: skip
    assert ranked == ["1. fits-cheaper", "2. fits-dear", "3. cheapest-over", "4. cheap-but-over"]
    assert "cheapest-over: does not keep the window: 4 of 10 calls still over the window" in text
    # "Saves" is never said of a run over the window, nor LOSS of one against this baseline.
    assert "saves" not in "\n".join(verdict)
    assert "LOSS" not in text.replace("LOSS: above 100%", "")
    assert (
        "fits-dear: keeps the window (every one of its 10 calls fits the window); cost 115.0%"
        in text
    )
    assert "(above a baseline that could not run)" in text


def test_two_runs_of_one_strategy_get_distinct_labels(capsys: pytest.CaptureFixture[str]) -> None:
    trace = TRACES_DIR / "msa-gemini3pro__astropy__astropy-8872.json"
    assert main(["replay", str(trace), "--strategy", "tool-result-hiding", "--strategy",
                 "tool-result-hiding", "--param", "preserve_recent_n=3", "--strategy",
                 "schema1-masking", "--json", "--no-progress"]) == 0  # fmt: skip
    import json

    labels = json.loads(capsys.readouterr().out)["settings"]["strategies"]
    assert labels == [
        "tool-result-hiding",
        "tool-result-hiding (preserve_recent_n=3)",
        "schema1-masking",
    ]


def test_advice_does_not_repeat_a_setting_already_given() -> None:
    fresh = advice("tool-result-hiding", 12_000)
    assert "--param clear_at_least=4000" in fresh
    assert "--param batch_turns=5" in fresh
    given = advice("tool-result-hiding", 12_000, {"clear_at_least": 4000})
    assert "clear_at_least" not in given
    assert "--param batch_turns=5" in given
    other = advice("tool-result-hiding", 12_000, {"clear_at_least": 500})
    assert "--param clear_at_least=4000 (only once that many tokens are freed) (this run: " in other
    both = advice("tool-result-hiding", 12_000, {"clear_at_least": 4000, "batch_turns": 5})
    assert "--param" not in both
    assert "already given (clear_at_least=4000, batch_turns=5)" in both


def test_the_summarizer_timing_says_what_was_awaited_and_what_ran_in_the_background() -> None:
    summarized = ReplayStats(
        calls=4, compactions=2, input_tokens=500, peak_context_tokens=300, cost=120.0,
        summarizer_calls=3, summarizer_background_calls=2, summarizer_background_s=12.5,
        summarizer_hot_calls=1, summarizer_hot_s=4.0, hot_calls_after_first=0, ahead_used=1,
        context_tokens=[1, 2, 3, 4],
    )  # fmt: skip
    text = replay_text(settings("llm-summary"), [FileReplay("a.json", 9, BASE, (summarized,))])
    assert (
        "    summarizer: 2 call(s) in the background (12.5 s); the hot path waited 4.0 s (1 "
        "call(s)), 0.0 s after the first compaction (0 call(s)); summaries made ahead used by 1 "
        "compaction(s), left unused by 0"
    ) in text
    rows = {line[:24].strip(): line[24:].split() for line in text.splitlines()}
    assert rows["summarizer hot wait"] == ["-", "4.0", "s"]
    assert rows["after 1st compaction"] == ["-", "0.0", "s"]
    assert rows["summarizer background"] == ["-", "12.5", "s"]


def test_the_hot_path_wait_counts_the_wait_for_a_summary_made_ahead() -> None:
    waited = ReplayStats(
        calls=4, compactions=2, input_tokens=500, peak_context_tokens=300, cost=120.0,
        summarizer_calls=2, summarizer_background_calls=2, summarizer_background_s=30.0,
        summarizer_waited_s=2.5, hot_s_after_first=2.5, ahead_used=2,
        context_tokens=[1, 2, 3, 4],
    )  # fmt: skip
    text = replay_text(settings("llm-summary"), [FileReplay("a.json", 9, BASE, (waited,))])
    assert "the hot path waited 2.5 s (0 call(s)), 2.5 s after the first compaction" in text
    assert "2.5 s of it for a summary made ahead" in text


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
    # Both keep the window: ranked by cost, the custom strategy (300) before hiding (400).
    assert "  1. my.pkg:Custom: saves" in text
    hiding = text[text.index("  2. tool-result-hiding:") :]
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


def test_a_real_trace_over_the_window_gets_the_window_verdict_and_advice_that_holds(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Schema 1 moving its boundary at every turn (its default before issue 21) costs more
    # than no compaction on this mini-swe-agent trace, but no compaction could not have run
    # (12 of 20 calls over the window): the window decides, not a LOSS against a run that
    # would have failed.
    trace = TRACES_DIR / "msa-gemini3pro__astropy__astropy-12907.json"
    every_turn = ["--strategy", "schema1-masking", "--param", "batch_turns=0"]
    assert main(["replay", str(trace), *every_turn, "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "no compaction could not have run: 12 of 20 calls are over the window" in text
    # (7, not 8: a rewrite that fits a history over the window is never refused as optional)
    assert "schema1-masking: does not keep the window: 7 of 20 calls still over the window" in text
    assert "LOSS" not in text.split("verdict")[1]
    assert not re.search(r"\(\d+\.\d% of no compaction, LOSS\)", text)
    # The suggested step keeps the run's own params.
    step = '{strategy = "schema1-masking", params = {batch_turns = 0}}'
    advised = f'steps = [{step}, "context-guard"]'
    assert "try: end it with the guard" in text
    assert advised in text
    # And the advice holds: with it, every call of the same trace fits.
    config = tmp_path / "guarded.toml"
    config.write_text(f'[compaction]\nstrategy = "pipeline"\n[compaction.params]\n{advised}\n')
    assert main(["replay", str(trace), "--config", str(config), "--no-progress"]) == 0
    assert "pipeline: keeps the window (every one of its 20 calls fits" in capsys.readouterr().out
    # And its command-line form, as written, does the same.
    flags = f"--strategy pipeline --param 'steps=[{step}, \"context-guard\"]'"
    assert flags in text
    assert main(["replay", str(trace), *shlex.split(flags), "--no-progress"]) == 0
    assert "pipeline: keeps the window (every one of its 20 calls fits" in capsys.readouterr().out


def test_the_window_advice_keeps_the_run_s_params_in_a_form_that_reads_back() -> None:
    given = {
        "placeholder_template": 'it\'s [{tool_name}: "old"] \\ é',
        "window_turns": 4,
        "share": 0.0625,
        "tools": ["Write", "Edit"],
        "summary": {"max_chars": 2_000, "at trigger": False},
        "--reserved": 8_000,  # a flag, not a parameter
    }
    text = window_advice("schema1-masking (window_turns=4)", given)
    params = {k: v for k, v in given.items() if not k.startswith("--")}
    expected = [{"strategy": "schema1-masking", "params": params}, "context-guard"]
    # The command-line form, split as a shell would and parsed as --param is.
    flags = text.split("which fits every request it runs on: ", 1)[1].split(", or in a", 1)[0]
    words = shlex.split(flags)
    assert words[:3] == ["--strategy", "pipeline", "--param"]
    assert parse_params(words[3:4]) == {"steps": expected}
    # The config-file form, read by tomllib.
    toml = "[compaction.params]\n" + text.split("[compaction.params] ", 1)[1]
    assert tomllib.loads(toml)["compaction"]["params"]["steps"] == expected
    # Without params the step is the name alone; a value TOML cannot write is left to fill in.
    assert 'steps = ["schema1-masking", "context-guard"]' in window_advice("schema1-masking")
    assert "params = {...its params}" in window_advice("schema1-masking", {"x": None})


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


SHORT = ("tool-result-hiding", "schema1-masking (window_turns=4)", "context-guard")
LONG = (  # the labels of repeated strategies carry their parameters
    "tool-result-hiding (preserve_recent_n=2)",
    "tool-result-hiding (preserve_recent_n=8)",
    'pipeline (steps=["tool-result-truncation", "tool-result-hiding", "context-guard"])',
)


@pytest.mark.parametrize(
    ("labels", "files"),
    [(SHORT[:1], 4), (SHORT, 4), (SHORT, 1), (LONG, 1), (LONG, 2), (LONG, 4)],
)
def test_the_titles_and_the_legend_never_overlap_a_panel_and_fit_the_figure(
    labels: tuple[str, ...], files: int
) -> None:
    runs = len(labels)
    recorded = ReplayStats(
        calls=4, compactions=1, context_tokens=[100, 200, 150, 250], compaction_calls=[3],
        failed_calls=[2], call_costs=[10.0, 20.0, 150.0, 30.0], cache_break_calls=[3],
    )  # fmt: skip
    base = ReplayStats(calls=4, context_tokens=[100, 200, 300, 400], call_costs=[10, 20, 30, 40])
    name = "/traces/" + "a-long-trace-name-" * 3 + ".json"
    replays = [FileReplay(f"{name}{k}", 9, base, (recorded,) * runs) for k in range(files)]
    fig = draw_replays(settings(*labels), replays)
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        whole = fig.bbox
        title = fig._suptitle.get_window_extent(renderer)
        (legend,) = fig.legends
        legend_box = legend.get_window_extent(renderer)
        visible = [ax for ax in fig.axes if ax.get_visible()]
        assert all(ax.get_legend() is None for ax in visible)  # one legend, for the figure
        texts = [t.get_text() for t in legend.get_texts()]  # a long one wrapped, never cut
        assert [t.replace("\n", " ") for t in texts[: runs + 1]] == ["no compaction", *labels]
        # Each entry keeps its line sample (the colour that says which curve is which).
        assert len(legend.legend_handles) == len(texts)
        for handle in legend.legend_handles:
            box = handle.get_window_extent(renderer)
            assert whole.x0 <= box.x0
            assert box.x1 <= whole.x1
        for box in (title, legend_box):  # inside the figure: nothing cut
            assert whole.x0 <= box.x0
            assert box.x1 <= whole.x1
            assert whole.y0 <= box.y0
            assert box.y1 <= whole.y1
        for ax in visible:
            panel = ax.get_tightbbox(renderer)  # the panel with its labels and its title
            assert not panel.overlaps(title), ax.get_title()
            assert not panel.overlaps(legend_box), ax.get_title()
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)
