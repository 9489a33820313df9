"""The ASGI app: parse, rewrite, forward, stream the upstream's answer back unchanged.

Fail-open: a valid JSON body within the limits of :mod:`._json` is always forwarded, rewritten
when the rewriter could, else byte for byte as received; nothing the rewriter raises becomes a
500. What the proxy logs above DEBUG and puts in the ``x-ctxcompact`` header is built from
the fields of each :class:`~ctxcompact.Problem` (kind, strategy or transform name, exception
type name), never from an exception's message (:meth:`RewriteReport.header`).

:class:`ProxyApp` is the app: its methods are the routes, and its lifespan closes what the
proxy owns (the upstream client, the store and the models it built).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from dataclasses import dataclass
from http.cookiejar import Cookie, CookieJar, CookiePolicy
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import httpx
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import Response
from starlette.routing import Route

from .._controller.problems import Problem
from ._callers import caller_namespace
from ._http import (
    DROP_REQUEST,
    DROP_RESPONSE,
    REPORT_HEADER,
    BodyTooLarge,
    ClientGone,
    client_gone,
    error_response,
    looks_anthropic,
    normalised_path,
    read_body,
    too_large,
    upstream_url,
)
from ._json import BodyError, check_charset, encode_body, parse_body
from ._metrics import ProxyMetrics
from ._observe import ObserveRequests, observation, start_request_span, using
from ._redact import QuerylessAccessLog, display_url, shown_store
from ._relay import Relay
from ._rewrite import Body, RewriteReport, dumps, raw_count

if TYPE_CHECKING:
    import urllib.request
    from collections.abc import AsyncIterator, Sequence

    from starlette.requests import Request

    from .._controller.problems import ProblemKind
    from ._observe import Observation
    from ._recall import Recall
    from ._retry import ContextRetry

__all__ = ["BodyRewriter", "ProxyApp", "ProxySettings", "build_app"]

logger = logging.getLogger("ctxcompact.proxy")


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

    Each ``rewrite_*`` method returns the new body, or ``None`` to forward the original
    bytes, and the report for the ``x-ctxcompact`` header; ``caller`` is whose originals the
    request's are in the store (:func:`~ctxcompact.proxy._callers.caller_namespace`). The app
    survives anything they raise.
    """

    @property
    def strategy_name(self) -> str:
        """The triggered strategy's name (reports and the start-up line)."""
        ...

    @property
    def transform_names(self) -> tuple[str, ...]:
        """The per-request transforms' names (the start-up line)."""
        ...

    async def rewrite_openai(
        self, body: Body, *, caller: str | None = None
    ) -> tuple[Body | None, RewriteReport]: ...

    async def rewrite_anthropic(
        self, body: Body, *, caller: str | None = None
    ) -> tuple[Body | None, RewriteReport]: ...

    async def rewrite_responses(
        self, body: Body, *, caller: str | None = None
    ) -> tuple[Body | None, RewriteReport]: ...


@runtime_checkable
class _Closable(Protocol):
    def close(self) -> None: ...


@runtime_checkable
class _AsyncClosable(Protocol):
    async def aclose(self) -> None: ...


