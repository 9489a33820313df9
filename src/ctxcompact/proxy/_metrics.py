"""What an operator watches: the proxy's Prometheus metrics (``GET /metrics``).

Each :class:`~ctxcompact.proxy._app.ProxyApp` has its own :class:`ProxyMetrics` in its own
registry (prometheus-client), so two proxies in one process (tests, an embedding) count apart.
Label values come from closed sets written here or in :class:`~ctxcompact.Problem`'s kinds; the
one configured name, the strategy's, goes through
:func:`~ctxcompact._controller.problems.shown_name`. Nothing a client sends (a model name, a
path, message content) becomes a label, so the number of series is bounded whatever the
traffic.

Several worker processes: each process counts its own requests. With the
``PROMETHEUS_MULTIPROC_DIR`` environment variable set (to an empty directory, before the
workers start, as prometheus-client's multiprocess mode requires), every worker writes its
counters there and ``/metrics``, whichever worker answers it, sums them over all workers.
The summarizer breaker's figures are read from the answering worker's own breaker (each
process has its own), so they are per worker either way.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector

from .._controller.problems import shown_name

if TYPE_CHECKING:
    from collections.abc import Iterator

    from prometheus_client.metrics_core import Metric

    from .._controller.events import CompactionEvent
    from ..llm._breaker import CircuitBreakerLLM
    from ._rewrite import RewriteReport

__all__ = ["ROUTES", "UPSTREAM_ERRORS", "ProxyMetrics", "Totals", "multiprocess_dir"]

ROUTES = ("chat_completions", "messages", "responses", "passthrough")
"""The ``route`` label: the proxy's three chat routes and every other path."""

UPSTREAM_ERRORS = ("upstream_timeout", "upstream_unreachable")
"""``kind`` values of ``ctxcompact_proxy_errors_total`` beside the :class:`~ctxcompact.Problem`
kinds: the proxy answered 504 or 502 itself."""

# Seconds, from a fast local model's first token to a long answer's headers: the upstream's
# time to its response headers (a streamed answer's first byte), not to its last byte.
_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
# The proxy's own work on a request (parse, count, compact, encode): milliseconds, but a
# summary written by a model takes seconds.
_REWRITE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0)


# A status outside 1xx-5xx (a broken upstream) is one label, not one per status.
_STATUS_CLASSES = {n: f"{n}xx" for n in range(1, 6)}


def multiprocess_dir() -> str | None:
    """The directory of prometheus-client's multiprocess mode, when it is on."""
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


@dataclass(frozen=True, slots=True)
class Totals:
    """The proxy's counters summed over their labels (``ctxcompact wrap``'s summary line).

    Attributes:
        requests: Requests the proxy answered, every route.
        compactions: Compactions that replaced a history (status ``compacted``).
        tokens_before: Estimated prompt tokens of the chat requests as received.
        tokens_after: Estimated prompt tokens of the same requests as forwarded.
    """

    requests: int
    compactions: int
    tokens_before: int
    tokens_after: int

    @property
    def tokens_saved(self) -> int:
        """``tokens_before - tokens_after``."""
        return self.tokens_before - self.tokens_after


