"""A summarizer outage through the proxy is paid once, over real HTTP on 127.0.0.1.

The proxy is built from a config whose ``[compaction.llm]`` points at a fake summarizer (a
real OpenAI-compatible server on loopback that can be turned down, answering 503, and up
again) and counts the requests it receives. With it down, the first triggered request pays
the attempts; the later ones make none (the breaker refuses at once), still get the cheaper
tiers, and say ``summarizer=unavailable`` in ``x-ctxcompact``. After the cool-down (the
breaker's clock is swapped for a manual one: no sleeping, no timing), one request probes;
a summarizer that is back closes the breaker. The breaker is shared by every request and by
the per-model controllers of one proxy process.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ctxcompact import load_config
from ctxcompact.llm import CircuitBreakerLLM
from ctxcompact.proxy import create_app
from ctxcompact.strategies import SUMMARY_PREFIX
from tests.helpers.proxy_servers import FakeUpstream, serve_in_thread
from tests.test_proxy import SECRET

SUMMARY = "The user asked to fix the failing test; files f0 to f5 were read."
MAX_RETRIES = 1  # so a failed call is 2 attempts


@dataclass
class FakeSummarizer:
    """An OpenAI-compatible summarizer that is down (503) or up; counts what reaches it."""

    up: bool = False
    requests: int = 0

    def app(self) -> Starlette:
        async def chat(request: Request) -> Response:
            self.requests += 1
            await request.body()
            if not self.up:
                return JSONResponse(
                    {"error": {"message": "down for maintenance", "type": "server_error"}},
                    status_code=503,
                    headers={"retry-after-ms": "1"},  # the SDK's retry waits 1 ms
                )
            return JSONResponse(
                {
                    "id": "chatcmpl-s",
                    "object": "chat.completion",
                    "created": 0,
                    "model": "summarizer",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": SUMMARY},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 500, "completion_tokens": 20, "total_tokens": 520},
                }
            )

        return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def servers() -> Iterator[tuple[FakeUpstream, str, FakeSummarizer, str]]:
    upstream, summarizer = FakeUpstream(), FakeSummarizer()
    with serve_in_thread(upstream.app()) as up, serve_in_thread(summarizer.app()) as summ:
        yield upstream, up, summarizer, summ


def config_file(
    tmp_path: Path, upstream: str, summarizer: str, strategy: str, window: str, params: str = ""
) -> Path:
    path = tmp_path / "proxy.toml"
    path.write_text(
        "[compaction]\n"
        f'strategy = "{strategy}"\n'
        f"{window}"
        "reserved_context_size = 500\n"
        "[compaction.params]\n"
        f"{params}"
        "[compaction.llm]\n"
        'provider = "openai"\n'
        'model = "summarizer"\n'
        f'base_url = "{summarizer}/v1"\n'
        'api_key_env = "CTXCOMPACT_TEST_UNSET_KEY"\n'
        f"max_retries = {MAX_RETRIES}\n"
        "timeout = 10\n"
        "context_window = 32000\n"
        "breaker_cooldown = 30\n"
        # The breaker alone: no kept summaries (the proxy's default store would reuse the
        # first request's compaction on the next ones; tests/test_proxy_summary_reuse.py).
        "[store]\n"
        "enabled = false\n"
        "[proxy]\n"
        f'openai_base_url = "{upstream}/v1"\n',
        encoding="utf-8",
    )
    return path


# fit_window = false: hiding alone while the summarizer is down, what these tests look at (by
# default the hidden history is then fitted to the window: the last test of this file).
HIDING_THEN_SUMMARY = (
    "hiding-then-summary",
    "preserve_recent_n = 1\nmax_summary_tokens = 200\nmax_preserved_messages = 2\n"
    "fit_window = false\n",
)


def summaries(body: dict[str, Any]) -> list[str]:
    """The summaries among the messages the upstream received."""
    texts = [m["content"] for m in body["messages"] if isinstance(m["content"], str)]
    return [t for t in texts if t.startswith(SUMMARY_PREFIX)]


def history() -> list[dict[str, Any]]:
    """A conversation whose task text alone keeps it over the trigger after hiding."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the failing test. " * 700},
    ]
    for i in range(6):
        function = {"name": "bash", "arguments": "{}"}
        call = {"id": f"call_{i}", "type": "function", "function": function}
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{i}", "content": f"line {i}\n" * 400},
        ]
    return messages


