"""RunningCount: every replaced message is noticed, wherever it is (issue 11).

The old count compared only the first, middle and last message, and missed 97.7% of
single-message edits on the public traces (the issue measured 91.6% on 27 traces).

White-box: ``RunningCount`` is the controller's private bookkeeping behind
``ControllerState``; its edge cases are checked on it directly.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxcompact import HeuristicTokenCounter, Message, from_openai
from ctxcompact._controller.state import RunningCount
from ctxcompact.kit import with_content
from tests.helpers.gen import user, valid_histories
from tests.helpers.traces import load_trace, trace_names

COUNT = HeuristicTokenCounter()


def edited(message: Message) -> Message:
    """A copy of ``message`` whose token count differs."""
    text = message.text
    return with_content(message, "[edited]" if len(text) > 40 else text + " edited" * 40)


@pytest.mark.parametrize("name", trace_names())
def test_every_single_message_edit_on_a_real_trace_is_noticed(name: str) -> None:
    history = from_openai(load_trace(name))
    running = RunningCount()
    whole = COUNT.count(history)
    assert running.total(history, COUNT) == whole
    for i, message in enumerate(history):
        # In place, on the very list the count saw last (what an agent loop does).
        history[i] = new = edited(message)
        expected = whole - COUNT.count_message(message) + COUNT.count_message(new)
        assert expected != whole
        assert running.total(history, COUNT) == expected, i
        history[i] = message
        assert running.total(history, COUNT) == whole, i


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    history=valid_histories(max_turns=4).filter(bool),
    data=st.data(),
    in_place=st.booleans(),
    with_usage=st.booleans(),
)
def test_property_a_replaced_message_anywhere_is_noticed(
    history: list[Message], data: st.DataObject, in_place: bool, with_usage: bool
) -> None:
    running = RunningCount()
    current = list(history)
    if with_usage:
        running.observe(10_000, current, COUNT)
    else:
        running.total(current, COUNT)
    i = data.draw(st.integers(0, len(current) - 1))
    grown = data.draw(st.booleans())  # the edit may come with a new message appended
    if not in_place:
        current = list(current)
    current[i] = edited(current[i])
    if grown:
        current.append(user("next"))
    # Usage covered every old message, the edited one too: it no longer applies.
    assert running.total(current, COUNT) == COUNT.count(current)
    assert running.estimate(current, COUNT) == COUNT.count(current)


def test_equal_new_objects_keep_the_count_and_the_usage() -> None:
    # A proxy parses every request afresh: equal messages, new objects. Not a change.
    history = [user("a" * 400), user("b" * 400)]
    running = RunningCount()
    running.observe(999, history, COUNT)
    parsed = [m.model_copy() for m in history]
    assert parsed[0] is not history[0]
    parsed.append(user("c"))
    assert running.total(parsed, COUNT) == 999 + COUNT.count_message(parsed[2])


def test_any_edit_drops_the_providers_count() -> None:
    # The provider counted another history: even an edit after the part it covered means
    # this history does not extend that one, so it is estimated afresh.
    history = [user("a" * 400), user("b" * 400)]
    running = RunningCount()
    running.observe(999, history[:1], COUNT)
    assert running.total(history, COUNT) == 999 + COUNT.count_message(history[1])
    history[1] = user("c" * 40)
    assert running.total(history, COUNT) == COUNT.count(history)


def test_a_shorter_history_is_recounted() -> None:
    history = [user("a" * 400), user("b" * 400), user("c" * 400)]
    running = RunningCount()
    running.observe(5_000, history, COUNT)
    assert running.total(history[:2], COUNT) == COUNT.count(history[:2])
    assert running.total(history, COUNT) == COUNT.count(history)


def test_a_tuple_history_is_compared_like_a_list() -> None:
    history = [user("a" * 400), user("b" * 400)]
    running = RunningCount()
    running.observe(999, history, COUNT)
    assert running.total(tuple(history), COUNT) == 999
    changed = (history[0], user("x"))
    assert running.total(changed, COUNT) == COUNT.count(changed)
