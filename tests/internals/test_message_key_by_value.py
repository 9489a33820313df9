"""The key of a message (the hash of its JSON), reused for an equal message of a later request.

The proxy parses every request into new message objects and each request resends the
conversation so far; ``message_key`` keeps recent messages' keys by value as well as by
identity. A key is only reused when the JSON would be the same: these tests put a message in
first, then ask for one that differs only where the JSON differs. White-box: they look inside
``_records`` (the cache by value and its bound), which no public call shows, since a wrong
hit would only show as a kept compaction silently not found.
"""

from __future__ import annotations

import hashlib

import pytest

from ctxcompact import Message, ToolCall
from ctxcompact.store import _records
from ctxcompact.store._records import dump_message, message_key


def expected(message: Message) -> str:
    return hashlib.sha256(dump_message(message).encode("utf-8")).hexdigest()


def fresh(data: dict[str, object]) -> Message:
    return Message.model_validate(dict(data))


def test_an_equal_message_of_a_later_request_gets_the_same_key_from_the_cache() -> None:
    data = {"role": "tool", "tool_call_id": "c1", "content": "a.py\nb.py\n" * 50}
    first, second = fresh(data), fresh(data)
    assert first is not second
    key = message_key(first)
    value = _records._value_key(second)
    assert value is not None
    assert value in _records._BY_VALUE
    assert message_key(second) == key == expected(second)


@pytest.mark.parametrize(
    ("seen", "asked"),
    [
        # A key present with its default value is written; absent, it is not.
        ({"role": "user", "content": "same"}, {"role": "user", "content": "same", "name": None}),
        ({"role": "assistant", "content": None}, {"role": "assistant"}),
        # The same call with other arguments.
        (
            {"role": "assistant", "tool_calls": [{"id": "c", "name": "ls", "arguments": "{}"}]},
            {"role": "assistant", "tool_calls": [{"id": "c", "name": "ls", "arguments": "{ }"}]},
        ),
        # Extra keys are part of the JSON: such messages are never taken from the cache.
        ({"role": "user", "content": "x"}, {"role": "user", "content": "x", "cache": {"t": 1}}),
        (
            {"role": "assistant", "tool_calls": [{"id": "c", "name": "ls", "arguments": "{}"}]},
            {
                "role": "assistant",
                "tool_calls": [{"id": "c", "name": "ls", "arguments": "{}", "index": 0}],
            },
        ),
    ],
)
def test_a_message_whose_json_differs_never_gets_the_cached_key(
    seen: dict[str, object], asked: dict[str, object]
) -> None:
    first, second = fresh(seen), fresh(asked)
    assert dump_message(first) != dump_message(second)
    message_key(first)
    assert message_key(second) == expected(second) != expected(first)


def test_the_cache_by_value_stays_under_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_records, "SAME_VALUE_CHARS", 10_000)
    for n in range(200):
        message = Message.tool(f"c{n}", f"result {n} " + "x" * 500)
        assert message_key(message) == expected(message)
        assert _records._by_value_chars <= 10_000
    # The newest ones are there, the oldest went first.
    assert _records._value_key(message) in _records._BY_VALUE
    assert _records._value_key(Message.tool("c0", "result 0 " + "x" * 500)) not in (
        _records._BY_VALUE
    )


def test_short_messages_are_counted_with_what_an_entry_costs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Counting only the JSON let 200,000 one-word messages hold 122 MiB under an 8 Mi bound.
    monkeypatch.setattr(_records, "SAME_VALUE_CHARS", 64_000)
    for n in range(1_000):
        message_key(Message.user(str(n)))
    assert len(_records._BY_VALUE) <= 64_000 // _records._ENTRY_CHARS


def test_a_call_with_parts_is_dumped_each_time_and_right() -> None:
    call = ToolCall(id="c9", name="read", arguments='{"path": "a.py"}')
    message = Message.assistant([{"type": "text", "text": "reading"}], tool_calls=[call])
    assert _records._value_key(message) is None  # content parts: not kept by value
    assert message_key(message) == expected(message)
