"""The integration examples in examples/ run offline and do what they say."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import ROOT


def run_example(script: str) -> str:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def compactions(output: str) -> list[tuple[int, int]]:
    found = re.findall(
        r"^compaction: ToolResultHiding compacted: (\d+) -> (\d+) tokens$", output, re.M
    )
    return [(int(a), int(b)) for a, b in found]


def assert_compacted(output: str) -> None:
    done = compactions(output)
    assert done, output
    assert all(after < before for before, after in done)


def hidden(output: str, pattern: str) -> tuple[int, int]:
    m = re.search(pattern, output, re.M)
    assert m, output
    return int(m[1]), int(m[2])


def test_pydantic_ai_example_hides_old_file_contents() -> None:
    out = run_example("integration_pydantic_ai.py")
    assert_compacted(out)
    total, n_hidden = hidden(out, r"^tool results: (\d+), (\d+) hidden")
    assert total == 6
    assert 0 < n_hidden < total  # the two newest stay whole
    assert "answer: Read 6 modules of ctxcompact." in out


def test_openai_agents_example_filters_calls_and_compacts_the_session() -> None:
    out = run_example("integration_openai_agents.py")
    per_call, _, between_runs = out.partition("-- between runs")
    assert_compacted(per_call)
    assert "answer: Read 6 modules of ctxcompact." in per_call
    n_hidden, total = hidden(between_runs, r"(\d+) of (\d+) tool outputs hidden")
    assert total == 6
    assert 0 < n_hidden < total


def test_langchain_example_keeps_the_compacted_state_for_the_next_turn() -> None:
    out = run_example("integration_langchain.py")
    turn1, _, turn2 = out.partition("state after turn 1")
    assert_compacted(turn1)
    n_hidden, total = hidden(out, r"^state after turn 1: (\d+) of (\d+) tool results hidden")
    assert total == 6
    assert 0 < n_hidden < total
    assert compactions(turn2) == []  # turn 2 starts from the compacted state: nothing to redo
    assert re.search(r"^answer: \d+ messages in my context\.$", turn2, re.M)
