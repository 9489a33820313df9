"""The format readers on mutated real conversations: a malformed input raises FormatError
naming the item (never TypeError, KeyError, AttributeError...), and an accepted one
round-trips exactly (up to the normalisations docs/guides/history-and-formats.md documents).

Mutants are windows of the Codex rollouts and the 17 traces (as Responses items, OpenAI
messages and Anthropic messages) with one to three random changes at any depth
(``tests/helpers/mutate.py``; seeded, so a failure names a reproducible mutant number).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from ctxcompact import (
    from_anthropic,
    from_openai,
    from_responses,
    to_anthropic,
    to_openai,
    to_responses,
)
from ctxcompact.exceptions import FormatError
from tests.helpers.mutate import mutants
from tests.helpers.responses_items import ROLLOUTS, chat_to_items, load_rollout
from tests.helpers.traces import load_trace, trace_names


def fuzz(
    corpus: list[list[Any]],
    count: int,
    read: Callable[[list[Any]], Any],
    same: Callable[[list[Any], Any], bool],
    *,
    seed: int = 18,
) -> tuple[int, int]:
    """``(accepted, refused)`` over ``count`` mutants; fails on anything else."""
    accepted = refused = 0
    wrong: list[str] = []
    for number, items in mutants(corpus, count, seed=seed):
        try:
            result = read(items)
        except FormatError as exc:
            refused += 1
            if exc.index is None:
                wrong.append(f"mutant {number}: {exc} names no item")
            elif exc.field is None and isinstance(items[exc.index], dict):
                wrong.append(f"mutant {number}: {exc} names no field")
            continue
        except Exception as exc:
            wrong.append(f"mutant {number}: {type(exc).__name__}: {exc}")
            continue
        accepted += 1
        if not same(items, result):
            wrong.append(f"mutant {number}: accepted, but does not round-trip")
    assert not wrong, f"{len(wrong)} of {count}:\n" + "\n".join(wrong[:20])
    return accepted, refused


def test_from_responses_raises_only_format_error_on_10000_mutants() -> None:
    corpus = [load_rollout(n) for n in ROLLOUTS]
    corpus += [chat_to_items(load_trace(n)) for n in trace_names()]
    accepted, refused = fuzz(
        corpus, 10_000, from_responses, lambda items, history: to_responses(history) == items
    )
    assert accepted > 1_000  # both paths exercised
    assert refused > 1_000


def _typed_calls(items: list[Any]) -> list[Any]:
    """The documented normalisation: a tool call without ``type`` gets ``"function"``."""
    out = copy.deepcopy(items)
    for message in out:
        if isinstance(message, dict) and isinstance(message.get("tool_calls"), list):
            for call in message["tool_calls"]:
                if isinstance(call, dict):
                    call.setdefault("type", "function")
    return out


def test_from_openai_raises_only_format_error_on_mutants() -> None:
    corpus = [load_trace(n) for n in trace_names()]
    accepted, refused = fuzz(
        corpus, 3_000, from_openai, lambda items, h: to_openai(h) == _typed_calls(items)
    )
    assert accepted > 300
    assert refused > 300


def _results_first(items: list[Any]) -> list[Any]:
    """The documented normalisation: ``tool_result`` blocks before a user message's others."""
    out = copy.deepcopy(items)
    for message in out:
        content = message.get("content") if isinstance(message, dict) else None
        if message and message.get("role") == "user" and isinstance(content, list):

            def is_result(block: Any) -> bool:
                return isinstance(block, dict) and block.get("type") == "tool_result"

            message["content"] = [b for b in content if is_result(b)] + [
                b for b in content if not is_result(b)
            ]
    return out


def test_from_anthropic_raises_only_format_error_on_mutants() -> None:
    corpus = [to_anthropic(from_openai(load_trace(n)))[1] for n in trace_names()]
    accepted, refused = fuzz(
        corpus,
        3_000,
        from_anthropic,
        lambda items, h: to_anthropic(h)[1] == _results_first(items),
    )
    assert accepted > 300
    assert refused > 300


def test_from_anthropic_system_raises_only_format_error_on_mutants() -> None:
    system = [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}]
    corpus = [[system, {"role": "user", "content": "hi"}]]

    def read(items: list[Any]) -> Any:
        return from_anthropic(items[1:], system=items[0] if items else None)

    def same(items: list[Any], history: Any) -> bool:
        return to_anthropic(history) == (items[0] if items else None, items[1:])

    # The system parameter is not an item: errors about it name its field, not an index.
    accepted = refused = 0
    unnamed = []
    for number, items in mutants(corpus, 1_000, seed=3, window=2):
        try:
            history = read(items)
        except FormatError as exc:
            refused += 1
            if exc.field is None and exc.index is None:
                unnamed.append((number, str(exc)))
            continue
        accepted += 1
        assert same(items, history) or items[0] in ("", []), number
    assert unnamed == []
    assert accepted > 100
    assert refused > 100


# -- what the fuzzing found in from_responses -----------------------------------------------


@pytest.mark.parametrize(
    ("item", "field"),
    [
        # An input_text part whose text is not a string was accepted (kept as an odd part).
        (
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": 3}]},
            "content[0].text",
        ),
        (
            {"type": "message", "role": "assistant", "content": [{"type": "output_text"}]},
            "content[0].text",
        ),
        # A role that is a list raised TypeError (unhashable).
        ({"type": "message", "role": ["user"], "content": "hi"}, "role"),
        (
            {"type": "function_call_output", "call_id": "c", "output": [{"type": "input_text"}]},
            "output[0].text",
        ),
    ],
)
def test_a_malformed_item_names_its_index_and_field(item: dict[str, Any], field: str) -> None:
    ok = {"type": "message", "role": "user", "content": "first"}
    with pytest.raises(FormatError) as caught:
        from_responses([ok, item])
    assert caught.value.index == 1
    assert caught.value.field == field


@pytest.mark.parametrize(
    "item",
    [
        # A part of type "text" without text raised KeyError; one of type "" came back as
        # an image; an item of type "" came back as another item.
        {"type": "message", "role": "user", "content": [{"type": "text"}]},
        {"type": "message", "role": "user", "content": [{"type": "", "x": 1}]},
        {"type": "", "id": "rs_1", "summary": []},
        {"type": "text", "text": "an item of a type no API has"},
    ],
)
def test_odd_but_well_formed_items_are_kept_verbatim(item: dict[str, Any]) -> None:
    items = [item]
    assert to_responses(from_responses(items)) == items
