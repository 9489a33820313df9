"""ToolResultTruncation: seed 003 L1's tests (boundaries, marker, head+tail) and list content."""

from __future__ import annotations

import re
from typing import Any

import pytest

from ctxcompact import ImagePart, Message, TextPart
from ctxcompact.exceptions import ConfigError, UserError
from ctxcompact.strategies import ToolResultTruncation
from tests.helpers.gen import assistant, call, tool, user
from tests.helpers.strategy_checks import assert_content_only, assert_safe, dump, run

MARKER = re.compile(r"\n\n\.\.\. \[(\d+) characters truncated\] \.\.\.\n\n")


def test_short_text_is_untouched() -> None:
    text = "hello"
    assert ToolResultTruncation().truncate_text(text) is text


def test_exactly_max_chars_is_untouched_and_one_more_is_cut() -> None:
    t = ToolResultTruncation()
    exact = "a" * 50_000
    assert t.truncate_text(exact) is exact
    over = "h" * 2_000 + "m" * 46_001 + "t" * 2_000
    assert len(over) == 50_001
    cut = t.truncate_text(over)
    assert cut.startswith("h" * 2_000 + "\n\n")
    assert cut.endswith("\n\n" + "t" * 2_000)
    match = MARKER.search(cut)
    assert match is not None
    assert int(match.group(1)) == 46_001
    assert "m" not in cut


def test_marker_states_the_number_of_characters_cut() -> None:
    t = ToolResultTruncation(max_chars=100, head_chars=10, tail_chars=20)
    text = "".join(chr(ord("a") + k % 26) for k in range(1_000))
    cut = t.truncate_text(text)
    match = MARKER.search(cut)
    assert match is not None
    assert int(match.group(1)) == 1_000 - 10 - 20
    assert cut[:10] == text[:10]
    assert cut[-20:] == text[-20:]


def test_zero_tail_keeps_the_head_only() -> None:
    cut = ToolResultTruncation(max_chars=100, head_chars=50, tail_chars=0).truncate_text("x" * 500)
    assert cut.startswith("x" * 50)
    assert cut.endswith("...\n\n")


def test_cut_that_would_not_be_shorter_keeps_the_original() -> None:
    t = ToolResultTruncation(max_chars=10, head_chars=4, tail_chars=4)
    text = "x" * 12
    assert t.truncate_text(text) is text


def test_truncation_is_idempotent() -> None:
    t = ToolResultTruncation(max_chars=1_000, head_chars=300, tail_chars=300)
    once = t.truncate_text("y" * 10_000)
    assert t.truncate_text(once) is once


@pytest.mark.parametrize(
    ("params", "key"),
    [
        ({"max_chars": 100, "head_chars": 60, "tail_chars": 40}, "head_chars"),
        ({"max_chars": 100, "head_chars": 80, "tail_chars": 40}, "head_chars"),
        ({"max_chars": 0}, "max_chars"),
        ({"head_chars": -1}, "head_chars"),
        ({"tail_chars": "2000"}, "tail_chars"),
    ],
)
def test_bad_sizes_raise_at_construction(params: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        ToolResultTruncation(**params)
    assert isinstance(info.value, UserError)
    assert info.value.key == key
    assert "head_chars" in str(info.value) or key in str(info.value)


def test_truncate_message_keeps_ids_and_extras() -> None:
    t = ToolResultTruncation(max_chars=100, head_chars=10, tail_chars=10)
    msg = tool("call_7", "z" * 500, is_error=True)
    cut = t.truncate_message(msg)
    assert cut.tool_call_id == "call_7"
    assert cut.model_extra == {"is_error": True}
    assert isinstance(cut.content, str)
    assert len(cut.content) < 100
    assert msg.content == "z" * 500
    small = tool("call_8", "short")
    assert t.truncate_message(small) is small
    assert t.truncate_message(Message.assistant(None)).content is None


def test_list_content_cuts_text_parts_only() -> None:
    t = ToolResultTruncation(max_chars=100, head_chars=10, tail_chars=10)
    image = ImagePart.model_validate(
        {"type": "image_url", "image_url": {"url": "data:," + "A" * 500}}
    )
    msg = tool("c", [TextPart(text="q" * 400), image, TextPart(text="short")])
    cut = t.truncate_message(msg)
    assert isinstance(cut.content, tuple)
    assert isinstance(cut.content[0], TextPart)
    assert MARKER.search(cut.content[0].text)
    assert cut.content[1] is image
    assert cut.content[2] is msg.content[2]  # type: ignore[index]


def test_strategy_cuts_tool_results_only() -> None:
    big = "b" * 60_000
    h = [user(big), assistant(None, call("a")), tool("a", big), assistant(big)]
    snap = dump(h)
    out = run(ToolResultTruncation(), h)
    assert_safe(h, snap, out)
    assert assert_content_only(h, out) == [2]
    assert run(ToolResultTruncation(), out) is None


def test_strategy_no_op_returns_none() -> None:
    h = [user("hi"), assistant(None, call("a")), tool("a", "small")]
    assert run(ToolResultTruncation(), h) is None


def test_second_pass_is_a_no_op_even_with_a_tiny_max_chars() -> None:
    t = ToolResultTruncation(max_chars=10, head_chars=2, tail_chars=2)
    for n in (50, 999, 12_345):
        once = t.truncate_text("x" * n)
        assert once != "x" * n
        assert t.truncate_text(once) is once