def ask(proxy: str, messages: list[dict[str, Any]], model: str = "m") -> dict[str, str]:
    """The ``x-ctxcompact`` header of one request, as ``key -> value``."""
    with openai.OpenAI(base_url=f"{proxy}/v1", api_key=SECRET, max_retries=0) as client:
        raw = client.chat.completions.with_raw_response.create(
            model=model, messages=messages, max_tokens=100
        )
    header = raw.headers["x-ctxcompact"]
    return dict(part.split("=", 1) for part in header.split("; "))


def breaker_of(app: Starlette, clock: Clock) -> CircuitBreakerLLM:
    rewriter = app.state.rewriter
    # The proxy's one summarizer: on its controller, or without a configured window on the
    # wiring every model window's controller is built from.
    shared = rewriter.controller if rewriter.controller is not None else rewriter.per_model.wiring
    breaker = shared.llm
    assert isinstance(breaker, CircuitBreakerLLM)
    breaker.clock = clock  # the cool-down on a manual clock: no sleeping in the test
    return breaker


def hidden_results(body: dict[str, Any]) -> int:
    return sum(
        1 for m in body["messages"] if m["role"] == "tool" and not m["content"].startswith("line")
    )


def test_an_outage_costs_the_first_request_only_and_a_probe_closes_the_breaker(
    servers: tuple[FakeUpstream, str, FakeSummarizer, str], tmp_path: Path
) -> None:
    upstream, up, summarizer, summ = servers
    strategy, params = HIDING_THEN_SUMMARY
    path = config_file(tmp_path, up, summ, strategy, "max_context_size = 4000\n", params)
    app = create_app(load_config(path))
    clock = Clock()
    breaker = breaker_of(app, clock)
    messages = history()
    with serve_in_thread(app) as proxy:
        first = ask(proxy, messages)
        paid = summarizer.requests
        later = [ask(proxy, messages) for _ in range(4)]
        after_outage = summarizer.requests
        stats = breaker.stats()

        clock.now += 31  # the cool-down is over; the summarizer is back
        summarizer.up = True
        probe = ask(proxy, messages)
        after_probe = summarizer.requests
        closed = breaker.state
        normal = ask(proxy, messages)

    assert paid == 1 + MAX_RETRIES  # the first request paid the attempts...
    assert after_outage == paid  # ...the next four reached no summarizer at all
    assert (stats.state, stats.opened, stats.refused) == ("open", 1, 4)
    assert first["action"] == "compacted"
    assert first["summarizer"] == "failed"
    for report in later:
        assert report["action"] == "compacted"  # hiding still applied
        assert report["summarizer"] == "unavailable"
    bodies = [r.json() for r in upstream.received]
    assert all(hidden_results(body) == 5 for body in bodies[:5])
    assert all(summaries(body) == [] for body in bodies[:5])

    assert after_probe == after_outage + 1  # one probe call, answered
    assert closed == "closed"
    assert "summarizer" not in probe
    assert "summarizer" not in normal
    assert summarizer.requests == after_probe + 1  # closed: the next request summarizes again
    # The task stays verbatim before the summary.
    assert bodies[5]["messages"][1]["content"] == messages[1]["content"]
    assert bodies[5]["messages"][2]["content"] == SUMMARY_PREFIX + SUMMARY
    assert summaries(bodies[5]) == [SUMMARY_PREFIX + SUMMARY]


