"""Input detection, precise errors and writing back in the input's format (in process).

White-box: the command's private file helpers (``cli._io``), its ``--param`` parser and its
count of masked results are called directly; the command line itself is tested through
``ctxcompact.cli.main`` in ``tests/test_cli*.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctxcompact import check_history, to_openai
from ctxcompact.cli._io import (
    CliError,
    load_demo,
    parse_conversation,
    read_conversation,
    write_conversation,
)
from ctxcompact.cli._setup import parse_params
from ctxcompact.exceptions import UserError
from tests.helpers.traces import load_trace, trace_paths

TAU = "taubench-gpt4o-airline__task3_trial0"

ANTHROPIC_BODY = {
    "model": "claude-x",
    "max_tokens": 100,
    "system": "be brief",
    "messages": [
        {"role": "user", "content": "list files"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "tu1", "name": "ls", "input": {}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "tu1", "content": "a.py"}],
        },
    ],
}


def test_a_json_list_is_openai_and_round_trips(tmp_path: Path) -> None:
    path = trace_paths()[0]
    conversation = read_conversation(path)
    assert conversation.format == "openai"
    assert to_openai(conversation.messages) == json.loads(path.read_text("utf-8"))


def test_json_lines_are_detected_and_written_back_as_lines(tmp_path: Path) -> None:
    raw = load_trace(TAU)
    src = tmp_path / "t.jsonl"
    src.write_text("\n".join(json.dumps(m) for m in raw) + "\n", encoding="utf-8")
    conversation = read_conversation(src)
    assert conversation.format == "jsonl"
    assert len(conversation.messages) == len(raw)
    out = tmp_path / "out.jsonl"
    write_conversation(conversation, conversation.messages, str(out))
    lines = out.read_text("utf-8").splitlines()
    assert [json.loads(line) for line in lines] == raw


def test_an_anthropic_body_is_detected_and_keeps_its_envelope(tmp_path: Path) -> None:
    conversation = parse_conversation("body.json", json.dumps(ANTHROPIC_BODY))
    assert conversation.format == "anthropic"
    assert [m.role for m in conversation.messages] == ["system", "user", "assistant", "tool"]
    assert check_history(conversation.messages) == []
    out = tmp_path / "out.json"
    write_conversation(conversation, conversation.messages, str(out))
    assert json.loads(out.read_text("utf-8")) == ANTHROPIC_BODY


def test_an_openai_request_body_is_openai() -> None:
    body = {"model": "gpt-x", "messages": load_trace(TAU)[:3]}
    conversation = parse_conversation("b.json", json.dumps(body))
    assert conversation.format == "openai"
    assert conversation.envelope is not None
    assert conversation.envelope["model"] == "gpt-x"


def test_format_can_be_forced() -> None:
    text = json.dumps([{"role": "user", "content": "hi"}])
    assert parse_conversation("x", text, fmt="anthropic").format == "anthropic"
    with pytest.raises(CliError, match=r"^x: line 1, column 3: invalid JSON"):
        parse_conversation("x", "[{", fmt="jsonl")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # JSON syntax errors name the line and column, never a message index.
        (
            '[{"role": "user", "content": "a"},\n {"role": "user", "content": }]',
            "line 2, column 30: ",
        ),
        ('[{"role": "user", "content": "a"} {"role": "user"}]', "line 1, column 35: invalid JSON"),
        ('{"role": "user", "content": "a"}\n{"role": "user", "content"\n', "line 2, column 27: "),
        ('{"messages": [\n{"role": "user",,}]}', "line 2, column 17: invalid JSON"),
        ("", "empty file"),
        ('{"model": "x"}', "expected a JSON list of messages"),
        ('"just a string"', "got a string"),
        ('{"messages": {"role": "user"}}', '"messages" must be a list'),
        ('[{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}]', "message 1"),
        ('[{"role": "user", "content": "a"}, 3]', "message 1"),
        # A JSON Lines record: its line and its message index.
        (
            '{"role": "user", "content": "a"}\n\n{"content": "b"}\n',
            "line 3: message 1, field 'role'",
        ),
    ],
)
def test_errors_name_the_file_and_the_message(text: str, expected: str) -> None:
    with pytest.raises(CliError, match=expected) as info:
        parse_conversation("conv.json", text)
    assert str(info.value).startswith("conv.json: ")


def test_unreadable_files_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(CliError, match="no such file"):
        read_conversation(tmp_path / "missing.json")
    with pytest.raises(CliError, match="is a directory"):
        read_conversation(tmp_path)
    binary = tmp_path / "b.json"
    binary.write_bytes(b"\xff\xfe[")
    with pytest.raises(CliError, match="not UTF-8"):
        read_conversation(binary)


def test_the_demo_is_a_valid_coding_session_with_errors_and_parallel_calls() -> None:
    demo = load_demo()
    messages = demo.messages
    assert 30 <= len(messages) <= 60
    assert check_history(messages) == []
    assert any(len(m.tool_calls or ()) > 1 for m in messages)  # parallel calls
    tool_texts = [m.text for m in messages if m.role == "tool"]
    assert any("Traceback" in t or t.startswith("Error:") for t in tool_texts)
    assert max(len(t) for t in tool_texts) > 5_000  # big tool outputs


def test_params_are_toml_or_json_literals_else_strings() -> None:
    params = parse_params(
        ["n=3", "ratio=0.5", "on=true", "names=['a', 'b']", 'obj={"k": 1}', "text=hello world"]
    )
    assert params == {
        "n": 3,
        "ratio": 0.5,
        "on": True,
        "names": ["a", "b"],
        "obj": {"k": 1},
        "text": "hello world",
    }
    with pytest.raises(CliError, match="key=value"):
        parse_params(["novalue"])


def test_a_bare_anthropic_list_gains_a_body_only_when_there_is_a_system_prompt(
    tmp_path: Path,
) -> None:
    from ctxcompact import Message

    conversation = parse_conversation(
        "l.json", json.dumps([{"role": "user", "content": "hi"}]), fmt="anthropic"
    )
    out = tmp_path / "out.json"
    write_conversation(conversation, conversation.messages, str(out))
    assert json.loads(out.read_text("utf-8")) == [{"role": "user", "content": "hi"}]
    write_conversation(conversation, [Message.system("rules"), *conversation.messages], str(out))
    assert json.loads(out.read_text("utf-8")) == {
        "system": "rules",
        "messages": [{"role": "user", "content": "hi"}],
    }


def test_masked_tool_results_counts_rewritten_results_not_dropped_ones() -> None:
    from ctxcompact import Message, ToolCall
    from ctxcompact.cli._commands import masked_tool_results

    def turn(i: int) -> list[Message]:
        # tau-bench style: every turn re-uses the id "c".
        call = ToolCall(id="c", name="ls", arguments="{}")
        return [Message.assistant(None, tool_calls=[call]), Message.tool("c", f"result {i}")]

    before = [Message.user("go"), *turn(0), *turn(1), *turn(2)]
    masked_last = before[6].replace(content="[masked]")
    # Turn 0 dropped, turn 1 kept as is, turn 2 masked: one masked result.
    after = [before[0], *before[3:5], before[5], masked_last]
    assert masked_tool_results(before, after) == 1
    assert masked_tool_results(before, before) == 0
    rewritten = [m.replace(content="x") if m.role == "tool" else m for m in before]
    assert masked_tool_results(before, rewritten) == 3


def test_config_mistakes_exit_2_naming_the_file_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ctxcompact.cli import main

    config = tmp_path / "bad.toml"
    config.write_text("[compaction]\nmax_context_sise = 1000\n", encoding="utf-8")
    assert main(["replay", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ctxcompact: error: ")
    assert str(config) in err
    assert "max_context_sise" in err
    config.write_text("[compaction]\nmax_context_size = 1000\nreserved_context_size = 10\n")
    assert main(["replay", "--config", str(config), "--reserved", "5000"]) == 2
    assert "--reserved (5,000) must be below --max-context-size (1,000)" in capsys.readouterr().err


def test_a_cli_error_is_a_user_error_with_the_file() -> None:
    with pytest.raises(CliError) as info:
        read_conversation("/no/such/file.json")
    assert isinstance(info.value, UserError)
    assert info.value.path == "/no/such/file.json"
    assert str(info.value) == "/no/such/file.json: no such file"
