"""Two `ctxcompact proxy` processes on one real Redis: any replica serves any request.

A load balancer sends a conversation's requests to whichever replica it likes. Here two real
proxy subprocesses share a redis-server (``[store] url``) and the same fake upstreams (the
model and the summarizer, in this process): a summary one replica computed is reused by the
other, which never calls the summarizer; an original one replica removed is recalled by the
other, which never wrote it; and a replica killed with SIGKILL in the middle of a request
loses nothing: the client's retry on the other replica finds the summary the dead one kept
before forwarding, and recalls what it stored.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from ctxcompact.strategies import SUMMARY_PREFIX
from tests.helpers.proxy_servers import FakeUpstream, free_port, serve_in_thread
from tests.helpers.redis_server import RedisServer
from tests.test_proxy import openai_history

pytest.importorskip("redis", reason="needs the redis extra: pip install 'ctxcompact[redis]'")

KEY = "sk-replica-caller"


def config(tmp_path: Path, upstream: str, summarizer: str, redis_url: str, prefix: str) -> Path:
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
        "[compaction.llm]\n"
        'provider = "openai"\n'
        'model = "summarizer"\n'
        f'base_url = "{summarizer}/v1"\n'
        "max_retries = 0\n"
        "[proxy]\n"
        f'openai_base_url = "{upstream}/v1"\n'
        f'anthropic_base_url = "{upstream}"\n'
        "[store]\n"
        f'url = "{redis_url}"\n'
        f'prefix = "{prefix}"\n'
        "recall = true\n",
        encoding="utf-8",
    )
    return path


class Replica:
    """One `ctxcompact proxy` subprocess."""

    def __init__(self, config_path: Path, log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        env = {**os.environ, "OPENAI_API_KEY": "sk-summarizer-key"}
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "ctxcompact", "proxy", "--config", str(config_path),
                 "--port", str(self.port)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
            )  # fmt: skip

    def wait_until_up(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"replica exited early:\n{self.log.read_text()}")
            try:
                httpx.get(f"{self.url}/v1/models", timeout=1)
                return
            except httpx.TransportError:
                time.sleep(0.1)
        raise AssertionError(f"replica did not come up:\n{self.log.read_text()}")

    def kill(self) -> None:
        """SIGKILL: no shutdown, no flush, nothing the process could still do."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


@contextmanager
def two_replicas(
    tmp_path: Path, redis_server: RedisServer
) -> Iterator[tuple[FakeUpstream, FakeUpstream, Replica, Replica, str]]:
    model, summarizer = FakeUpstream(), FakeUpstream()
    prefix = redis_server.prefix()
    with serve_in_thread(model.app()) as upstream, serve_in_thread(summarizer.app()) as summ:
        path = config(tmp_path, upstream, summ, redis_server.url, prefix)
        replicas = [Replica(path, tmp_path / f"replica-{n}.log") for n in "ab"]
        try:
            for replica in replicas:
                replica.wait_until_up()
            yield model, summarizer, replicas[0], replicas[1], prefix
        finally:
            for replica in replicas:
                replica.stop()


