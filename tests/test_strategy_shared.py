"""The shared helpers: the error heuristic (and its agreement with the traces' meta files),
placeholders, the fast copy and the batching of a boundary."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxcompact import Message, TextPart
from ctxcompact._groups import tool_groups
from ctxcompact.exceptions import ConfigError
from ctxcompact.strategies import _shared
from ctxcompact.strategies._shared import (
    SCHEMA1_FIELDS,
    SCHEMA1_PLACEHOLDER,
    batched_boundary,
    clear_error_cache,
    error_reason,
    group_results,
    is_error_result,
    looks_like_error,
    old_groups_end,
    placeholder_pattern,
    render_placeholder,
    validate_template,
    with_content,
)
from tests.gen import invalid_histories, tool, valid_histories
from tests.traces import load_meta, load_trace, trace_names


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("Traceback (most recent call last):\n  File 'a.py'\nKeyError: 'x'", "traceback"),
        ("Error: not enough seats", "error_line"),
        ("fatal: not a git repository", "error_line"),
        ("ERROR tests/test_x.py - ImportError", "error_word"),
        ("collected 3 items\nValueError: bad value", "exception_line"),
        ("java.lang.IllegalStateException: closed", "exception_line"),
        ("Exception: boom", "exception_line"),
        ("curl: (7) Connection refused", "connection_refused"),
        ("httpx.ConnectError connect_error", "connection_refused"),
        ("The last command <command>sleep 99</command> timed out and has been killed.", "timeout"),
        ("raise TimeoutError", "timeout"),
        ("Exit code 128\nno upstream branch", "exit_code"),
        ("<returncode>2</returncode>\n<output></output>", "exit_code"),
        ("<returncode>-9</returncode>", "exit_code"),
        ("<tool_use_error>File has not been read yet</tool_use_error>", "tool_use_error"),
        (json.dumps({"error": "not found", "code": 404}), "json_error"),
        (json.dumps({"status": "error", "message": "x"}), "json_error"),
        ('  {"error": {"type": "invalid_request"}}', "json_error"),
    ],
)
def test_error_patterns(text: str, reason: str) -> None:
    assert error_reason(text) == reason
    assert looks_like_error(text)


@pytest.mark.parametrize(
    "text",
    [
        "This function raises an exception when the timeout is reached.",
        "Error handling is described in docs/errors.md",
        "    raise ValueError('bad')",
        "src/app.py:12:        except KeyError:",
        "   12→class ParseError(Exception):",
        "<returncode>0</returncode>\n<output>ok</output>",
        "Exit code 0",
        json.dumps({"error": None, "result": [1, 2]}),
        json.dumps({"status": "ok", "errors": []}),
        json.dumps([{"error": "inside a list is data, not a failure"}]),
        "{not json but starts with a brace: error}",
        "set a timeout of 30 s; the connection was fine",
        "",
    ],
)
def test_prose_and_success_are_not_errors(text: str) -> None:
    assert error_reason(text) is None
    assert not looks_like_error(text)


def test_list_content_is_checked_by_its_text_parts() -> None:
    assert looks_like_error([{"type": "text", "text": "Error: nope"}])
    assert looks_like_error(
        (TextPart(text="x"), TextPart(text="Traceback (most recent call last)"))
    )
    assert not looks_like_error([{"type": "image_url", "image_url": {"url": "Error: x"}}])
    assert not looks_like_error(None)


def test_provider_flag_counts() -> None:
    assert is_error_result(tool("a", "all good", is_error=True))
    assert not is_error_result(tool("a", "all good"))


def test_heuristic_agrees_with_the_traces_meta_files() -> None:
    """Every tool result of every public trace, against the meta files' classification.

    The meta's reasons other than ``native_is_error`` come from the text (exit codes,
    tracebacks, ``Error:``, timeouts); ``native_is_error`` is Anthropic's flag, which the
    OpenAI-format traces do not carry, so those are counted apart.
    """
    agree = text_errors = predicted = native_only = total = 0
    for name in trace_names():
        messages = load_trace(name)
        flagged = {int(k): v for k, v in load_meta(name)["stats"]["error_tool_msg_indices"].items()}
        truth = {
            i for i, reasons in flagged.items() if any(r != "native_is_error" for r in reasons)
        }
        native_only += len(flagged) - len(truth)
        for i, message in enumerate(messages):
            if message["role"] != "tool":
                continue
            total += 1
            guess = looks_like_error(message["content"])
            predicted += guess
            text_errors += i in truth
            agree += guess == (i in truth)
    print(
        f"\nerror heuristic vs meta: {agree}/{total} tool results agree; "
        f"{text_errors} text-classified errors, {predicted} predicted; "
        f"{native_only} flagged only by Anthropic is_error (not in the OpenAI text)"
    )
    assert text_errors > 50
    assert agree / total >= 0.99


def test_cached_verdicts_equal_fresh_ones_on_every_trace_result() -> None:
    texts = [
        m["content"]
        for name in trace_names()
        for m in load_trace(name)
        if m["role"] == "tool" and isinstance(m["content"], str)
    ]
    clear_error_cache()
    fresh = [_shared._error_reason(t) for t in texts]
    assert [error_reason(t) for t in texts] == fresh  # first sight, filling the cache
    assert len(_shared._verdicts) == len(set(texts))
    # Equal strings that are other objects (a proxy parses every request anew) hit too.
    copies = [t.encode().decode() for t in texts]
    assert [error_reason(t) for t in copies] == fresh
    assert len(_shared._verdicts) == len(set(texts))
    assert sum(fresh_reason is not None for fresh_reason in fresh) > 50


def test_error_cache_is_bounded_and_keeps_recently_used_texts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clear_error_cache()
    monkeypatch.setattr(_shared, "_CACHE_MAX_ENTRIES", 4)
    monkeypatch.setattr(_shared, "_CACHE_MAX_CHARS", 1_000)
    texts = [f"Error: number {k}" for k in range(4)]
    for t in texts:
        assert error_reason(t) == "error_line"
    assert error_reason(texts[0]) == "error_line"  # now the most recently used
    error_reason("all good")  # a fifth entry evicts the least recently used: texts[1]
    assert list(_shared._verdicts) == [texts[2], texts[3], texts[0], "all good"]
    assert _shared._verdicts["all good"] is None
    # The character budget evicts as well, and a text over the whole budget is not kept.
    error_reason("x" * 995)
    assert list(_shared._verdicts) == ["x" * 995]
    assert error_reason("Traceback (most recent call last)" + "y" * 1_000) == "traceback"
    assert list(_shared._verdicts) == ["x" * 995]
    assert _shared._cached_chars == 995
    clear_error_cache()
    assert _shared._verdicts == {}
    assert _shared._cached_chars == 0


def test_templates() -> None:
    validate_template(SCHEMA1_PLACEHOLDER, SCHEMA1_FIELDS, key="t")
    validate_template("no fields {{literal}}", SCHEMA1_FIELDS, key="t")
    with pytest.raises(ConfigError, match="unknown field"):
        validate_template("{tool_call_id} {0}", SCHEMA1_FIELDS, key="t")
    text = render_placeholder(SCHEMA1_PLACEHOLDER, tool_call_id="c 1", tool_name="", chars=42)
    assert "outil=inconnu" in text
    assert placeholder_pattern(SCHEMA1_PLACEHOLDER).fullmatch(text)
    assert not placeholder_pattern(SCHEMA1_PLACEHOLDER).fullmatch("ordinary output")


def test_with_content_equals_model_copy() -> None:
    msg = tool("a", [TextPart(text="x")], is_error=True, cache_control={"type": "ephemeral"})
    fast = with_content(msg, "hidden")
    slow = msg.model_copy(update={"content": "hidden"})
    assert fast == slow
    assert fast.model_dump() == slow.model_dump()
    assert fast.model_fields_set == slow.model_fields_set | {"content"}
    assert fast.model_extra == msg.model_extra
    assert msg.content == (TextPart(text="x"),)
    assert isinstance(fast, Message)
    # Extras and the fields set are shared with the original: copies of the copy must not leak.
    fast.model_copy(update={"foo": 1, "content": "z"})
    fast.replace(content="q", bar=2)
    assert msg.model_extra == {"is_error": True, "cache_control": {"type": "ephemeral"}}
    assert "foo" not in msg.model_fields_set
    assert "bar" not in fast.model_fields_set


def test_batched_boundary() -> None:
    def one(k: int) -> int:
        return 10

    assert batched_boundary(9, batch_turns=0, clear_at_least=0, unit_tokens=one) == 9
    assert batched_boundary(9, batch_turns=4, clear_at_least=0, unit_tokens=one) == 8
    assert batched_boundary(3, batch_turns=4, clear_at_least=0, unit_tokens=one) == 0
    assert batched_boundary(9, batch_turns=0, clear_at_least=25, unit_tokens=one) == 8
    assert batched_boundary(2, batch_turns=0, clear_at_least=25, unit_tokens=one) == 0
    sizes = [5, 0, 40, 1, 1]
    assert batched_boundary(5, batch_turns=0, clear_at_least=30, unit_tokens=sizes.__getitem__) == 3


@settings(max_examples=80, deadline=None)
@given(
    history=st.one_of(valid_histories(), invalid_histories().map(lambda pair: pair[0])),
    keep=st.integers(0, 6),
)
def test_fast_group_scan_matches_tool_groups(history: list[Message], keep: int) -> None:
    groups = tool_groups(history)
    stop = old_groups_end(history, keep)
    if keep == 0:
        assert stop == len(history)
    elif len(groups) >= keep:
        assert stop == groups[len(groups) - keep].call_index
    else:
        assert stop == 0
    old = groups[: max(0, len(groups) - keep)]
    assert group_results(history, stop) == [i for g in old for i in g.result_indices]
