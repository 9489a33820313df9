"""OpenAI Chat Completions <-> history: exact round trips, fast construction, errors."""

from __future__ import annotations

import copy
import json
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxcompact import (
    ImagePart,
    Message,
    RawPart,
    TextPart,
    ToolCall,
    from_anthropic,
    from_openai,
    to_openai,
)
from ctxcompact.exceptions import FormatError
from tests.helpers.gen import valid_histories
from tests.helpers.traces import load_trace, trace_names

TRACES = trace_names()


# -- real traces ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", TRACES)
def test_trace_round_trip_is_exact(name: str) -> None:
    raw = load_trace(name)
    original = copy.deepcopy(raw)
    out = to_openai(from_openai(raw))
    assert out == original
    # Same JSON text too: nothing turned into an equal-but-different type (tuple, subclass).
    assert json.dumps(out, sort_keys=True) == json.dumps(original, sort_keys=True)
    assert raw == original  # input untouched


def _validated(raw: dict[str, Any]) -> Message:
    """The slow reference: the same message built through pydantic validation."""
    data = dict(raw)
    if data.get("tool_calls") is not None:
        data["tool_calls"] = [
            ToolCall.model_validate(
                {
                    "id": c["id"],
                    "name": c["function"]["name"],
                    "arguments": c["function"]["arguments"],
                    **{k: v for k, v in c.items() if k not in ("id", "function")},
                }
            )
            for c in data["tool_calls"]
        ]
    return Message.model_validate(data)


@pytest.mark.parametrize("name", TRACES)
def test_fast_construction_matches_validation(name: str) -> None:
    raw = load_trace(name)
    for fast, message in zip(from_openai(raw), raw, strict=True):
        slow = _validated(message)
        assert fast == slow
        assert fast.model_fields_set == slow.model_fields_set
        assert fast.model_dump() == slow.model_dump()
        assert hash(fast) == hash(slow)
        # the models behave normally: copies, replace, text
        assert fast.replace(content="x").text == "x"
        assert fast.model_copy() == fast


# -- what survives ----------------------------------------------------------------------------


def test_absent_null_string_and_list_stay_as_they_were() -> None:
    raw = [
        {"role": "user", "content": [{"type": "text", "text": "a"}]},
        {"role": "assistant", "content": None, "tool_calls": None},
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c", "name": "f", "content": "ok"},
        {"role": "tool", "tool_call_id": "c"},
        {"role": "assistant", "content": "", "name": None},
        {"role": "developer", "content": "be brief"},
    ]
    history = from_openai(raw)
    assert isinstance(history[0].content, tuple)
    assert "content" not in history[2].model_fields_set
    assert history[3].name == "f"
    assert to_openai(history) == raw


def test_unknown_keys_round_trip_at_every_level() -> None:
    raw = [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "a", "annotations": [1]},
                {"type": "refusal", "refusal": "no"},
            ],
            "reasoning_content": "thinking...",
            "refusal": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "index": 0,
                    "function": {"name": "f", "arguments": '{"a":1}', "strict": True},
                }
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": "http://x/i.png", "detail": "low"}},
                {"type": "input_audio", "input_audio": {"data": "AA", "format": "wav"}},
            ],
        },
    ]
    history = from_openai(raw)
    call = history[0].tool_calls[0]  # type: ignore[index]
    assert call.model_extra == {"index": 0, "function_extra": {"strict": True}}
    assert history[0].model_extra == {"reasoning_content": "thinking...", "refusal": None}
    content = history[1].content
    assert isinstance(content, tuple)
    assert isinstance(content[0], ImagePart)
    assert isinstance(content[1], RawPart)
    assert to_openai(history) == raw


def test_tool_call_without_type_is_written_with_type_function() -> None:
    raw = [
        {
            "role": "assistant",
            "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": ""}}],
        }
    ]
    out = to_openai(from_openai(raw))
    assert out[0]["tool_calls"][0] == {
        "id": "c",
        "type": "function",
        "function": {"name": "f", "arguments": ""},
    }


def test_other_mappings_and_unusual_shapes_read_as_validation_reads_them() -> None:
    """The common shapes are read on a fast path; everything else takes the checked one,
    and both build what ``model_validate`` builds."""
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    raw: list[dict[str, Any]] = [
        {"role": "assistant", "content": None, "tool_calls": [call]},  # fast path
        {"role": "assistant", "tool_calls": [{"id": "c", "function": call["function"]}]},
        {"role": "assistant", "tool_calls": [{**call, "index": 0}], "refusal": None},
        {"role": "tool", "tool_call_id": "c", "content": "x", "name": "f"},
        {"role": "user", "content": "hi", "metadata": {"k": [1]}},
    ]
    for message in raw:
        fast = from_openai([message])[0]
        assert from_openai([MappingProxyType(message)]) == [fast]
        slow = _validated(message)
        assert fast == slow
        assert fast.model_fields_set == slow.model_fields_set
        for got, want in zip(fast.tool_calls or (), slow.tool_calls or (), strict=True):
            assert got.model_fields_set == want.model_fields_set
    assert (
        to_openai(from_openai(raw))[1:]
        == [
            {**raw[1], "tool_calls": [call]},  # the one normalisation: "type" is written
            *raw[2:],
        ]
    )


