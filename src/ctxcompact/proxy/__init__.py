"""An OpenAI- and Anthropic-compatible HTTP proxy that compacts every chat request.

Point an agent's base URL at the proxy (``http://127.0.0.1:8787/v1`` for OpenAI clients,
``http://127.0.0.1:8787`` for Anthropic clients) and its requests get the configured
per-request transforms and triggered compaction before they reach the real provider.
``GET /metrics`` serves its counters in the Prometheus text format. Needs the ``proxy`` extra
(starlette, uvicorn, httpx, prometheus-client, orjson).
"""

from __future__ import annotations

import gc
import importlib
from typing import TYPE_CHECKING

from .._wiring import as_config, wire
from ..exceptions import MissingDependencyError
from ..llm import CircuitBreakerLLM
from ..store._paths import default_store_path

if TYPE_CHECKING:
    import httpx
    from starlette.applications import Starlette

    from .._contract.protocols import LLM, CompactionStrategy
    from .._tokens.counters import TokenCounter
    from .._wiring import ConfigSource

__all__ = [
    "ERROR_BODY_LIMIT",
    "MAX_RECALL_ROUNDS",
    "UPSTREAM_KEEPALIVE_EXPIRY",
    "Rewriter",
    "create_app",
    "parse_body",
    "serve",
]


def create_app(
    config: ConfigSource,
    *,
    strategy: CompactionStrategy | None = None,
    llm: LLM | None = None,
    token_counter: TokenCounter | None = None,
    client: httpx.AsyncClient | None = None,
) -> Starlette:
    """Build the proxy's ASGI app from a config (or the path of its TOML file).

    The window is ``[compaction] max_context_size``, else the window of ``[compaction]
    model``; with neither, each request is compacted against the window of the model it
    names (``[models]``, then :func:`~ctxcompact.context_window`), and a request naming a
    model whose window is not known is forwarded unchanged (``action=skipped``). A request
    the upstream refuses as over its window is cut and sent again (:mod:`._retry`).

    The store is ``[store]``'s; when it names none, a SQLite file in the user's cache folder
    (:func:`~ctxcompact.store.default_store_path`), unless ``[store] enabled = false``.

    Args:
        config: The configuration (``[compaction]``, ``[proxy]``, transforms, counting).
        strategy: Overrides ``[compaction] strategy``.
        llm: The summarizer; built from ``[compaction.llm]`` when not given and configured.
        token_counter: Overrides ``[token_counting]``.
        client: The pooled upstream HTTP client (tests pass one; normally created here).

    Example:
        >>> app = create_app("examples/recommended.toml")  # a path will do
    """
    try:
        from ._app import ProxySettings, build_app
        from ._metrics import ProxyMetrics
        from ._recall import Recall, text_tokens
        from ._retry import ContextRetry
        from ._rewrite import Rewriter
        from ._windows import ModelWindows
    except ImportError as exc:  # starlette or httpx missing
        raise MissingDependencyError("the ctxcompact proxy", "proxy") from exc
    # Without a window, each request gets the window of the model it names: one controller
    # per window, built by the wiring (ModelWindows).
    wiring = wire(
        config,
        strategy=strategy,
        llm=llm,
        token_counter=token_counter,
        build_store=True,
        default_store=default_store_path(),
        per_model_windows=True,
    )
    p = wiring.config.proxy
    settings = ProxySettings(
        openai_base_url=p.openai_base_url,
        anthropic_base_url=p.anthropic_base_url,
        timeout=p.timeout,
        max_body_bytes=p.max_body_bytes,
    )
    recall = (
        Recall(wiring.store, max_rounds=p.max_recall_rounds, count=text_tokens(wiring.counter))
        if wiring.recall and wiring.store is not None
        else None
    )
    rewriter = Rewriter(
        wiring.controller() if wiring.max_context_size is not None else None,
        per_model=ModelWindows(wiring) if wiring.max_context_size is None else None,
        recall=recall,
        reuse_summaries=wiring.store is not None,
    )
    retry = ContextRetry(wiring.config, wiring.counter)
    breaker = wiring.llm if isinstance(wiring.llm, CircuitBreakerLLM) else None
    return build_app(
        rewriter,
        settings,
        client=client,
        retry=retry,
        recall=recall,
        owned_store=wiring.store if wiring.owned_store else None,
        owned_models=wiring.owned,
        store=wiring.store,
        metrics=ProxyMetrics(breaker=breaker),
    )


_GC_THRESHOLD = 10_000
"""The collector's first threshold in the proxy process (Python's default is 700).

A request's parsed body and history (thousands of containers for a 200-message request) live
until its answer is relayed, then reference counting frees them: they hold no cycle. With
Python's default, every 700 allocations the collector walks them anyway, promotes them, and
older generations are walked again; at 50 concurrent requests that cost 20% of the proxy's
CPU and full passes of up to 90 ms. At 10,000 it walks about a tenth as often (0.03 ms
instead of 0.57 ms of CPU per request, ``benchmarks/bench_proxy.py``'s request, in process);
memory is unchanged, since what it would have found is freed without it.
"""


def serve(config: ConfigSource, *, host: str | None = None, port: int | None = None) -> None:
    """Run the proxy with uvicorn until interrupted."""
    try:
        import uvicorn
    except ImportError as exc:
        raise MissingDependencyError("the ctxcompact proxy", "proxy") from exc
    config = as_config(config)
    app = create_app(config)
    # Everything built so far (the SDKs' modules, the config, the strategy) lives as long as
    # the process: moving it out of the collector's generations keeps a full collection from
    # walking it, which otherwise adds 100-160 ms to whichever request triggers the first one.
    gc.freeze()
    gc.set_threshold(_GC_THRESHOLD)
    uvicorn.run(
        app,
        host=host if host is not None else config.proxy.host,
        port=port if port is not None else config.proxy.port,
        log_level="info",
        timeout_keep_alive=config.proxy.keep_alive_timeout,
    )


def __getattr__(name: str) -> object:
    """``Rewriter`` (the per-request decision), ``parse_body`` (the strict JSON parser) and
    the proxy's fixed limits, for benchmarks and embedding; loaded on use, since they need
    the 'proxy' extra:

    * ``UPSTREAM_KEEPALIVE_EXPIRY``: seconds an idle upstream connection is kept (give an
      ``httpx.AsyncClient`` of your own, ``create_app(client=...)``, the same);
    * ``ERROR_BODY_LIMIT``: bytes of an upstream 400/413 body read to tell a
      context-too-long error; a longer body is relayed whole, not retried;
    * ``MAX_RECALL_ROUNDS``: recall rounds the proxy answers per client request by default
      (``[proxy] max_recall_rounds``); a closing round follows.
    """
    if name not in _LAZY:
        raise AttributeError(f"module 'ctxcompact.proxy' has no attribute {name!r}")
    try:  # deferred: the optional 'proxy' extra (httpx)
        module = importlib.import_module(_LAZY[name], __name__)
    except ImportError as exc:
        raise MissingDependencyError("the ctxcompact proxy", "proxy") from exc
    return getattr(module, name)


_LAZY = {
    "Rewriter": "._rewrite",
    "parse_body": "._json",
    "UPSTREAM_KEEPALIVE_EXPIRY": "._app",
    "ERROR_BODY_LIMIT": "._retry",
    "MAX_RECALL_ROUNDS": "._recall",
}
