"""The proxy under unusual input and failing parts, over real HTTP on 127.0.0.1.

Fail-open: valid JSON within the limits is forwarded (rewritten, or byte for byte), over a
limit or invalid it is a 400, never a 500; no content in headers or logs above DEBUG.
"""

from __future__ import annotations

import http.client
import json
import logging
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ctxcompact import load_config
from ctxcompact.proxy import create_app
from ctxcompact.testing import FunctionStrategy
from tests.helpers.proxy_servers import (
    FakeUpstream,
    free_port,
    serve_broken_stream,
    serve_in_thread,
)
from tests.test_proxy import HIDDEN, openai_history, start_proxy, write_config

# Every request masked, at every turn: these requests fit the window.
SCHEMA1 = (
    "[observation_masking.schema1]\nenabled = true\nwindow_turns = 1\nbatch_turns = 0\n"
    "always = true\n"
)
CHAT = "/v1/chat/completions"


@pytest.fixture
def upstream() -> Iterator[tuple[FakeUpstream, str]]:
    fake = FakeUpstream()
    with serve_in_thread(fake.app()) as url:
        yield fake, url


def post(proxy: str, raw: bytes, path: str = CHAT) -> httpx.Response:
    return httpx.post(f"{proxy}{path}", content=raw, headers={"content-type": "application/json"})


def nested(depth: int) -> Any:
    """A value with ``depth`` objects inside one another around an integer."""
    value: Any = 1
    for _ in range(depth):
        value = {"k": value}
    return value


def raw_get(base: str, target: str) -> tuple[int, bytes]:
    """GET with the request target sent exactly as written (httpx would normalise it)."""
    parts = urlsplit(base)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    try:
        conn.putrequest("GET", target, skip_accept_encoding=True)
        conn.endheaders()
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


# -- unusual but valid JSON -------------------------------------------------------------------


