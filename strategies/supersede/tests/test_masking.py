"""SupersededReadMasking: what it masks, what it keeps, and the ctxcompact invariants.

Every run goes through ``ctxcompact.testing.check_strategy_invariants``, which fails the
test, naming the invariant, if an output ever breaks tool-call pairing, order, the input or
the ``None`` rule.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from typing import TYPE_CHECKING

import pytest
from ctxcompact_supersede import DEFAULT_PLACEHOLDER, DEFAULT_TOOLS, SupersededReadMasking

from ctxcompact import (
    HeuristicTokenCounter,
    Message,
    TokenCounter,
    ToolCall,
    list_strategies,
    load_strategy,
)
from ctxcompact.exceptions import ConfigError, StrategyLoadError
from ctxcompact.testing import check_strategy_invariants

if TYPE_CHECKING:
    from collections.abc import Iterable

BIG = "x = 1\n" * 200  # big enough that the placeholder is shorter


def read(call_id: str, path: str, tool: str = "read_file", **extra: object) -> ToolCall:
    key = "file_path" if tool == "Read" else "path"
    return ToolCall(id=call_id, name=tool, arguments=json.dumps({key: path, **extra}))


def turn(*calls: ToolCall, results: dict[str, str] | None = None) -> list[Message]:
    """An assistant message with ``calls`` and a result for each (BIG unless given)."""
    results = results or {}
    return [
        Message.assistant(None, tool_calls=calls),
        *(Message.tool(c.id, results.get(c.id, f"{c.id}:{BIG}")) for c in calls),
    ]


async def compact(
    strategy: SupersededReadMasking,
    history: list[Message],
    *,
    token_counter: TokenCounter | None = None,
) -> list[Message] | None:
    """Run the strategy the way the controller does, checking every invariant."""
    out = await check_strategy_invariants(strategy, history, token_counter=token_counter)
    if out is not None:  # only the contents of tool results change, never the length
        assert len(out) == len(history)
        assert all(a is b or a.role == "tool" for a, b in zip(out, history, strict=True))
    return out


def masked(history: list[Message], out: list[Message] | None) -> list[int]:
    if out is None:
        return []
    return [i for i, (a, b) in enumerate(zip(history, out, strict=True)) if a is not b]


async def test_older_read_of_a_file_read_again_is_masked() -> None:
    history = [
        Message.user("fix a.py"),
        *turn(read("r1", "a.py")),
        *turn(ToolCall(id="e1", name="edit", arguments="{}"), results={"e1": "edited"}),
        *turn(read("r2", "a.py")),
        Message.assistant("done"),
    ]
    out = await compact(SupersededReadMasking(), history)
    assert masked(history, out) == [2]
    assert out is not None
    assert out[2].text == DEFAULT_PLACEHOLDER.format(tool="read_file", key="path", value="a.py")
    assert out[6] is history[6]  # the newest read is kept, the same object


async def test_other_files_and_unconfigured_tools_are_kept() -> None:
    history = [
        *turn(read("r1", "a.py"), ToolCall(id="b1", name="bash", arguments='{"path": "a.py"}')),
        *turn(read("r2", "b.py"), ToolCall(id="b2", name="bash", arguments='{"path": "a.py"}')),
    ]
    assert await compact(SupersededReadMasking(), history) is None


async def test_parallel_reads_in_one_turn_do_not_supersede_each_other() -> None:
    history = turn(read("r1", "a.py"), read("r2", "a.py"))
    assert await compact(SupersededReadMasking(), history) is None


async def test_every_older_copy_is_masked_and_only_the_newest_kept() -> None:
    history = [*turn(read("r1", "a.py")), *turn(read("r2", "a.py")), *turn(read("r3", "a.py"))]
    out = await compact(SupersededReadMasking(), history)
    assert masked(history, out) == [1, 3]


async def test_partial_reads_are_superseded_only_by_a_full_or_identical_read() -> None:
    part = read("p1", "a.py", tool="Read", offset=10, limit=5)
    other_part = read("p2", "a.py", tool="Read", offset=50, limit=5)
    history = [*turn(part), *turn(other_part)]
    assert await compact(SupersededReadMasking(), history) is None

    same_part = read("p3", "a.py", tool="Read", offset=10, limit=5)
    history = [*turn(part), *turn(same_part)]
    assert masked(history, await compact(SupersededReadMasking(), history)) == [1]

    full = read("f1", "a.py", tool="Read")
    history = [*turn(part), *turn(full)]
    assert masked(history, await compact(SupersededReadMasking(), history)) == [1]

    # A later partial read does not cover an earlier full read.
    history = [*turn(full), *turn(part)]
    assert await compact(SupersededReadMasking(), history) is None


async def test_error_results_are_kept_and_a_failed_reread_supersedes_nothing() -> None:
    failed_first = [
        *turn(read("r1", "a.py"), results={"r1": "Error: file not found"}),
        *turn(read("r2", "a.py")),
    ]
    assert await compact(SupersededReadMasking(), failed_first) is None

    failed_later = [
        *turn(read("r1", "a.py")),
        *turn(
            read("r2", "a.py"),
            results={"r2": "<tool_use_error>File does not exist.</tool_use_error>"},
        ),
    ]
    assert await compact(SupersededReadMasking(), failed_later) is None

    flagged = Message.tool("r1", BIG).model_copy(update={"is_error": True})
    history = [Message.assistant(None, tool_calls=[read("r1", "a.py")]), flagged]
    history += turn(read("r2", "a.py"))
    assert await compact(SupersededReadMasking(), history) is None
    assert masked(history, await compact(SupersededReadMasking(keep_errors=False), history)) == [1]


async def test_a_pending_call_supersedes_nothing() -> None:
    history = [*turn(read("r1", "a.py")), Message.assistant(None, tool_calls=[read("r2", "a.py")])]
    assert await compact(SupersededReadMasking(), history) is None


async def test_custom_tools_mapping_and_placeholder() -> None:
    calls = [ToolCall(id=f"c{i}", name="cat", arguments='{"file": "z.txt"}') for i in range(2)]
    history = [*turn(calls[0]), *turn(calls[1])]
    strategy = SupersededReadMasking(tools={"cat": "file"}, placeholder="[old {tool} {value}]")
    out = await compact(strategy, history)
    assert out is not None
    assert out[1].text == "[old cat z.txt]"
    assert await compact(SupersededReadMasking(), history) is None  # cat is not a default tool


async def test_small_results_are_not_replaced_by_a_longer_placeholder() -> None:
    history = [*turn(read("r1", "a.py"), results={"r1": "1"}), *turn(read("r2", "a.py"))]
    assert await compact(SupersededReadMasking(), history) is None


async def test_already_masked_history_is_a_noop() -> None:
    history = [*turn(read("r1", "a.py")), *turn(read("r2", "a.py"))]
    out = await compact(SupersededReadMasking(), history)
    assert out is not None
    assert await compact(SupersededReadMasking(), out) is None


async def test_clear_at_least_waits_until_enough_tokens_can_be_cleared() -> None:
    counter = HeuristicTokenCounter()
    history = [*turn(read("r1", "a.py")), *turn(read("r2", "a.py"))]
    one = counter.count_message(history[1])
    assert await compact(SupersededReadMasking(clear_at_least=one * 2), history) is None
    history += [*turn(read("r3", "b.py")), *turn(read("r4", "b.py"))]
    out = await compact(SupersededReadMasking(clear_at_least=one * 2 - 200), history)
    assert masked(history, out) == [1, 5]


async def test_clear_at_least_moves_the_masked_prefix_in_steps_of_that_many_tokens() -> None:
    """Files re-read in pairs, each pair freeing ``s`` tokens; with ``T = 2s`` the masks
    appear two pairs at a time, and in between the output does not change."""
    counter = HeuristicTokenCounter()
    history = [*turn(read("x1", "x.py")), *turn(read("x2", "x.py"))]
    out = await compact(SupersededReadMasking(), history)
    assert out is not None
    s = counter.count(history) - counter.count(out)
    batched = SupersededReadMasking(clear_at_least=2 * s)
    history = []
    seen: list[list[int]] = []
    for name in "abcdef":
        history += [*turn(read(f"{name}1", f"{name}.py")), *turn(read(f"{name}2", f"{name}.py"))]
        seen.append(masked(history, await compact(batched, history)))
    first_reads = [1, 5, 9, 13, 17, 21]  # the result of each pair's first read
    assert seen == [
        [],
        first_reads[:2],
        first_reads[:2],
        first_reads[:4],
        first_reads[:4],
        first_reads[:6],
    ]


async def test_batch_turns_moves_the_masked_prefix_in_steps() -> None:
    """Growing one turn at a time, the rewrite changes only when a batch boundary is crossed."""
    strategy = SupersededReadMasking(batch_turns=3)
    history: list[Message] = []
    masked_sets = []
    for i in range(9):
        history += turn(read(f"r{i}", "a.py"))
        masked_sets.append(tuple(masked(history, await compact(strategy, history))))
    # Turns 0-2: the horizon is 0 until 3 turns exist; then reads 0,1 are covered by read 2.
    assert masked_sets[:2] == [(), ()]
    assert masked_sets[2] == masked_sets[3] == masked_sets[4] == (1, 3)
    assert masked_sets[5] == masked_sets[6] == masked_sets[7] == (1, 3, 5, 7, 9)
    assert masked_sets[8] == tuple(range(1, 17, 2))
    # Without batching, every new read moves the boundary.
    unbatched = SupersededReadMasking()
    assert masked(history, await compact(unbatched, history)) == list(range(1, 17, 2))


async def test_invalid_arguments_are_left_alone() -> None:
    bad = ToolCall(id="r1", name="read_file", arguments="{not json")
    history = [Message.assistant(None, tool_calls=[bad]), Message.tool("r1", BIG)]
    history += turn(read("r2", "a.py"))
    assert await compact(SupersededReadMasking(), history) is None


def test_bad_configuration_is_rejected_naming_the_parameter() -> None:
    for kwargs, key in [
        ({"placeholder": "[old {nope}]"}, "placeholder"),
        ({"placeholder": "{tool}"}, "placeholder"),  # no fixed text: not told from a result
        ({"batch_turns": -1}, "batch_turns"),
        ({"clear_at_least": 1.5}, "clear_at_least"),
        ({"tools": {"read_file": ""}}, "tools"),
        ({"tools": ["read_file"]}, "tools"),  # not a mapping
    ]:
        with pytest.raises(ConfigError) as info:
            SupersededReadMasking(**kwargs)  # type: ignore[arg-type]
        assert info.value.key == key


class CountsOnePerMessage:
    """A counter under which no mask ever saves anything."""

    def count(self, messages: Iterable[Message]) -> int:
        return sum(1 for _ in messages)

    def count_message(self, message: Message) -> int:
        return 1


async def test_tokens_are_counted_with_the_contexts_counter() -> None:
    """The controller's counter decides what saves tokens, not one of the strategy's own."""
    history = [*turn(read("r1", "a.py")), *turn(read("r2", "a.py"))]
    strategy = SupersededReadMasking()
    assert masked(history, await compact(strategy, history)) == [1]
    assert await compact(strategy, history, token_counter=CountsOnePerMessage()) is None


def test_loaded_by_entry_point_name_and_by_class_with_params() -> None:
    for spec in ("supersede", "ctxcompact_supersede:SupersededReadMasking"):
        strategy = load_strategy(
            spec,
            # A counter offered as a dependency (as older wiring did) is not needed: ignored.
            dependencies={TokenCounter: HeuristicTokenCounter()},
            params={"tools": {"Read": "file_path"}, "batch_turns": 2},
        )
        assert isinstance(strategy, SupersededReadMasking)
        assert strategy.tools == {"Read": "file_path"}
        assert strategy.batch_turns == 2
    with pytest.raises(StrategyLoadError, match="batch_turns"):
        load_strategy("supersede", params={"batch_turns": -1})


def test_the_options_are_the_dataclass_fields() -> None:
    """One definition each: the fields are the keyword-only parameters and the repr."""
    names = [f.name for f in dataclasses.fields(SupersededReadMasking)]
    assert names == ["tools", "placeholder", "keep_errors", "batch_turns", "clear_at_least"]
    parameters = inspect.signature(SupersededReadMasking).parameters.values()
    assert [p.name for p in parameters] == names
    assert all(p.kind is p.KEYWORD_ONLY for p in parameters)
    strategy = SupersededReadMasking(tools={"cat": "file"}, batch_turns=2)
    assert repr(strategy).startswith("SupersededReadMasking(tools={'cat': 'file'}, placeholder=")
    assert "batch_turns=2" in repr(strategy)
    # Each instance has its own tools: the default is made anew, never shared.
    first, second = SupersededReadMasking(), SupersededReadMasking()
    assert first.tools == second.tools == dict(DEFAULT_TOOLS)
    assert first.tools is not second.tools


def test_ctxcompact_lists_the_options_with_their_real_defaults() -> None:
    (info,) = [i for i in list_strategies() if i.name == "supersede"]
    defaults = {p.name: p.default for p in info.params}
    assert defaults["tools"] == dict(DEFAULT_TOOLS)  # not dataclasses' factory placeholder
    assert defaults["batch_turns"] == 0
    assert not any(p.required for p in info.params)
