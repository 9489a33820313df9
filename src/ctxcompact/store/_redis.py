"""RedisStore: removed originals in Redis, shared by every process and machine that points at it.

How an asyncio client serves both kinds of caller: the store runs the ``redis`` package's
asyncio client on an event loop of its own, in one daemon thread. The synchronous methods of
:class:`~ctxcompact.store.OriginalsStore` (the agent, the recall tool, any loop without asyncio)
hand it a coroutine and wait for the answer, blocking only their own thread; the ``a``-methods
(:class:`~ctxcompact.store.AsyncOriginalsStore`: the controller's store hook and the proxy)
await the same work from any event loop without blocking it. One client, one connection pool,
whatever the number of threads and loops using the store: the asyncio client's connections
belong to the loop that opened them, so a loop of its own is what lets one store object serve
uvicorn's loop, worker threads and an agent's ``asyncio.run`` alike.

Guarantees, as :class:`~ctxcompact.store.SQLiteStore`'s: records live in namespaces; a record
is identified by its namespace, id, position and content hash (ids are re-used); ``get``
prefers the exact position, then the most recently stored; a bound in bytes of JSON with the
least recently stored entries evicted first, counted in :attr:`RedisStore.evictions` (so the
controller reports them and keeps its markers' promises, as with the other stores). Each
operation is one Lua script (:mod:`._redis_lua`), atomic in Redis, so replicas writing at once
never break the bound nor half-write a record. Credentials in the URL are never shown:
errors, logs and ``repr`` use :attr:`RedisStore.display_url`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import logging
import re
import threading
from typing import TYPE_CHECKING, Any, TypeVar, cast
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

from ..exceptions import MissingDependencyError, StoreError
from ._memory import DEFAULT_MAX_BYTES, check_max_bytes, parse_summary, too_big
from ._records import REMOVAL_KINDS, RemovalKind, StoredOriginal, dump_message
from ._redis_lua import FIND_SUMMARY, GET, PUT

if TYPE_CHECKING:
    from collections.abc import Coroutine, Sequence

    from .._history.messages import Message

__all__ = ["DEFAULT_PREFIX", "DEFAULT_TIMEOUT", "RedisStore", "display_url"]

logger = logging.getLogger("ctxcompact.store")

DEFAULT_PREFIX = "ctxcompact"
"""The key prefix: every key of the store starts with ``{ctxcompact}:``."""

DEFAULT_TIMEOUT = 5.0
"""Seconds a Redis command (and a connection attempt) may take before it fails (redis-py's
own default); an operation gives up after its retries, as a :class:`StoreError`."""

_RETRIES = 2  # after a dropped connection or a timeout (redis-py's default: 10)
_PREFIX = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
_SCHEMES = ("redis", "rediss", "unix")
_T = TypeVar("_T")


def display_url(url: str) -> str:
    """``url`` as it may be shown: no user, no password, no query (which may carry one).

    Example:
        >>> display_url("redis://user:secret@cache.internal:6380/2?password=x")
        'redis://cache.internal:6380/2'
    """
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "(invalid URL)"
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc += f":{port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class RedisStore:
    """An :class:`~ctxcompact.store.OriginalsStore` in Redis (``pip install 'ctxcompact[redis]'``).

    Every proxy replica (or agent process) given the same URL and prefix shares what the others
    stored: a conversation's next request may go to any of them. Both the synchronous Protocol
    and its async variant (:class:`~ctxcompact.store.AsyncOriginalsStore`) are served; the async
    methods never block the caller's event loop. Close it with :meth:`close` or a ``with`` block.

    Time to live: without ``ttl`` (the default) an entry stays until the bound evicts it. With
    ``ttl``, an entry not stored again for ``ttl`` seconds is never returned, and is removed by
    the next write; every key of the store also expires ``ttl`` seconds after the last write,
    so a store nobody writes to any more leaves nothing behind. Time is the Redis server's.

    Redis itself must not evict the store's keys (its ``maxmemory-policy`` at ``noeviction``,
    the default, or a ``volatile-*`` policy without ``ttl``): the bound here is what keeps the
    store's size. Needs Redis 5 or newer; a single server or a primary (Redis Cluster is not
    supported: every key is in one hash slot, ``{prefix}``).

    Args:
        url: ``redis://[[user]:password@]host[:port][/db]``, ``rediss://`` (TLS) or
            ``unix://path``; the URL syntax of ``redis.asyncio.Redis.from_url``.
        max_bytes: The bound, in bytes of message JSON, over all namespaces.
        prefix: Starts every key of the store; stores with different prefixes share nothing.
        ttl: Seconds an entry lives after it was last stored, or ``None`` (no expiry).
        timeout: Seconds a command or a connection attempt may take.

    Raises:
        MissingDependencyError: The ``redis`` package is not installed.
        StoreError: A bad argument, or Redis cannot be reached (the error shows the URL
            without its credentials).

    Example:
        >>> store = RedisStore("redis://127.0.0.1:6379/0")  # doctest: +SKIP
        >>> store.put(StoredOriginal.from_message(Message.tool("c1", "a.py"), position=2,
        ...                                       kind="hidden"))  # doctest: +SKIP
        >>> store.get("default", "c1").message.text  # doctest: +SKIP
        'a.py'
    """

    def __init__(
        self,
        url: str,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        prefix: str = DEFAULT_PREFIX,
        ttl: float | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        try:
            from redis import asyncio as aioredis
        except ImportError as exc:
            raise MissingDependencyError("RedisStore", "redis") from exc
        if not isinstance(url, str) or urlsplit(url).scheme not in _SCHEMES:
            raise StoreError(f"url must be a redis://, rediss:// or unix:// URL, got {_kind(url)}")
        if not isinstance(prefix, str) or not _PREFIX.fullmatch(prefix):
            raise StoreError(
                f"prefix must be 1 to 64 letters, digits or _.:- characters, got {prefix!r}"
            )
        if ttl is not None and (isinstance(ttl, bool) or not ttl > 0):
            raise StoreError(f"ttl must be a positive number of seconds or None, got {ttl!r}")
        if isinstance(timeout, bool) or not timeout > 0:
            raise StoreError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.max_bytes = check_max_bytes(max_bytes)
        self.prefix = prefix
        self.ttl = ttl
        self.timeout = float(timeout)
        self.display_url = display_url(url)
        """The URL without its credentials: what errors, logs and ``repr`` show."""
        self.evictions = 0
        """Entries this object's writes evicted so far to stay under ``max_bytes``, as the
        write's script reports them (other processes sharing the prefix count their own)."""
        self._secrets = _secrets(url)
        tag = "{" + prefix + "}:"
        self._keys = {name: tag + name for name in ("clock", "bytes", "lru", "size", "data")}
        self._idprefix = tag + "id:"
        self._ttl_us = 0 if ttl is None else max(1, round(ttl * 1_000_000))
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="ctxcompact-redis-store", daemon=True
        )
        self._closing = False
        self._closed = False
        self._lock = threading.Lock()
        self._thread.start()
        try:
            self._client, self._scripts = self._wait(self._connect(aioredis, url), "connect to")
        except BaseException:
            self._stop()
            raise

    async def _connect(self, aioredis: Any, url: str) -> tuple[Any, dict[str, Any]]:
        from redis.asyncio.retry import Retry
        from redis.backoff import ExponentialBackoff

        client = aioredis.Redis.from_url(
            url,
            socket_timeout=self.timeout,
            socket_connect_timeout=self.timeout,
            retry=Retry(ExponentialBackoff(cap=0.5, base=0.01), _RETRIES),
        )
        try:
            await client.ping()
        except BaseException:
            await client.aclose()
            raise
        scripts = {
            "put": client.register_script(PUT),
            "get": client.register_script(GET),
            "find": client.register_script(FIND_SUMMARY),
        }
        return client, scripts

    def __repr__(self) -> str:
        return (
            f"RedisStore({self.display_url!r}, prefix={self.prefix!r}, max_bytes={self.max_bytes})"
        )

    def __enter__(self) -> RedisStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections and stop the store's thread; using it afterwards raises."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
        try:
            self._wait(self._client.aclose(), "close")
        except StoreError:
            logger.debug("RedisStore %s: closing the client failed", self.display_url)
        finally:
            self._stop()

    def _stop(self) -> None:
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=self.timeout)
        if not self._thread.is_alive():
            self._loop.close()

    # -- the Protocol -------------------------------------------------------------------------

    def put(self, *records: StoredOriginal) -> None:
        self._wait(self._put(records), "write to")

    def get(
        self, namespace: str, tool_call_id: str, *, position: int | None = None
    ) -> StoredOriginal | None:
        return self._wait(self._get(namespace, tool_call_id, position), "read")

    def put_summary(self, namespace: str, key: str, messages: Sequence[Message]) -> None:
        self._wait(self._put_summary(namespace, key, messages), "write to")

    def get_summary(self, namespace: str, key: str) -> tuple[Message, ...] | None:
        found = self._wait(self._find(namespace, [key]), "read")
        return None if found is None else found[1]

    # -- the async variant (AsyncOriginalsStore) ---------------------------------------------

    async def aput(self, *records: StoredOriginal) -> None:
        """:meth:`put`, awaited without blocking the caller's event loop."""
        await self._await(self._put(records), "write to")

    async def aget(
        self, namespace: str, tool_call_id: str, *, position: int | None = None
    ) -> StoredOriginal | None:
        """:meth:`get`, awaited."""
        return await self._await(self._get(namespace, tool_call_id, position), "read")

    async def aput_summary(self, namespace: str, key: str, messages: Sequence[Message]) -> None:
        """:meth:`put_summary`, awaited."""
        await self._await(self._put_summary(namespace, key, messages), "write to")

    async def aget_summary(self, namespace: str, key: str) -> tuple[Message, ...] | None:
        """:meth:`get_summary`, awaited."""
        found = await self._await(self._find(namespace, [key]), "read")
        return None if found is None else found[1]

    async def afind_summary(
        self, namespace: str, keys: Sequence[str]
    ) -> tuple[int, tuple[Message, ...]] | None:
        """The summary kept under the first of ``keys`` that has one, with that key's index
        in ``keys``: one round trip, however many keys."""
        return await self._await(self._find(namespace, keys), "read")

    # -- beyond the Protocol ------------------------------------------------------------------

    def __len__(self) -> int:
        count = self._wait(self._client.zcard(self._keys["lru"]), "read")
        return int(count)

    @property
    def total_bytes(self) -> int:
        """Bytes of JSON kept now (all namespaces)."""
        value = self._wait(self._client.get(self._keys["bytes"]), "read")
        return int(value or 0)

    # -- the work, on the store's loop -----------------------------------------------------------

    async def _put(self, records: Sequence[StoredOriginal]) -> None:
        entries: list[str | int] = []
        skipped: list[str] = []
        for r in records:
            size = r.size
            if size > self.max_bytes:
                skipped.append(r.tool_call_id)
                continue
            meta = json.dumps(
                [r.position, r.content_hash, r.tool_name, r.kind, r.created_at],
                ensure_ascii=True,
            )
            field = f"{r.position}:{r.content_hash}"
            entries += [f"o:{_id_hash(r.namespace, r.tool_call_id)}:{field}", meta, size]
            entries += [r.content, "0"]
        if entries:
            await self._write(entries)
        if skipped:
            raise too_big(skipped, self.max_bytes)

    async def _put_summary(self, namespace: str, key: str, messages: Sequence[Message]) -> None:
        content = "[" + ",".join(dump_message(m) for m in messages) + "]"
        size = len(content.encode("utf-8"))
        if size > self.max_bytes:
            raise too_big([f"summary {key[:12]}"], self.max_bytes)
        await self._write([_summary_id(namespace, key), "", size, content, "1"])

    async def _write(self, entries: list[str | int]) -> None:
        k = self._keys
        keys = [k["clock"], k["bytes"], k["lru"], k["size"], k["data"]]
        args: list[str | int] = [self.max_bytes, self._ttl_us, self._idprefix, *entries]
        evicted, freed, expired = await self._scripts["put"](keys=keys, args=args)
        if evicted:
            self.evictions += int(evicted)  # only the store's own thread writes it
            logger.info(
                "store %s: evicted the %d least recently stored entries (%d bytes) to stay "
                "under max_bytes=%d",
                self.display_url,
                evicted,
                freed,
                self.max_bytes,
            )
        if expired:
            logger.info(
                "store %s: %d entries expired (ttl=%ss)", self.display_url, expired, self.ttl
            )

    async def _get(
        self, namespace: str, tool_call_id: str, position: int | None
    ) -> StoredOriginal | None:
        idhash = _id_hash(namespace, tool_call_id)
        keys = [self._keys["lru"], self._keys["data"], self._idprefix + idhash]
        args = [idhash, "" if position is None else str(position), self._ttl_us]
        found = await self._scripts["get"](keys=keys, args=args)
        if found is None:
            return None
        meta, content = found
        position_, content_hash, tool_name, kind, created_at = json.loads(meta)
        return StoredOriginal(
            namespace=namespace,
            tool_call_id=tool_call_id,
            position=int(position_),
            tool_name=tool_name,
            content=content.decode("utf-8"),
            content_hash=content_hash,
            kind=cast("RemovalKind", kind if kind in REMOVAL_KINDS else "dropped"),
            created_at=float(created_at),
        )

    async def _find(
        self, namespace: str, keys: Sequence[str]
    ) -> tuple[int, tuple[Message, ...]] | None:
        if not keys:
            return None
        args = [self._ttl_us, *(_summary_id(namespace, key) for key in keys)]
        found = await self._scripts["find"](keys=[self._keys["lru"], self._keys["data"]], args=args)
        if found is None:
            return None
        index, content = found
        return int(index) - 1, parse_summary(content.decode("utf-8"))

    # -- crossing from the caller's thread or loop to the store's --------------------------------

    def _submit(self, work: Coroutine[Any, Any, _T]) -> Any:
        if self._closed:
            work.close()
            raise StoreError("the store is closed", path=self.display_url)
        if threading.current_thread() is self._thread:
            work.close()
            raise StoreError("called from the store's own thread", path=self.display_url)
        return asyncio.run_coroutine_threadsafe(work, self._loop)

    def _wait(self, work: Coroutine[Any, Any, _T], what: str) -> _T:
        future = self._submit(work)
        try:
            return cast("_T", future.result(timeout=self._deadline))
        except StoreError:
            raise
        except concurrent.futures.TimeoutError as exc:
            future.cancel()
            raise self._error(what, exc) from None
        except Exception as exc:
            raise self._error(what, exc) from exc

    async def _await(self, work: Coroutine[Any, Any, _T], what: str) -> _T:
        future = self._submit(work)
        try:
            return cast("_T", await asyncio.wait_for(asyncio.wrap_future(future), self._deadline))
        except StoreError:
            raise
        except asyncio.TimeoutError as exc:
            raise self._error(what, exc) from None
        except Exception as exc:
            raise self._error(what, exc) from exc

    @property
    def _deadline(self) -> float:
        """How long one operation may take in all: each try's command timeout, plus backoff."""
        return self.timeout * (_RETRIES + 1) + 2.0

    def _error(self, what: str, exc: BaseException) -> StoreError:
        if isinstance(exc, StoreError):
            return exc
        text = str(exc)
        for secret in self._secrets:
            text = text.replace(secret, "***")
        detail = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
        return StoreError(f"cannot {what} the store: {detail}", path=self.display_url)


def _id_hash(namespace: str, tool_call_id: str) -> str:
    """The key part of one namespace's tool-call id: ids and namespaces hold any character
    (a lone surrogate included), a key part only what ASCII JSON writes."""
    text = json.dumps([namespace, tool_call_id], ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:32]


def _summary_id(namespace: str, key: str) -> str:
    text = json.dumps([namespace, key], ensure_ascii=True)
    return "s:" + hashlib.sha256(text.encode("ascii")).hexdigest()[:40]


def _secrets(url: str) -> list[str]:
    """The password (as written and decoded) and every query value of three characters or
    more (a ``?password=``): never to be shown, longest first."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return []
    found = {password, unquote(password)} if password else set()
    for _, value in parse_qsl(parts.query):
        found |= {value, unquote(value)} if len(value) >= 3 else set()
    return sorted(found, key=len, reverse=True)


def _kind(value: object) -> str:
    """What was given instead of a URL, without repeating it (it may hold a password)."""
    if isinstance(value, str):
        scheme = urlsplit(value).scheme
        return f"a {scheme}:// URL" if scheme else "a string without a scheme"
    return type(value).__name__
