"""``GET /metrics`` on the proxy, scraped over real HTTP on 127.0.0.1 after real requests
(official SDK clients and raw bodies -> proxy -> fake upstream): each series has the value
the requests' own ``x-ctxcompact`` headers imply."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ctxcompact import load_config
from ctxcompact.proxy import create_app
from ctxcompact.testing import FunctionStrategy
from tests.helpers.proxy_servers import FakeUpstream, free_port, serve_in_thread
from tests.test_proxy import SECRET, anthropic_history, openai_history, write_config

CANARY = "CANARY-metrics-5b2e"


@pytest.fixture
def upstream() -> Iterator[tuple[FakeUpstream, str]]:
    fake = FakeUpstream()
    with serve_in_thread(fake.app()) as url:
        yield fake, url


def scrape(proxy: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of ``GET /metrics``, by name and labels."""
    response = httpx.get(f"{proxy}/metrics", timeout=30)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def fields(header: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in header.split("; "))


def tokens(header: str) -> tuple[int, int]:
    before, after = fields(header)["tokens"].split("->")
    return int(before), int(after)


def post(proxy: str, path: str, body: dict[str, Any] | bytes) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"content-type": "application/json", "authorization": f"Bearer {SECRET}"}
    return httpx.post(f"{proxy}{path}", content=content, headers=headers, timeout=30)


