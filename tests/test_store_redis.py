"""RedisStore against a real redis-server (Debian's, started on 127.0.0.1 by the fixture):
what it adds to the store contract of test_store.py, which runs on it too.

Shared by store objects (processes) that never talk to each other; a bound that holds with
several writers at once; TTLs; credentials never shown; the async methods awaited by the
controller without blocking its event loop; a Redis that is gone reported, never raised.
"""

from __future__ import annotations

import asyncio
import logging
import re
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ctxcompact import CompactionController, Message, load_config, wire
from ctxcompact.exceptions import ConfigError, MissingDependencyError, StoreError
from ctxcompact.store import (
    AsyncOriginalsStore,
    MemoryStore,
    OriginalsStore,
    RedisStore,
    StoredOriginal,
    execute_recall,
    is_async_store,
    removed_originals,
    summary_key,
)
from ctxcompact.strategies import ContextGuard, ToolResultHiding

from .helpers.gen import assistant, call, system, tool, user
from .helpers.redis_server import RedisServer, start_redis

redis = pytest.importorskip(
    "redis", reason="needs the redis extra: pip install 'ctxcompact[redis]'"
)

PASSWORD = "pw-s3cret-9f1c"


def record(call_id: str, text: str, *, position: int = 3, namespace: str = "default") -> Any:
    return StoredOriginal.from_message(
        tool(call_id, text), position=position, kind="hidden", namespace=namespace
    )


@pytest.fixture
def prefix(redis_server: RedisServer) -> str:
    return redis_server.prefix()


@pytest.fixture
def store(redis_server: RedisServer, prefix: str) -> Iterator[RedisStore]:
    with RedisStore(redis_server.url, prefix=prefix) as made:
        yield made


def raw(server: RedisServer) -> Any:
    """A plain client, to look at the keys the store wrote (their layout is documented)."""
    return redis.Redis.from_url(server.url)


def layout_is_consistent(server: RedisServer, prefix: str) -> tuple[int, int]:
    """Entries and bytes, after checking every structure of the store agrees on them."""
    r = raw(server)
    tag = "{" + prefix + "}:"
    lru, data, size = r.zcard(tag + "lru"), r.hlen(tag + "data"), r.hlen(tag + "size")
    total = int(r.get(tag + "bytes") or 0)
    sizes = sum(int(v) for v in r.hvals(tag + "size"))
    r.close()
    assert lru == data == size
    assert sizes == total
    return lru, total


# -- shared, bounded, expiring ----------------------------------------------------------------


def test_what_one_store_object_wrote_another_reads_and_prefixes_share_nothing(
    redis_server: RedisServer, prefix: str
) -> None:
    with (
        RedisStore(redis_server.url, prefix=prefix) as writer,
        RedisStore(redis_server.url, prefix=prefix) as reader,
        RedisStore(redis_server.url, prefix=prefix + "-other") as stranger,
    ):
        writer.put(record("call_1", "written by one replica"))
        writer.put_summary("default", "k", [Message.user("[summary] one")])
        got = reader.get("default", "call_1")
        assert got is not None
        assert got.message.text == "written by one replica"
        assert reader.get_summary("default", "k") == (Message.user("[summary] one"),)
        assert stranger.get("default", "call_1") is None
        assert stranger.get_summary("default", "k") is None


def test_the_bound_holds_with_several_writers_at_once(
    redis_server: RedisServer, prefix: str
) -> None:
    one = record("w0-0", "x" * 1000)
    bound = one.size * 25
    writers, per_writer = 4, 60
    stores = [RedisStore(redis_server.url, prefix=prefix, max_bytes=bound) for _ in range(writers)]
    errors: list[BaseException] = []

    def write(w: int) -> None:
        try:
            for i in range(per_writer):
                stores[w].put(record(f"w{w}-{i}", "x" * 1000), record(f"w{w}-{i}b", "y" * 1000))
                if i % 7 == 0:
                    stores[w].put_summary("default", f"s{w}-{i}", [Message.user("z" * 900)])
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        assert errors == []
        entries, total = layout_is_consistent(redis_server, prefix)
        assert total <= bound
        assert 20 <= entries <= 26  # full: about 25 entries of ~1 KB, never more
        assert all(stores[0].get("default", f"w{w}-0") is None for w in range(writers))
        stores[1].put(record("last", "z" * 1000))  # the newest always stays
        assert stores[2].get("default", "last") is not None
        assert layout_is_consistent(redis_server, prefix)[1] <= bound
    finally:
        for s in stores:
            s.close()


