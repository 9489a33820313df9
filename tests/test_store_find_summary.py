"""``find_summary``: the built-in stores look many summary keys up at once, and answer what
asking key by key would (the first key in the given order that has a summary)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxcompact import Message
from ctxcompact.store import MemoryStore, SQLiteStore


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> MemoryStore | SQLiteStore:
    return MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "o.db")


def one_by_one(
    store: MemoryStore | SQLiteStore, namespace: str, keys: list[str]
) -> tuple[int, tuple[Message, ...]] | None:
    for i, key in enumerate(keys):
        found = store.get_summary(namespace, key)
        if found is not None:
            return i, found
    return None


@pytest.mark.parametrize("kept", [[], [3], [3, 700], [1_199], [600, 2]])
def test_the_first_key_in_order_wins_across_query_chunks(
    store: MemoryStore | SQLiteStore, kept: list[int]
) -> None:
    keys = [f"k{i}" for i in range(1_200)]  # more than one SQLite query's worth
    for i in kept:
        store.put_summary("ns", keys[i], [Message.user(f"summary {i}")])
    store.put_summary("other", keys[0], [Message.user("another caller's")])
    expected = one_by_one(store, "ns", keys)
    assert store.find_summary("ns", keys) == expected
    if kept:
        assert expected is not None
        assert expected[0] == min(kept)
    reversed_keys = keys[::-1]
    assert store.find_summary("ns", reversed_keys) == one_by_one(store, "ns", reversed_keys)
