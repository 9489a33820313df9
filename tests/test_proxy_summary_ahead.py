"""Summaries made ahead of time through the (stateless) proxy, kept in its store per
conversation, over real HTTP on 127.0.0.1 with the official OpenAI SDK.

A conversation grows one tool turn per request. Below the trigger, a request that reaches
``precompute_ratio`` of it starts the summary in the background and goes upstream unchanged
(the prompt cache holds); the request where the trigger fires puts that summary in place
without calling the summarizer; the next summary sends the previous one and only what is new.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from ctxcompact import Completion, Message, check_history, from_openai, load_config
from ctxcompact.proxy import create_app
from ctxcompact.strategies import SUMMARY_PREFIX
from ctxcompact.testing import LLMRequest, ScriptedLLM
from tests.helpers.proxy_servers import FakeUpstream, serve_in_thread
from tests.test_proxy import SECRET


@pytest.fixture
def upstream() -> Iterator[tuple[FakeUpstream, str]]:
    fake = FakeUpstream()
    with serve_in_thread(fake.app()) as url:
        yield fake, url


def config(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "proxy.toml"
    path.write_text(
        "[compaction]\n"
        'strategy = "llm-summary"\n'
        "max_context_size = 4000\n"
        "reserved_context_size = 1000\n"
        "precompute_ratio = 0.5\n"
        "[compaction.params]\n"
        "max_summary_tokens = 200\n"
        "[proxy]\n"
        f'openai_base_url = "{url}/v1"\n'
        f'anthropic_base_url = "{url}"\n'
        "[store]\n"
        f'path = "{tmp_path / "store.db"}"\n'
        # The summary's own text is compared: recall (on by default) would end it with the
        # note naming the range it replaces, tested in test_recall_every_removal.py.
        "recall = false\n",
        encoding="utf-8",
    )
    return path


def with_turn(messages: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    call = {"id": f"call_{n}", "type": "function", "function": {"name": "read", "arguments": "{}"}}
    return [
        *messages,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{n}", "content": f"result-{n:02d} " + "x" * 500},
    ]


def ask(proxy: str, messages: list[dict[str, Any]]) -> str:
    with openai.OpenAI(base_url=f"{proxy}/v1", api_key=SECRET, max_retries=0) as client:
        raw = client.chat.completions.with_raw_response.create(
            model="m", messages=messages, max_tokens=100
        )
    return raw.headers["x-ctxcompact"]


def numbered() -> ScriptedLLM:
    def answer(n: int) -> Any:
        return lambda request: Completion(Message.assistant(f"summary {n}"))

    return ScriptedLLM(*(answer(n) for n in range(1, 20)))


def wait_idle(app: Any) -> None:
    """Until the proxy's background summaries have finished (they run in its own thread)."""
    deadline = time.monotonic() + 10
    while app.state.rewriter.ahead.in_flight:
        assert time.monotonic() < deadline, "background summary still running after 10 s"
        time.sleep(0.01)


def transcript(request: LLMRequest) -> str:
    return "\n".join(m.text for m in request.messages)


def test_the_proxy_writes_the_summary_ahead_and_the_trigger_swaps_it_in(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    summarizer = numbered()
    app = create_app(load_config(config(tmp_path, url)), llm=summarizer)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Refactor the parser."},
    ]
    reports: list[str] = []
    written_before: list[int] = []  # summaries the summarizer had written before each request
    with serve_in_thread(app) as proxy:
        for n in range(120):
            written_before.append(len(summarizer.requests))
            reports.append(ask(proxy, messages))
            wait_idle(app)
            # Until a request compacts with the second summary written before it arrived
            # (each is started once the next request may reach the trigger).
            if written_before[-1] >= 2 and "action=compacted" in reports[-1]:
                break
            messages = with_turn(messages, n)
    compacted = [k for k, r in enumerate(reports) if "action=compacted" in r]
    assert len(compacted) >= 2
    first = compacted[0]
    # A summary was written before the first trigger, by a request that went out unchanged...
    assert len(summarizer.requests) >= 2
    assert all("action=unchanged" in r for r in reports[:first])
    sent = [r.json()["messages"] for r in fake.received if r.path == "/v1/chat/completions"]
    # ...the prompt grew by appending only until the trigger (the upstream's cache holds)...
    for earlier, later in itertools.pairwise(sent[:first]):
        assert later[: len(earlier)] == earlier
    # ...and each triggered request put in place one summary written before it arrived (one
    # written while it waited would be numbered after those): no wait for the summarizer.
    assert sent[first][1]["content"] == "Refactor the parser."  # the task, verbatim
    assert sent[first][2]["content"] == SUMMARY_PREFIX + "summary 1"
    for k in compacted:
        summaries = [m["content"] for m in sent[k] if str(m["content"]).startswith(SUMMARY_PREFIX)]
        assert len(summaries) == 1
        assert int(summaries[0].rsplit(" ", 1)[1]) <= written_before[k]
    assert check_history(from_openai(sent[first])) == []
    # The next summary sent the first one and what came after it, never what it replaced.
    first_request, second_request = (transcript(r) for r in summarizer.requests[:2])
    replaced = {f"result-{n:02d}" for n in range(60) if f"result-{n:02d} " in first_request}
    assert replaced
    assert "[earlier summary]\nsummary 1" in second_request
    assert not any(f"{marker} " in second_request for marker in replaced)
    assert "result-" in second_request


def test_a_conversation_that_diverged_does_not_get_the_summary_made_for_it(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    summarizer = numbered()
    app = create_app(load_config(config(tmp_path, url)), llm=summarizer)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Refactor the parser."}]
    with serve_in_thread(app) as proxy:
        n = 0
        while not summarizer.requests:  # until a summary is being made ahead
            messages = with_turn(messages, n)
            n += 1
            ask(proxy, messages)
            wait_idle(app)
            assert n < 40
        # The client rewrites an early tool result and goes on past the trigger.
        messages[2] = {**messages[2], "content": "result-00 rewritten by the client"}
        for _ in range(30):
            messages = with_turn(messages, n)
            n += 1
            report = ask(proxy, messages)
            if "action=compacted" in report:
                break
            wait_idle(app)
        assert "action=compacted" in report
    sent = fake.received[-1].json()["messages"]
    used = [m["content"] for m in sent if str(m["content"]).startswith(SUMMARY_PREFIX)]
    assert used
    assert used[0] != SUMMARY_PREFIX + "summary 1"  # made for the history before the edit
    # The summary put in place is one made from the edited history.
    number = int(used[0].rsplit(" ", 1)[1])
    assert "result-00 rewritten by the client" in transcript(summarizer.requests[number - 1])
