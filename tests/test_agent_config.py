"""Agent.from_config: the model, strategy, limits and agent settings come from a TOML file."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxcompact import (
    LLM,
    Agent,
    CompactionContext,
    Config,
    Message,
    TiktokenCounter,
    TokenCounter,
)
from ctxcompact.exceptions import ConfigError, StrategyLoadError
from ctxcompact.llm import CircuitBreakerLLM
from ctxcompact.strategies import LLMSummary, ToolResultHiding
from ctxcompact.testing import ScriptedLLM

ROOT = Path(__file__).resolve().parents[1]


class Recorder:
    """A strategy named in TOML as ``tests.test_agent_config:Recorder``: it records what
    the loader injected by annotation and what the params set."""

    def __init__(
        self, llm: LLM, counter: TokenCounter, config: Config, *, tag: str = "none"
    ) -> None:
        self.llm, self.counter, self.config, self.tag = llm, counter, config, tag

    async def compact(self, ctx: CompactionContext) -> None:
        return None


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agent.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_settings_and_strategy_come_from_the_file(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
[compaction]
strategy = "tool-result-hiding"
max_context_size = 32000
reserved_context_size = 4000
trigger_ratio = 0.6

[compaction.params]
preserve_recent_n = 2

[tool_result_truncation]
enabled = true
max_chars = 3000
head_chars = 1000
tail_chars = 1000

[token_counting]
method = "tiktoken"

[agent]
max_steps = 7
system_prompt = "Be careful."
""",
    )
    llm = ScriptedLLM()
    agent = Agent.from_config(path, llm=llm)
    assert agent.llm is llm
    strategy = agent.controller.strategy
    assert isinstance(strategy, ToolResultHiding)
    assert strategy.preserve_recent_n == 2
    controller = agent.controller
    assert (controller.max_context_size, controller.reserved_context_size) == (32000, 4000)
    assert controller.trigger_ratio == 0.6
    assert isinstance(controller.token_counter, TiktokenCounter)
    assert agent.max_steps == 7
    assert agent.history == [Message.system("Be careful.")]
    truncation = agent.tool_result_truncation
    assert truncation is not None
    assert (truncation.max_chars, truncation.head_chars, truncation.tail_chars) == (
        3000,
        1000,
        1000,
    )


