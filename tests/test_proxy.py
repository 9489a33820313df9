"""The proxy over real HTTP on 127.0.0.1: official SDK clients -> proxy -> fake upstream."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from ctxcompact import Message, check_history, from_anthropic, from_openai, load_config
from ctxcompact.proxy import create_app
from ctxcompact.testing import FunctionStrategy
from tests.helpers.proxy_servers import FakeUpstream, free_port, serve_in_thread

SECRET = "sk-test-DO-NOT-LOG-4242"
HIDDEN = "[old tool result hidden]"


def write_config(
    tmp_path: Path, upstream: str, extra: str = "", recall: bool | None = False, **compaction: Any
) -> Path:
    """A proxy config. ``recall=False`` (the tests' default) adds ``[store] recall = false``
    unless ``extra`` has a ``[store]`` table: these tests check rewriting and relaying with
    the strategies' own markers, while recall (on by default since issue 20: the markers name
    their handles and the tool is offered) is tested in test_proxy_recall*.py,
    test_proxy_faults.py and test_proxy_default_store.py. ``None``: the defaults."""
    settings = {
        "strategy": "tool-result-hiding",
        "max_context_size": 2000,
        "reserved_context_size": 500,
        **compaction,
    }
    lines = ["[compaction]"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in settings.items()]
    lines += [
        "[compaction.params]",
        "preserve_recent_n = 1",
        "[proxy]",
        f'openai_base_url = "{upstream}/v1"',
        f'anthropic_base_url = "{upstream}"',
        "max_body_bytes = 200000",
    ]
    if recall is not None and "[store]" not in extra:
        extra += f"\n[store]\nrecall = {json.dumps(recall)}\n"
    path = tmp_path / "proxy.toml"
    path.write_text("\n".join(lines) + "\n" + extra, encoding="utf-8")
    return path


def openai_history(turns: int, output_chars: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the failing test."},
    ]
    for i in range(turns):
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{i}",
                        "type": "function",
                        "function": {"name": "bash", "arguments": json.dumps({"cmd": f"cat f{i}"})},
                    }
                ],
            }
        )
        messages.append(
            {"role": "tool", "tool_call_id": f"call_{i}", "content": f"line {i}\n" * output_chars}
        )
    return messages


def anthropic_history(turns: int, output_chars: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing test."}]
    for i in range(turns):
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": f"Reading f{i}."},
                    {"type": "tool_use", "id": f"toolu_{i}", "name": "bash", "input": {"i": i}},
                ],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": f"toolu_{i}",
                        "content": f"line {i}\n" * output_chars,
                    }
                ],
            }
        )
    return messages


@pytest.fixture
def upstream() -> Iterator[tuple[FakeUpstream, str]]:
    fake = FakeUpstream()
    with serve_in_thread(fake.app()) as url:
        yield fake, url


def start_proxy(config_path: Path, **kwargs: Any) -> Any:
    return serve_in_thread(create_app(load_config(config_path), **kwargs))


def openai_client(proxy_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{proxy_url}/v1", api_key=SECRET, max_retries=0)


def test_small_request_is_forwarded_byte_for_byte(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    messages = openai_history(turns=2, output_chars=3)
    with start_proxy(write_config(tmp_path, url)) as proxy:
        body = json.dumps({"model": "m", "messages": messages}).encode()
        r = httpx.post(f"{proxy}/v1/chat/completions", content=body, headers={"x-n": "1"})
    assert r.status_code == 200
    assert r.json()["choices"][0]["message"]["content"] == f"saw {len(messages)} messages"
    assert fake.received[-1].body == body
    assert r.headers["x-ctxcompact"].startswith("action=unchanged; strategy=ToolResultHiding")


def test_openai_sdk_request_over_the_trigger_is_compacted(
    upstream: tuple[FakeUpstream, str], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake, url = upstream
    messages = openai_history(turns=4, output_chars=300)
    caplog.set_level(logging.DEBUG)
    with start_proxy(write_config(tmp_path, url)) as proxy:
        raw = openai_client(proxy).chat.completions.with_raw_response.create(
            model="m", messages=messages, max_tokens=100
        )
    completion = raw.parse()
    assert completion.choices[0].message.content == f"saw {len(messages)} messages"
    report = raw.headers["x-ctxcompact"]
    assert "action=compacted" in report
    before, after = report.split("tokens=")[1].split(";")[0].split("->")
    assert int(after) < int(before)

    sent = fake.received[-1].json()["messages"]
    assert len(sent) == len(messages)
    tool_contents = [m["content"] for m in sent if m["role"] == "tool"]
    assert tool_contents[:3] == [HIDDEN] * 3
    assert tool_contents[3] == messages[-1]["content"]
    assert [m.get("tool_call_id") for m in sent] == [m.get("tool_call_id") for m in messages]
    assert check_history(from_openai(sent)) == []
    # The API key went through to the upstream and never into a log line.
    assert fake.received[-1].headers["authorization"] == f"Bearer {SECRET}"
    assert SECRET not in caplog.text
    assert "action=compacted" in caplog.text


def test_schema1_transform_masks_every_request_when_enabled(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    # always: mask a request that fits the window too (by default only one that does not).
    extra = "[observation_masking.schema1]\nenabled = true\nwindow_turns = 1\nalways = true\n"
    messages = openai_history(turns=3, output_chars=30)  # far below the trigger
    with start_proxy(write_config(tmp_path, url, extra=extra)) as proxy:
        raw = openai_client(proxy).chat.completions.with_raw_response.create(
            model="m", messages=messages
        )
    assert "action=transformed" in raw.headers["x-ctxcompact"]
    sent = fake.received[-1].json()["messages"]
    tools = [m["content"] for m in sent if m["role"] == "tool"]
    assert tools[0].startswith("[Observation masked: old tool result")
    assert "call_0" in tools[0]
    assert tools[1].startswith("[Observation masked: old tool result")
    assert "call_1" in tools[1]
    assert tools[2] == messages[-1]["content"]


def test_anthropic_sdk_request_is_compacted_and_stays_valid(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    messages = anthropic_history(turns=4, output_chars=300)
    with start_proxy(write_config(tmp_path, url)) as proxy:
        client = anthropic.Anthropic(base_url=proxy, api_key=SECRET, max_retries=0)
        raw = client.messages.with_raw_response.create(
            model="m", max_tokens=100, system="Be brief.", messages=messages
        )
    message = raw.parse()
    assert message.content[0].type == "text"
    assert "action=compacted" in raw.headers["x-ctxcompact"]
    received = fake.received[-1]
    assert received.path == "/v1/messages"
    # anthropic 2.x sends the key as a bearer token; older clients used x-api-key.
    sent_key = received.headers.get("x-api-key") or received.headers["authorization"][7:]
    assert sent_key == SECRET
    body = received.json()
    assert body["system"] == "Be brief."
    assert body["max_tokens"] == 100
    assert len(body["messages"]) == len(messages)
    results = [
        block
        for m in body["messages"]
        if isinstance(m["content"], list)
        for block in m["content"]
        if block["type"] == "tool_result"
    ]
    assert [r["tool_use_id"] for r in results] == [f"toolu_{i}" for i in range(4)]
    assert [r["content"] for r in results[:3]] == [HIDDEN] * 3
    assert results[3]["content"] == messages[-1]["content"][0]["content"]
    assert check_history(from_anthropic(body["messages"], system=body["system"])) == []


def test_openai_stream_is_relayed_chunk_by_chunk_in_order(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    fake.release_last_chunk = threading.Event()
    with start_proxy(write_config(tmp_path, url)) as proxy:
        stream = openai_client(proxy).chat.completions.create(
            model="m", messages=openai_history(1, 1), stream=True
        )
        pieces: list[str] = []
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
            if len(pieces) == 3:
                # The first chunks arrived while the upstream still holds the last one: the
                # proxy relays as it receives, it does not buffer the whole answer.
                assert not fake.release_last_chunk.is_set()
                fake.release_last_chunk.set()
    assert pieces == ["one", " two", " three", " four"]


def test_anthropic_stream_is_relayed_complete(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    _, url = upstream
    with start_proxy(write_config(tmp_path, url)) as proxy:
        client = anthropic.Anthropic(base_url=proxy, api_key=SECRET, max_retries=0)
        with client.messages.stream(
            model="m", max_tokens=50, messages=anthropic_history(1, 1)
        ) as stream:
            text = "".join(stream.text_stream)
            final = stream.get_final_message()
    assert text == "alpha beta gamma"
    assert final.stop_reason == "end_turn"


def test_malformed_json_is_a_400(upstream: tuple[FakeUpstream, str], tmp_path: Path) -> None:
    fake, url = upstream
    with start_proxy(write_config(tmp_path, url)) as proxy:
        r = httpx.post(f"{proxy}/v1/chat/completions", content=b'{"messages": [')
        r2 = httpx.post(f"{proxy}/v1/messages", content=b"[1, 2]")
    assert r.status_code == 400
    assert "not valid JSON" in r.json()["error"]["message"]
    assert r2.status_code == 400
    assert "JSON object" in r2.json()["error"]["message"]
    assert fake.received == []


def test_body_over_the_limit_is_a_413(upstream: tuple[FakeUpstream, str], tmp_path: Path) -> None:
    fake, url = upstream
    big = json.dumps({"model": "m", "messages": openai_history(1, 50_000)}).encode()
    assert len(big) > 200_000
    with start_proxy(write_config(tmp_path, url)) as proxy:
        r = httpx.post(f"{proxy}/v1/chat/completions", content=big)

        def chunks() -> Iterator[bytes]:  # no content-length: the limit holds while streaming
            for i in range(0, len(big), 65536):
                yield big[i : i + 65536]

        r2 = httpx.post(f"{proxy}/v1/chat/completions", content=chunks())
    assert r.status_code == 413
    assert "200000 bytes" in r.json()["error"]["message"]
    assert r2.status_code == 413
    assert fake.received == []


def test_unreachable_upstream_is_a_502(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with start_proxy(write_config(tmp_path, dead)) as proxy:
        r = httpx.post(
            f"{proxy}/v1/chat/completions",
            json={"model": "m", "messages": openai_history(1, 1)},
        )
    assert r.status_code == 502
    assert "upstream unreachable" in r.json()["error"]["message"]
    assert r.headers["x-ctxcompact"].startswith("action=unchanged")


def test_upstream_error_passes_through_with_status_and_body(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    fake.status = 429
    with start_proxy(write_config(tmp_path, url)) as proxy:
        client = openai_client(proxy)
        with pytest.raises(openai.RateLimitError) as info:
            client.chat.completions.create(model="m", messages=openai_history(1, 1))
    assert info.value.status_code == 429
    assert info.value.body == {"message": "slow down", "type": "rate_limit", "code": None}
    assert info.value.response.headers["retry-after"] == "0"


def test_strategy_failure_forwards_the_original_request(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream

    def explode(ctx: object) -> None:
        raise RuntimeError("summarizer is down")

    messages = openai_history(turns=4, output_chars=300)
    body = json.dumps({"model": "m", "messages": messages}).encode()
    config_path = write_config(tmp_path, url)
    with start_proxy(config_path, strategy=FunctionStrategy(explode)) as proxy:
        r = httpx.post(f"{proxy}/v1/chat/completions", content=body)
    assert r.status_code == 200
    assert fake.received[-1].body == body
    report = r.headers["x-ctxcompact"]
    assert "action=failed" in report
    # The exception's type, not its text (which may quote the conversation).
    assert report.endswith("error=strategy raised RuntimeError")
    assert "summarizer is down" not in report


def test_other_paths_pass_through_untouched(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    with start_proxy(write_config(tmp_path, url)) as proxy:
        models = openai_client(proxy).models.list()
    assert [m.id for m in models.data] == ["fake-model"]
    assert fake.received[-1].path == "/v1/models"
    assert fake.received[-1].headers["authorization"] == f"Bearer {SECRET}"


def test_two_proxies_rewrite_the_same_request_identically(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    config_path = write_config(tmp_path, url)
    body = {"model": "m", "messages": openai_history(turns=5, output_chars=300)}
    with start_proxy(config_path) as first, start_proxy(config_path) as second:
        for proxy in (first, second, first):
            assert httpx.post(f"{proxy}/v1/chat/completions", json=body).status_code == 200
    sent = [r.body for r in fake.received]
    assert len(sent) == 3
    assert sent[0] == sent[1] == sent[2]
    assert sent[0] != json.dumps(body).encode()


def test_max_tokens_larger_than_the_window_still_forwards(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    messages = openai_history(turns=1, output_chars=3)
    with start_proxy(write_config(tmp_path, url)) as proxy:
        r = httpx.post(
            f"{proxy}/v1/chat/completions",
            json={"model": "m", "messages": messages, "max_tokens": 10**6},
        )
    assert r.status_code == 200
    # The reserve alone reaches the trigger, so the strategy ran; it had nothing old to hide.
    assert r.headers["x-ctxcompact"].startswith("action=unchanged")
    assert fake.received[-1].json()["messages"] == messages


def test_output_the_format_cannot_express_fails_open(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    # A (third-party) strategy may insert a system message mid-history: valid for the
    # validator, inexpressible in Anthropic's format. The request must still go out unchanged.
    fake, url = upstream

    def add_note(ctx: Any) -> list[Message]:
        # It drops the first step too: an output not smaller than its input is no compaction.
        return [*ctx.history[:1], Message.system("note"), *ctx.history[3:]]

    messages = anthropic_history(turns=4, output_chars=300)
    body = json.dumps({"model": "m", "max_tokens": 100, "messages": messages}).encode()
    with start_proxy(write_config(tmp_path, url), strategy=FunctionStrategy(add_note)) as proxy:
        r = httpx.post(
            f"{proxy}/v1/messages", content=body, headers={"anthropic-version": "2023-06-01"}
        )
    assert r.status_code == 200
    assert fake.received[-1].body == body
    report = r.headers["x-ctxcompact"]
    assert "action=failed" in report
    assert "cannot be sent in this format" in report


def test_a_transform_that_raises_is_skipped_and_reported(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream

    def broken(ctx: Any) -> None:
        raise RuntimeError("transform bug")

    extra = (
        "[tool_result_truncation]\nenabled = true\nmax_chars = 100\n"
        "head_chars = 10\ntail_chars = 10\n"
    )
    config = load_config(write_config(tmp_path, url, extra=extra))
    app = create_app(config)
    messages = openai_history(turns=1, output_chars=30)  # a 210-char result: truncated
    # The config's truncation plus a broken transform of the user's own, in front of it.
    rewriter = app.state.rewriter
    controller = rewriter.controller
    controller.transforms = (FunctionStrategy(broken, name="broken"), *controller.transforms)
    with serve_in_thread(app) as proxy:
        r = httpx.post(f"{proxy}/v1/chat/completions", json={"model": "m", "messages": messages})
    assert r.status_code == 200
    report = r.headers["x-ctxcompact"]
    assert report.startswith("action=transformed")
    assert report.endswith("error=transform broken raised RuntimeError")
    assert "transform bug" not in report
    sent = fake.received[-1].json()["messages"]
    assert "characters truncated" in sent[-1]["content"]


def test_the_context_guard_keeps_the_requests_max_tokens_free(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    extra = "[context_guard]\nenabled = true\nreserve_tokens = 100\n"
    # Far below the trigger (no max_tokens, reserved 500 of 100,000), so only the guard acts.
    path = write_config(tmp_path, url, extra=extra, max_context_size=100_000)
    messages = openai_history(turns=8, output_chars=300)
    # A user message before each turn: the guard drops whole turns, never the last one.
    messages = [
        m
        for i, m in enumerate(messages)
        for m in (
            [{"role": "user", "content": f"next step {i}"}, m] if m["role"] == "assistant" else [m]
        )
    ]
    with start_proxy(path) as proxy:
        small = httpx.post(
            f"{proxy}/v1/chat/completions", json={"model": "m", "messages": messages}
        )
        big = httpx.post(
            f"{proxy}/v1/chat/completions",
            json={"model": "m", "messages": messages, "max_tokens": 98_500},
        )
    assert small.headers["x-ctxcompact"].startswith("action=unchanged")
    # max_tokens 98,500 of 100,000: the trigger fires, the strategy (hiding) compacts, then
    # the guard (a transform) trims the rest to 100,000 - 98,500 tokens. The same order as
    # the agent's and the replay's (CompactionController.step).
    report = big.headers["x-ctxcompact"]
    assert report.startswith("action=compacted")
    assert int(report.split("tokens=")[1].split("->")[1].split(";")[0]) <= 1_500
    kept = fake.received[-1].json()["messages"]
    assert kept != messages
    assert check_history(from_openai(kept)) == []