def test_metrics_count_what_the_requests_headers_say(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    small = openai_history(turns=1, output_chars=2)
    large = openai_history(turns=4, output_chars=300)
    large[1]["content"] += CANARY
    with serve_in_thread(create_app(load_config(write_config(tmp_path, url)))) as proxy:
        client = openai.OpenAI(base_url=f"{proxy}/v1", api_key=SECRET, max_retries=0)
        claude = anthropic.Anthropic(base_url=proxy, api_key=SECRET, max_retries=0)
        with client, claude:
            unchanged = client.chat.completions.with_raw_response.create(
                model=CANARY, messages=small
            )
            compacted = client.chat.completions.with_raw_response.create(model="m", messages=large)
            messages = claude.messages.with_raw_response.create(
                model="m", max_tokens=100, messages=anthropic_history(4, 300)
            )
            skipped = client.responses.with_raw_response.create(model="m", input="hi")
            assert client.models.list().data[0].id == "fake-model"  # passthrough
        no_messages = post(proxy, "/v1/chat/completions", {"model": "m"})
        rejected = post(proxy, "/v1/chat/completions", b"{not json")
        samples = scrape(proxy)
        again = scrape(proxy)
        text = httpx.get(f"{proxy}/metrics", timeout=30).text

    headers = [r.headers["x-ctxcompact"] for r in (unchanged, compacted, messages)]
    assert [fields(h)["action"] for h in headers] == ["unchanged", "compacted", "compacted"]
    assert fields(skipped.headers["x-ctxcompact"])["action"] == "skipped"
    assert fields(no_messages.headers["x-ctxcompact"])["action"] == "skipped"
    assert rejected.status_code == 400

    requests = "ctxcompact_proxy_requests_total"
    assert value(samples, requests, route="chat_completions", outcome="unchanged") == 1
    assert value(samples, requests, route="chat_completions", outcome="compacted") == 1
    assert value(samples, requests, route="chat_completions", outcome="skipped") == 1
    assert value(samples, requests, route="chat_completions", outcome="rejected") == 1
    assert value(samples, requests, route="messages", outcome="compacted") == 1
    assert value(samples, requests, route="responses", outcome="skipped") == 1
    assert value(samples, requests, route="passthrough", outcome="forwarded") == 1
    total = sum(v for (name, _), v in samples.items() if name == requests)
    assert total == 7  # the scrape itself is not a request the proxy forwards
    assert value(again, requests, route="passthrough", outcome="forwarded") == 1

    chat = [tokens(h) for h in headers[:2]] + [(0, 0)]  # the body without messages: 0
    assert value(samples, "ctxcompact_proxy_tokens_before_total", route="chat_completions") == (
        sum(b for b, _ in chat)
    )
    assert value(samples, "ctxcompact_proxy_tokens_after_total", route="chat_completions") == (
        sum(a for _, a in chat)
    )
    before, after = tokens(headers[2])
    assert value(samples, "ctxcompact_proxy_tokens_before_total", route="messages") == before
    assert value(samples, "ctxcompact_proxy_tokens_after_total", route="messages") == after
    assert after < before

    compactions = "ctxcompact_proxy_compactions_total"
    hiding = {"strategy": "ToolResultHiding", "trigger": "threshold"}
    assert value(samples, compactions, **hiding, status="compacted") == 2
    # Hiding the older results rewrites what earlier calls had sent: each is a cache break.
    assert value(samples, "ctxcompact_proxy_cache_breaks_total", strategy="ToolResultHiding") == 2

    forwarded = len(fake.received)
    assert forwarded == 6  # every request but the one refused as not JSON
    latency = "ctxcompact_proxy_upstream_seconds_count"
    by_route = {r: value(samples, latency, route=r) for r in ("chat_completions", "messages")}
    assert by_route == {"chat_completions": 3, "messages": 1}
    assert (
        value(
            samples,
            "ctxcompact_proxy_upstream_responses_total",
            route="passthrough",
            status_class="2xx",
        )
        == 1
    )
    assert value(samples, "ctxcompact_proxy_rewrite_seconds_count", route="chat_completions") == 3

    assert value(samples, "ctxcompact_proxy_errors_total", kind="no_messages") == 1
    assert value(samples, "ctxcompact_proxy_errors_total", kind="string_input") == 1
    assert value(samples, "ctxcompact_proxy_over_window_total", route="chat_completions") == 0

    assert "ctxcompact_proxy_requests_total" in text
    assert CANARY not in text  # neither the model name nor the message text
    assert SECRET not in text


def test_a_request_still_over_the_window_is_forwarded_and_counted(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    config = load_config(write_config(tmp_path, url))
    app = create_app(config, strategy=FunctionStrategy(lambda ctx: None, name="nothing"))
    large = openai_history(turns=4, output_chars=300)
    fits = openai_history(turns=1, output_chars=200)
    with serve_in_thread(app) as proxy:
        over = post(proxy, "/v1/chat/completions", {"model": "m", "messages": large})
        alone = post(proxy, "/v1/chat/completions", {"model": "m", "messages": fits})
        # The same history, with an answer budget that no longer fits beside it.
        budget = post(
            proxy, "/v1/chat/completions", {"model": "m", "messages": fits, "max_tokens": 1900}
        )
        samples = scrape(proxy)
    assert len(fake.received) == 3  # forwarded all the same
    header = fields(over.headers["x-ctxcompact"])
    assert header["action"] == "unchanged"
    assert header["over_window"] == "2000"
    assert tokens(over.headers["x-ctxcompact"])[1] > 2000
    assert "over_window" not in fields(alone.headers["x-ctxcompact"])
    assert fields(budget.headers["x-ctxcompact"])["over_window"] == "2000"
    assert value(samples, "ctxcompact_proxy_over_window_total", route="chat_completions") == 2
    compactions = "ctxcompact_proxy_compactions_total"
    assert value(samples, compactions, strategy="nothing", trigger="threshold", status="noop") == 2


def test_an_unreachable_upstream_is_an_upstream_error(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with serve_in_thread(create_app(load_config(write_config(tmp_path, dead)))) as proxy:
        response = post(proxy, "/v1/chat/completions", {"model": "m", "messages": []})
        samples = scrape(proxy)
    assert response.status_code == 502
    requests = "ctxcompact_proxy_requests_total"
    assert value(samples, requests, route="chat_completions", outcome="upstream_error") == 1
    assert value(samples, "ctxcompact_proxy_errors_total", kind="upstream_unreachable") == 1
    assert value(samples, "ctxcompact_proxy_upstream_seconds_count", route="chat_completions") == 0


def test_recall_calls_and_hits_are_counted(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    fake.recall_ids = ["call_0", "no-such-call"]  # the second finds nothing
    extra = f'[store]\npath = "{tmp_path / "originals.db"}"\nrecall = true\n'
    # A window with room for both rounds (a nearly full one closes the loop early).
    config = write_config(tmp_path, url, extra, max_context_size=5000, trigger_ratio=0.5)
    with serve_in_thread(create_app(load_config(config))) as proxy:
        answer = post(
            proxy, "/v1/chat/completions", {"model": "m", "messages": openai_history(4, 300)}
        )
        samples = scrape(proxy)
    assert answer.status_code == 200
    assert len(fake.received) == 3  # the request and two recall rounds
    assert value(samples, "ctxcompact_proxy_recall_calls_total") == 2
    assert value(samples, "ctxcompact_proxy_recall_hits_total") == 1
    assert value(samples, "ctxcompact_proxy_upstream_seconds_count", route="chat_completions") == 3


def test_a_context_retry_is_counted_with_the_action_finally_sent(tmp_path: Path) -> None:
    fake = FakeUpstream(window=4000, max_prompt_bytes=16_000)
    messages = openai_history(turns=30, output_chars=100)
    with serve_in_thread(fake.app()) as url:
        config = write_config(tmp_path, url, max_context_size=1_000_000)
        with serve_in_thread(create_app(load_config(config))) as proxy:
            response = post(proxy, "/v1/chat/completions", {"model": "m", "messages": messages})
            samples = scrape(proxy)
    assert response.status_code == 200
    header = fields(response.headers["x-ctxcompact"])
    assert (header["action"], header["retried"]) == ("compacted", "1")
    requests = "ctxcompact_proxy_requests_total"
    assert value(samples, requests, route="chat_completions", outcome="compacted") == 1
    assert value(samples, requests, route="chat_completions", outcome="unchanged") == 0
    assert value(samples, "ctxcompact_proxy_context_retries_total", route="chat_completions") == 1
    before, after = tokens(response.headers["x-ctxcompact"])
    assert value(samples, "ctxcompact_proxy_tokens_after_total", route="chat_completions") == after
    assert after < before
    assert (
        value(
            samples,
            "ctxcompact_proxy_upstream_responses_total",
            route="chat_completions",
            status_class="4xx",
        )
        == 1
    )


def test_several_processes_add_up_in_multiprocess_mode(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    """Two proxy processes writing to one PROMETHEUS_MULTIPROC_DIR, as uvicorn workers do:
    whichever answers the scrape reports both."""
    _, url = upstream
    config = write_config(tmp_path, url)
    shared = tmp_path / "prometheus"
    shared.mkdir()
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(shared)}
    ports = [free_port(), free_port()]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ctxcompact",
                "proxy",
                "--config",
                str(config),
                "--port",
                str(port),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for port in ports
    ]
    try:
        proxies = [f"http://127.0.0.1:{port}" for port in ports]
        for proxy, proc in zip(proxies, procs, strict=True):
            _wait_up(proxy, proc)
        body = {"model": "m", "messages": openai_history(1, 2)}
        for proxy, n in zip(proxies, (1, 2), strict=True):
            for _ in range(n):
                assert post(proxy, "/v1/chat/completions", body).status_code == 200
        first, second = scrape(proxies[0]), scrape(proxies[1])
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=30)
    requests = "ctxcompact_proxy_requests_total"
    for samples in (first, second):
        assert value(samples, requests, route="chat_completions", outcome="unchanged") == 3


def _wait_up(proxy: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the proxy exited early"
        try:
            httpx.get(f"{proxy}/metrics", timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError("the proxy did not come up within 30 s")
