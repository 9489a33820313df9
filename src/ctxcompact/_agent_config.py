"""``Agent.from_config``: an agent, its models and its compaction from one TOML file."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from .exceptions import ConfigError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from pathlib import Path

    from ._agent import Agent
    from ._contract import LLM
    from ._controller import CompactionEvent
    from ._tools import ToolLike

__all__ = ["agent_from_config"]

A = TypeVar("A", bound="Agent")


def agent_from_config(
    cls: type[A],
    path: str | Path,
    *,
    llm: LLM | None,
    tools: Iterable[ToolLike],
    on_event: Callable[[CompactionEvent], object] | None,
) -> A:
    """See :meth:`ctxcompact.Agent.from_config`."""
    from ._config import Config, load_config
    from ._contract import LLM as LLMProtocol
    from ._controller import CompactionController
    from ._tokens import TokenCounter as TokenCounterProtocol
    from ._tokens import counter_from_config
    from .strategies._truncation import ToolResultTruncation

    config = load_config(path)
    owned: list[LLM] = []
    if llm is None:
        llm_config = config.agent.llm or config.compaction.llm
        if llm_config is None:
            raise ConfigError(
                "no model to talk to: add an [agent.llm] table (provider, model) or pass "
                "llm= to Agent.from_config",
                path=str(config.path or path),
                key="agent.llm",
            )
        from .llm import build_llm

        llm = build_llm(llm_config)
        owned.append(llm)
    # [compaction.llm] is a separate summarizer only when the agent has its own model from
    # [agent.llm]; otherwise the agent's model (maybe the one passed in) also summarizes.
    summary_llm = llm
    if config.compaction.llm is not None and config.agent.llm is not None:
        from .llm import build_llm

        summary_llm = build_llm(config.compaction.llm)
        owned.append(summary_llm)
    counter = counter_from_config(config.token_counting)
    controller = CompactionController.from_config(
        config,
        llm=summary_llm,
        token_counter=counter,
        dependencies={LLMProtocol: summary_llm, TokenCounterProtocol: counter, Config: config},
    )
    truncation = config.tool_result_truncation
    agent = cls(
        llm,
        tools=tools,
        system_prompt=config.agent.system_prompt,
        max_steps=config.agent.max_steps,
        tool_result_truncation=(
            ToolResultTruncation(
                max_chars=truncation.max_chars,
                head_chars=truncation.head_chars,
                tail_chars=truncation.tail_chars,
            )
            if truncation.enabled
            else None
        ),
        on_event=on_event,
        controller=controller,
    )
    agent._owned = owned
    return agent
