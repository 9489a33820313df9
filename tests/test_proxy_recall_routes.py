"""Recall through the proxy on all three routes, streamed and not, with the official SDKs.

Real HTTP on 127.0.0.1: SDK client -> proxy -> :class:`~tests.helpers.recall_upstream.Pager`,
a fake model that pages through every removed result it is told about (more than three rounds
in a row), signs its thinking blocks and reasoning items and refuses, as the providers do, a
tool round that does not send them back unchanged. The recall handle is read from the markers
the proxy wrote and passed through untouched, whatever it looks like.
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

from ctxcompact import (
    HeuristicTokenCounter,
    from_anthropic,
    from_openai,
    from_responses,
    to_anthropic,
    to_openai,
)
from tests.helpers.proxy_servers import FakeUpstream, serve_in_thread
from tests.helpers.recall_upstream import MARKER, RECALL, Pager, signature
from tests.helpers.responses_items import chat_to_items
from tests.helpers.traces import load_trace, trace_names
from tests.test_proxy import SECRET, anthropic_history, openai_history, start_proxy, write_config
from tests.test_proxy_metrics import scrape, value
from tests.test_proxy_recall import ROOMY
from tests.test_proxy_responses import responses_items

ROUTES = ["chat", "messages", "responses"]
PATHS = {"chat": "/v1/chat/completions", "messages": "/v1/messages", "responses": "/v1/responses"}
_OPEN: list[openai.OpenAI | anthropic.Anthropic] = []


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while _OPEN:
        _OPEN.pop().close()


def serve(pager: Pager | FakeUpstream) -> Any:
    return serve_in_thread(pager.app())


def recall_config(tmp_path: Path, url: str, extra: str = "", **compaction: Any) -> Path:
    """A recall config on a window with room for every page the pager reads (``ROOMY``)."""
    store = f'[store]\npath = "{tmp_path / "originals.db"}"\nrecall = true\n'
    # write_config ends inside [proxy]: extra keys of that table go first.
    return write_config(tmp_path, url, extra=extra + store, **{**ROOMY, **compaction})


def openai_sdk(proxy: str) -> openai.OpenAI:
    client = openai.OpenAI(base_url=f"{proxy}/v1", api_key=SECRET, max_retries=0)
    _OPEN.append(client)
    return client


def anthropic_sdk(proxy: str) -> anthropic.Anthropic:
    client = anthropic.Anthropic(base_url=proxy, api_key=SECRET, max_retries=0)
    _OPEN.append(client)
    return client


def ask(proxy: str, route: str, stream: bool) -> tuple[str, Any]:
    """One request over the trigger through the SDK; the client's text and what it got."""
    if route == "chat":
        client = openai_sdk(proxy).chat.completions
        messages = openai_history(turns=4, output_chars=300)
        if not stream:
            answer = client.create(model="m", messages=messages, max_tokens=100)
            return answer.choices[0].message.content or "", answer.model_dump()
        chunks = list(client.create(model="m", messages=messages, max_tokens=100, stream=True))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        return text, [c.model_dump() for c in chunks]
    if route == "messages":
        sdk = anthropic_sdk(proxy).messages
        history = anthropic_history(turns=4, output_chars=300)
        if not stream:
            message = sdk.create(model="m", max_tokens=100, messages=history)
        else:
            with sdk.stream(model="m", max_tokens=100, messages=history) as events:
                message = events.get_final_message()
        text = "".join(b.text for b in message.content if b.type == "text")
        return text, message.model_dump()
    responses = openai_sdk(proxy).responses
    items = responses_items(turns=4, output_chars=300)
    if not stream:
        response = responses.create(model="m", input=items, max_output_tokens=100)
    else:
        with responses.stream(model="m", input=items, max_output_tokens=100) as events:
            response = events.get_final_response()
    return response.output_text, response.model_dump()


def recall_calls_in(value: Any) -> list[Any]:
    """Every recall call in what the client received (the echoed ``tools`` aside)."""
    found: list[Any] = []
    if isinstance(value, dict):
        function = value.get("function")
        if value.get("name") == RECALL or (
            isinstance(function, dict) and function.get("name") == RECALL
        ):
            found.append(value)
        for key, item in value.items():
            if key != "tools":
                found += recall_calls_in(item)
    elif isinstance(value, list):
        for item in value:
            found += recall_calls_in(item)
    return found


def strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def handles(body: dict[str, Any]) -> list[str]:
    """The handles the markers in the request name, in order."""
    text = "\n".join(strings(body.get("messages", body.get("input"))))
    return list(dict.fromkeys(MARKER.findall(text)))


def results_sent(route: str, body: dict[str, Any]) -> list[str]:
    """The recall results a follow-up carries, in order."""
    if route == "chat":
        return [m["content"] for m in body["messages"] if m["role"] == "tool"][-1:]
    if route == "messages":
        blocks = body["messages"][-1]["content"]
        return [b["content"] for b in blocks if b.get("type") == "tool_result"]
    return [i["output"] for i in body["input"] if i.get("type") == "function_call_output"][-1:]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("route", ROUTES)
def test_a_model_that_pages_through_everything_is_served_on_every_route(
    tmp_path: Path, route: str, stream: bool
) -> None:
    pager = Pager(thinking=True)
    with serve(pager) as url, start_proxy(recall_config(tmp_path, url)) as proxy:
        text, got = ask(proxy, route, stream)
    first = pager.received[0].json()
    names = handles(first)
    assert len(names) >= 2  # hidden results, each 300 lines: two recall windows each
    rounds = len(pager.received) - 1
    assert rounds > 3
    assert pager.refusals == []  # thinking and reasoning went back as the provider requires
    # Pages came back (the first window, then from line 201 on) while the window had room
    # for them; then the model was told it is full. Every follow-up fits the window.
    pages = [results_sent(route, r.json())[0] for r in pager.received[1:]]
    assert not any(p.startswith("Error") for p in pages)
    assert sum("201: line" in p for p in pages) >= 1
    assert all(p.startswith("Tool result ") for p in pages[:-1])
    assert pages[-1].startswith(("Tool result ", "Not run: the context window has no room"))
    for request in pager.received:
        assert follow_up_tokens(route, request.json()) <= ROOMY["max_context_size"] - 100
    assert text.endswith(f"read {rounds} pages of {len(names)} results")
    assert recall_calls_in(got) == []


def follow_up_tokens(route: str, body: dict[str, Any]) -> int:
    """What the proxy's default counter says ``body`` takes of the window: its history and
    its tools' descriptions."""
    counter = HeuristicTokenCounter()
    if route == "chat":
        history = from_openai(body["messages"])
    elif route == "messages":
        history = from_anthropic(body["messages"], system=body.get("system"))
    else:
        history = from_responses(body["input"])
    return counter.count(history) + counter.count_text(json.dumps(body.get("tools") or []))


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("route", ROUTES)
def test_recall_rounds_stay_inside_a_nearly_full_window(
    tmp_path: Path, route: str, stream: bool
) -> None:
    # The plain proxy tests' 2000-token window: the compacted request leaves about a page of
    # room, so the first page is cut to what is left and the next round is told the window
    # is full (the upstream used to get follow-ups past the window it was compacted for).
    pager = Pager()
    with (
        serve(pager) as url,
        start_proxy(recall_config(tmp_path, url, max_context_size=2000)) as proxy,
    ):
        text, got = ask(proxy, route, stream)
    pages = [results_sent(route, r.json())[0] for r in pager.received[1:]]
    assert len(pages) >= 2
    assert pages[0].startswith("Tool result ")  # a page, cut to the room: it says where to go on
    assert "[more from line " in pages[0]
    assert pages[-1].startswith("Not run: the context window has no room")
    for request in pager.received:
        assert follow_up_tokens(route, request.json()) <= 2000 - 100
    assert recall_calls_in(got) == []
    # The pager calls again after the closing round (it only stops on "budget"): the calls
    # are taken out and the client gets the model's own text.
    assert text.endswith("Let me read more.")  # streamed: each round's text, in one message
    assert pager.refusals == []


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_anthropic_thinking_before_a_recall_call_goes_back_unchanged(
    tmp_path: Path, stream: bool
) -> None:
    pager = Pager(thinking=True)
    with serve(pager) as url, start_proxy(recall_config(tmp_path, url)) as proxy:
        _, got = ask(proxy, "messages", stream)
    follow_up = pager.received[1].json()["messages"]
    turn = follow_up[-2]
    assert turn["role"] == "assistant"
    thinking = turn["content"][0]
    assert thinking["type"] == "thinking"
    assert thinking["signature"] == signature(thinking["thinking"])
    assert [b["type"] for b in turn["content"]] == ["thinking", "text", "tool_use"]
    if stream:
        # One message for the client: each round's thinking, text, then the answer.
        kinds = [b["type"] for b in got["content"]]
        assert kinds.count("thinking") == len(pager.received)
        assert got["stop_reason"] == "end_turn"


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_responses_reasoning_before_a_recall_call_goes_back_unchanged(
    tmp_path: Path, stream: bool
) -> None:
    pager = Pager(thinking=True)
    with serve(pager) as url, start_proxy(recall_config(tmp_path, url)) as proxy:
        _, got = ask(proxy, "responses", stream)
    first, second = (r.json() for r in pager.received[:2])
    appended = second["input"][len(first["input"]) :]
    assert [i["type"] for i in appended] == [
        "reasoning",
        "message",
        "function_call",
        "function_call_output",
    ]
    assert appended[0]["encrypted_content"].startswith("gAAAA-1-")
    assert appended[3]["call_id"] == appended[2]["call_id"]
    assert {"name": RECALL, "type": "function", "strict": False}.items() <= next(
        t for t in first["tools"] if t.get("name") == RECALL
    ).items()
    if stream:
        # One response for the client: the first round's id, every item once, in order.
        assert got["id"] == "resp_1"
        assert all(i["type"] != "function_call" for i in got["output"])
        ids = [i["id"] for i in got["output"]]
        assert len(ids) == len(set(ids)) == 2 * len(pager.received)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("route", ROUTES)
