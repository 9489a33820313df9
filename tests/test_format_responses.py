"""OpenAI Responses items <-> history: exact round trip, mapping, errors, validator, strategies."""

from __future__ import annotations

import copy
import json
import logging
import re
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxcompact import (
    CompactionController,
    CompactionStrategy,
    HeuristicTokenCounter,
    Message,
    RawPart,
    TextPart,
    ToolCall,
    check_history,
    from_openai,
    from_responses,
    looks_like_responses,
    to_responses,
)
from ctxcompact.exceptions import FormatError
from ctxcompact.strategies import (
    ContextGuard,
    HidingThenSummary,
    LLMSummary,
    Pipeline,
    Schema1Masking,
    ToolResultHiding,
    ToolResultTruncation,
)
from ctxcompact.testing import ScriptedLLM
from tests.helpers.gen import invalid_histories, valid_histories
from tests.helpers.responses_items import ROLLOUTS, chat_to_items, item_problems, load_rollout
from tests.helpers.strategy_checks import assert_safe, dump, run
from tests.helpers.traces import load_trace, trace_names

REASONING = {
    "type": "reasoning",
    "id": "rs_1",
    "summary": [{"type": "summary_text", "text": "Look at the files first."}],
    "encrypted_content": "gAAAAABoQ2xp+/=ZW50",
}


def fc(call_id: str, name: str = "shell", args: str = '{"cmd": "ls"}', **kw: Any) -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": args, **kw}


def out(call_id: str, output: Any = "a.py", **kw: Any) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": output, **kw}


def msg(role: str, text: str, kind: str = "input_text", **kw: Any) -> dict[str, Any]:
    return {"type": "message", "role": role, "content": [{"type": kind, "text": text}], **kw}


EVERY_SHAPE: list[dict[str, Any]] = [
    msg("developer", "You are terse."),
    {"role": "system", "content": "string system prompt"},
    {"role": "user", "content": "short form, string content"},
    msg("user", "typed form", id="msg_u1"),
    {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": "two parts"},
            {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "low"},
        ],
    },
    REASONING,
    msg("assistant", "Listing.", "output_text", id="msg_a1", status="completed", phase="x"),
    fc("call_1", id="fc_1", status="completed"),
    fc("call_2", args="{}"),
    out("call_1"),
    out("call_2", [{"type": "input_text", "text": "list output"}], id="fco_2"),
    {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAAABcompacted"},
    {"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": None},
    {"type": "custom_tool_call", "call_id": "call_3", "name": "apply_patch", "input": "*** Begin"},
    {"type": "custom_tool_call_output", "call_id": "call_3", "output": "Done"},
    {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"q": "x"}},
    {"role": "assistant", "content": "short-form assistant"},
    {
        "type": "message",
        "role": "assistant",
        "content": [
            {"type": "output_text", "text": "a", "annotations": [{"type": "url_citation"}]},
            {"type": "refusal", "refusal": "no"},
        ],
    },
    {"type": "item_reference", "id": "msg_old"},
    {"type": "some_future_item", "payload": {"nested": [1, 2.5, None, True]}},
    msg("user", "thanks"),
]


# -- the exact round trip ---------------------------------------------------------------------


def test_every_item_shape_round_trips_exactly() -> None:
    items = copy.deepcopy(EVERY_SHAPE)
    assert to_responses(from_responses(items)) == EVERY_SHAPE
    assert json.dumps(to_responses(from_responses(items))) == json.dumps(EVERY_SHAPE)


@pytest.mark.parametrize("name", ROLLOUTS)
def test_codex_rollout_round_trips_exactly(name: str) -> None:
    items = load_rollout(name)
    assert len(items) > 5
    assert to_responses(from_responses(items)) == items


@pytest.mark.parametrize("name", trace_names())
def test_traces_as_responses_items_round_trip_exactly(name: str) -> None:
    items = chat_to_items(load_trace(name))
    assert item_problems(items) == []
    assert to_responses(from_responses(items)) == items


def test_neither_direction_shares_containers() -> None:
    items = copy.deepcopy(EVERY_SHAPE)
    history = from_responses(items)
    items[5]["summary"][0]["text"] = "changed"
    items[7]["status"] = "changed"
    first = to_responses(history)
    assert first == EVERY_SHAPE
    first[5]["summary"].clear()
    first[10]["output"][0]["text"] = "changed"
    assert to_responses(history) == EVERY_SHAPE


# -- the mapping --------------------------------------------------------------------------------


