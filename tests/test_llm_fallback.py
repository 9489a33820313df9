"""A chain of summarizers in ``[compaction.llm] fallbacks``: the next model writes the summary
when one fails, each model behind its own circuit breaker, the request fitted to the smallest
window of the chain. Through the real OpenAI SDK against servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ctxcompact import Config, Message, wire
from ctxcompact.exceptions import ConfigError, LLMConnectionError, ServerError
from ctxcompact.llm import CircuitBreakerLLM, FallbackLLM
from ctxcompact.strategies import SUMMARY_PREFIX
from ctxcompact.testing import ScriptedLLM
from tests.helpers.gen import assistant, call, tool, user
from tests.helpers.proxy_servers import FakeUpstream, free_port, serve_in_thread
from tests.helpers.standin_summarizer import StandIn


def history(turns: int = 30) -> list[Message]:
    out = [user("fix the failing test in parser.py")]
    for k in range(turns):
        out += [assistant(None, call(f"c{k}", "read")), tool(f"c{k}", f"line {k} " * 150)]
    return [*out, assistant("fixed"), user("thanks"), assistant("welcome")]


def summarizer(url: str, **extra: Any) -> dict[str, Any]:
    return {"provider": "openai", "model": "m", "base_url": f"{url}/v1", "max_retries": 0, **extra}


def config(primary: dict[str, Any], *fallbacks: dict[str, Any]) -> Config:
    return Config.from_dict(
        {
            "compaction": {
                "strategy": "llm-summary",
                "max_context_size": 200_000,
                "reserved_context_size": 10_000,
                "llm": {**primary, "fallbacks": list(fallbacks)},
            }
        }
    )


def test_the_fallback_writes_the_summary_when_the_first_model_is_down(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    down, standin = FakeUpstream(status=503), StandIn()
    with serve_in_thread(down.app()) as bad, serve_in_thread(standin.app()) as good:
        wiring = wire(config(summarizer(bad), summarizer(good)))
        controller = wiring.controller()

        async def twice() -> tuple[Any, Any]:
            first = await controller.compact(history(), force=True)
            second = await controller.compact(history(), force=True)
            await wiring.llm.aclose()  # type: ignore[union-attr]
            return first, second

        first, second = asyncio.run(twice())
    assert first.event.status == "compacted", first.event.error
    assert first.history[0].text == "fix the failing test in parser.py"  # the task stays
    assert first.history[1].text.startswith(SUMMARY_PREFIX + "Stand-in summary")
    assert second.event.status == "compacted"
    chain = wiring.llm
    assert isinstance(chain, FallbackLLM)
    assert all(isinstance(m, CircuitBreakerLLM) for m in chain.models)
    # The first model failed once; its breaker then refused the second call unsent.
    assert len([r for r in down.received if r.path == "/v1/chat/completions"]) == 1
    assert chain.models[0].stats().refused == 1  # type: ignore[attr-defined]
    assert len(standin.requests) == 2


def test_when_every_model_fails_the_last_error_is_reported_and_the_history_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    down = FakeUpstream(status=500)
    nowhere = f"http://127.0.0.1:{free_port()}"
    with serve_in_thread(down.app()) as bad:
        wiring = wire(config(summarizer(bad), summarizer(nowhere)))
        before = history()

        async def run() -> Any:
            try:
                return await wiring.controller().compact(before, force=True)
            finally:
                await wiring.llm.aclose()  # type: ignore[union-attr]

        result = asyncio.run(run())
    assert result.event.status == "failed"
    assert result.history is before
    assert result.event.problem.exception_type == "LLMConnectionError"


def test_the_request_fits_the_smallest_window_of_the_chain(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    standin = StandIn()
    with serve_in_thread(standin.app()) as good:
        wiring = wire(
            config(
                summarizer(good, context_window=100_000),
                summarizer(good, context_window=2048),
            )
        )

        async def run() -> Any:
            try:
                return await wiring.controller().compact(history(), force=True)
            finally:
                await wiring.llm.aclose()  # type: ignore[union-attr]

        result = asyncio.run(run())
    assert result.event.status == "compacted"
    assert wiring.llm.context_window == 2048  # type: ignore[union-attr]
    (body,) = standin.requests  # the first model answered, with a request for the smaller
    assert body["max_tokens"] == 2048 // 4
    assert len(str(body["messages"])) < 2048 * 4


async def test_errors_that_are_not_model_failures_are_not_hidden_by_the_chain() -> None:
    chain = FallbackLLM([ScriptedLLM(RuntimeError("bug")), ScriptedLLM("never asked")])
    with pytest.raises(RuntimeError):
        await chain.complete([Message.user("hi")])
    assert chain.models[1].requests == []  # type: ignore[attr-defined]


async def test_each_model_is_tried_in_order_and_the_last_error_raised() -> None:
    first, second = ScriptedLLM(ServerError("down")), ScriptedLLM(LLMConnectionError("gone"))
    with pytest.raises(LLMConnectionError):
        await FallbackLLM([first, second]).complete([Message.user("hi")])
    assert len(first.requests) == len(second.requests) == 1


@pytest.mark.parametrize(
    ("data", "key"),
    [
        (
            {"compaction": {"llm": {**summarizer("http://x"), "fallbacks": [
                {**summarizer("http://y"), "fallbacks": [summarizer("http://z")]}]}}},
            "compaction.llm.fallbacks.0.fallbacks",  # an unknown key in a fallback
        ),
        (
            {"agent": {"llm": {**summarizer("http://x"), "fallbacks": [summarizer("http://y")]}}},
            "agent.llm.fallbacks",
        ),
    ],
)  # fmt: skip
def test_only_the_summarizer_has_one_flat_chain(data: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Config.from_dict(data)
    assert caught.value.key == key
