"""Tiered's summary tier made ahead of time: written in the background below the trigger,
swapped in when it fires, never awaited by the agent, and incremental (the second and later
summaries send the previous summary plus what came after it, nothing it already covers).

In-process, a conversation grows one step at a time through ``controller.step`` and
``controller.settle()`` (the time the agent's model takes to answer) with a
:class:`ScriptedLLM` recording what it was sent and when; over real HTTP, ``ctxcompact
replay`` runs ``examples/recommended-llm.toml`` on real traces against the deterministic
stand-in summarizer on 127.0.0.1, through the real OpenAI SDK.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
from typing import Any

import pytest

from ctxcompact import (
    CompactionContext,
    CompactionController,
    Completion,
    HeuristicTokenCounter,
    Message,
    summarizes_ahead,
)
from ctxcompact.cli import main
from ctxcompact.strategies import SUMMARY_PREFIX, Tiered
from ctxcompact.testing import LLMRequest, ScriptedLLM, assert_output_invariants
from tests.helpers.gen import assistant, call, system, tool, user
from tests.helpers.proxy_servers import serve_in_thread
from tests.helpers.standin_summarizer import StandIn, summary_of
from tests.helpers.traces import TRACES_DIR

COUNT = HeuristicTokenCounter()
WINDOW, RESERVED = 16_000, 4_000
SMALL = {"max_summary_tokens": 200}


def step_of(k: int) -> list[Message]:
    """One agent step whose reasoning (which no cheap tier shrinks) and result name it."""
    return [
        assistant(f"step-{k:02d} " + "thinking " * 120, call(f"c{k}", "cat")),
        tool(f"c{k}", f"result-{k:02d} " + "r" * 800),
    ]


def numbered() -> ScriptedLLM:
    """A summarizer answering ``summary 1``, ``summary 2``... in order."""

    def answer(n: int) -> object:
        return lambda request: Completion(Message.assistant(f"summary {n}"))

    return ScriptedLLM(*(answer(n) for n in range(1, 60)))  # type: ignore[arg-type]


def transcript(request: LLMRequest) -> str:
    return "\n".join(m.text for m in request.messages)


def steps_in(text: str) -> set[str]:
    return set(re.findall(r"step-\d\d", text))


def controller(llm: ScriptedLLM, **summary: object) -> CompactionController:
    return CompactionController(
        Tiered(llm, summary={**SMALL, **summary}),
        max_context_size=WINDOW,
        reserved_context_size=RESERVED,
        token_counter=COUNT,
    )


async def test_no_trigger_waits_for_the_summarizer_and_later_summaries_are_incremental() -> None:
    llm = numbered()
    c = controller(llm)
    history: list[Message] = [system("You are a coding agent."), user("Fix parse_config.")]
    at_steps: list[int] = []  # summarizer calls made while a step (the hot path) ran
    used: list[str] = []  # the summary each compaction swapped in
    for k in range(120):
        before = len(llm.requests)
        step = await c.step(history)
        at_steps.append(len(llm.requests) - before)
        assert COUNT.count(step.history) + RESERVED <= WINDOW, k  # every call fits
        if step.compacted:
            assert_output_invariants(history, step.history, max_new_messages=1)
            summaries = [m.text for m in step.history if m.text.startswith(SUMMARY_PREFIX)]
            assert step.event is not None
            if step.event.ahead == "used":  # its text, without the store's recall note
                said = summaries[0].removeprefix(SUMMARY_PREFIX)
                used.append(said.split("\n\n[ctxcompact: ")[0])
            history = list(step.history)
        await c.settle()  # the agent's model answers: the background summary is written
        history += step_of(k)
    assert sum(at_steps) == 0  # no trigger, the first one included, awaited the summarizer
    assert len(used) >= 3
    # Each summary made after the first sends the one before it and only what came after.
    by_answer = {f"summary {n}": llm.requests[n - 1] for n in range(1, len(llm.requests) + 1)}
    for previous, this in itertools.pairwise(used):
        request = by_answer[this]
        sent = transcript(request)
        assert f"[earlier summary]\n{previous}" in sent
        covered = steps_in(transcript(by_answer[previous]))
        assert covered, previous
        assert not covered & steps_in(sent), (previous, this)  # nothing summarized twice
        assert steps_in(sent)  # what is new since is sent


async def test_a_summary_written_at_the_trigger_only_when_asked() -> None:
    h = [system("S"), user("Fix parse_config.")]
    for k in range(40):
        h += step_of(k)
    ctx = CompactionContext(h, COUNT.count(h), WINDOW, RESERVED, token_counter=COUNT)
    quiet = ScriptedLLM("never asked")
    out = await Tiered(quiet, summary=SMALL).compact(ctx)
    assert out is not None
    assert quiet.requests == []
    assert COUNT.count(out) <= (WINDOW - RESERVED - 1) * 0.4
    asked = ScriptedLLM("The agent read 40 modules.")
    out = await Tiered(asked, summary={**SMALL, "summarize_at_trigger": True}).compact(ctx)
    assert out is not None
    assert len(asked.requests) == 1
    assert any(m.text.startswith(SUMMARY_PREFIX) for m in out)


async def test_no_summary_is_made_ahead_when_the_cheap_tiers_will_do_or_there_is_no_model() -> None:
    # Large results and short reasoning: masking frees far more than the trigger needs.
    h = [system("S"), user("Fix parse_config.")]
    for k in range(12):
        h += [assistant(None, call(f"c{k}", "cat")), tool(f"c{k}", "x" * 4_000)]
    ctx = CompactionContext(h, COUNT.count(h), WINDOW, RESERVED, token_counter=COUNT)
    llm = ScriptedLLM("never asked")
    strategy = Tiered(llm, summary=SMALL)
    assert summarizes_ahead(strategy)
    assert await strategy.summarize_ahead(ctx) is None
    assert llm.requests == []
    assert await Tiered().summarize_ahead(ctx) is None  # no summarizer: nothing to make
    # Reasoning no tier shrinks: the summary is needed, and made now.
    long = [system("S"), user("Fix parse_config.")]
    for k in range(30):
        long += step_of(k)
    ctx = CompactionContext(long, COUNT.count(long), WINDOW, RESERVED, token_counter=COUNT)
    ahead = await strategy.summarize_ahead(ctx)
    assert ahead is not None
    assert len(llm.requests) == 1
    assert ahead.history_length == len(long)


# -- over real HTTP: the CLI replay of recommended-llm.toml against the stand-in ---------------

TRACES = [
    TRACES_DIR / "msa-gemini3pro__astropy__astropy-8872.json",
    TRACES_DIR / "msa-gemini3pro__django__django-14349.json",
]
_TOOL_ID = re.compile(r"\[tool result of [^\n]*? \(id ([^,)\s]+)")


def _transcript(body: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content") or "") for m in body["messages"])


def test_replay_of_the_llm_recommendation_never_waits_and_sends_only_what_is_new(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    standin = StandIn()
    config = str(TRACES_DIR.parents[2] / "examples" / "recommended-llm.toml")
    with serve_in_thread(standin.app()) as url:
        code = main(["replay", "--json", "--no-progress", "--config", config,
                     "--llm-base-url", f"{url}/v1", "--llm-model", "stand-in",
                     *map(str, TRACES)])  # fmt: skip
    assert code == 0
    total = json.loads(capsys.readouterr().out)["total"]["runs"][0]["compacted"]
    assert total["calls_over_window"] == 0
    assert total["summarizer_calls"] == len(standin.requests) >= 4
    assert total["summarizer_hot_calls"] == total["hot_calls_after_first"] == 0
    assert total["hot_s_after_first"] == total["summarizer_waited_s"] == 0
    assert total["summarizer_background_calls"] == total["summarizer_calls"]
    assert total["ahead_used"] >= 3
    # A later request carries a summary the stand-in wrote, and none of the tool results
    # the request that produced that summary covered.
    digests = {summary_of(body).split(":")[0]: body for body in standin.requests}
    checked = 0
    for body in standin.requests:
        sent = _transcript(body)
        earlier = re.findall(r"\[earlier summary\]\n(Stand-in summary [0-9a-f]{8})", sent)
        if not earlier:
            continue
        (digest,) = earlier
        covered = set(_TOOL_ID.findall(_transcript(digests[digest])))
        assert covered
        # The earlier summary names the newest item it read; the rest is what is sent anew.
        new = re.sub(r"\[earlier summary\]\n.*?(?=\n\n\[|$)", "", sent, flags=re.DOTALL)
        assert not covered & set(_TOOL_ID.findall(new))
        checked += 1
    assert checked >= 2


async def test_a_pin_read_when_the_summary_was_made_is_kept_when_it_is_swapped_in() -> None:
    # The pin is only in step 0's result, which the mask tier replaces before the summary
    # tier runs: the summary made ahead read the pins in the history as given (``live``), and
    # the swap-in must read them there too (it read the masked copy, and the pinned result
    # went into a summary that never saw it: found in review).
    tiered = Tiered(
        numbered(),
        tiers=("mask", "summary"),
        keep_recent=2,
        summary={"max_preserved_messages": 2, **SMALL},
    )
    history: list[Message] = [system("You are a coding agent."), user("Fix parse_config.")]
    for k in range(12):
        history += [
            assistant(f"step-{k:02d} " + "thinking " * 400, call(f"c{k}", "cat")),
            tool(f"c{k}", ("PINME " if k == 0 else "") + f"result-{k:02d} " + "r" * 800),
        ]

    def pin(message: Message) -> bool:
        return "PINME" in message.text

    ctx = CompactionContext(
        history, COUNT.count(history), WINDOW, RESERVED, token_counter=COUNT, pin=pin
    )
    ahead = await tiered.summarize_ahead(ctx)
    assert ahead is not None
    out = await tiered.compact(dataclasses.replace(ctx, ahead=ahead))
    assert out is not None
    assert any(m.text.startswith(SUMMARY_PREFIX) for m in out)  # the summary was swapped in
    # The pinned step stays out of the summary, call and result, as when it was made (its
    # result masked by the mask tier; the controller puts a pinned text back: pin_restored).
    assert [c.id for m in out for c in m.tool_calls or ()] == ["c0", "c10", "c11"]
    assert out[2].text.startswith("step-00")
    assert out[3].tool_call_id == "c0"
    assert_output_invariants(history, out, max_new_messages=1)  # the summary
