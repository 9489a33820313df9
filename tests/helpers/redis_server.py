"""A real Redis server for tests: Debian's ``redis-server``, on 127.0.0.1, a random port.

Use the ``redis_server`` fixture (registered once for the whole suite in
``tests/conftest.py``: one server per session) or :func:`start_redis` yourself. When the
``redis-server`` binary is not on the machine, the fixture skips with the line that installs
it (``apt-get install redis-server``; ``.ci/run`` installs it, so CI runs these tests); when
the ``redis`` Python package is missing it skips naming the extra. Nothing is written to disk
(no RDB snapshot, no append-only file) and every test gets a fresh key prefix
(:meth:`RedisServer.prefix`), so tests never see each other's keys.
"""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = ["INSTALL", "RedisServer", "redis_server", "start_redis"]

INSTALL = "redis-server is not installed: apt-get install redis-server (Debian/Ubuntu)"
"""Why the Redis tests skip on a machine without the server, and how to fix it."""

STARTUP_TIMEOUT_S = 20.0
_PREFIXES = itertools.count()


@dataclass
class RedisServer:
    """A running ``redis-server``.

    Attributes:
        url: ``redis://127.0.0.1:PORT/0``.
        port: The port it listens on.
    """

    url: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path

    def prefix(self) -> str:
        """A key prefix no other test of this session uses."""
        return f"t{os.getpid()}-{next(_PREFIXES)}"

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def _answers(port: int) -> bool:
    """Whether the server answers (PONG, or NOAUTH when it wants a password)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith((b"+PONG", b"-NOAUTH"))
    except OSError:
        return False


@contextmanager
def start_redis(*args: str, binary: str | None = None) -> Iterator[RedisServer]:
    """Start ``redis-server`` on a free loopback port, without persistence; stop it on exit.

    ``args`` go to the server's command line (``"--requirepass", "pw"``).

    Raises:
        FileNotFoundError: No ``redis-server`` on the PATH (the message says how to install).
        RuntimeError: It did not answer within :data:`STARTUP_TIMEOUT_S` (with its log).
    """
    found = binary or shutil.which("redis-server")
    if found is None:
        raise FileNotFoundError(INSTALL)
    folder = Path(tempfile.mkdtemp(prefix="ctxcompact-redis-"))
    log_path = folder / "redis.log"
    for _ in range(3):  # the port is free when chosen, another process may take it first
        port = _free_port()
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [found, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--dir", str(folder), "--protected-mode", "yes", *args],
                stdout=log,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        server = RedisServer(f"redis://127.0.0.1:{port}/0", port, process, log_path)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while process.poll() is None and time.monotonic() < deadline:
            if _answers(port):
                break
            time.sleep(0.05)
        if process.poll() is None and _answers(port):
            break
        server.stop()
    else:
        raise RuntimeError(f"redis-server did not start:\n{server.log_tail()}")
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One real Redis for the session; skips, saying how to install, when it cannot run."""
    pytest.importorskip("redis", reason="needs the redis extra: pip install 'ctxcompact[redis]'")
    try:
        with start_redis() as server:
            yield server
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
