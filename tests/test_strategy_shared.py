"""The shared helpers: placeholders, what one saves, the fast copy, the group scans and the
batching of a boundary. The error heuristic has its own tests: ``test_strategy_errors.py``."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxcompact import (
    HeuristicTokenCounter,
    Message,
    TextPart,
    TiktokenCounter,
    TokenCounter,
    tool_groups,
)
from ctxcompact.exceptions import ConfigError
from ctxcompact.kit import (
    HEURISTIC_TOKENS_PER_EXTRA_BYTE,
    MAX_CHARS_PER_TOKEN,
    SCHEMA1_FIELDS,
    PlaceholderCost,
    batched_boundary,
    group_results,
    old_groups_end,
    placeholder_pattern,
    render_placeholder,
    validate_template,
    with_content,
)
from ctxcompact.strategies import HIDDEN_PLACEHOLDER, KLIP13_PLACEHOLDER, SCHEMA1_PLACEHOLDER
from tests.helpers.gen import invalid_histories, tool, valid_histories


def test_templates() -> None:
    validate_template(SCHEMA1_PLACEHOLDER, SCHEMA1_FIELDS, key="t")
    validate_template("no fields {{literal}}", SCHEMA1_FIELDS, key="t")
    with pytest.raises(ConfigError, match="unknown field"):
        validate_template("{tool_call_id} {0}", SCHEMA1_FIELDS, key="t")
    text = render_placeholder(SCHEMA1_PLACEHOLDER, tool_call_id="c 1", tool_name="", chars=42)
    assert "tool=unknown" in text
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


# -- PlaceholderCost ----------------------------------------------------------------------------


class WholeMessageCounter:
    """A counter of its own: tokens of the message's JSON, four characters each."""

    def count(self, messages: Iterable[Message]) -> int:
        return sum(self.count_message(m) for m in messages)

    def count_message(self, message: Message) -> int:
        return -(-len(message.model_dump_json()) // 4)


class SubclassedCounter(HeuristicTokenCounter):
    """A subclass may count a message its own way: it gets the generic path."""

    def count_message(self, message: Message) -> int:
        return 2 * super().count_message(message)


COUNTERS: list[TokenCounter] = [
    HeuristicTokenCounter(),
    HeuristicTokenCounter(chars_per_token=0.5),
    TiktokenCounter(),
    WholeMessageCounter(),
    SubclassedCounter(),
]
PLACEHOLDERS = [HIDDEN_PLACEHOLDER, KLIP13_PLACEHOLDER, "[x]", "长长长长长"]
TEXTS = st.text(alphabet=st.sampled_from("ab c\n{}:é表😀"), max_size=120) | st.text(max_size=60)


@pytest.mark.parametrize("counter", COUNTERS, ids=lambda c: type(c).__name__)
@settings(max_examples=60, deadline=None)
@given(text=TEXTS, placeholder=st.sampled_from(PLACEHOLDERS))
def test_saved_is_the_difference_of_the_two_message_counts(
    counter: TokenCounter, text: str, placeholder: str
) -> None:
    cost = PlaceholderCost(counter)
    message = tool("call_1", text, name="reader")
    as_placeholder = with_content(message, placeholder)
    expected = counter.count_message(message) - counter.count_message(as_placeholder)
    assert cost.saved(message, placeholder, cost.tokens(placeholder)) == expected
    assert cost.shrinks(message, placeholder) == (expected > 0)
    # List content goes through the whole-message count, whatever the counter.
    listed = tool("call_1", [{"type": "text", "text": text}])
    expected = counter.count_message(listed) - counter.count_message(
        with_content(listed, placeholder)
    )
    assert cost.saved(listed, placeholder, cost.tokens(placeholder)) == expected
    assert cost.shrinks(listed, placeholder) == (expected > 0)


@pytest.mark.parametrize("counter", COUNTERS[:3], ids=["heuristic", "heuristic-0.5", "tiktoken"])
@settings(max_examples=200, deadline=None)
@given(
    size=st.integers(0, 400),
    fill=st.sampled_from("y é表😀"),
    call_id=st.text(alphabet="abc_0123é", min_size=1, max_size=30),
)
def test_shrinks_settles_rendered_placeholders_exactly(
    counter: TokenCounter, size: int, fill: str, call_id: str
) -> None:
    """Around the bounds: ASCII or not, every length, placeholders with non-ASCII fields."""
    cost = PlaceholderCost(counter)
    placeholder = render_placeholder(
        SCHEMA1_PLACEHOLDER, tool_call_id=call_id, tool_name="读取", chars=size
    )
    message = tool(call_id, "y" * size + fill)
    expected = counter.count_message(message) > counter.count_message(
        with_content(message, placeholder)
    )
    assert cost.shrinks(message, placeholder) == expected


@pytest.mark.parametrize(
    "counter", [HeuristicTokenCounter(), HeuristicTokenCounter(chars_per_token=0.5)]
)
@settings(max_examples=150, deadline=None)
@given(text=TEXTS, placeholder=st.sampled_from(PLACEHOLDERS))
def test_heuristic_char_bound_is_exact_enough(
    counter: HeuristicTokenCounter, text: str, placeholder: str
) -> None:
    """Above the bound a string always saves; an ASCII one saves exactly above it."""
    cost = PlaceholderCost(counter)
    tokens = cost.tokens(placeholder)
    bound = cost.char_bound(tokens)
    saves = cost.saved(tool("a", text), placeholder, tokens) > 0
    if len(text) > bound:
        assert saves
    if cost.ascii_by_length and text.isascii():
        assert saves == (len(text) > bound)


def test_char_bound_per_counter() -> None:
    heuristic = PlaceholderCost(HeuristicTokenCounter())
    assert heuristic.tokens(HIDDEN_PLACEHOLDER) == 8
    assert heuristic.tokens(KLIP13_PLACEHOLDER) == 15
    assert heuristic.char_bound(15) == 48  # 15 tokens of 3.25 ASCII characters
    assert heuristic.ascii_by_length
    # Below one character a token, a non-ASCII character (>= 1 token) packs more: rate 1.
    slow = PlaceholderCost(HeuristicTokenCounter(chars_per_token=0.5))
    assert slow.char_bound(15) == 15
    assert not slow.ascii_by_length
    for other in (TiktokenCounter(), WholeMessageCounter(), SubclassedCounter()):
        cost = PlaceholderCost(other)
        assert cost.char_bound(10) == 10 * MAX_CHARS_PER_TOKEN
        assert not cost.ascii_by_length
    # A counter of its own prices the placeholder as a whole tool message.
    whole = PlaceholderCost(WholeMessageCounter())
    assert whole.tokens("[x]") == WholeMessageCounter().count_message(Message.tool("", "[x]"))


def test_no_character_costs_more_than_the_bound_per_extra_byte() -> None:
    """``PlaceholderCost.shrinks`` relies on it: characters of every range, on 200 copies
    (``ceil`` and float sums add at most one token to the 200 copies' count)."""
    count = HeuristicTokenCounter().count_text
    worst = 0.0
    # The weights are constant over ranges at least 256 wide: every 5th character hits each.
    for code in [*range(0x80, 0x10000, 5), *range(0x10000, 0x110000, 97)]:
        char = chr(code)
        extra = len(char.encode("utf-8", "surrogatepass")) - 1
        tokens = count(char * 200)
        assert tokens <= 200 * HEURISTIC_TOKENS_PER_EXTRA_BYTE * extra + 1, hex(code)
        worst = max(worst, tokens / 200 / extra)
    assert worst > HEURISTIC_TOKENS_PER_EXTRA_BYTE - 0.05  # not a loose bound either
