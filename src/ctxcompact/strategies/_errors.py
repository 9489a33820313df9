"""The error heuristic behind ``keep_errors``: does a tool result look like a failure?

Seed 001 §6 names Traceback, Exception, Error (with a warning about false positives),
timeout, connect_error, connection refused and JSON error objects; this adds what compilers,
test runners, shells, loggers and HTTP tools print when they fail. Each pattern here is
anchored to a line start or to a marker tools really print, so prose that merely mentions
"error", "exception" or "timeout", and source code (``raise ValueError(...)``, ``except
TimeoutError:``, ``class FooError(Exception):``, with or without Claude Code's ``N→`` line
prefixes), does not count. Verdicts are cached by text.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .._messages import Message, TextPart

__all__ = ["clear_error_cache", "error_reason", "is_error_result", "looks_like_error"]

# Speed matters: tool outputs run to megabytes per request, and each substring scan costs
# about 1 ms per 2 MB. So a text is checked in two stages. First, whether any pattern matches
# at all: one regex over the line starts covers every pattern whose lines begin with fixed
# text (the engine jumps from newline to newline and drops a branch on its first character;
# 4 ms on the 1.8 MB of the public traces, against ~20 ms for the ~25 substrings it replaces),
# then the other patterns, each behind a fast ``in`` test of a keyword it must contain. Most
# texts stop there. Those that match are checked again pattern by pattern, in order, so the
# reason named is the first pattern in the table that matches. A line-start pattern is
# searched as "newline + pattern" plus a match at the very start, never as ``^`` tried at
# every character; one without leading ``[ \t]`` matches only at column 0, where tools print
# their errors and indented source code never is.


@dataclass(frozen=True, slots=True)
class _Pattern:
    name: str
    line: str | None = None  # matched at a line start
    # Substrings every ``line`` match contains; none only for a pattern in the one-pass regex.
    line_keys: tuple[str, ...] = ()
    anywhere: str | None = None  # searched anywhere
    anywhere_keys: tuple[str, ...] = ()  # substrings every ``anywhere`` match contains
    # Alternatives, each starting with a fixed character, that every ``line`` match starts
    # with: the pattern then joins the one-pass regex instead of having its keys scanned.
    one_pass: tuple[str, ...] = ()
    also: str | None = None  # searched anywhere too, after a match: both must be found


# A timestamp of this millennium (``2024-05-01 12:00:00,123``, ``2024-05-01T12:00:00.5Z``,
# ``2024/05/01 12:00:00``) after its leading ``2`` or ``[2``: every one-pass alternative
# starts with a fixed character, which costs a regex step per line where a ``\d`` costs three.
_TIMESTAMP_REST = r"\d{3}[-/]\d\d[-/]\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?"
# Then at most 40 characters without another level (``[main] ``, ``local.``, ``- app - ``),
# then the level as a whole word; lowercase only in brackets (nginx's ``[error]``).
_LEVEL = (
    r"(?:(?!INFO|DEBUG|WARN|TRACE|NOTICE)[^\n]){0,40}?(?<!\w)"
    r"(?:ERROR|FATAL|CRITICAL|SEVERE|\[(?:error|fatal|crit|critical|alert|emerg)\])(?!\w)"
)
_LOG_LINES = (
    "2" + _TIMESTAMP_REST + _LEVEL,
    r"\[2" + _TIMESTAMP_REST + _LEVEL,
    # logrus and slog's text format.
    r"time=\"?2\d{3}-[^\n]{0,40}? level=(?:error|ERROR|fatal|FATAL|panic|PANIC)\b",
    # glog and klog: ``E0501 12:00:00.123456    1 main.go:3] x``.
    r"[EF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [^\s:\]]+:\d+\] ",
)

_PATTERNS = (
    _Pattern(
        "traceback",
        r"Traceback \(most recent call last\)",
        ("Traceback (most",),
        one_pass=(r"Traceback \(most",),
    ),
    _Pattern(
        # ``Error:``, ``fatal:`` (also indented); lowercase ``error:``, ``error[E0425]:``
        # (cargo, rustc, git) and ``fatal error:`` at column 0 only, so that an indented
        # ``error: str`` field is not one.
        "error_line",
        r"[ \t]*(?:Error|ERROR|FATAL|fatal)\b[ \t]*:|(?:fatal )?error(?:\[[A-Za-z]*\d+\])?:",
        ("Error", "ERROR", "FATAL", "fatal", "error:", "error["),
        one_pass=(
            r"Error\b[ \t]*:",
            r"ERROR\b",
            r"FATAL\b[ \t]*:",
            r"fatal\b[ \t]*:",
            r"[ \t]+(?:Error|ERROR|FATAL|fatal)\b[ \t]*:",
            r"fatal error:",
            r"error(?:\[[A-Za-z]*\d+\])?:",
        ),
    ),
    _Pattern("error_word", r"ERROR\b", ("ERROR",), one_pass=(r"ERROR\b",)),
    _Pattern(
        # A timestamped log line at level ERROR, FATAL, CRITICAL or SEVERE: the level is the
        # first one on the line, within 40 characters of the timestamp (so an INFO line that
        # mentions ERROR is not one), or a ``time=... level=error`` line (logrus, slog), or
        # glog's ``E0501 12:00:00.123456 1 a.go:3] x``. Whole, in the one-pass regex, so a
        # text of INFO lines is not checked again.
        "log_error",
        "|".join(_LOG_LINES),
        one_pass=_LOG_LINES,
    ),
    _Pattern(
        # ``ValueError: x``, ``java.lang.IllegalStateException: x``, ``Uncaught TypeError: x``;
        # at column 0, as tracebacks end: an indented one is a docstring's ``Raises:`` entry.
        "exception_line",
        r"(?:Uncaught )?(?:[A-Za-z_]\w*\.)*\w*(?:Exception|Error):",
        ("Exception:", "Error:"),
    ),
    _Pattern(
        # Java's ``Exception in thread "main" java.lang.NullPointerException``.
        "exception_line",
        r'Exception in thread "',
        ("Exception in thread",),
        one_pass=(r'Exception in thread "',),
    ),
    _Pattern(
        # ``src/a.c:3:5: error: x``, ``foo.py:3: error: x``, ``mypy: error: x``,
        # ``gcc: fatal error: x``, tsc's ``src/a.ts(3,5): error TS2304: x``.
        "compiler_error",
        r"[\w./\\-]+(?::\d+){0,2}(?:\(\d+,\d+\))?: (?:fatal )?error(?:\[\w+\]| TS\d+)?:",
        (": error", ": fatal error"),
    ),
    _Pattern(
        # Go's compiler and vet: ``./main.go:5:2: undefined: foo``, ``pkg/a.go:3:1: x``,
        # ``vet: ./a.go:7:2: ...``. Every ``file.go:line:col: message`` line at column 0 is
        # one: gc prints nothing else in that form, and vet's findings fail the build too.
        # ``grep -n`` (one number) and ``go test``'s indented ``a_test.go:9: got 1`` are not.
        "compiler_error",
        r"(?:vet: )?[\w./\\-]*\.go:\d+:\d+: \S",
        (".go:",),
    ),
    _Pattern(
        # pytest's assertion lines (``E   assert 1 == 2``) with its summary: a
        # ``FAILED tests/x.py::test`` line or ``= 1 failed, 2 passed in 0.1s =`` (``-q``:
        # ``1 failed, ...``); Go's ``--- FAIL: TestX (0.00s)``.
        "test_failure",
        r"E   ",
        ("E   ",),
        one_pass=(r"E   ",),
        also=r"\n(?:FAILED |(?:=+ [^\n]*?)?\d+ failed\b)",
    ),
    _Pattern("test_failure", r"--- FAIL: ", ("--- FAIL: ",), one_pass=(r"--- FAIL: ",)),
    _Pattern(
        # Go's ``panic: x``, Rust's ``thread 'main' panicked at``, the shell's signal reports.
        "crash",
        r"panic: |thread '[^'\n]*' panicked at |Segmentation fault(?![ \t]*[a-z])"
        r"|Aborted \(core dumped\)"
        r"|zsh: segmentation fault",
        ("panic: ", "panicked at", "Segmentation fault", "Aborted (core", "zsh: seg"),
        one_pass=(
            r"panic: ",
            r"thread '",
            r"Segmentation fault",
            r"Aborted \(core",
            r"zsh: seg",
        ),
    ),
    _Pattern(
        # npm, curl (``curl: (7) Failed to connect``), make (``make: *** [all] Error 2``).
        "tool_error",
        r"npm (?:ERR!|error) |curl: \(\d+\)|make(?:\[\d+\])?: \*\*\* ",
        ("npm ERR!", "npm error ", "curl: (", "make"),
        one_pass=(r"npm ERR!", r"npm error ", r"curl: \(", r"make(?:\[\d+\])?: \*\*\* "),
    ),
    _Pattern(
        # bash ``bash: foo: command not found`` (also ``bash: line 1: ...``), dash
        # ``/bin/sh: 1: foo: not found``, zsh ``zsh: command not found: foo``.
        "command_not_found",
        r"[\w/.-]+: (?:line \d+: )?[^\s:]+: command not found"
        r"|[\w/.-]+: \d+: [^\s:]+: not found|zsh: command not found: ",
        ("not found",),
    ),
    _Pattern(
        # ``bash: ./x.sh: Permission denied``, ``cat: f: Permission denied``, ``open /x:
        # permission denied``, ``git@github.com: Permission denied (publickey).``: a line that
        # starts at column 0 (not indented, not a ``#`` or ``*`` comment, not quoted) and ends
        # with ``: Permission denied``; never prose about it.
        "permission_denied",
        r"[^\s#*>\"'][^\n]*?: [Pp]ermission denied(?: \([^()\n]*\))?\.?[ \t]*\r?(?:\n|\Z)",
        ("ermission denied",),
    ),
    _Pattern(
        # A 408/504 status on its own (not a sentence about one: no lowercase word after),
        # a 5xx status line (``curl -i``), nginx's error page title.
        "http_error",
        r"(?:HTTP/[\d.]+ +)?(?:408 Request|504 Gateway) Time-?out\b(?![ \t]*[a-z])"
        r"|HTTP/[\d.]+ +5\d\d\b|(?:<html>)?(?:<head>)?<title>(?:408|5\d\d) ",
        ("Gateway Time", "Request Time", "HTTP/", "<title>"),
        one_pass=(r"HTTP/", r"408 Request", r"504 Gateway", r"<html>", r"<head>", r"<title>"),
    ),
    _Pattern(
        "connection_refused",
        anywhere=r"(?i:connection refused)|ECONNREFUSED|\bconnect_error\b",
        anywhere_keys=("efused", "EFUSED", "connect_error"),
    ),
    _Pattern(
        # A timeout exception at column 0: dotted (``requests.exceptions.ReadTimeout: x``,
        # ``socket.timeout: x``; a bare ``Timeout:`` could be a setting) or ``TimeoutError``
        # alone, as a traceback ends; never ``except TimeoutError:`` nor ``raise ...``.
        "timeout",
        r"(?:[A-Za-z_]\w*\.)+\w*[Tt]imeout\w*:|\w*Timeout(?:Error|Exception)[ \t]*(?:\n|\Z)",
        ("imeout",),
        r"\btimed out\b",
        ("timed out",),
    ),
    _Pattern(
        "exit_code",
        r"Exit code [1-9]",
        ("Exit code ",),
        r"<returncode>(?:-\d+|[1-9]\d*)</returncode>",
        ("<returncode>",),
        one_pass=(r"Exit code [1-9]",),
    ),
    _Pattern("tool_use_error", anywhere=r"<tool_use_error>", anywhere_keys=("<tool_use_error>",)),
)


def _at_line_start(pattern: str) -> Callable[[str], object]:
    at_start = re.compile(pattern).match
    after_newline = re.compile("\n(?:" + pattern + ")").search
    return lambda text: at_start(text) or after_newline(text)


def _check(pattern: _Pattern, *, line: bool = True) -> Callable[[str], object]:
    """One pattern's test (without its line part if not ``line``): a keyword, then the regex."""
    line_found = _at_line_start(pattern.line) if pattern.line and line else None
    anywhere = re.compile(pattern.anywhere).search if pattern.anywhere else None
    also = re.compile(pattern.also).search if pattern.also else None
    line_keys, anywhere_keys = pattern.line_keys, pattern.anywhere_keys

    def found(text: str) -> object:
        # Plain loops, not ``any(...)``: most texts are short, and a generator per pattern
        # cost more than the substring tests themselves.
        hit: object = False
        if line_found is not None and not line_keys:
            hit = line_found(text)  # only in the one-pass regex: no key to test first
        elif line_found is not None:
            for key in line_keys:
                if key in text:
                    hit = line_found(text)
                    break
        if not hit and anywhere is not None:
            for key in anywhere_keys:
                if key in text:
                    hit = anywhere(text)
                    break
        return hit and (also is None or also(text))

    return found


