"""What a replay says while it runs, on standard error: per-call progress, failures."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from ._io import CliError

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Sequence

    from .._history.messages import Message
    from ._io import Conversation
    from ._setup import Setup

__all__ = ["CallProgress", "FailureReport", "call_progress"]


def _err(text: str) -> None:
    sys.stderr.write(text + "\n")


class CallProgress:
    """Progress of one replay with a summarizer, call by call, on standard error.

    On a terminal, a tqdm bar; otherwise (``--verbose`` into a log or a pipe) one line every
    tenth of the calls, so a slow local summarizer does not look like a hang.
    """

    def __init__(self, name: str, label: str, calls: int, *, terminal: bool) -> None:
        from tqdm import tqdm

        self.name = name
        self.label = label
        self.calls = calls
        self.done = 0
        self.every = max(1, -(-calls // 10))  # at most ten lines, plus the last one
        self.bar = (
            tqdm(total=calls, desc=f"{label}", unit="call", file=sys.stderr, leave=False)
            if terminal
            else None
        )

    def __call__(self, index: int, request: Sequence[Message]) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.update(1)
        elif self.done % self.every == 0 or self.done == self.calls:
            _err(f"{self.name}: {self.label}: call {self.done} of {self.calls}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def call_progress(
    args: argparse.Namespace, conversation: Conversation, setup: Setup, *, many: bool
) -> CallProgress | None:
    """Per-call progress for a single-file replay whose strategy calls a summarizer: on a
    terminal, or with ``--verbose``; never with ``--no-progress``."""
    terminal = sys.stderr.isatty()
    if many or setup.llm is None or args.no_progress or not (terminal or args.verbose):
        return None
    calls = sum(1 for m in conversation.messages if m.role == "assistant")
    return CallProgress(conversation.name, setup.label, calls, terminal=terminal)


class FailureReport:
    """Prints each distinct compaction error once; a missing LLM stops the replay."""

    def __init__(self, name: str, label: str, write: Callable[..., None]) -> None:
        self.name = name
        self.label = label
        self.write = write
        self.seen: set[str] = set()

    def __call__(self, error: str) -> None:
        if "LLMRequiredError" in error:
            raise CliError(
                f"{self.name}: strategy {self.label} needs an LLM and none is configured: add a "
                f"[compaction.llm] table to a config file and pass --config FILE ({error})"
            )
        if error not in self.seen:
            self.seen.add(error)
            self.write(f"{self.name}: {self.label}: compaction failed: {error}", file=sys.stderr)
