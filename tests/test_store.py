"""The originals stores: MemoryStore, SQLiteStore (a real file) and RedisStore (a real
redis-server), one contract."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ctxcompact import Message, from_openai, to_anthropic, to_openai
from ctxcompact.exceptions import StoreError
from ctxcompact.store import (
    MemoryStore,
    OriginalsStore,
    RedisStore,
    SQLiteStore,
    StoredOriginal,
    credential_namespace,
    summary_key,
)

from .helpers.gen import assistant, call, tool, user
from .helpers.redis_server import RedisServer
from .helpers.traces import load_trace, trace_names

Build = Callable[..., "MemoryStore | SQLiteStore | RedisStore"]


def record(
    call_id: str,
    text: str,
    *,
    position: int = 3,
    namespace: str = "default",
    kind: str = "hidden",
) -> StoredOriginal:
    return StoredOriginal.from_message(
        tool(call_id, text),
        position=position,
        kind=kind,  # type: ignore[arg-type]
        namespace=namespace,
        tool_name="bash",
    )


@pytest.fixture(params=["memory", "sqlite", "redis"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Build]:
    """A function building a fresh store of each kind (the same file for every SQLite one, the
    same real Redis server and key prefix for every Redis one)."""
    opened: list[SQLiteStore | RedisStore] = []
    redis: RedisServer | None = None
    prefix = ""
    if request.param == "redis":  # only these need (and skip without) a redis-server
        redis = request.getfixturevalue("redis_server")
        prefix = redis.prefix()

    def build(**kwargs: int) -> MemoryStore | SQLiteStore | RedisStore:
        store: SQLiteStore | RedisStore
        if request.param == "memory":
            return MemoryStore(**kwargs)
        if redis is not None:
            store = RedisStore(redis.url, prefix=prefix, **kwargs)
        else:
            store = SQLiteStore(tmp_path / "originals.db", **kwargs)
        opened.append(store)
        return store

    yield build
    for store in opened:
        store.close()


# -- the contract, every store ----------------------------------------------------------------


def test_every_store_satisfies_the_protocol(make_store: Build) -> None:
    assert isinstance(make_store(), OriginalsStore)
    assert not isinstance(object(), OriginalsStore)


def test_a_stored_original_comes_back_equal_with_its_metadata(make_store: Build) -> None:
    store = make_store()
    original = tool("call_1", "total 12\nREADME.md\nsrc/ctxcompact/store.py")
    stored = StoredOriginal.from_message(
        original, position=7, kind="masked", tool_name="ls", created_at=1234.5
    )
    store.put(stored)
    got = store.get("default", "call_1")
    assert got == stored
    assert got.message == original
    assert (got.position, got.kind, got.tool_name, got.created_at) == (7, "masked", "ls", 1234.5)


def test_an_unknown_id_returns_none(make_store: Build) -> None:
    store = make_store()
    store.put(record("call_1", "x"))
    assert store.get("default", "call_2") is None


def test_namespaces_are_isolated(make_store: Build) -> None:
    store = make_store()
    alice, bob = credential_namespace("sk-alice"), credential_namespace("sk-bob")
    store.put(record("call_1", "alice's secret", namespace=alice))
    assert store.get(alice, "call_1").message.text == "alice's secret"
    assert store.get(bob, "call_1") is None
    assert store.get("default", "call_1") is None
    store.put(record("call_1", "bob's", namespace=bob))
    assert store.get(alice, "call_1").message.text == "alice's secret"
    assert store.get(bob, "call_1").message.text == "bob's"


def test_a_reused_id_prefers_the_exact_position_then_the_newest(make_store: Build) -> None:
    store = make_store()
    early, late = (
        record("call_1", "first turn", position=4),
        record("call_1", "later turn", position=40),
    )
    store.put(early)
    store.put(late)
    assert store.get("default", "call_1", position=4) == early
    assert store.get("default", "call_1", position=40) == late
    assert store.get("default", "call_1").message.text == "later turn"
    # A position with no record of its own falls back to the newest.
    assert store.get("default", "call_1", position=99).message.text == "later turn"
    # Storing the early one again makes it the newest; the later one is still there.
    store.put(early)
    assert store.get("default", "call_1").message.text == "first turn"
    assert store.get("default", "call_1", position=40) == late


def test_same_id_and_position_with_new_content_returns_the_newest(
    make_store: Build,
) -> None:
    store = make_store()
    store.put(record("call_1", "one", position=5))
    store.put(record("call_1", "two", position=5))
    assert store.get("default", "call_1", position=5).message.text == "two"
    assert len(store) == 2


def test_storing_the_same_record_twice_keeps_one(make_store: Build) -> None:
    store = make_store()
    store.put(record("call_1", "x" * 100))
    size = store.total_bytes
    store.put(record("call_1", "x" * 100), record("call_1", "x" * 100))
    assert (len(store), store.total_bytes) == (1, size)


def test_eviction_drops_the_least_recently_stored_first(make_store: Build) -> None:
    one = record("call_0", "a" * 200)
    bound = one.size * 3
    store = make_store(max_bytes=bound)
    for i in range(3):
        store.put(record(f"call_{i}", "a" * 200))
    assert len(store) == 3
    store.put(record("call_0", "a" * 200))  # touched: now the newest
    assert store.evictions == 0
    store.put(record("call_3", "a" * 200))
    assert store.evictions == 1  # counted: the controller reports it (CountsEvictions)
    assert store.get("default", "call_1") is None  # the oldest untouched one went
    assert all(store.get("default", f"call_{i}") is not None for i in (0, 2, 3))
    store.put(record("call_4", "a" * 200))
    assert store.evictions == 2
    assert store.get("default", "call_2") is None
    assert store.get("default", "call_0") is not None
    assert store.total_bytes <= bound


def test_a_record_bigger_than_the_bound_raises_and_the_rest_are_kept(make_store: Build) -> None:
    store = make_store(max_bytes=500)
    with pytest.raises(
        StoreError, match=r"larger than the store's whole bound of 500 bytes.*'big'"
    ):
        store.put(record("small", "s"), record("big", "b" * 1000))
    assert store.get("default", "small") is not None
    assert store.get("default", "big") is None


def test_summaries_are_kept_by_the_hash_of_what_they_replaced(make_store: Build) -> None:
    store = make_store()
    replaced = [user("fix the bug"), assistant(None, call("c1")), tool("c1", "traceback ...")]
    key = summary_key(replaced)
    summary = (Message.user("[summary] the bug is in parse()"),)
    assert store.get_summary("default", key) is None
    store.put_summary("default", key, summary)
    assert store.get_summary("default", key) == summary
    assert store.get_summary("other", key) is None
    assert store.get_summary("default", summary_key(replaced[:2])) is None
    newer = (Message.user("[summary] fixed"), Message.assistant("ok"))
    store.put_summary("default", key, newer)
    assert store.get_summary("default", key) == newer
    assert len(store) == 1


def test_summaries_count_against_the_bound(make_store: Build) -> None:
    store = make_store(max_bytes=1_000)
    store.put(record("call_1", "x" * 400))
    store.put_summary("default", "k", [Message.user("y" * 700)])
    assert store.get("default", "call_1") is None
    assert store.get_summary("default", "k") is not None


# -- lossless content -------------------------------------------------------------------------


@pytest.mark.parametrize("name", trace_names())
def test_trace_messages_round_trip_through_the_sqlite_file(name: str, tmp_path: Path) -> None:
    history = from_openai(load_trace(name))
    records = [
        StoredOriginal.from_message(m, position=i, kind="dropped") for i, m in enumerate(history)
    ]
    with SQLiteStore(tmp_path / "t.db") as store:
        store.put(*records)
    with SQLiteStore(tmp_path / "t.db") as store:
        back = [store.get("default", r.tool_call_id, position=r.position) for r in records]
    restored = [r.message for r in back]  # type: ignore[union-attr]
    assert restored == history
    assert to_openai(restored) == to_openai(history)
    assert to_anthropic(restored) == to_anthropic(history)


def test_absent_and_null_fields_stay_as_they_were() -> None:
    plain = Message(role="assistant", content="hi")
    nulled = Message(role="assistant", content=None, tool_calls=None)
    for message in (plain, nulled):
        back = StoredOriginal.from_message(message, position=0, kind="dropped").message
        assert back.model_fields_set == message.model_fields_set
        assert to_openai([back]) == to_openai([message])


def test_records_of_short_lived_messages_never_mix_up_their_content() -> None:
    """The JSON of a message is remembered by identity while it lives; a new message that
    takes a dead one's memory address must get its own JSON."""
    for i in range(200):
        text = f"result number {i}"
        stored = StoredOriginal.from_message(tool("c1", text), position=i, kind="hidden")
        assert stored.message.text == text


def test_memory_store_uses_about_its_bound_even_for_text_that_is_not_ascii() -> None:
    """A string with one emoji takes four bytes a character in Python; the bound counts UTF-8
    bytes, so the store keeps those: its memory is what it counts plus bookkeeping."""
    import gc
    import tracemalloc

    store = MemoryStore()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        texts = [f"result {i} \N{ROCKET}\n" + "plain ascii output line\n" * 400 for i in range(100)]
        store.put(*(record(f"call_{i}", text, position=i) for i, text in enumerate(texts)))
        del texts  # what is left is what the store keeps
        gc.collect()
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert store.total_bytes > 100 * 9_000
    assert used < store.total_bytes + 100 * 2048  # kept as str: about 4x total_bytes
    assert store.get("default", "call_7").message.text.startswith("result 7 \N{ROCKET}")