def test_an_entry_not_stored_again_within_the_ttl_is_gone(
    redis_server: RedisServer, prefix: str
) -> None:
    with RedisStore(redis_server.url, prefix=prefix, ttl=2.0) as store:
        store.put(record("old", "stale"), record("kept", "stored again"))
        store.put_summary("default", "k", [Message.user("[summary] stale")])
        assert store.get("default", "old") is not None
        time.sleep(1.2)
        store.put(record("kept", "stored again"))  # its clock starts again
        time.sleep(1.2)
        assert store.get("default", "old") is None  # never returned once expired
        assert store.get_summary("default", "k") is None
        assert store.get("default", "kept") is not None  # stored again 1.2 s ago
        store.put(record("new", "fresh"))  # the next write removes what expired
        assert len(store) == 2
        r = raw(redis_server)
        # Every key expires too, should nobody write again.
        assert 0 < r.pttl("{" + prefix + "}:data") <= 2000
        r.close()
    layout_is_consistent(redis_server, prefix)


def test_bad_arguments_are_refused_with_a_store_error(redis_server: RedisServer) -> None:
    for kwargs, match in [
        ({"url": "http://127.0.0.1:1"}, "redis://, rediss:// or unix://"),
        ({"url": redis_server.url, "prefix": "a{b}"}, "prefix must be"),
        ({"url": redis_server.url, "ttl": 0}, "ttl must be"),
        ({"url": redis_server.url, "max_bytes": 0}, "max_bytes must be"),
    ]:
        with pytest.raises(StoreError, match=match):
            RedisStore(**kwargs)


# -- credentials ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def guarded() -> Iterator[RedisServer]:
    """A second server that wants a password."""
    try:
        with start_redis("--requirepass", PASSWORD) as server:
            yield server
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


def test_a_password_in_the_url_works_and_is_never_shown(
    guarded: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"redis://:{PASSWORD}@127.0.0.1:{guarded.port}/0"
    with RedisStore(url, prefix="pw", max_bytes=2_000) as store:
        with caplog.at_level(logging.DEBUG, logger="ctxcompact"):
            store.put(record("c1", "a" * 1500))
            store.put(record("c2", "b" * 1500))  # evicts c1: logged, with the URL
        assert store.get("default", "c2") is not None
        assert store.display_url == f"redis://127.0.0.1:{guarded.port}/0"
        assert PASSWORD not in repr(store)
    assert "evicted" in caplog.text
    assert f"127.0.0.1:{guarded.port}" in caplog.text
    assert PASSWORD not in caplog.text


def test_a_wrong_password_fails_without_showing_either(guarded: RedisServer) -> None:
    wrong = "wrong-pw-77aa"
    with pytest.raises(StoreError) as caught:
        RedisStore(f"redis://:{wrong}@127.0.0.1:{guarded.port}/0", timeout=2)
    text = str(caught.value)
    assert f"127.0.0.1:{guarded.port}" in text
    assert wrong not in text
    assert PASSWORD not in text


def test_a_config_url_opens_redis_and_its_errors_hide_the_password(
    tmp_path: Path, guarded: RedisServer
) -> None:
    def config(url: str, extra: str = "") -> Path:
        path = tmp_path / "c.toml"
        path.write_text(
            '[compaction]\nstrategy = "tool-result-hiding"\nmax_context_size = 80000\n'
            f'[store]\nurl = "{url}"\nprefix = "cfg"\n{extra}',
            encoding="utf-8",
        )
        return path

    good = f"redis://:{PASSWORD}@127.0.0.1:{guarded.port}/0"
    wiring = wire(load_config(config(good, "ttl = 60\n")), build_store=True)
    assert isinstance(wiring.store, RedisStore)
    assert (wiring.store.prefix, wiring.store.ttl) == ("cfg", 60.0)
    wiring.store.put(record("c1", "kept"))
    assert wiring.store.get("default", "c1") is not None
    wiring.store.close()

    with pytest.raises(ConfigError) as caught:
        wire(load_config(config(good.replace(PASSWORD, "nope-pw-1"))), build_store=True)
    assert caught.value.key == "store.url"
    assert "nope-pw-1" not in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        load_config(config(f"http://u:{PASSWORD}@example.com"))
    assert caught.value.key == "store.url"
    assert PASSWORD not in str(caught.value)
    with pytest.raises(ConfigError, match="not both"):
        load_config(config(good, 'path = "x.db"\n'))


def test_without_the_redis_package_the_error_gives_the_install_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "redis", None)  # what an import finds when it is absent
    with pytest.raises(MissingDependencyError, match=r"pip install 'ctxcompact\[redis\]'"):
        RedisStore("redis://127.0.0.1:6379/0")


