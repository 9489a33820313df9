"""Every matcher that runs on message content, and how to tell linear from super-linear.

Shared by ``tests/test_redos.py`` (equivalence with the expressions they replaced, and growth
under adversarial input) and ``benchmarks/bench_redos.py`` (the before/after ratios).

Growth is measured, never asserted in seconds: the time of one input 16 times as large, over
the time of the input, beside the same ratio for a linear baseline on the same two inputs
(a machine's caches and noise move both). Linear code grows like the baseline (about 16x);
quadratic code grows about 256x, cubic 4096x.

White-box (so it lives in ``tests/internals``): it gathers the library's private regular
expressions and the functions around them (the error patterns, the placeholder and recall
matchers, the summary parser, the proxy's redaction) to feed each its own worst input.
"""

from __future__ import annotations

import re
import string
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from ctxcompact import from_openai
from ctxcompact._controller.markers import NAMED_RE
from ctxcompact._tokens import windows as _models
from ctxcompact._tokens.windows import context_window, parse_context_error, says_context_too_long
from ctxcompact.kit import (
    CLEARED_RE,
    DROP_NOTE_RE,
    HIDDEN_PLACEHOLDER,
    KLIP13_PLACEHOLDER,
    RANGE_NOTE_RE,
    SCHEMA1_PLACEHOLDER,
    SCHEMA1_SEED_PLACEHOLDER,
    TRUNCATION_RE,
    _errors,
    _markers,
    placeholder_pattern,
)
from ctxcompact.proxy._json import _CHARSET, BodyError, check_charset
from ctxcompact.replay import _recoverable
from ctxcompact.replay._referenced import distinctive_tokens
from ctxcompact.store import DEFAULT_RECALL_TEMPLATE
from ctxcompact.store._recall import _LineFilter
from ctxcompact.strategies import _summary
from tests.helpers.traces import load_trace, trace_names

BUILTIN_TEMPLATES = {
    "hidden": HIDDEN_PLACEHOLDER,
    "klip13": KLIP13_PLACEHOLDER,
    "schema1": SCHEMA1_PLACEHOLDER,
    "schema1_seed": SCHEMA1_SEED_PLACEHOLDER,
    "recall": DEFAULT_RECALL_TEMPLATE,
}

# -- the expressions that were replaced, to show the new ones accept exactly the same ----------


def old_placeholder_pattern(template: str) -> re.Pattern[str]:
    """The placeholder regex before: a lazy ``[^\\n]*?`` per field (O(n^fields))."""
    out = []
    for literal, field, _, _ in string.Formatter().parse(template):
        out.append(re.escape(literal))
        if field is not None:
            out.append(r"[^\n]*?")
    return re.compile("".join(out), re.DOTALL)


OLD_TEST_FAILURE_ALSO = r"\n(?:FAILED |(?:=+ [^\n]*?)?\d+ failed\b)"
OLD_TIMEOUT_LINE = (
    r"(?:[A-Za-z_]\w*\.)+\w*[Tt]imeout\w*:|\w*Timeout(?:Error|Exception)[ \t]*(?:\n|\Z)"
)
OLD_TOKENS_GT = re.compile(r"\d[\d,]* tokens? > (\d[\d,_]*) maximum", re.IGNORECASE)
OLD_ANALYSIS_TAG = re.compile(r"<analysis>.*?</analysis>", re.DOTALL)


def _old_patterns() -> tuple[Any, ...]:
    out = []
    for p in _errors._PATTERNS:
        if p.name == "test_failure" and p.also:
            p = replace(p, also=OLD_TEST_FAILURE_ALSO)
        elif p.name == "timeout":
            p = replace(p, line=OLD_TIMEOUT_LINE)
        out.append(p)
    return tuple(out)


_OLD_CHECKS = tuple((p.name, _errors._check(p)) for p in _old_patterns())


def old_error_reason(text: str) -> str | None:
    """``error_reason`` with the two patterns as they were (uncached)."""
    if _errors._json_error(text):
        return "json_error"
    for name, found in _OLD_CHECKS:
        if found(text):
            return name
    return None


