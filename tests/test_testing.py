from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from ctxcompact import (
    LLM,
    CompactionContext,
    CompactionStrategy,
    Completion,
    HeuristicTokenCounter,
    Message,
    ToolSpec,
    Usage,
    from_openai,
)
from ctxcompact.exceptions import RateLimitError
from ctxcompact.strategies import (
    ContextGuard,
    HidingThenSummary,
    LLMSummary,
    Pipeline,
    Schema1Masking,
    ToolResultHiding,
    ToolResultTruncation,
)
from ctxcompact.testing import (
    FunctionStrategy,
    LLMRequest,
    ScriptedLLM,
    StrategyInvariantError,
    assert_output_invariants,
    assert_strategy_invariants,
    check_strategy_invariants,
)
from tests.helpers.gen import assistant, call, system, tool, user
from tests.helpers.traces import load_trace, trace_names


def test_scripted_llm_satisfies_the_llm_protocol() -> None:
    assert isinstance(ScriptedLLM(), LLM)


async def test_every_kind_of_scripted_response() -> None:
    done = Completion(Message.assistant("done"), usage=Usage(10, 2), finish_reason="length")
    llm = ScriptedLLM(
        "text",
        Message.assistant("message"),
        done,
        RateLimitError("slow down", status_code=429),
        lambda request: Completion(Message.assistant(f"saw {len(request.messages)}")),
    )
    assert (await llm.complete([user("a")])).message.text == "text"
    assert (await llm.complete([user("a")])).message.text == "message"
    assert await llm.complete([user("a")]) is done
    with pytest.raises(RateLimitError, match="slow down"):
        await llm.complete([user("a")])
    assert (await llm.complete([user("a"), user("b")])).message.text == "saw 2"
    assert llm.remaining == 0
    assert len(llm.requests) == 5  # the failed call is recorded too


async def test_requests_record_every_argument() -> None:
    llm = ScriptedLLM("ok")
    messages = [user("hi")]
    spec = ToolSpec("ls", "list files")
    await llm.complete(messages, system="be brief", tools=[spec], max_tokens=50)
    messages.append(user("later"))  # the record does not change with the caller's list
    assert llm.requests == [LLMRequest((user("hi"),), "be brief", (spec,), 50)]


async def test_running_out_of_responses_is_a_clear_error() -> None:
    llm = ScriptedLLM("only one")
    await llm.complete([user("a")])
    with pytest.raises(AssertionError, match=r"ran out of responses.*with 1.*call 2"):
        await llm.complete([user("a")])


async def test_callable_returning_a_non_completion_is_a_type_error() -> None:
    llm = ScriptedLLM(lambda request: "not a completion")  # type: ignore[arg-type,return-value]
    with pytest.raises(TypeError, match="must return a Completion"):
        await llm.complete([user("a")])


async def test_function_strategy_sync_and_async() -> None:
    ctx = CompactionContext([user("a"), user("b")], 10, 100, 10)

    async def last(c: CompactionContext) -> list[Message]:
        return list(c.history[-1:])

    sync = FunctionStrategy(lambda c: None)
    asynchronous = FunctionStrategy(last)
    assert isinstance(sync, CompactionStrategy)
    assert await sync.compact(ctx) is None
    assert [m.text for m in await asynchronous.compact(ctx) or []] == ["b"]
    assert sync.calls == [ctx]
    assert asynchronous.name == "last"
    assert repr(asynchronous) == "FunctionStrategy(last)"
    assert FunctionStrategy(last, name="custom").name == "custom"


# -- assert_strategy_invariants: each invariant, broken on purpose ------------------------------

READ = call("a", "read_file", '{"path": "a.py", "limit": 10}')


def sample() -> list[Message]:
    """System, a turn with two parallel calls, a plain turn, a one-call turn."""
    return [
        system("be brief"),
        user("fix a.py"),
        assistant(None, READ, call("b", "ls")),
        tool("a", "A" * 200),
        tool("b", "a.py b.py"),
        assistant("fixed"),
        user("and now?"),
        assistant(None, call("c", "bash")),
        tool("c", "C" * 200),
        assistant("done"),
    ]


