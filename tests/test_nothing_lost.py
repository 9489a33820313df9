"""Issue 20, done when: on the 17 public traces at 8k, 16k and 32k windows, for every built-in
strategy and for examples/recommended.toml, with the default store, every removed tool result,
cleared argument, dropped message and summarised range is named in the view and recalled byte
for byte: nothing is lost for good.

Each case replays every trace through a controller built with its defaults (its own bounded
in-memory store, recall markers on) and lets ``ctxcompact.replay`` measure, at every model call,
each original the call's input lacks: it comes back only when a marker in that input names its
handle (directly, or through the range a drop note or a summary names) and the recall
executor, paged through as a model would, returns it byte for byte
(:class:`ctxcompact.replay.RecallCheck`). Nothing asks the store whether it holds an id. The
summary strategies run with a deterministic stand-in summarizer (the text depends only on the
request), so the figures do not depend on a model.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from ctxcompact import (
    CompactionController,
    Completion,
    HeuristicTokenCounter,
    Message,
    ToolSpec,
    from_openai,
    wire,
)
from ctxcompact.replay import MemoCounter, ReplayStats, replay
from ctxcompact.strategies import (
    ContextGuard,
    HidingThenSummary,
    LLMSummary,
    Schema1Masking,
    ToolInputClearing,
    ToolResultHiding,
    ToolResultTruncation,
)
from tests.helpers.traces import load_trace, trace_names

pytestmark = pytest.mark.slow  # about 95 s for the 24 cases on a busy 2-core machine

RECOMMENDED = Path(__file__).resolve().parents[1] / "examples" / "recommended.toml"
WINDOWS = [8_000, 16_000, 32_000]


class StandInSummarizer:
    """A deterministic summarizer: how many messages and characters it stands for, and a hash
    of the request. Counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        system: str | None = None,
        tools: Sequence[ToolSpec] | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        self.calls += 1
        text = "\n".join(m.text for m in messages)
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        return Completion(
            Message.assistant(
                f"Stand-in summary {digest}: {len(messages)} messages, {len(text):,} characters."
            )
        )


Build = Callable[[int, MemoCounter, StandInSummarizer], CompactionController]


def default_controller(
    make: Callable[[int, StandInSummarizer], object], *, every_rewrite: bool = False
) -> Build:
    """A controller with every default but the window: its own store, recall on.
    ``every_rewrite``: no cost-aware weighing, so that a strategy whose optional rewrites
    rarely pay back their cache break (input clearing) still removes something to recall."""

    def build(window: int, counter: MemoCounter, llm: StandInSummarizer) -> CompactionController:
        return CompactionController(
            make(window, llm),  # type: ignore[arg-type]
            max_context_size=window,
            reserved_context_size=window // 4,
            token_counter=counter,
            llm=llm,
            **({"cache_pricing": None} if every_rewrite else {}),  # type: ignore[arg-type]
        )

    return build


def recommended(window: int, counter: MemoCounter, llm: StandInSummarizer) -> CompactionController:
    parts = wire(
        RECOMMENDED,
        max_context_size=window,
        reserved_context_size=window // 4,
        token_counter=counter,
        build_store=True,  # no [store] table: the default in-memory store
    )
    return parts.controller()


CASES: dict[str, Build] = {
    "tool-result-hiding": default_controller(lambda w, llm: ToolResultHiding()),
    "schema1-masking": default_controller(lambda w, llm: Schema1Masking()),
    "tool-input-clearing": default_controller(
        lambda w, llm: ToolInputClearing(), every_rewrite=True
    ),
    "context-guard": default_controller(lambda w, llm: ContextGuard()),
    # Its default cut (50,000 characters) is above every result of the traces: cut at the
    # window's size in characters (about a quarter of it in tokens), head and tail 2,000.
    "tool-result-truncation": default_controller(
        lambda w, llm: ToolResultTruncation(max_chars=w, head_chars=2_000, tail_chars=2_000)
    ),
    "llm-summary": default_controller(lambda w, llm: LLMSummary(llm)),
    "hiding-then-summary": default_controller(lambda w, llm: HidingThenSummary(llm)),
    "recommended.toml": recommended,
}


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    # The guard logs a WARNING per drop; thousands of them only slow the run down.
    logger = logging.getLogger("ctxcompact")
    level = logger.level
    logger.setLevel(logging.ERROR)
    yield
    logger.setLevel(level)


@pytest.mark.parametrize("window", WINDOWS, ids=[f"{w // 1000}k" for w in WINDOWS])
@pytest.mark.parametrize("name", list(CASES))
async def test_nothing_removed_is_lost_for_good(name: str, window: int) -> None:
    total = ReplayStats()
    lost: list[str] = []
    llm = StandInSummarizer()
    for trace in trace_names():
        conversation = from_openai(load_trace(trace))
        counter = MemoCounter(HeuristicTokenCounter())
        controller = CASES[name](window, counter, llm)
        assert controller.recall, "the default store must come with recall markers"
        stats = await replay(conversation, controller, counter=counter, referenced=True)
        total += stats
        if stats.lost_originals or stats.lost_results:
            lost.append(
                f"{trace}: {stats.lost_originals} of {stats.removed_originals} originals "
                f"({stats.lost_arguments} of {stats.cleared_arguments} arguments), "
                f"{stats.lost_results} of {stats.referenced_results} quoted results"
            )
    assert lost == [], f"{name} at {window}: lost for good on " + "; ".join(lost)
    # Not vacuous: each case removed something, and what a later answer quoted came back.
    assert total.removed_originals > 0
    assert total.recallable_results == total.referenced_results
    if name in ("llm-summary", "hiding-then-summary"):
        assert llm.calls > 0
    if name in ("tool-input-clearing", "recommended.toml", "context-guard", "llm-summary"):
        assert total.cleared_arguments > 0  # cleared, or dropped with the call that made them
