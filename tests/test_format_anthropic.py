"""Anthropic Messages <-> history: exact round trips, layout rules, OpenAI-made input, errors."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxcompact import (
    Message,
    RawPart,
    TextPart,
    ToolCall,
    check_history,
    from_anthropic,
    from_openai,
    to_anthropic,
)
from ctxcompact.exceptions import FormatError

EPHEMERAL = {"type": "ephemeral"}


def _use(id: str, input: Any = None, **extra: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": id, "name": "f", "input": input or {}, **extra}


def _result(id: str, content: Any = "ok", **extra: Any) -> dict[str, Any]:
    block = {"type": "tool_result", "tool_use_id": id, **extra}
    if content is not None:
        block["content"] = content
    return block


def _text(text: str, **extra: Any) -> dict[str, Any]:
    return {"type": "text", "text": text, **extra}


def _round_trip(messages: list[dict[str, Any]], system: Any = None) -> list[Message]:
    original = copy.deepcopy((system, messages))
    history = from_anthropic(messages, system=system)
    assert to_anthropic(history) == original
    assert (system, messages) == original  # input untouched
    return history


# -- layout rules, one by one -----------------------------------------------------------------


def test_system_string_and_block_list_round_trip() -> None:
    history = _round_trip([{"role": "user", "content": "hi"}], system="be brief")
    assert history[0] == Message.system("be brief").model_copy(update={"anthropic": {}})
    blocks = [_text("a", cache_control=EPHEMERAL), _text("b")]
    history = _round_trip([{"role": "user", "content": "hi"}], system=blocks)
    assert history[0].role == "system"
    assert history[0].text == "a\nb"
    _round_trip([{"role": "user", "content": "hi"}], system=[_text("only")])
    _round_trip([{"role": "user", "content": "hi"}], system="")
    assert to_anthropic(from_anthropic([]))[0] is None


def test_string_and_list_content_stay_as_they_were() -> None:
    history = _round_trip(
        [
            {"role": "user", "content": "s"},
            {"role": "assistant", "content": [_text("l")]},
            {"role": "user", "content": [_text("l", cache_control=EPHEMERAL)]},
            {"role": "assistant", "content": "s"},
            {"role": "user", "content": []},
        ]
    )
    assert [type(m.content) for m in history] == [str, tuple, tuple, str, tuple]


def test_text_after_tool_use_keeps_its_place() -> None:
    history = _round_trip(
        [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hm", "signature": "sig"},
                    _use("a", {"x": [1, 2.5, None]}),
                    _text("between"),
                    _use("b", cache_control=EPHEMERAL),
                    _text("after"),
                ],
            },
        ]
    )
    assistant = history[1]
    assert assistant.tool_call_ids == ("a", "b")
    assert json.loads(assistant.tool_calls[0].arguments) == {"x": [1, 2.5, None]}  # type: ignore[index]
    assert assistant.text == "between\nafter"
    assert isinstance(assistant.content[0], RawPart)  # type: ignore[index]


def test_tool_results_become_tool_messages_and_rejoin() -> None:
    messages = [
        {"role": "assistant", "content": [_use("a"), _use("b"), _use("c")]},
        {
            "role": "user",
            "content": [
                _result("a", "text result", is_error=True),
                _result(
                    "b", [_text("part"), {"type": "image", "source": {"type": "url", "url": "u"}}]
                ),
                _result("c", None, cache_control=EPHEMERAL, is_error=False),
                _text("and also", cache_control=EPHEMERAL),
            ],
        },
    ]
    history = _round_trip(messages)
    assert [m.role for m in history] == ["assistant", "tool", "tool", "tool", "user"]
    assert [m.tool_call_id for m in history[1:4]] == ["a", "b", "c"]
    assert [m.is_error for m in history[1:4]] == [True, False, False]
    assert "content" not in history[3].model_fields_set
    assert history[4].text == "and also"
    assert check_history(history) == []


def test_user_message_after_tool_results_stays_separate() -> None:
    history = _round_trip(
        [
            {"role": "assistant", "content": [_use("a")]},
            {"role": "user", "content": [_result("a")]},
            {"role": "user", "content": [_text("separate")]},
        ]
    )
    assert [m.role for m in history] == ["assistant", "tool", "user"]


def test_two_tool_result_messages_stay_two() -> None:
    history = _round_trip(
        [
            {"role": "assistant", "content": [_use("a"), _use("b")]},
            {"role": "user", "content": [_result("a")]},
            {"role": "user", "content": [_result("b"), _text("x")]},
        ]
    )
    assert [m.role for m in history] == ["assistant", "tool", "tool", "user"]


def test_ids_reused_across_turns_round_trip() -> None:
    turn = [
        {"role": "assistant", "content": [_use("t1", {"n": 1})]},
        {"role": "user", "content": [_result("t1")]},
    ]
    history = _round_trip([{"role": "user", "content": "go"}, *turn, *copy.deepcopy(turn)])
    assert check_history(history) == []


def test_unknown_blocks_and_message_keys_round_trip() -> None:
    _round_trip(
        [
            {
                "role": "user",
                "content": [{"type": "document", "source": {"type": "text"}}],
                "id": 1,
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "redacted_thinking", "data": "zz"},
                    {"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}},
                    _text("t", citations=[{"k": 1}]),
                ],
            },
            {"role": "user", "content": [_result("x")], "meta": {"a": 1}},
        ]
    )


def test_only_tool_use_blocks_give_null_content() -> None:
    history = _round_trip([{"role": "assistant", "content": [_use("a")]}])
    assert history[0].content is None


def test_unicode_input_is_kept_readable_in_arguments() -> None:
    history = _round_trip([{"role": "assistant", "content": [_use("a", {"q": "数据 é"})]}])
    assert history[0].tool_calls[0].arguments == '{"q": "数据 é"}'  # type: ignore[index]


def test_strategy_edits_keep_the_layout() -> None:
    messages = [
        {"role": "assistant", "content": [_use("a"), _use("b")]},
        {"role": "user", "content": [_result("a", "long"), _result("b", "long"), _text("more")]},
    ]
    history = from_anthropic(messages)
    edited = [m.replace(content="[hidden]") if m.role == "tool" else m for m in history]
    _, out = to_anthropic(edited)
    assert out[1]["content"] == [_result("a", "[hidden]"), _result("b", "[hidden]"), _text("more")]


def test_text_before_tool_results_comes_back_after_them() -> None:
    # The API rejects this order; the documented normalisation puts the results first.
    messages = [
        {"role": "assistant", "content": [_use("a")]},
        {"role": "user", "content": [_text("first"), _result("a")]},
    ]
    history = from_anthropic(messages)
    assert [m.role for m in history] == ["assistant", "tool", "user"]
    assert to_anthropic(history)[1][1] == {
        "role": "user",
        "content": [_result("a"), _text("first")],
    }


def test_joined_user_message_stays_separate_when_its_results_were_removed() -> None:
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [_use("a")]},
        {"role": "user", "content": [_result("a"), _text("note")]},
    ]
    history = from_anthropic(messages)
    dropped = [m for m in history if m.role != "tool" and not m.tool_calls]
    assert to_anthropic(dropped)[1] == [
        {"role": "user", "content": "go"},
        {"role": "user", "content": [_text("note")]},
    ]


# -- OpenAI-made histories --------------------------------------------------------------------


def test_openai_history_becomes_a_valid_request() -> None:
    history = from_openai(
        [
            {"role": "system", "content": "sys"},
            {"role": "developer", "content": "dev"},
            {
                "role": "user",
                "content": [
                    {
                        "type": "image_url",
                        "image_url": {"url": "data:image/jpeg;base64,/9j/", "detail": "low"},
                    },
                    {"type": "image_url", "image_url": {"url": "https://x/a.png"}},
                ],
            },
            {
                "role": "assistant",
                "content": "",
                "reasoning_content": "r",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "f", "arguments": '{"a":1}'},
                    },
                    {"id": "c2", "type": "function", "function": {"name": "g", "arguments": ""}},
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "name": "f", "content": "r1"},
            {"role": "tool", "tool_call_id": "c2", "content": None},
            {"role": "user", "content": "next"},
            {
                "role": "assistant",
                "content": "text",
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "r", "is_error": True},
        ]
    )
    system, messages = to_anthropic(history)
    assert system == [_text("sys"), _text("dev")]
    assert messages == [
        {
            "role": "user",
            "content": [
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/"},
                },
                {"type": "image", "source": {"type": "url", "url": "https://x/a.png"}},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "c1", "name": "f", "input": {"a": 1}},
                {"type": "tool_use", "id": "c2", "name": "g", "input": {}},
            ],
        },
        {"role": "user", "content": [_result("c1", "r1"), _result("c2", None)]},
        {"role": "user", "content": "next"},
        {"role": "assistant", "content": [_text("text"), _use("c1")]},
        {"role": "user", "content": [_result("c1", "r", is_error=True)]},
    ]


def test_one_string_system_message_gives_a_string() -> None:
    assert to_anthropic([Message.system("s")]) == ("s", [])
    assert to_anthropic([Message.system(""), Message.system("b")])[0] == [_text("b")]


def test_system_message_after_the_start_is_an_error() -> None:
    history = [Message.system("a"), Message.user("b"), Message.system("late")]
    with pytest.raises(FormatError) as info:
        to_anthropic(history)
    assert info.value.index == 2
    assert info.value.field == "role"
    assert "move it to the start" in str(info.value)


def test_arguments_that_are_not_json_are_an_error() -> None:
    history = [
        Message.user("a"),
        Message.assistant(
            None,
            tool_calls=[
                ToolCall(id="x", name="f", arguments="{}"),
                ToolCall(id="y", name="f", arguments='{"cut'),
            ],
        ),
    ]
    with pytest.raises(FormatError) as info:
        to_anthropic(history)
    assert info.value.index == 1
    assert info.value.field == "tool_calls[1].arguments"


@pytest.mark.parametrize("arguments", ["[1]", "null", '"x"', "3"])
def test_arguments_that_are_json_but_not_an_object_are_an_error(arguments: str) -> None:
    # from_anthropic rejects such an input, and so does the API: to_anthropic must not make one.
    history = [
        Message.user("a"),
        Message.assistant(None, tool_calls=[ToolCall(id="x", name="f", arguments=arguments)]),
    ]
    with pytest.raises(FormatError, match="not an object") as info:
        to_anthropic(history)
    assert (info.value.index, info.value.field) == (1, "tool_calls[0].arguments")


def test_tool_message_without_id_is_an_error() -> None:
    with pytest.raises(FormatError) as info:
        to_anthropic([Message.user("a"), Message(role="tool", content="r")])
    assert (info.value.index, info.value.field) == (1, "tool_call_id")


def test_to_anthropic_rejects_non_messages() -> None:
    with pytest.raises(FormatError) as info:
        to_anthropic([Message.user("a"), "b"])  # type: ignore[list-item]
    assert info.value.index == 1


def test_parts_with_extras_go_through() -> None:
    history = [
        Message.user(
            [TextPart.model_validate({"type": "text", "text": "a", "cache_control": EPHEMERAL})]
        )
    ]
    assert to_anthropic(history)[1] == [
        {"role": "user", "content": [_text("a", cache_control=EPHEMERAL)]}
    ]


# -- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("messages", "system", "index", "field", "words"),
    [
        ({"role": "user"}, None, None, None, "list"),
        ("x", None, None, None, "list"),
        (["x"], None, 0, None, "object"),
        ([{"content": "a"}], None, 0, "role", "missing"),
        ([{"role": "system", "content": "a"}], None, 0, "role", "'system' parameter"),
        ([{"role": "user"}], None, 0, "content", "null"),
        ([{"role": "user", "content": 1}], None, 0, "content", "number"),
        ([{"role": "user", "content": ["a"]}], None, 0, "content[0]", "object"),
        ([{"role": "user", "content": [{"text": "a"}]}], None, 0, "content[0].type", "type"),
        ([{"role": "user", "content": [{"type": "text"}]}], None, 0, "content[0].text", "text"),
        (
            [{"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": {}}]}],
            None,
            0,
            "content[0].id",
            "'id'",
        ),
        (
            [{"role": "assistant", "content": [{"type": "tool_use", "id": "a", "input": {}}]}],
            None,
            0,
            "content[0].name",
            "'name'",
        ),
        (
            [{"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f"}]}],
            None,
            0,
            "content[0].input",
            "input",
        ),
        (
            [{"role": "assistant", "content": [_use("a", {"s": {1, 2}})]}],
            None,
            0,
            "content[0].input",
            "JSON",
        ),
        (
            [{"role": "assistant", "content": [_use("a", "ls -la")]}],
            None,
            0,
            "content[0].input",
            "JSON object, got str",
        ),
        (
            [
                {"role": "user", "content": "a"},
                {"role": "user", "content": [{"type": "tool_result"}]},
            ],
            None,
            1,
            "content[0].tool_use_id",
            "tool_use_id",
        ),
        ([{"role": "user", "content": [_result("a", 5)]}], None, 0, "content[0].content", "number"),
        (
            [{"role": "user", "content": [_result("a", [1])]}],
            None,
            0,
            "content[0].content[0]",
            "object",
        ),
        ([], 5, None, "system", "string"),
        ([], ["a"], None, "system[0]", "object"),
        ([], [{"type": "text", "text": 1}], None, "system[0].text", "text"),
    ],
)
def test_invalid_input_names_index_and_field(
    messages: Any, system: Any, index: int | None, field: str | None, words: str
) -> None:
    with pytest.raises(FormatError) as info:
        from_anthropic(messages, system=system)
    assert info.value.index == index
    assert info.value.field == field
    assert words in str(info.value)
    if index is not None:
        assert f"message {index}" in str(info.value)
    if field is not None:
        assert repr(field) in str(info.value)


# -- property: generated Anthropic requests round trip exactly --------------------------------

_TEXT = st.text(max_size=6)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=8,
)
_CACHE = st.dictionaries(st.just("cache_control"), st.just(EPHEMERAL))
_TEXT_BLOCK = st.builds(lambda t, e: {"type": "text", "text": t, **e}, _TEXT, _CACHE)
_IMAGE = st.just(
    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA"}}
)
_THINKING = st.one_of(
    st.builds(lambda t: {"type": "thinking", "thinking": t, "signature": "sig"}, _TEXT),
    st.just({"type": "redacted_thinking", "data": "opaque"}),
    st.just({"type": "mystery", "payload": [1]}),
)
_USER_CONTENT = st.one_of(_TEXT, st.lists(st.one_of(_TEXT_BLOCK, _IMAGE), max_size=3))
_RESULT_CONTENT = st.one_of(st.none(), _TEXT, st.lists(st.one_of(_TEXT_BLOCK, _IMAGE), max_size=2))


@st.composite
def _requests(draw: st.DrawFn) -> tuple[Any, list[dict[str, Any]]]:
    system = draw(st.one_of(st.none(), _TEXT, st.lists(_TEXT_BLOCK, max_size=2)))
    messages: list[dict[str, Any]] = [{"role": "user", "content": draw(_USER_CONTENT)}]
    for _ in range(draw(st.integers(0, 4))):
        if draw(st.booleans()):
            messages.append({"role": "assistant", "content": draw(_TEXT)})
            messages.append({"role": "user", "content": draw(_USER_CONTENT)})
            continue
        # parallel tool_use blocks, ids from a small pool so they repeat across turns
        ids = draw(
            st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=3, unique=True)
        )
        blocks = [
            {
                "type": "tool_use",
                "id": i,
                "name": "f",
                "input": draw(st.dictionaries(_TEXT, _JSON, max_size=3)),
                **draw(_CACHE),
            }
            for i in ids
        ]
        for _ in range(draw(st.integers(0, 3))):
            blocks.insert(
                draw(st.integers(0, len(blocks))), draw(st.one_of(_TEXT_BLOCK, _THINKING))
            )
        messages.append({"role": "assistant", "content": blocks})
        results = []
        for i in draw(st.permutations(ids)):
            result: dict[str, Any] = {"type": "tool_result", "tool_use_id": i}
            content = draw(_RESULT_CONTENT)
            if content is not None:
                result["content"] = content
            if draw(st.booleans()):
                result["is_error"] = draw(st.booleans())
            result.update(draw(_CACHE))
            results.append(result)
        cut = draw(st.integers(1, len(results)))  # one or two tool-result messages
        chunks = [c for c in (results[:cut], results[cut:]) if c]
        for n, chunk in enumerate(chunks, 1):
            # text after the results only in the last one: text between results separates them
            tail = draw(st.lists(_TEXT_BLOCK, max_size=2)) if n == len(chunks) else []
            messages.append({"role": "user", "content": chunk + tail})
        if draw(st.booleans()):
            messages.append({"role": "user", "content": draw(_USER_CONTENT)})
    return system, messages


@given(_requests())
@settings(max_examples=100, deadline=None)
def test_generated_requests_round_trip_exactly(request: tuple[Any, list[dict[str, Any]]]) -> None:
    system, messages = request
    history = _round_trip(messages, system=system)
    assert check_history(history) == []
    for message in history:
        for call in message.tool_calls or ():
            json.loads(call.arguments)  # always valid JSON
