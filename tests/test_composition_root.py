"""One composition root: ``wire`` takes a config or a path and builds every variant its callers
need (per-model windows, one conversation per controller); the engine, the agent and the
integrations receive ready objects, with short forms that build through the same place."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ctxcompact import Agent, CompactionController, Config, Message, load_config, wire
from ctxcompact.exceptions import ConfigError, UserError
from ctxcompact.store import MemoryStore
from ctxcompact.strategies import ContextGuard, Tiered, ToolResultHiding
from ctxcompact.testing import ScriptedLLM

ROOT = Path(__file__).resolve().parent.parent
RECOMMENDED = ROOT / "examples" / "recommended.toml"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(text, encoding="utf-8")
    return path


# -- a config or a path, everywhere -----------------------------------------------------------


@pytest.mark.parametrize("source", [str(RECOMMENDED), RECOMMENDED], ids=["str", "Path"])
def test_from_config_takes_the_path_a_user_passes(source: str | Path) -> None:
    controller = CompactionController.from_config(source)
    from_loaded = CompactionController.from_config(load_config(RECOMMENDED))
    assert isinstance(controller.strategy, Tiered)
    assert (controller.max_context_size, controller.reserved_context_size) == (16_000, 4_000)
    assert repr(controller) == repr(from_loaded)


def test_from_config_builds_the_subclass_it_is_called_on() -> None:
    class Mine(CompactionController):
        pass

    assert type(Mine.from_config(RECOMMENDED)) is Mine


def test_a_path_that_is_not_there_is_a_config_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match="file not found") as info:
        CompactionController.from_config(missing)
    assert info.value.path == str(missing)
    with pytest.raises(ConfigError, match="file not found"):
        wire(str(missing))


def test_something_else_than_a_config_or_a_path_is_a_user_error() -> None:
    with pytest.raises(UserError, match="expected a Config or the path of a TOML file, got dict"):
        CompactionController.from_config({"compaction": {}})


def test_agent_from_config_takes_a_loaded_config_too(tmp_path: Path) -> None:
    text = (
        '[agent]\nsystem_prompt = "be brief"\nmax_steps = 7\n'
        '[compaction]\nstrategy = "tool-result-hiding"\nmax_context_size = 20000\n'
        "reserved_context_size = 2000\n"
        "[tool_result_truncation]\nenabled = true\nmax_chars = 500\n"
        "head_chars = 100\ntail_chars = 100\n"
    )
    llm = ScriptedLLM("ok")
    agent = Agent.from_config(load_config(write(tmp_path, text)), llm=llm)
    assert agent.llm is llm
    assert (agent.max_steps, agent.system_prompt) == (7, "be brief")
    assert agent.controller.max_context_size == 20_000
    assert isinstance(agent.controller.strategy, ToolResultHiding)
    assert agent.tool_result_truncation is not None
    assert agent.tool_result_truncation.max_chars == 500


# -- the variants the proxy and the command line need -----------------------------------------


def guard_config(**compaction: object) -> Config:
    return Config.from_dict(
        {
            "compaction": {"strategy": "tool-result-hiding", **compaction},
            "context_guard": {"enabled": True, "reserve_tokens": 1_000},
        }
    )


def test_per_model_windows_build_without_a_window_and_each_controller_gets_one() -> None:
    wiring = wire(guard_config(reserved_context_size=500), per_model_windows=True)
    assert wiring.max_context_size is None
    assert wiring.transforms == ()
    with pytest.raises(ConfigError) as info:
        wiring.controller()
    assert info.value.key == "compaction.max_context_size"
    small, large = (wiring.controller(max_context_size=w) for w in (8_192, 128_000))
    assert (small.max_context_size, large.max_context_size) == (8_192, 128_000)
    guards = [c.transforms[0] for c in (small, large)]
    assert all(isinstance(g, ContextGuard) for g in guards)
    assert [g.budget(None) for g in guards] == [7_192, 127_000]  # type: ignore[attr-defined]
    assert small.strategy is large.strategy is wiring.strategy  # shared, as the counter is
    assert small.token_counter is large.token_counter is wiring.counter


def test_a_configured_window_is_still_required_without_per_model_windows() -> None:
    with pytest.raises(ConfigError) as info:
        wire(guard_config(reserved_context_size=500))
    assert info.value.key == "compaction.max_context_size"
    # and a configured window is used even when per-model windows are allowed
    assert wire(guard_config(model="gpt-4", reserved_context_size=500), per_model_windows=True)


def test_per_conversation_gives_each_controller_its_own_strategy_transforms_and_store() -> None:
    config = Config.from_dict(
        {
            "compaction": {
                "strategy": "tool-result-hiding",
                "max_context_size": 20_000,
                "reserved_context_size": 2_000,
            },
            "context_guard": {"enabled": True, "reserve_tokens": 1_000},
            "store": {"recall": True, "max_bytes": 4096},
        }
    )
    wiring = wire(config, per_conversation=True)
    assert wiring.store is None  # nothing opened: each conversation gets its own
    one, two = wiring.controller(), wiring.controller()
    assert one.strategy is not two.strategy
    assert one.transforms[0] is not two.transforms[0]
    assert isinstance(one.store, MemoryStore)
    assert isinstance(two.store, MemoryStore)
    assert one.store is not two.store
    assert one.store.max_bytes == 4096
    assert one.recall_placeholder == config.store.recall_placeholder
    shared = wire(config)  # without: one strategy, no store (nothing asked to open one)
    assert shared.controller().strategy is shared.controller().strategy
    assert shared.controller().store is None


# -- the agent receives a controller; the short form builds one -------------------------------


def test_the_agent_takes_a_ready_controller_as_its_second_argument() -> None:
    controller = CompactionController(
        ToolResultHiding(), max_context_size=10_000, reserved_context_size=100
    )
    agent = Agent(ScriptedLLM("hello"), controller)
    assert agent.controller is controller
    assert asyncio.run(agent.run("hi")) == "hello"
    assert Agent(ScriptedLLM(), compaction=controller).controller is controller
    with pytest.raises(UserError, match="pass the controller once"):
        Agent(ScriptedLLM(), controller, compaction=controller)


def test_with_strategy_builds_the_controller_the_keywords_describe() -> None:
    store = MemoryStore()
    llm = ScriptedLLM("done")
    agent = Agent.with_strategy(
        llm,
        ToolResultHiding(),
        max_context_size=20_000,
        reserved_context_size=2_000,
        trigger_ratio=0.8,
        store=store,
        recall=True,
        system_prompt="be brief",
    )
    controller = agent.controller
    assert (controller.max_context_size, controller.reserved_context_size) == (20_000, 2_000)
    assert controller.trigger_ratio == 0.8
    assert controller.store is store
    assert controller.llm is llm
    assert controller.recall_placeholder is not None  # recall: placeholders name the tool
    assert "recall_tool_result" in agent.tools
    assert agent.history == [Message.system("be brief")]
    default = Agent.with_strategy(llm).controller
    assert type(default.strategy).__name__ == "LLMSummary"
    assert (default.max_context_size, default.reserved_context_size) == (128_000, 50_000)


def test_the_compaction_keyword_is_the_same_short_form() -> None:
    made = Agent(ScriptedLLM(), compaction=ToolResultHiding(), max_context_size=60_000)
    short = Agent.with_strategy(ScriptedLLM(), ToolResultHiding(), max_context_size=60_000)
    assert repr(made.controller) == repr(short.controller)