def test_lone_surrogate_in_a_transformed_body_is_sent_escaped_as_received(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    messages = openai_history(turns=3, output_chars=30)
    messages[1]["content"] = "cut emoji: \ud83d and \udfff end"
    raw = json.dumps({"model": "m", "messages": messages}).encode()  # ASCII, \ud83d escapes
    with start_proxy(write_config(tmp_path, url, extra=SCHEMA1)) as proxy:
        r = post(proxy, raw)
    assert r.status_code == 200
    assert r.headers["x-ctxcompact"].startswith("action=transformed")
    sent_bytes = fake.received[-1].body
    assert b"cut emoji: \\ud83d and \\udfff end" in sent_bytes
    sent = json.loads(sent_bytes.decode("utf-8"))["messages"]
    assert sent[1]["content"] == messages[1]["content"]
    tools = [m["content"] for m in sent if m["role"] == "tool"]
    assert tools[0].startswith("[Observation masked")
    assert tools[2] == messages[-1]["content"]
    assert [m.get("tool_call_id") for m in sent] == [m.get("tool_call_id") for m in messages]


def test_lone_surrogate_in_a_compacted_body_keeps_the_other_text_unescaped(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    messages = openai_history(turns=4, output_chars=300)
    messages[-1]["content"] = "résultat \udc00 终"  # the newest result is kept
    raw = json.dumps({"model": "m", "messages": messages}, ensure_ascii=True).encode()
    with start_proxy(write_config(tmp_path, url)) as proxy:
        r = post(proxy, raw)
    assert r.headers["x-ctxcompact"].startswith("action=compacted")
    sent_bytes = fake.received[-1].body
    assert "résultat \\udc00 终".encode() in sent_bytes
    sent = json.loads(sent_bytes)["messages"]
    assert sent[-1]["content"] == messages[-1]["content"]
    assert [m["content"] for m in sent if m["role"] == "tool"][:3] == [HIDDEN] * 3


def test_lone_surrogate_in_an_unchanged_body_is_forwarded_byte_for_byte(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    raw = b'{"model":"m","messages":[{"role":"user","content":"\\ud800"}]}'
    with start_proxy(write_config(tmp_path, url)) as proxy:
        r = post(proxy, raw)
    assert r.status_code == 200
    assert fake.received[-1].body == raw


def test_extra_key_nested_at_the_depth_limit_is_forwarded_unchanged(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    messages = openai_history(turns=1, output_chars=3)
    messages[1]["extra"] = nested(253)  # body 1 + messages 2 + message 3 + 253 = 256
    raw = json.dumps({"model": "m", "messages": messages}).encode()
    with start_proxy(write_config(tmp_path, url)) as proxy:
        r = post(proxy, raw)
    assert r.status_code == 200
    assert fake.received[-1].body == raw
    assert r.headers["x-ctxcompact"].split(";")[0] in ("action=unchanged", "action=failed")


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (
            json.dumps({"messages": [{"role": "user", "content": "x", "e": nested(500)}]}),
            "nested deeper than 256 levels",
        ),
        ("[" * 1000 + "]" * 1000, "nested deeper than 256 levels"),
        ('{"messages": ' + "[" * 50_000 + "]" * 50_000 + "}", "nested deeper than 256 levels"),
        ('{"messages": [], "n": ' + "9" * 4301 + "}", "more than 4300 digits"),
        ('{"messages": [], "n": -' + "9" * 4301 + "}", "more than 4300 digits"),
        ('{"messages": [], "t": NaN}', "NaN and Infinity are not JSON"),
        ('{"messages": [], "t": Infinity}', "NaN and Infinity are not JSON"),
        ('{"messages": [], "t": -Infinity}', "NaN and Infinity are not JSON"),
        ('{"messages": [], "t": 1e400}', "outside the range of a 64-bit float"),
        ('{"messages": [], "t": "\xff"}', "not valid UTF-8"),
        ('{"messages": [}', "not valid JSON (Expecting value at line 1 column 15)"),
    ],
    ids=[
        "500-deep",
        "1000-deep",
        "50000-deep",
        "4301-digits",
        "negative",
        "NaN",
        "Inf",
        "-Inf",
        "1e400",
        "not-utf8",
        "syntax",
    ],
)
def test_over_a_limit_or_not_json_is_a_400_and_nothing_is_sent(
    upstream: tuple[FakeUpstream, str], tmp_path: Path, raw: str, reason: str
) -> None:
    fake, url = upstream
    body = raw.encode("latin-1" if "\xff" in raw else "utf-8")  # a lone 0xff byte: not UTF-8
    with start_proxy(write_config(tmp_path, url)) as proxy:
        r = post(proxy, body)
        r2 = post(proxy, body, "/v1/messages")
    assert (r.status_code, r2.status_code) == (400, 400)
    assert reason in r.json()["error"]["message"]
    assert reason in r2.json()["error"]["message"]
    assert fake.received == []


CESU8_EMOJI = "\ud83d\ude00".encode("utf-8", "surrogatepass")  # 😀 as two encoded surrogates
TEXT_BODY = json.dumps(
    {"model": "m", "messages": [{"role": "user", "content": "héllo 😀"}]}, ensure_ascii=False
)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (TEXT_BODY.encode("utf-16"), "UTF-16 or UTF-32"),  # with a byte-order mark
        (TEXT_BODY.encode("utf-16-le"), "UTF-16 or UTF-32"),
        (TEXT_BODY.encode("utf-16-be"), "UTF-16 or UTF-32"),
        (TEXT_BODY.encode("utf-32"), "UTF-16 or UTF-32"),
        (TEXT_BODY.encode("utf-32-le"), "UTF-16 or UTF-32"),
        (TEXT_BODY.encode("utf-8-sig"), "byte-order mark"),
        (TEXT_BODY.encode("utf-8"), ""),  # the control: the same body in UTF-8
        # CESU-8: the emoji as two UTF-8-encoded surrogates, and one alone.
        (TEXT_BODY.encode().replace("😀".encode(), CESU8_EMOJI), "not valid UTF-8"),
        (TEXT_BODY.encode().replace("😀".encode(), CESU8_EMOJI[:3]), "not valid UTF-8"),
    ],
    ids=[
        "utf16-bom",
        "utf16le",
        "utf16be",
        "utf32-bom",
        "utf32le",
        "utf8-bom",
        "utf8",
        "cesu8-pair",
        "cesu8-lone",
    ],
)
def test_a_body_that_is_not_utf8_is_a_400_that_says_so(
    upstream: tuple[FakeUpstream, str], tmp_path: Path, raw: bytes, reason: str
) -> None:
    fake, url = upstream
    with start_proxy(write_config(tmp_path, url, extra=SCHEMA1)) as proxy:
        r = post(proxy, raw)
    if not reason:  # the control: the same body in UTF-8 goes through
        assert r.status_code == 200
        return
    assert r.status_code == 400
    message = r.json()["error"]["message"]
    assert message.startswith("request body is not UTF-8")
    assert reason in message
    assert fake.received == []