class ProxyApp:
    """The proxy: one method per route, and a lifespan that closes what the proxy owns.

    Args:
        rewriter: Decides what happens to each chat request.
        settings: Upstream base URLs, timeout and body size limit.
        client: The pooled HTTP client for upstream calls; one is created (and closed on
            shutdown) when not given.
        retry: Compacts and resends chat requests the upstream refuses as too long.
        recall: Answers the model's recall calls on requests that went out with the recall
            tool (the rewriter offers it; ``[store] recall``).
        owned_store: A store the proxy opened (``[store]``): closed on shutdown.
        owned_models: Models the proxy built (the summarizer): closed on shutdown.
        store: The store the proxy keeps originals and summaries in (named in the start-up
            line); ``owned_store`` when not given.
        metrics: Its counters, served by ``GET /metrics`` (a new set when not given).

    Example:
        >>> from ctxcompact import CompactionController
        >>> from ctxcompact.proxy._rewrite import Rewriter
        >>> from ctxcompact.strategies import ToolResultHiding
        >>> controller = CompactionController(ToolResultHiding(), max_context_size=100_000)
        >>> settings = ProxySettings("http://127.0.0.1:9/v1", "http://127.0.0.1:9")
        >>> app = ProxyApp(Rewriter(controller), settings).asgi()
        >>> [route.path for route in app.routes][:2]
        ['/v1/chat/completions', '/chat/completions']
    """

    def __init__(
        self,
        rewriter: BodyRewriter,
        settings: ProxySettings,
        *,
        client: httpx.AsyncClient | None = None,
        retry: ContextRetry | None = None,
        recall: Recall | None = None,
        owned_store: object | None = None,
        owned_models: Sequence[object] = (),
        store: object | None = None,
        metrics: ProxyMetrics | None = None,
    ) -> None:
        self.rewriter = rewriter
        self.settings = settings
        self.retry = retry
        self.recall = recall
        self.metrics = metrics if metrics is not None else ProxyMetrics()
        if recall is not None:
            recall.on_answered = self.metrics.recalled
        self.store = store if store is not None else owned_store
        self._owned_store = owned_store
        self._owned_models = tuple(owned_models)
        self._owns_client = client is None
        limits = httpx.Limits(
            max_connections=100,
            max_keepalive_connections=20,
            keepalive_expiry=UPSTREAM_KEEPALIVE_EXPIRY,
        )  # httpx's defaults but the expiry
        self.http = client or httpx.AsyncClient(
            timeout=httpx.Timeout(settings.timeout),
            limits=limits,
            # One client serves every caller: a cookie one caller's upstream answer set must
            # never go out with another caller's request.
            cookies=CookieJar(policy=_NoCookies()),
        )

    def asgi(self) -> Starlette:
        """The Starlette app serving these routes (``app.state.rewriter`` is the rewriter,
        ``app.state.metrics`` its :class:`~ctxcompact.proxy._metrics.ProxyMetrics`)."""
        routes = [
            Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
            Route("/chat/completions", self.chat_completions, methods=["POST"]),
            Route("/v1/messages", self.messages, methods=["POST"]),
            Route("/v1/responses", self.responses, methods=["POST"]),
            Route("/responses", self.responses, methods=["POST"]),
            Route("/metrics", self.scrape, methods=["GET"]),
            Route("/{path:path}", self.passthrough, methods=_ANY_METHOD),
        ]
        middleware = [Middleware(ObserveRequests, metrics=self.metrics)]
        app = Starlette(routes=routes, middleware=middleware, lifespan=self.lifespan)
        app.state.rewriter = self.rewriter  # what decides, for introspection and tests
        app.state.metrics = self.metrics
        return app

    # -- the routes -------------------------------------------------------------------------

    async def chat_completions(self, request: Request) -> Response:
        """``POST /v1/chat/completions``: an OpenAI Chat Completions request."""
        return await self._handle(request, "openai")

    async def messages(self, request: Request) -> Response:
        """``POST /v1/messages``: an Anthropic Messages request."""
        return await self._handle(request, "anthropic")

    async def responses(self, request: Request) -> Response:
        """``POST /v1/responses``: an OpenAI Responses request."""
        return await self._handle(request, "responses")

    async def scrape(self, request: Request) -> Response:
        """``GET /metrics``: the proxy's metrics in the Prometheus text format."""
        body, content_type = self.metrics.exposition()
        return Response(body, media_type=content_type)

    async def passthrough(self, request: Request) -> Response:
        """Any other path and method: forwarded as received (to Anthropic when the request
        looks like Anthropic's, else to OpenAI), after the path is checked."""
        observation(request).route = "passthrough"
        path = normalised_path(request.url.path)
        if path is None:
            return error_response(
                400,
                "request path leaves the proxy's base path or is ambiguous (percent-encoded "
                "dot segments or slashes, backslashes, control characters)",
            )
        try:
            raw = await read_body(request, self.settings.max_body_bytes)
        except BodyTooLarge:
            return too_large(self.settings.max_body_bytes)
        except ClientGone:
            return client_gone(request)
        provider = "anthropic" if looks_anthropic(request.headers) else "openai"
        return await self._forward(request, provider, path, raw, None)

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        """Start-up: the access-log filter and one line naming what is configured.
        Shutdown: close the upstream client, the models and the store the proxy owns."""
        # Served by uvicorn, its access log would print each query string (where Azure and
        # Gemini clients may put their key). Added once per process, never removed: another
        # app of this proxy may still be serving.
        access = logging.getLogger("uvicorn.access")
        if not any(isinstance(f, QuerylessAccessLog) for f in access.filters):
            access.addFilter(QuerylessAccessLog())
        logger.info(
            "ctxcompact proxy: OpenAI upstream %s, Anthropic upstream %s, strategy %s, "
            "transforms %s, store %s, recall %s",
            display_url(self.settings.openai_base_url),
            display_url(self.settings.anthropic_base_url),
            self.rewriter.strategy_name,
            ", ".join(self.rewriter.transform_names) or "none",
            shown_store(self.store),
            f"on (at most {self.recall.max_rounds} rounds)" if self.recall is not None else "off",
        )
        try:
            yield
        finally:
            if isinstance(self.rewriter, _AsyncClosable):  # its background summaries
                await self.rewriter.aclose()
            if self._owns_client:
                await self.http.aclose()
            for model in self._owned_models:
                if isinstance(model, _AsyncClosable):
                    await model.aclose()
            if isinstance(self._owned_store, _Closable):
                self._owned_store.close()

    # -- one chat request -------------------------------------------------------------------

    async def _handle(self, request: Request, provider: str) -> Response:
        seen = observation(request)
        route = seen.route = _ROUTES[provider]
        try:
            raw = await read_body(request, self.settings.max_body_bytes)
        except BodyTooLarge:
            return too_large(self.settings.max_body_bytes)
        except ClientGone:
            return client_gone(request)
        try:
            check_charset(request.headers.get("content-type"))
            body = parse_body(raw)
        except BodyError as exc:
            return error_response(400, exc.reason)
        # Whose store namespace: a hash of every credential the request carries (headers
        # and query), or one of its own when it carries none.
        query = request.scope["query_string"].decode("latin-1")
        caller = caller_namespace(request.headers.items(), query)
        base = (
            self.settings.anthropic_base_url
            if provider == "anthropic"
            else self.settings.openai_base_url
        )
        start_request_span(seen, route, body, base)
        with using(seen.span):  # the compaction span, if any, is its child
            started = time.perf_counter()
            out, report = await self._rewrite(request, provider, body, raw, caller)
            self.metrics.rewritten(route, time.perf_counter() - started)
            return await self._send_chat(request, provider, out, report)

    async def _send_chat(
        self, request: Request, provider: str, out: bytes, report: RewriteReport
    ) -> Response:
        # Never the headers: they carry the API key.
        logger.info("%s %s %s", request.method, request.url.path, report.header())
        if report.problems:
            logger.debug(
                "%s %s error detail: %.500s", request.method, request.url.path, report.error
            )
        # The recall tool went out: its calls are answered (else nothing to answer).
        recall = self.recall if report.recall_namespace is not None else None
        return await self._forward(request, provider, request.url.path, out, report, recall)

    async def _rewrite(
        self, request: Request, provider: str, body: Body, raw: bytes, caller: str
    ) -> tuple[bytes, RewriteReport]:
        # Fail-open: whatever the rewriter or the encoder raises (a RecursionError on a deep
        # body included), the request goes out as it came in.
        stage: ProblemKind = "proxy_rewriting_raised"
        report: RewriteReport | None = None
        try:
            if provider == "openai":
                new_body, report = await self.rewriter.rewrite_openai(body, caller=caller)
            elif provider == "responses":
                new_body, report = await self.rewriter.rewrite_responses(body, caller=caller)
            else:
                new_body, report = await self.rewriter.rewrite_anthropic(body, caller=caller)
            if new_body is None:
                return raw, report
            stage = "proxy_encoding_raised"
            return encode_body(new_body, dumps), report
        except Exception as exc:
            problem = Problem.raised(stage, exc)
            logger.warning(
                "%s %s: %s; forwarding the request unchanged",
                request.method,
                request.url.path,
                problem.shown.removeprefix("proxy "),
            )
            logger.debug("%s %s detail: %.500s", request.method, request.url.path, exc)
            if report is None:
                name = self.rewriter.strategy_name
                n = raw_count(provider, body)  # not read: its length as received
                return raw, RewriteReport("failed", name, None, None, n, n, (problem,))
            # The rewriter's counts stand for the request as received, which is what goes out.
            unsent = dataclasses.replace(
                report,
                action="failed",
                tokens_after=report.tokens_before,
                messages_after=report.messages_before,
                problems=(*report.problems, problem),
                recall_namespace=None,  # the recall tool went out with the rewrite
                recall_added=False,
            )
            return raw, unsent

    async def _forward(
        self,
        request: Request,
        provider: str,
        path: str,
        content: bytes,
        report: RewriteReport | None,
        recall: Recall | None = None,
    ) -> Response:
        """Send the request upstream and relay the answer: the one way out, the recall path
        included, so both refuse, time out and break off alike."""
        http = self.http
        seen = observation(request)
        seen.report = report
        route = seen.route or "passthrough"
        url = upstream_url(self.settings, provider, path, request.url.query)
        shown = display_url(url)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in DROP_REQUEST}
        try:
            upstream_request = http.build_request(
                request.method, url, headers=headers, content=content
            )
        except (httpx.InvalidURL, ValueError):  # UnicodeEncodeError: a non-ASCII header value
            return error_response(400, "request path, query or headers cannot be forwarded", report)

        async def send(outgoing: httpx.Request) -> httpx.Response:
            started = time.perf_counter()
            answer = await http.send(outgoing, stream=True)
            self.metrics.upstream(route, time.perf_counter() - started, answer.status_code)
            return answer

        try:
            upstream = await send(upstream_request)
        except httpx.HTTPError as exc:
            return self._unreachable(seen, shown, exc, report)

        async def resend(body: bytes) -> httpx.Response:
            return await send(
                http.build_request(request.method, url, headers=headers, content=body)
            )

        seen.outcome = report.action if report is not None else "forwarded"
        if recall is not None and report is not None:
            return await recall.respond(upstream, resend, provider, content, report, shown)
        chunks = None
        if self.retry is not None and report is not None:
            answer = await self.retry.answer(upstream, provider, content, report, resend)
            upstream, report, chunks = answer.upstream, answer.report, answer.chunks
            seen.report = report
            seen.outcome = report.action if report is not None else seen.outcome
        drop = DROP_RESPONSE if chunks is None else DROP_RESPONSE | {"content-encoding"}
        response_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in drop}
        if report is not None:
            response_headers[REPORT_HEADER] = report.header()
        return Relay(upstream, shown, response_headers, chunks)

    def _unreachable(
        self, seen: Observation, shown: str, exc: httpx.HTTPError, report: RewriteReport | None
    ) -> Response:
        """The proxy's own 504 (the upstream timed out) or 502 (it could not be reached)."""
        seen.outcome = "upstream_error"
        seen.error_type = type(exc).__name__
        if isinstance(exc, httpx.TimeoutException):
            self.metrics.upstream_failed("upstream_timeout")
            logger.warning("upstream %s timed out: %s", shown, type(exc).__name__)
            return error_response(504, f"upstream {shown} timed out: {type(exc).__name__}", report)
        self.metrics.upstream_failed("upstream_unreachable")
        logger.warning("upstream %s unreachable: %s", shown, type(exc).__name__)
        logger.debug("upstream %s detail: %.500s", shown, exc)
        return error_response(502, f"upstream unreachable: {type(exc).__name__} at {shown}", report)


