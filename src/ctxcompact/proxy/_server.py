"""The proxy served in a thread of the calling process, on a free loopback port.

``ctxcompact wrap`` runs the proxy beside the command it wraps: uvicorn serves the app in a
thread (uvicorn leaves the signals alone outside the main thread, so the command line keeps
them), on a socket bound to port 0 before the server starts, so no other process can take the
port between choosing and binding it.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import TYPE_CHECKING

import uvicorn

if TYPE_CHECKING:
    from types import TracebackType

    from starlette.types import ASGIApp

__all__ = ["BackgroundServer"]

START_TIMEOUT = 30.0
"""Seconds the server has to start (the app's start-up included) before it is given up."""


class BackgroundServer:
    """Serve ``app`` on ``127.0.0.1`` in a thread while the ``with`` block runs.

    Args:
        app: The ASGI app (its lifespan runs at start and at stop).
        keep_alive_timeout: Seconds an idle client connection stays open.

    Example:
        >>> from starlette.applications import Starlette
        >>> with BackgroundServer(Starlette()) as url:
        ...     url.startswith("http://127.0.0.1:")
        True
    """

    def __init__(self, app: ASGIApp, *, keep_alive_timeout: int = 120) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", 0))
        self.port: int = self._socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            app,
            log_level="warning",  # no access lines: they would land in the command's terminal
            lifespan="on",
            timeout_keep_alive=keep_alive_timeout,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )

    def __enter__(self) -> str:
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the proxy did not start (see the log above)")
            time.sleep(0.01)
        return self.url

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop serving (open connections are closed) and wait for the lifespan's shutdown."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=START_TIMEOUT)
        self._socket.close()