def test_a_probe_into_a_summarizer_still_down_opens_the_breaker_again(
    servers: tuple[FakeUpstream, str, FakeSummarizer, str], tmp_path: Path
) -> None:
    _, up, summarizer, summ = servers
    strategy, params = HIDING_THEN_SUMMARY
    path = config_file(tmp_path, up, summ, strategy, "max_context_size = 4000\n", params)
    app = create_app(load_config(path))
    clock = Clock()
    breaker = breaker_of(app, clock)
    messages = history()
    with serve_in_thread(app) as proxy:
        ask(proxy, messages)
        clock.now += 31
        probe = ask(proxy, messages)
        after_probe = summarizer.requests
        refused = ask(proxy, messages)
    assert after_probe == 2 * (1 + MAX_RETRIES)
    assert summarizer.requests == after_probe
    assert probe["summarizer"] == "failed"
    assert refused["summarizer"] == "unavailable"
    assert (breaker.state, breaker.stats().opened) == ("open", 2)


def test_llm_summary_alone_forwards_the_request_unchanged_without_waiting(
    servers: tuple[FakeUpstream, str, FakeSummarizer, str], tmp_path: Path
) -> None:
    upstream, up, summarizer, summ = servers
    path = config_file(
        tmp_path, up, summ, "llm-summary", "max_context_size = 4000\n", "max_summary_tokens = 200\n"
    )
    app = create_app(load_config(path))
    breaker_of(app, Clock())
    messages = history()
    with serve_in_thread(app) as proxy:
        ask(proxy, messages)
        reports = [ask(proxy, messages) for _ in range(3)]
    assert summarizer.requests == 1 + MAX_RETRIES
    for report in reports:
        assert report["action"] == "failed"
        assert report["summarizer"] == "unavailable"
        assert report["error"] == "strategy raised LLMUnavailableError"
    # Forwarded as received: the client's messages, not a rewrite.
    assert all(r.json()["messages"] == messages for r in upstream.received)


def test_a_pipeline_keeps_its_llm_free_steps_while_the_summarizer_is_down(
    servers: tuple[FakeUpstream, str, FakeSummarizer, str], tmp_path: Path
) -> None:
    upstream, up, summarizer, summ = servers
    steps = (
        'steps = [{strategy = "tool-result-hiding", params = {preserve_recent_n = 1}}, '
        '{strategy = "llm-summary", params = {max_summary_tokens = 200}}]\n'
    )
    path = config_file(tmp_path, up, summ, "pipeline", "max_context_size = 4000\n", steps)
    app = create_app(load_config(path))
    breaker_of(app, Clock())
    with serve_in_thread(app) as proxy:
        first = ask(proxy, history())
        second = ask(proxy, history())
    assert summarizer.requests == 1 + MAX_RETRIES
    assert first["action"] == "failed"  # the summary step's failure fails the whole run...
    assert (second["action"], second["summarizer"]) == ("compacted", "unavailable")
    assert hidden_results(upstream.received[1].json()) == 5  # ...then hiding runs without it


def test_one_breaker_serves_every_model_window_of_the_proxy(
    servers: tuple[FakeUpstream, str, FakeSummarizer, str], tmp_path: Path
) -> None:
    """Without a configured window each model gets its own controller; the summarizer, and
    so its breaker, is the one they all share."""
    _, up, summarizer, summ = servers
    strategy, params = HIDING_THEN_SUMMARY
    path = config_file(tmp_path, up, summ, strategy, "", params)
    path.write_text(
        path.read_text(encoding="utf-8") + "[models]\nsmall-a = 4000\nsmall-b = 5000\n",
        encoding="utf-8",
    )
    app = create_app(load_config(path))
    breaker_of(app, Clock())
    with serve_in_thread(app) as proxy:
        a = ask(proxy, history(), model="small-a")
        b = ask(proxy, history(), model="small-b")
    assert summarizer.requests == 1 + MAX_RETRIES
    assert (a["summarizer"], b["summarizer"]) == ("failed", "unavailable")


