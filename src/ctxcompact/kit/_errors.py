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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache

from .._history.messages import Message, TextPart

__all__ = ["clear_error_cache", "error_reason", "is_error_result", "looks_like_error"]

# Each pattern is tried in order, behind a fast ``in`` test of substrings every match contains
# (tool outputs run to megabytes, and a substring scan costs less than a regex); the reason
# named is the first pattern in the table that matches. A line-start pattern is searched as
# "newline + pattern" plus a match at the very start, never as ``^`` tried at every
# character; one without leading ``[ \t]`` matches only at column 0, where tools print their
# errors and indented source code never is. Verdicts are cached (below), so a text is
# scanned once however many requests carry it.


@dataclass(frozen=True, slots=True)
class _Pattern:
    name: str
    line: str | None = None  # matched at a line start
    line_keys: tuple[str, ...] = ()  # substrings every ``line`` match contains (none: always)
    anywhere: str | None = None  # searched anywhere
    anywhere_keys: tuple[str, ...] = ()  # substrings every ``anywhere`` match contains
    also: str | None = None  # searched anywhere too, after a match: both must be found


# A timestamp of this millennium (``2024-05-01 12:00:00,123``, ``2024-05-01T12:00:00.5Z``,
# ``2024/05/01 12:00:00``) after its leading ``2`` or ``[2``: every alternative of the log
# pattern starts with a fixed character, which costs a regex step per line where a ``\d``
# costs three (the pattern has no substring to test first, so it runs on every text).
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
    ),
    _Pattern(
        # ``Error:``, ``fatal:`` (also indented); lowercase ``error:``, ``error[E0425]:``
        # (cargo, rustc, git) and ``fatal error:`` at column 0 only, so that an indented
        # ``error: str`` field is not one.
        "error_line",
        r"[ \t]*(?:Error|ERROR|FATAL|fatal)\b[ \t]*:|(?:fatal )?error(?:\[[A-Za-z]*\d+\])?:",
        ("Error", "ERROR", "FATAL", "fatal", "error:", "error["),
    ),
    _Pattern("error_word", r"ERROR\b", ("ERROR",)),
    _Pattern(
        # A timestamped log line at level ERROR, FATAL, CRITICAL or SEVERE: the level is the
        # first one on the line, within 40 characters of the timestamp (so an INFO line that
        # mentions ERROR is not one), or a ``time=... level=error`` line (logrus, slog), or
        # glog's ``E0501 12:00:00.123456 1 a.go:3] x``. No substring to test first: every
        # alternative starts with a fixed character, so the engine skips lines quickly.
        "log_error",
        "|".join(_LOG_LINES),
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
        # The count is tried only where a run of digits starts: tried at every digit, a
        # line of n digits cost O(n^2) (0.9 s for 14 kB), and it matches the same lines.
        also=r"\n(?:FAILED |(?:=+ [^\n]*?)?(?<!\d)\d+ failed\b)",
    ),
    _Pattern("test_failure", r"--- FAIL: ", ("--- FAIL: ",)),
    _Pattern(
        # Go's ``panic: x``, Rust's ``thread 'main' panicked at``, the shell's signal reports.
        "crash",
        r"panic: |thread '[^'\n]*' panicked at |Segmentation fault(?![ \t]*[a-z])"
        r"|Aborted \(core dumped\)"
        r"|zsh: segmentation fault",
        ("panic: ", "panicked at", "Segmentation fault", "Aborted (core", "zsh: seg"),
    ),
    _Pattern(
        # npm, curl (``curl: (7) Failed to connect``), make (``make: *** [all] Error 2``).
        "tool_error",
        r"npm (?:ERR!|error) |curl: \(\d+\)|make(?:\[\d+\])?: \*\*\* ",
        ("npm ERR!", "npm error ", "curl: (", "make"),
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
        # The name's tail is checked by a look-ahead (a word with "timeout" in it, then the
        # colon right after the word): as ``\w*[Tt]imeout\w*:`` each "Timeout" of a long word
        # rescanned the rest of it, O(n^2) (1.2 s for "a." and 8,000 "Timeout").
        r"(?:[A-Za-z_]\w*\.)+(?=\w*[Tt]imeout)\w*:"
        r"|\w*Timeout(?:Error|Exception)[ \t]*(?:\n|\Z)",
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
    ),
    _Pattern("tool_use_error", anywhere=r"<tool_use_error>", anywhere_keys=("<tool_use_error>",)),
)