def test_messages_built_in_code_produce_valid_openai() -> None:
    history = [
        Message.system("s"),
        Message.assistant(None, tool_calls=[ToolCall(id="c", name="ls", arguments="{}")]),
        Message.tool("c", [TextPart(text="a.py")]),
    ]
    assert to_openai(history) == [
        {"role": "system", "content": "s"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c", "content": [{"type": "text", "text": "a.py"}]},
    ]


def test_history_shares_no_mutable_state_with_input_or_output() -> None:
    raw = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}}],
            "metadata": {"k": [1]},
        }
    ]
    history = from_openai(raw)
    raw[0]["content"][0]["cache_control"]["type"] = "changed"
    raw[0]["metadata"]["k"].append(2)
    out = to_openai(history)
    assert out[0]["content"][0]["cache_control"] == {"type": "ephemeral"}
    assert out[0]["metadata"] == {"k": [1]}
    out[0]["metadata"]["k"].append(3)
    assert to_openai(history)[0]["metadata"] == {"k": [1]}


def test_reserved_anthropic_key_is_never_written() -> None:
    history = from_anthropic(
        [
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "t",
                        "name": "f",
                        "input": {},
                        "cache_control": {"type": "ephemeral"},
                    }
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t", "is_error": True}],
            },
        ]
    )
    out = to_openai(history)
    assert "anthropic" not in json.dumps(out)
    assert out[1] == {"role": "tool", "tool_call_id": "t", "content": ""}


def test_anthropic_thinking_is_dropped_and_images_converted() -> None:
    history = from_anthropic(
        [
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"},
                    },
                    {"type": "image", "source": {"type": "url", "url": "https://x/a.png"}},
                    {"type": "image", "source": {"type": "file", "file_id": "f1"}},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hm", "signature": "sig"},
                    {"type": "redacted_thinking", "data": "xx"},
                    {"type": "tool_use", "id": "t", "name": "f", "input": {"a": 1}},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hm", "signature": "sig"},
                    {"type": "text", "text": "hi"},
                ],
            },
        ]
    )
    out = to_openai(history)
    assert out[0]["content"] == [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
        {"type": "image_url", "image_url": {"url": "https://x/a.png"}},
        {"type": "image", "source": {"type": "file", "file_id": "f1"}},  # no OpenAI equivalent
    ]
    assert out[1]["content"] is None
    assert out[1]["tool_calls"][0]["function"] == {"name": "f", "arguments": '{"a": 1}'}
    assert out[2]["content"] == [{"type": "text", "text": "hi"}]


def test_thinking_parts_of_openai_origin_are_kept() -> None:
    raw = [
        {
            "role": "assistant",
            "content": [{"type": "thinking", "thinking": "x"}, {"type": "image", "x": 1}],
        }
    ]
    assert to_openai(from_openai(raw)) == raw


# -- errors -----------------------------------------------------------------------------------

_CALL = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}


def _with_call(**changes: Any) -> dict[str, Any]:
    call = {**_CALL, **changes}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