def test_a_model_turn_is_one_assistant_message_with_its_reasoning_and_calls() -> None:
    history = from_responses(EVERY_SHAPE)
    roles = [m.role for m in history]
    assert roles[:5] == ["developer", "system", "user", "user", "user"]
    turn = history[5]
    assert turn.role == "assistant"
    assert turn.tool_call_ids == ("call_1", "call_2")
    assert turn.text == "Listing."
    reasoning = turn.content[0]  # type: ignore[index]
    assert isinstance(reasoning, RawPart)
    assert reasoning.model_dump() == REASONING  # encrypted_content verbatim
    assert [(m.role, m.tool_call_id) for m in history[6:8]] == [
        ("tool", "call_1"),
        ("tool", "call_2"),
    ]
    assert history[7].text == "list output"
    assert check_history(history) == []


def test_custom_tool_calls_are_tool_calls_and_opaque_items_stay_in_place() -> None:
    history = from_responses(EVERY_SHAPE)
    compaction = history[8]
    assert compaction.role == "user"
    assert [p.model_dump() for p in compaction.content] == [EVERY_SHAPE[11]]  # type: ignore[union-attr]
    custom = history[9]
    assert custom.tool_calls is not None
    assert (custom.tool_calls[0].type, custom.tool_calls[0].arguments) == ("custom", "*** Begin")
    assert (history[10].role, history[10].tool_call_id) == ("tool", "call_3")
    # web_search_call, the short-form and the typed assistant message: one model turn
    assert history[11].role == "assistant"
    assert history[11].text == "short-form assistant\na"
    assert [m.role for m in history[12:]] == ["user", "user", "user"]


def test_text_parts_are_text_for_strategies() -> None:
    history = from_responses([msg("user", "hello"), msg("assistant", "hi", "output_text")])
    assert [m.text for m in history] == ["hello", "hi"]
    assert isinstance(history[0].content[0], TextPart)  # type: ignore[index]


def test_messages_made_in_code_are_written_in_the_canonical_form() -> None:
    call = Message.assistant("on it", tool_calls=[])
    history = [
        Message.system("sys"),
        Message.user(
            [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "u", "detail": "high"}},
            ]
        ),
        call,
        Message.tool("c1", "ok"),
    ]
    assert to_responses(history) == [
        {"role": "system", "content": "sys"},
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "look"},
                {"type": "input_image", "image_url": "u", "detail": "high"},
            ],
        },
        {"role": "assistant", "content": "on it"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
    ]


def test_an_edited_model_turn_falls_back_to_canonical_items() -> None:
    turn = from_responses([REASONING, msg("assistant", "long text", "output_text"), fc("c1")])[0]
    edited = turn.replace(content=[turn.content[0], TextPart(text="cut"), TextPart(text="more")])  # type: ignore[index]
    assert to_responses([edited]) == [
        REASONING,
        {
            "type": "message",
            "role": "assistant",
            "content": [
                {"type": "output_text", "text": "cut"},
                {"type": "output_text", "text": "more"},
            ],
        },
        fc("c1"),
    ]


# -- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("items", "where"),
    [
        (
            [msg("user", "x"), {"type": "function_call", "name": "ls", "arguments": "{}"}],
            "message 1, field 'call_id'",
        ),
        ([fc("c", args={"a": 1})], "message 0, field 'arguments'"),  # type: ignore[arg-type]
        ([{"type": "function_call_output", "call_id": "c"}], "message 0, field 'output'"),
        ([{"content": "no role"}], "message 0, field 'type'"),
        ([{"role": "critic", "content": "x"}], "message 0, field 'role'"),
        ([{"role": "user"}], "message 0, field 'content'"),
        ([{"role": "user", "content": [{"text": "no type"}]}], "message 0, field 'content[0]'"),
        ([{"role": "user", "content": 3}], "message 0, field 'content'"),
        (["text"], "message 0"),
        ([{"type": 3}], "message 0, field 'type'"),
    ],
)
def test_malformed_items_name_the_item_and_field(items: list[Any], where: str) -> None:
    with pytest.raises(FormatError, match=f"^{re.escape(where)}:"):
        from_responses(items)


@pytest.mark.parametrize("value", ["hi", {"input": []}, 3])
def test_not_a_list_is_refused_with_a_hint(value: Any) -> None:
    with pytest.raises(FormatError, match="'input' list"):
        from_responses(value)


@pytest.mark.parametrize(
    ("message", "field"),
    [
        (
            Message(
                role="user", content="x", tool_calls=[ToolCall(id="c", name="f", arguments="{}")]
            ),
            "tool_calls",
        ),
        (Message(role="user", content="x", tool_call_id="c"), "tool_call_id"),
        (Message(role="tool", content="x"), "tool_call_id"),
    ],
)
def test_calls_on_the_wrong_role_are_refused_not_dropped(message: Message, field: str) -> None:
    with pytest.raises(FormatError, match=f"^message 1, field '{field}'"):
        to_responses([Message.user("hi"), message])


