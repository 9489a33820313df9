"""The ASGI app: parse, rewrite, forward, stream the upstream's answer back unchanged."""

from __future__ import annotations

import contextlib
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ._rewrite import Body, Rewriter, RewriteReport, dumps

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping

    from starlette.requests import Request

__all__ = ["ProxySettings", "build_app"]

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


class _BodyTooLarge(Exception):
    pass


def build_app(
    rewriter: Rewriter, settings: ProxySettings, *, client: httpx.AsyncClient | None = None
) -> Starlette:
    """An ASGI app that compacts chat requests and forwards everything to the upstreams.

    Args:
        rewriter: Decides what happens to each chat request.
        settings: Upstream base URLs, timeout and body size limit.
        client: The pooled HTTP client for upstream calls; one is created (and closed on
            shutdown) when not given.
    """
    owned = client is None
    http = client or httpx.AsyncClient(timeout=httpx.Timeout(settings.timeout))

    async def chat_completions(request: Request) -> Response:
        return await _handle(request, "openai")

    async def messages(request: Request) -> Response:
        return await _handle(request, "anthropic")

    async def passthrough(request: Request) -> Response:
        try:
            raw = await _read_body(request, settings.max_body_bytes)
        except _BodyTooLarge:
            return _too_large(settings.max_body_bytes)
        provider = "anthropic" if _looks_anthropic(request.headers) else "openai"
        return await _forward(request, provider, raw, None)

    async def _handle(request: Request, provider: str) -> Response:
        try:
            raw = await _read_body(request, settings.max_body_bytes)
        except _BodyTooLarge:
            return _too_large(settings.max_body_bytes)
        try:
            body = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            return _error(400, f"request body is not valid JSON: {exc}")
        if not isinstance(body, dict):
            return _error(400, "request body must be a JSON object")
        if provider == "openai":
            new_body, report = await rewriter.rewrite_openai(body)
        else:
            new_body, report = await rewriter.rewrite_anthropic(body)
        logger.info(
            "%s %s %s", request.method, request.url.path, report.header()
        )  # never the headers: they carry the API key
        out = raw if new_body is None else dumps(new_body)
        return await _forward(request, provider, out, report)

    async def _forward(
        request: Request, provider: str, content: bytes, report: RewriteReport | None
    ) -> Response:
        url = _upstream_url(settings, provider, request.url.path, request.url.query)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROP_REQUEST}
        upstream_request = http.build_request(request.method, url, headers=headers, content=content)
        try:
            upstream = await http.send(upstream_request, stream=True)
        except httpx.TimeoutException as exc:
            return _error(504, f"upstream timed out: {type(exc).__name__}", report)
        except httpx.HTTPError as exc:
            return _error(502, f"upstream unreachable: {type(exc).__name__}: {exc}", report)
        response_headers = {
            k: v for k, v in upstream.headers.items() if k.lower() not in _DROP_RESPONSE
        }
        if report is not None:
            response_headers[REPORT_HEADER] = report.header()
        return StreamingResponse(
            _relay(upstream),
            status_code=upstream.status_code,
            headers=response_headers,
            background=BackgroundTask(upstream.aclose),
        )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if owned:
                await http.aclose()

    routes = [
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/messages", messages, methods=["POST"]),
        Route(
            "/{path:path}",
            passthrough,
            methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"],
        ),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.rewriter = rewriter  # what decides, for introspection and tests
    return app


async def _relay(upstream: httpx.Response) -> AsyncIterator[bytes]:
    # Raw bytes, chunk by chunk as they arrive: SSE streams are relayed without buffering and
    # a compressed body keeps its content-encoding header.
    async for chunk in upstream.aiter_raw():
        yield chunk


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _BodyTooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def _looks_anthropic(headers: Mapping[str, str]) -> bool:
    return "anthropic-version" in headers or "x-api-key" in headers


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
    headers = {REPORT_HEADER: report.header()} if report is not None else None
    body: Body = {"error": {"type": "ctxcompact_proxy_error", "message": message}}
    return JSONResponse(body, status_code=status, headers=headers)


def _too_large(limit: int) -> Response:
    return _error(413, f"request body is larger than the proxy's limit of {limit} bytes")
