"""What the proxy may show of a request in a header, an error body or a log line above DEBUG.

Exception messages can quote the conversation (a third-party strategy raising
``ValueError(f"cannot summarize {text}")``) and URLs can carry credentials; the functions here
keep type names, strategy names and fixed reasons, and drop the rest.
"""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING

import httpx

if TYPE_CHECKING:
    from ._rewrite import RewriteReport

__all__ = ["display_url", "safe_report_header"]


def display_url(url: str) -> str:
    """``url`` as it may be shown in a log line or an error: no credentials, no query.

    Example:
        >>> display_url("https://user:secret@example.com/v1/chat?key=abc")
        'https://example.com/v1/chat'
    """
    try:
        return str(httpx.URL(url).copy_with(userinfo=b"", query=None, fragment=None))
    except (httpx.InvalidURL, ValueError):
        return "(invalid URL)"


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
