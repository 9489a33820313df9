"""One caller never recalls another's originals, whatever credential it sends.

Real HTTP on 127.0.0.1: callers -> the proxy (recall on, a real SQLite store) -> a fake upstream
whose model calls ``recall_tool_result``. For every way a supported client authenticates, two
callers with different credentials (and callers with none) send conversations that re-use the
same tool-call ids; each must read back its own original, never another's.
"""

from __future__ import annotations

import base64
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers.proxy_servers import FakeUpstream, serve_in_thread
from tests.test_proxy import anthropic_history, openai_history, start_proxy, write_config
from tests.test_proxy_recall import ROOMY

NOT_STORED = "Nothing is kept under"  # a plain sentence, not an error the model cannot act on


def _basic(user: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:pw-{user}".encode()).decode()


# scheme -> (headers, query) of a caller whose secret is ``who``.
SCHEMES: dict[str, Any] = {
    "bearer": lambda who: ({"authorization": f"Bearer sk-{who}"}, {}),
    "basic": lambda who: ({"authorization": _basic(who)}, {}),
    "token": lambda who: ({"authorization": f"token gh-{who}"}, {}),
    "malformed-bearer": lambda who: ({"authorization": f"Bearer:sk-{who}"}, {}),
    "x-api-key": lambda who: ({"x-api-key": f"sk-ant-{who}"}, {}),
    "azure-api-key": lambda who: ({"api-key": f"az-{who}"}, {}),
    "x-goog-api-key": lambda who: ({"x-goog-api-key": f"AIza-{who}"}, {}),
    "apim-subscription": lambda who: ({"ocp-apim-subscription-key": f"sub-{who}"}, {}),
    "query-api-key": lambda who: ({}, {"api-key": f"az-{who}", "api-version": "2024-10-21"}),
    "query-key": lambda who: ({}, {"key": f"AIza-{who}"}),
}


@pytest.fixture
def upstream() -> Iterator[tuple[FakeUpstream, str]]:
    fake = FakeUpstream()
    with serve_in_thread(fake.app()) as url:
        yield fake, url


def recall_config(tmp_path: Path, url: str) -> Path:
    extra = f'[store]\npath = "{tmp_path / "originals.db"}"\nrecall = true\n'
    return write_config(tmp_path, url, extra=extra, **ROOMY)


def conversation(route: str, owner: str) -> dict[str, Any]:
    """A request whose old tool results get hidden: its first call has an id of its own
    (``only_<owner>``), the others ids every caller re-uses (``call_1`` / ``toolu_1`` ...);
    each result names ``owner``."""
    if route == "/v1/responses":
        chat = conversation("/v1/chat/completions", owner)
        return {"model": "m", "max_output_tokens": 100, "input": to_items(chat["messages"])}
    if route == "/v1/messages":
        messages = anthropic_history(turns=4, output_chars=300)
        messages[1]["content"][1]["id"] = f"only_{owner}"
        messages[2]["content"][0]["tool_use_id"] = f"only_{owner}"
        for message in messages[2::2]:
            block = message["content"][0]
            block["content"] = block["content"].replace("line", f"{owner}-line")
        return {"model": "m", "max_tokens": 100, "messages": messages}
    messages = openai_history(turns=4, output_chars=300)
    messages[2]["tool_calls"][0]["id"] = f"only_{owner}"
    messages[3]["tool_call_id"] = f"only_{owner}"
    for message in messages[3::2]:
        message["content"] = message["content"].replace("line", f"{owner}-line")
    return {"model": "m", "max_tokens": 100, "messages": messages}


def recall_results(fake: FakeUpstream, start: int, route: str) -> list[str]:
    """The recall results the proxy appended to the follow-ups received from ``start`` on."""
    out = []
    for item in fake.received[start + 1 :]:
        body = item.json()
        if route == "/v1/responses":
            out.append(body["input"][-1]["output"])
            continue
        last = body["messages"][-1]
        out.append(last["content"][0]["content"] if route == "/v1/messages" else last["content"])
    return out


def send(proxy: str, route: str, body: dict[str, Any], who: tuple[Any, Any]) -> httpx.Response:
    headers, query = who
    response = httpx.post(f"{proxy}{route}", json=body, headers=headers, params=query, timeout=30)
    assert response.status_code == 200, response.text
    return response


@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/messages", "/v1/responses"])
@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_no_caller_recalls_another_callers_original(
    upstream: tuple[FakeUpstream, str], tmp_path: Path, route: str, scheme: str
) -> None:
    fake, url = upstream
    shared = "toolu_1" if route == "/v1/messages" else "call_1"  # Responses: chat's ids
    credential = SCHEMES[scheme]
    callers = {"alice": credential("alice"), "bob": credential("bob"), "anon": ({}, {})}
    with start_proxy(recall_config(tmp_path, url)) as proxy:
        send(proxy, route, conversation(route, "alice"), callers["alice"])
        assert len(fake.received) == 1  # alice's originals are stored; nothing recalled
        for who in ("bob", "anon"):
            start = len(fake.received)
            # Each asks for alice's own id, then for the id everyone re-uses.
            fake.recall_ids = ["only_alice", shared]
            send(proxy, route, conversation(route, who), callers[who])
            foreign, own = recall_results(fake, start, route)
            assert foreign.startswith(NOT_STORED), (who, foreign[:200])
            assert f"{who}-line 1" in own
            assert "alice" not in own
        # alice still reads her own (nobody overwrote it).
        start = len(fake.received)
        fake.recall_ids = ["only_alice", shared]
        send(proxy, route, conversation(route, "alice"), callers["alice"])
        mine, again = recall_results(fake, start, route)
    assert "alice-line 0" in mine
    assert "alice-line 1" in again


def test_two_requests_without_a_credential_share_nothing(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    route = "/v1/chat/completions"
    with start_proxy(recall_config(tmp_path, url)) as proxy:
        send(proxy, route, conversation(route, "first"), ({}, {}))
        fake.recall_ids = ["only_first"]
        send(proxy, route, conversation(route, "second"), ({}, {}))
    (result,) = recall_results(fake, 1, route)
    assert result.startswith(NOT_STORED)


@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/messages", "/v1/responses"])
def test_store_namespaces_are_distinct_per_credential_and_never_hold_the_secret(
    upstream: tuple[FakeUpstream, str], tmp_path: Path, route: str
) -> None:
    fake, url = upstream
    body_route = "/v1/chat/completions" if route == "/v1/responses" else route
    with start_proxy(recall_config(tmp_path, url)) as proxy:
        for scheme in sorted(SCHEMES):
            for who in ("alice", "bob"):
                body = conversation(body_route, f"{scheme}-{who}")
                if route == "/v1/responses":
                    body = {"model": "m", "input": to_items(body["messages"])}
                send(proxy, route, body, SCHEMES[scheme](who))
    if route == "/v1/responses":
        # Recall is offered on this route too, in its tool shape.
        offered = [[t.get("name") for t in r.json()["tools"]] for r in fake.received]
        assert offered == [["recall_tool_result"]] * len(fake.received)
    with sqlite3.connect(tmp_path / "originals.db") as db:
        namespaces = [row[0] for row in db.execute("SELECT DISTINCT namespace FROM entries")]
        dump = "\n".join(db.iterdump())
    assert len(namespaces) == 2 * len(SCHEMES)
    for secret in ("sk-alice", "pw-alice", "gh-alice", "az-alice", "AIza-bob", "sub-bob"):
        assert secret not in dump


def to_items(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat Completions messages as Responses input items."""
    items: list[dict[str, Any]] = []
    for m in messages:
        if m["role"] == "assistant" and m.get("tool_calls"):
            for call in m["tool_calls"]:
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call["id"],
                        "name": call["function"]["name"],
                        "arguments": call["function"]["arguments"],
                    }
                )
        elif m["role"] == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": m["tool_call_id"],
                    "output": m["content"],
                }
            )
        else:
            items.append({"role": m["role"], "content": m["content"]})
    return items