def test_writing_something_else_than_messages_is_refused() -> None:
    with pytest.raises(FormatError, match="message 1: expected a Message"):
        to_responses([Message.user("x"), {"role": "user"}])  # type: ignore[list-item]


# -- the detector -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (EVERY_SHAPE, True),
        ([out("c")], True),
        ([msg("user", "typed parts")], True),
        ({"model": "m", "input": [REASONING]}, True),
        ({"id": "resp_1", "output": [fc("c")]}, True),
        ([{"role": "user", "content": "plain"}], False),
        ([{"role": "user", "content": [{"type": "text", "text": "chat part"}]}], False),
        ([{"role": "assistant", "tool_calls": [{"id": "c", "type": "function"}]}], False),
        ({"messages": [{"role": "user", "content": "hi"}]}, False),
        ("text", False),
        ([1, 2], False),
    ],
)
def test_looks_like_responses(data: Any, expected: bool) -> None:
    assert looks_like_responses(data) is expected


def test_every_trace_is_chat_completions_and_its_items_are_responses() -> None:
    for name in trace_names():
        assert not looks_like_responses(load_trace(name)), name
        assert looks_like_responses(chat_to_items(load_trace(name))), name


# -- the validator -----------------------------------------------------------------------------


def test_validator_sees_responses_pairing_positionally() -> None:
    separated = [fc("c1"), msg("user", "interrupt"), out("c1")]
    kinds = [p.kind for p in check_history(from_responses(separated))]
    assert kinds == ["separated_result"]
    orphan = [msg("user", "x"), out("nobody")]
    assert [p.kind for p in check_history(from_responses(orphan))] == ["orphan_result"]


def test_opaque_items_between_groups_do_not_upset_the_validator() -> None:
    items = [
        msg("user", "go"),
        fc("c1"),
        out("c1"),
        {"type": "compaction", "encrypted_content": "x"},
        {"type": "unknown_thing"},
        REASONING,
        fc("c1"),  # ids re-used across turns, as real agents do
        out("c1"),
    ]
    assert check_history(from_responses(items)) == []


def test_aborted_codex_turn_is_reported_as_an_unanswered_call() -> None:
    history = from_responses(load_rollout("codex_with_escalation"))
    problems = check_history(history)
    assert [(p.kind, history[p.index].tool_call_ids) for p in problems] == [
        ("unanswered_call", ("call_esc_002",))
    ]


# -- every built-in strategy on Responses histories ---------------------------------------------

STRATEGIES: dict[str, Callable[[], CompactionStrategy]] = {
    "hiding": lambda: ToolResultHiding(preserve_recent_n=2),
    "schema1": lambda: Schema1Masking(window_turns=2),
    "truncation": lambda: ToolResultTruncation(max_chars=600, head_chars=200, tail_chars=200),
    "guard": lambda: ContextGuard(context_window=12_000, reserve_tokens=500),
    "pipeline": lambda: Pipeline(
        ToolResultTruncation(max_chars=600, head_chars=200, tail_chars=200), ToolResultHiding()
    ),
    "summary": lambda: LLMSummary(ScriptedLLM(*["Summary: did the work."] * 4)),
    "hiding-then-summary": lambda: HidingThenSummary(
        ScriptedLLM(*["Summary: did the work."] * 4), preserve_recent_n=1
    ),
}


def _responses_histories() -> dict[str, list[dict[str, Any]]]:
    out = {name: load_rollout(name) for name in ROLLOUTS}
    out.update((name, chat_to_items(load_trace(name))) for name in trace_names()[:6])
    return out


HISTORIES = _responses_histories()


