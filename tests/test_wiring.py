"""The composition root, results instead of shared state, and one per-request step everywhere.

The centre piece sends a recorded conversation through the real proxy (over loopback, a fake
upstream recording bodies) and through the replay engine in proxy mode with the same config,
and asserts the upstream received exactly the inputs the replay predicted.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from ctxcompact import (
    LLM,
    CompactionController,
    CompactionStrategy,
    Config,
    ControllerState,
    Dependencies,
    HeuristicTokenCounter,
    Message,
    TokenCounter,
    from_openai,
    load_config,
    load_strategy,
    to_openai,
    wire,
)
from ctxcompact.exceptions import ConfigError, StrategyLoadError
from ctxcompact.replay import replay
from ctxcompact.strategies import LLMSummary, Pipeline, ToolResultHiding
from ctxcompact.testing import FunctionStrategy, ScriptedLLM

from .helpers.gen import assistant, call, system, tool, user
from .helpers.proxy_servers import FakeUpstream, serve_in_thread
from .helpers.traces import load_trace

# -- wiring -----------------------------------------------------------------------------------


def test_wire_builds_every_part_from_one_config() -> None:
    config = Config.from_dict(
        {
            "compaction": {
                "strategy": "tool-result-hiding",
                "max_context_size": 32_000,
                "reserved_context_size": 4_000,
                "max_messages": 300,
                "params": {"preserve_recent_n": 2},
            },
            "observation_masking": {"schema1": {"enabled": True, "window_turns": 3}},
            "context_guard": {"enabled": True, "reserve_tokens": 1_000},
        }
    )
    wiring = wire(config)
    assert isinstance(wiring.strategy, ToolResultHiding)
    assert wiring.strategy.preserve_recent_n == 2
    assert [type(t).__name__ for t in wiring.transforms] == ["Schema1Masking", "ContextGuard"]
    assert (wiring.max_context_size, wiring.reserved_context_size) == (32_000, 4_000)
    controller = wiring.controller()
    assert controller.max_messages == 300
    assert controller.transforms == wiring.transforms
    assert wiring.owned == ()


def test_wire_overrides_win_and_are_validated_like_the_file() -> None:
    config = Config.from_dict({"compaction": {"max_context_size": 100_000}})
    # The default strategy summarizes: without an LLM, wire() now refuses it (NeedsLLM).
    config = config.with_compaction(strategy="tool-result-hiding")
    wiring = wire(config, max_context_size=60_000, reserved_context_size=1_000)
    assert (wiring.max_context_size, wiring.reserved_context_size) == (60_000, 1_000)
    assert wiring.config.compaction.max_context_size == 60_000
    with pytest.raises(ConfigError, match=r"compaction\.reserved_context_size"):
        wire(config, max_context_size=40_000)  # the default reserve of 50,000 no longer fits


def test_strategy_gets_the_same_counter_and_llm_the_controller_uses() -> None:
    llm = ScriptedLLM("summary")
    counter = HeuristicTokenCounter()
    config = Config.from_dict(
        {
            "compaction": {
                "strategy": "llm-summary",
                "max_context_size": 10_000,
                "reserved_context_size": 100,
            }
        }
    )
    wiring = wire(config, llm=llm, token_counter=counter)
    assert isinstance(wiring.strategy, LLMSummary)
    assert wiring.strategy.llm is llm
    controller = wiring.controller()
    assert controller.llm is llm
    assert controller.token_counter is counter


# -- Pipeline passes its dependencies on -------------------------------------------------------


def test_pipeline_steps_get_the_dependencies_the_pipeline_was_offered() -> None:
    llm = ScriptedLLM("short summary")
    pipeline = load_strategy(
        "pipeline",
        dependencies={LLM: llm},
        params={"steps": ["tool-result-truncation", "llm-summary"]},
    )
    assert isinstance(pipeline, Pipeline)
    summary = pipeline.strategies[1]
    assert isinstance(summary, LLMSummary)
    assert summary.llm is llm


def test_pipeline_from_config_gives_its_llm_step_the_configured_model() -> None:
    llm = ScriptedLLM("a summary")
    config = Config.from_dict(
        {
            "compaction": {
                "strategy": "pipeline",
                "max_context_size": 10_000,
                "reserved_context_size": 100,
                "params": {
                    "steps": [{"strategy": "llm-summary", "params": {"max_preserved_messages": 2}}]
                },
            }
        }
    )
    strategy = wire(config, llm=llm).strategy
    assert isinstance(strategy, Pipeline)
    step = strategy.strategies[0]
    assert isinstance(step, LLMSummary)
    assert step.llm is llm


def test_missing_dependency_names_the_public_type() -> None:
    class NeedsCounter:
        def __init__(self, counter: TokenCounter) -> None:
            self.counter = counter

        async def compact(self, ctx: object) -> None:
            return None

    import sys
    import types

    module = types.ModuleType("needs_counter_mod")
    module.NeedsCounter = NeedsCounter  # type: ignore[attr-defined]
    sys.modules["needs_counter_mod"] = module
    try:
        with pytest.raises(StrategyLoadError) as info:
            load_strategy("needs_counter_mod:NeedsCounter")
    finally:
        del sys.modules["needs_counter_mod"]
    message = str(info.value)
    assert "ctxcompact._" not in message
    assert "TokenCounter" in message


def test_dependencies_is_a_read_only_mapping() -> None:
    counter = HeuristicTokenCounter()
    offer = Dependencies({TokenCounter: counter})
    assert offer[TokenCounter] is counter
    assert dict(offer) == {TokenCounter: counter}
    assert not hasattr(offer, "__setitem__")


# -- results and per-conversation state ---------------------------------------------------------


def keep_last(n: int) -> CompactionStrategy:
    return FunctionStrategy(lambda ctx: list(ctx.history[-n:]), name=f"keep_last_{n}")


def big_history(n: int) -> list[Message]:
    return [user(f"m{i} " + "x" * 400) for i in range(n)]


async def test_one_controller_serves_concurrent_conversations_with_their_own_state() -> None:
    gate = asyncio.Event()

    async def slow(ctx: Any) -> list[Message]:
        await gate.wait()
        return list(ctx.history[-1:])

    controller = CompactionController(
        FunctionStrategy(slow), max_context_size=500, reserved_context_size=100
    )
    a, b = big_history(8), big_history(5)
    task_a = asyncio.ensure_future(controller.compact(a, state=ControllerState()))
    task_b = asyncio.ensure_future(controller.compact(b, state=ControllerState()))
    await asyncio.sleep(0)
    gate.set()
    result_a, result_b = await task_a, await task_b
    # Each result carries its own event; nothing is left on the controller to race on.
    assert result_a.event is not None
    assert result_a.event.messages_before == 8
    assert result_b.event is not None
    assert result_b.event.messages_before == 5
    assert not hasattr(controller, "last_event")
    assert controller.state.failures == 0  # the shared default state was not touched


async def test_failures_in_one_state_do_not_open_another_states_circuit() -> None:
    def boom(ctx: Any) -> None:
        raise RuntimeError("down")

    controller = CompactionController(
        FunctionStrategy(boom), max_context_size=500, reserved_context_size=100, max_failures=1
    )
    failing = ControllerState()
    first = await controller.compact(big_history(8), state=failing)
    again = await controller.compact(big_history(9), state=failing)
    fresh = await controller.compact(big_history(9), state=ControllerState())
    assert first.event is not None
    assert first.event.status == "failed"
    assert again.event is not None
    assert again.event.status == "circuit_open"
    assert fresh.event is not None
    assert fresh.event.status == "failed"


async def test_message_count_trigger_fires_above_max_messages() -> None:
    controller = CompactionController(
        keep_last(2),
        max_context_size=1_000_000,
        reserved_context_size=100,
        max_messages=5,
        cache_pricing=None,  # keep the rewrite whatever it saves: this is about the trigger
    )
    short = [user("a")] * 5
    assert (await controller.compact(short)).event is None
    result = await controller.compact([*short, user("b")])
    assert result.event is not None
    assert result.event.trigger == "messages"
    assert len(result.history) == 2


async def test_step_compacts_then_transforms_and_reports_both() -> None:
    seen: list[int] = []

    def record(ctx: Any) -> None:
        seen.append(len(ctx.history))

    controller = CompactionController(
        keep_last(2),
        max_context_size=500,
        reserved_context_size=100,
        transforms=[FunctionStrategy(record)],
    )
    history = big_history(8)
    step = await controller.step(history)
    assert step.compacted
    # keep_last(2) lost the task: the controller put it back (pin_restored)
    assert len(step.history) == 3
    assert step.history[0].text.startswith("m0 ")
    assert seen == [3]  # the transform saw the compacted history
    assert step.request == list(step.history)
    assert step.skipped == ()


async def test_observe_usage_accepts_a_missing_usage() -> None:
    controller = CompactionController(keep_last(1), max_context_size=500, reserved_context_size=1)
    history = [user("hi")]
    before = controller.token_count(history)
    controller.observe_usage(None, history)
    assert controller.token_count(history) == before


# -- the same bodies through the proxy and through replay ------------------------------------------


PROXY_CONFIG = """\
[compaction]
strategy = "tool-result-hiding"
max_context_size = {window}
reserved_context_size = 2000
[compaction.params]
preserve_recent_n = 3
[observation_masking.schema1]
enabled = true
window_turns = 6
batch_turns = 0
always = true
[proxy]
openai_base_url = "{upstream}/v1"
anthropic_base_url = "{upstream}"
max_body_bytes = 10000000
"""


def test_proxy_sends_exactly_what_replay_predicts_on_a_real_trace(tmp_path: Path) -> None:
    from ctxcompact.proxy import create_app

    raw = load_trace("msa-gemini3pro__astropy__astropy-12907")
    conversation = from_openai(raw)
    fake = FakeUpstream()
    with serve_in_thread(fake.app()) as upstream:
        path = tmp_path / "proxy.toml"
        path.write_text(PROXY_CONFIG.format(window=8_000, upstream=upstream), encoding="utf-8")
        config = load_config(path)
        with serve_in_thread(create_app(config)) as proxy, httpx.Client() as client:
            for i, message in enumerate(conversation):
                if message.role != "assistant":
                    continue
                body = {"model": "m", "messages": to_openai(conversation[:i])}
                r = client.post(f"{proxy}/v1/chat/completions", json=body, timeout=30)
                assert r.status_code == 200, r.text
    sent = [json.loads(r.body)["messages"] for r in fake.received]

    predicted: list[list[dict[str, Any]]] = []
    # As `ctxcompact replay` builds it: a store of its own, so its markers name their handles
    # as the proxy's (its default file) do.
    wiring = wire(config, per_conversation=True)
    controller = wiring.controller()
    asyncio.run(
        replay(
            conversation,
            controller,
            counter=wiring.counter,
            mode="proxy",
            on_call=lambda _, request: predicted.append(to_openai(request)),
        )
    )
    assert len(sent) == len(predicted) == sum(m.role == "assistant" for m in conversation)
    assert sent == predicted
    # The comparison is not vacuous: the proxy did rewrite most requests.
    rewritten = sum(s != to_openai(conversation[: len(s)]) for s in sent)
    assert rewritten > len(sent) // 2


async def test_agent_mode_replay_keeps_the_compacted_history() -> None:
    history: list[Message] = [system("s"), user("task")]
    for k in range(12):
        history += [assistant(None, call(f"c{k}")), tool(f"c{k}", "output " * 200)]
    history.append(assistant("done"))
    counter = HeuristicTokenCounter()

    def make() -> CompactionController:
        return CompactionController(
            ToolResultHiding(preserve_recent_n=2),
            max_context_size=3_000,
            reserved_context_size=500,
            token_counter=counter,
        )

    agent = await replay(history, make(), counter=counter, mode="agent")
    proxy = await replay(history, make(), counter=counter, mode="proxy")
    baseline = await replay(history, None, counter=counter, window=(3_000, 500))
    assert agent.calls == proxy.calls == baseline.calls == 13
    assert agent.compactions >= 1
    assert baseline.calls_over_window > 0
    assert agent.calls_over_window < baseline.calls_over_window


def test_the_summarizers_window_comes_from_models_when_not_written() -> None:
    config = Config.from_dict(
        {
            "compaction": {
                "strategy": "llm-summary",
                "max_context_size": 100_000,
                "reserved_context_size": 1_000,
                "llm": {
                    "provider": "openai",
                    "model": "my-local-model",
                    "base_url": "http://127.0.0.1:9/v1",
                    "api_key_env": "NO_SUCH_VAR",
                },
            },
            "models": {"my-local-model": 2_048},
        }
    )
    wiring = wire(config)
    assert getattr(wiring.llm, "context_window", None) == 2_048


def _summarizer_config(**llm: Any) -> Config:
    table = {
        "provider": "openai",
        "model": "m",
        "base_url": "http://127.0.0.1:9/v1",
        "api_key_env": "NO_SUCH_VAR",
        **llm,
    }
    return Config.from_dict(
        {
            "compaction": {
                "strategy": "hiding-then-summary",
                "max_context_size": 100_000,
                "reserved_context_size": 1_000,
                "llm": table,
            }
        }
    )


def test_the_summarizer_from_the_config_sits_in_one_shared_circuit_breaker() -> None:
    from ctxcompact.llm import CircuitBreakerLLM
    from ctxcompact.llm.openai import OpenAIChatLLM

    wiring = wire(_summarizer_config(breaker_failures=3, breaker_cooldown=12.5))
    breaker = wiring.llm
    assert isinstance(breaker, CircuitBreakerLLM)
    assert isinstance(breaker.llm, OpenAIChatLLM)
    assert (breaker.failure_threshold, breaker.cooldown) == (3, 12.5)
    # The strategy and every controller built from the wiring call through the same breaker.
    assert wiring.strategy.summary.llm is breaker  # type: ignore[attr-defined]
    assert wiring.controller().llm is breaker
    assert wiring.owned == (breaker,)
    defaults = wire(_summarizer_config()).llm
    assert isinstance(defaults, CircuitBreakerLLM)
    assert (defaults.failure_threshold, defaults.cooldown) == (1, 30.0)


def test_breaker_failures_0_builds_no_breaker() -> None:
    from ctxcompact.llm.openai import OpenAIChatLLM

    assert isinstance(wire(_summarizer_config(breaker_failures=0)).llm, OpenAIChatLLM)


@pytest.mark.parametrize(("key", "value"), [("breaker_failures", -1), ("breaker_cooldown", 0)])
def test_bad_breaker_settings_name_their_key(key: str, value: float) -> None:
    with pytest.raises(ConfigError) as info:
        _summarizer_config(**{key: value})
    assert info.value.key == f"compaction.llm.{key}"
