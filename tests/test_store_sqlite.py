"""SQLiteStore specifics: a real file, reopened, shared by processes and threads, versioned."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ctxcompact import Message
from ctxcompact.exceptions import CtxCompactError, StoreError
from ctxcompact.store import SCHEMA_VERSION, MemoryStore, SQLiteStore

from .test_store import record


def test_the_file_survives_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "dir" / "o.db"
    store = SQLiteStore(path, max_bytes=10_000)
    store.put(record("call_1", "kept across restarts"))
    store.put_summary("ns", "k", [Message.user("s")])
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.get("default", "call_1")
    with SQLiteStore(path, max_bytes=10_000) as again:
        assert again.get("default", "call_1").message.text == "kept across restarts"  # type: ignore[union-attr]
        assert again.get_summary("ns", "k") == (Message.user("s"),)
        assert again.total_bytes == store_bytes(again)


def store_bytes(store: SQLiteStore) -> int:
    with sqlite3.connect(store.path) as conn:
        return int(conn.execute("SELECT total(size) FROM entries").fetchone()[0])


def test_the_file_is_in_wal_mode_with_a_versioned_schema(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "o.db"):
        pass
    conn = sqlite3.connect(tmp_path / "o.db")
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    finally:
        conn.close()


def test_a_file_from_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "o.db"
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(StoreError, match=r"schema version 2, newer") as err:
        SQLiteStore(path)
    assert err.value.path == str(path)


def test_a_file_that_is_not_a_database_gives_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "o.db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="cannot open the store") as err:
        SQLiteStore(path)
    assert isinstance(err.value, CtxCompactError)


def test_bad_max_bytes_is_refused() -> None:
    with pytest.raises(StoreError, match="max_bytes must be a positive integer"):
        MemoryStore(max_bytes=0)


_WRITER = textwrap.dedent(
    """
    import sys
    from ctxcompact import Message
    from ctxcompact.store import SQLiteStore, StoredOriginal
    path, prefix, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = SQLiteStore(path)
    print("ready", flush=True)
    sys.stdin.readline()  # start together
    for i in range(count):
        store.put(StoredOriginal.from_message(
            Message.tool(f"{prefix}_{i}", f"{prefix} result {i}"), position=i, kind="hidden"))
        if i % 10 == 0:
            seen = store.get("default", "parent_0")
            assert seen is not None and seen.message.text == "from the parent", seen
    store.close()
    print("done", flush=True)
    """
)


def test_two_processes_write_and_read_one_file_concurrently(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    with SQLiteStore(path) as parent:
        parent.put(record("parent_0", "from the parent"))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        children = [
            subprocess.Popen(
                [sys.executable, "-c", _WRITER, path, prefix, "60"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
            for prefix in ("a", "b")
        ]
        for child in children:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "ready"
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        # The parent writes and reads while they do.
        for i in range(30):
            parent.put(record(f"p_{i}", f"parent result {i}", position=i))
            parent.get("default", "a_0")
        for child in children:
            out, err = child.communicate(timeout=60)
            assert child.returncode == 0, err
            assert out.strip() == "done"
        for prefix in ("a", "b"):
            for i in range(60):
                got = parent.get("default", f"{prefix}_{i}")
                assert got is not None
                assert got.message.text == f"{prefix} result {i}"
        assert len(parent) == 1 + 30 + 120
        assert parent.total_bytes == store_bytes(parent)


def test_threads_share_one_store_object(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "o.db") as store:

        def work(k: int) -> None:
            for i in range(20):
                store.put(record(f"t{k}_{i}", "x"))
                assert store.get("default", f"t{k}_{i}") is not None

        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(store) == 80


def test_a_path_under_home_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    with SQLiteStore("~/.cache/ctxcompact/o.db") as store:
        assert store.path == str(tmp_path / ".cache" / "ctxcompact" / "o.db")
    assert (tmp_path / ".cache" / "ctxcompact" / "o.db").exists()


_OPENER = textwrap.dedent(
    """
    import sys, time
    from ctxcompact import Message
    from ctxcompact.store import SQLiteStore, StoredOriginal
    path, name, start = sys.argv[1], sys.argv[2], float(sys.argv[3])
    time.sleep(max(0.0, start - time.time()))  # all open the new file at the same moment
    with SQLiteStore(path) as store:
        store.put(StoredOriginal.from_message(Message.tool(name, name), position=0, kind="hidden"))
    """
)


def test_several_processes_can_create_the_same_new_file_at_once(tmp_path: Path) -> None:
    path = str(tmp_path / "fresh.db")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    start = time.time() + 1.5
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _OPENER, path, f"p{k}", str(start)],
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for k in range(3)
    ]
    for child in children:
        _, err = child.communicate(timeout=60)
        assert child.returncode == 0, err
    with SQLiteStore(path) as store:
        assert sorted(store.get("default", f"p{k}").message.text for k in range(3)) == [
            "p0",
            "p1",
            "p2",
        ]  # type: ignore[union-attr]


@pytest.fixture(params=[0o022, 0o000], ids=["umask022", "umask000"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX")
def test_the_file_and_its_side_files_are_private_whatever_the_umask(
    tmp_path: Path, umask: int
) -> None:
    path = tmp_path / "new" / "deeper" / "o.db"
    with SQLiteStore(path) as store:
        store.put(record("call_1", "secret tool output"))
        store.put_summary("ns", "k", [Message.user("s")])
        files = {p.name: mode(p) for p in path.parent.iterdir()}
        # All three exist while the connection is open (WAL mode), and none is readable by
        # anyone but the owner.
        assert files == {"o.db": 0o600, "o.db-wal": 0o600, "o.db-shm": 0o600}
    assert mode(tmp_path / "new") == 0o700
    assert mode(tmp_path / "new" / "deeper") == 0o700


@pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX")
def test_an_existing_directory_is_left_alone(tmp_path: Path, umask: int) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    with SQLiteStore(shared / "o.db") as store:
        store.put(record("call_1", "x"))
        assert mode(shared / "o.db") == 0o600
    assert mode(shared) == 0o755


@pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX")
def test_a_world_readable_file_from_before_is_made_private_on_open(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "o.db"
    with SQLiteStore(path) as store:
        store.put(record("call_1", "kept"))
        for name in ("o.db", "o.db-wal", "o.db-shm"):
            (tmp_path / name).chmod(0o644)  # as an older ctxcompact left them
        with caplog.at_level("WARNING", logger="ctxcompact.store"), SQLiteStore(path) as again:
            assert again.get("default", "call_1").message.text == "kept"  # type: ignore[union-attr]
            for name in ("o.db", "o.db-wal", "o.db-shm"):
                assert mode(tmp_path / name) == 0o600, name
    assert "readable by others" in caplog.text
    assert "kept" not in caplog.text