def _outputs(items: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        if item.get("type") in ("function_call_output", "custom_tool_call_output"):
            found.setdefault(item["call_id"], []).append(item)
    return found


@pytest.mark.parametrize("strategy_name", list(STRATEGIES))
def test_strategy_output_is_valid_responses_input(
    strategy_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="ctxcompact.strategies.guard")
    changed = 0
    for name, items in HISTORIES.items():
        history = from_responses(items)
        snapshot = dump(history)
        result = run(STRATEGIES[strategy_name](), history, max_context_size=6_000, reserved=1_000)
        if "summary" in strategy_name:  # a summary is a new message: no subsequence check
            assert dump(history) == snapshot
            assert {p.kind for p in check_history(result or [])} <= {
                p.kind for p in check_history(history)
            }
        else:
            assert_safe(history, snapshot, result)
        if result is None:
            continue
        changed += 1
        written = to_responses(result)
        # no new problem on the items themselves, checked without ctxcompact's converter
        before = {p.split(": ", 1)[1] for p in item_problems(items)}
        assert {p.split(": ", 1)[1] for p in item_problems(written)} <= before, name
        assert to_responses(from_responses(written)) == written
        # kept reasoning items are byte-for-byte the originals, in the original order
        kept = [it for it in written if it.get("type") == "reasoning"]
        originals = [it for it in items if it.get("type") == "reasoning"]
        assert all(it in originals for it in kept), name
        assert [originals.index(it) for it in kept] == sorted(originals.index(it) for it in kept)
        # a rewritten output keeps its call id, its kind and its item keys
        before_outputs = _outputs(items)
        for call_id, outputs in _outputs(written).items():
            for output in outputs:
                assert call_id in before_outputs, name
                keys = {k for k in output if k != "output"}
                assert any(keys == {k for k in o if k != "output"} for o in before_outputs[call_id])
    assert changed > 0, f"{strategy_name} changed nothing: the test would prove nothing"


def test_hidden_outputs_keep_their_call_ids_and_ids() -> None:
    items = [msg("user", "go")]
    for k in range(6):
        items += [
            REASONING | {"id": f"rs_{k}"},
            fc(f"c{k}", id=f"fc_{k}"),
            out(f"c{k}", "x" * 500, id=f"o{k}"),
        ]
    result = run(ToolResultHiding(preserve_recent_n=2), from_responses(items))
    assert result is not None
    written = to_responses(result)
    assert len(written) == len(items)
    hidden = [(a, b) for a, b in zip(items, written, strict=True) if a != b]
    assert len(hidden) == 4
    for before, after in hidden:
        assert before["type"] == after["type"] == "function_call_output"
        assert (after["call_id"], after["id"]) == (before["call_id"], before["id"])
        assert len(after["output"]) < len(before["output"])


async def test_controller_compacts_a_responses_history() -> None:
    items = chat_to_items(load_trace(trace_names()[0]))
    history = from_responses(items)
    counter = HeuristicTokenCounter()
    controller = CompactionController(
        ToolResultHiding(preserve_recent_n=1),
        max_context_size=counter.count(history),
        reserved_context_size=1,
    )
    result = await controller.maybe_compact(history)
    assert result is not history
    assert counter.count(result) < counter.count(history)
    assert item_problems(to_responses(result)) == []


def test_same_history_from_chat_and_responses_compacts_the_same_tool_results() -> None:
    raw = load_trace(trace_names()[0])
    from_chat = run(ToolResultHiding(), from_openai(raw))
    from_items = run(ToolResultHiding(), from_responses(chat_to_items(raw)))
    assert from_chat is not None
    assert from_items is not None
    hidden_chat = [m.text for m in from_chat if m.role == "tool"]
    hidden_items = [m.text for m in from_items if m.role == "tool"]
    assert hidden_chat == hidden_items


def test_the_item_check_catches_what_the_api_rejects() -> None:
    assert item_problems([msg("user", "x"), out("c1")]) == [
        "item 1: output for 'c1' answers no call"
    ]
    assert item_problems([REASONING, msg("user", "x")]) == [
        "item 0: reasoning item without the item it preceded"
    ]
    assert item_problems([fc("c1"), msg("user", "x")]) == ["item 0: call 'c1' never answered"]
    assert item_problems([msg("user", "x"), REASONING, fc("c1")]) == []  # pending call


# -- generated histories ------------------------------------------------------------------------


def _pieces(message: Message) -> list[str]:
    """The message's texts, one per string content or text part (adjacent assistant messages
    become one model turn, so their texts are compared piece by piece)."""
    if isinstance(message.content, str):
        return [message.content]
    return [p.text for p in message.content or () if isinstance(p, TextPart)]


def _calls_results_texts(history: list[Message]) -> tuple[list[Any], list[Any], list[Any]]:
    calls = [(c.id, c.name, c.arguments) for m in history for c in m.tool_calls or ()]
    results = [(m.tool_call_id, m.text) for m in history if m.role == "tool"]
    texts = [(m.role, t) for m in history if m.role != "tool" for t in _pieces(m) if t]
    return calls, results, texts


@given(st.one_of(valid_histories(max_calls=4), invalid_histories().map(lambda pair: pair[0])))
@settings(max_examples=150, deadline=None)
def test_generated_histories_survive_as_items(history: list[Message]) -> None:
    misplaced = [
        p
        for p in check_history(history)
        if p.kind.startswith("misplaced") or "no tool_call_id" in p.message
    ]
    if misplaced:
        with pytest.raises(FormatError, match=f"^message {misplaced[0].index}, field 'tool_call"):
            to_responses(history)
        return
    items = to_responses(history)
    json.dumps(items)  # a real request body: plain JSON
    back = from_responses(items)
    assert to_responses(back) == items
    assert _calls_results_texts(back) == _calls_results_texts(history)
    # Responses has no message boundaries inside a model turn: merging adjacent assistant
    # messages may only ever fix a pairing problem, never add one
    assert {p.kind for p in check_history(back)} <= {p.kind for p in check_history(history)}
