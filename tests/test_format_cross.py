"""The cross-format law: OpenAI -> history -> Anthropic -> history -> OpenAI keeps every tool
call (id, name, arguments) and every text.

Arguments are compared as parsed JSON: Anthropic stores them as an object, so whitespace and
key spacing are re-serialised (``'{"a":1}'`` comes back as ``'{"a": 1}'``), and empty arguments
come back as ``{}``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings

from ctxcompact import Message, from_anthropic, from_openai, to_anthropic, to_openai
from ctxcompact.exceptions import FormatError
from tests.helpers.gen import valid_histories
from tests.helpers.traces import load_trace, trace_names

Summary = tuple[list[str], list[tuple[str, str, str | None, list[tuple[str, str, Any]]]]]


def _arguments(text: str) -> Any:
    return json.loads(text) if text.strip() else {}


def _summary(history: list[Message]) -> Summary:
    """System texts, then per other message: role, text, tool_call_id, calls."""
    system = [m.text for m in history if m.role in ("system", "developer")]
    rest = [
        (
            m.role,
            m.text,
            m.tool_call_id,
            [(c.id, c.name, _arguments(c.arguments)) for c in m.tool_calls or ()],
        )
        for m in history
        if m.role not in ("system", "developer")
    ]
    return [t for t in "\n".join(system).split("\n") if t], rest


def _through_anthropic(raw: list[dict[str, Any]]) -> list[dict[str, Any]]:
    system, messages = to_anthropic(from_openai(raw))
    json.dumps([system, messages])  # a real request body: plain JSON
    return to_openai(from_anthropic(messages, system=system))


@pytest.mark.parametrize("name", trace_names())
def test_trace_keeps_calls_and_texts_through_anthropic(name: str) -> None:
    raw = load_trace(name)
    back = _through_anthropic(raw)
    assert _summary(from_openai(back)) == _summary(from_openai(raw))
    assert len(back) == len(raw)  # a trace has one leading system message at most


def test_the_law_compares_something() -> None:
    raw = load_trace(trace_names()[0])
    back = _through_anthropic(raw)
    call = next(m for m in back if m.get("tool_calls"))["tool_calls"][0]
    call["function"]["arguments"] = json.dumps({"changed": True})
    assert _summary(from_openai(back)) != _summary(from_openai(raw))


def _first_bad_arguments(history: list[Message]) -> tuple[int, int] | None:
    for index, message in enumerate(history):
        for j, call in enumerate(message.tool_calls or ()):
            try:
                _arguments(call.arguments)
            except ValueError:
                return index, j
    return None


@given(valid_histories(max_calls=4))
@settings(max_examples=100, deadline=None)
def test_generated_histories_keep_calls_and_texts(history: list[Message]) -> None:
    raw = to_openai(history)
    bad = _first_bad_arguments(history)
    if bad is not None:
        with pytest.raises(FormatError) as info:
            to_anthropic(history)
        assert (info.value.index, info.value.field) == (bad[0], f"tool_calls[{bad[1]}].arguments")
        return
    back = _through_anthropic(raw)
    assert _summary(from_openai(back)) == _summary(history)
