"""What the proxy may show of a request in a header, an error body or a log line above DEBUG.

Exception messages can quote the conversation (a third-party strategy raising
``ValueError(f"cannot summarize {text}")``) and URLs can carry credentials; the functions here
keep type names, strategy names and fixed reasons, and drop the rest.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from typing import TYPE_CHECKING

import httpx

if TYPE_CHECKING:
    from ._rewrite import RewriteReport

__all__ = ["QuerylessAccessLog", "display_url", "safe_report_header", "shown_path"]

MAX_SHOWN = 200
"""Longest path (or URL) a log line or an error shows; a longer one is cut and says so."""


def _bounded(text: str) -> str:
    if len(text) <= MAX_SHOWN:
        return text
    return f"{text[:MAX_SHOWN]}...({len(text)} chars)"


def shown_path(path: str) -> str:
    r"""A request path as a log line may show it: no query, escaped, at most
    :data:`MAX_SHOWN` characters.

    Anything but printable ASCII (a newline that would start a forged log line, a Unicode
    line separator) is written as a Python escape.

    Example:
        >>> shown_path("/v1/x\nINFO forged?key=secret")
        '/v1/x\\nINFO forged'
    """
    path = path.split("?", 1)[0]
    escaped = path.encode("ascii", "backslashreplace").decode("ascii")
    escaped = "".join(c if " " <= c <= "~" else repr(c)[1:-1] for c in escaped)
    return _bounded(escaped)


def display_url(url: str) -> str:
    """``url`` as it may be shown in a log line or an error: no credentials, no query,
    at most :data:`MAX_SHOWN` characters.

    Example:
        >>> display_url("https://user:secret@example.com/v1/chat?key=abc")
        'https://example.com/v1/chat'
    """
    try:
        return _bounded(str(httpx.URL(url).copy_with(userinfo=b"", query=None, fragment=None)))
    except (httpx.InvalidURL, ValueError):
        return "(invalid URL)"


class QuerylessAccessLog(logging.Filter):
    """Keeps query strings out of uvicorn's access log (``uvicorn.access``).

    uvicorn logs each request as ``'%s - "%s %s HTTP/%s" %d'`` with the path *and query
    string* as an argument, and clients authenticate in the query (Azure's ``?api-key=``,
    Gemini's ``?key=``). Every string argument is cut at its ``?`` and passed through
    :func:`shown_path`; the client address, method and status have no ``?``.

    Example:
        >>> record = logging.LogRecord("uvicorn.access", 20, "", 0, '%s - "%s %s HTTP/%s" %d',
        ...     ("127.0.0.1:5", "GET", "/v1/models?key=secret", "1.1", 200), None)
        >>> QuerylessAccessLog().filter(record), record.getMessage()
        (True, '127.0.0.1:5 - "GET /v1/models HTTP/1.1" 200')
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(
                shown_path(arg) if isinstance(arg, str) and ("?" in arg or i == 2) else arg
                for i, arg in enumerate(record.args)
            )
        return True


# What of a report's free-text error may be shown: the rewriter builds it from exception
# messages, and those may quote the conversation (a third-party strategy writing
# f"cannot summarize {text}"). Only the fixed parts below are kept, each found at the start
# of the error or of one of its "; "-separated parts; the rest stays at DEBUG.
_NAME = r"[\w.:-]{1,64}"
_TYPE = r"[A-Za-z_]\w{0,63}"
_SAFE_ERRORS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(rf"(?:^|; ){pattern}"), shown)
    for pattern, shown in (
        (
            rf"transform (?P<name>{_NAME}) raised (?P<type>{_TYPE})(?=: | \(|;|$)",
            "transform {name} raised {type}",
        ),
        (rf"transform (?P<name>{_NAME}) output rejected: ", "transform {name} output rejected"),
        (
            rf"(?P<name>{_NAME})'s output cannot be sent in this format: ",
            "{name}'s output cannot be sent in this format",
        ),
        (
            r"the rewritten history cannot be sent in this format",
            "the rewritten history cannot be sent in this format",
        ),
        (r"messages not understood: ", "messages not understood"),
        (r"body has no 'messages' list", "body has no 'messages' list"),
        # Per-model windows (._windows) and Responses bodies (._responses).
        (r"the model's context window is not known", "the model's context window is not known"),
        (r"the model's window is too small", "the model's window is too small for the transforms"),
        (r"input is a string", "input is a string"),
        (r"body has no 'input' list", "body has no 'input' list"),
        (
            rf"proxy (?P<stage>rewriting|encoding) raised (?P<type>{_TYPE})(?=;|$)",
            "proxy {stage} raised {type}",
        ),
        (
            r"(?P<type>[A-Z]\w{0,63}(?:Error|Exception|Exit|Timeout|Interrupt)): ",
            "strategy raised {type}",
        ),
        # A controller that withholds third-party exception messages itself.
        (rf"(?P<type>{_TYPE}) \(message withheld", "strategy raised {type}"),
        (
            r"(?:strategy returned |output item \d+ is a |output breaks tool-call pairing)",
            "strategy output rejected",
        ),
        (
            r"circuit (?:now )?open after (?P<n>\d{1,9}) consecutive failures",
            "circuit open after {n} failures",
        ),
    )
)


def safe_report_header(report: RewriteReport) -> str:
    """The ``x-ctxcompact`` header for ``report`` with its error cut to fixed reasons.

    ``error=`` keeps exception type names, strategy and transform names and fixed phrases;
    an error the proxy does not recognise shows as ``details at DEBUG``. The full error is
    logged at DEBUG only.

    Example:
        >>> from ctxcompact.proxy._rewrite import RewriteReport
        >>> r = RewriteReport("failed", "S", 9, 9, 2, 2, "RuntimeError: user said hi")
        >>> safe_report_header(r)
        'action=failed; strategy=S; tokens=9->9; messages=2->2; error=strategy raised RuntimeError'
    """
    if not report.error:
        return report.header()
    found: list[tuple[int, str]] = []
    for pattern, shown in _SAFE_ERRORS:
        for match in pattern.finditer(report.error):
            found.append((match.start(), shown.format(**match.groupdict())))
    reasons = list(dict.fromkeys(text for _, text in sorted(found))) or ["details at DEBUG"]
    return dataclasses.replace(report, error="; ".join(reasons)).header()
