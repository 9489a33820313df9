"""read_conversation: every format detected, Claude Code session logs, errors naming the place.

The Claude Code logs in tests/data/claude_code are real (marot/spotter, MIT); the cases that
need a particular shape (sidechains, a compaction, out-of-order results) are built here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ctxcompact import (
    Message,
    RawPart,
    check_history,
    from_openai,
    load_conversation,
    parse_conversation,
    read_conversation,
    to_openai,
)
from ctxcompact.cli import main
from ctxcompact.exceptions import ConversationFileError
from tests.helpers.traces import TRACES_DIR, load_trace

DATA = Path(__file__).resolve().parent / "data" / "claude_code"
MAIN_LOG = DATA / "tool_heavy.jsonl"
SUBAGENT_LOG = DATA / "subagent-aa84377.jsonl"
SUBAGENT_TRACE = "claudecode-subagent__fa812bfe__aa84377"


def lines_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


def jsonl(entries: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(e) + "\n" for e in entries)


def cc(kind: str, content: object, *, msg_id: str | None = None, **extra: Any) -> dict[str, Any]:
    """One Claude Code log line of ``kind`` user or assistant."""
    message: dict[str, Any] = {"role": kind, "content": content}
    if msg_id is not None:
        message["id"] = msg_id
    return {
        "type": kind,
        "uuid": f"u{id(message)}",
        "isSidechain": False,
        "message": message,
        **extra,
    }


def use(call_id: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": "Bash", "input": {"command": "ls"}}


def result(call_id: str, text: str = "ok") -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": text}


def assert_paired(history: list[Message]) -> None:
    """Every assistant's calls are answered right after it, in the order of the calls."""
    assert check_history(history) == []
    for i, message in enumerate(history):
        if message.tool_calls:
            n = len(message.tool_calls)
            answers = history[i + 1 : i + 1 + n]
            assert [m.role for m in answers] == ["tool"] * n
            assert [m.tool_call_id for m in answers] == [c.id for c in message.tool_calls]


# -- real Claude Code logs ---------------------------------------------------------------------


def test_a_real_claude_code_log_reads_into_a_valid_history_of_its_main_thread() -> None:
    raw = lines_of(MAIN_LOG)
    conversation = load_conversation(MAIN_LOG)
    history = conversation.messages
    assert conversation.format == "claude-code"
    assert_paired(history)
    # One assistant message per API response: streamed lines sharing an id are merged.
    ids = {e["message"]["id"] for e in raw if e["type"] == "assistant"}
    assert (
        len([m for m in history if m.role == "assistant"])
        == len(ids)
        < sum(e["type"] == "assistant" for e in raw)
    )
    # Every tool_use and tool_result of the log is there, each exactly once.
    blocks = [b for e in raw if e["type"] == "assistant" for b in e["message"]["content"]]
    uses = [b["id"] for b in blocks if b["type"] == "tool_use"]
    assert sorted(c.id for m in history for c in m.tool_calls or ()) == sorted(uses)
    assert len([m for m in history if m.role == "tool"]) == len(uses)
    assert any(len(m.tool_calls or ()) == 2 for m in history)  # parallel calls
    # Thinking blocks are kept verbatim; no progress or snapshot line became a message.
    parts = [p for m in history if isinstance(m.content, tuple) for p in m.content]
    assert any(isinstance(p, RawPart) and p.type == "thinking" for p in parts)

    def is_result(entry: dict[str, Any]) -> bool:
        content = entry["message"]["content"]
        return isinstance(content, list) and any(b["type"] == "tool_result" for b in content)

    typed = [e for e in raw if e["type"] == "user" and not is_result(e)]
    assert any(e.get("isMeta") for e in typed)  # meta lines are sent to the model: kept
    assert len([m for m in history if m.role == "user"]) == len(typed)
    assert read_conversation(MAIN_LOG) == history


