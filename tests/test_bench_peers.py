"""The peer benchmark measures the peers' real code, never a no-op, and never a broken history.

``benchmarks/bench_peers.py`` runs LangChain's and pydantic-ai-harness's compaction through
adapters (``benchmarks/_peers.py``). These tests run the benchmark (``--quick`` on two traces)
and look at what each configuration sent at every call: the peers' own placeholders and
summaries must reach the model, and every request must pass ``check_history``. They need the
``bench`` extra (``pip install -e '.[bench]'``), which installs the peers.
"""

from __future__ import annotations

import asyncio
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai_harness", reason="the peers are in the bench extra")
pytest.importorskip("langchain")

from ctxcompact import CompactionContext, Message, ToolCall, check_history
from ctxcompact.replay import read_conversation

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _peers  # noqa: E402
import bench_peers  # noqa: E402
from langchain.agents.middleware import ClearToolUsesEdit, ContextEditingMiddleware  # noqa: E402
from pydantic_ai_harness.compaction import ClearToolResults  # noqa: E402

TRACES = ROOT / "tests" / "data" / "traces"
TWO = (
    TRACES / "msa-gemini3pro__django__django-14349.json",
    TRACES / "claudecode-subagent__fa812bfe__aa84377.json",
)
# The placeholder each peer writes by default (its own source, quoted in bench_peers.py).
PLACEHOLDERS = {"ClearToolUsesEdit": "[cleared]", "ClearToolResults": "[tool result cleared]"}


def history(tool_results: int) -> list[Message]:
    out = [Message.system("be brief"), Message.user("fix the bug")]
    for i in range(tool_results):
        call = ToolCall(id=f"c{i}", name="read", arguments=f'{{"path": "f{i}.py"}}')
        out += [Message.assistant(f"reading {i}", tool_calls=[call])]
        out += [Message.tool(f"c{i}", f"contents of f{i}.py " + "x" * 400)]
    return out


@pytest.fixture(scope="module")
def quick_run() -> tuple[dict[str, Any], dict[str, list[tuple[int, list[Message]]]]]:
    """One --quick run on two traces: the report, and every request each row sent."""
    sent: dict[str, list[tuple[int, list[Message]]]] = defaultdict(list)

    def on_request(row: bench_peers.Row, trace: str, index: int, request: Sequence[Message]):
        sent[row.label].append((index, list(request)))

    args = bench_peers.parse_args(["--quick", *(f"--trace={p}" for p in TWO)])
    report = asyncio.run(bench_peers.run(args, on_request))
    return report, sent


def peer_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    (window,) = report["windows"]
    return [row for row in window["rows"] if row["side"] != "ours"]


@pytest.mark.slow
def test_every_request_a_peer_sent_keeps_its_tool_calls_paired(quick_run: Any) -> None:
    report, sent = quick_run
    rows = peer_rows(report)
    assert len(rows) == 12
    for row in rows:
        requests = sent[row["label"]]
        assert len(requests) == row["calls"] > 0
        bad = [(i, check_history(r)[:1]) for i, r in requests if check_history(r)]
        assert bad == [], row["label"]
        assert row["invalid_calls"] == 0


@pytest.mark.slow
def test_every_peer_with_a_trigger_inside_the_window_changed_what_was_sent(
    quick_run: Any,
) -> None:
    report, sent = quick_run
    conversations = [read_conversation(p) for p in TWO]
    calls = [i for c in conversations for i, m in enumerate(c) if m.role == "assistant"]
    scaled = [row for row in peer_rows(report) if "trigger scaled" in row["label"]]
    assert len(scaled) == 8  # 4 peers x (own estimate, our counter)
    for row in scaled:
        requests = sent[row["label"]]
        assert [i for i, _ in requests] == calls
        # Recomputed here rather than trusted from the report: what differs from the recording.
        recorded = [c[:i] for c in conversations for i, m in enumerate(c) if m.role == "assistant"]
        changed = sum(r != rec for (_, r), rec in zip(requests, recorded, strict=True))
        assert changed > 0, row["label"]
        assert changed == row["changed_calls"]
        assert row["input"] < 1.0
        texts = [m.text for _, r in requests for m in r]
        peer = row["label"].split("(")[0].split(",")[0]
        if peer in PLACEHOLDERS:  # the peer's own placeholder reached the model
            assert PLACEHOLDERS[peer] in texts, row["label"]
        if peer == "SlidingWindowCompaction":  # messages were dropped
            assert any(len(r) < len(rec) for (_, r), rec in zip(requests, recorded, strict=True))
        if peer == "TieredCompaction":  # the summarizing tier ran and its summary was sent
            assert row["summaries"] > 0
            assert any(bench_peers.SUMMARY in t for t in texts), row["label"]


@pytest.mark.slow
def test_the_printout_has_every_row_and_the_documented_peers_that_never_fired_say_so(
    quick_run: Any,
) -> None:
    report, _ = quick_run
    text = bench_peers.render(report)
    for row in report["windows"][0]["rows"]:
        assert row["label"] in text
    # A 100,000-token trigger is never reached by these two traces: reported as 0 calls changed
    # at exactly the no-compaction figures, not hidden.
    documented = [r for r in peer_rows(report) if "100_000" in r["label"] or "()" in r["label"]]
    assert len(documented) == 3
    for row in documented:
        assert (row["changed_calls"], row["input"], row["cost_flat"]) == (0, 1.0, 1.0)


async def test_the_adapters_return_none_when_the_peer_leaves_the_history_alone() -> None:
    small = history(5)
    ctx = CompactionContext(small, 0, 16_000, 4_000)
    langchain = _peers.LangChainContextEditing(ContextEditingMiddleware())
    harness = _peers.HarnessCapability(ClearToolResults(max_tokens=100_000))
    assert await langchain.compact(ctx) is None
    assert await harness.compact(ctx) is None


@pytest.mark.parametrize("peer", ["langchain", "harness"])
async def test_a_cleared_result_is_a_copy_and_everything_else_the_same_object(peer: str) -> None:
    original = history(6)
    given = list(original)
    if peer == "langchain":
        edit = ClearToolUsesEdit(trigger=100)  # keep=3 by default
        strategy: Any = _peers.LangChainContextEditing(ContextEditingMiddleware(edits=[edit]))
        placeholder = "[cleared]"
    else:
        strategy = _peers.HarnessCapability(ClearToolResults(max_tokens=100))  # keep_pairs=3
        placeholder = "[tool result cleared]"
    out = await strategy.compact(CompactionContext(given, 0, 16_000, 4_000))
    assert out is not None
    assert given == original  # the input list is not mutated
    assert all(a is b for a, b in zip(given, original, strict=True))
    assert len(out) == len(original)
    cleared = [i for i, (a, b) in enumerate(zip(out, original, strict=True)) if a is not b]
    assert cleared == [3, 5, 7]  # the results of the 3 oldest calls
    for i in cleared:
        assert out[i].role == "tool"
        assert out[i].tool_call_id == original[i].tool_call_id
        assert out[i].text == placeholder
    assert check_history(out) == []