def test_past_the_bound_the_model_is_told_and_its_calls_never_reach_the_client(
    tmp_path: Path, route: str, stream: bool
) -> None:
    pager = Pager(stubborn=True, silent=True)
    with (
        serve(pager) as url,
        start_proxy(recall_config(tmp_path, url, extra="max_recall_rounds = 2\n")) as proxy,
    ):
        text, got = ask(proxy, route, stream)
    # Two rounds answered, then one closing round, whose results say the budget is spent.
    assert len(pager.received) == 1 + 2 + 1
    closing = results_sent(route, pager.received[-1].json())
    assert closing
    assert all("recall budget is spent (2 rounds" in r for r in closing)
    assert not any("budget" in r for r in results_sent(route, pager.received[2].json()))
    # The model called recall anyway: taken out, and the client is told why in the text.
    assert recall_calls_in(got) == []
    assert text == (
        "[ctxcompact proxy: the model kept calling recall_tool_result after this request's "
        "recall budget (2 rounds) was spent; those calls were not passed on]"
    )
    if route == "messages":
        assert got["stop_reason"] == "end_turn"
    elif route == "chat" and not stream:
        assert got["choices"][0]["finish_reason"] == "stop"
    elif route == "chat":
        assert [c["choices"][0]["finish_reason"] for c in got if c["choices"]][-1] == "stop"
    else:
        assert got["status"] == "completed"


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("route", ROUTES)
def test_recall_rounds_are_counted_on_metrics_but_not_the_closing_round(
    tmp_path: Path, route: str, stream: bool
) -> None:
    pager = Pager(stubborn=True)
    with (
        serve(pager) as url,
        start_proxy(recall_config(tmp_path, url, extra="max_recall_rounds = 2\n")) as proxy,
    ):
        ask(proxy, route, stream)
        samples = scrape(proxy)
    assert len(pager.received) == 1 + 2 + 1  # two rounds answered, one closing round
    # One call a round, each naming a handle a marker gave: two run, both found; the
    # closing round's call was answered with "budget spent", not run.
    assert value(samples, "ctxcompact_proxy_recall_calls_total") == 2
    assert value(samples, "ctxcompact_proxy_recall_hits_total") == 2


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("route", ["messages", "responses"])
def test_a_mixed_answer_reaches_the_client_with_its_own_call_only(
    tmp_path: Path, route: str, stream: bool
) -> None:
    pager = Pager(also_call="bash")
    with serve(pager) as url, start_proxy(recall_config(tmp_path, url)) as proxy:
        _, got = ask(proxy, route, stream)
    assert len(pager.received) == 1  # nothing answered: the client runs its own tool
    assert recall_calls_in(got) == []
    if route == "messages":
        uses = [b for b in got["content"] if b["type"] == "tool_use"]
        assert [u["name"] for u in uses] == ["bash"]
        assert got["stop_reason"] == "tool_use"
    else:
        calls = [i for i in got["output"] if i["type"] == "function_call"]
        assert [c["name"] for c in calls] == ["bash"]