class ProxyMetrics:
    """The proxy's counters and histograms, and their exposition.

    Args:
        breaker: The summarizer's circuit breaker, whose state and counters are read at each
            scrape (``None``: no summarizer, or one without a breaker).

    Example:
        >>> metrics = ProxyMetrics()
        >>> metrics.upstream("chat_completions", 0.2, 200)
        >>> b"ctxcompact_proxy_upstream_seconds_count" in metrics.exposition()[0]
        True
    """

    def __init__(self, *, breaker: CircuitBreakerLLM | None = None) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self._requests = Counter(
            "ctxcompact_proxy_requests",
            "Requests the proxy answered, by route and outcome (what it did).",
            ["route", "outcome"],
            registry=r,
        )
        self._compactions = Counter(
            "ctxcompact_proxy_compactions",
            "Compaction events (the trigger fired), by strategy, trigger and status.",
            ["strategy", "trigger", "status"],
            registry=r,
        )
        self._cache_breaks = Counter(
            "ctxcompact_proxy_cache_breaks",
            "Compactions that rewrote a message an earlier call had already sent.",
            ["strategy"],
            registry=r,
        )
        self._tokens_before = Counter(
            "ctxcompact_proxy_tokens_before",
            "Estimated prompt tokens of chat requests as received.",
            ["route"],
            registry=r,
        )
        self._tokens_after = Counter(
            "ctxcompact_proxy_tokens_after",
            "Estimated prompt tokens of chat requests as forwarded.",
            ["route"],
            registry=r,
        )
        self._over_window = Counter(
            "ctxcompact_proxy_over_window",
            "Chat requests forwarded while still estimated over their window.",
            ["route"],
            registry=r,
        )
        self._retries = Counter(
            "ctxcompact_proxy_context_retries",
            "Requests cut and sent again after the upstream said they were too long.",
            ["route"],
            registry=r,
        )
        self._recall_calls = Counter(
            "ctxcompact_proxy_recall_calls",
            "Recall tool calls the proxy answered for the model.",
            registry=r,
        )
        self._recall_hits = Counter(
            "ctxcompact_proxy_recall_hits",
            "Recall tool calls that found the original.",
            registry=r,
        )
        self._errors = Counter(
            "ctxcompact_proxy_errors",
            "Problems met, by kind (ctxcompact.Problem kinds, upstream_timeout, "
            "upstream_unreachable).",
            ["kind"],
            registry=r,
        )
        self._upstream = Histogram(
            "ctxcompact_proxy_upstream_seconds",
            "Seconds from sending a request upstream to its response headers.",
            ["route"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self._upstream_status = Counter(
            "ctxcompact_proxy_upstream_responses",
            "Upstream answers by route and status class (2xx, 4xx, 5xx...).",
            ["route", "status_class"],
            registry=r,
        )
        self._rewrite = Histogram(
            "ctxcompact_proxy_rewrite_seconds",
            "Seconds the proxy spent reading and rewriting a chat request before sending it.",
            ["route"],
            buckets=_REWRITE_BUCKETS,
            registry=r,
        )
        self._breaker = breaker
        if breaker is not None:
            r.register(_BreakerCollector(breaker))
        # Each label set's child, once: ``labels()`` validates and locks on every call, a
        # dictionary lookup does not (the label sets are closed, so this stays small).
        self._children: dict[tuple[object, ...], Any] = {}
        self._strategies: dict[str, str] = {}  # a strategy's name -> its label

    def _child(self, metric: Counter | Histogram, *labels: str) -> Any:
        key = (id(metric), *labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    # -- recording ------------------------------------------------------------------------

    def request(self, route: str, outcome: str, report: RewriteReport | None) -> None:
        """One answered request: its outcome and, for a chat request, what its report says."""
        self._child(self._requests, route, outcome).inc()
        if report is None:
            return
        if report.tokens_before is not None and report.tokens_after is not None:
            self._child(self._tokens_before, route).inc(report.tokens_before)
            self._child(self._tokens_after, route).inc(report.tokens_after)
        if report.over_window is not None:
            self._child(self._over_window, route).inc()
        if report.retried:
            self._child(self._retries, route).inc(report.retried)
        for problem in report.problems:
            self._child(self._errors, problem.kind).inc()
        event = report.compaction
        if event is not None:
            self.compaction(event)

    def compaction(self, event: CompactionEvent) -> None:
        """One compaction event."""
        strategy = self._strategies.get(event.strategy)
        if strategy is None:
            strategy = self._strategies[event.strategy] = shown_name(event.strategy)
        self._child(self._compactions, strategy, event.trigger, event.status).inc()
        if event.cache_break:
            self._child(self._cache_breaks, strategy).inc()

    def upstream(self, route: str, seconds: float, status: int) -> None:
        """One upstream answer: the time to its headers and its status."""
        self._child(self._upstream, route).observe(seconds)
        self._child(self._upstream_status, route, _STATUS_CLASSES.get(status // 100, "other")).inc()

    def upstream_failed(self, kind: str) -> None:
        """The upstream could not be reached or did not answer in time (``UPSTREAM_ERRORS``)."""
        self._child(self._errors, kind).inc()

    def rewritten(self, route: str, seconds: float) -> None:
        """The proxy's own time on a chat request, before it went upstream."""
        self._child(self._rewrite, route).observe(seconds)

    def recalled(self, calls: int, hits: int) -> None:
        """Recall calls answered, and how many found their original."""
        self._recall_calls.inc(calls)
        self._recall_hits.inc(hits)

    # -- reading --------------------------------------------------------------------------

    def exposition(self) -> tuple[bytes, str]:
        """The body and content type of ``GET /metrics``.

        In multiprocess mode the counters are every worker's, summed from the directory.
        """
        registry = self.registry
        if multiprocess_dir() is not None:
            registry = CollectorRegistry()
            MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
            if self._breaker is not None:
                registry.register(_BreakerCollector(self._breaker))
        return generate_latest(registry), CONTENT_TYPE_LATEST

    def totals(self) -> Totals:
        """This process's counters, summed over their labels."""
        sums: dict[str, float] = {}
        for metric in self.registry.collect():
            for sample in metric.samples:
                sums[sample.name] = sums.get(sample.name, 0.0) + sample.value
        compacted = sum(
            sample.value
            for metric in self._compactions.collect()
            for sample in metric.samples
            if sample.name.endswith("_total") and sample.labels.get("status") == "compacted"
        )
        return Totals(
            requests=int(sums.get("ctxcompact_proxy_requests_total", 0)),
            compactions=int(compacted),
            tokens_before=int(sums.get("ctxcompact_proxy_tokens_before_total", 0)),
            tokens_after=int(sums.get("ctxcompact_proxy_tokens_after_total", 0)),
        )


class _BreakerCollector:
    """The summarizer breaker's state and counters, read from ``stats()`` at each scrape."""

    def __init__(self, breaker: CircuitBreakerLLM) -> None:
        self.breaker = breaker

    def collect(self) -> Iterator[Metric]:
        stats = self.breaker.stats()
        state = GaugeMetricFamily(
            "ctxcompact_summarizer_breaker_state",
            "The summarizer's circuit breaker: 1 for its current state, 0 for the others.",
            labels=["state"],
        )
        for name in ("closed", "open", "half_open"):
            state.add_metric([name], 1.0 if stats.state == name else 0.0)
        yield state
        counters = (
            ("ctxcompact_summarizer_calls", "Calls sent to the summarizer.", stats.calls),
            (
                "ctxcompact_summarizer_failures",
                "Summarizer calls that failed as in an outage.",
                stats.failures,
            ),
            (
                "ctxcompact_summarizer_refused",
                "Summarizer calls refused unsent while the breaker was open.",
                stats.refused,
            ),
            ("ctxcompact_summarizer_breaker_opened", "Times the breaker opened.", stats.opened),
        )
        for name, documentation, value in counters:
            yield CounterMetricFamily(name, documentation, value=float(value))
