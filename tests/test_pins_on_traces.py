"""Issue 20, item 4, done when: the pins survive every built-in strategy on the real traces.

Each case replays every public trace (tests/data/traces) call by call through a controller
built with its defaults (its own in-memory store, recall on) at 8k/2k, 16k/4k and 32k/8k, and
checks the input of every model call: the first user message of the conversation (the task as
the user stated it) and the newest user message before that call are there, verbatim, as user
messages (a ctxcompact note after their text, such as the guard's drop note, is allowed: it
adds, it removes nothing). The summary strategies run with the deterministic stand-in
summarizer of ``tests/test_nothing_lost.py``.

The whole sweep (10 cases x 3 windows x 17 traces) is marked ``slow``: 18 s alone, about 100 s
on the 2 cores shared with other test runs. The guard's case that used to fail (a trace where
the pinned messages and the newest step do not fit the window together) runs fast.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from ctxcompact import CompactionController, HeuristicTokenCounter, Message, wire
from ctxcompact.kit import TRUNCATION_RE, strip_notes
from ctxcompact.replay import MemoCounter, read_conversation, replay
from ctxcompact.strategies import ContextGuard, Tiered
from tests.helpers.traces import TRACES_DIR, trace_paths
from tests.test_nothing_lost import CASES, Build, StandInSummarizer, default_controller

RECOMMENDED_LLM = Path(__file__).resolve().parents[1] / "examples" / "recommended-llm.toml"
WINDOWS = [8_000, 16_000, 32_000]


def recommended_llm(
    window: int, counter: MemoCounter, llm: StandInSummarizer
) -> CompactionController:
    parts = wire(
        RECOMMENDED_LLM,
        llm=llm,  # the stand-in, not the OpenAI model the file names
        max_context_size=window,
        reserved_context_size=window // 4,
        token_counter=counter,
        build_store=True,
    )
    return parts.controller()


PIN_CASES: dict[str, Build] = {
    **CASES,  # the seven built-ins of issue 20's sweep, and examples/recommended.toml
    "tiered": default_controller(lambda w, llm: Tiered(llm)),  # type: ignore[arg-type]
    "recommended-llm.toml": recommended_llm,
}


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    logger = logging.getLogger("ctxcompact")
    level = logger.level
    logger.setLevel(logging.ERROR)  # the guard logs each drop and cut
    yield
    logger.setLevel(level)


def holds(view: list[Message], original: Message) -> bool:
    """Whether a user message of ``view`` is ``original``, verbatim (notes aside)."""
    text = original.text.rstrip("\n")
    for message in view:
        if message is original:
            return True
        if message.role == "user" and strip_notes(message.text).rstrip("\n") == text:
            return True
    return False


def missing_pins(case: str, window: int, path: Path) -> list[tuple[int, str]]:
    """``(call index, which)`` for every call whose input lacks the first or newest user
    message."""
    conversation = read_conversation(path)
    users = [i for i, m in enumerate(conversation) if m.role == "user"]
    counter = MemoCounter(HeuristicTokenCounter())
    controller = PIN_CASES[case](window, counter, StandInSummarizer())
    missing: list[tuple[int, str]] = []

    def check(index: int, request: list[Message]) -> None:
        before = [i for i in users if i < index]
        if not before:
            return
        for which, i in (("first", before[0]), ("newest", before[-1])):
            if not holds(list(request), conversation[i]):
                missing.append((index, which))

    asyncio.run(replay(conversation, controller, counter=counter, on_call=check))  # type: ignore[arg-type]
    return missing


@pytest.mark.slow
@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("case", list(PIN_CASES))
def test_the_first_and_newest_user_message_are_in_every_calls_view(case: str, window: int) -> None:
    lost = {p.stem: m for p in trace_paths() if (m := missing_pins(case, window, p))}
    assert lost == {}


SCIKIT_LEARN = TRACES_DIR / "msa-gemini3pro__scikit-learn__scikit-learn-25102.json"


@pytest.mark.parametrize("case", ["context-guard", "recommended.toml"])
def test_the_guard_keeps_the_task_when_the_newest_step_leaves_no_room_for_it(case: str) -> None:
    # At 8k (budget 5,999) the pins (system, the task ~2,300 tokens, a format reminder) and
    # a newest step of ~3,700 tokens (an 11,800-character heredoc in its call's arguments)
    # do not fit together: the guard used to cut the task head + tail from then on. Now the
    # call's long argument is cleared (recall names it) and the task stays verbatim.
    assert missing_pins(case, 8_000, SCIKIT_LEARN) == []


def test_the_guard_clears_the_newest_calls_argument_rather_than_cut_a_pin() -> None:
    conversation = read_conversation(SCIKIT_LEARN)
    counter = MemoCounter(HeuristicTokenCounter())
    controller = CompactionController(
        ContextGuard(), max_context_size=8_000, reserved_context_size=2_000, token_counter=counter
    )
    views: dict[int, list[Message]] = {}
    asyncio.run(
        replay(
            conversation,
            controller,
            counter=counter,
            on_call=lambda i, r: views.__setitem__(i, list(r)),
        )
    )
    # Call 36 follows the 11,806-character heredoc of call_msa_0016 (message 34).
    view = views[36]
    [newest] = [m for m in view if m.tool_calls and m.tool_calls[0].id == "call_msa_0016"]
    assert "recall_tool_result" in newest.tool_calls[0].arguments
    assert "args:call_msa_0016" in newest.tool_calls[0].arguments
    assert newest.text == conversation[34].text  # its text was not cut: clearing sufficed
    assert not any(TRUNCATION_RE.search(m.text) for m in view if m.role == "user")
    assert counter.count(view) + 2_000 <= 8_000
