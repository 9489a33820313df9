"""The shared helpers: placeholders, the fast copy, the group scans and the batching of a
boundary. The error heuristic has its own tests: ``test_strategy_errors.py``."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxcompact import Message, TextPart
from ctxcompact._groups import tool_groups
from ctxcompact.exceptions import ConfigError
from ctxcompact.strategies._shared import (
    SCHEMA1_FIELDS,
    SCHEMA1_PLACEHOLDER,
    batched_boundary,
    group_results,
    old_groups_end,
    placeholder_pattern,
    render_placeholder,
    validate_template,
    with_content,
)
from tests.gen import invalid_histories, tool, valid_histories


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