def test_a_subagent_log_reads_as_the_independently_converted_trace() -> None:
    # Every line of a subagent's own log is a sidechain: it is read whole, and matches the
    # trace converted from the same file by the traces' own converter (ids, order, results).
    assert all(e["isSidechain"] for e in lines_of(SUBAGENT_LOG))
    history = read_conversation(SUBAGENT_LOG)
    trace = from_openai(load_trace(SUBAGENT_TRACE))
    assert_paired(history)

    def shape(h: list[Message]) -> list[tuple[str, list[str], str | None]]:
        return [(m.role, [c.id for c in m.tool_calls or ()], m.tool_call_id) for m in h]

    assert shape(history) == shape(trace)
    tools = [(a.text, b.text) for a, b in zip(history, trace, strict=True) if a.role == "tool"]
    assert len(tools) == 21
    assert all(a == b for a, b in tools)
    calls = [(c.name, json.loads(c.arguments)) for m in history for c in m.tool_calls or ()]
    assert calls == [(c.name, json.loads(c.arguments)) for m in trace for c in m.tool_calls or ()]


def test_sidechain_lines_inside_a_main_log_are_left_out() -> None:
    main_lines = lines_of(MAIN_LOG)
    sidechain = lines_of(SUBAGENT_LOG)
    mixed = main_lines[:5] + sidechain + main_lines[5:]
    assert parse_conversation("mixed.jsonl", jsonl(mixed)).messages == read_conversation(MAIN_LOG)


def test_the_cli_validates_replays_and_applies_a_claude_code_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", str(MAIN_LOG), str(SUBAGENT_LOG)]) == 0
    capsys.readouterr()
    assert main(["replay", str(SUBAGENT_LOG), "--no-progress", "--max-context-size", "20000"]) == 0
    assert "no compaction" in capsys.readouterr().out
    out = tmp_path / "out.json"
    args = ["apply", str(SUBAGENT_LOG), "--strategy", "tool-result-hiding", "-o", str(out)]
    assert main(args) == 0
    # Written as the Anthropic Messages it holds; read back, it is the compacted history.
    written = read_conversation(out)
    assert load_conversation(out).format == "anthropic"
    original = read_conversation(SUBAGENT_LOG)
    assert_paired(written)
    assert [m.role for m in written] == [m.role for m in original]
    assert sum(m.text == "[old tool result hidden]" for m in written) > 0


# -- Claude Code shapes built here --------------------------------------------------------------


def test_streamed_chunks_merge_and_interleaved_results_follow_in_call_order() -> None:
    entries = [
        cc("user", "go"),
        cc("assistant", [{"type": "text", "text": "two calls"}], msg_id="m1"),
        cc("assistant", [use("a")], msg_id="m1"),
        cc("assistant", [use("b")], msg_id="m1"),
        cc("user", [result("b", "B")]),  # b answered first, between the chunks
        cc("assistant", [use("c")], msg_id="m1"),
        cc("user", [result("c", "C")]),
        cc("user", [result("a", "A"), {"type": "text", "text": "[Request interrupted]"}]),
        cc("assistant", [{"type": "text", "text": "done"}], msg_id="m2"),
    ]
    history = parse_conversation("s.jsonl", jsonl(entries)).messages
    assert [m.role for m in history] == [
        "user",
        "assistant",
        "tool",
        "tool",
        "tool",
        "user",
        "assistant",
    ]
    assert [c.id for c in history[1].tool_calls or ()] == ["a", "b", "c"]
    assert [m.text for m in history[2:5]] == ["A", "B", "C"]
    assert history[5].text == "[Request interrupted]"
    assert_paired(history)