# Stage two: every pattern in order.
_CHECKS = tuple((p.name, _check(p)) for p in _PATTERNS)
# Stage one: the one-pass regex, then what it does not cover.
_ONE_PASS = _at_line_start("|".join(alt for p in _PATTERNS for alt in p.one_pass))
_REST = tuple(
    _check(p, line=not p.one_pass)
    for p in _PATTERNS
    if p.anywhere is not None or (p.line is not None and not p.one_pass)
)
_EMPTY: tuple[object, ...] = (None, False, "", 0, [], {})


def _json_error(text: str) -> bool:
    stripped = text.lstrip()
    if not stripped.startswith(("{", "[")):
        return False
    try:
        value = json.loads(stripped)
    except ValueError:
        return False
    if not isinstance(value, dict):
        return False
    # ``"error": null`` is how many APIs say "no error", so an empty value does not count.
    if "error" in value and value["error"] not in _EMPTY:
        return True
    return value.get("status") == "error"


def _error_reason(text: str) -> str | None:
    """:func:`error_reason` without the cache."""
    if _json_error(text):
        return "json_error"
    if not _ONE_PASS(text):
        for found in _REST:
            if found(text):
                break
        else:
            return None
    return _first_match(text)


def _first_match(text: str) -> str | None:
    """The name of the first pattern ``text`` matches, without the prefilter."""
    for name, found in _CHECKS:
        if found(text):
            return name
    return None


