"""The proxy's HTTP plumbing: which headers are relayed, where a request goes upstream, how a
body is read and how the proxy's own errors look.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING
from urllib.parse import unquote

from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse, Response

from ._redact import shown_path

if TYPE_CHECKING:
    from collections.abc import Mapping

    from starlette.requests import Request

    from ._app import ProxySettings
    from ._rewrite import Body, RewriteReport

__all__ = [
    "DROP_REQUEST",
    "DROP_RESPONSE",
    "REPORT_HEADER",
    "BodyTooLarge",
    "ClientGone",
    "client_gone",
    "error_response",
    "looks_anthropic",
    "normalised_path",
    "read_body",
    "too_large",
    "upstream_url",
]

logger = logging.getLogger("ctxcompact.proxy")

# Hop-by-hop headers (RFC 9110 §7.6.1) and the ones httpx recomputes.
DROP_REQUEST = frozenset(
    {
        "host",
        "content-length",
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
    }
)
# The proxy's own server writes its date and server headers; relaying the upstream's too
# would send each twice.
DROP_RESPONSE = frozenset(
    {
        "content-length",
        "connection",
        "keep-alive",
        "transfer-encoding",
        "trailer",
        "upgrade",
        "date",
        "server",
    }
)
REPORT_HEADER = "x-ctxcompact"


class BodyTooLarge(Exception):
    pass


class ClientGone(Exception):
    pass


async def read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge
            chunks.append(chunk)
    except ClientDisconnect:
        raise ClientGone from None
    return b"".join(chunks)


def client_gone(request: Request) -> Response:
    # Nobody will read this answer; it only ends the request without a traceback.
    logger.info(
        "%s %s: the client disconnected before sending the whole body",
        request.method,
        shown_path(request.url.path),
    )
    return error_response(400, "the client disconnected before sending the whole body")


def looks_anthropic(headers: Mapping[str, str]) -> bool:
    return "anthropic-version" in headers or "x-api-key" in headers


def normalised_path(path: str) -> str | None:
    """``path`` with its dot segments resolved, or ``None`` when it must be refused.

    Refused: a path that climbs above the root (so, once appended to an upstream base URL,
    it would leave the base path), a segment that still decodes to a dot segment or a slash
    (``%2e%2e`` sent percent-encoded twice), a backslash (which some servers take for a
    slash) and control characters.

    Example:
        >>> normalised_path("/v1/./models"), normalised_path("/v1/../../admin/keys")
        ('/v1/models', None)
    """
    if "\\" in path or any(ord(c) < 0x20 or ord(c) == 0x7F for c in path):
        return None
    kept: list[str] = []
    for segment in path.split("/")[1:]:
        decoded = unquote(unquote(segment))
        if decoded != segment and (decoded in (".", "..") or "/" in decoded or "\\" in decoded):
            return None
        if segment == ".":
            continue
        if segment == "..":
            if not kept:
                return None
            kept.pop()
            continue
        kept.append(segment)
    return "/" + "/".join(kept)


def upstream_url(settings: ProxySettings, provider: str, path: str, query: str) -> str:
    if provider == "anthropic":
        url = settings.anthropic_base_url.rstrip("/") + path
    else:
        # The OpenAI base URL conventionally ends in /v1; the client's path starts with it.
        base = settings.openai_base_url.rstrip("/")
        if base.endswith("/v1") and path.startswith("/v1/"):
            path = path[3:]
        url = base + path
    return f"{url}?{query}" if query else url


def error_response(status: int, message: str, report: RewriteReport | None = None) -> Response:
    headers = {REPORT_HEADER: report.header()} if report is not None else None
    body: Body = {"error": {"type": "ctxcompact_proxy_error", "message": message}}
    return JSONResponse(body, status_code=status, headers=headers)


def too_large(limit: int) -> Response:
    return error_response(413, f"request body is larger than the proxy's limit of {limit} bytes")