def test_a_module_class_strategy_gets_the_agents_llm_counter_and_config(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
[compaction]
strategy = "tests.test_agent_config:Recorder"
max_context_size = 10000
reserved_context_size = 1000

[compaction.params]
tag = "from-toml"
""",
    )
    llm = ScriptedLLM()
    agent = Agent.from_config(path, llm=llm)
    recorder = agent.controller.strategy
    assert isinstance(recorder, Recorder)
    assert recorder.llm is llm
    assert recorder.counter is agent.controller.token_counter
    assert recorder.config.path == path
    assert recorder.tag == "from-toml"


async def test_the_example_config_gives_a_working_agent_with_the_given_llm() -> None:
    llm = ScriptedLLM("hello")
    agent = Agent.from_config(ROOT / "config.example.toml", llm=llm)
    # [compaction.llm] is configured there, but without [agent.llm] the agent's own model
    # (here the one passed in) is the one the summary strategy uses.
    assert type(agent.controller.strategy).__name__ == "HidingThenSummary"
    assert agent.controller.llm is llm
    assert await agent.run("hi") == "hello"


def test_default_strategy_is_llm_summary_with_the_agents_llm(tmp_path: Path) -> None:
    path = write(tmp_path, "[compaction]\nmax_context_size = 100000\n")
    llm = ScriptedLLM()
    agent = Agent.from_config(path, llm=llm)
    assert isinstance(agent.controller.strategy, LLMSummary)
    assert agent.controller.strategy.llm is llm


def test_models_are_built_from_agent_llm_and_compaction_llm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ctxcompact.llm.anthropic import AnthropicLLM
    from ctxcompact.llm.openai import OpenAIChatLLM

    monkeypatch.setenv("CTXCOMPACT_TEST_KEY", "sk-test")
    path = write(
        tmp_path,
        """
[compaction]
strategy = "llm-summary"
max_context_size = 10000
reserved_context_size = 1000

[compaction.llm]
provider = "anthropic"
model = "claude-haiku-4-5"
api_key_env = "CTXCOMPACT_TEST_KEY"

[agent.llm]
provider = "openai"
model = "gpt-4o-mini"
base_url = "http://127.0.0.1:9/v1"
api_key_env = "CTXCOMPACT_TEST_KEY"
""",
    )
    agent = Agent.from_config(path)
    assert isinstance(agent.llm, OpenAIChatLLM)
    summary = agent.controller.strategy
    assert isinstance(summary, LLMSummary)
    # The summarizer sits in its own circuit breaker; the agent's model does not.
    assert isinstance(summary.llm, CircuitBreakerLLM)
    assert isinstance(summary.llm.llm, AnthropicLLM)
    assert agent.controller.llm is summary.llm


def test_the_compaction_llm_runs_the_agent_when_there_is_no_agent_llm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ctxcompact.llm.openai import OpenAIChatLLM

    monkeypatch.setenv("CTXCOMPACT_TEST_KEY", "sk-test")
    path = write(
        tmp_path,
        """
[compaction]
max_context_size = 10000
reserved_context_size = 1000

[compaction.llm]
provider = "openai"
model = "gpt-4o-mini"
api_key_env = "CTXCOMPACT_TEST_KEY"
""",
    )
    agent = Agent.from_config(path)
    assert isinstance(agent.llm, OpenAIChatLLM)
    assert agent.controller.strategy.llm is agent.llm  # type: ignore[attr-defined]


def test_no_model_anywhere_is_a_config_error_naming_the_table(tmp_path: Path) -> None:
    path = write(tmp_path, "[compaction]\nmax_context_size = 10000\nreserved_context_size = 100\n")
    with pytest.raises(ConfigError, match=r"agent\.llm") as info:
        Agent.from_config(path)
    assert str(path) in str(info.value)


def test_config_errors_surface_with_their_file_and_key(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[compaction]\nstrategy = "no-such-strategy"\n'
        "max_context_size = 9\nreserved_context_size = 1\n",
    )
    with pytest.raises(StrategyLoadError, match="no-such-strategy"):
        Agent.from_config(path, llm=ScriptedLLM())
    missing = write(tmp_path, '[compaction]\nstrategy = "tool-result-hiding"\n')
    with pytest.raises(ConfigError, match="max_context_size"):
        Agent.from_config(missing, llm=ScriptedLLM())


async def test_aclose_closes_the_models_built_from_the_file_but_not_one_passed_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ctxcompact.llm.anthropic import AnthropicLLM
    from ctxcompact.llm.openai import OpenAIChatLLM

    monkeypatch.setenv("CTXCOMPACT_TEST_KEY", "sk-test")
    tables = """
[compaction.llm]
provider = "anthropic"
model = "claude-haiku-4-5"
base_url = "http://127.0.0.1:9"
api_key_env = "CTXCOMPACT_TEST_KEY"

[agent.llm]
provider = "openai"
model = "gpt-4o-mini"
base_url = "http://127.0.0.1:9/v1"
api_key_env = "CTXCOMPACT_TEST_KEY"
"""
    path = write(tmp_path, "[compaction]\nmax_context_size = 100000\n" + tables)
    async with Agent.from_config(path) as agent:
        assert isinstance(agent.llm, OpenAIChatLLM)
        breaker = agent.controller.llm
        assert isinstance(breaker, CircuitBreakerLLM)
        summary = breaker.llm
        assert isinstance(summary, AnthropicLLM)
        assert not agent.llm.client.is_closed()
    assert agent.llm.client.is_closed()
    assert summary.client.is_closed()  # closed through its breaker

    mine = OpenAIChatLLM("m", base_url="http://127.0.0.1:9/v1", api_key="k")
    async with Agent.from_config(path, llm=mine) as agent:
        breaker = agent.controller.llm
    assert not mine.client.is_closed()  # the caller's model stays the caller's to close
    assert isinstance(breaker, CircuitBreakerLLM)
    summary = breaker.llm
    assert isinstance(summary, AnthropicLLM)
    assert summary.client.is_closed()
    await mine.aclose()