def old_parse_context_error(message: str) -> int | None:
    """``parse_context_error`` with Anthropic's pattern as it was."""
    patterns = [OLD_TOKENS_GT if "tokens? >" in p.pattern else p for p in _context_errors()]
    text = message[:10_000]
    for pattern in patterns:
        match = pattern.search(text)
        if match is not None:
            value = int(re.sub(r"[,_]", "", match.group(1)))
            return value if 0 < value <= 100_000_000 else None
    return None


def _context_errors() -> list[re.Pattern[str]]:
    return list(_models._CONTEXT_ERRORS)


# -- the real tool results -------------------------------------------------------------------


@cache
def trace_tool_texts() -> tuple[str, ...]:
    """The text of every tool result of the 17 public traces."""
    texts = []
    for name in trace_names():
        for message in from_openai(load_trace(name)):
            if message.role == "tool":
                texts.append(message.text)
    return tuple(texts)


# -- every matcher that runs on content, with the fragments an attack would be made of --------


@dataclass(frozen=True)
class ContentMatcher:
    """One matcher that runs on message content, and the pieces its worst inputs are made of
    (its literals and the characters its classes and quantifiers hinge on)."""

    name: str
    run: Callable[[str], object]
    fragments: tuple[str, ...]


_COMMON = ("\n", " ", "\t", "a", "A", "1", ".", ":", "/", "=", "'", "(", ")", "[", "]", ",", "-")
_COMMON += ("_", "E", "2", "\r", '"', "<", ">", "*", "#", "@")


def fragments_of(pattern: str) -> tuple[str, ...]:
    """The literal runs of a regex's source, unescaped, plus the common characters."""
    runs = re.findall(r"(?:\\.|[^\\()\[\]{}*+?|^$])+", pattern)
    literals = {re.sub(r"\\(.)", r"\1", r) for r in runs if len(r) > 1}
    words = set(re.findall(r"[A-Za-z]{2,}", pattern))
    return tuple(sorted(set(_COMMON) | literals | words))


def _line_checks() -> list[ContentMatcher]:
    out = []
    for k, p in enumerate(_errors._PATTERNS):
        parts = {
            "line": (_errors._at_line_start(p.line) if p.line else None, p.line),
            "anywhere": (re.compile(p.anywhere).search if p.anywhere else None, p.anywhere),
            "also": (re.compile(p.also).search if p.also else None, p.also),
        }
        for part, (fn, source) in parts.items():
            if fn is not None and source is not None:
                out.append(ContentMatcher(f"error.{k}.{p.name}.{part}", fn, fragments_of(source)))
    return out


def _placeholder_checks() -> list[ContentMatcher]:
    out = []
    for name, template in BUILTIN_TEMPLATES.items():
        pattern = placeholder_pattern(template)
        out.append(
            ContentMatcher(f"placeholder.{name}", pattern.fullmatch, fragments_of(pattern.pattern))
        )
    return out


def _listed(found: object) -> object:
    """A finder's result, iterators read to the end (a search's match as it is)."""
    return found if found is None or isinstance(found, (re.Match, list)) else list(found)  # type: ignore[call-overload]


def _recall_check(pattern: str) -> Callable[[str], object]:
    matches = _LineFilter(pattern).matches
    return lambda text: sum(1 for line in text.splitlines() if matches(line))


