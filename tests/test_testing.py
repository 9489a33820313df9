from __future__ import annotations

import pytest

from ctxcompact import (
    LLM,
    CompactionContext,
    CompactionStrategy,
    Completion,
    Message,
    ToolSpec,
    Usage,
)
from ctxcompact.exceptions import RateLimitError
from ctxcompact.testing import FunctionStrategy, LLMRequest, ScriptedLLM
from tests.gen import user


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
