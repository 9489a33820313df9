"""ToolResultHiding: KLIP-13 §3 rules, edge cases and batching."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

import pytest

from ctxcompact import (
    HeuristicTokenCounter,
    Message,
    TextPart,
    TiktokenCounter,
    TokenCounter,
    from_openai,
)
from ctxcompact.exceptions import ConfigError
from ctxcompact.strategies import HIDDEN_PLACEHOLDER, KLIP13_PLACEHOLDER, ToolResultHiding
from tests.helpers.gen import assistant, call, system, tool, user
from tests.helpers.strategy_checks import assert_content_only, assert_safe, ctx_for, dump
from tests.helpers.traces import load_trace, trace_names

PLACEHOLDER = "[old tool result hidden]"


def groups(n: int, *, calls: int = 1) -> list[Message]:
    out: list[Message] = [system("sys"), user("go")]
    for k in range(n):
        ids = [f"g{k}_{j}" for j in range(calls)]
        out.append(assistant(f"step {k}", *(call(i, "bash") for i in ids)))
        out.extend(tool(i, f"result of {i} " + "r" * 60) for i in ids)
    out.append(assistant("done"))
    return out


def run(
    strategy: ToolResultHiding,
    history: Sequence[Message],
    *,
    token_counter: TokenCounter | None = None,
) -> Any:
    """``strategy.compact`` on a fresh context whose counter is ``token_counter``."""
    ctx = ctx_for(history)
    if token_counter is not None:
        ctx = replace(ctx, token_counter=token_counter, token_count=token_counter.count(history))
    return asyncio.run(strategy.compact(ctx))


def hidden(history: list[Message], **params: Any) -> list[int]:
    snap = dump(history)
    out = run(ToolResultHiding(**params), history)
    assert_safe(history, snap, out)
    if out is None:
        return []
    changed = assert_content_only(history, out)
    assert all(out[i].content == params.get("placeholder", PLACEHOLDER) for i in changed)
    return changed


def results(history: list[Message]) -> list[int]:
    return [i for i, m in enumerate(history) if m.role == "tool"]


def test_default_placeholder_is_english_and_klip13s_text_is_a_preset() -> None:
    assert HIDDEN_PLACEHOLDER == PLACEHOLDER
    assert ToolResultHiding().placeholder == PLACEHOLDER
    assert KLIP13_PLACEHOLDER == "<system>历史 tool_call已隐藏</system>"
    h = groups(8)
    assert hidden(h, placeholder=KLIP13_PLACEHOLDER) == results(h)[:3]


def test_results_of_the_last_five_groups_stay() -> None:
    h = groups(8)
    assert hidden(h) == results(h)[:3]


def test_no_more_groups_than_preserved_is_a_no_op() -> None:
    assert run(ToolResultHiding(), groups(5)) is None
    assert run(ToolResultHiding(), [user("hi"), assistant("hello")]) is None
    assert run(ToolResultHiding(), []) is None


def test_parallel_calls_are_hidden_or_kept_whole() -> None:
    h = groups(4, calls=3)
    assert hidden(h, preserve_recent_n=2) == results(h)[:6]


def test_preserve_zero_hides_every_group() -> None:
    h = groups(3)
    assert hidden(h, preserve_recent_n=0) == results(h)


def test_tool_call_id_and_extras_are_kept() -> None:
    h = [user("go"), assistant(None, call("a")), tool("a", "boom" * 20, is_error=True)]
    h += [assistant(None, call("b")), tool("b", "ok")]
    out = run(ToolResultHiding(preserve_recent_n=1), h)
    assert out[2].tool_call_id == "a"
    assert out[2].is_error
    assert out[2].model_extra == {"is_error": True}
    assert out[4] is h[4]


def test_list_content_is_hidden_too() -> None:
    h = [user("go"), assistant(None, call("a")), tool("a", [{"type": "text", "text": "x" * 50}])]
    h += [
        assistant(None, call("b")),
        tool("b", [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}]),
    ]
    h += [assistant(None, call("c")), tool("c", "new")]
    assert hidden(h, preserve_recent_n=1) == [2, 4]


def test_already_hidden_results_are_not_hidden_again() -> None:
    h = groups(8)
    out = run(ToolResultHiding(), h)
    assert out is not None
    assert run(ToolResultHiding(), out) is None
    # A placeholder in list form (KLIP-13 writes it as a content list) counts as hidden too.
    h2 = [user("go"), assistant(None, call("a")), tool("a", [TextPart(text=PLACEHOLDER)])]
    h2 += [assistant(None, call("b")), tool("b", "x")]
    assert run(ToolResultHiding(preserve_recent_n=1), h2) is None


def test_growing_history_hides_only_the_newly_old_group() -> None:
    out = run(ToolResultHiding(), groups(8))
    more = [*out[:-1], assistant(None, call("z")), tool("z", "zz"), assistant("done")]
    assert hidden(more) == [results(more)[3]]


def test_orphans_and_separated_results_are_left_alone() -> None:
    h = [user("go"), tool("orphan", "o" * 80), assistant(None, call("a"), call("b"))]
    h += [tool("a", "x" * 80), user("interrupt"), tool("b", "separated" * 10)]
    h += [assistant(None, call("c")), tool("c", "y")]
    assert hidden(h, preserve_recent_n=1) == [3]


def test_reused_ids_are_positional() -> None:
    h = [user("go")]
    for k in range(4):
        h += [assistant(None, call("same")), tool("same", f"result {k} " + "r" * 40)]
    assert hidden(h, preserve_recent_n=1) == [2, 4, 6]


def one_old_result(content: str | list[Any]) -> list[Message]:
    return [user("go"), assistant(None, call("a")), tool("a", content)]


@pytest.mark.parametrize(
    ("placeholder", "chars", "tokens"), [(PLACEHOLDER, 24, 8), (KLIP13_PLACEHOLDER, 32, 15)]
)
def test_a_result_is_hidden_only_when_the_placeholder_costs_fewer_tokens(
    placeholder: str, chars: int, tokens: int
) -> None:
    # KLIP-13's placeholder is 32 characters but 15 heuristic tokens, as much as 48 ASCII
    # characters. Every path agrees: the fused one, hidden_indices and the batched one.
    counter = HeuristicTokenCounter()
    limit = counter.count_text(placeholder)
    assert (len(placeholder), limit) == (chars, tokens)
    decided = {True: 0, False: 0}
    for size in range(1, 90):
        for text in ("y" * size, "表" * size, "é" * size, "y" * size + "表"):
            h = [*one_old_result(text), assistant(None, call("b")), tool("b", "newest")]
            shrinks = counter.count_text(text) > limit
            decided[shrinks] += 1
            expected = [2] if shrinks else []
            strategy = ToolResultHiding(preserve_recent_n=1, placeholder=placeholder)
            assert hidden(h, preserve_recent_n=1, placeholder=placeholder) == expected, text
            assert strategy.hidden_indices(h) == expected
            assert hidden(h, preserve_recent_n=1, placeholder=placeholder, batch_turns=1) == (
                expected
            ), text
    assert decided[True] > 50
    assert decided[False] > 50
    # Longer in characters than the placeholder yet no more tokens: kept; 20 Chinese
    # characters (27 tokens) are fewer characters than either placeholder, yet hidden.
    newest = [assistant(None, call("b")), tool("b", "newest")]
    params = {"preserve_recent_n": 1, "placeholder": placeholder}
    assert hidden([*one_old_result("y" * (chars + 1)), *newest], **params) == []
    assert hidden([*one_old_result("表" * 20), *newest], **params) == [2]


def test_small_list_and_empty_results_stay() -> None:
    h = one_old_result([{"type": "text", "text": "ok"}])
    h += [assistant(None, call("b")), tool("b", "")]
    h += [assistant(None, call("c")), tool("c", "newest")]
    assert hidden(h, preserve_recent_n=1) == []


class CharCounter:
    """A counter of its own (not a built-in): one token per character of string content."""

    def count(self, messages: Iterable[Message]) -> int:
        return sum(self.count_message(m) for m in messages)

    def count_message(self, message: Message) -> int:
        content = message.content
        return 1 + (len(content) if isinstance(content, str) else 100 * len(content or ()))


@pytest.mark.parametrize("counter", [HeuristicTokenCounter(), TiktokenCounter(), CharCounter()])
def test_hiding_never_makes_a_trace_result_bigger(counter: TokenCounter) -> None:
    """Under each counter, on every trace: hidden results shrink, kept old ones would not."""
    strategy = ToolResultHiding(preserve_recent_n=0)
    seen_kept = 0
    for name in trace_names():
        history = from_openai(load_trace(name))
        out = run(strategy, history, token_counter=counter)
        if out is None:
            continue
        assert strategy.hidden_indices(history, token_counter=counter) == [
            i for i, (a, b) in enumerate(zip(history, out, strict=True)) if a is not b
        ]
        for before, after in zip(history, out, strict=True):
            if before is not after:
                assert counter.count_message(after) < counter.count_message(before), name
            elif before.role == "tool" and before.content != PLACEHOLDER:
                seen_kept += 1
                as_hidden = before.replace(content=PLACEHOLDER)
                assert counter.count_message(as_hidden) >= counter.count_message(before), name
    assert seen_kept > 0


def test_pending_calls_count_as_the_newest_group() -> None:
    h = [*groups(3)[:-1], assistant(None, call("pending"))]
    assert hidden(h, preserve_recent_n=1) == results(h)


def test_custom_placeholder() -> None:
    h = groups(3)
    assert hidden(h, preserve_recent_n=1, placeholder="[hidden]") == results(h)[:2]


def test_batch_turns_hides_in_steps() -> None:
    for n in range(20):
        h = groups(n)
        hideable = max(0, n - 5)
        assert len(hidden(h, batch_turns=4)) == hideable - hideable % 4


def test_clear_at_least_counts_the_tokens_freed_from_the_oldest_group() -> None:
    # What hiding frees is a result's tokens minus its placeholder's, not the result's whole
    # count (which would move the boundary about three times as often here).
    counter = HeuristicTokenCounter()
    result = tool("g0_0", "result of g0_0 " + "r" * 60)
    as_hidden = result.replace(content=PLACEHOLDER)
    freed = counter.count_message(result) - counter.count_message(as_hidden)
    assert 0 < 3 * freed < 2 * counter.count_message(result)
    for n in range(6, 20):
        h = groups(n)
        hideable = n - 5
        assert len(hidden(h, clear_at_least=3 * freed)) == hideable - hideable % 3


@pytest.mark.parametrize(
    ("params", "key"),
    [
        ({"preserve_recent_n": -1}, "preserve_recent_n"),
        ({"preserve_recent_n": 2.5}, "preserve_recent_n"),
        ({"batch_turns": -3}, "batch_turns"),
        ({"clear_at_least": -1}, "clear_at_least"),
        ({"placeholder": ""}, "placeholder"),
    ],
)
def test_bad_parameters_raise_config_error(params: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        ToolResultHiding(**params)
    assert info.value.key == key
