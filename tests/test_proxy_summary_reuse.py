"""A summary computed once per conversation by the (stateless) proxy, kept in a SQLite store.

Two consecutive requests of one conversation through the official OpenAI SDK over real HTTP:
the first calls the summarizer, the second reuses the kept summary (no summarizer call) and the
upstream receives the same summary text, in front of the same messages, both times.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from ctxcompact import check_history, from_openai, load_config
from ctxcompact.proxy import create_app
from ctxcompact.store import StoreError
from ctxcompact.strategies import SUMMARY_PREFIX
from ctxcompact.testing import ScriptedLLM
from tests.helpers.proxy_servers import FakeUpstream, serve_in_thread
from tests.test_proxy import SECRET, openai_history

SUMMARY = "The user asked to fix the failing test; files f0-f3 were read."


@pytest.fixture
def upstream() -> Iterator[tuple[FakeUpstream, str]]:
    fake = FakeUpstream()
    with serve_in_thread(fake.app()) as url:
        yield fake, url


def summary_config(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "proxy.toml"
    path.write_text(
        "[compaction]\n"
        'strategy = "llm-summary"\n'
        "max_context_size = 3000\n"
        "reserved_context_size = 500\n"
        "[compaction.params]\n"
        "max_preserved_messages = 2\n"
        "max_summary_tokens = 200\n"
        "max_input_tokens = 2500\n"
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


def next_turn(messages: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """The conversation one tool turn later, as the client resends it."""
    call = {"id": f"call_{n}", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    return [
        *messages,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{n}", "content": "ok\n" * 3},
    ]


def ask(proxy: str, messages: list[dict[str, Any]], key: str = SECRET) -> str:
    with openai.OpenAI(base_url=f"{proxy}/v1", api_key=key, max_retries=0) as client:
        raw = client.chat.completions.with_raw_response.create(
            model="m", messages=messages, max_tokens=100
        )
    return raw.headers["x-ctxcompact"]


def test_second_request_of_a_conversation_reuses_the_summary(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    summarizer = ScriptedLLM(SUMMARY, "a second summary: must not be needed")
    first = openai_history(turns=6, output_chars=300)
    second = next_turn(first, 6)
    app = create_app(load_config(summary_config(tmp_path, url)), llm=summarizer)
    with serve_in_thread(app) as proxy:
        report1 = ask(proxy, first)
        calls_after_first = 2 - summarizer.remaining
        report2 = ask(proxy, second)
    assert calls_after_first == 1
    assert summarizer.remaining == 1  # the second request made no summarizer call
    assert "action=compacted" in report1
    assert "action=compacted" in report2
    sent1, sent2 = (r.json()["messages"] for r in fake.received)
    assert sent1[1]["content"] == "Fix the failing test."  # the task stays verbatim
    assert sent1[2]["content"] == SUMMARY_PREFIX + SUMMARY
    # Same summary, same messages after it: the second request extends the first's prompt.
    assert sent2[: len(sent1)] == sent1
    assert sent2[len(sent1) :] == second[len(first) :]
    assert check_history(from_openai(sent2)) == []


def test_summary_is_reused_after_a_restart_but_not_by_another_caller(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    config = load_config(summary_config(tmp_path, url))
    first = openai_history(turns=6, output_chars=300)
    with serve_in_thread(create_app(config, llm=ScriptedLLM(SUMMARY))) as proxy:
        ask(proxy, first)
    # A new proxy process on the same file: the summary is still there for this caller...
    restarted = ScriptedLLM("another caller's summary")
    with serve_in_thread(create_app(config, llm=restarted)) as proxy:
        ask(proxy, next_turn(first, 6))
        assert restarted.remaining == 1
        # ...and another caller's identical conversation is summarised for it alone.
        ask(proxy, next_turn(first, 6), key="sk-someone-else")
    assert restarted.remaining == 0
    assert [r.json()["messages"][1]["content"] for r in fake.received] == [
        "Fix the failing test."  # the task stays verbatim before the summary
    ] * 3
    sent = [r.json()["messages"][2]["content"] for r in fake.received]
    assert sent == [SUMMARY_PREFIX + SUMMARY] * 2 + [SUMMARY_PREFIX + "another caller's summary"]


def test_the_store_the_proxy_opened_is_closed_at_shutdown(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    _, url = upstream
    app = create_app(load_config(summary_config(tmp_path, url)), llm=ScriptedLLM())
    store = app.state.rewriter.controller.store
    with serve_in_thread(app) as proxy:
        ask(proxy, [{"role": "user", "content": "hi"}])
        assert store.get_summary("x", "y") is None  # open while serving
    with pytest.raises(StoreError):
        store.get_summary("x", "y")
