"""``ctxcompact replay`` and ``validate`` take a folder of conversations, and leave out the
``.meta.json`` files that describe recorded traces (the command printed at the top of
``examples/recommended.toml``, with a shell glob, used to stop on them)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "tests" / "data" / "traces"
TWO = ("taubench-gpt4o-airline__task11_trial0", "taubench-gpt4o-airline__task20_trial1")


def ctxcompact(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ctxcompact", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )


def traces_folder(tmp_path: Path) -> Path:
    """Two public traces with their sidecars, as tests/data/traces holds them, plus a README."""
    folder = tmp_path / "traces"
    folder.mkdir()
    for name in TWO:
        shutil.copy(TRACES / f"{name}.json", folder)
        shutil.copy(TRACES / f"{name}.meta.json", folder)
    (folder / "README.md").write_text("not a conversation\n", encoding="utf-8")
    (folder / "nested").mkdir()  # sub-folders are not read
    shutil.copy(TRACES / "taubench-gpt4o-airline__task3_trial0.json", folder / "nested")
    return folder


def replayed_files(result: subprocess.CompletedProcess[str]) -> list[str]:
    assert result.returncode == 0, result.stderr
    return [Path(f["file"]).name for f in json.loads(result.stdout)["files"]]


def test_replay_reads_the_conversations_of_a_folder_and_leaves_the_sidecars_out(
    tmp_path: Path,
) -> None:
    result = ctxcompact("replay", traces_folder(tmp_path), "--json", "--no-progress")
    assert replayed_files(result) == [f"{name}.json" for name in TWO]  # sorted, nested left out
    assert "left out 2 .meta.json file(s)" in result.stderr


def test_a_glob_that_names_the_sidecars_replays_the_same_files(tmp_path: Path) -> None:
    folder = traces_folder(tmp_path)
    named = sorted(str(p) for p in folder.glob("*.json"))  # what the shell makes of *.json
    assert sum(p.endswith(".meta.json") for p in named) == 2
    by_glob = ctxcompact("replay", *named, "--json", "--no-progress")
    by_folder = ctxcompact("replay", folder, "--json", "--no-progress")
    assert replayed_files(by_glob) == replayed_files(by_folder)
    assert json.loads(by_glob.stdout)["total"] == json.loads(by_folder.stdout)["total"]


def test_the_recommended_configurations_own_command_runs_on_the_traces_folder() -> None:
    head = (ROOT / "examples" / "recommended.toml").read_text(encoding="utf-8")
    assert "ctxcompact replay --config examples/recommended.toml tests/data/traces/" in head
    result = ctxcompact(
        "replay", "--config", "examples/recommended.toml", TRACES, "--json", "--no-progress"
    )
    files = replayed_files(result)
    assert len(files) == 17
    assert not any(name.endswith(".meta.json") for name in files)


def test_only_sidecars_or_an_empty_folder_is_a_usage_error(tmp_path: Path) -> None:
    only = ctxcompact("replay", TRACES / f"{TWO[0]}.meta.json")
    assert only.returncode == 2
    assert "only .meta.json files" in only.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / f"{TWO[0]}.meta.json").write_text("{}", encoding="utf-8")
    result = ctxcompact("replay", empty)
    assert result.returncode == 2
    assert "a folder with no conversation file" in result.stderr


def test_a_file_that_is_not_a_conversation_is_still_reported(tmp_path: Path) -> None:
    wrong = tmp_path / "notes.json"
    wrong.write_text('{"hello": 1}', encoding="utf-8")
    result = ctxcompact("replay", wrong)
    assert result.returncode == 2
    assert "notes.json" in result.stderr


def test_validate_takes_a_folder_too(tmp_path: Path) -> None:
    result = ctxcompact("validate", traces_folder(tmp_path), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert [Path(f["file"]).name for f in report["files"]] == [f"{name}.json" for name in TWO]
    assert report["valid"] is True