def ask(replica: Replica, messages: list[dict[str, Any]], **extra: Any) -> httpx.Response:
    r = httpx.post(
        f"{replica.url}/v1/chat/completions",
        json={"model": "m", "messages": messages, "max_tokens": 100, **extra},
        headers={"authorization": f"Bearer {KEY}"},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    return r


def turns(messages: list[dict[str, Any]], start: int, n: int, lines: int) -> list[dict[str, Any]]:
    """The conversation ``n`` tool turns later, as the client resends it."""
    out = list(messages)
    for i in range(start, start + n):
        arguments = json.dumps({"cmd": f"cat g{i}"})
        call = {"id": f"call_{i}", "type": "function",
                "function": {"name": "bash", "arguments": arguments}}  # fmt: skip
        out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        out.append({"role": "tool", "tool_call_id": f"call_{i}", "content": f"row {i}\n" * lines})
    return out


def store_writes(redis_server: RedisServer, prefix: str) -> list[tuple[bytes, float]]:
    """Every entry of the store with its stamp (``{prefix}:lru``, the documented layout):
    any write, even of a record already kept, changes it."""
    import redis

    client = redis.Redis.from_url(redis_server.url)
    try:
        entries: list[tuple[bytes, float]] = client.zrange(
            "{" + prefix + "}:lru", 0, -1, withscores=True
        )
        return entries
    finally:
        client.close()


def chats(fake: FakeUpstream) -> list[dict[str, Any]]:
    """The chat request bodies the fake received (not the start-up probes' GETs)."""
    return [item.json() for item in fake.received if item.path.endswith("/chat/completions")]


def summary_text(body: dict[str, Any]) -> str:
    summaries = [
        m["content"]
        for m in body["messages"]
        if isinstance(m.get("content"), str) and m["content"].startswith(SUMMARY_PREFIX)
    ]
    assert len(summaries) == 1, body["messages"]
    return summaries[0]


def test_a_summary_and_an_original_kept_by_one_replica_are_served_by_the_other(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    with two_replicas(tmp_path, redis_server) as (model, summarizer, a, b, prefix):
        first = openai_history(turns=6, output_chars=300)
        assert "action=compacted" in ask(a, first).headers["x-ctxcompact"]
        assert len(chats(summarizer)) == 1  # replica A summarised...
        kept = store_writes(redis_server, prefix)
        assert kept  # ...and kept the summary and the originals in Redis

        # The next turn goes to replica B, which has never seen the conversation.
        second = turns(first, 6, 1, 3)
        model.recall_ids = ["call_0"]  # the model wants back a result A summarised away
        r = ask(b, second)
        assert "action=compacted" in r.headers["x-ctxcompact"]
        assert r.json()["choices"][0]["message"]["content"].startswith("saw ")
    assert len(chats(summarizer)) == 1  # B reused A's summary: no summarizer call
    sent_a, sent_b, follow_up = chats(model)
    assert summary_text(sent_b) == summary_text(sent_a)
    assert sent_b["messages"][: len(sent_a["messages"])] == sent_a["messages"]
    # B answered the recall from Redis, with the original A stored...
    recalled = follow_up["messages"][-1]
    assert recalled["role"] == "tool"
    # 300 lines each ending with a newline: a last, empty line 301 (recall is byte-exact)
    assert recalled["content"].startswith("Tool result call_0 (301 lines")
    assert "\n1: line 0\n" in recalled["content"]
    # ...and B wrote nothing: every entry and its stamp are as A left them.
    assert store_writes(redis_server, prefix) == kept


def test_a_replica_killed_mid_request_loses_nothing_the_other_cannot_serve(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    with two_replicas(tmp_path, redis_server) as (model, summarizer, a, b, _):
        first = openai_history(turns=6, output_chars=300)
        ask(a, first)
        second = turns(first, 6, 1, 3)
        ask(b, second)
        assert len(chats(summarizer)) == 1
        # A third turn long enough to be summarised again, sent to A as a stream the
        # upstream holds open: A summarises, keeps the new summary, forwards, and dies.
        third = turns(second, 7, 4, 300)
        held = model.release_last_chunk = threading.Event()
        with (
            httpx.Client(timeout=60) as client,
            client.stream(
                "POST",
                f"{a.url}/v1/chat/completions",
                json={"model": "m", "messages": third, "max_tokens": 100, "stream": True},
                headers={"authorization": f"Bearer {KEY}"},
            ) as stream,
        ):
            chunks = stream.iter_bytes()
            assert b"one" in next(chunks)  # the answer has started: A is mid-request
            a.kill()
            with pytest.raises(httpx.HTTPError):
                for _ in chunks:
                    pass
        held.set()
        model.release_last_chunk = None
        assert a.process.returncode == -signal.SIGKILL
        assert len(chats(summarizer)) == 2  # A's second summary, paid before it died

        # The client retries on B: the summary A kept is reused, and the recall of an
        # original A stored before it died is answered.
        model.recall_ids = ["call_8"]
        r = ask(b, third)
        assert "action=compacted" in r.headers["x-ctxcompact"]
    assert len(chats(summarizer)) == 2  # nothing computed twice
    died, retried, follow_up = chats(model)[-3:]
    assert summary_text(retried) == summary_text(died)
    assert retried["messages"] == died["messages"]  # the same prompt: the cache holds
    recalled = follow_up["messages"][-1]["content"]
    assert recalled.startswith("Tool result call_8 (301 lines")  # the newline ends it
    assert "\n1: row 8\n" in recalled


def test_a_proxy_whose_redis_goes_away_still_forwards_every_request(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from ctxcompact import load_config
    from ctxcompact.proxy import create_app
    from tests.helpers.redis_server import start_redis
    from tests.test_proxy import write_config

    model = FakeUpstream()
    try:
        with start_redis() as server, serve_in_thread(model.app()) as upstream:
            extra = f'[store]\nurl = "{server.url}"\nrecall = true\n'
            app = create_app(load_config(write_config(tmp_path, upstream, extra=extra)))
            server.stop()  # Redis is gone before the first request
            with serve_in_thread(app) as proxy:
                messages = openai_history(turns=4, output_chars=300)
                with caplog.at_level("WARNING", logger="ctxcompact"):
                    r = httpx.post(
                        f"{proxy}/v1/chat/completions",
                        json={"model": "m", "messages": messages},
                        headers={"authorization": f"Bearer {KEY}"},
                        timeout=60,
                    )
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    assert r.status_code == 200
    assert "action=compacted" in r.headers["x-ctxcompact"]
    (sent,) = chats(model)
    assert len(json.dumps(sent)) < len(json.dumps(messages)) / 2  # compacted all the same
    assert "tools" not in sent  # nothing could be stored: recall is not offered
    assert sent["messages"][3]["content"] == "[old tool result hidden]"  # the strategy's text
    assert "RedisStore" in caplog.text
    assert "line 0" not in caplog.text