def test_responses_continuing_an_upstream_conversation_is_not_offered_recall(
    tmp_path: Path,
) -> None:
    pager = Pager()
    with serve(pager) as url, start_proxy(recall_config(tmp_path, url)) as proxy:
        body = {
            "model": "m",
            "previous_response_id": "resp_9",
            "input": responses_items(turns=4, output_chars=300),
        }
        r = httpx.post(f"{proxy}/v1/responses", json=body, timeout=30)
    assert r.status_code == 200
    sent = pager.received[0].json()
    assert "action=compacted" in r.headers["x-ctxcompact"]
    assert RECALL not in [t.get("name") for t in sent.get("tools") or []]
    assert len(pager.received) == 1


def test_a_client_that_offers_the_tool_itself_gets_the_calls_past_the_bound(
    tmp_path: Path,
) -> None:
    fake = FakeUpstream()
    fake.recall_ids = ["call_0", "call_0"]
    tool = {"type": "function", "function": {"name": RECALL, "parameters": {"type": "object"}}}
    with (
        serve(fake) as url,
        start_proxy(recall_config(tmp_path, url, extra="max_recall_rounds = 1\n")) as proxy,
    ):
        answer = openai_sdk(proxy).chat.completions.create(
            model="m",
            messages=openai_history(turns=4, output_chars=300),
            tools=[tool],
            max_tokens=100,
        )
    assert len(fake.received) == 2  # one round answered by the proxy, no closing round
    calls = answer.choices[0].message.tool_calls or []
    assert [c.function.name for c in calls] == [RECALL]


# -- every public trace, with a model that pages through everything --------------------------


def trace_request(name: str, route: str, stream: bool) -> dict[str, Any]:
    history = from_openai(load_trace(name))
    last = max(i for i, m in enumerate(history) if m.role == "assistant")
    history = history[:last]
    if route == "chat":
        return {"model": "m", "messages": to_openai(history), "max_tokens": 1000, "stream": stream}
    if route == "messages":
        system, messages = to_anthropic(history)
        body: dict[str, Any] = {"model": "m", "messages": messages, "max_tokens": 1000}
        return {**body, "stream": stream, **({"system": system} if system else {})}
    items = chat_to_items(to_openai(history))
    return {"model": "m", "input": items, "max_output_tokens": 1000, "stream": stream}


def events_of(text: str) -> list[Any]:
    out = []
    for line in text.splitlines():
        if line.startswith("data:") and line[5:].strip() != "[DONE]":
            out.append(json.loads(line[5:]))
    return out


@pytest.mark.parametrize(
    "stream",
    [False, pytest.param(True, marks=pytest.mark.slow)],  # 17 traces x 9 rounds: ~8 s each
    ids=["plain", "streamed"],
)
@pytest.mark.parametrize("route", ROUTES)
def test_no_recall_call_reaches_the_client_on_any_trace(
    tmp_path: Path, route: str, stream: bool
) -> None:
    recommended = Path("examples/recommended.toml").read_text(encoding="utf-8")
    pager = Pager()
    rounds: list[int] = []
    with serve(pager) as url:
        config = tmp_path / "proxy.toml"
        config.write_text(
            f'{recommended}\n[proxy]\nopenai_base_url = "{url}/v1"\nanthropic_base_url = "{url}"\n'
            f'max_body_bytes = 100000000\n[store]\npath = "{tmp_path / "o.db"}"\nrecall = true\n',
            encoding="utf-8",
        )
        with start_proxy(config) as proxy, httpx.Client(timeout=120) as client:
            for name in trace_names():
                before = len(pager.received)
                r = client.post(
                    f"{proxy}{PATHS[route]}",
                    json=trace_request(name, route, stream),
                    headers={"x-api-key": SECRET, "authorization": f"Bearer {SECRET}"},
                )
                assert r.status_code == 200, (name, r.text[:300])
                got = events_of(r.text) if stream else r.json()
                assert recall_calls_in(got) == [], name
                rounds.append(len(pager.received) - before - 1)
                # Every follow-up inside the window (16,000, 1,000 for the answer): without
                # fitting, 30 of 104 Chat follow-ups were over it, the largest 29,396 tokens.
                for request in pager.received[before:]:
                    assert follow_up_tokens(route, request.json()) <= 16000 - 1000, name
    assert pager.refusals == []
    # Not vacuous: most traces were compacted, offered recall, and paged past three rounds,
    # up to the bound and its closing round.
    assert sum(n > 3 for n in rounds) >= 8
    assert max(rounds) == 8 + 1
