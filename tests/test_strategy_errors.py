"""The error heuristic behind ``keep_errors``: what counts, what must not (prose and source
code), its agreement with the traces' meta files, its substring gates and its cache."""

from __future__ import annotations

import json

import pytest

from ctxcompact import TextPart
from ctxcompact.kit import error_reason, is_error_result, looks_like_error
from tests.helpers.gen import tool

PYTEST_FAILED = """\
============================= test session starts ==============================
collected 2 items

tests/test_a.py F.                                                       [100%]

=================================== FAILURES ===================================
____________________________________ test_a ____________________________________

    def test_a():
>       assert 1 == 2
E       assert 1 == 2

tests/test_a.py:2: AssertionError
=========================== short test summary info ============================
FAILED tests/test_a.py::test_a - assert 1 == 2
========================= 1 failed, 1 passed in 0.01s ==========================
"""

PYTEST_FAILED_QUIET = "F.\nE   AssertionError: boom\n1 failed, 1 passed in 0.01s\n"

PYTEST_PASSED = """\
============================= test session starts ==============================
collected 2 items

tests/test_a.py ..                                                       [100%]

============================== 2 passed in 0.01s ===============================
"""

PYTHON_SOURCE = '''\
import socket


class FooError(Exception):
    """Raised when foo fails."""


def fetch(url, timeout=30):
    """Fetch ``url``.

    Raises:
        ValueError: if ``url`` is empty.
        TimeoutError: if the server is slow.
        KeyError: never, in fact.
    """
    if not url:
        raise ValueError("x")
    try:
        return socket.create_connection((url, 80), timeout=timeout)
    except TimeoutError:
        raise FooError("timed-out fetch") from None
    except (ConnectionError, socket.timeout) as exc:
        print("error:", exc)
        raise

try:
    fetch("")
except TimeoutError:
    pass
'''


def claude_code_read(source: str) -> str:
    """``source`` as Claude Code's Read tool shows it: ``N→`` before every line."""
    return "\n".join(f"{n:>6}→{line}" for n, line in enumerate(source.splitlines(), 1))