# The verdict of a text never changes (strings are immutable), and a per-request transform
# sees the same tool results again at every call: without this cache, replaying one Claude
# Code trace spent 6.3 s of 7.7 s re-running the patterns. Keyed by the string itself, not by
# message identity, so it also hits when a proxy rebuilds equal messages from every request's
# JSON; the lookup hashes a string once (CPython caches str hashes) and compares equal strings
# with memcmp. Bounded in entries and in characters, least recently used out first, because it
# keeps its keys alive after their conversation is gone.
_CACHE_MAX_ENTRIES = 16_384
_CACHE_MAX_CHARS = 32_000_000
_verdicts: dict[str, str | None] = {}
_cached_chars = 0
_cache_lock = threading.Lock()
_MISS = ""  # never a verdict: every reason name is non-empty


def error_reason(text: str) -> str | None:
    """The name of the first error pattern ``text`` matches, or ``None``.

    Names, in the order they are tried: ``json_error`` (a JSON object with a non-empty
    ``error`` or ``"status": "error"``), ``traceback``, ``error_line``, ``error_word``,
    ``log_error``, ``exception_line``, ``compiler_error``, ``test_failure``, ``crash``,
    ``tool_error``, ``command_not_found``, ``permission_denied``, ``http_error``,
    ``connection_refused``, ``timeout``, ``exit_code``, ``tool_use_error`` (the README
    lists what each matches). Verdicts are
    cached by text (a bounded, least-recently-used cache of at most 16,384 texts and 32
    million characters), so asking again about a text already seen costs a dictionary lookup.

    Example:
        >>> error_reason("Traceback (most recent call last):\\n  ...")
        'traceback'
        >>> error_reason("The call raises an exception when the timeout is reached.") is None
        True
    """
    global _cached_chars
    with _cache_lock:
        verdict = _verdicts.pop(text, _MISS)
        if verdict != _MISS:
            _verdicts[text] = verdict  # back at the most recent end
            return verdict
    verdict = _error_reason(text)
    size = len(text)
    if size > _CACHE_MAX_CHARS:
        return verdict
    with _cache_lock:
        if text not in _verdicts:
            _verdicts[text] = verdict
            _cached_chars += size
            while len(_verdicts) > _CACHE_MAX_ENTRIES or _cached_chars > _CACHE_MAX_CHARS:
                oldest = next(iter(_verdicts))
                del _verdicts[oldest]
                _cached_chars -= len(oldest)
    return verdict


def clear_error_cache() -> None:
    """Forget every cached :func:`error_reason` verdict (benchmarks measure the first sight)."""
    global _cached_chars
    with _cache_lock:
        _verdicts.clear()
        _cached_chars = 0


def looks_like_error(content: object) -> bool:
    """Whether tool-result ``content`` looks like an error (seed 001 §6, without false alarms).

    Strings are checked directly; list content (raw dicts or parts) by its text parts.
    """
    if isinstance(content, str):
        return error_reason(content) is not None
    if isinstance(content, (list, tuple)):
        texts = []
        for part in content:
            if isinstance(part, TextPart):
                texts.append(part.text)
            elif isinstance(part, Mapping) and isinstance(part.get("text"), str):
                texts.append(part["text"])
        return any(error_reason(t) is not None for t in texts)
    return False


def is_error_result(message: Message) -> bool:
    """A tool result flagged as an error by its provider, or looking like one."""
    return message.is_error or looks_like_error(message.content)