def broken(fn: Callable[[list[Message]], object]) -> FunctionStrategy:
    """A strategy returning ``fn(list(ctx.history))``."""
    return FunctionStrategy(lambda ctx: fn(list(ctx.history)), name="broken")  # type: ignore[arg-type,return-value]


def violation(strategy: CompactionStrategy, **kw: Any) -> StrategyInvariantError:
    with pytest.raises(StrategyInvariantError) as info:
        assert_strategy_invariants(strategy, sample(), **kw)
    assert isinstance(info.value, AssertionError)
    assert "FunctionStrategy(broken)" in str(info.value)
    return info.value


def hide(m: Message) -> Message:
    return m.replace(content="[hidden]") if m.role == "tool" else m


def test_a_correct_strategy_passes_and_its_output_is_returned() -> None:
    out = assert_strategy_invariants(broken(lambda h: [hide(m) for m in h]), sample())
    assert out is not None
    assert [m.text for m in out if m.role == "tool"] == ["[hidden]"] * 3
    assert assert_strategy_invariants(FunctionStrategy(lambda ctx: None), sample()) is None


@pytest.mark.parametrize("bad", ["a string", 42, [user("ok"), {"role": "user"}]])
def test_returning_something_other_than_messages_is_named(bad: object) -> None:
    err = violation(broken(lambda h: bad))
    assert err.invariants == ("returns messages",)


def test_mutating_the_input_list_is_named() -> None:
    def pop(ctx: CompactionContext) -> None:
        ctx.history.pop()  # type: ignore[attr-defined]  # a list, typed as a Sequence

    err = violation(FunctionStrategy(pop, name="broken"))
    assert err.invariants == ("input untouched",)
    assert "went from 10 to 9 messages" in err.details[0]


def test_mutating_a_message_in_place_is_named() -> None:
    def scribble(ctx: CompactionContext) -> None:
        ctx.history[3].__dict__["content"] = "overwritten"  # what a frozen model cannot stop

    err = violation(FunctionStrategy(scribble, name="broken"))
    assert err.invariants == ("input untouched",)
    assert "input message 3 (tool) was changed in place" in err.details[0]


def test_mutating_a_nested_extra_is_named() -> None:
    meta: dict[str, Any] = {"tags": ["a"]}
    history = [user("hi").model_copy(update={"meta": meta}), assistant("hello")]

    def scribble(ctx: CompactionContext) -> None:
        meta["tags"].append("b")  # a deep change: a shallow dump would share the list

    with pytest.raises(StrategyInvariantError) as info:
        assert_strategy_invariants(FunctionStrategy(scribble), history)
    assert info.value.invariants == ("input untouched",)


@pytest.mark.parametrize(
    "no_op",
    [
        pytest.param(lambda h: h, id="the-input-list-itself"),
        pytest.param(lambda h: list(h), id="a-shallow-copy"),
        pytest.param(lambda h: [m.model_copy() for m in h], id="equal-copies"),
    ],
)
def test_saying_no_change_with_a_list_is_named(no_op: Callable[[list[Message]], object]) -> None:
    strategy = FunctionStrategy(lambda ctx: no_op(ctx.history), name="broken")  # type: ignore[arg-type,return-value]
    err = violation(strategy)
    assert err.invariants == ("None for no change",)


def test_reordering_is_named() -> None:
    err = violation(broken(lambda h: [*h[:5], h[6], h[5], *h[7:]]))
    assert err.invariants == ("causal order",)
    assert "output message 6 (assistant) is input message 5" in err.details[0]


def test_repeating_a_message_is_named() -> None:
    err = violation(broken(lambda h: [*h, h[-1]]))
    assert err.invariants == ("causal order",)


