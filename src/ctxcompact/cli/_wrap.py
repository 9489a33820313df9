"""``ctxcompact wrap -- COMMAND ...``: run any agent through the proxy, in one command.

The proxy starts in this process on a free loopback port (:class:`~ctxcompact.proxy._server.
BackgroundServer`); COMMAND runs with the environment variables that common agents and SDKs
read pointed at it (:data:`AGENT_VARIABLES`); its exit code becomes wrap's; at the end one line
on standard error sums up what the proxy did, from its metrics.

Signals: SIGTERM and SIGHUP sent to wrap are passed to COMMAND, which decides when to stop
(wrap waits for it). SIGINT too, except when wrap runs in the foreground of a terminal: Ctrl-C
then reaches COMMAND directly (it is in wrap's process group), and passing it again would
deliver it twice (twice is "exit now" for some interactive agents).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from typing import TYPE_CHECKING

from ._proxy import log_to, proxy_config

if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping
    from types import FrameType

__all__ = ["AGENT_VARIABLES", "agent_environment", "run_wrap", "summary_line"]

AGENT_VARIABLES: dict[str, str] = {
    # The OpenAI SDKs (Python, Node), so the OpenAI Agents SDK and Codex CLI's built-in
    # provider, and LiteLLM.
    "OPENAI_BASE_URL": "openai",
    # aider (and LiteLLM, which aider uses), older OpenAI clients.
    "OPENAI_API_BASE": "openai",
    # The Anthropic SDKs, so Claude Code, and LiteLLM.
    "ANTHROPIC_BASE_URL": "anthropic",
    # LiteLLM reads it before ANTHROPIC_BASE_URL (aider with Claude models).
    "ANTHROPIC_API_BASE": "anthropic",
}
"""The variables wrap sets for COMMAND, and which base URL each gets: ``openai`` is the
proxy's URL with ``/v1``, ``anthropic`` the proxy's URL."""

_PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy")
_FORWARDED = tuple(
    s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None
)


def agent_environment(environ: Mapping[str, str], proxy_url: str) -> dict[str, str]:
    """``environ`` with :data:`AGENT_VARIABLES` pointing at the proxy at ``proxy_url``.

    ``CTXCOMPACT_PROXY_URL`` is the proxy's own URL. When an HTTP proxy is configured
    (``HTTP_PROXY`` and the like), the loopback addresses join ``NO_PROXY``, so the command's
    requests reach ctxcompact directly.

    Example:
        >>> env = agent_environment({}, "http://127.0.0.1:5000")
        >>> env["OPENAI_BASE_URL"], env["ANTHROPIC_BASE_URL"]
        ('http://127.0.0.1:5000/v1', 'http://127.0.0.1:5000')
    """
    urls = {"openai": f"{proxy_url}/v1", "anthropic": proxy_url}
    env = dict(environ)
    for name, kind in AGENT_VARIABLES.items():
        env[name] = urls[kind]
    env["CTXCOMPACT_PROXY_URL"] = proxy_url
    if any(environ.get(name) for name in _PROXY_VARIABLES):
        for name in ("NO_PROXY", "no_proxy"):
            kept = [h for h in env.get(name, "").split(",") if h.strip()]
            env[name] = ",".join([*kept, "127.0.0.1", "localhost"])
    return env


def summary_line(requests: int, compactions: int, before: int, after: int) -> str:
    """The line wrap prints at the end.

    Example:
        >>> print(summary_line(12, 3, 90_000, 60_000))
        ctxcompact wrap: 12 requests, 3 compactions, 30,000 tokens saved (33% of 90,000, estimated)
    """
    saved = before - after
    share = f"{saved / before:.0%} of {before:,}, estimated" if before else "estimated"
    plural = "" if requests == 1 else "s"
    compacted = "compaction" if compactions == 1 else "compactions"
    return (
        f"ctxcompact wrap: {requests} request{plural}, {compactions} {compacted}, "
        f"{saved:,} tokens saved ({share})"
    )


def run_wrap(args: argparse.Namespace) -> int:
    """Serve the proxy, run the command through it, and exit as the command did.

    Exit codes: the command's own; 128 + N when a signal N ended it (as shells say it); 127
    when it cannot be found, 126 when it cannot be run; 2 for a bad configuration.
    """
    # Deferred: the proxy needs the optional 'proxy' extra (starlette, uvicorn, httpx).
    from ..proxy import create_app
    from ..proxy._server import BackgroundServer

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        sys.stderr.write("ctxcompact wrap: give the command to run after --\n")
        return 2
    config = proxy_config(args, environ=os.environ)
    # The command owns the terminal: the proxy's per-request lines go to --log, if anywhere.
    if args.log is not None:
        handler = log_to(logging.FileHandler(args.log, encoding="utf-8"), logging.INFO)
    else:
        handler = log_to(logging.StreamHandler(sys.stderr), logging.WARNING)
    try:
        app = create_app(config)
        with BackgroundServer(app, keep_alive_timeout=config.proxy.keep_alive_timeout) as url:
            code = _run(command, agent_environment(os.environ, url))
    finally:
        logging.getLogger("ctxcompact").removeHandler(handler)
        handler.close()
    totals = app.state.metrics.totals()
    sys.stderr.write(
        summary_line(totals.requests, totals.compactions, totals.tokens_before, totals.tokens_after)
        + "\n"
    )
    return code


def _run(command: list[str], env: dict[str, str]) -> int:
    """Run ``command``, passing signals on, and return its exit code (shell style)."""
    child: subprocess.Popen[bytes] | None = None
    pending: list[int] = []

    def forward(signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT and _terminal_reaches_child():
            return  # Ctrl-C went to the command's process group already
        if child is None:
            pending.append(signum)
        elif child.poll() is None:
            child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in _FORWARDED}
    try:
        try:
            child = subprocess.Popen(command, env=env)
        except FileNotFoundError:
            sys.stderr.write(f"ctxcompact wrap: command not found: {command[0]}\n")
            return 127
        except PermissionError:
            sys.stderr.write(f"ctxcompact wrap: command cannot be run: {command[0]}\n")
            return 126
        for signum in pending:
            child.send_signal(signum)
        code = child.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 128 - code if code < 0 else code


def _terminal_reaches_child() -> bool:
    """Whether wrap runs in the foreground of a terminal, so a Ctrl-C there reaches the
    command (in wrap's process group) without wrap."""
    for fd in (0, 1, 2):
        try:
            if os.isatty(fd):
                return os.tcgetpgrp(fd) == os.getpgrp()
        except OSError:
            continue
    return False
