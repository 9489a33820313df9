"""No input can stall ctxcompact: every expression that runs on message content is linear.

Two kinds of test. Equivalence: each expression that was rewritten to be linear accepts
exactly what the one it replaced accepted (on every tool result of the 17 traces, on random
input, and Schema 1's output on every trace is byte for byte what it was). Growth: each
matcher that runs on content, fed adversarial input made of its own literals, grows with the
input like a linear scan does (a ratio of times beside a linear baseline's ratio on the same
inputs, never seconds: see ``tests/internals/redos.py``).

White-box: the expressions are private, and each is fed directly, not through a strategy.
"""

from __future__ import annotations

import string
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ctxcompact import Message, from_openai
from ctxcompact._tokens.windows import parse_context_error
from ctxcompact.kit import _errors, placeholder_pattern, render_placeholder
from ctxcompact.store import MemoryStore, StoredOriginal, execute_recall
from ctxcompact.strategies import Schema1Masking, _schema1, _summary
from tests.helpers.strategy_checks import run
from tests.helpers.traces import load_trace, trace_names
from tests.internals.redos import (
    BUILTIN_TEMPLATES,
    KNOWN_ATTACKS,
    OLD_ANALYSIS_TAG,
    RECALL_ATTACKS,
    Attack,
    ContentMatcher,
    calibrated,
    content_matchers,
    growth,
    old_error_reason,
    old_parse_context_error,
    old_placeholder_pattern,
    trace_tool_texts,
)

# -- equivalence: the linear expressions accept what the old ones accepted ---------------------


def test_every_trace_tool_result_gets_the_same_placeholder_verdict() -> None:
    texts = trace_tool_texts()
    assert len(texts) > 1_000
    for name, template in BUILTIN_TEMPLATES.items():
        new, old = placeholder_pattern(template).fullmatch, old_placeholder_pattern(template)
        rendered = [
            render_placeholder(template, tool_call_id=f"call_{k}", tool_name="bash", chars=len(t))
            for k, t in enumerate(texts)
        ]
        for text in (*texts, *rendered):
            assert bool(new(text)) == bool(old.fullmatch(text)), (name, text[:200])
        assert all(new(text) for text in rendered), name


def test_every_trace_tool_result_gets_the_same_error_verdict() -> None:
    texts = trace_tool_texts()
    verdicts = [_errors._error_reason(t) for t in texts]
    assert verdicts == [old_error_reason(t) for t in texts]
    assert sum(v is not None for v in verdicts) > 50  # the comparison covers real errors


