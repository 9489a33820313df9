"""examples/recommended.toml loads, keeps what it promises, and meets the figures it claims."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import pytest

from ctxcompact import (
    CompactionController,
    HeuristicTokenCounter,
    Message,
    check_history,
    from_openai,
    load_config,
    tool_groups,
)
from ctxcompact.kit import is_error_result
from ctxcompact.replay import MemoCounter, ReplayStats, replay
from ctxcompact.strategies import Pipeline, Schema1Masking, ToolInputClearing
from tests.helpers.traces import load_trace, trace_names

RECOMMENDED = Path(__file__).resolve().parents[1] / "examples" / "recommended.toml"


def build(counter: MemoCounter) -> CompactionController:
    return CompactionController.from_config(load_config(RECOMMENDED), token_counter=counter)


def test_it_loads_as_a_masking_then_input_clearing_pipeline_at_the_target_window() -> None:
    controller = build(MemoCounter(HeuristicTokenCounter()))
    assert (controller.max_context_size, controller.reserved_context_size) == (16_000, 4_000)
    assert isinstance(controller.strategy, Pipeline)
    masking, clearing = controller.strategy.strategies
    assert isinstance(masking, Schema1Masking)
    assert isinstance(clearing, ToolInputClearing)
    assert masking.policy.window_turns == clearing.keep_recent == 5
    assert masking.policy.keep_errors


@pytest.mark.parametrize("name", trace_names())
async def test_every_call_keeps_the_last_5_groups_every_error_and_every_message(
    name: str,
) -> None:
    conversation = from_openai(load_trace(name))
    groups = tool_groups(conversation)
    errors = [i for i, m in enumerate(conversation) if m.role == "tool" and is_error_result(m)]
    problems: list[str] = []

    def check(index: int, request: Sequence[Message]) -> None:
        if len(request) != index:
            problems.append(f"call {index}: {len(request)} messages sent")
            return
        if check_history(request):
            problems.append(f"call {index}: invalid history")
        for g in [g for g in groups if g.call_index < index][-5:]:
            for i in (g.call_index, *g.result_indices):
                if i < index and request[i] != conversation[i]:
                    problems.append(f"call {index}: message {i} of a recent group changed")
        for i in errors:
            if i < index and request[i].content != conversation[i].content:
                problems.append(f"call {index}: error result {i} changed")

    counter = MemoCounter(HeuristicTokenCounter())
    stats = await replay(conversation, build(counter), counter=counter, on_call=check)
    assert not problems, problems[:3]
    assert stats.failed_compactions == 0


@pytest.mark.parametrize(
    ("store", "max_input", "max_cost"),
    [
        # Issue 14's target, met with the strategies' own markers: [store] recall = false.
        ("[store]\nrecall = false\n", 0.50, 0.65),
        # The default (issue 20): the originals kept in memory, every marker naming its
        # recall handle, which costs a few tokens per marker.
        ("", 0.53, 0.68),
    ],
    ids=["recall-off", "default"],
)
async def test_it_meets_the_issue_14_target_on_the_public_traces(
    store: str, max_input: float, max_cost: float, tmp_path: Path
) -> None:
    logging.getLogger("ctxcompact").setLevel(logging.ERROR)
    path = tmp_path / "recommended.toml"
    path.write_text(RECOMMENDED.read_text(encoding="utf-8") + "\n" + store, encoding="utf-8")
    config = load_config(path)
    base, ours = ReplayStats(), ReplayStats()
    for name in trace_names():
        conversation = from_openai(load_trace(name))
        counter = MemoCounter(HeuristicTokenCounter())
        base += await replay(conversation, None, counter=counter)
        controller = CompactionController.from_config(config, token_counter=counter)
        ours += await replay(conversation, controller, counter=counter)
    input_ratio = ours.input_tokens / base.input_tokens
    cost_ratio = ours.cost / base.cost
    # The figures the docs state: 49.8% and 64.6% with recall off, 52.9% and 67.5% with it.
    assert input_ratio <= max_input, input_ratio
    assert cost_ratio <= max_cost, cost_ratio