@pytest.mark.parametrize(
    ("messages", "index", "field", "words"),
    [
        ({"role": "user"}, None, None, "list"),
        ("hello", None, None, "list"),
        (None, None, None, "list"),
        ([{"role": "user", "content": "a"}, "hi"], 1, None, "object"),
        ([{"content": "a"}], 0, "role", "missing"),
        ([{"role": "bot", "content": "a"}], 0, "role", "'bot'"),
        ([{"role": "user", "content": 3}], 0, "content", "number"),
        ([{"role": "user", "content": {"type": "text"}}], 0, "content", "object"),
        ([{"role": "user", "content": ["a"]}], 0, "content[0]", "object"),
        ([{"role": "user", "content": [{"text": "a"}]}], 0, "content[0].type", "type"),
        (
            [{"role": "user", "content": [{"type": "text", "text": None}]}],
            0,
            "content[0].text",
            "null",
        ),
        ([{"role": "assistant", "tool_calls": {"id": "c"}}], 0, "tool_calls", "list"),
        ([{"role": "assistant", "tool_calls": ["c"]}], 0, "tool_calls[0]", "object"),
        ([_with_call(id=None)], 0, "tool_calls[0].id", "missing"),
        ([_with_call(id=7)], 0, "tool_calls[0].id", "string"),
        ([_with_call(type=1)], 0, "tool_calls[0].type", "string"),
        ([_with_call(function=None)], 0, "tool_calls[0].function", "object"),
        ([_with_call(function={"arguments": "{}"})], 0, "tool_calls[0].function.name", "name"),
        (
            [_with_call(function={"name": "f", "arguments": {"a": 1}})],
            0,
            "tool_calls[0].function.arguments",
            "json.dumps",
        ),
        ([_with_call(function_extra={})], 0, "tool_calls[0].function_extra", "reserved"),
        ([{"role": "tool", "content": "x"}], 0, "tool_call_id", "tool_call_id"),
        ([{"role": "tool", "content": "x", "tool_call_id": 3}], 0, "tool_call_id", "string"),
        ([{"role": "tool", "content": "x", "tool_call_id": "c", "name": 3}], 0, "name", "string"),
        ([{"role": "user", "content": "x", "anthropic": {}}], 0, "anthropic", "reserved"),
    ],
)
def test_invalid_input_names_index_and_field(
    messages: Any, index: int | None, field: str | None, words: str
) -> None:
    with pytest.raises(FormatError) as info:
        from_openai(messages)
    assert info.value.index == index
    assert info.value.field == field
    assert words in str(info.value)
    if index is not None:
        assert f"message {index}" in str(info.value)
    if field is not None:
        assert repr(field) in str(info.value)


def test_to_openai_rejects_non_messages() -> None:
    with pytest.raises(FormatError) as info:
        to_openai([Message.user("a"), {"role": "user", "content": "b"}])  # type: ignore[list-item]
    assert info.value.index == 1


# -- properties -------------------------------------------------------------------------------

_TEXT = st.text(max_size=8)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=6,
)
_EXTRA = st.dictionaries(
    st.sampled_from(["reasoning_content", "refusal", "audio", "x_meta"]), _JSON, max_size=2
)
_PART = st.one_of(
    st.builds(
        lambda t, e: {"type": "text", "text": t, **e},
        _TEXT,
        st.dictionaries(st.just("cache_control"), st.just({"type": "ephemeral"})),
    ),
    st.builds(
        lambda u: {"type": "image_url", "image_url": {"url": u}},
        st.sampled_from(["http://a/b.png", "data:image/png;base64,AA"]),
    ),
    st.builds(lambda d: {"type": "input_audio", "input_audio": d}, _JSON),
)
_CONTENT = st.one_of(st.none(), _TEXT, st.lists(_PART, max_size=3))


@st.composite
def _openai_message(draw: st.DrawFn) -> dict[str, Any]:
    role = draw(st.sampled_from(["system", "developer", "user", "assistant", "tool"]))
    message: dict[str, Any] = {"role": role}
    if draw(st.booleans()):
        message["content"] = draw(_CONTENT)
    if role == "assistant" and draw(st.booleans()):
        calls = []
        for j in range(draw(st.integers(0, 3))):
            function: dict[str, Any] = {"name": draw(_TEXT), "arguments": draw(_TEXT)}
            function.update(draw(st.dictionaries(st.just("strict"), st.booleans())))
            call: dict[str, Any] = {
                "id": f"c{draw(st.integers(0, 3))}",
                "type": "function",
                "function": function,
            }
            call.update(draw(st.dictionaries(st.just("index"), st.just(j))))
            calls.append(call)
        message["tool_calls"] = calls if calls or draw(st.booleans()) else None
    if role == "tool":
        message["tool_call_id"] = draw(_TEXT)
        if draw(st.booleans()):
            message["name"] = draw(st.none() | _TEXT)
    message.update(draw(_EXTRA))
    return message


@given(st.lists(_openai_message(), max_size=6))
@settings(max_examples=100, deadline=None)
def test_round_trip_is_exact_on_generated_lists(messages: list[dict[str, Any]]) -> None:
    original = copy.deepcopy(messages)
    assert to_openai(from_openai(messages)) == original


@given(valid_histories())
@settings(max_examples=100, deadline=None)
def test_histories_survive_to_openai_and_back(history: list[Message]) -> None:
    assert from_openai(to_openai(history)) == history


@given(st.lists(_openai_message(), max_size=6))
@settings(max_examples=100, deadline=None)
def test_generated_messages_build_what_validation_builds(messages: list[dict[str, Any]]) -> None:
    for fast, message in zip(from_openai(messages), messages, strict=True):
        calls = message.get("tool_calls") or ()
        if any(len(c["function"]) > 2 for c in calls):
            continue  # function extras have no field to validate into (``function_extra``)
        slow = _validated(message)
        assert fast == slow
        assert fast.model_fields_set == slow.model_fields_set
