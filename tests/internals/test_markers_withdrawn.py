"""After a write that evicted, the store hook puts every marker that names a handle the store
no longer holds back in its plain form. White-box: ``without_handles`` is private; through the
controller, only the kinds of marker a small scenario happens to write would be exercised
(``tests/test_recall_every_removal.py`` and ``tests/test_store_redis.py`` do that end to
end)."""

from __future__ import annotations

import json

from ctxcompact._controller.markers import named_handles, without_handles
from ctxcompact.kit import (
    HIDDEN_PLACEHOLDER,
    cleared_marker,
    drop_note,
    placeholder_pattern,
    range_note,
    recall_placeholder,
    truncation_marker,
)
from ctxcompact.store import DEFAULT_RECALL_TEMPLATE
from tests.helpers.gen import assistant, call, tool, user


def test_every_kind_of_marker_drops_the_handle_the_store_no_longer_holds() -> None:
    note = drop_note(6, range_handle="#r0a1b2c3d4e", results=[("Read", "c1"), ("Bash", "c2")])
    task = user(f"TASK\n\n{note}")
    assert named_handles(task) == {"#r0a1b2c3d4e", "c1", "c2"}
    # A listed result gone: the note lists the others.
    assert without_handles(task, {"c1"}).text == "TASK\n\n" + drop_note(
        6, range_handle="#r0a1b2c3d4e", results=[("Bash", "c2")]
    )
    # Its range gone: the plain note, which promises nothing.
    assert without_handles(task, {"#r0a1b2c3d4e"}).text == "TASK\n\n" + drop_note(6)
    summary = assistant("the summary" + range_note(4, "#r0a1b2c3d4e"))
    assert without_handles(summary, {"#r0a1b2c3d4e"}).text == "the summary"
    cut = tool("c3", "head" + truncation_marker(900, handle="c3", offset=2) + "tail")
    assert without_handles(cut, {"c3"}).text == "head" + truncation_marker(900) + "tail"
    value = {"path": "a.py", "content": cleared_marker(800, handle="args:w1")}
    cleared = assistant(None, call("w1", "write_file", json.dumps(value)))
    plain = without_handles(cleared, {"args:w1"}).tool_calls
    assert plain is not None
    assert json.loads(plain[0].arguments) == {"path": "a.py", "content": cleared_marker(800)}
    hidden = tool("c4", recall_placeholder("c4"))
    pattern = placeholder_pattern(DEFAULT_RECALL_TEMPLATE)
    assert without_handles(hidden, {"c4"}, placeholder=pattern).text == HIDDEN_PLACEHOLDER
    # What the store still holds is left as it was: the same object.
    for message in (task, summary, cut, cleared, hidden):
        assert without_handles(message, {"other"}, placeholder=pattern) is message