@pytest.mark.parametrize("name", trace_names())
def test_schema1_output_on_every_trace_is_byte_identical(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    history = from_openai(load_trace(name))

    def outputs() -> list[str]:
        out = []
        for strategy in (Schema1Masking(window_turns=2), Schema1Masking(keep_last_k_per_tool=1)):
            first = run(strategy, history) or history
            # Again on its own output: what is masked already is recognised, not masked twice.
            second = run(strategy, first) or first
            out += [m.model_dump_json() for m in (*first, *second)]
        return out

    new = outputs()
    monkeypatch.setattr(_schema1, "placeholder_pattern", old_placeholder_pattern)
    assert new == outputs()


_PIECES = st.sampled_from(["a", "b", "\n", ", ", "=", "ab", "a\nb", "]", "(", "{{", "}}", "é"])
_FIELDS = st.sampled_from(["{tool_call_id}", "{tool_name}", "{original_chars}", "{x:>4}"])


@st.composite
def template_and_text(draw: st.DrawFn) -> tuple[str, str]:
    """A template, and a text that is often a rendering of it (fields filled with pieces of
    its own literals, which is what makes the old regex backtrack), sometimes mutated."""
    parts = draw(st.lists(st.one_of(_PIECES, _FIELDS), max_size=7))
    template = "".join(parts)
    literals = [lit for lit, _, _, _ in string.Formatter().parse(template)] or [""]
    value = st.lists(st.sampled_from([*literals, "a", "\n", "", "x"]), max_size=4).map("".join)
    text = ""
    for literal, field, _, _ in string.Formatter().parse(template):
        text += literal
        if field is not None:
            text += draw(value)
    if draw(st.booleans()):
        cut = draw(st.integers(0, len(text)))
        text = text[:cut] + draw(st.sampled_from(["", "\n", "a", *literals])) + text[cut + 1 :]
    return template, text


@given(template_and_text())
@settings(max_examples=1_500, suppress_health_check=[HealthCheck.too_slow])
def test_the_linear_placeholder_regex_accepts_what_the_lazy_one_accepted(
    case: tuple[str, str],
) -> None:
    template, text = case
    new = placeholder_pattern(template).fullmatch(text)
    assert bool(new) == bool(old_placeholder_pattern(template).fullmatch(text)), case


_ERROR_TEXT = st.lists(
    st.sampled_from(
        [
            "E   ",
            "\n",
            "= ",
            "=",
            "1",
            "12",
            " failed",
            " passed",
            "FAILED ",
            "x",
            "a.",
            "Timeout",
            "timeout",
            ":",
            "Error",
            " ",
            "_",
            "requests.exceptions.ReadTimeout: x",
            "TimeoutError",
        ]
    ),
    max_size=14,
).map("".join)


@given(_ERROR_TEXT)
@settings(max_examples=2_000)
def test_the_rewritten_error_patterns_match_what_they_matched(text: str) -> None:
    assert _errors._error_reason(text) == old_error_reason(text)


_CONTEXT_TEXT = st.lists(
    st.sampled_from(["1", "2", ",", "_", " ", "tokens", "token", " > ", "maximum", "x"]),
    max_size=14,
).map("".join)


@given(_CONTEXT_TEXT)
@settings(max_examples=2_000)
@example("prompt is too long: 208,310 tokens > 200,000 maximum")
@example("a 1,,, tokens > 5 maximum")
def test_the_context_error_parse_is_unchanged(text: str) -> None:
    assert parse_context_error(text) == old_parse_context_error(text)


@given(
    st.lists(
        st.sampled_from(["<analysis>", "</analysis>", "a", "<", "analysis>", "</", "\n"]),
        max_size=10,
    ).map("".join)
)
@settings(max_examples=2_000)
def test_analysis_blocks_are_removed_as_the_regex_removed_them(text: str) -> None:
    assert _summary._without_analysis(text) == OLD_ANALYSIS_TAG.sub("", text)


# -- recall: the model's pattern -----------------------------------------------------------------


def recall_store(text: str) -> MemoryStore:
    store = MemoryStore()
    store.put(StoredOriginal.from_message(Message.tool("c1", text), position=2, kind="hidden"))
    return store


def test_a_catastrophic_pattern_is_answered_at_once_and_correctly() -> None:
    # (a+)+$ over "a"*26 + "!" took 11.8 s with Python's re, doubling with every character.
    text = "\n".join(["a" * 26 + "!", "a" * 30, "b" * 5])
    out = execute_recall(recall_store(text), {"tool_call_id": "c1", "pattern": "(a+)+$"})
    assert out.splitlines()[1:] == [f"2: {'a' * 30}"]


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        ("(?=a)b", "invalid perl operator: (?="),
        ("(a)\\1", "invalid escape sequence: \\1"),
        ("a\\Z", "invalid escape sequence: \\Z"),
        ("a++", "bad repetition operator: ++"),
        ("(unclosed", "missing ): (unclosed"),
        ("x{1000}{1000}", "bad repetition operator"),
    ],
)
def test_an_unsupported_pattern_tells_the_model_why_and_what_is_accepted(
    pattern: str, why: str
) -> None:
    out = execute_recall(recall_store("a\nb"), {"tool_call_id": "c1", "pattern": pattern})
    assert out.startswith(f"Error: recall_tool_result: pattern {pattern!r} is not a valid")
    assert why in out
    assert "RE2 syntax" in out


@given(st.text(alphabet="ab!()+*?|.^$\\[]{}0123\n", max_size=12))
@settings(max_examples=500)
def test_any_pattern_gives_text_for_the_model_never_an_exception(pattern: str) -> None:
    out = execute_recall(recall_store("ab\naab!\n!"), {"tool_call_id": "c1", "pattern": pattern})
    assert out.startswith(("Tool result c1", "Error: recall_tool_result: pattern"))


