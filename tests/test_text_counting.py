"""Counting a bare string is an ability (``TextTokenCounter``, ``counts_text``), not a type.

A counter of one's own that counts strings, a subclass that keeps the built-in text
counting, and replay's ``MemoCounter`` around a built-in all take the text-only path of
``PlaceholderCost``, the one production takes; a subclass that counts messages its own way
does not. Whatever the path, hiding and masking give the same output.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from ctxcompact import (
    HeuristicTokenCounter,
    Message,
    TextTokenCounter,
    TiktokenCounter,
    TokenCounter,
    counts_text,
    from_openai,
)
from ctxcompact.kit import HIDDEN_PLACEHOLDER, SCHEMA1_PLACEHOLDER, PlaceholderCost
from ctxcompact.replay import MemoCounter
from ctxcompact.strategies import Schema1Masking, ToolResultHiding
from tests.helpers.gen import tool
from tests.helpers.traces import load_trace, trace_names


class CharCounter:
    """A counter of one's own: a message costs 3 plus a token per 3 characters of its texts."""

    def __init__(self) -> None:
        self.text_calls = 0
        self.message_calls = 0

    def count_text(self, text: str) -> int:
        self.text_calls += 1
        return -(-len(text) // 3)

    def count_message(self, message: Message) -> int:
        self.message_calls += 1
        return 3 + sum(self.count_text(t) for t in _texts(message))

    def count(self, messages: Iterable[Message]) -> int:
        return sum(self.count_message(m) for m in messages)


class WholeCharCounter:
    """The same counts as :class:`CharCounter`, without the ability."""

    def __init__(self) -> None:
        self.inner = CharCounter()

    def count_message(self, message: Message) -> int:
        return self.inner.count_message(message)

    def count(self, messages: Iterable[Message]) -> int:
        return self.inner.count(messages)


def _texts(message: Message) -> list[str]:
    texts = [message.text or ""]
    for call in message.tool_calls or ():
        texts += [call.name, call.arguments]
    return texts


class KeepsTheHeuristic(HeuristicTokenCounter):
    """A subclass that changes nothing about counting: the ability is inherited whole."""


class DoublesMessages(HeuristicTokenCounter):
    """Counts a message differently from what its inherited ``count_text`` says."""

    def count_message(self, message: Message) -> int:
        return 2 * super().count_message(message)


class RestatesTheText(DoublesMessages):
    """Overrides both: a text costs double too, so the promise holds again."""

    def count_text(self, text: str) -> int:
        return 2 * super().count_text(text)


def test_counts_text_is_the_ability_not_the_type() -> None:
    able: list[TokenCounter] = [
        HeuristicTokenCounter(),
        TiktokenCounter(),
        CharCounter(),
        KeepsTheHeuristic(),
        RestatesTheText(),
        MemoCounter(HeuristicTokenCounter()),
        MemoCounter(CharCounter()),
    ]
    unable: list[TokenCounter] = [
        WholeCharCounter(),
        DoublesMessages(),
        MemoCounter(WholeCharCounter()),
        MemoCounter(DoublesMessages()),
    ]
    assert [counts_text(c) for c in able] == [True] * len(able)
    assert [counts_text(c) for c in unable] == [False] * len(unable)
    # isinstance sees the method only: DoublesMessages has one, and breaks its promise.
    assert isinstance(DoublesMessages(), TextTokenCounter)
    assert not isinstance(WholeCharCounter(), TextTokenCounter)


def test_memo_forwards_the_inner_counters_very_method() -> None:
    inner = HeuristicTokenCounter(chars_per_token=4.0)
    memo = MemoCounter(inner)
    assert counts_text(memo)
    assert memo.count_text == inner.count_text
    assert memo.count_text("x" * 40) == 10
    assert not hasattr(MemoCounter(WholeCharCounter()), "count_text")


def test_a_counter_of_ones_own_takes_the_text_path() -> None:
    counter = CharCounter()
    cost = PlaceholderCost(counter)
    message = tool("c1", "x" * 300)
    tokens = cost.tokens(HIDDEN_PLACEHOLDER)
    counter.text_calls = counter.message_calls = 0
    assert cost.saved(message, HIDDEN_PLACEHOLDER, tokens) == 100 - tokens
    assert cost.shrinks(message, "[x]")
    assert counter.message_calls == 0  # texts only, never a whole message
    assert counter.text_calls > 0
    # The same verdicts as the whole-message path of a counter without the ability.
    whole = PlaceholderCost(WholeCharCounter())
    assert whole.saved(message, HIDDEN_PLACEHOLDER, whole.tokens(HIDDEN_PLACEHOLDER)) == (
        100 - tokens
    )


@pytest.mark.parametrize(
    "counter",
    [KeepsTheHeuristic(), MemoCounter(HeuristicTokenCounter())],
    ids=["subclass", "memo"],
)
def test_the_heuristic_held_by_a_subclass_or_a_memo_keeps_its_bounds(
    counter: TokenCounter,
) -> None:
    """Replay counts through MemoCounter: it must take the heuristic's own path."""
    own = PlaceholderCost(HeuristicTokenCounter())
    other = PlaceholderCost(counter)
    assert other.ascii_by_length
    assert own.ascii_by_length
    assert other.char_bound(15) == own.char_bound(15) == 48
    assert other.tokens(SCHEMA1_PLACEHOLDER) == own.tokens(SCHEMA1_PLACEHOLDER)


def test_tiktoken_behind_a_memo_keeps_its_bound() -> None:
    memo = PlaceholderCost(MemoCounter(TiktokenCounter()))
    assert memo.char_bound(10) == PlaceholderCost(TiktokenCounter()).char_bound(10)
    assert memo.shrinks(tool("c1", "word " * 500), HIDDEN_PLACEHOLDER)


COUNTER_PAIRS = {
    # (the counter production uses, another counter with the same counts)
    "memo": (HeuristicTokenCounter, lambda: MemoCounter(HeuristicTokenCounter())),
    "subclass": (HeuristicTokenCounter, KeepsTheHeuristic),
    "own-vs-whole": (CharCounter, WholeCharCounter),
}


@pytest.mark.parametrize("pair", sorted(COUNTER_PAIRS))
def test_hiding_and_masking_give_the_same_output_on_every_trace(pair: str) -> None:
    first, second = COUNTER_PAIRS[pair]
    strategies = [
        ToolResultHiding(preserve_recent_n=2),
        ToolResultHiding(preserve_recent_n=1, clear_at_least=2_000),
        Schema1Masking(window_turns=2),
        Schema1Masking(window_turns=1, clear_at_least=2_000, batch_turns=3),
    ]
    changed = 0
    for name in trace_names():
        history = from_openai(load_trace(name))
        for strategy in strategies:
            run = strategy.hide if isinstance(strategy, ToolResultHiding) else strategy.mask
            a = run(history, token_counter=first())
            b = run(history, token_counter=second())
            assert a == b, (pair, name, strategy)
            changed += a is not None
    assert changed > 20  # the strategies did rewrite the traces
