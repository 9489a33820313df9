"""The ASGI app: parse, rewrite, forward, stream the upstream's answer back unchanged.

Fail-open: a valid JSON body within the limits of :mod:`._json` is always forwarded, rewritten
when the rewriter could, else byte for byte as received; nothing the rewriter raises becomes a
500. What the proxy logs above DEBUG and puts in the ``x-ctxcompact`` header is exception
type names and fixed reasons, never message content (:func:`safe_report_header`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol
from urllib.parse import unquote

import httpx
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .._controller.events import strategy_name
from ._callers import caller_namespace
from ._json import BodyError, check_charset, encode_body, parse_body
from ._recall import CALLER
from ._redact import QuerylessAccessLog, display_url, safe_report_header, shown_path
from ._relay import Relay
from ._rewrite import Body, RewriteReport, dumps

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping

    from starlette.requests import Request

    from ._recall import Recall
    from ._retry import ContextRetry

__all__ = ["BodyRewriter", "ProxySettings", "build_app", "safe_report_header"]

logger = logging.getLogger("ctxcompact.proxy")

# Hop-by-hop headers (RFC 9110 §7.6.1) and the ones httpx recomputes.
_DROP_REQUEST = frozenset(
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
_DROP_RESPONSE = frozenset(
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

UPSTREAM_KEEPALIVE_EXPIRY = 4.0
"""Seconds the proxy keeps an idle upstream connection for reuse: below the 5 s after which
common servers close one (uvicorn, so vLLM and LiteLLM; llama.cpp's server; Node), so the
proxy never sends on a connection the upstream is closing (httpx's default is 5 s too)."""


@dataclass(frozen=True, slots=True)
class ProxySettings:
    """Where to forward and how much to accept.

    Example:
        >>> ProxySettings("http://127.0.0.1:9/v1", "http://127.0.0.1:9").max_body_bytes
        33554432
    """

    openai_base_url: str
    anthropic_base_url: str
    timeout: float = 600.0
    max_body_bytes: int = 32 * 1024 * 1024


class BodyRewriter(Protocol):
    """What the app needs from a rewriter (:class:`~ctxcompact.proxy._rewrite.Rewriter`).

    Each method returns the new body, or ``None`` to forward the original bytes, and the
    report for the ``x-ctxcompact`` header. The app survives anything they raise.
    """

    async def rewrite_openai(self, body: Body) -> tuple[Body | None, RewriteReport]: ...

    async def rewrite_anthropic(self, body: Body) -> tuple[Body | None, RewriteReport]: ...

    async def rewrite_responses(self, body: Body) -> tuple[Body | None, RewriteReport]: ...


class _BodyTooLarge(Exception):
    pass


class _ClientGone(Exception):
    pass


def build_app(
    rewriter: BodyRewriter,
    settings: ProxySettings,
    *,
    client: httpx.AsyncClient | None = None,
    retry: ContextRetry | None = None,
) -> Starlette:
    """An ASGI app that compacts chat requests and forwards everything to the upstreams.

    Args:
        rewriter: Decides what happens to each chat request.
        settings: Upstream base URLs, timeout and body size limit.
        client: The pooled HTTP client for upstream calls; one is created (and closed on
            shutdown) when not given.
        retry: Compacts and resends chat requests the upstream refuses as too long.
    """
    owned = client is None
    limits = httpx.Limits(
        max_connections=100,
        max_keepalive_connections=20,
        keepalive_expiry=UPSTREAM_KEEPALIVE_EXPIRY,
    )  # httpx's defaults but the expiry
    http = client or httpx.AsyncClient(timeout=httpx.Timeout(settings.timeout), limits=limits)
    strategy, transforms = _names(rewriter)

    async def chat_completions(request: Request) -> Response:
        return await _handle(request, "openai")

    async def messages(request: Request) -> Response:
        return await _handle(request, "anthropic")

    async def responses(request: Request) -> Response:
        return await _handle(request, "responses")

    async def passthrough(request: Request) -> Response:
        path = normalised_path(request.url.path)
        if path is None:
            return _error(
                400,
                "request path leaves the proxy's base path or is ambiguous (percent-encoded "
                "dot segments or slashes, backslashes, control characters)",
            )
        try:
            raw = await _read_body(request, settings.max_body_bytes)
        except _BodyTooLarge:
            return _too_large(settings.max_body_bytes)
        except _ClientGone:
            return _client_gone(request)
        provider = "anthropic" if _looks_anthropic(request.headers) else "openai"
        return await _forward(request, provider, path, raw, None)

    async def _handle(request: Request, provider: str) -> Response:
        try:
            raw = await _read_body(request, settings.max_body_bytes)
        except _BodyTooLarge:
            return _too_large(settings.max_body_bytes)
        except _ClientGone:
            return _client_gone(request)
        try:
            check_charset(request.headers.get("content-type"))
            body = parse_body(raw)
        except BodyError as exc:
            return _error(400, exc.reason)
        # Whose store namespace, for the rewriter: a hash of every credential the request
        # carries (headers and query), or one of its own when it carries none.
        query = request.scope["query_string"].decode("latin-1")
        CALLER.set(caller_namespace(request.headers.items(), query))
        out, report = await _rewrite(request, provider, body, raw)
        # Never the headers: they carry the API key.
        logger.info("%s %s %s", request.method, request.url.path, safe_report_header(report))
        if report.error:
            logger.debug(
                "%s %s error detail: %.500s", request.method, request.url.path, report.error
            )
        recall: Recall | None = getattr(rewriter, "recall", None)
        if report.recall_namespace is None:
            recall = None  # the recall tool did not go out: nothing to answer
        return await _forward(request, provider, request.url.path, out, report, recall)

    async def _rewrite(
        request: Request, provider: str, body: Body, raw: bytes
    ) -> tuple[bytes, RewriteReport]:
        # Fail-open: whatever the rewriter or the encoder raises (a RecursionError on a deep
        # body included), the request goes out as it came in.
        stage = "rewriting"
        report: RewriteReport | None = None
        try:
            if provider == "openai":
                new_body, report = await rewriter.rewrite_openai(body)
            elif provider == "responses":
                new_body, report = await rewriter.rewrite_responses(body)
            else:
                new_body, report = await rewriter.rewrite_anthropic(body)
            if new_body is None:
                return raw, report
            stage = "encoding"
            return encode_body(new_body, dumps), report
        except Exception as exc:
            reason = f"{stage} raised {type(exc).__name__}"
            logger.warning(
                "%s %s: %s; forwarding the request unchanged",
                request.method,
                request.url.path,
                reason,
            )
            logger.debug("%s %s detail: %.500s", request.method, request.url.path, exc)
            if report is None:
                return raw, RewriteReport("failed", strategy, 0, 0, 0, 0, f"proxy {reason}")
            # The rewriter's counts stand for the request as received, which is what goes out.
            unsent = dataclasses.replace(
                report,
                action="failed",
                tokens_after=report.tokens_before,
                messages_after=report.messages_before,
                error="; ".join(filter(None, [report.error, f"proxy {reason}"])),
                recall_namespace=None,  # the recall tool went out with the rewrite
            )
            return raw, unsent

    async def _forward(
        request: Request,
        provider: str,
        path: str,
        content: bytes,
        report: RewriteReport | None,
        recall: Recall | None = None,
    ) -> Response:
        """Send the request upstream and relay the answer: the one way out, the recall path
        included, so both refuse, time out and break off alike."""
        url = _upstream_url(settings, provider, path, request.url.query)
        shown = display_url(url)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROP_REQUEST}
        try:
            upstream_request = http.build_request(
                request.method, url, headers=headers, content=content
            )
        except (httpx.InvalidURL, ValueError):  # UnicodeEncodeError: a non-ASCII header value
            return _error(400, "request path, query or headers cannot be forwarded", report)
        try:
            upstream = await http.send(upstream_request, stream=True)
        except httpx.TimeoutException as exc:
            logger.warning("upstream %s timed out: %s", shown, type(exc).__name__)
            return _error(504, f"upstream {shown} timed out: {type(exc).__name__}", report)
        except httpx.HTTPError as exc:
            logger.warning("upstream %s unreachable: %s", shown, type(exc).__name__)
            logger.debug("upstream %s detail: %.500s", shown, exc)
            return _error(502, f"upstream unreachable: {type(exc).__name__} at {shown}", report)

        async def resend(body: bytes) -> httpx.Response:
            again = http.build_request(request.method, url, headers=headers, content=body)
            return await http.send(again, stream=True)

        if recall is not None and report is not None:
            return await recall.respond(upstream, resend, provider, content, report, shown)
        chunks = None
        if retry is not None and report is not None:
            answer = await retry.answer(upstream, provider, content, report, resend)
            upstream, report, chunks = answer.upstream, answer.report, answer.chunks
        drop = _DROP_RESPONSE if chunks is None else _DROP_RESPONSE | {"content-encoding"}
        response_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in drop}
        if report is not None:
            response_headers[REPORT_HEADER] = safe_report_header(report)
        return Relay(upstream, shown, response_headers, chunks)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # Served by uvicorn, its access log would print each query string (where Azure and
        # Gemini clients may put their key). Added once per process, never removed: another
        # app of this proxy may still be serving.
        access = logging.getLogger("uvicorn.access")
        if not any(isinstance(f, QuerylessAccessLog) for f in access.filters):
            access.addFilter(QuerylessAccessLog())
        logger.info(
            "ctxcompact proxy: OpenAI upstream %s, Anthropic upstream %s, strategy %s, "
            "transforms %s",
            display_url(settings.openai_base_url),
            display_url(settings.anthropic_base_url),
            strategy,
            transforms,
        )
        try:
            yield
        finally:
            if owned:
                await http.aclose()

    routes = [
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/messages", messages, methods=["POST"]),
        Route("/v1/responses", responses, methods=["POST"]),
        Route("/responses", responses, methods=["POST"]),
        Route(
            "/{path:path}",
            passthrough,
            methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"],
        ),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.rewriter = rewriter  # what decides, for introspection and tests
    return app


def _names(rewriter: object) -> tuple[str, str]:
    """The strategy's name and the transforms' names, for the startup line and reports."""
    # The rewriter holds them itself, or on the controller (or the per-model windows, which
    # name the transforms each window's controller builds) it delegates to.
    holder = getattr(rewriter, "controller", None) or getattr(rewriter, "per_model", rewriter)
    strategy = getattr(holder, "strategy", None)
    names = getattr(holder, "transform_names", None)
    if names is None:
        names = [strategy_name(t) for t in getattr(holder, "transforms", ())]
    return (
        strategy_name(strategy) if strategy is not None else "unknown",
        ", ".join(names) or "none",
    )


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _BodyTooLarge
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _BodyTooLarge
            chunks.append(chunk)
    except ClientDisconnect:
        raise _ClientGone from None
    return b"".join(chunks)


def _client_gone(request: Request) -> Response:
    # Nobody will read this answer; it only ends the request without a traceback.
    logger.info(
        "%s %s: the client disconnected before sending the whole body",
        request.method,
        shown_path(request.url.path),
    )
    return _error(400, "the client disconnected before sending the whole body")


def _looks_anthropic(headers: Mapping[str, str]) -> bool:
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


def _upstream_url(settings: ProxySettings, provider: str, path: str, query: str) -> str:
    if provider == "anthropic":
        url = settings.anthropic_base_url.rstrip("/") + path
    else:
        # The OpenAI base URL conventionally ends in /v1; the client's path starts with it.
        base = settings.openai_base_url.rstrip("/")
        if base.endswith("/v1") and path.startswith("/v1/"):
            path = path[3:]
        url = base + path
    return f"{url}?{query}" if query else url


def _error(status: int, message: str, report: RewriteReport | None = None) -> Response:
    headers = {REPORT_HEADER: safe_report_header(report)} if report is not None else None
    body: Body = {"error": {"type": "ctxcompact_proxy_error", "message": message}}
    return JSONResponse(body, status_code=status, headers=headers)


def _too_large(limit: int) -> Response:
    return _error(413, f"request body is larger than the proxy's limit of {limit} bytes")
