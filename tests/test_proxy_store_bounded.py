"""The proxy's store keeps one compaction per conversation, not one per compacted request.

The proxy keeps each compaction's rewrite so the conversation's next request reuses it
(``proxy/_reuse.py``); a later compaction of the same conversation is kept under a longer
prefix and supersedes the one it reused, which is then deleted. Driven over real HTTP with a
real trace resent request by request, as a client does, into a real SQLite file.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ctxcompact import Message, load_config
from ctxcompact.proxy import create_app
from ctxcompact.store import MemoryStore, SQLiteStore
from tests.helpers.proxy_servers import FakeUpstream, serve_in_thread
from tests.helpers.traces import load_trace

TRACE = "msa-gemini3pro__django__django-16560"


@pytest.fixture
def upstream() -> Iterator[tuple[FakeUpstream, str]]:
    fake = FakeUpstream()
    with serve_in_thread(fake.app()) as url:
        yield fake, url


def write_config(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "proxy.toml"
    path.write_text(
        "[compaction]\n"
        'strategy = "tool-result-hiding"\n'
        "max_context_size = 16000\n"
        "reserved_context_size = 4000\n"
        "[observation_masking.schema1]\n"
        "enabled = true\n"
        "[proxy]\n"
        f'openai_base_url = "{url}/v1"\n'
        f'anthropic_base_url = "{url}"\n'
        "[store]\n"
        f'path = "{tmp_path / "store.db"}"\n',
        encoding="utf-8",
    )
    return path


def kept_compactions(db: Path) -> tuple[int, int]:
    """How many compactions the store keeps, and their bytes of JSON."""
    with sqlite3.connect(db) as conn:
        row = conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM entries WHERE entry = 'summary'"
        ).fetchone()
    conn.close()
    return int(row[0]), int(row[1])


def test_a_long_conversation_keeps_one_compaction_in_the_store(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    _, url = upstream
    recording = load_trace(TRACE)
    app = create_app(load_config(write_config(tmp_path, url)))
    seen: list[tuple[int, int]] = []
    compacted = 0
    largest = 0
    with serve_in_thread(app) as proxy, httpx.Client(timeout=30) as client:
        for i, message in enumerate(recording):
            if message["role"] != "assistant" or i == 0:
                continue
            body: dict[str, Any] = {"model": "m", "messages": recording[:i]}
            answer = client.post(
                f"{proxy}/v1/chat/completions",
                json=body,
                headers={"authorization": "Bearer sk-test"},
            )
            answer.raise_for_status()
            compacted += "action=compacted" in answer.headers["x-ctxcompact"]
            largest = max(largest, len(answer.request.content))
            seen.append(kept_compactions(tmp_path / "store.db"))
    # The conversation was compacted again and again: without pruning, each compaction that
    # extends the last one would leave one more entry.
    assert compacted >= 10
    assert max(count for count, _ in seen) == 1
    assert seen[-1][0] == 1
    # What is kept is one rewritten prefix: never more than the largest request sent.
    assert max(size for _, size in seen) < largest


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_delete_summary_forgets_one_summary_and_its_bytes(kind: str, tmp_path: Path) -> None:
    store = MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "s.db")
    summary = [Message.user("the task"), Message.assistant("a summary of what happened")]
    store.put_summary("ns", "old", summary)
    store.put_summary("ns", "new", summary[:1])
    before = store.total_bytes
    assert store.delete_summary("ns", "old") is True
    assert store.get_summary("ns", "old") is None
    assert store.get_summary("ns", "new") == tuple(summary[:1])
    assert 0 < store.total_bytes < before
    assert store.delete_summary("ns", "old") is False  # already gone
    assert store.delete_summary("other", "new") is False  # another namespace's is untouched
    assert store.get_summary("ns", "new") is not None
    if isinstance(store, SQLiteStore):
        store.close()