def test_the_header_token_carries_no_content(
    servers: tuple[FakeUpstream, str, FakeSummarizer, str], tmp_path: Path
) -> None:
    _, up, _, summ = servers
    strategy, params = HIDING_THEN_SUMMARY
    path = config_file(tmp_path, up, summ, strategy, "max_context_size = 4000\n", params)
    app = create_app(load_config(path))
    breaker_of(app, Clock())
    messages = history()
    with serve_in_thread(app) as proxy:
        ask(proxy, messages)
        report = ask(proxy, messages)
    # Without its summary the request is still over the 4,000-token window, and says so.
    assert int(report["tokens"].split("->")[1]) > 4000
    assert report["over_window"] == "4000"
    assert set(report) == {"action", "strategy", "tokens", "messages", "over_window", "summarizer"}
    assert "maintenance" not in json.dumps(report)


def test_metrics_show_the_breaker_state_and_its_counters(
    servers: tuple[FakeUpstream, str, FakeSummarizer, str], tmp_path: Path
) -> None:
    _, up, summarizer, summ = servers
    strategy, params = HIDING_THEN_SUMMARY
    path = config_file(tmp_path, up, summ, strategy, "max_context_size = 4000\n", params)
    app = create_app(load_config(path))
    clock = Clock()
    breaker_of(app, clock)
    with serve_in_thread(app) as proxy:
        before = metrics(proxy)
        for _ in range(3):
            ask(proxy, history())
        during = metrics(proxy)
        clock.now += 31
        summarizer.up = True
        ask(proxy, history())
        after = metrics(proxy)
    state = "ctxcompact_summarizer_breaker_state"
    assert before[f'{state}{{state="closed"}}'] == 1
    assert before[f'{state}{{state="open"}}'] == 0
    assert during[f'{state}{{state="open"}}'] == 1
    assert during[f'{state}{{state="closed"}}'] == 0
    assert during["ctxcompact_summarizer_calls_total"] == 1  # the first request's call
    assert during["ctxcompact_summarizer_failures_total"] == 1
    assert during["ctxcompact_summarizer_refused_total"] == 2  # the next two
    assert during["ctxcompact_summarizer_breaker_opened_total"] == 1
    assert after[f'{state}{{state="closed"}}'] == 1  # the probe found it back
    assert after["ctxcompact_summarizer_calls_total"] == 2
    # Every request still compacted (hiding), and said so.
    compacted = (
        "ctxcompact_proxy_compactions_total"
        '{status="compacted",strategy="HidingThenSummary",trigger="threshold"}'
    )
    assert after[compacted] == 4


def metrics(proxy: str) -> dict[str, float]:
    """``GET /metrics`` as ``name{labels} -> value`` (labels sorted by name)."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{proxy}/metrics", timeout=30).text
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            found[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return found


def test_by_default_a_request_the_summary_could_not_shrink_still_fits_the_window(
    servers: tuple[FakeUpstream, str, FakeSummarizer, str], tmp_path: Path
) -> None:
    upstream, up, _, summ = servers
    params = "preserve_recent_n = 1\nmax_summary_tokens = 200\nmax_preserved_messages = 2\n"
    path = config_file(
        tmp_path, up, summ, "hiding-then-summary", "max_context_size = 4000\n", params
    )
    app = create_app(load_config(path))
    breaker_of(app, Clock())
    with serve_in_thread(app) as proxy:
        first = ask(proxy, history())  # the summarizer fails
        second = ask(proxy, history())  # its breaker refuses the call
    for report in (first, second):
        assert report["action"] == "compacted"
        assert "over_window" not in report
        assert int(report["tokens"].split("->")[1]) + 100 < 4000  # max_tokens: its reserve
    assert (first["summarizer"], second["summarizer"]) == ("failed", "unavailable")
    body = upstream.received[-1].json()
    assert body["messages"][0]["role"] == "system"
    assert body["messages"][1]["content"].startswith("Fix the failing test.")  # the task, cut
