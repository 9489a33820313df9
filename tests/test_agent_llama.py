"""The agent through the real OpenAI adapter against a local llama.cpp server (Gemma 3 270M).

Short real runs: a plain answer with the provider's usage feeding the controller, and the
reactive trigger, where the server itself refuses a prompt longer than its window and the
agent recovers by a forced compaction.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from ctxcompact import (
    CONTINUE_PROMPT,
    Agent,
    CompactionContext,
    CompactionRecord,
    Message,
    check_history,
)
from ctxcompact.exceptions import MaxStepsExceeded
from ctxcompact.llm.openai import OpenAIChatLLM
from ctxcompact.testing import FunctionStrategy
from tests.helpers.llama_server import LlamaServer

pytestmark = pytest.mark.llama


@pytest.fixture
async def real_llm(llama_server: LlamaServer) -> AsyncIterator[OpenAIChatLLM]:
    llm = OpenAIChatLLM(
        llama_server.model,
        base_url=llama_server.base_url,
        api_key="local",
        max_tokens=24,
        max_retries=0,
    )
    yield llm
    await llm.aclose()


def check_answered(agent: Agent, answer: str, user_text: str) -> None:
    """The run ended with an answer; a first answer cut at max_tokens was followed by one
    request to be concise (the tiny model often runs past 24 tokens)."""
    assert answer.strip()
    roles = [m.role for m in agent.history]
    assert roles[:2] == ["system", "user"]
    # After a compaction that dropped messages, the agent's default store names them in a note
    # appended to the task (issue 20): the task itself is there verbatim.
    task = agent.history[1].text
    assert task == user_text or (
        task.startswith(user_text + "\n\n[ctxcompact: ") and "recall_tool_result(" in task
    )
    if len(roles) > 3:
        assert roles[2:] == ["assistant", "user", "assistant"]
        assert agent.history[3].text == CONTINUE_PROMPT
    else:
        assert roles[2:] == ["assistant"]
    assert agent.history[-1].text == answer


def keep_system_and_last_user(ctx: CompactionContext) -> list[Message]:
    history = list(ctx.history)
    last_user = max(i for i, m in enumerate(history) if m.role == "user")
    return [m for m in history[:last_user] if m.role == "system"] + history[last_user:]


async def test_a_short_real_run_reports_usage_to_the_controller(
    real_llm: OpenAIChatLLM,
    llama_server: LlamaServer,
) -> None:
    agent = Agent(
        real_llm,
        system_prompt="Answer in one short sentence.",
        compaction=FunctionStrategy(keep_system_and_last_user),
        max_context_size=llama_server.n_ctx,
        reserved_context_size=256,
    )
    answer = await agent.run("What colour is the sky on a clear day?")
    check_answered(agent, answer, "What colour is the sky on a clear day?")
    assert agent.stop_reason in ("answer", "length")
    # The count now starts from the server's usage, not from the heuristic estimate alone.
    estimate = agent.controller.token_counter.count(agent.history)
    assert agent.controller.token_count(agent.history) != estimate


async def test_the_server_refusing_a_too_long_prompt_triggers_a_forced_compaction(
    real_llm: OpenAIChatLLM,
) -> None:
    strategy = FunctionStrategy(keep_system_and_last_user)
    agent = Agent(
        real_llm,
        system_prompt="Answer in one short sentence.",
        compaction=strategy,
        # Far above the real window, so only the server's refusal can trigger compaction.
        max_context_size=1_000_000,
        reserved_context_size=1_000,
    )
    for i in range(6):  # ~6 x 700 tokens: well past the server's 2,048-token window
        agent.add(Message.user(f"note {i}: " + "lorem ipsum dolor sit amet " * 120))
        agent.add(Message.assistant(f"noted {i}"))
    answer = await agent.run("Say hello.")
    [record] = [e for e in agent.transcript if isinstance(e, CompactionRecord)]
    assert (record.event.trigger, record.event.status) == ("forced", "compacted")
    assert len(strategy.calls) == 1
    # The strategy drops the task (the first user message, "note 0"); the controller puts it
    # back, verbatim, and says so (the default store's drop note goes on the newest one).
    assert [p.kind for p in record.event.problems] == ["pin_restored"]
    assert answer.strip()
    assert [m.role for m in agent.history[:3]] == ["system", "user", "user"]
    assert agent.history[1].text.startswith("note 0: lorem ipsum")
    assert agent.history[2].text.startswith("Say hello.\n\n[ctxcompact: ")
    assert agent.history[-1].text == answer
    assert len(agent.messages) == 1 + 12 + len(agent.history) - 2  # the transcript kept all


async def test_a_real_run_with_tool_schemas_completes(real_llm: OpenAIChatLLM) -> None:
    """The schemas built from Python functions go over the wire and the run completes
    (the tiny model may answer directly or call the tool; both paths are the real loop)."""

    def add(a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: The first.
            b: The second.
        """
        return a + b

    agent = Agent(
        real_llm,
        tools=[add],
        system_prompt="Use the add tool to add numbers.",
        compaction=FunctionStrategy(keep_system_and_last_user),
        max_context_size=2048,
        reserved_context_size=256,
        max_steps=4,
    )
    try:
        answer = await agent.run("What is 2 + 3?")
    except MaxStepsExceeded:
        answer = None  # a tiny model may keep calling the tool; the bound still held
    assert check_history(agent.history) == []
    assert agent.steps <= 4
    for message in agent.history:
        if message.role == "tool":  # every call the model made was run and answered
            assert message.text == "5" or message.is_error
    if answer is not None:
        assert agent.history[-1].text == answer
