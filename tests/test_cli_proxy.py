"""`ctxcompact proxy` through its real entry point: a subprocess on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from ctxcompact.store import default_store_path
from tests.helpers.proxy_servers import FakeUpstream, free_port, serve_in_thread
from tests.test_proxy import openai_history, write_config


def wait_for(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            _, err = proc.communicate()
            raise AssertionError(f"proxy exited early: {err.decode()}")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError("proxy did not come up within 30 s")


def test_proxy_command_serves_and_compacts(tmp_path: Path) -> None:
    fake = FakeUpstream()
    port = free_port()
    with serve_in_thread(fake.app()) as upstream:
        config = write_config(tmp_path, upstream)
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ctxcompact",
                "proxy",
                "--config",
                str(config),
                "--port",
                str(port),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            wait_for(f"http://127.0.0.1:{port}/v1/models", proc)
            messages = openai_history(turns=4, output_chars=300)
            r = httpx.post(
                f"http://127.0.0.1:{port}/v1/chat/completions",
                json={"model": "m", "messages": messages},
                headers={"authorization": "Bearer sk-cli-secret"},
                timeout=30,
            )
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=30)
    assert r.status_code == 200
    assert "action=compacted" in r.headers["x-ctxcompact"]
    sent = json.loads(fake.received[-1].body)["messages"]
    assert sent[3]["content"] == "[old tool result hidden]"
    log = err.decode()
    assert "POST /v1/chat/completions action=compacted" in log
    assert "sk-cli-secret" not in log


def test_proxy_command_without_a_readable_config_exits_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ctxcompact", "proxy", "--config", str(tmp_path / "nope.toml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "nope.toml" in done.stderr
    assert "Traceback" not in done.stderr


def idle_connection_closed(port: int, wait: float) -> bool:
    """Whether the proxy closes a kept-alive connection within ``wait`` s of its last answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET /v1/models HTTP/1.1\r\nhost: x\r\n\r\n")
        answer = b""
        while b'"fake-model"' not in answer:
            answer += s.recv(65536)
        s.settimeout(wait)
        try:
            while s.recv(65536):  # the rest of the answer (its last chunk), then the close
                pass
        except TimeoutError:
            return False
        return True


@pytest.mark.parametrize(
    ("setting", "wait", "closed"),
    [
        ("keep_alive_timeout = 1\n", 3.0, True),
        # The default outlives httpx's 5 s pool expiry (uvicorn's own default, 5 s, does not).
        ("", 6.0, False),
    ],
)
def test_proxy_command_keeps_idle_connections_as_configured(
    tmp_path: Path, setting: str, wait: float, closed: bool
) -> None:
    fake = FakeUpstream()
    port = free_port()
    with serve_in_thread(fake.app()) as upstream:
        # The line right after write_config's [proxy] table belongs to it.
        config = write_config(tmp_path, upstream, extra=setting)
        command = [sys.executable, "-m", "ctxcompact", "proxy", "--config", str(config)]
        proc = subprocess.Popen(
            [*command, "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for(f"http://127.0.0.1:{port}/v1/models", proc)
            assert idle_connection_closed(port, wait) is closed
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def test_upstreams_and_store_on_the_command_line_need_no_config_file(tmp_path: Path) -> None:
    fake = FakeUpstream()
    port = free_port()
    store = tmp_path / "kept" / "originals.db"
    with serve_in_thread(fake.app()) as upstream:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ctxcompact",
                "proxy",
                "--openai-base-url",
                f"{upstream}/v1",
                "--anthropic-base-url",
                upstream,
                "--store",
                str(store),
                "--port",
                str(port),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            wait_for(f"http://127.0.0.1:{port}/v1/models", proc)
            body = {"model": "gpt-4o", "messages": openai_history(turns=1, output_chars=2)}
            chat = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body)
            claude = httpx.post(
                f"http://127.0.0.1:{port}/v1/messages",
                json={"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": []},
                headers={"anthropic-version": "2023-06-01"},
            )
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=30)
    assert (chat.status_code, claude.status_code) == (200, 200)
    assert [r.path for r in fake.received[-2:]] == ["/v1/chat/completions", "/v1/messages"]
    assert store.exists()  # the store the command line named was opened
    log = err.decode()
    start = next(line for line in log.splitlines() if "ctxcompact proxy: OpenAI upstream" in line)
    assert f"OpenAI upstream {upstream}/v1, Anthropic upstream {upstream}," in start
    assert "strategy ToolResultHiding" in start  # the command line's default strategy
    # Recall is on wherever there is a store (the default since issue 20).
    assert f"store SQLite {store} (at most 256 MiB, file 0600), recall on (at most 8" in start


def test_the_start_up_line_names_the_default_store_and_recall(tmp_path: Path) -> None:
    # recall = true without a path: the proxy keeps the originals in its default file.
    port = free_port()
    config = tmp_path / "recall.toml"
    config.write_text(
        '[compaction]\nstrategy = "tool-result-hiding"\n[store]\nrecall = true\n'
        '[proxy]\nopenai_base_url = "https://user:secret@llm.example/v1"\n',
        encoding="utf-8",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "ctxcompact", "proxy", "--config", str(config), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(f"http://127.0.0.1:{port}/metrics", proc)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    log = err.decode()
    assert "OpenAI upstream https://llm.example/v1," in log
    assert "secret" not in log
    store = default_store_path()
    assert f"store SQLite {store} (at most 256 MiB, file 0600), recall on (at most 8 rounds)" in log


def test_a_base_url_that_is_not_http_is_a_usage_error() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ctxcompact", "proxy", "--openai-base-url", "ftp://x/v1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--openai-base-url must start with http:// or https://" in done.stderr