def test_an_undocumented_new_message_is_named_and_a_documented_one_passes() -> None:
    def add_note(h: list[Message]) -> list[Message]:
        return [h[0], user("[note] earlier turns were dropped"), *h[5:]]

    err = violation(broken(add_note))
    assert err.invariants == ("causal order",)
    assert "1 output message(s) are not in the input: 1 (user)" in err.details[0]
    assert assert_strategy_invariants(broken(add_note), sample(), max_new_messages=1)


def test_dropping_one_of_two_parallel_results_is_named() -> None:
    err = violation(broken(lambda h: [*h[:4], *h[5:]]))
    assert err.invariants[0] == "tool-call integrity"
    assert "results for ['b'] of input message 2 were dropped" in err.details[0]


def test_splitting_parallel_calls_is_named() -> None:
    only_a = assistant(None, READ)
    err = violation(broken(lambda h: [*h[:2], only_a, h[3], *h[5:]]))
    assert err.invariants[0] == "tool-call integrity"
    assert "went from ['a', 'b'] to ['a']" in err.details[0]


def test_renaming_a_call_is_named() -> None:
    renamed = assistant(None, READ, call("b", "dir"))
    err = violation(broken(lambda h: [*h[:2], renamed, *h[3:]]))
    assert err.invariants == ("tool-call integrity",)
    assert "call 'b' renamed 'ls' -> 'dir'" in err.details[0]


def test_changing_ids_consistently_is_still_named() -> None:
    """The validator is happy (the new ids pair up), but ids must never be altered."""
    renumbered = [assistant(None, call("c1", "bash")), tool("c1", "C" * 200)]
    strategy = broken(lambda h: [*h[:7], *renumbered, h[9]])
    err = violation(strategy)
    assert err.invariants == ("tool-call integrity",)
    assert "makes tool calls ['c1']" in err.details[0]


@pytest.mark.parametrize(
    ("arguments", "ok"),
    [
        ('{"path": "[cleared]", "limit": 0}', True),  # same keys: what clear_tool_inputs does
        ('{"path": "a.py"}', False),  # a key dropped
        ("[cleared]", False),  # not JSON
        ('["a.py", 10]', False),  # JSON, not an object
    ],
)
def test_arguments_may_change_only_to_a_json_object_with_the_same_keys(
    arguments: str, ok: bool
) -> None:
    cleared = assistant(None, call("a", "read_file", arguments), call("b", "ls"))
    strategy = broken(lambda h: [*h[:2], cleared, *h[3:]])
    if ok:
        assert assert_strategy_invariants(strategy, sample())
    else:
        err = violation(strategy)
        assert err.invariants == ("tool-call integrity",)
        assert "arguments of call 'a'" in err.details[0]


def test_dropping_calls_but_keeping_their_results_is_named() -> None:
    err = violation(broken(lambda h: [*h[:7], h[8], h[9]]))
    assert "tool-call integrity" in err.invariants
    assert "valid history" in err.invariants  # an orphan result, too


def test_dropping_a_system_message_is_named_unless_documented() -> None:
    err = violation(broken(lambda h: h[1:]))
    assert err.invariants == ("system messages kept",)
    rewrite = broken(lambda h: [system("be very brief"), *h[1:]])
    assert assert_strategy_invariants(rewrite, sample(), keeps_system_messages=False)
    assert violation(rewrite).invariants == ("causal order", "system messages kept")


def test_an_invalid_output_the_other_checks_miss_is_named() -> None:
    stray = Message(role="user", content="summary", tool_call_id="zzz")
    err = violation(broken(lambda h: [h[0], stray, *h[5:]]), max_new_messages=1)
    assert err.invariants == ("valid history",)
    assert "misplaced_tool_call_id" in err.details[0]


def test_problems_the_input_already_had_are_not_blamed_on_the_strategy() -> None:
    orphan_first = [user("hi"), tool("x", "stray"), assistant("ok"), user("more"), assistant("k")]
    out = assert_strategy_invariants(broken(lambda h: [*h[:2], *h[3:]]), orphan_first)
    assert out is not None
    assert len(out) == 4


