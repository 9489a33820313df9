"""``clear_tool_inputs`` on ToolResultHiding and Schema1Masking: the calls of the groups whose
results are removed lose their long string arguments, as ToolInputClearing clears them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctxcompact import Message, check_history, from_openai, load_config
from ctxcompact.exceptions import ConfigError
from ctxcompact.store import SQLiteStore, record_removed, removed_originals
from ctxcompact.strategies import Schema1Masking, ToolInputClearing, ToolResultHiding
from ctxcompact.testing import assert_strategy_invariants
from tests.helpers.gen import assistant, call, tool, user
from tests.helpers.strategy_checks import ctx_for, dump
from tests.helpers.traces import load_trace, trace_names

BIG = "x" * 500
RESULT = "r" * 800
MARKER = "[cleared: 500 chars]"


def write_group(k: int, name: str = "Write", result: str = RESULT) -> list[Message]:
    args = json.dumps({"path": f"f{k}.py", "content": BIG, "mode": 420})
    return [assistant("writing", call(f"c{k}", name, args)), tool(f"c{k}", result)]


def history_of(n: int) -> list[Message]:
    out = [user("go")]
    for k in range(n):
        out += write_group(k)
    return out


def arguments(message: Message, index: int = 0) -> dict[str, object]:
    assert message.tool_calls is not None
    parsed = json.loads(message.tool_calls[index].arguments)
    assert isinstance(parsed, dict)
    return parsed


STRATEGIES = {
    "hiding": lambda **kw: ToolResultHiding(preserve_recent_n=2, **kw),
    # Every run masks, at every turn: these tests are about what is cleared, not when.
    "schema1": lambda **kw: Schema1Masking(window_turns=2, batch_turns=0, always=True, **kw),
}


@pytest.mark.parametrize("kind", sorted(STRATEGIES))
def test_calls_of_removed_groups_are_cleared_and_recent_groups_untouched(kind: str) -> None:
    history = history_of(4)
    before = dump(history)
    out = assert_strategy_invariants(STRATEGIES[kind](clear_tool_inputs=True), ctx_for(history))
    assert out is not None
    assert dump(history) == before
    for k in (0, 1):  # old: result removed, call's long value cleared, keys kept
        call_message, result = out[1 + 2 * k], out[2 + 2 * k]
        assert result.content != RESULT
        assert arguments(call_message) == {"path": f"f{k}.py", "content": MARKER, "mode": 420}
        old_call = history[1 + 2 * k].tool_calls
        assert old_call is not None
        assert call_message.tool_calls is not None
        assert call_message.tool_calls[0].id == old_call[0].id
        assert call_message.tool_calls[0].name == old_call[0].name
        assert call_message.content == "writing"
    for i in range(5, 9):  # the 2 recent groups: the very same objects
        assert out[i] is history[i]
    assert check_history(out) == []


@pytest.mark.parametrize("kind", sorted(STRATEGIES))
def test_off_by_default_and_a_second_run_is_a_noop(kind: str) -> None:
    history = history_of(4)
    plain = assert_strategy_invariants(STRATEGIES[kind](), ctx_for(history))
    assert plain is not None
    assert plain[1] is history[1]  # default: the call keeps its arguments
    strategy = STRATEGIES[kind](clear_tool_inputs=True)
    out = assert_strategy_invariants(strategy, ctx_for(history))
    assert out is not None
    assert assert_strategy_invariants(strategy, ctx_for(out)) is None
    # A history hidden without clearing gets its old inputs cleared on a later run.
    later = assert_strategy_invariants(strategy, ctx_for(plain))
    assert later is not None
    assert arguments(later[1])["content"] == MARKER


@pytest.mark.parametrize("kind", sorted(STRATEGIES))
def test_a_list_clears_only_the_named_tools(kind: str) -> None:
    history = [user("go"), *write_group(0, "Write"), *write_group(1, "Edit")]
    history += [*write_group(2), *write_group(3)]
    result = assert_strategy_invariants(STRATEGIES[kind](clear_tool_inputs=["Edit"]), history)
    assert result is not None
    assert result[1] is history[1]  # Write: not named
    assert arguments(result[3])["content"] == MARKER


def test_schema1_keeps_the_arguments_of_a_call_whose_error_result_is_kept() -> None:
    args = json.dumps({"command": BIG})
    history = [
        user("go"),
        assistant(None, call("a", "bash", args), call("b", "bash", args)),
        tool("a", "Traceback (most recent call last):\n  ValueError: bad " + "e" * 400),
        tool("b", RESULT),
        *write_group(1),
        *write_group(2),
    ]
    out = assert_strategy_invariants(
        Schema1Masking(window_turns=2, clear_tool_inputs=True, batch_turns=0, always=True),
        ctx_for(history),
    )
    assert out is not None
    assert out[2] is history[2]  # the error result is kept verbatim...
    assert arguments(out[1], 0) == {"command": BIG}  # ...and so is the call that caused it
    assert arguments(out[1], 1) == {"command": MARKER}  # its parallel call is cleared
    assert out[3].content != RESULT


def test_hiding_clears_the_same_calls_as_the_tool_input_clearing_strategy() -> None:
    history = history_of(7)
    one = ToolResultHiding(preserve_recent_n=3, clear_tool_inputs=True, batch_turns=2)
    out = one.hide(history)
    reference = ToolInputClearing(keep_recent=3, batch_turns=2, min_chars=200).clear(history)
    assert out is not None
    assert reference is not None
    calls = [i for i, m in enumerate(history) if m.tool_calls]
    assert [out[i].tool_calls for i in calls] == [reference[i].tool_calls for i in calls]


def test_clear_inputs_min_chars_spares_shorter_values() -> None:
    history = history_of(3)
    out = ToolResultHiding(
        preserve_recent_n=1, clear_tool_inputs=True, clear_inputs_min_chars=600
    ).hide(history)
    assert out is not None
    assert out[1] is history[1]  # 500 characters: under the limit
    assert out[2].content == "[old tool result hidden]"


def test_clear_at_least_counts_the_inputs_it_frees() -> None:
    # Results too short to hide: only the cleared inputs (~120 tokens each) free anything.
    history = [user("go")]
    for k in range(4):
        history += write_group(k, result="ok")
    strategy = ToolResultHiding(preserve_recent_n=0, clear_tool_inputs=True, clear_at_least=300)
    out = strategy.hide(history[:5])  # 2 groups, ~240 tokens: below 300
    assert out is None
    out = strategy.hide(history)
    assert out is not None
    assert sum(1 for m in out if m.tool_calls and MARKER in m.tool_calls[0].arguments) >= 2


@pytest.mark.parametrize("kind", sorted(STRATEGIES))
def test_bad_settings_name_the_key(kind: str) -> None:
    for bad in ("Write", [""], [1], None):
        with pytest.raises(ConfigError) as err:
            STRATEGIES[kind](clear_tool_inputs=bad)
        assert err.value.key == "clear_tool_inputs"
    with pytest.raises(ConfigError) as err:
        STRATEGIES[kind](clear_tool_inputs=True, clear_inputs_min_chars=10)
    assert err.value.key == "clear_inputs_min_chars"


def test_the_schema1_config_table_takes_clear_tool_inputs(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        "[observation_masking.schema1]\nenabled = true\nwindow_turns = 2\nbatch_turns = 0\n"
        "clear_tool_inputs = true\nclear_inputs_min_chars = 100\n"
    )
    strategy = load_config(path).observation_masking.schema1.build()
    assert isinstance(strategy, Schema1Masking)
    out = strategy.mask(history_of(3))
    assert out is not None
    assert arguments(out[1])["content"] == MARKER
    path.write_text('[observation_masking.schema1]\nenabled = true\nclear_tool_inputs = ["Edit"]\n')
    assert load_config(path).observation_masking.schema1.build().clear_tool_inputs == ["Edit"]
    path.write_text('[observation_masking.schema1]\nenabled = true\nclear_tool_inputs = "yes"\n')
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert err.value.key is not None
    assert "clear_tool_inputs" in err.value.key


def test_the_store_keeps_the_whole_call_under_its_position(tmp_path: Path) -> None:
    history = history_of(3)
    out = ToolResultHiding(preserve_recent_n=1, clear_tool_inputs=True).hide(history)
    assert out is not None
    removals = removed_originals(history, out)
    # Each old group: its call's arguments (cleared, stored under "args:<id>") and its result.
    assert [(r.position, r.kind, r.tool_call_id) for r in removals] == [
        (1, "cleared", "args:c0"),
        (2, "hidden", "c0"),
        (3, "cleared", "args:c1"),
        (4, "hidden", "c1"),
    ]
    assert removals[0].replacement is out[1]
    with SQLiteStore(tmp_path / "store.sqlite") as store:
        assert record_removed(store, history, out) == 4
        record = store.get("default", "args:c0", position=1)
        assert record is not None
        assert arguments(record.message)["content"] == BIG  # the original, whole
        result = store.get("default", "c0")
        assert result is not None
        assert result.message.content == RESULT


@pytest.mark.parametrize("name", trace_names())
def test_keeps_every_invariant_on_every_trace(name: str) -> None:
    history = from_openai(load_trace(name))
    for strategy in (
        ToolResultHiding(preserve_recent_n=5, clear_tool_inputs=True),
        ToolResultHiding(preserve_recent_n=2, clear_tool_inputs=["Write", "Edit"], batch_turns=4),
        ToolResultHiding(preserve_recent_n=0, clear_tool_inputs=True, clear_at_least=2_000),
        Schema1Masking(window_turns=5, clear_tool_inputs=True, clear_inputs_min_chars=31),
        Schema1Masking(window_turns=2, clear_tool_inputs=True, batch_turns=12),
        Schema1Masking(window_turns=1, keep_last_k_per_tool=1, clear_tool_inputs=True),
    ):
        out = assert_strategy_invariants(strategy, ctx_for(history))
        if out is None:
            continue
        for old, new in zip(history, out, strict=True):
            if new is old or not old.tool_calls:
                continue
            assert new.tool_calls is not None
            for a, b in zip(old.tool_calls, new.tool_calls, strict=True):
                assert (a.id, a.name) == (b.id, b.name)
                if a.arguments != b.arguments:
                    assert set(json.loads(a.arguments)) == set(json.loads(b.arguments))
                    assert "[cleared: " in b.arguments
