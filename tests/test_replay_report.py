"""What ``ctxcompact replay`` reports beyond cost: calls over the window, results removed then
referenced (and recallable with recall on), and Responses-format inputs for every command.

Run in-process through :func:`ctxcompact.cli.main`; conversations are built from the small
message builders of ``tests.gen`` and the Codex rollout fixtures in ``tests/data/responses``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ctxcompact import check_history, from_responses, to_openai
from ctxcompact.cli import main
from tests.helpers.gen import assistant, call, tool, user
from tests.helpers.responses_items import DATA_DIR, load_rollout

ROLLOUT = DATA_DIR / "codex_golden.jsonl"
FILLER = "lorem ipsum dolor sit amet " * 40  # ~1,000 characters, no distinctive tokens


def quoting_conversation() -> list[Any]:
    """A task whose first result holds a path and an identifier the last answer quotes, with
    bulky results in between so that hiding removes the first one before that answer."""
    history = [
        user("fix the config bug"),
        assistant(None, call("c1", "read")),
        tool("c1", "the bug is in src/core/engine_main.py, function parse_config_value. " + FILLER),
    ]
    for k in range(2, 8):
        history += [assistant(None, call(f"c{k}", "read")), tool(f"c{k}", FILLER)]
    history.append(assistant("I will edit parse_config_value in src/core/engine_main.py."))
    return history


def write_openai(path: Path, history: list[Any]) -> Path:
    path.write_text(json.dumps(to_openai(history)), encoding="utf-8")
    return path


def replay_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["replay", "--json", "--no-progress", *args]) == 0
    return json.loads(capsys.readouterr().out)


HIDING = ["--strategy", "tool-result-hiding", "--param", "preserve_recent_n=1"]
SMALL_WINDOW = ["--max-context-size", "1500", "--reserved", "500"]


def test_calls_over_the_window_are_those_whose_input_plus_reserve_exceeds_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_openai(tmp_path / "a.json", quoting_conversation())
    doc = replay_json(capsys, str(path), *HIDING, *SMALL_WINDOW)
    per_file = doc["files"][0]
    budget = 1500 - 500
    baseline = per_file["baseline"]
    expected = sum(1 for tokens in baseline["context_tokens"] if tokens > budget)
    assert baseline["calls_over_window"] == expected > 0
    run = per_file["runs"][0]["compacted"]
    assert run["calls_over_window"] == sum(1 for t in run["context_tokens"] if t > budget)
    assert run["calls_over_window"] < baseline["calls_over_window"]
    assert doc["total"]["baseline"]["calls_over_window"] == expected


def test_the_text_report_has_a_row_for_calls_over_the_window(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_openai(tmp_path / "a.json", quoting_conversation())
    assert main(["replay", str(path), *HIDING, *SMALL_WINDOW]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = [line for line in out if line.startswith("  calls over the window")]
    assert len(rows) == 1


def test_a_hidden_result_the_last_answer_quotes_counts_as_removed_then_referenced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history = quoting_conversation()
    path = write_openai(tmp_path / "a.json", history)
    before = path.read_bytes()
    doc = replay_json(capsys, str(path), *HIDING, *SMALL_WINDOW)
    run = doc["files"][0]["runs"][0]["compacted"]
    assert run["removed_results"] >= 1
    assert run["removed_then_referenced"] == 1  # only c1 has distinctive tokens
    assert run["removed_then_referenced_rate"] == pytest.approx(1 / run["removed_results"], 1e-3)
    # The replay's default store (in memory, recall on): the quoted result comes back.
    assert run["recallable_results"] == 1
    assert run["lost_results"] == 0
    assert doc["files"][0]["baseline"]["removed_results"] == 0
    assert path.read_bytes() == before
    off = replay_json(capsys, str(path), *HIDING, *SMALL_WINDOW, "--no-store")
    assert off["files"][0]["runs"][0]["compacted"]["recallable_results"] == 0
    assert off["files"][0]["runs"][0]["compacted"]["lost_results"] == 1


def test_with_a_window_nothing_crosses_nothing_is_removed_or_referenced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_openai(tmp_path / "a.json", quoting_conversation())
    doc = replay_json(capsys, str(path), *HIDING, "--max-context-size", "100000")
    run = doc["files"][0]["runs"][0]["compacted"]
    assert (run["removed_results"], run["removed_then_referenced"]) == (0, 0)
    assert run["calls_over_window"] == 0


def test_with_recall_on_the_referenced_result_could_have_been_recalled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_openai(tmp_path / "a.json", quoting_conversation())
    config = tmp_path / "ctxcompact.toml"
    config.write_text(
        '[compaction]\nstrategy = "tool-result-hiding"\nmax_context_size = 1500\n'
        "reserved_context_size = 500\n[compaction.params]\npreserve_recent_n = 1\n"
        "[store]\nrecall = true\n",
        encoding="utf-8",
    )
    doc = replay_json(capsys, str(path), "--config", str(config))
    run = doc["files"][0]["runs"][0]["compacted"]
    assert run["removed_then_referenced"] == run["recallable_results"] == 1
    assert main(["replay", str(path), "--config", str(config)]) == 0
    assert "could be recalled" in capsys.readouterr().out


# -- Responses-format inputs -------------------------------------------------------------------


def test_every_command_reads_a_codex_rollout(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--json", str(ROLLOUT)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["files"][0]["format"] == "codex"
    assert report["files"][0]["messages"] == len(from_responses(load_rollout("codex_golden")))
    doc = replay_json(capsys, str(ROLLOUT))
    assert doc["files"][0]["baseline"]["calls"] >= 1


def test_apply_writes_a_codex_rollout_back_as_a_rollout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.jsonl"
    before = ROLLOUT.read_bytes()
    assert main(["apply", str(ROLLOUT), *HIDING[:2], "--param", "preserve_recent_n=0",
                 "-o", str(out)]) == 0  # fmt: skip
    capsys.readouterr()
    lines = [json.loads(line) for line in out.read_text("utf-8").splitlines()]
    source = [json.loads(line) for line in before.decode().splitlines()]
    assert lines[:2] == source[:2]  # the session header is kept
    items = [line["payload"] for line in lines[2:]]
    assert all(line["type"] == "response_item" for line in lines[2:])
    original = load_rollout("codex_golden")
    outputs = [i for i in items if i.get("type") == "function_call_output"]
    assert [o["call_id"] for o in outputs] == [
        i["call_id"] for i in original if i.get("type") == "function_call_output"
    ]
    assert any(o["output"] != "" and o not in original for o in outputs)  # hidden
    assert check_history(from_responses(items)) == []
    assert ROLLOUT.read_bytes() == before


def test_apply_writes_a_json_list_of_items_back_as_a_list(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "items.json"
    source.write_text(json.dumps(load_rollout("codex_with_compaction")), encoding="utf-8")
    out = tmp_path / "out.json"
    assert main(["apply", str(source), "--strategy", "tool-result-hiding", "--param",
                 "preserve_recent_n=0", "--json", "-o", str(out)]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["format"] == "responses"
    items = json.loads(out.read_text("utf-8"))
    assert isinstance(items, list)
    assert check_history(from_responses(items)) == []
    assert len(from_responses(items)) == len(from_responses(load_rollout("codex_with_compaction")))


def test_a_request_body_with_input_keeps_its_other_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "body.json"
    body = {"model": "gpt-5", "input": load_rollout("codex_golden"), "store": False}
    source.write_text(json.dumps(body), encoding="utf-8")
    out = tmp_path / "out.json"
    assert main(["apply", str(source), "--strategy", "tool-result-hiding", "-o", str(out)]) == 0
    capsys.readouterr()
    written = json.loads(out.read_text("utf-8"))
    assert (written["model"], written["store"]) == ("gpt-5", False)
    assert check_history(from_responses(written["input"])) == []


def test_json_lines_of_bare_items_are_written_back_as_bare_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    items = load_rollout("codex_golden")
    source = tmp_path / "items.jsonl"
    source.write_text("".join(json.dumps(i) + "\n" for i in items), encoding="utf-8")
    out = tmp_path / "out.jsonl"
    assert main(["apply", str(source), "--strategy", "tool-result-hiding", "-o", str(out)]) == 0
    capsys.readouterr()
    written = [json.loads(line) for line in out.read_text("utf-8").splitlines()]
    assert all(line.get("type") != "response_item" for line in written)
    assert check_history(from_responses(written)) == []


def test_a_rollout_line_without_a_payload_is_named_by_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = ROLLOUT.read_text("utf-8").splitlines()
    lines[3] = '{"type": "response_item", "timestamp": "2025-01-04T09:00:03.000Z"}'
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main(["validate", str(broken)]) == 2
    err = capsys.readouterr().err
    assert "line 4" in err
    assert "payload" in err