# -- async callers --------------------------------------------------------------------------


async def test_the_async_methods_keep_what_the_sync_ones_read(store: RedisStore) -> None:
    assert isinstance(store, OriginalsStore)
    assert isinstance(store, AsyncOriginalsStore)
    assert is_async_store(store)
    assert not is_async_store(MemoryStore())
    await store.aput(record("c1", "first", position=4), record("c1", "second", position=9))
    got = await store.aget("default", "c1", position=4)
    assert got is not None
    assert got.message.text == "first"
    assert store.get("default", "c1").message.text == "second"  # type: ignore[union-attr]
    messages = [user("go"), assistant("ok")]
    keys = [summary_key(messages[:1]), summary_key(messages)]
    await store.aput_summary("default", keys[0], [Message.user("[summary] go")])
    assert await store.aget_summary("default", keys[0]) == (Message.user("[summary] go"),)
    assert await store.afind_summary("default", keys[::-1]) == (
        1,
        (Message.user("[summary] go"),),
    )
    assert await store.afind_summary("default", [keys[1]]) is None
    assert await store.afind_summary("other", keys) is None


def test_one_store_object_serves_several_event_loops_and_threads(store: RedisStore) -> None:
    async def roundtrip(n: int) -> str | None:
        await store.aput(record(f"loop{n}", f"from loop {n}"))
        got = await store.aget("default", f"loop{n}")
        return None if got is None else got.message.text

    assert asyncio.run(roundtrip(1)) == "from loop 1"
    assert asyncio.run(roundtrip(2)) == "from loop 2"  # a new loop, the same store
    seen: list[str | None] = []
    thread = threading.Thread(target=lambda: seen.append(asyncio.run(roundtrip(3))))
    thread.start()
    thread.join(30)
    assert seen == ["from loop 3"]


def history(turns: int = 4) -> list[Message]:
    out = [system("be brief"), user("inspect the repo")]
    for n in range(turns):
        body = "\n".join(f"row {n}.{k}: {'x' * 40}" for k in range(40))
        out += [assistant(None, call(f"c{n}", "cat")), tool(f"c{n}", body)]
    return [*out, assistant("done")]


def controller(store: OriginalsStore) -> CompactionController:
    return CompactionController(
        ToolResultHiding(preserve_recent_n=1),
        max_context_size=2_000,
        reserved_context_size=100,
        store=store,
        recall_placeholder='[call recall_tool_result("{tool_call_id}")]',
    )


async def test_the_controller_awaits_a_slow_redis_while_its_loop_runs_on(
    redis_server: RedisServer, store: RedisStore
) -> None:
    before = history()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    r = raw(redis_server)
    task = asyncio.create_task(ticker())
    await asyncio.sleep(0.05)
    r.execute_command("CLIENT", "PAUSE", "400", "WRITE")  # Redis holds every write 400 ms
    start, ticks = time.perf_counter(), 0
    result = await controller(store).compact(before)
    waited, during = time.perf_counter() - start, ticks
    task.cancel()
    r.execute_command("CLIENT", "UNPAUSE")
    r.close()
    assert result.store_error is None
    assert waited >= 0.3  # the write did wait for Redis...
    assert during >= 10  # ...while the event loop kept serving other tasks
    assert 'recall_tool_result("c0")' in result.history[3].text
    assert store.get("default", "c0").message == before[3]  # type: ignore[union-attr]
    text = execute_recall(store, {"tool_call_id": "c0", "pattern": "row 0.39"})
    assert "row 0.39" in text


