"""SQLiteStore: removed originals in one SQLite file, shared by processes, kept across restarts.

Concurrency: the file is in WAL mode (readers never block the writer nor each other), every
write is one ``BEGIN IMMEDIATE`` transaction (writers queue on the file lock instead of failing
half-way), and ``busy_timeout`` makes a writer wait for another process's transaction rather
than fail at once. One connection per store object, shared by threads under a lock.

The schema's version is ``PRAGMA user_version``; a file written by a newer schema is refused
with a :class:`~ctxcompact.exceptions.StoreError` rather than misread.

Privacy: the file holds every caller's hidden tool output, so it is created 0600 (SQLite gives
its ``-wal`` and ``-shm`` files the database file's mode) and the directories the store creates
are 0700, whatever the umask; a file of ours that others can read is made 0600 on open.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from typing import TYPE_CHECKING, Any, cast

from ..exceptions import StoreError
from ._memory import DEFAULT_MAX_BYTES, check_max_bytes, parse_summary, too_big
from ._records import REMOVAL_KINDS, RemovalKind, StoredOriginal, dump_message

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

    from .._history.messages import Message

__all__ = ["SCHEMA_VERSION", "SQLiteStore"]

logger = logging.getLogger("ctxcompact.store")

SCHEMA_VERSION = 1
"""The version of the file layout this code writes (``PRAGMA user_version``)."""

DEFAULT_BUSY_TIMEOUT = 10.0
"""Seconds a write waits for another process's transaction before failing."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    id INTEGER PRIMARY KEY,
    namespace TEXT NOT NULL,
    entry TEXT NOT NULL CHECK (entry IN ('original', 'summary')),
    key TEXT NOT NULL,
    position INTEGER NOT NULL,
    content_hash TEXT NOT NULL,
    tool_name TEXT,
    kind TEXT NOT NULL,
    created_at REAL NOT NULL,
    stamp INTEGER NOT NULL,
    size INTEGER NOT NULL,
    content TEXT NOT NULL,
    UNIQUE (namespace, entry, key, position, content_hash)
);
CREATE INDEX IF NOT EXISTS entries_stamp ON entries (stamp);
CREATE TABLE IF NOT EXISTS totals (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO totals VALUES ('bytes', 0), ('stamp', 0);
"""

_COLUMNS = "namespace, key, position, tool_name, content, content_hash, kind, created_at"


_KEYS_PER_QUERY = 500
"""Keys in one ``IN (...)`` of :meth:`SQLiteStore.find_summary` (SQLite before 3.32 allows
999 parameters)."""


class SQLiteStore:
    """An :class:`~ctxcompact.store.OriginalsStore` in a SQLite file (stdlib ``sqlite3``).

    Several processes may open the same file at once; what one stores the others read. When
    the JSON kept passes ``max_bytes``, the least recently stored entries go first (storing a
    record again makes it recent). Close it with :meth:`close` or a ``with`` block.

    Args:
        path: The database file (``~`` expanded); created, with its directory, when missing.
        max_bytes: The bound, in bytes of message JSON, over all namespaces.
        busy_timeout: Seconds a write waits for another writer before failing.

    Raises:
        StoreError: The file cannot be opened or was written by a newer schema.

    Example:
        >>> import tempfile, os
        >>> from ctxcompact import Message
        >>> path = os.path.join(tempfile.mkdtemp(), "originals.db")
        >>> with SQLiteStore(path) as store:
        ...     store.put(StoredOriginal.from_message(Message.tool("c1", "a.py"), position=2,
        ...                                           kind="hidden"))
        >>> SQLiteStore(path).get("default", "c1").message.text
        'a.py'
    """

    def __init__(
        self,
        path: str | Path,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
    ) -> None:
        self.path = os.path.expanduser(os.fspath(path))
        self.max_bytes = check_max_bytes(max_bytes)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self.evictions = 0
        """Entries this object evicted so far to stay under ``max_bytes`` (other processes
        sharing the file count their own)."""
        self._evicting = 0
        try:
            _make_private(self.path)
            conn = sqlite3.connect(
                self.path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
            )
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the store: {exc}", path=self.path) from exc
        self._conn = conn
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            _switch_to_wal(conn, busy_timeout)
            # In WAL mode NORMAL loses nothing on a process crash, only on a power cut.
            conn.execute("PRAGMA synchronous = NORMAL")
            self._migrate(conn)
        except sqlite3.Error as exc:
            conn.close()
            self._conn = None
            raise StoreError(f"cannot open the store: {exc}", path=self.path) from exc
        except StoreError:
            conn.close()
            self._conn = None
            raise

    def _migrate(self, conn: sqlite3.Connection) -> None:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"the file has store schema version {version}, newer than this ctxcompact's "
                f"{SCHEMA_VERSION}: upgrade ctxcompact or use another file",
                path=self.path,
            )
        if version == SCHEMA_VERSION:
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            if int(conn.execute("PRAGMA user_version").fetchone()[0]) == 0:
                # Another process may have created it meanwhile: everything is IF NOT EXISTS.
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r}, max_bytes={self.max_bytes})"

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection (the file stays); using the store afterwards raises."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    # -- the Protocol -------------------------------------------------------------------------

    def put(self, *records: StoredOriginal) -> None:
        rows, skipped = [], []
        for r in records:
            size = r.size
            if size > self.max_bytes:
                skipped.append(r.tool_call_id)
                continue
            rows.append(
                (r.namespace, "original", r.tool_call_id, r.position, r.content_hash,
                 r.tool_name, r.kind, r.created_at, size, r.content)
            )  # fmt: skip
        if rows:
            self._write(lambda conn: self._upsert(conn, rows))
        if skipped:
            raise too_big(skipped, self.max_bytes)

    def get(
        self, namespace: str, tool_call_id: str, *, position: int | None = None
    ) -> StoredOriginal | None:
        row = self._read(
            f"SELECT {_COLUMNS} FROM entries WHERE namespace = ? AND entry = 'original' "
            "AND key = ? ORDER BY (position = ?) DESC, stamp DESC LIMIT 1",
            (namespace, tool_call_id, -1 if position is None else position),
        )
        if row is None:
            return None
        kind = row[6] if row[6] in REMOVAL_KINDS else "dropped"
        return StoredOriginal(
            namespace=row[0],
            tool_call_id=row[1],
            position=row[2],
            tool_name=row[3],
            content=row[4],
            content_hash=row[5],
            kind=cast("RemovalKind", kind),
            created_at=row[7],
        )

    def put_summary(self, namespace: str, key: str, messages: Sequence[Message]) -> None:
        content = "[" + ",".join(dump_message(m) for m in messages) + "]"
        size = len(content.encode("utf-8"))
        if size > self.max_bytes:
            raise too_big([f"summary {key[:12]}"], self.max_bytes)
        row = (namespace, "summary", key, -1, "", None, "summary", time.time(), size, content)

        def write(conn: sqlite3.Connection) -> None:
            _drop_summary(conn, namespace, key)  # one summary per key: a new one replaces it
            self._upsert(conn, [row])

        self._write(write)

    def delete_summary(self, namespace: str, key: str) -> bool:
        """Forget the summary kept under ``key`` (the proxy's kept compaction a later one of
        the same conversation superseded); whether there was one."""
        deleted = False

        def write(conn: sqlite3.Connection) -> None:
            nonlocal deleted
            deleted = _drop_summary(conn, namespace, key)

        self._write(write)
        return deleted

    def get_summary(self, namespace: str, key: str) -> tuple[Message, ...] | None:
        row = self._read(
            "SELECT content FROM entries WHERE namespace = ? AND entry = 'summary' AND key = ?",
            (namespace, key),
        )
        return None if row is None else parse_summary(row[0])

    # -- beyond the Protocol ------------------------------------------------------------------

    def find_summary(
        self, namespace: str, keys: Sequence[str]
    ) -> tuple[int, tuple[Message, ...]] | None:
        """The summary under the first of ``keys`` that has one, and that key's index: a
        query per :data:`_KEYS_PER_QUERY` keys instead of one per key (the proxy asks for
        every prefix of a history: 200 keys none of which is kept took 0.57 ms one by one,
        0.08 ms in one query; median of 30 alternating runs)."""
        for start in range(0, len(keys), _KEYS_PER_QUERY):
            chunk = list(keys[start : start + _KEYS_PER_QUERY])
            marks = ",".join("?" * len(chunk))
            with self._lock:
                conn = self._connection()
                try:
                    rows = conn.execute(
                        "SELECT key, content FROM entries WHERE namespace = ? "
                        f"AND entry = 'summary' AND key IN ({marks})",
                        (namespace, *chunk),
                    ).fetchall()
                except sqlite3.Error as exc:
                    raise StoreError(f"cannot read the store: {exc}", path=self.path) from exc
                except UnicodeEncodeError as exc:
                    raise _not_utf8("read", exc, self.path) from exc
            if rows:
                found = dict(rows)
                index = next(i for i, key in enumerate(chunk) if key in found)
                return start + index, parse_summary(found[chunk[index]])
        return None

    def __len__(self) -> int:
        row = self._read("SELECT count(*) FROM entries", ())
        return int(row[0]) if row else 0

    @property
    def total_bytes(self) -> int:
        """Bytes of JSON kept now (all namespaces)."""
        row = self._read("SELECT value FROM totals WHERE name = 'bytes'", ())
        return int(row[0]) if row else 0

    # -- internals ----------------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError("the store is closed", path=self.path)
        return self._conn

    def _read(self, sql: str, params: tuple[Any, ...]) -> Any:
        with self._lock:
            conn = self._connection()
            try:
                return conn.execute(sql, params).fetchone()
            except sqlite3.Error as exc:
                raise StoreError(f"cannot read the store: {exc}", path=self.path) from exc
            except UnicodeEncodeError as exc:
                raise _not_utf8("read", exc, self.path) from exc

    def _write(self, work: Callable[[sqlite3.Connection], None]) -> None:
        with self._lock:
            conn = self._connection()
            try:
                conn.execute("BEGIN IMMEDIATE")
                self._evicting = 0
                try:
                    work(conn)
                    self._evict(conn)
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                self.evictions += self._evicting
            except sqlite3.Error as exc:
                raise StoreError(f"cannot write to the store: {exc}", path=self.path) from exc
            except UnicodeEncodeError as exc:
                raise _not_utf8("write", exc, self.path) from exc

    @staticmethod
    def _upsert(conn: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> None:
        stamp = int(conn.execute("SELECT value FROM totals WHERE name = 'stamp'").fetchone()[0])
        added = 0
        for row in rows:
            stamp += 1
            updated = conn.execute(
                "UPDATE entries SET stamp = ? WHERE namespace = ? AND entry = ? AND key = ? "
                "AND position = ? AND content_hash = ?",
                (stamp, *row[:5]),
            ).rowcount
            if not updated:
                conn.execute(
                    "INSERT INTO entries (namespace, entry, key, position, content_hash, "
                    "tool_name, kind, created_at, size, content, stamp) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (*row, stamp),
                )
                added += row[8]
        conn.execute("UPDATE totals SET value = ? WHERE name = 'stamp'", (stamp,))
        conn.execute("UPDATE totals SET value = value + ? WHERE name = 'bytes'", (added,))

    def _evict(self, conn: sqlite3.Connection) -> None:
        total = int(conn.execute("SELECT value FROM totals WHERE name = 'bytes'").fetchone()[0])
        if total <= self.max_bytes:
            return
        freed, doomed = 0, []
        for entry_id, size in conn.execute("SELECT id, size FROM entries ORDER BY stamp"):
            if total - freed <= self.max_bytes:
                break
            doomed.append((entry_id,))
            freed += size
        conn.executemany("DELETE FROM entries WHERE id = ?", doomed)
        conn.execute("UPDATE totals SET value = value - ? WHERE name = 'bytes'", (freed,))
        self._evicting = len(doomed)
        logger.info(
            "store %s: evicted the %d least recently stored entries (%d bytes) to stay under "
            "max_bytes=%d",
            self.path,
            len(doomed),
            freed,
            self.max_bytes,
        )


def _not_utf8(what: str, exc: UnicodeEncodeError, path: str) -> StoreError:
    """Message content is stored as ASCII JSON whatever it holds; an id, a tool name or a
    namespace with a lone surrogate cannot be SQLite text (UTF-8), and is refused."""
    return StoreError(
        f"cannot {what} the store: a tool-call id, tool name or namespace holds a lone "
        f"surrogate ({exc.reason} at character {exc.start}), which SQLite text cannot hold",
        path=path,
    )


_PRIVATE_FILE = 0o600
_PRIVATE_DIR = 0o700
_SIDE_FILES = ("-wal", "-shm", "-journal")


def _make_private(path: str) -> None:
    """Create ``path`` (and its missing directories) readable by its owner only.

    Modes are set with ``chmod`` after creation, so the umask cannot widen (000) or narrow
    them. SQLite creates the ``-wal``, ``-shm`` and ``-journal`` files with the mode of the
    database file, so they follow. An existing file we own that group or others can read
    (one written by an older ctxcompact, 0644) is made 0600, with its side files; a file
    owned by another user is left alone (the owner decided).
    """
    if path in ("", ":memory:"):  # SQLite's temporary and in-memory databases: no file
        return
    directory = os.path.dirname(os.path.abspath(path))
    if os.name != "posix":  # no owner/group/other modes to set
        os.makedirs(directory, exist_ok=True)
        return
    missing = []
    while not os.path.isdir(directory):
        missing.append(directory)
        parent = os.path.dirname(directory)
        if parent == directory:
            break
        directory = parent
    for created in reversed(missing):
        try:
            os.mkdir(created, _PRIVATE_DIR)
        except FileExistsError:  # another process made it meanwhile: not ours to change
            continue
        os.chmod(created, _PRIVATE_DIR)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, _PRIVATE_FILE)
    except FileExistsError:
        for name in (path, *(path + suffix for suffix in _SIDE_FILES)):
            _tighten(name)
        return
    try:
        os.fchmod(fd, _PRIVATE_FILE)
    finally:
        os.close(fd)


def _tighten(path: str) -> None:
    """``path`` made 0600 when we own it and group or others have any access to it."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return
    if info.st_uid == os.geteuid() and info.st_mode & 0o077:
        os.chmod(path, _PRIVATE_FILE)
        logger.warning(
            "store %s was readable by others (mode %o); it is now 0600", path, info.st_mode & 0o777
        )


def _switch_to_wal(conn: sqlite3.Connection, busy_timeout: float) -> None:
    """``PRAGMA journal_mode = WAL``, retried: while another process creates or converts the
    same file, SQLite answers "database is locked" at once, without its busy handler, so the
    wait ``busy_timeout`` promises is done here (seen with three processes opening a new
    file together on a loaded machine)."""
    deadline = time.monotonic() + busy_timeout
    delay = 0.005
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            if time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.2)


def _drop_summary(conn: sqlite3.Connection, namespace: str, key: str) -> bool:
    """Delete the summary kept under ``key`` and take its size off the byte total; whether
    there was one."""
    old = conn.execute(
        "SELECT id, size FROM entries WHERE namespace = ? AND entry = 'summary' AND key = ?",
        (namespace, key),
    ).fetchone()
    if old is None:
        return False
    conn.execute("DELETE FROM entries WHERE id = ?", (old[0],))
    conn.execute("UPDATE totals SET value = value - ? WHERE name = 'bytes'", (old[1],))
    return True
