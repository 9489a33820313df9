"""Recall through the proxy, over real HTTP on 127.0.0.1 with the official SDK clients.

The proxy hides old tool results (kept in a real SQLite file per caller), offers
``recall_tool_result``, and answers the fake upstream's recall calls itself.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from ctxcompact import check_history, from_anthropic, from_openai
from ctxcompact.proxy import MAX_RECALL_ROUNDS
from tests.helpers.proxy_servers import FakeUpstream, serve_in_thread
from tests.test_proxy import (
    SECRET,
    anthropic_history,
    openai_history,
    start_proxy,
    write_config,
)

OTHER = "sk-other-caller-7777"
_OPEN: list[openai.OpenAI | anthropic.Anthropic] = []


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while _OPEN:
        _OPEN.pop().close()


def openai_client(proxy: str, key: str = SECRET) -> openai.OpenAI:
    client = openai.OpenAI(base_url=f"{proxy}/v1", api_key=key, max_retries=0)
    _OPEN.append(client)
    return client


def anthropic_client(proxy: str) -> anthropic.Anthropic:
    client = anthropic.Anthropic(base_url=proxy, api_key=SECRET, max_retries=0)
    _OPEN.append(client)
    return client


@pytest.fixture
def upstream() -> Iterator[tuple[FakeUpstream, str]]:
    fake = FakeUpstream()
    with serve_in_thread(fake.app()) as url:
        yield fake, url


ROOMY = {"max_context_size": 5000, "trigger_ratio": 0.5}
"""A window with room for the recall rounds these tests make (every follow-up stays inside
the window: the proxy cuts or closes rounds that would not fit), its trigger at half of it,
where the 2000-token window of the plain proxy tests put it."""


def recall_config(tmp_path: Path, url: str) -> Path:
    extra = f'[store]\npath = "{tmp_path / "originals.db"}"\nrecall = true\n'
    return write_config(tmp_path, url, extra=extra, **ROOMY)


def tool_names(body: dict[str, Any]) -> list[str]:
    return [(t.get("function") or t)["name"] for t in body.get("tools") or []]


def test_openai_recall_call_is_answered_by_the_proxy_and_hidden_from_the_client(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    fake.recall_ids = ["call_0"]
    messages = openai_history(turns=4, output_chars=300)
    original = json.loads(json.dumps(messages))
    with start_proxy(recall_config(tmp_path, url)) as proxy:
        raw = openai_client(proxy).chat.completions.with_raw_response.create(
            model="m", messages=messages, max_tokens=100
        )
    completion = raw.parse()
    message = completion.choices[0].message
    assert message.tool_calls is None
    assert "action=compacted" in raw.headers["x-ctxcompact"]
    assert len(fake.received) == 2
    first, second = (r.json() for r in fake.received)
    assert tool_names(first) == ["recall_tool_result"]
    assert 'recall_tool_result("call_0")' in first["messages"][3]["content"]
    # The follow-up is the first request plus the recall call and its result.
    assert second["messages"][: len(first["messages"])] == first["messages"]
    call, result = second["messages"][len(first["messages"]) :]
    assert call["tool_calls"][0]["function"]["name"] == "recall_tool_result"
    assert result["tool_call_id"] == call["tool_calls"][0]["id"]
    assert "1: line 0" in result["content"]
    assert message.content == f"saw {len(second['messages'])} messages"
    assert check_history(from_openai(second["messages"])) == []
    assert messages == original


def test_anthropic_recall_call_is_answered_by_the_proxy(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    fake.recall_ids = ["toolu_1"]
    messages = anthropic_history(turns=4, output_chars=300)
    with start_proxy(recall_config(tmp_path, url)) as proxy:
        client = anthropic_client(proxy)
        answer = client.messages.create(model="m", max_tokens=100, messages=messages)
    assert [b.type for b in answer.content] == ["text"]
    first, second = (r.json() for r in fake.received)
    assert tool_names(first) == ["recall_tool_result"]
    assistant, results = second["messages"][len(first["messages"]) :]
    assert assistant["content"][1]["name"] == "recall_tool_result"
    block = results["content"][0]
    assert block["tool_use_id"] == assistant["content"][1]["id"]
    assert "1: line 1" in block["content"]
    assert check_history(from_anthropic(second["messages"])) == []


def test_one_caller_cannot_recall_another_callers_originals(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    mine = openai_history(turns=4, output_chars=300)
    theirs = json.loads(json.dumps(mine).replace("call_", "other_").replace("line ", "theirs "))
    with start_proxy(recall_config(tmp_path, url)) as proxy:
        # The other caller's request stores its originals under its own key.
        other = openai_client(proxy, OTHER)
        other.chat.completions.create(model="m", messages=theirs, max_tokens=100)
        fake.recall_ids = ["other_0", "call_0"]
        openai_client(proxy).chat.completions.create(model="m", messages=mine, max_tokens=100)
    denied = fake.received[2].json()["messages"][-1]["content"]
    allowed = fake.received[3].json()["messages"][-1]["content"]
    assert denied.startswith("Nothing is kept under")
    assert "theirs" not in json.dumps(fake.received[3].json())
    assert "1: line 0" in allowed


def test_openai_stream_is_held_at_the_recall_call_and_continues_with_the_answer(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    fake.recall_ids = ["call_1"]
    messages = openai_history(turns=4, output_chars=300)
    with start_proxy(recall_config(tmp_path, url)) as proxy:
        stream = openai_client(proxy).chat.completions.create(
            model="m", messages=messages, max_tokens=100, stream=True
        )
        chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
    # What came before the recall call was relayed; then the follow-up's answer.
    assert text == "Let me look again.one two three four"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    follow_up = fake.received[1].json()["messages"]
    assert follow_up[-2]["content"] == "Let me look again."
    assert json.loads(follow_up[-2]["tool_calls"][0]["function"]["arguments"]) == {
        "tool_call_id": "call_1"
    }
    assert "1: line 1" in follow_up[-1]["content"]


def test_anthropic_stream_is_one_message_for_the_client(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    fake.recall_ids = ["toolu_0"]
    messages = anthropic_history(turns=4, output_chars=300)
    with start_proxy(recall_config(tmp_path, url)) as proxy:
        client = anthropic_client(proxy)
        with client.messages.stream(model="m", max_tokens=100, messages=messages) as stream:
            final = stream.get_final_message()
    assert [(b.type, getattr(b, "text", None)) for b in final.content] == [
        ("text", "Let me look again."),
        ("text", "alpha beta gamma"),
    ]
    assert final.stop_reason == "end_turn"
    results = fake.received[1].json()["messages"][-1]["content"]
    assert "1: line 0" in results[0]["content"]


def test_answer_mixing_recall_with_other_tools_reaches_the_client_without_the_recall_call(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    fake.recall_ids, fake.also_call = ["call_0", "call_0"], "bash"
    messages = openai_history(turns=4, output_chars=300)
    with start_proxy(recall_config(tmp_path, url)) as proxy:
        client = openai_client(proxy)
        answer = client.chat.completions.create(model="m", messages=messages, max_tokens=100)
        chunks = list(
            client.chat.completions.create(
                model="m", messages=messages, max_tokens=100, stream=True
            )
        )
    # The client's own tool call goes through, renumbered to index 0; the recall call,
    # which the client never offered, does not (the proxy cannot run the client's tools,
    # and answering half of the calls would leave the others unpaired).
    calls = answer.choices[0].message.tool_calls or []
    assert [c.function.name for c in calls] == ["bash"]
    assert answer.choices[0].finish_reason == "tool_calls"
    streamed = [
        (tc.index, tc.function.name)
        for c in chunks
        if c.choices
        for tc in c.choices[0].delta.tool_calls or []
        if tc.function and tc.function.name
    ]
    assert streamed == [(0, "bash")]
    assert "recall_tool_result" not in json.dumps([c.model_dump() for c in chunks])
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    assert len(fake.received) == 2


def test_recall_rounds_are_bounded_and_the_call_never_reaches_the_client(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    fake.recall_ids = ["call_0"] * (MAX_RECALL_ROUNDS + 2)
    fake.recall_limit = 10  # short pages: the window has room for every round
    messages = openai_history(turns=4, output_chars=300)
    with start_proxy(recall_config(tmp_path, url)) as proxy:
        answer = openai_client(proxy).chat.completions.create(
            model="m", messages=messages, max_tokens=100
        )
    # The bound's rounds, then one closing round whose results say the budget is spent.
    assert len(fake.received) == 1 + MAX_RECALL_ROUNDS + 1
    sent = [r.json()["messages"][-1]["content"] for r in fake.received[1:]]
    assert all("1: line 0" in text for text in sent[:MAX_RECALL_ROUNDS])
    assert "recall budget is spent" in sent[-1]
    # The model called recall again: the client gets its text, without the call.
    message = answer.choices[0].message
    assert message.tool_calls is None
    assert answer.choices[0].finish_reason == "stop"
    assert message.content == "Let me look again."


def test_recall_tool_is_not_offered_when_nothing_was_removed(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    fake.recall_ids = ["call_0"]
    messages = openai_history(turns=2, output_chars=3)
    with start_proxy(recall_config(tmp_path, url)) as proxy:
        body = json.dumps({"model": "m", "messages": messages}).encode()
        r = httpx.post(f"{proxy}/v1/chat/completions", content=body)
    assert r.status_code == 200
    assert fake.received[-1].body == body
    assert len(fake.received) == 1


def test_recall_after_a_reused_compaction_returns_the_original(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    first = openai_history(turns=4, output_chars=300)
    call = {"id": "call_9", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    second = [
        *first,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_9", "content": "ok"},
    ]
    with start_proxy(recall_config(tmp_path, url)) as proxy:
        client = openai_client(proxy)
        client.chat.completions.create(model="m", messages=first, max_tokens=100)
        fake.recall_ids = ["call_0"]
        client.chat.completions.create(model="m", messages=second, max_tokens=100)
    sent1, sent2, follow_up = (r.json()["messages"] for r in fake.received)
    assert sent2[: len(sent1)] == sent1  # the kept rewrite was reused
    assert "1: line 0" in follow_up[-1]["content"]


def test_a_failing_follow_up_reaches_the_client_as_an_error(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    fake.follow_up_status = 503
    messages = openai_history(turns=4, output_chars=300)
    with start_proxy(recall_config(tmp_path, url)) as proxy:
        client = openai_client(proxy)
        fake.recall_ids = ["call_0"]
        with pytest.raises(openai.APIStatusError) as plain:
            client.chat.completions.create(model="m", messages=messages, max_tokens=100)
        fake.recall_ids = ["call_0"]
        stream = client.chat.completions.create(
            model="m", messages=messages, max_tokens=100, stream=True
        )
        with pytest.raises(openai.APIError, match="upstream answered 503 during recall"):
            list(stream)
    assert plain.value.status_code == 503
    assert len(fake.received) == 4