def _at_line_start(pattern: str) -> Callable[[str], object]:
    at_start = re.compile(pattern).match
    after_newline = re.compile("\n(?:" + pattern + ")").search
    return lambda text: at_start(text) or after_newline(text)


def _check(pattern: _Pattern) -> Callable[[str], object]:
    """One pattern's test: a substring it must contain, then its regex."""
    line_found = _at_line_start(pattern.line) if pattern.line else None
    anywhere = re.compile(pattern.anywhere).search if pattern.anywhere else None
    also = re.compile(pattern.also).search if pattern.also else None
    line_keys, anywhere_keys = pattern.line_keys, pattern.anywhere_keys

    def found(text: str) -> object:
        # Plain loops, not ``any(...)``: most texts are short, and a generator per pattern
        # cost more than the substring tests themselves.
        hit: object = False
        if line_found is not None and not line_keys:
            hit = line_found(text)
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


_CHECKS = tuple((p.name, _check(p)) for p in _PATTERNS)
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
    for name, found in _CHECKS:
        if found(text):
            return name
    return None


# The verdict of a text never changes (strings are immutable), and a per-request transform
# sees the same tool results again at every call: without a cache, replaying one Claude Code
# trace spent 6.3 s of 7.7 s re-running the patterns. Keyed by the string itself, not by
# message identity, so it also hits when a proxy rebuilds equal messages from every request's
# JSON (CPython caches a string's hash; equal strings compare with memcmp). Two bounded LRU
# caches, by length, because a cache keeps its keys alive after their conversation is gone:
# up to 16,384 texts of at most 2,000 characters and 512 of at most 64,000 (33 M characters
# each at most); a longer text is scanned every time (about a millisecond per megabyte).
_SHORT = 2_000
_LONG = 64_000
_short_verdicts = lru_cache(maxsize=16_384)(_error_reason)
_long_verdicts = lru_cache(maxsize=512)(_error_reason)


def error_reason(text: str) -> str | None:
    """The name of the first error pattern ``text`` matches, or ``None``.

    Names, in the order they are tried: ``json_error`` (a JSON object with a non-empty
    ``error`` or ``"status": "error"``), ``traceback``, ``error_line``, ``error_word``,
    ``log_error``, ``exception_line``, ``compiler_error``, ``test_failure``, ``crash``,
    ``tool_error``, ``command_not_found``, ``permission_denied``, ``http_error``,
    ``connection_refused``, ``timeout``, ``exit_code``, ``tool_use_error`` (the guide
    "Choosing a strategy" lists what each matches, under Schema1Masking). Verdicts are cached
    by text (least recently used out; 16,384
    texts of up to 2,000 characters and 512 of up to 64,000, longer ones are not kept), so
    asking again about a text already seen costs a dictionary lookup.

    Example:
        >>> error_reason("Traceback (most recent call last):\\n  ...")
        'traceback'
        >>> error_reason("The call raises an exception when the timeout is reached.") is None
        True
    """
    size = len(text)
    if size <= _SHORT:
        return _short_verdicts(text)
    if size <= _LONG:
        return _long_verdicts(text)
    return _error_reason(text)


def clear_error_cache() -> None:
    """Forget every cached :func:`error_reason` verdict: the next call on any text scans it
    again (a benchmark of the first sight, or a test, starts from here).

    Example:
        >>> clear_error_cache()
        >>> error_reason("Error: not found")  # scanned, then kept
        'error_line'
    """
    _short_verdicts.cache_clear()
    _long_verdicts.cache_clear()


def looks_like_error(content: object) -> bool:
    """Whether tool-result ``content`` (a string, or a list of text parts or dicts) looks
    like an error: seed 001 §6's markers, without its false alarms. A list is checked by its
    text parts; anything else is not an error.

    Example:
        >>> looks_like_error("bash: foo: command not found")
        True
        >>> looks_like_error([{"type": "text", "text": "all 12 tests passed"}])
        False
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
    """Whether a tool result failed: flagged by its provider (``is_error``) or looking like it.

    The text heuristic is :func:`error_reason`'s: tracebacks, ``Error:`` lines, compiler and
    test-runner failures, shell errors, timeouts, JSON error objects and more, each anchored
    so that prose or source code that merely mentions "error" does not count.

    Example:
        >>> is_error_result(Message.tool("c1", "Traceback (most recent call last):\\n  ..."))
        True
        >>> is_error_result(Message.tool("c1", "Handles the error case when a file is missing."))
        False
    """
    return message.is_error or looks_like_error(message.content)
