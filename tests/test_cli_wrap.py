"""``ctxcompact wrap -- COMMAND``: the real command line in a subprocess, running agent
scripts that use the official ``openai`` SDK unmodified, through the proxy to a fake upstream
on 127.0.0.1; exit codes and signals passed through."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.proxy_servers import FakeUpstream, serve_in_thread
from tests.test_proxy import openai_history, write_config

KEY = "sk-wrap-test-3d9a"

AGENT = """
import json, os, sys
from openai import OpenAI

messages = json.load(open(sys.argv[1]))
client = OpenAI(max_retries=0)  # base URL and key from the environment, as any agent does
completion = client.chat.completions.create(model="gpt-4o", messages=messages)
print(completion.choices[0].message.content)
print(os.environ["OPENAI_BASE_URL"])
sys.exit(3)
"""

SUMMARY = re.compile(r"ctxcompact wrap: (\d+) requests?, (\d+) compactions?, ([\d,]+) tokens saved")


@pytest.fixture
def upstream() -> Iterator[tuple[FakeUpstream, str]]:
    fake = FakeUpstream()
    with serve_in_thread(fake.app()) as url:
        yield fake, url


def wrap(*args: str) -> list[str]:
    return [sys.executable, "-m", "ctxcompact", "wrap", *args]


def environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    return {**env, "OPENAI_API_KEY": KEY, **extra}


def summary(stderr: str) -> tuple[int, int, int]:
    found = SUMMARY.search(stderr)
    assert found is not None, stderr
    requests, compactions, saved = found.groups()
    return int(requests), int(compactions), int(saved.replace(",", ""))


def test_an_openai_sdk_agent_runs_through_the_proxy_and_its_exit_code_comes_through(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    agent = tmp_path / "some_agent.py"
    agent.write_text(AGENT, encoding="utf-8")
    history = tmp_path / "history.json"
    history.write_text(json.dumps(openai_history(turns=4, output_chars=300)), encoding="utf-8")
    config = write_config(tmp_path, url)
    done = subprocess.run(
        wrap("--config", str(config), "--", sys.executable, str(agent), str(history)),
        env=environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 3, done.stderr
    answer, base_url = done.stdout.splitlines()
    assert answer == "saw 10 messages"
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/v1", base_url)  # the proxy, not the upstream
    assert len(fake.received) == 1
    sent = fake.received[0].json()["messages"]
    assert sent[3]["content"] == "[old tool result hidden]"  # compacted on the way
    assert fake.received[0].headers["authorization"] == f"Bearer {KEY}"
    requests, compactions, saved = summary(done.stderr)
    assert (requests, compactions) == (1, 1)
    assert saved > 1000
    assert KEY not in done.stderr


def test_without_a_config_the_upstream_is_the_one_the_command_would_have_used(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake, url = upstream
    agent = tmp_path / "some_agent.py"
    agent.write_text(AGENT, encoding="utf-8")
    history = tmp_path / "history.json"
    history.write_text(json.dumps(openai_history(turns=1, output_chars=2)), encoding="utf-8")
    done = subprocess.run(
        wrap("--", sys.executable, str(agent), str(history)),
        env=environment(OPENAI_BASE_URL=f"{url}/v1"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 3, done.stderr
    answer, base_url = done.stdout.splitlines()
    assert answer == "saw 4 messages"
    assert base_url != f"{url}/v1"
    assert [r.path for r in fake.received] == ["/v1/chat/completions"]
    assert summary(done.stderr) == (1, 0, 0)


def test_the_command_sees_every_base_url_variable_pointing_at_the_proxy(tmp_path: Path) -> None:
    script = (
        "import json, os; print(json.dumps({k: os.environ.get(k) for k in "
        "['OPENAI_BASE_URL', 'OPENAI_API_BASE', 'ANTHROPIC_BASE_URL', 'ANTHROPIC_API_BASE', "
        "'CTXCOMPACT_PROXY_URL', 'NO_PROXY']}))"
    )
    done = subprocess.run(
        wrap("--", sys.executable, "-c", script),
        env=environment(ANTHROPIC_API_BASE="https://example.invalid", HTTPS_PROXY="http://p:3"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    proxy = seen["CTXCOMPACT_PROXY_URL"]
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", proxy)
    assert seen["OPENAI_BASE_URL"] == seen["OPENAI_API_BASE"] == f"{proxy}/v1"
    assert seen["ANTHROPIC_BASE_URL"] == seen["ANTHROPIC_API_BASE"] == proxy
    assert seen["NO_PROXY"] == "127.0.0.1,localhost"  # an HTTP proxy must not take them
    assert summary(done.stderr) == (0, 0, 0)


SIGNALLED = """
import signal, sys, time
{handler}
print("ready", flush=True)
time.sleep(60)
sys.exit(0)
"""


@pytest.mark.parametrize(
    ("sent", "handler", "expected"),
    [
        (signal.SIGTERM, "signal.signal(signal.SIGTERM, lambda *a: sys.exit(42))", 42),
        (signal.SIGINT, "signal.signal(signal.SIGINT, lambda *a: sys.exit(7))", 7),
        (signal.SIGHUP, "signal.signal(signal.SIGHUP, lambda *a: sys.exit(9))", 9),
        # No handler: the command dies of the signal; wrap exits 128 + 15, as a shell says it.
        (signal.SIGTERM, "", 128 + signal.SIGTERM),
    ],
    ids=["term-handled", "int-handled", "hup-handled", "term-kills"],
)
def test_a_signal_to_wrap_reaches_the_command_and_its_exit_comes_back(
    tmp_path: Path, sent: signal.Signals, handler: str, expected: int
) -> None:
    script = tmp_path / "waits.py"
    script.write_text(textwrap.dedent(SIGNALLED.format(handler=handler)), encoding="utf-8")
    proc = subprocess.Popen(
        wrap("--", sys.executable, str(script)),
        env=environment(),
        stdin=subprocess.DEVNULL,  # no terminal: a SIGINT to wrap is passed on
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(sent)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == expected, stderr
    assert summary(stderr) == (0, 0, 0)  # the proxy stopped cleanly and summed up


def test_a_command_that_does_not_exist_is_127() -> None:
    done = subprocess.run(
        wrap("--", "no-such-command-ctxcompact-xyz"),
        env=environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 127
    assert "command not found: no-such-command-ctxcompact-xyz" in done.stderr
    assert "Traceback" not in done.stderr


def test_no_command_is_a_usage_error() -> None:
    done = subprocess.run(wrap(), env=environment(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "give the command to run after --" in done.stderr
