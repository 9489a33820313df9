"""``POST /v1/responses`` through the proxy over real HTTP on 127.0.0.1: the official ``openai``
SDK's Responses client and plain httpx -> proxy -> fake upstream."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from ctxcompact import CompactionContext, Message, check_history, from_responses
from ctxcompact.testing import FunctionStrategy
from tests.helpers.proxy_servers import FakeUpstream, serve_in_thread
from tests.test_proxy import HIDDEN, SECRET, start_proxy, write_config

INSTRUCTIONS = "You are a coding agent."


@pytest.fixture
def upstream() -> Iterator[tuple[FakeUpstream, str]]:
    fake = FakeUpstream(window=4000)
    with serve_in_thread(fake.app()) as url:
        yield fake, url


def responses_items(turns: int, output_chars: int) -> list[dict[str, Any]]:
    """A task, then ``turns`` steps of reasoning + function call + output (Codex's shape)."""
    items: list[dict[str, Any]] = [
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "Fix the failing test."}],
        }
    ]
    for i in range(turns):
        items += [
            {"type": "reasoning", "id": f"rs_{i}", "summary": [], "encrypted_content": f"gAAA{i}"},
            {
                "type": "function_call",
                "id": f"fc_{i}",
                "call_id": f"call_{i}",
                "name": "shell",
                "arguments": json.dumps({"cmd": f"cat f{i}"}),
            },
            {
                "type": "function_call_output",
                "call_id": f"call_{i}",
                "output": f"line {i}\n" * output_chars,
            },
        ]
    return items


def fields(value: str) -> dict[str, str]:
    return dict(p.split("=", 1) for p in value.split("; "))


def outputs(items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [i for i in items if i.get("type") == "function_call_output"]


def async_client(proxy: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{proxy}/v1", api_key=SECRET, max_retries=0)


async def test_sdk_request_over_the_trigger_is_compacted(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    items = responses_items(turns=6, output_chars=200)
    before = json.dumps(items)
    with start_proxy(write_config(tmp_path, url)) as proxy:
        client = async_client(proxy)
        raw = await client.responses.with_raw_response.create(
            model="fake-model",
            input=items,
            instructions=INSTRUCTIONS,  # type: ignore[arg-type]
        )
        await client.close()
    response = raw.parse()
    assert json.dumps(items) == before
    assert fields(raw.headers["x-ctxcompact"])["action"] == "compacted"
    sent = fake.received[0].json()
    assert fake.received[0].path == "/v1/responses"
    assert sent["instructions"] == INSTRUCTIONS
    new = sent["input"]
    assert response.output_text == f"saw {len(new)} items"
    assert check_history(from_responses(new)) == []
    # Same items in the same order: only old outputs changed, each keeping its call_id.
    assert [(i["type"], i.get("call_id")) for i in new] == [
        (i["type"], i.get("call_id")) for i in items
    ]
    assert [o["output"] for o in outputs(new)] == [HIDDEN] * 5 + [outputs(items)[-1]["output"]]
    assert [i for i in new if i["type"] == "reasoning"] == [
        i for i in items if i["type"] == "reasoning"
    ]


def test_small_request_is_forwarded_byte_for_byte(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    body = json.dumps(
        {"model": "m", "instructions": INSTRUCTIONS, "input": responses_items(1, 3)}
    ).encode()
    with start_proxy(write_config(tmp_path, url)) as proxy:
        response = httpx.post(
            f"{proxy}/responses", content=body, headers={"content-type": "application/json"}
        )
    assert response.status_code == 200
    assert fake.received[0].body == body
    assert fields(response.headers["x-ctxcompact"])["action"] == "unchanged"


def test_string_input_is_forwarded_unchanged(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    with start_proxy(write_config(tmp_path, url)) as proxy:
        client = openai.OpenAI(base_url=f"{proxy}/v1", api_key=SECRET, max_retries=0)
        raw = client.responses.with_raw_response.create(model="m", input="x " * 5000)
    assert raw.parse().output_text == "saw 1 items"
    assert fake.received[0].json()["input"] == "x " * 5000
    header = fields(raw.headers["x-ctxcompact"])
    assert header["action"] == "skipped"
    assert header["error"] == "input is a string"


def test_streaming_answer_is_relayed_unchanged(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    body = {"model": "m", "stream": True, "input": responses_items(turns=6, output_chars=200)}
    with (
        start_proxy(write_config(tmp_path, url)) as proxy,
        httpx.stream("POST", f"{proxy}/v1/responses", json=body) as response,
    ):
        header = response.headers["x-ctxcompact"]
        text = response.read().decode()
    # Straight from the upstream for comparison.
    with httpx.stream("POST", f"{url}/v1/responses", json=body) as direct:
        expected = direct.read().decode()
    assert fields(header)["action"] == "compacted"
    sent = fake.received[0].json()
    assert sent["stream"] is True
    assert HIDDEN in [o["output"] for o in outputs(sent["input"])]
    n = len(sent["input"])
    assert text == expected.replace(f"saw {len(body['input'])} items", f"saw {n} items")


async def test_sdk_streaming_events_arrive(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    _fake, url = upstream
    with start_proxy(write_config(tmp_path, url)) as proxy:
        client = async_client(proxy)
        stream = await client.responses.create(
            model="m",
            input=responses_items(turns=6, output_chars=200),  # type: ignore[arg-type]
            stream=True,
        )
        events = [event async for event in stream]
        await client.close()
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas) == "red green blue"
    assert events[-1].type == "response.completed"


async def test_context_too_long_is_compacted_and_retried(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    fake.max_prompt_bytes = 16_000
    items = responses_items(turns=30, output_chars=100)
    config = write_config(tmp_path, url, max_context_size=1_000_000, reserved_context_size=1000)
    with start_proxy(config) as proxy:
        client = async_client(proxy)
        raw = await client.responses.with_raw_response.create(
            model="fake-model",
            input=items,
            instructions=INSTRUCTIONS,  # type: ignore[arg-type]
        )
        await client.close()
    assert raw.http_response.status_code == 200
    assert len(fake.received) == 2
    sent = fake.received[1].json()
    assert sent["instructions"] == INSTRUCTIONS
    assert len(fake.received[1].body) <= 16_000
    history = from_responses(sent["input"])
    assert check_history(history) == []
    assert sent["input"][-3:] == items[-3:]  # the newest step, its reasoning included
    assert sent["input"][0]["role"] == "user"
    header = fields(raw.headers["x-ctxcompact"])
    assert (header["retried"], header["window"]) == ("1", "4000")


def test_strategy_that_rewrites_the_instructions_fails_open(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream

    def rewrite_system(ctx: CompactionContext) -> list[Message]:
        return [Message.system("other") if m.role == "system" else m for m in ctx.history]

    strategy = FunctionStrategy(rewrite_system, name="rewrite_system")
    body = json.dumps(
        {"model": "m", "instructions": INSTRUCTIONS, "input": responses_items(6, 200)}
    ).encode()
    with start_proxy(write_config(tmp_path, url), strategy=strategy) as proxy:
        response = httpx.post(
            f"{proxy}/v1/responses", content=body, headers={"content-type": "application/json"}
        )
    assert response.status_code == 200
    assert fake.received[0].body == body
    header = fields(response.headers["x-ctxcompact"])
    assert header["action"] == "failed"
    assert "cannot be sent in this format" in header["error"]
