"""ToolInputClearing: long string arguments of old tool calls become a marker with their size."""

from __future__ import annotations

import json

import pytest

from ctxcompact import Message, check_history, from_openai, load_strategy
from ctxcompact.exceptions import ConfigError
from ctxcompact.strategies import (
    Pipeline,
    Schema1Masking,
    Tiered,
    ToolInputClearing,
    ToolResultHiding,
)
from ctxcompact.testing import assert_strategy_invariants
from tests.helpers.gen import assistant, call, tool, user
from tests.helpers.strategy_checks import ctx_for, dump, run
from tests.helpers.traces import load_trace, trace_names

BIG = "x" * 2500  # over the default min_chars (2,000)


def write_group(k: int, text: str = BIG, name: str = "Write") -> list[Message]:
    args = json.dumps({"path": f"f{k}.py", "content": text, "mode": 420})
    return [assistant(None, call(f"c{k}", name, args)), tool(f"c{k}", f"wrote f{k}.py")]


def history_of(n: int, **kw: object) -> list[Message]:
    out = [user("go")]
    for k in range(n):
        out += write_group(k, **kw)  # type: ignore[arg-type]
    return out


def arguments(message: Message) -> dict[str, object]:
    assert message.tool_calls is not None
    parsed = json.loads(message.tool_calls[0].arguments)
    assert isinstance(parsed, dict)
    return parsed


def test_old_long_values_become_a_marker_with_their_size_and_keys_are_kept() -> None:
    history = history_of(4)
    before = dump(history)
    out = ToolInputClearing(keep_recent=2).clear(history)
    assert out is not None
    assert dump(history) == before  # input untouched
    for k in (0, 1):
        args = arguments(out[1 + 2 * k])
        assert args == {"path": f"f{k}.py", "content": "[cleared: 2500 chars]", "mode": 420}
    for k in (2, 3):  # the recent groups keep their arguments, same objects
        assert out[1 + 2 * k] is history[1 + 2 * k]
    assert all(out[i] is history[i] for i in range(len(history)) if history[i].role != "assistant")
    assert check_history(out) == []


def test_ids_names_and_other_fields_never_change() -> None:
    history = history_of(3)
    out = ToolInputClearing(keep_recent=0).clear(history)
    assert out is not None
    for old, new in zip(history, out, strict=True):
        if old.tool_calls:
            assert new.tool_calls is not None
            assert [(c.id, c.name, c.type) for c in new.tool_calls] == [
                (c.id, c.name, c.type) for c in old.tool_calls
            ]
            assert new.role == old.role
            assert new.content == old.content


def test_a_second_run_on_the_output_is_a_noop() -> None:
    strategy = ToolInputClearing(keep_recent=1)
    out = strategy.clear(history_of(4))
    assert out is not None
    assert strategy.clear(out) is None


def test_short_values_nested_values_and_non_object_arguments() -> None:
    nested = json.dumps({"edits": [{"old": BIG, "new": "y"}], "n": [1, 2]})
    history = [
        user("go"),
        assistant(None, call("a", "Edit", nested)),
        tool("a", "ok"),
        assistant(None, call("b", "bash", '"a JSON string, not an object ' + BIG + '"')),
        tool("b", "ok"),
        assistant(None, call("c", "bash", "not json " + BIG)),
        tool("c", "ok"),
    ]
    out = ToolInputClearing(keep_recent=0).clear(history)
    assert out is not None
    cleared = {"edits": [{"old": "[cleared: 2500 chars]", "new": "y"}], "n": [1, 2]}
    assert arguments(out[1]) == cleared
    assert out[3] is history[3]
    assert out[5] is history[5]
    assert ToolInputClearing(keep_recent=0, min_chars=2600).clear(history) is None


def test_only_the_named_tools_are_cleared() -> None:
    history = [user("go"), *write_group(0, name="Write"), *write_group(1, name="Read")]
    out = ToolInputClearing(keep_recent=0, tools=["Read"]).clear(history)
    assert out is not None
    assert out[1] is history[1]
    assert arguments(out[3])["content"] == "[cleared: 2500 chars]"


def test_parallel_calls_of_one_message_are_cleared_together() -> None:
    args = json.dumps({"content": BIG})
    history = [
        user("go"),
        assistant(None, call("a", "Write", args), call("b", "Write", "{}")),
        tool("a", "ok"),
        tool("b", "ok"),
        *write_group(9),
    ]
    out = ToolInputClearing(keep_recent=1).clear(history)
    assert out is not None
    calls = out[1].tool_calls
    assert calls is not None
    assert [c.id for c in calls] == ["a", "b"]
    assert json.loads(calls[0].arguments) == {"content": "[cleared: 2500 chars]"}
    assert calls[1].arguments == "{}"


def test_batch_turns_moves_the_boundary_in_multiples() -> None:
    strategy = ToolInputClearing(keep_recent=1, batch_turns=3)
    cleared = [
        sum(
            1
            for m in (strategy.clear(history_of(n)) or [])
            if m.tool_calls and "cleared" in m.tool_calls[0].arguments
        )
        for n in range(1, 9)
    ]
    # n groups, 1 kept: n - 1 old, rounded down to a multiple of 3.
    assert cleared == [0, 0, 0, 3, 3, 3, 6, 6]


