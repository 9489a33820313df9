"""The proxy's store is on by default: a private SQLite file in the user's cache folder.

Through ``ctxcompact proxy`` (a subprocess on 127.0.0.1) and ``create_app``; the cache folder
is each test's own (``XDG_CACHE_HOME``, set for every test by ``tests/conftest.py``), which
platformdirs reads on Linux as the real command does.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from ctxcompact import load_config
from ctxcompact.cli import main
from ctxcompact.exceptions import ConfigError
from ctxcompact.store import default_store_path
from tests.helpers.proxy_servers import FakeUpstream, free_port, serve_in_thread
from tests.test_cli_proxy import wait_for
from tests.test_proxy import openai_history, start_proxy, write_config


def cache_file() -> Path:
    return Path(os.environ["XDG_CACHE_HOME"]) / "ctxcompact" / "originals.db"


def stored_rows(path: Path) -> int:
    with sqlite3.connect(path) as db:
        query = "SELECT COUNT(*) FROM entries WHERE entry = 'original'"
        count: int = db.execute(query).fetchone()[0]
    return count


def run_proxy_command(config: Path, *flags: str) -> tuple[httpx.Response, str]:
    port = free_port()
    command = [sys.executable, "-m", "ctxcompact", "proxy", "--config", str(config)]
    proc = subprocess.Popen(
        [*command, "--port", str(port), *flags], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        wait_for(f"http://127.0.0.1:{port}/v1/models", proc)
        r = httpx.post(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            json={"model": "m", "messages": openai_history(turns=4, output_chars=300)},
            headers={"authorization": "Bearer sk-store-test"},
            timeout=30,
        )
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    return r, err.decode()


def test_default_store_path_is_in_the_users_cache_folder() -> None:
    assert default_store_path() == cache_file()


def test_proxy_command_keeps_originals_in_a_private_file_in_the_cache_folder(
    tmp_path: Path,
) -> None:
    fake = FakeUpstream()
    with serve_in_thread(fake.app()) as upstream:
        r, log = run_proxy_command(write_config(tmp_path, upstream, recall=None))
    assert "action=compacted" in r.headers["x-ctxcompact"]
    path = cache_file()
    assert stored_rows(path) == 3  # the three results hiding replaced
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    # The start-up line says where, how big at most, how private, and that recall is on
    # (the default wherever there is a store, since issue 20).
    assert f"store SQLite {path} (at most 256 MiB, file 0600), recall on (at most" in log
    # The placeholder names the handle, and the tool that brings it back is offered.
    sent = json.loads(fake.received[-1].body)
    assert [t["function"]["name"] for t in sent["tools"]] == ["recall_tool_result"]
    assert sent["messages"][3]["content"] == ('[hidden: recall_tool_result("call_0")]')


def test_recall_false_keeps_the_store_and_sends_what_it_sent_without_one(
    tmp_path: Path,
) -> None:
    fake = FakeUpstream()
    with serve_in_thread(fake.app()) as upstream:
        r, log = run_proxy_command(write_config(tmp_path, upstream, recall=False))
    assert "action=compacted" in r.headers["x-ctxcompact"]
    assert stored_rows(cache_file()) == 3
    assert f"store SQLite {cache_file()} (at most 256 MiB, file 0600), recall off" in log
    sent = json.loads(fake.received[-1].body)
    assert "tools" not in sent
    assert sent["messages"][3]["content"] == "[old tool result hidden]"


def test_no_store_flag_keeps_nothing(tmp_path: Path) -> None:
    fake = FakeUpstream()
    with serve_in_thread(fake.app()) as upstream:
        r, log = run_proxy_command(write_config(tmp_path, upstream), "--no-store")
    assert "action=compacted" in r.headers["x-ctxcompact"]
    assert not cache_file().parent.exists()
    assert "store none, recall off" in log


def test_no_store_flag_wins_over_the_configs_store(tmp_path: Path) -> None:
    fake = FakeUpstream()
    named = tmp_path / "named.db"
    with serve_in_thread(fake.app()) as upstream:
        config = write_config(tmp_path, upstream, extra=f'[store]\npath = "{named}"\n')
        r, log = run_proxy_command(config, "--no-store")
    assert "action=compacted" in r.headers["x-ctxcompact"]
    assert not named.exists()
    assert not cache_file().parent.exists()
    assert "store none, recall off" in log


@pytest.mark.parametrize("command", ["proxy", "wrap"])
def test_store_and_no_store_together_are_a_usage_error(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [command, "--store", "o.db", "--no-store"]
    assert main([*args, "--", "true"] if command == "wrap" else args) == 2
    assert "--store and --no-store: give one or the other" in capsys.readouterr().err


def test_store_enabled_false_keeps_nothing(tmp_path: Path) -> None:
    fake = FakeUpstream()
    with serve_in_thread(fake.app()) as upstream:
        config = write_config(tmp_path, upstream, extra="[store]\nenabled = false\n")
        with start_proxy(config) as proxy:
            messages = openai_history(turns=4, output_chars=300)
            r = httpx.post(
                f"{proxy}/v1/chat/completions", json={"model": "m", "messages": messages}
            )
    assert "action=compacted" in r.headers["x-ctxcompact"]
    assert not cache_file().parent.exists()


def test_recall_without_a_path_uses_the_default_file_in_the_proxy(tmp_path: Path) -> None:
    fake = FakeUpstream()
    fake.recall_ids = ["call_0"]
    with serve_in_thread(fake.app()) as upstream:
        config = write_config(tmp_path, upstream, extra="[store]\nrecall = true\n")
        with start_proxy(config) as proxy:
            messages = openai_history(turns=4, output_chars=300)
            body = {"model": "m", "messages": messages, "max_tokens": 100}
            r = httpx.post(f"{proxy}/v1/chat/completions", json=body, headers={"x-api-key": "k"})
    assert r.status_code == 200
    assert "1: line 0" in fake.received[1].json()["messages"][-1]["content"]
    assert stored_rows(cache_file()) == 3


def test_path_memory_keeps_the_originals_in_the_process_and_no_file(tmp_path: Path) -> None:
    fake = FakeUpstream()
    fake.recall_ids = ["call_0"]
    with serve_in_thread(fake.app()) as upstream:
        extra = '[store]\nrecall = true\npath = ":memory:"\n'
        config = write_config(tmp_path, upstream, extra=extra)
        with start_proxy(config) as proxy:
            messages = openai_history(turns=4, output_chars=300)
            body = {"model": "m", "messages": messages, "max_tokens": 100}
            r = httpx.post(f"{proxy}/v1/chat/completions", json=body, headers={"x-api-key": "k"})
    assert r.status_code == 200
    assert "1: line 0" in fake.received[1].json()["messages"][-1]["content"]
    assert not cache_file().parent.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["proxy.toml"]  # no SQLite file beside it


@pytest.mark.parametrize("key", ["recall = true", 'path = "o.db"', 'url = "redis://127.0.0.1:1/0"'])
def test_store_enabled_false_with_a_store_asked_for_is_a_config_error(
    tmp_path: Path, key: str
) -> None:
    path = tmp_path / "c.toml"
    path.write_text(f"[store]\nenabled = false\n{key}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="enabled = false turns the store off") as caught:
        load_config(path)
    assert f"but {key.split()[0]} asks for one" in str(caught.value)
    assert caught.value.key is not None
    assert caught.value.key.startswith("store")


def recallable(report: object) -> int:
    """The sum of every ``recallable_results`` figure in a replay report."""
    if isinstance(report, dict):
        own = report.get("recallable_results")
        return (own if isinstance(own, int) else 0) + sum(recallable(v) for v in report.values())
    if isinstance(report, list):
        return sum(recallable(v) for v in report)
    return 0


def test_replay_no_store_turns_recall_off(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        '[compaction]\nstrategy = "tool-result-hiding"\n[store]\nrecall = true\n', encoding="utf-8"
    )
    assert main(["replay", "--config", str(config), "--json", "--no-progress"]) == 0
    with_store = json.loads(capsys.readouterr().out)
    assert main(["replay", "--config", str(config), "--json", "--no-progress", "--no-store"]) == 0
    without = json.loads(capsys.readouterr().out)
    assert recallable(with_store) > 0
    assert recallable(without) == 0
    assert not cache_file().parent.exists()  # a replay never writes the cache file
