"""What the proxy may show of a URL or a request path in a log line or an error body.

URLs and query strings can carry credentials (Azure's ``?api-key=``, a ``user:secret@`` in a
base URL), and a path can carry a newline that would forge a log line. What a header says of a
rewrite is built from fields (:meth:`~ctxcompact.proxy._rewrite.RewriteReport.header`), so
nothing here reads error messages.
"""

from __future__ import annotations

import logging

import httpx

__all__ = ["QuerylessAccessLog", "display_url", "shown_path", "shown_store"]

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


def shown_store(store: object) -> str:
    """Which store the proxy uses, as its start-up line says it: no credentials.

    A store with a ``url`` (a server's) is shown by :func:`display_url`; the built-in ones
    by kind and file, with their bound (and a file's mode).

    Example:
        >>> from ctxcompact.store import MemoryStore
        >>> shown_store(None), shown_store(MemoryStore(max_bytes=2**20))
        ('none', 'in memory (this process only, at most 1 MiB)')
    """
    # Deferred: the store package is only needed when the proxy names one.
    from ..store import MemoryStore, SQLiteStore

    if store is None:
        return "none"
    url = getattr(store, "url", None)
    if isinstance(url, str):
        return display_url(url)
    if isinstance(store, SQLiteStore):
        path = shown_path(str(store.path))
        return f"SQLite {path} (at most {_mib(store.max_bytes)}, file 0600)"
    if isinstance(store, MemoryStore):
        return f"in memory (this process only, at most {_mib(store.max_bytes)})"
    return type(store).__name__


def _mib(n: int) -> str:
    return f"{n / 2**20:g} MiB"


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
