"""Windows from the model's name: ``[models]``, ``[compaction] model``, and the proxy without
``max_context_size`` (each request's window from the model it names), over loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ctxcompact import Config, check_history, from_openai, load_config, wire
from ctxcompact.cli import build_parser
from ctxcompact.exceptions import ConfigError
from ctxcompact.proxy import create_app
from tests.helpers.proxy_servers import FakeUpstream, free_port, serve_in_thread
from tests.test_proxy import HIDDEN, SECRET, openai_history


@pytest.fixture
def upstream() -> Iterator[tuple[FakeUpstream, str]]:
    fake = FakeUpstream()
    with serve_in_thread(fake.app()) as url:
        yield fake, url


def config_without_window(url: str, models: dict[str, int] | None = None) -> Config:
    return Config.from_dict(
        {
            "compaction": {
                "strategy": "tool-result-hiding",
                "reserved_context_size": 500,
                "params": {"preserve_recent_n": 1},
            },
            "proxy": {"openai_base_url": f"{url}/v1", "anthropic_base_url": url},
            "models": models or {},
            # The strategy's own placeholder (HIDDEN) is counted: recall's is tested elsewhere.
            "store": {"recall": False},
        }
    )


def post(proxy: str, model: str, messages: list[dict[str, Any]]) -> httpx.Response:
    return httpx.post(
        f"{proxy}/v1/chat/completions",
        content=json.dumps({"model": model, "messages": messages}).encode(),
        headers={"authorization": f"Bearer {SECRET}", "content-type": "application/json"},
    )


def fields(response: httpx.Response) -> dict[str, str]:
    return dict(p.split("=", 1) for p in response.headers["x-ctxcompact"].split("; "))


# 60 turns, ~15,000 estimated tokens: over gpt-4's 8,192-token window, far under gpt-4o's.
MESSAGES = openai_history(turns=60, output_chars=100)


def test_each_request_is_compacted_against_its_models_window(
    upstream: tuple[FakeUpstream, str],
) -> None:
    fake, url = upstream
    with serve_in_thread(create_app(config_without_window(url))) as proxy:
        small = post(proxy, "gpt-4", MESSAGES)
        large = post(proxy, "gpt-4o", MESSAGES)
    assert small.status_code == large.status_code == 200
    assert fields(small)["action"] == "compacted"
    sent = fake.received[0].json()["messages"]
    assert check_history(from_openai(sent)) == []
    assert sum(m["content"] == HIDDEN for m in sent if m["role"] == "tool") == 59
    assert [m.get("tool_call_id") for m in sent] == [m.get("tool_call_id") for m in MESSAGES]
    assert fields(large)["action"] == "unchanged"
    assert fake.received[1].json()["messages"] == MESSAGES


def test_models_table_override_gives_an_unknown_model_its_window(
    upstream: tuple[FakeUpstream, str],
) -> None:
    fake, url = upstream
    config = config_without_window(url, models={"my-finetune": 3000})
    with serve_in_thread(create_app(config)) as proxy:
        response = post(proxy, "my-finetune", openai_history(turns=12, output_chars=100))
    assert fields(response)["action"] == "compacted"
    assert any(m["content"] == HIDDEN for m in fake.received[0].json()["messages"])


def test_models_override_wins_over_the_built_in_table(upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    # gpt-4o is 128,000 in the table; this deployment serves it with 3,000.
    config = config_without_window(url, models={"gpt-4o": 3000})
    with serve_in_thread(create_app(config)) as proxy:
        response = post(proxy, "gpt-4o", openai_history(turns=12, output_chars=100))
    assert fields(response)["action"] == "compacted"
    assert any(m["content"] == HIDDEN for m in fake.received[0].json()["messages"])


def test_small_model_window_below_the_reserve_still_gets_a_trigger(
    upstream: tuple[FakeUpstream, str],
) -> None:
    _fake, url = upstream
    # The reserve (500) is not below this window (400): a quarter of the window is kept.
    config = config_without_window(url, models={"tiny": 400})
    with serve_in_thread(create_app(config)) as proxy:
        response = post(proxy, "tiny", openai_history(turns=4, output_chars=50))
    assert fields(response)["action"] == "compacted"


def test_compaction_model_gives_wire_its_window() -> None:
    config = Config.from_dict(
        {
            "compaction": {
                "strategy": "tool-result-hiding",
                "model": "gpt-4",
                "reserved_context_size": 1000,
            }
        }
    )
    assert wire(config).max_context_size == 8192
    config = Config.from_dict(
        {
            "compaction": {
                "strategy": "tool-result-hiding",
                "model": "my-finetune",
                "reserved_context_size": 1000,
            },
            "models": {"my-finetune": 32_768},
        }
    )
    assert wire(config).max_context_size == 32_768


def test_configured_window_wins_over_the_compaction_model() -> None:
    config = Config.from_dict(
        {
            "compaction": {
                "strategy": "tool-result-hiding",
                "model": "gpt-4o",
                "max_context_size": 5000,
                "reserved_context_size": 10,
            }
        }
    )
    assert wire(config).max_context_size == 5000


def test_unknown_compaction_model_without_window_is_a_config_error() -> None:
    config = Config.from_dict({"compaction": {"model": "no-such-model-xyz"}})
    with pytest.raises(ConfigError) as info:
        wire(config)
    assert info.value.key == "compaction.max_context_size"
    assert "[models]" in str(info.value)


def test_compaction_model_window_not_above_the_reserve_names_the_reserve() -> None:
    config = Config.from_dict({"compaction": {"model": "gpt-4"}})  # default reserve 50,000
    with pytest.raises(ConfigError) as info:
        wire(config)
    assert info.value.key == "compaction.reserved_context_size"


@pytest.mark.parametrize("bad", [0, -5, "32k", 1.5, True])
def test_models_window_must_be_a_positive_integer(tmp_path: Path, bad: object) -> None:
    path = tmp_path / "c.toml"
    path.write_text(f'[models]\n"my-model" = {json.dumps(bad)}\n', encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.key is not None
    assert info.value.key.startswith("models")


def test_models_table_loads_from_toml(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[models]\n"org/my-model" = 16384\n', encoding="utf-8")
    config = load_config(path)
    assert config.model_window("org/my-model") == 16384
    assert config.model_window("gpt-4") == 8192
    assert config.model_window(None) is None


def test_proxy_command_needs_no_config() -> None:
    args = build_parser().parse_args(["proxy", "--port", "0"])
    assert args.config is None


def test_proxy_with_every_default_serves_requests(upstream: tuple[FakeUpstream, str]) -> None:
    # What `ctxcompact proxy` without --config builds, pointed at the fake upstream.
    fake, url = upstream
    config = Config.from_dict(
        {
            "compaction": {"strategy": "tool-result-hiding"},
            "proxy": {"openai_base_url": f"{url}/v1"},
        }
    )
    with serve_in_thread(create_app(config)) as proxy:
        response = post(proxy, "gpt-4o", openai_history(turns=2, output_chars=3))
    assert response.status_code == 200
    assert fields(response)["action"] == "unchanged"
    assert len(fake.received) == 1


def test_proxy_command_starts_without_a_config(tmp_path: Path) -> None:
    # The real entry point: it starts on every default and says where it forwards. No request
    # is made (the default upstream is the real provider).
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    process = subprocess.Popen(
        [sys.executable, "-m", "ctxcompact", "proxy", "--port", str(port)],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=tmp_path,  # no config file anywhere near
    )
    assert process.stderr is not None
    stderr = process.stderr
    lines: list[str] = []
    # A thread reads the lines: select() on a buffered pipe misses lines already buffered.
    reader = threading.Thread(target=lambda: lines.extend(stderr), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and process.poll() is None:
            if any("ctxcompact proxy:" in line for line in list(lines)):
                break
            time.sleep(0.05)
        assert process.poll() is None, "".join(lines)
    finally:
        process.terminate()
        process.wait(timeout=10)
        reader.join(timeout=10)
        stderr.close()
    started = [line for line in lines if "ctxcompact proxy:" in line]
    assert len(started) == 1
    assert "OpenAI upstream https://api.openai.com/v1" in started[0]
