"""The ``x-ctxcompact`` header never contradicts itself, over real HTTP on 127.0.0.1: a
request forwarded as received states its real message and token counts, what cannot be
counted says so, and a retried request states the action and counts of what was finally sent.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ctxcompact import HeuristicTokenCounter, Message, from_anthropic, from_openai, load_config
from ctxcompact.proxy import create_app
from tests.helpers.proxy_servers import FakeUpstream, serve_in_thread
from tests.test_proxy import anthropic_history, openai_history, write_config
from tests.test_proxy_models import config_without_window

COUNTER = HeuristicTokenCounter()  # the proxy's default counter


@pytest.fixture
def upstream() -> Iterator[tuple[FakeUpstream, str]]:
    fake = FakeUpstream()
    with serve_in_thread(fake.app()) as url:
        yield fake, url


def fields(response: httpx.Response) -> dict[str, str]:
    return dict(part.split("=", 1) for part in response.headers["x-ctxcompact"].split("; "))


def post(proxy: str, path: str, body: dict[str, Any]) -> httpx.Response:
    content = json.dumps(body).encode()
    headers = {"content-type": "application/json", "anthropic-version": "2023-06-01"}
    return httpx.post(f"{proxy}{path}", content=content, headers=headers, timeout=30)


def test_a_string_input_is_skipped_with_its_real_counts(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    _, url = upstream
    with start(write_config(tmp_path, url)) as proxy:
        bare = post(proxy, "/v1/responses", {"model": "m", "input": "hello " * 50})
        framed = post(
            proxy,
            "/v1/responses",
            {"model": "m", "instructions": "Be brief.", "input": "hello " * 50},
        )
    one = COUNTER.count([Message.user("hello " * 50)])
    two = COUNTER.count([Message.system("Be brief."), Message.user("hello " * 50)])
    assert fields(bare)["action"] == "skipped"
    assert (fields(bare)["messages"], fields(bare)["tokens"]) == ("1->1", f"{one}->{one}")
    assert (fields(framed)["messages"], fields(framed)["tokens"]) == ("2->2", f"{two}->{two}")
    assert one > 0


def test_a_model_of_unknown_window_is_skipped_with_its_real_counts(
    upstream: tuple[FakeUpstream, str],
) -> None:
    _, url = upstream
    messages = openai_history(turns=3, output_chars=20)
    anthropic = anthropic_history(turns=2, output_chars=20)
    with serve_in_thread(create_app(config_without_window(url))) as proxy:
        chat = post(proxy, "/v1/chat/completions", {"model": "no-such-x", "messages": messages})
        claude = post(
            proxy,
            "/v1/messages",
            {"model": "no-such-y", "system": "Be brief.", "messages": anthropic},
        )
    n = COUNTER.count(from_openai(messages))
    assert fields(chat)["action"] == "skipped"
    assert (fields(chat)["messages"], fields(chat)["tokens"]) == ("8->8", f"{n}->{n}")
    history = from_anthropic(anthropic, system="Be brief.")
    m = COUNTER.count(history)
    # The system prompt is a message of the history, as in every other report.
    expected = (f"{len(history)}->{len(history)}", f"{m}->{m}")
    assert (fields(claude)["messages"], fields(claude)["tokens"]) == expected
    assert len(history) == len(anthropic) + 1


def test_what_cannot_be_read_says_tokens_unknown(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    unreadable = [{"role": "user", "content": "x"}, {"role": "wizard", "content": "y"}]
    with start(write_config(tmp_path, url)) as proxy:
        odd = post(proxy, "/v1/chat/completions", {"model": "m", "messages": unreadable})
        empty = post(proxy, "/v1/chat/completions", {"model": "m"})
    assert len(fake.received) == 2  # both forwarded as received
    header = fields(odd)
    assert header["action"] == "skipped"
    assert header["error"] == "messages not understood"
    assert (header["tokens"], header["messages"]) == ("unknown", "2->2")
    assert (fields(empty)["tokens"], fields(empty)["messages"]) == ("0->0", "0->0")


def test_after_a_retry_the_header_says_what_was_finally_sent(tmp_path: Path) -> None:
    fake = FakeUpstream(window=4000, max_prompt_bytes=16_000)
    messages = openai_history(turns=30, output_chars=100)
    with serve_in_thread(fake.app()) as url:
        # A window far larger than the upstream's: the first request goes out unchanged.
        config = write_config(tmp_path, url, max_context_size=1_000_000)
        with start(config) as proxy:
            response = post(proxy, "/v1/chat/completions", {"model": "m", "messages": messages})
    assert response.status_code == 200
    header = fields(response)
    sent = fake.received[-1].json()["messages"]
    assert header["action"] == "compacted"  # not "unchanged": what went out was cut
    assert (header["retried"], header["window"]) == ("1", "4000")
    assert header["messages"] == f"{len(messages)}->{len(sent)}"
    received, forwarded = COUNTER.count(from_openai(messages)), COUNTER.count(from_openai(sent))
    assert header["tokens"] == f"{received}->{forwarded}"
    assert "over_window" not in header  # the cut fits the window the upstream stated


def start(config: Path) -> Any:
    return serve_in_thread(create_app(load_config(config)))