async def test_a_redis_that_went_away_is_reported_and_the_compaction_stands(
    caplog: pytest.LogCaptureFixture,
) -> None:
    try:
        with start_redis() as server:
            gone = RedisStore(server.url, prefix="gone", timeout=1)
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    before = history()
    try:
        with caplog.at_level(logging.WARNING, logger="ctxcompact"):
            result = await controller(gone).compact(before)
        plain = await CompactionController(  # no store: the strategy's own text
            ToolResultHiding(preserve_recent_n=1),
            max_context_size=2_000,
            reserved_context_size=100,
            store=None,
        ).compact(before)
    finally:
        gone.close()
    assert result.changed
    assert result.store_error is not None
    assert "RedisStore" in result.store_error
    # Nothing could be stored, so nothing tells the model to recall: the strategy's own text.
    assert [m.text for m in result.history] == [m.text for m in plain.history]
    assert "row 0.1" not in caplog.text


def long_task() -> list[Message]:
    out = [system("be brief"), user("TASK: fix the parser")]
    for n in range(12):
        out += [
            assistant(f"step {n}", call(f"c{n}", "Read" if n % 2 else "Bash")),
            tool(f"c{n}", f"result {n}\n" + "z" * 600 + "\n"),
        ]
    return [*out, user("continue"), assistant("ok")]


NAMED = re.compile(r'recall_tool_result\(\\?"([^"\\]+)\\?"')


async def test_a_small_redis_store_reports_its_evictions_and_no_marker_promises_them(
    redis_server: RedisServer, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Issue 20: a marker promises a recall only while the store holds the original. The
    # controller awaits RedisStore (its async path), which must count what its bound evicted.
    history = long_task()
    with RedisStore(redis_server.url, prefix=prefix, max_bytes=1_500) as store:  # ~1 original
        controller = CompactionController(
            ContextGuard(), max_context_size=1_500, reserved_context_size=0, store=store
        )
        with caplog.at_level(logging.WARNING, logger="ctxcompact"):
            result = await controller.compact(history, force=True)
        assert result.changed
        assert store.evictions > 0
        problem = result.store_problem
        assert problem is not None
        assert problem.kind == "store_evicted"
        assert problem.count == store.evictions
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert any("RedisStore evicted" in r.getMessage() for r in warnings)
        assert "z" * 50 not in caplog.text  # counts only, no content
        promised = {
            handle
            for message in result.history
            for text in (message.text, *(c.arguments for c in message.tool_calls or ()))
            for handle in NAMED.findall(text)
        }
        assert promised, "no marker names a handle: the test needs a larger bound"
        for handle in promised:
            answer = execute_recall(store, {"tool_call_id": handle})
            assert "cannot be recalled" not in answer, f"{handle} is promised but gone"
        evicted = [
            r.handle
            for r in removed_originals(history, result.history)
            if r.call is None and store.get("default", r.handle) is None
        ]
        assert evicted, "nothing was evicted: the test needs a smaller bound"
        answer = execute_recall(store, {"tool_call_id": evicted[0]})
        assert not answer.startswith("Error")
        assert f"'{evicted[0]}'" in answer
        assert "cannot be recalled" in answer


async def test_a_later_eviction_in_redis_takes_back_an_earlier_markers_promise(
    redis_server: RedisServer, prefix: str
) -> None:
    # The controller awaits RedisStore: its async path must ask Redis, after a write that
    # evicted, which of the handles the view's markers name it still holds.
    with RedisStore(redis_server.url, prefix=prefix, max_bytes=5_000) as store:
        controller = CompactionController(
            ToolResultHiding(preserve_recent_n=1),
            max_context_size=100,
            reserved_context_size=0,
            store=store,
        )
        first = await controller.compact(history(3), force=True)
        assert first.store_problem is None
        early = {h for m in first.history for h in NAMED.findall(m.text)}
        assert early >= {"c0", "c1"}
        grown = [*first.history]
        for n in range(3, 7):
            body = "\n".join(f"row {n}.{k}: {'x' * 40}" for k in range(12))
            grown += [assistant(None, call(f"c{n}", "cat")), tool(f"c{n}", body)]
        second = await controller.compact([*grown, assistant("done")], force=True)
        assert second.store_problem is not None
        assert second.store_problem.kind == "store_evicted"
        promised = {h for m in second.history for h in NAMED.findall(m.text)}
        assert promised
        for handle in promised:
            answer = execute_recall(store, {"tool_call_id": handle})
            assert "cannot be recalled" not in answer, f"{handle} is promised but gone"
        withdrawn = early - promised
        assert withdrawn, "no earlier marker was taken back: the test needs a smaller bound"
        for handle in withdrawn:
            assert "cannot be recalled" in execute_recall(store, {"tool_call_id": handle})