def test_a_compaction_summary_stays_in_place_and_non_message_lines_are_skipped() -> None:
    summary = "This session is being continued from a previous conversation. Summary: ..."
    entries = [
        {"type": "summary", "summary": "Session title", "leafUuid": "x"},
        cc("user", "first task"),
        cc("assistant", [{"type": "text", "text": "did it"}], msg_id="m1"),
        {"type": "system", "subtype": "compact_boundary", "parentUuid": None},
        cc("user", summary, isCompactSummary=True, isVisibleInTranscriptOnly=True),
        {"type": "progress", "data": {"type": "hook_progress"}},
        cc("assistant", [{"type": "text", "text": "API Error: 500"}], isApiErrorMessage=True),
        cc("user", "next task"),
    ]
    history = parse_conversation("c.jsonl", jsonl(entries)).messages
    assert [(m.role, m.text) for m in history] == [
        ("user", "first task"),
        ("assistant", "did it"),
        ("user", summary),
        ("user", "next task"),
    ]


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        (
            [cc("user", "go"), cc("user", [result("zz")])],
            r"line 2: a tool_result with no assistant",
        ),
        (
            [cc("assistant", [use("a")], msg_id="m"), cc("user", [result("b")])],
            r"line 2: tool_result for 'b' answers no tool_use of the assistant message on line 1",
        ),
        (
            [cc("user", "go"), {"type": "assistant", "uuid": "x"}],
            r"line 2: a line of type 'assistant' needs a 'message' object",
        ),
        ([cc("user", "go"), ["not", "an", "object"]], r"line 2: expected a JSON object"),
        (
            [cc("user", "go"), cc("assistant", [{"type": "tool_use", "id": "a"}], msg_id="m")],
            r"line 2: field 'message.content\[0\].name'",
        ),
    ],
)
def test_claude_code_errors_name_the_file_and_line(entries: list[Any], expected: str) -> None:
    text = "".join(json.dumps(e) + "\n" for e in entries)
    with pytest.raises(ConversationFileError, match=expected) as info:
        parse_conversation("log.jsonl", text)
    assert str(info.value).startswith("log.jsonl: ")


def test_a_broken_line_of_a_claude_code_log_names_line_and_column() -> None:
    text = jsonl([cc("user", "go")]) + '{"type": "assistant", "message": {"role": \n'
    with pytest.raises(ConversationFileError, match=r"^log.jsonl: line 2, column 43: invalid"):
        parse_conversation("log.jsonl", text)
    with pytest.raises(ConversationFileError) as info:
        parse_conversation("log.jsonl", text)
    assert (info.value.line, info.value.column) == (2, 43)


# -- the other formats, through the library function ---------------------------------------------


def test_every_format_is_detected_from_the_content(tmp_path: Path) -> None:
    raw = load_trace("taubench-gpt4o-airline__task3_trial0")
    expected = from_openai(raw)
    cases = {
        "list.json": json.dumps(raw),
        "body.json": json.dumps({"model": "m", "messages": raw}),
        "lines.jsonl": "".join(json.dumps(m) + "\n" for m in raw),
    }
    for name, text in cases.items():
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        assert to_openai(read_conversation(path)) == to_openai(expected), name
    anthropic = {"system": "s", "messages": [{"role": "user", "content": "hi"}]}
    (tmp_path / "a.json").write_text(json.dumps(anthropic), encoding="utf-8")
    assert load_conversation(tmp_path / "a.json").format == "anthropic"
    assert [m.role for m in read_conversation(tmp_path / "a.json")] == ["system", "user"]
    single = tmp_path / "one.jsonl"
    single.write_text(json.dumps(cc("user", "hi")) + "\n", encoding="utf-8")
    assert load_conversation(single).format == "claude-code"
    assert [(m.role, m.text) for m in read_conversation(single)] == [("user", "hi")]
    assert (TRACES_DIR / "README.md").is_file()  # the data the suite needs is in the checkout


def test_a_bad_file_is_a_conversation_file_error_or_an_os_error(tmp_path: Path) -> None:
    binary = tmp_path / "b.json"
    binary.write_bytes(b"\xff\xfe[")
    with pytest.raises(ConversationFileError, match=r"b.json: not UTF-8"):
        read_conversation(binary)
    with pytest.raises(FileNotFoundError):
        read_conversation(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('[{"role": "user", "content": "a"},\n {"role": "user", "content": }]')
    with pytest.raises(ConversationFileError) as info:
        read_conversation(bad)
    assert (info.value.line, info.value.column, info.value.index) == (2, 30, None)
    assert "message" not in str(info.value)