def test_clear_at_least_waits_until_enough_tokens_are_freed() -> None:
    strategy = ToolInputClearing(keep_recent=0, clear_at_least=1_800)
    assert strategy.clear(history_of(2)) is None  # ~2 x 760 tokens freed: below 1,800
    out = strategy.clear(history_of(3))
    assert out is not None
    assert all("cleared" in m.tool_calls[0].arguments for m in out if m.tool_calls)


def test_bad_parameters_name_the_key() -> None:
    with pytest.raises(ConfigError) as err:
        ToolInputClearing(min_chars=10)
    assert err.value.key == "min_chars"
    with pytest.raises(ConfigError) as err:
        ToolInputClearing(tools="Write")
    assert err.value.key == "tools"
    with pytest.raises(ConfigError) as err:
        ToolInputClearing(marker="[{name}]")
    assert err.value.key == "marker"
    with pytest.raises(ConfigError) as err:
        ToolInputClearing(keep_recent=-1)
    assert err.value.key == "keep_recent"


def test_loads_by_spec_with_params_and_composes_with_masking() -> None:
    strategy = load_strategy(
        "ctxcompact.strategies:ToolInputClearing", params={"keep_recent": 1, "tools": "all"}
    )
    assert isinstance(strategy, ToolInputClearing)
    pipeline = Pipeline(Schema1Masking(window_turns=1, batch_turns=0, always=True), strategy)
    history = history_of(3, text=BIG)
    history[2] = tool("c0", "r" * 2000)
    out = run(pipeline, history)
    assert out is not None
    assert "cleared" in out[1].tool_calls[0].arguments
    assert out[2].content != history[2].content  # the result was masked too
    assert check_history(out) == []


@pytest.mark.parametrize("name", trace_names())
def test_keeps_every_invariant_on_every_trace(name: str) -> None:
    history = from_openai(load_trace(name))
    for strategy in (
        ToolInputClearing(keep_recent=5),
        ToolInputClearing(keep_recent=0, min_chars=31, batch_turns=4),
        ToolInputClearing(keep_recent=2, clear_at_least=2_000),
    ):
        out = assert_strategy_invariants(strategy, ctx_for(history))
        if out is None:
            continue
        for old, new in zip(history, out, strict=True):
            if new is old:
                continue
            assert old.tool_calls is not None
            assert new.tool_calls is not None
            for a, b in zip(old.tool_calls, new.tool_calls, strict=True):
                assert (a.id, a.name) == (b.id, b.name)
                if a.arguments != b.arguments:
                    assert set(json.loads(a.arguments)) == set(json.loads(b.arguments))


def test_composes_with_hiding_in_a_pipeline_loaded_from_steps() -> None:
    pipeline = Pipeline(
        steps=[
            {"strategy": "tool-result-hiding", "params": {"preserve_recent_n": 1}},
            {
                "strategy": "ctxcompact.strategies:ToolInputClearing",
                "params": {"keep_recent": 1, "tools": ["Write"]},
            },
        ]
    )
    history = history_of(3)
    history[2] = tool("c0", "r" * 2000)
    out = assert_strategy_invariants(pipeline, ctx_for(history))
    assert out is not None
    assert out[2].content == "[old tool result hidden]"
    assert arguments(out[1])["content"] == "[cleared: 2500 chars]"
    assert out[5] is history[5]  # the newest group is untouched
    assert out[6] is history[6]


def test_alone_it_clears_only_values_over_2000_characters_by_default() -> None:
    # Alone, each rewrite is a cache break of its own: shorter values stay.
    history = [
        user("go"),
        *write_group(0, text="s" * 1_500),
        *write_group(1, text="e" * 2_000),
        *write_group(2, text="w" * 2_001),
    ]
    out = ToolInputClearing(keep_recent=0).clear(history)
    assert out is not None
    assert out[1] is history[1]
    assert out[3] is history[3]
    assert arguments(out[5])["content"] == "[cleared: 2001 chars]"
    shorter = ToolInputClearing(keep_recent=0, min_chars=200).clear(history)
    assert shorter is not None
    assert arguments(shorter[1])["content"] == "[cleared: 1500 chars]"
    assert ToolInputClearing(keep_recent=0).clear(history[:5]) is None


async def test_where_clearing_rides_on_a_masking_rewrite_it_keeps_200() -> None:
    # The tiered clear tier and the masking strategies' clear_tool_inputs clear in a rewrite
    # their masking makes anyway: their own default stays 200.
    history = [user("go")]
    for k in range(30):
        history += write_group(k, text="x" * 500)
        history[-1] = tool(f"c{k}", "r" * 400)
    hidden = ToolResultHiding(preserve_recent_n=1, clear_tool_inputs=True).hide(history)
    assert hidden is not None
    assert arguments(hidden[1])["content"] == "[cleared: 500 chars]"
    tiered = Tiered(tiers=["clear"])
    out = await tiered.compact(ctx_for(history, max_context_size=16_000, reserved=4_000))
    assert out is not None
    assert arguments(out[1])["content"] == "[cleared: 500 chars]"