_ANY_METHOD = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
_ROUTES = {"openai": "chat_completions", "anthropic": "messages", "responses": "responses"}


def build_app(
    rewriter: BodyRewriter,
    settings: ProxySettings,
    *,
    client: httpx.AsyncClient | None = None,
    retry: ContextRetry | None = None,
    recall: Recall | None = None,
    owned_store: object | None = None,
    owned_models: Sequence[object] = (),
    store: object | None = None,
    metrics: ProxyMetrics | None = None,
) -> Starlette:
    """An ASGI app that compacts chat requests and forwards everything to the upstreams:
    :meth:`ProxyApp.asgi` (see :class:`ProxyApp` for the arguments)."""
    return ProxyApp(
        rewriter,
        settings,
        client=client,
        retry=retry,
        recall=recall,
        owned_store=owned_store,
        owned_models=owned_models,
        store=store,
        metrics=metrics,
    ).asgi()


class _NoCookies(CookiePolicy):
    """A cookie policy that keeps no cookie and sends none (the shared client's jar)."""

    netscape = True
    rfc2965 = False
    hide_cookie2 = False

    def set_ok(self, cookie: Cookie, request: urllib.request.Request) -> bool:
        return False

    def return_ok(self, cookie: Cookie, request: urllib.request.Request) -> bool:
        return False

    def domain_return_ok(self, domain: str, request: urllib.request.Request) -> bool:
        return False

    def path_return_ok(self, path: str, request: urllib.request.Request) -> bool:
        return False