ERRORS = [
    ("Traceback (most recent call last):\n  File 'a.py'\nKeyError: 'x'", "traceback"),
    ("Error: not enough seats", "error_line"),
    ("fatal: not a git repository", "error_line"),
    ("  Error: indented, as some tools print it", "error_line"),
    ("   Compiling foo v0.1.0\nerror: could not compile `foo` due to 1 error", "error_line"),
    ("error[E0425]: cannot find value `x` in this scope\n --> src/main.rs:2:5", "error_line"),
    ("ERROR tests/test_x.py - ImportError", "error_word"),
    ("collected 3 items\nValueError: bad value", "exception_line"),
    ("java.lang.IllegalStateException: closed", "exception_line"),
    ("Exception: boom", "exception_line"),
    (
        'Exception in thread "main" java.lang.NullPointerException\n\tat A.main',
        "exception_line",
    ),
    ("Uncaught TypeError: x is not a function", "exception_line"),
    ("src/a.c:3:5: error: expected ';' before '}' token", "compiler_error"),
    ("foo.py:3: error: Incompatible types in assignment  [assignment]", "compiler_error"),
    ("mypy: error: Cannot find implementation or library stub", "compiler_error"),
    ("gcc: fatal error: no input files\ncompilation terminated.", "compiler_error"),
    ("src/a.ts(3,5): error TS2304: Cannot find name 'x'.", "compiler_error"),
    (PYTEST_FAILED, "test_failure"),
    (PYTEST_FAILED_QUIET, "test_failure"),
    ("=== RUN   TestX\n--- FAIL: TestX (0.00s)\n    x_test.go:9: got 1\nFAIL", "test_failure"),
    ("panic: runtime error: index out of range [5]\n\ngoroutine 1 [running]:", "crash"),
    ("thread 'main' panicked at src/main.rs:2:5:\nattempt to divide by zero", "crash"),
    ("Segmentation fault (core dumped)", "crash"),
    ("running ./a.out\nSegmentation fault", "crash"),
    ("Aborted (core dumped)", "crash"),
    ("npm ERR! code E404\nnpm ERR! 404 Not Found", "tool_error"),
    ("npm error code ENOENT", "tool_error"),
    ("curl: (6) Could not resolve host: example.invalid", "tool_error"),
    ("cc -o a a.c\nmake: *** [Makefile:3: all] Error 1", "tool_error"),
    ("bash: foo: command not found", "command_not_found"),
    ("bash: line 1: foo: command not found", "command_not_found"),
    ("/bin/sh: 1: foo: not found", "command_not_found"),
    ("zsh: command not found: foo", "command_not_found"),
    ("504 Gateway Timeout", "http_error"),
    ("HTTP/1.1 504 Gateway Time-out\r\nServer: nginx", "http_error"),
    ("HTTP/2 503 \r\ncontent-type: text/html", "http_error"),
    ("<html>\r\n<head><title>502 Bad Gateway</title></head>", "http_error"),
    ("curl: (7) Connection refused", "tool_error"),
    ("dial tcp 127.0.0.1:8080: connect: connection refused", "connection_refused"),
    ("httpx.ConnectError connect_error", "connection_refused"),
    ("The last command <command>sleep 99</command> timed out and has been killed.", "timeout"),
    (
        "requests.exceptions.ReadTimeout: HTTPSConnectionPool(host='api', port=443)",
        "timeout",
    ),
    ("socket.timeout: the read operation", "timeout"),
    ("waiting for the server\nTimeoutError", "timeout"),
    ("Exit code 128\nno upstream branch", "exit_code"),
    ("<returncode>2</returncode>\n<output></output>", "exit_code"),
    ("<returncode>-9</returncode>", "exit_code"),
    ("<tool_use_error>File has not been read yet</tool_use_error>", "tool_use_error"),
    # Go's compiler and vet.
    ("./main.go:5:2: undefined: foo", "compiler_error"),
    (
        "# example.com/m\n./main.go:7:2: fmt.Printf format %d has arg s of wrong type string",
        "compiler_error",
    ),
    ("pkg/util/a.go:12:3: declared and not used: x", "compiler_error"),
    ("vet: ./main.go:3:8: could not import fmt", "compiler_error"),
    # Timestamped log lines at an error level.
    ("2024-05-01 12:00:00,123 ERROR something", "log_error"),
    ("2024-05-01T12:00:00Z [ERROR] x", "log_error"),
    ("[2024-05-01 12:00:00] ERROR: boom", "log_error"),
    ("starting\n2024-05-01 12:00:00.123 [main] ERROR c.e.App - failed", "log_error"),
    ("2024-05-01 12:00:00,123 - myapp - CRITICAL - disk full", "log_error"),
    ("[2024-05-01 12:00:00] local.ERROR: Undefined variable $x", "log_error"),
    ("2024/05/01 12:00:00 [error] 1234#0: *1 connect() failed", "log_error"),
    ("2024-05-01T12:00:00.123+02:00 FATAL 1 --- [main] o.s.boot: x", "log_error"),
    ("2024-05-01 12:00:00 SEVERE: Servlet threw exception", "log_error"),
    ('time="2024-05-01T12:00:00Z" level=error msg="x"', "log_error"),
    ("time=2024-05-01T12:00:00.000Z level=ERROR msg=x", "log_error"),
    ("I0501 12:00:00.1 1 a.go:3] up\nE0501 12:00:01.5 1 a.go:9] failed", "log_error"),
    # Permission denied, as shells and tools print it.
    ("bash: ./x.sh: Permission denied", "permission_denied"),
    ("cat: f: Permission denied\n", "permission_denied"),
    ("open /etc/shadow: permission denied", "permission_denied"),
    ("/bin/sh: 1: ./run: Permission denied", "permission_denied"),
    ("mkdir: cannot create directory '/x': Permission denied\r\n", "permission_denied"),
    ("git@github.com: Permission denied (publickey).", "permission_denied"),
    (json.dumps({"error": "not found", "code": 404}), "json_error"),
    (json.dumps({"status": "error", "message": "x"}), "json_error"),
    ('  {"error": {"type": "invalid_request"}}', "json_error"),
]
"""Tool results and the error pattern each must be flagged by."""