@pytest.mark.parametrize("charset", ["utf-16", "iso-8859-1", "UTF-32LE"])
def test_a_declared_charset_other_than_utf8_is_a_400(
    upstream: tuple[FakeUpstream, str], tmp_path: Path, charset: str
) -> None:
    fake, url = upstream
    raw = json.dumps({"model": "m", "messages": openai_history(turns=3, output_chars=30)}).encode()
    with start_proxy(write_config(tmp_path, url, extra=SCHEMA1)) as proxy:
        r = httpx.post(
            f"{proxy}{CHAT}",
            content=raw,
            headers={"content-type": f"application/json; charset={charset}"},
        )
        ok = httpx.post(
            f"{proxy}{CHAT}",
            content=raw,
            headers={"content-type": "application/json; charset=UTF-8"},
        )
    assert r.status_code == 400
    assert r.json()["error"]["message"] == (
        f"request body is declared as {charset.lower()}; only UTF-8 is accepted"
    )
    assert ok.status_code == 200
    assert len(fake.received) == 1


def test_integer_of_4300_digits_survives_a_rewrite(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    big = int("7" * 4300)
    body = {"model": "m", "messages": openai_history(turns=3, output_chars=30), "seed": -big}
    with start_proxy(write_config(tmp_path, url, extra=SCHEMA1)) as proxy:
        r = post(proxy, json.dumps(body).encode())
    assert r.headers["x-ctxcompact"].startswith("action=transformed")
    assert json.loads(fake.received[-1].body)["seed"] == -big


# -- whatever the rewriter does -----------------------------------------------------------------


# -- no content in headers or logs ------------------------------------------------------------

CONTENT = "the launch code is 0000"


def leaky_strategy(ctx: Any) -> None:  # a third-party strategy quoting the conversation
    raise RuntimeError(f"cannot summarize {ctx.history[1].text!r}; ValueError: junk")


def leaky_transform(ctx: Any) -> None:
    raise KeyError(ctx.history[1].text)


def run_leaky(tmp_path: Path, url: str, where: str) -> httpx.Response:
    """One request whose strategy (or a transform) raises an error quoting message 1."""
    if where == "strategy":
        messages = openai_history(turns=4, output_chars=300)  # over the trigger
        app = create_app(
            load_config(write_config(tmp_path, url)), strategy=FunctionStrategy(leaky_strategy)
        )
    else:
        messages = openai_history(turns=3, output_chars=30)
        app = create_app(load_config(write_config(tmp_path, url, extra=SCHEMA1)))
        # The config's Schema 1 plus a broken transform of the user's own in front of it (set
        # where the rewriter keeps them: on itself or on its controller).
        holder = getattr(app.state.rewriter, "controller", app.state.rewriter)
        leaky = FunctionStrategy(leaky_transform, name="leaky")
        holder.transforms = (leaky, *holder.transforms)
    messages[1]["content"] = CONTENT
    with serve_in_thread(app) as proxy:
        return post(proxy, json.dumps({"model": "m", "messages": messages}).encode())


@pytest.mark.parametrize(
    ("where", "header_end"),
    [
        ("strategy", "error=strategy raised RuntimeError"),
        ("transform", "error=transform leaky raised KeyError"),
    ],
)
def test_exception_text_reaches_neither_the_header_nor_the_proxy_log_above_debug(
    upstream: tuple[FakeUpstream, str],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    where: str,
    header_end: str,
) -> None:
    fake, url = upstream
    caplog.set_level(logging.DEBUG)
    r = run_leaky(tmp_path, url, where)
    assert r.status_code == 200
    header = r.headers["x-ctxcompact"]
    # The strategy's failure forwards the request as received; the transform is skipped and
    # Schema 1 still applies. The fake "; ValueError: " in the text shows at most as a name.
    assert header.startswith("action=failed" if where == "strategy" else "action=transformed")
    assert f"{header_end};" in f"{header};"
    assert "launch code" not in header
    assert fake.received[-1].json()["messages"][1]["content"] == CONTENT
    proxy_records = [rec for rec in caplog.records if rec.name == "ctxcompact.proxy"]
    loud = [rec.getMessage() for rec in proxy_records if rec.levelno > logging.DEBUG]
    assert any(header_end in line for line in loud)
    assert not [line for line in loud if "launch code" in line]
    # The detail is there for whoever turns DEBUG on (a message or a logged exception).
    assert "launch code" in caplog.text


@pytest.mark.parametrize("where", ["strategy", "transform"])
def test_exception_text_reaches_no_log_record_above_debug(
    upstream: tuple[FakeUpstream, str], tmp_path: Path, caplog: pytest.LogCaptureFixture, where: str
) -> None:
    _, url = upstream
    caplog.set_level(logging.DEBUG)
    assert run_leaky(tmp_path, url, where).status_code == 200
    loud = [rec.getMessage() for rec in caplog.records if rec.levelno > logging.DEBUG]
    assert loud
    assert not [line for line in loud if "launch code" in line]


# -- paths, upstream failures, startup --------------------------------------------------------


@pytest.mark.parametrize(
    "target",
    [
        "/v1/../../admin/keys",
        "/v1/%2e%2e/%2e%2e/admin/keys",
        "/v1/%2E%2E/%2e%2E/admin/keys",
        "/v1/%252e%252e/%252e%252e/admin/keys",
        "/v1/models/..%2f..%2f..%2fadmin",
        "/v1\\..\\..\\admin\\keys",
        "/v1/%5c..%5c..%5cadmin",
        "/..",
    ],
)
def test_passthrough_path_leaving_the_base_is_a_400(
    upstream: tuple[FakeUpstream, str], tmp_path: Path, target: str
) -> None:
    fake, url = upstream
    with start_proxy(write_config(tmp_path, url)) as proxy:
        status, body = raw_get(proxy, target)
    assert status == 400
    assert b"leaves the proxy's base path" in body
    assert fake.received == []


def test_passthrough_path_with_dot_segments_is_normalised_inside_the_base(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    with start_proxy(write_config(tmp_path, url)) as proxy:
        status, body = raw_get(proxy, "/v1/./x/../models?limit=2")
    assert status == 200
    assert json.loads(body)["data"] == [{"id": "fake-model"}]
    assert fake.received[-1].path == "/v1/models"


def test_upstream_dying_mid_stream_logs_one_line_and_cuts_the_client_off(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.INFO)
    body = {"model": "m", "messages": openai_history(1, 1), "stream": True}
    with (
        serve_broken_stream(chunks=2) as (url, requests),
        start_proxy(write_config(tmp_path, url)) as proxy,
        httpx.stream("POST", f"{proxy}{CHAT}", json=body) as r,
    ):
        pieces: list[bytes] = []
        with pytest.raises(httpx.RemoteProtocolError):
            pieces.extend(r.iter_raw())  # keeps what arrived before the cut
    assert r.status_code == 200
    received = b"".join(pieces)
    assert received == b'data: {"i": 0}\n\ndata: {"i": 1}\n\n'
    assert len(requests) == 1
    broke = [rec for rec in caplog.records if "broke off" in rec.getMessage()]
    assert len(broke) == 1
    assert broke[0].levelno == logging.WARNING
    assert broke[0].exc_info is None
    assert "RemoteProtocolError" in broke[0].getMessage()
    assert f"{url}/v1/chat/completions" in broke[0].getMessage()
    assert "Traceback" not in caplog.text
    assert "Traceback" not in capfd.readouterr().err


def test_502_names_the_upstream_url_without_credentials_or_query(tmp_path: Path) -> None:
    port = free_port()
    dead = f"http://user:pa55word@127.0.0.1:{port}"
    with start_proxy(write_config(tmp_path, dead)) as proxy:
        r = httpx.post(
            f"{proxy}{CHAT}?api-key=QUERYSECRET", json={"model": "m", "messages": []}, timeout=30
        )
    assert r.status_code == 502
    message = r.json()["error"]["message"]
    assert f"http://127.0.0.1:{port}/v1/chat/completions" in message
    assert "pa55word" not in message
    assert "QUERYSECRET" not in message


def test_startup_logs_upstreams_and_strategy_once_without_credentials(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ctxcompact.proxy")
    path = write_config(tmp_path, "https://user:pa55word@llm.example", extra=SCHEMA1)
    with start_proxy(path):
        pass
    lines = [r.getMessage() for r in caplog.records if "upstream" in r.getMessage()]
    assert len(lines) == 1
    assert "OpenAI upstream https://llm.example/v1," in lines[0]
    assert "Anthropic upstream https://llm.example," in lines[0]
    assert "strategy ToolResultHiding" in lines[0]
    assert "Schema1Masking" in lines[0]
    assert "pa55word" not in caplog.text


def test_client_leaving_mid_upload_is_no_traceback_and_reaches_nobody(
    upstream: tuple[FakeUpstream, str], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    fake, url = upstream
    with start_proxy(write_config(tmp_path, url)) as proxy:
        parts = urlsplit(proxy)
        with socket.create_connection((parts.hostname or "", parts.port or 0), timeout=10) as s:
            s.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n"
                b'content-type: application/json\r\n\r\n{"model":'
            )
            time.sleep(0.2)
        time.sleep(0.3)
        after = post(proxy, json.dumps({"model": "m", "messages": openai_history(1, 1)}).encode())
    assert after.status_code == 200
    assert len(fake.received) == 1
    assert "Traceback" not in capfd.readouterr().err


def test_a_cookie_one_callers_upstream_sets_never_goes_out_with_another_callers_request(
    tmp_path: Path,
) -> None:
    """The proxy's one HTTP client serves every caller: it keeps no cookie jar of its own
    (an upstream's ``Set-Cookie``, say a CDN's, reaches only the client it answered)."""
    seen: list[str | None] = []

    async def chat(request: Request) -> JSONResponse:
        seen.append(request.headers.get("cookie"))
        answer = JSONResponse({"id": "c", "object": "chat.completion", "choices": []})
        answer.set_cookie("__cf_bm", "alice-session", path="/")
        return answer

    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
    with serve_in_thread(app) as url, start_proxy(write_config(tmp_path, url)) as proxy:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        first = httpx.post(f"{proxy}{CHAT}", json=body, headers={"authorization": "Bearer a"})
        httpx.post(f"{proxy}{CHAT}", json=body, headers={"authorization": "Bearer b"})
    assert "alice-session" in first.headers["set-cookie"]  # relayed to its own client
    assert seen == [None, None]