def test_a_plain_pattern_and_its_regex_find_the_same_lines() -> None:
    text = "\n".join(f"{k}: {'ERROR' if k % 7 == 0 else 'ok'} x.y" for k in range(300))
    store = recall_store(text)
    plain = execute_recall(store, {"tool_call_id": "c1", "pattern": "ERROR", "limit": 500})
    regex = execute_recall(store, {"tool_call_id": "c1", "pattern": "ERR(OR)", "limit": 500})
    assert plain.splitlines()[1:] == regex.splitlines()[1:]
    assert len(plain.splitlines()) == 1 + 43
    dotted = execute_recall(store, {"tool_call_id": "c1", "pattern": "x.y", "limit": 1})
    assert dotted.splitlines()[1] == "1: 0: ERROR x.y"


# -- growth: adversarial input of each matcher costs time linear in its size ------------------

GENEROUS = 4.0
"""Allowed growth over the linear baseline's: linear code is near 1x it, quadratic 16x."""


def assert_linear(
    fn: Callable[[str], object], make: Callable[[int], str], k: int, what: str
) -> None:
    """``fn(make(16 k))`` over ``fn(make(k))`` grows like a linear scan, ``k`` first raised
    until the smaller input is long enough to time (see :func:`calibrated`)."""
    found = calibrated(fn, make, k)
    if found is None:
        return  # under half a millisecond on a megabyte: constant work, nothing to stall
    small, big = make(found), make(16 * found)
    g = growth(fn, small, big)
    if g.ratio > GENEROUS * g.baseline_ratio:
        g = growth(fn, small, big, runs=5)  # once more, quieter, before calling it a failure
    assert g.ratio <= GENEROUS * g.baseline_ratio, (
        f"{what}: {len(small):,} -> {len(big):,} characters took {g.small * 1e3:.2f} -> "
        f"{g.big * 1e3:.2f} ms ({g.ratio:.0f}x, a linear scan {g.baseline_ratio:.0f}x)"
    )


@pytest.mark.parametrize("attack", KNOWN_ATTACKS, ids=[a.name for a in KNOWN_ATTACKS])
def test_the_known_attacks_cost_linear_time(attack: Attack) -> None:
    assert_linear(attack.new, attack.make, 16, attack.name)


@pytest.mark.parametrize("pattern", RECALL_ATTACKS)
def test_recall_patterns_cost_linear_time(pattern: str) -> None:
    def recall(text: str) -> str:
        return execute_recall(recall_store(text), {"tool_call_id": "c1", "pattern": pattern})

    assert_linear(recall, lambda k: ("a" * 200 + "!\n") * k, 1, pattern)


MATCHERS = content_matchers()


@st.composite
def pumped(draw: st.DrawFn, fragments: tuple[str, ...]) -> tuple[str, str, str]:
    """``(prefix, pump, suffix)`` from a matcher's own fragments."""
    pieces = st.sampled_from(fragments)
    prefix = "".join(draw(st.lists(pieces, max_size=4)))
    pump = "".join(draw(st.lists(pieces, min_size=1, max_size=4)))
    suffix = "".join(draw(st.lists(pieces, max_size=2)))
    return prefix, pump, suffix


@pytest.mark.slow
@pytest.mark.parametrize("matcher", MATCHERS, ids=[m.name for m in MATCHERS])
def test_every_content_matcher_grows_linearly_on_adversarial_input(
    matcher: ContentMatcher,
) -> None:
    @given(pumped(matcher.fragments))
    @settings(max_examples=25, suppress_health_check=[HealthCheck.too_slow])
    def check(case: tuple[str, str, str]) -> None:
        prefix, pump, suffix = case
        make = lambda k: prefix + pump * k + suffix  # noqa: E731
        assert_linear(matcher.run, make, max(1, 1_000 // len(pump)), f"{matcher.name} on {case!r}")

    check()


def test_the_matcher_list_covers_every_content_regex_module() -> None:
    names = {m.name.split(".")[0] for m in MATCHERS}
    assert {"placeholder", "error", "error_reason", "parse_context_error", "summary"} <= names
    assert {"referenced", "markers", "recoverable", "proxy", "recall"} <= names
    assert len([m for m in MATCHERS if m.name.startswith("error.")]) >= 19
