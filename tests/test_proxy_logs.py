"""Nothing a client sends reaches the proxy's default logs: canaries through the real command.

``ctxcompact proxy`` runs as a subprocess on 127.0.0.1 (its own logging set up, uvicorn's
access log on, as an operator runs it) in front of a fake upstream. Requests on every route
carry canaries in query strings, header-borne keys, tool names (one with a newline, to forge a
log line), model names and message text; every line the process writes at INFO must be free
of all of them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.helpers.proxy_servers import FakeUpstream, free_port, serve_in_thread
from tests.test_cli_proxy import wait_for
from tests.test_proxy import write_config

CANARIES = {
    "query": "QCANARY7d1",
    "key": "KCANARY3e9",
    "tool": "TCANARY5b2",
    "model": "MCANARY8c4",
    "text": "XCANARY2f6",
}
FORGED = "FORGED-LINE"


def tool_history(turns: int) -> list[dict[str, Any]]:
    """Chat Completions messages whose tools have canary names and huge results."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": f"system {CANARIES['text']}"},
        {"role": "user", "content": f"task {CANARIES['text']}"},
    ]
    for i in range(turns):
        name = f"{CANARIES['tool']}\nINFO {FORGED} {i}" if i % 2 else f"{CANARIES['tool']}_{i}"
        call = {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": name, "arguments": "{}"},
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        # The newest result alone is over the window: the guard truncates it.
        content = f"{CANARIES['text']} line {i}\n" * (400 if i == turns - 1 else 120)
        messages.append({"role": "tool", "tool_call_id": f"call_{i}", "content": content})
    return messages


def anthropic_tool_history(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"task {CANARIES['text']}"}]
    for i in range(turns):
        name = f"{CANARIES['tool']}_{i}"
        use = {"type": "tool_use", "id": f"toolu_{i}", "name": name, "input": {}}
        messages.append({"role": "assistant", "content": [use]})
        result = {
            "type": "tool_result",
            "tool_use_id": f"toolu_{i}",
            "content": f"{CANARIES['text']} line {i}\n" * (400 if i == turns - 1 else 120),
        }
        messages.append({"role": "user", "content": [result]})
    return messages


@contextmanager
def proxy_command(tmp_path: Path, upstream: str, lines: list[str]) -> Iterator[str]:
    """``ctxcompact proxy`` on a free port, with a context guard that truncates and recall on;
    yields its URL; on exit stops it and puts every line it wrote into ``lines``."""
    port = free_port()
    guard = (
        "[context_guard]\nenabled = true\nreserve_tokens = 100\nmax_tool_result_chars = 600\n"
        "head_chars = 100\ntail_chars = 100\n"
    )
    store = f'[store]\npath = "{tmp_path / "originals.db"}"\nrecall = true\n'
    config = write_config(tmp_path, upstream, extra=guard + store)
    command = [sys.executable, "-m", "ctxcompact", "proxy", "--config", str(config)]
    proc = subprocess.Popen(
        [*command, "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        wait_for(f"http://127.0.0.1:{port}/v1/models", proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
        lines.extend(out.decode("utf-8", "replace").splitlines())


def exercise(proxy: str, fake: FakeUpstream) -> None:
    """Requests on every route, streamed and not, each carrying every canary it can."""
    query = {"api-key": CANARIES["query"], "key": CANARIES["query"]}
    headers = {"authorization": f"Bearer {CANARIES['key']}", "x-goog-api-key": CANARIES["key"]}
    model = f"gpt-{CANARIES['model']}"

    def post(path: str, body: dict[str, Any] | bytes, **extra: Any) -> httpx.Response:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        return httpx.post(
            f"{proxy}{path}",
            content=content,
            params=query,
            headers={**headers, "content-type": "application/json", **extra},
            timeout=30,
        )

    chat = {"model": model, "messages": tool_history(4), "max_tokens": 100}
    answers = [post("/v1/chat/completions", chat), post("/chat/completions", chat)]
    answers.append(post("/v1/chat/completions", {**chat, "stream": True}))
    fake.recall_ids = ["call_0"]
    answers.append(post("/v1/chat/completions", chat))  # a recall round
    messages = {"model": model, "max_tokens": 100, "messages": anthropic_tool_history(4)}
    answers.append(post("/v1/messages", messages, **{"x-api-key": CANARIES["key"]}))
    fake.recall_ids = ["toolu_0"]
    answers.append(post("/v1/messages", {**messages, "stream": True}))
    items = [{"role": "user", "content": f"hi {CANARIES['text']}"}]
    answers.append(post("/v1/responses", {"model": model, "input": items}))
    for response in answers:
        assert response.status_code == 200, response.text
    # Refused and passed-through requests log too.
    assert post("/v1/chat/completions", f'{{"x": "{CANARIES["text"]}"'.encode()).status_code == 400
    models = httpx.get(f"{proxy}/v1/models", params=query, headers=headers, timeout=30)
    assert models.status_code == 200
    long_path = httpx.get(f"{proxy}/v1/" + "p" * 5000, params=query, timeout=30)
    assert long_path.status_code == 404


def test_no_canary_reaches_any_log_line_at_info(tmp_path: Path) -> None:
    fake = FakeUpstream()
    lines: list[str] = []
    with serve_in_thread(fake.app()) as upstream, proxy_command(tmp_path, upstream, lines) as proxy:
        exercise(proxy, fake)
    # The log is the one an operator sees: access lines, the per-request line, the guard's.
    assert any('"POST /v1/chat/completions HTTP/1.1" 200' in line for line in lines)
    assert any("POST /v1/messages action=compacted" in line for line in lines)
    assert any("Context guard: truncated" in line for line in lines)
    assert any("recall round" in line for line in lines)
    for line in lines:
        found = [name for name, canary in CANARIES.items() if canary in line]
        assert not found, f"{found} in log line: {line[:300]}"
        assert FORGED not in line
        assert len(line) < 500, line[:300]
