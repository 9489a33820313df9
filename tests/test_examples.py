"""Every script in examples/ runs offline (no API key) and does what it says."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.llama_server import LlamaServer

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
ANSWER = "answer: It is a small library of adders, scalers and reports."


def run_example(script: str, *args: str) -> str:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL")
    }
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "offline:ScriptedLLM" in done.stdout
    return done.stdout


def compactions(output: str) -> list[tuple[str, str, int, int]]:
    """(strategy, status, tokens before, tokens after) of each reported compaction."""
    return [
        (m[1], m[2], int(m[3]), int(m[4]))
        for m in re.finditer(
            r"^compaction: (\S+) (\w+) \(\w+\) (\d+) -> (\d+) tokens", output, re.M
        )
    ]


def history_line(output: str) -> tuple[int, int, int, int]:
    m = re.search(
        r"^history: (\d+) messages \((\d+) tokens\) sent to the model; "
        r"transcript: (\d+) messages and (\d+) compaction events kept$",
        output,
        re.M,
    )
    assert m, output
    return int(m[1]), int(m[2]), int(m[3]), int(m[4])


# The scripted run: system + task + 5 tool turns (call + result) + the answer = 13 messages.
FULL_TRANSCRIPT = 13


def check_compacted_run(output: str, strategy: str, *, fits: bool = True) -> None:
    assert ANSWER in output
    assert "model calls: 6" in output
    done = [c for c in compactions(output) if c[1] == "compacted"]
    assert done, output
    assert all(strategy in c[0] for c in done), output
    assert all(after < before for _, _, before, after in done)
    _, tokens, transcript, events = history_line(output)
    assert transcript >= FULL_TRANSCRIPT - 1  # example 4 has no system prompt
    assert events == len(compactions(output))
    if fits:  # back under the 6,000-token window the examples configure
        assert tokens < 6_000


def test_example_1_strategy_named_in_toml() -> None:
    output = run_example("01_strategy_in_toml.py")
    assert "config: agent.toml" in output
    assert "strategy: HidingThenSummary" in output
    check_compacted_run(output, "HidingThenSummary")
    assert history_line(output)[2] == FULL_TRANSCRIPT


def test_example_1_with_the_documented_example_config() -> None:
    output = run_example("01_strategy_in_toml.py", str(ROOT / "config.example.toml"))
    assert "strategy: HidingThenSummary" in output
    assert ANSWER in output
    assert compactions(output) == []  # a 128k window: this short run never fills it
    sent, _, transcript, events = history_line(output)
    assert sent == transcript == FULL_TRANSCRIPT - 1  # it sets no system prompt
    assert events == 0


def test_example_2_strategy_object() -> None:
    output = run_example("02_strategy_object.py")
    assert "strategy: ToolResultHiding" in output
    check_compacted_run(output, "ToolResultHiding")
    assert "  event: " in output  # the on_event callback printed


def test_example_3_third_party_package_named_in_toml() -> None:
    output = run_example("03_third_party_package.py")
    assert "strategy: ctxcompact_supersede._masking.SupersededReadMasking" in output
    # It masks only the stale copy of a.py: enough to bring the history under the threshold.
    check_compacted_run(output, "SupersededReadMasking")


def test_example_4_custom_strategy() -> None:
    output = run_example("04_custom_strategy.py")
    assert "strategy: ShortenOldResults" in output
    check_compacted_run(output, "ShortenOldResults")


@pytest.mark.llama
def test_an_example_with_a_real_openai_compatible_server(
    llama_server: LlamaServer,
) -> None:
    """The online path of the examples (OPENAI_API_KEY set), pointed at the local server
    through the SDK's own OPENAI_BASE_URL variable."""
    env = {
        **os.environ,
        "OPENAI_API_KEY": "local",
        "OPENAI_BASE_URL": llama_server.base_url,
        "CTXCOMPACT_EXAMPLE_MODEL": llama_server.model,
        "CTXCOMPACT_EXAMPLE_MAX_TOKENS": "32",  # the tiny model rambles; keep the run short
    }
    env.pop("ANTHROPIC_API_KEY", None)
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "02_strategy_object.py")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"model: openai:{llama_server.model}" in done.stdout
    assert re.search(r"^answer: ", done.stdout, re.M)
    assert re.search(r"^model calls: [1-9]", done.stdout, re.M)


def test_quickstart_offline_compacts_and_fits_the_window() -> None:
    output = run_example("quickstart.py")
    assert [line for line in output.splitlines() if line.startswith("answer: ")] == [
        "answer: a.py: ok",
        "answer: b.py: ok",
        "answer: c.py: ok",
    ]
    done = re.findall(
        r"^  compaction compacted by ToolResultHiding: (\d+) -> (\d+) messages, "
        r"([\d,]+) -> ([\d,]+) tokens$",
        output,
        re.M,
    )
    assert done, output
    for before_msgs, after_msgs, before, after in done:
        assert before_msgs == after_msgs  # hiding keeps every message, shortens old results
        assert int(after.replace(",", "")) < int(before.replace(",", ""))
    # Every call went out below the window minus the reserve (4,000 - 1,000).
    sent = [
        int(n.replace(",", "")) for n in re.findall(r"^call: \d+ messages, ([\d,]+)", output, re.M)
    ]
    assert len(sent) == 6
    assert max(sent) < 3_000
    last = re.search(
        r"^done: 13 messages, [\d,]+ tokens, (\d+) old tool results hidden$", output, re.M
    )
    assert last, output
    assert int(last[1]) >= 1


def test_quickstart_online_talks_to_an_openai_compatible_server() -> None:
    from tests.helpers.proxy_servers import FakeUpstream, serve_in_thread

    fake = FakeUpstream()
    with serve_in_thread(fake.app()) as url:
        env = {
            k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")
        }
        args = ["--base-url", f"{url}/v1", "--model", "fake-model", "--api-key", "sk-local"]
        done = subprocess.run(
            [sys.executable, str(EXAMPLES / "quickstart.py"), *args],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
            env=env,
            check=False,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"model: fake-model at {url}/v1" in done.stdout
    # The fake answers in text (no tool call): one request per user message, each carrying
    # the read_file tool and the growing history; its usage was fed to observe_usage.
    bodies = [r.json() for r in fake.received if r.path == "/v1/chat/completions"]
    assert [len(b["messages"]) for b in bodies] == [2, 4, 6]
    assert all(b["tools"][0]["function"]["name"] == "read_file" for b in bodies)
    assert "answer: saw 6 messages" in done.stdout