def test_several_broken_invariants_are_all_named() -> None:
    err = violation(broken(lambda h: [h[6], *h[1:4], h[5]]))
    assert err.invariants == (
        "causal order",
        "tool-call integrity",
        "system messages kept",
        "valid history",
    )
    assert str(err).startswith("FunctionStrategy(broken) broke 4 invariants:\n- 'causal order'")


# -- the context it runs with -------------------------------------------------------------------


def test_context_arguments_reach_the_strategy() -> None:
    llm = ScriptedLLM()
    seen = FunctionStrategy(lambda ctx: None)
    assert_strategy_invariants(
        seen, sample(), token_count=7, max_context_size=900, reserved_context_size=90, llm=llm,
        max_output_tokens=64,
    )  # fmt: skip
    ctx = seen.calls[0]
    assert (ctx.token_count, ctx.max_context_size, ctx.reserved_context_size) == (7, 900, 90)
    assert (ctx.llm, ctx.max_output_tokens) == (llm, 64)
    assert_strategy_invariants(seen, sample())
    assert seen.calls[1].token_count == HeuristicTokenCounter().count(sample())


def test_a_whole_context_may_be_given_but_not_with_context_arguments() -> None:
    ctx = CompactionContext(sample(), 1, 2, 3)
    seen = FunctionStrategy(lambda c: None)
    assert_strategy_invariants(seen, ctx)
    assert seen.calls == [ctx]
    with pytest.raises(TypeError, match="either a CompactionContext or a history"):
        assert_strategy_invariants(seen, ctx, token_count=5)


async def test_in_async_code_the_awaitable_variant_checks_the_same() -> None:
    with pytest.raises(RuntimeError, match="await check_strategy_invariants"):
        assert_strategy_invariants(FunctionStrategy(lambda ctx: None), sample())
    with pytest.raises(StrategyInvariantError) as info:
        await check_strategy_invariants(broken(lambda h: h[1:]), sample())
    assert info.value.invariants == ("system messages kept",)


def test_output_checks_alone() -> None:
    history = sample()
    assert_output_invariants(history, None)
    assert_output_invariants(history, [hide(m) for m in history])
    with pytest.raises(StrategyInvariantError, match="'causal order'") as info:
        assert_output_invariants(history, history[::-1], strategy="Reverser()")
    assert info.value.strategy == "Reverser()"


# -- the built-in strategies keep every invariant on every trace ----------------------------------

BUILT_INS: dict[str, tuple[Callable[[], CompactionStrategy], dict[str, Any]]] = {
    "hiding": (ToolResultHiding, {}),
    "hiding-batched": (lambda: ToolResultHiding(batch_turns=4, clear_at_least=5_000), {}),
    # always: mask each whole trace, which may fit the test context's window.
    "schema1": (lambda: Schema1Masking(always=True), {}),
    "schema1-keep2": (
        lambda: Schema1Masking(keep_last_k_per_tool=2, batch_turns=3, always=True),
        {},
    ),
    "truncation": (lambda: ToolResultTruncation(max_chars=6_000), {}),
    "guard": (lambda: ContextGuard(context_window=16_000), {}),
    "pipeline": (lambda: Pipeline(ToolResultTruncation(max_chars=6_000), ToolResultHiding()), {}),
    "summary": (lambda: LLMSummary(ScriptedLLM("The agent fixed a.py.")), {"max_new_messages": 1}),
    "hiding-then-summary": (
        lambda: HidingThenSummary(ScriptedLLM("Fixed a.py."), preserve_recent_n=1),
        {"max_new_messages": 1, "max_context_size": 20_000, "reserved_context_size": 5_000},
    ),
}


@pytest.mark.parametrize("name", list(BUILT_INS))
def test_every_built_in_strategy_keeps_the_invariants_on_every_trace(
    name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="ctxcompact.strategies.guard")
    make, options = BUILT_INS[name]
    changed = 0
    for trace in trace_names():
        out = assert_strategy_invariants(make(), from_openai(load_trace(trace)), **options)
        changed += out is not None
    assert changed > 0, f"{name} changed no trace: the check proved nothing"