def content_matchers() -> list[ContentMatcher]:
    """Every expression ctxcompact runs on message content (tool results, model output,
    upstream error text), each with its fragments."""
    out = [*_placeholder_checks(), *_line_checks()]
    out.append(
        ContentMatcher(
            "error_reason",
            _errors._error_reason,
            fragments_of("".join(p.line or p.anywhere or "" for p in _errors._PATTERNS)),
        )
    )
    out.append(
        ContentMatcher(
            "parse_context_error",
            parse_context_error,
            fragments_of("".join(p.pattern for p in _context_errors())),
        )
    )
    out.append(
        ContentMatcher(
            "models.context_window",  # the request's model name, as a client sent it
            context_window,
            fragments_of(_models._SNAPSHOT.pattern + _models._REGION_PREFIX.pattern),
        )
    )
    out.append(
        ContentMatcher(
            "summary.answer",
            lambda t: (_summary._SUMMARY_TAG.search(t), _summary._without_analysis(t)),
            ("<summary>", "</summary>", "<analysis>", "</analysis>", "<", ">", "a", "\n", "/"),
        )
    )
    out.append(
        ContentMatcher("summary.garbage", _summary._GARBAGE.findall, ("\x00", "a", "\ufffd"))
    )
    out.append(
        ContentMatcher(
            "referenced.tokens", distinctive_tokens, fragments_of("a_b aB ~/ ./ 1234.py")
        )
    )
    # What the guard's relevance leaves out of a message before it looks for names.
    out.append(
        ContentMatcher(
            "markers.without", _markers.without_markers, fragments_of(_markers._MARKER_TEXT.pattern)
        )
    )
    # The markers ctxcompact reads back from the view (any message may hold text that looks
    # like one: a tool result can be crafted).
    for name, pattern, match in (
        ("markers.drop_note", DROP_NOTE_RE, DROP_NOTE_RE.search),
        ("markers.range_note", RANGE_NOTE_RE, RANGE_NOTE_RE.search),
        ("markers.truncation", TRUNCATION_RE, TRUNCATION_RE.finditer),
        ("markers.cleared", CLEARED_RE, CLEARED_RE.findall),
        ("markers.named", NAMED_RE, NAMED_RE.search),
        ("recoverable.quoted", _recoverable._QUOTED, _recoverable._QUOTED.findall),
        ("recoverable.results", _recoverable._RESULTS, _recoverable._listed),
        ("recoverable.range_row", _recoverable._RANGE_ROW, _recoverable._RANGE_ROW.findall),
    ):
        out.append(
            ContentMatcher(name, lambda t, m=match: _listed(m(t)), fragments_of(pattern.pattern))
        )
    # What the proxy reads of what it receives: an upstream's error body (is it "too long"?)
    # and a client's Content-Type (its charset).
    out.append(
        ContentMatcher(
            "proxy.context_error",
            says_context_too_long,
            fragments_of("".join(p.pattern for p in _context_errors()) + "context window"),
        )
    )
    out.append(ContentMatcher("proxy.charset", _charset, fragments_of(_CHARSET.pattern)))
    for attack in RECALL_ATTACKS:
        out.append(
            ContentMatcher(f"recall.{attack}", _recall_check(attack), ("a", "!", "b", "\n", "x"))
        )
    return out


def _charset(content_type: str) -> object:
    try:
        return check_charset(content_type)
    except BodyError as exc:
        return exc.reason


RECALL_ATTACKS = ("(a+)+$", "(a|a)*b", "(a|aa)+$", "(.*a){12}", "^(a?){25}a{25}$", "(\\w+\\s?)+$")
"""Patterns that make a backtracking engine take exponential time on a run of ``a``."""

# -- the inputs of the issue, that the benchmark and the tests pump ----------------------------


def placeholder_attack(template: str, k: int) -> str:
    """The template's first literal, then its middle literals ``k`` times, never closed."""
    literals = [lit for lit, _, _, _ in string.Formatter().parse(template)]
    return literals[0] + "".join(literals[1:-1]) * k + "x"


@dataclass(frozen=True)
class Attack:
    """One input of the issue, pumped to size ``k``, with the code before and after."""

    name: str
    what: str
    make: Callable[[int], str]
    new: Callable[[str], object]
    old: Callable[[str], object]


def _old_without_analysis(text: str) -> str:
    return OLD_ANALYSIS_TAG.sub("", text)


