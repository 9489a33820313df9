"""``RunningCount.largest_step`` scans only what was added since it was last asked.

The controller asks it at every call once a history nears its trigger (whether to start a
summary ahead); a full scan of 10,000 messages at every call is what the running count exists
to avoid. White-box: the incremental scan is internal to ``_controller.state``, and a stale
scan would only show as a summary started a call too early or too late.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxcompact import HeuristicTokenCounter, Message
from ctxcompact._controller.state import RunningCount

COUNT = HeuristicTokenCounter()


def reference(history: list[Message]) -> int:
    """The whole scan, as the docstring defines the largest step."""
    cum = [0]
    for m in history:
        cum.append(cum[-1] + COUNT.count_message(m))
    largest, previous = 0, -1
    for i, m in enumerate(history):
        if m.role == "assistant":
            if previous >= 0:
                largest = max(largest, cum[i] - cum[previous])
            previous = i
    if previous >= 0:
        largest = max(largest, cum[-1] - cum[previous])
    return largest


message = st.builds(
    lambda role, n: Message.assistant("a" * n) if role else Message.user("u" * n),
    st.booleans(),
    st.integers(0, 400),
)
# Each operation: append some messages, or cut the history back to a prefix and go on from it
# (a compaction's rewrite), or replace one message (an edit the running count notices).
operation = st.one_of(
    st.tuples(st.just("append"), st.lists(message, max_size=5)),
    st.tuples(st.just("cut"), st.integers(0, 30)),
    st.tuples(st.just("edit"), st.integers(0, 30), message),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(operation, max_size=25))
def test_the_incremental_scan_equals_the_whole_scan(operations: list[tuple[object, ...]]) -> None:
    running = RunningCount()
    history: list[Message] = []
    for op in operations:
        if op[0] == "append":
            history = [*history, *op[1]]  # type: ignore[misc]
        elif op[0] == "cut":
            history = history[: op[1]]  # type: ignore[misc]
        elif history:
            at = op[1] % len(history)  # type: ignore[operator]
            history = [*history[:at], op[2], *history[at + 1 :]]  # type: ignore[list-item]
        assert running.largest_step(history, COUNT) == reference(history)