@pytest.mark.parametrize(("text", "reason"), ERRORS)
def test_error_patterns(text: str, reason: str) -> None:
    assert error_reason(text) == reason
    assert looks_like_error(text)


NOT_ERRORS = [
    "This function raises an exception when the timeout is reached.",
    "Error handling is described in docs/errors.md",
    "set the timeout to 30s",
    "errors are handled by the retry layer",
    "see the exception docs",
    "Timeout: 30 seconds\nRetries: 3",
    "    raise ValueError('bad')",
    "raise TimeoutError",
    "except TimeoutError:",
    "    except TimeoutError:\n        pass",
    "src/app.py:12:        except KeyError:",
    "   12→class ParseError(Exception):",
    PYTHON_SOURCE,
    claude_code_read(PYTHON_SOURCE),
    "    error: str | None = None\n    warning: str | None = None",
    "warning: unused variable `x`\n --> src/main.rs:2:9",
    PYTEST_PASSED,
    "E   a line that looks like an assertion, with no failure summary",
    "504 Gateway Timeout errors mean the upstream server was too slow.",
    "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n<title>Home</title>",
    "Segmentation faults are rare in Python.",
    "The segmentation fault was fixed in 2.1; panic: is Go's prefix.",
    "command not found errors mean PATH is wrong",
    "npm install finished; curl is installed",
    "<returncode>0</returncode>\n<output>ok</output>",
    "Exit code 0",
    json.dumps({"error": None, "result": [1, 2]}),
    json.dumps({"status": "ok", "errors": []}),
    json.dumps([{"error": "inside a list is data, not a failure"}]),
    "{not json but starts with a brace: error}",
    "set a timeout of 30 s; the connection was fine",
    # Go: grep -n hits (one number), go test's indented logs, stack frames.
    "main.go:5:\tfoo := bar()",
    "    x_test.go:9: got 1, want 2",
    "goroutine 1 [running]:\nmain.main()\n\t/home/u/main.go:12 +0x1d",
    "see main.go:5:2:for the call",
    # Logs: other levels, even when they mention errors; no timestamp; indented.
    "2024-05-01 12:00:00,123 INFO retrying after error",
    "2024-05-01 12:00:00,123 INFO processed; ERROR count: 0",
    "2024-05-01 12:00:00 [main] WARNING ERROR budget low",
    "[2024-05-01 12:00:00] DEBUG error handler registered",
    "2024-05-01 12:00:00 [error-reporting] started",
    "2024-05-01 12:00:00 TERRORS are not levels",
    "Released 2024-05-01: ERROR handling improved",
    "  2024-05-01 12:00:00 ERROR indented, as in a file being read",
    claude_code_read("2024-05-01 12:00:00 ERROR read from app.log"),
    'time="2024-05-01T12:00:00Z" level=info msg="error rate 0"',
    # Permission denied in prose, code, comments and quotes.
    "make sure you don't get permission denied",
    "Permission denied errors happen when the file mode is wrong.",
    "bash: ./x.sh: Permission denied means the script is not executable",
    "    print('x: Permission denied')",
    "# fails with: Permission denied",
    '"open x: permission denied"',
    claude_code_read("bash: x: Permission denied"),
    "",
]
"""Prose, code and successful output that mention errors without being one."""


@pytest.mark.parametrize("text", NOT_ERRORS)
def test_prose_code_and_success_are_not_errors(text: str) -> None:
    assert error_reason(text) is None
    assert not looks_like_error(text)


def test_list_content_is_checked_by_its_text_parts() -> None:
    assert looks_like_error([{"type": "text", "text": "Error: nope"}])
    assert looks_like_error(
        (TextPart(text="x"), TextPart(text="Traceback (most recent call last)"))
    )
    assert not looks_like_error([{"type": "image_url", "image_url": {"url": "Error: x"}}])
    assert not looks_like_error(None)


def test_provider_flag_counts() -> None:
    assert is_error_result(tool("a", "all good", is_error=True))
    assert not is_error_result(tool("a", "all good"))