KNOWN_ATTACKS = (
    Attack(
        "schema1 placeholder",
        "Schema 1 prefix + ', tool=, chars=' * k",
        lambda k: placeholder_attack(SCHEMA1_PLACEHOLDER, k),
        placeholder_pattern(SCHEMA1_PLACEHOLDER).fullmatch,
        old_placeholder_pattern(SCHEMA1_PLACEHOLDER).fullmatch,
    ),
    Attack(
        "seed placeholder",
        "seed 001 prefix + ', outil=, chars=' * k",
        lambda k: placeholder_attack(SCHEMA1_SEED_PLACEHOLDER, k),
        placeholder_pattern(SCHEMA1_SEED_PLACEHOLDER).fullmatch,
        old_placeholder_pattern(SCHEMA1_SEED_PLACEHOLDER).fullmatch,
    ),
    Attack(
        "error: pytest count",
        "'E   x\\n= ' + '1' * 7k",
        lambda k: "E   x\n= " + "1" * (7 * k),
        _errors._error_reason,
        old_error_reason,
    ),
    Attack(
        "error: timeout name",
        "'a.' + 'Timeout' * k",
        lambda k: "a." + "Timeout" * k,
        _errors._error_reason,
        old_error_reason,
    ),
    Attack(
        "context error",
        "'1' * 7k (an upstream error body)",
        lambda k: "1" * (7 * k),
        parse_context_error,
        old_parse_context_error,
    ),
    Attack(
        "summary <analysis>",
        "'<analysis>' * k (a summarizer's answer)",
        lambda k: "<analysis>" * k,
        _summary._without_analysis,
        _old_without_analysis,
    ),
)
"""The super-linear inputs found, each with the code that replaced what it stalled."""


# -- growth ----------------------------------------------------------------------------------


def best_time(fn: Callable[[str], object], text: str, runs: int = 3) -> float:
    """CPU seconds per call, the least of ``runs`` measurements (the least is the one noise
    disturbed least); a call under 0.2 ms is repeated within a measurement until it lasts
    that long, so the timer's resolution and a call's fixed cost do not dominate.

    CPU time of the process, not wall time: on a busy machine a call of a few milliseconds
    spans several scheduler slices and waits between them, while one of a tenth of a
    millisecond often runs in one, so wall time inflated the bigger input's time alone (ratios
    of 60x for linear code at a load of 10 on 2 cores, where the linear scan showed 15x)."""
    start = time.process_time()
    fn(text)
    once = time.process_time() - start
    number = 1 if once >= 0.0002 else min(10_000, int(0.0002 / max(once, 1e-7)) + 1)
    best = float("inf")
    for _ in range(runs):
        start = time.process_time()
        for _ in range(number):
            fn(text)
        best = min(best, (time.process_time() - start) / number)
    return best


_BASELINE = re.compile(r"[\s\S]*")


def linear_baseline(text: str) -> object:
    """Work linear by construction: one pass of the regex engine over every character,
    allocating nothing (a class, not ``(?s).*``, which the engine skips to the end)."""
    return _BASELINE.match(text)


@dataclass(frozen=True)
class Growth:
    small: float
    big: float
    baseline_small: float
    baseline_big: float

    @property
    def ratio(self) -> float:
        return self.big / max(self.small, 1e-7)

    @property
    def baseline_ratio(self) -> float:
        return self.baseline_big / max(self.baseline_small, 1e-7)


def growth(fn: Callable[[str], object], small: str, big: str, runs: int = 3) -> Growth:
    """How ``fn``'s time grows from ``small`` to ``big``, beside the linear baseline's."""
    return Growth(
        best_time(fn, small, runs),
        best_time(fn, big, runs),
        best_time(linear_baseline, small, runs),
        best_time(linear_baseline, big, runs),
    )


MIN_TIMED = 0.0005
"""Seconds the smaller input must take to be timed reliably (timer and scheduling noise)."""

MAX_CALIBRATED = 1_000_000
"""Characters at most of the smaller input: a matcher still under :data:`MIN_TIMED` there
does constant work (a prefix test), and its growth is not measured."""


def calibrated(fn: Callable[[str], object], make: Callable[[int], str], k: int) -> int | None:
    """The least ``k * 2**j`` whose input takes :data:`MIN_TIMED`, or ``None`` past
    :data:`MAX_CALIBRATED` characters (then ``fn`` is too fast to time at all)."""
    while best_time(fn, make(k), 2) < MIN_TIMED:
        if len(make(k)) > MAX_CALIBRATED:
            return None
        k *= 2
    return k
