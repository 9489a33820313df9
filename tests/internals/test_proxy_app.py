"""The proxy app survives whatever its rewriter does: a failure forwards the original bytes.

White-box: the rewriter is the proxy's private per-request object; a stand-in that raises (or
returns a body that cannot be encoded) is handed to the private ``build_app``, since no
configuration makes the real one fail that way. Over real HTTP on 127.0.0.1.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

from ctxcompact.proxy._app import BodyRewriter, ProxySettings, build_app
from ctxcompact.proxy._rewrite import Body, RewriteReport
from tests.helpers.proxy_servers import FakeUpstream, serve_in_thread
from tests.test_proxy import openai_history
from tests.test_proxy_hardening import post


@pytest.fixture
def upstream() -> Iterator[tuple[FakeUpstream, str]]:
    fake = FakeUpstream()
    with serve_in_thread(fake.app()) as url:
        yield fake, url


class RaisingRewriter:
    """A rewriter that fails: what the app must survive from any rewriter."""

    strategy_name = "ToolResultHiding"
    transform_names = ()

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    async def rewrite_openai(
        self, body: Body, *, caller: str | None = None
    ) -> tuple[Body | None, RewriteReport]:
        raise self.exc

    async def rewrite_anthropic(
        self, body: Body, *, caller: str | None = None
    ) -> tuple[Body | None, RewriteReport]:
        raise self.exc

    async def rewrite_responses(
        self, body: Body, *, caller: str | None = None
    ) -> tuple[Body | None, RewriteReport]:
        raise self.exc


class UnencodableRewriter(RaisingRewriter):
    async def rewrite_openai(
        self, body: Body, *, caller: str | None = None
    ) -> tuple[Body | None, RewriteReport]:
        report = RewriteReport("transformed", "Hiding", 90, 40, 4, 4)
        return {**body, "oops": {1, 2}}, report


@pytest.mark.parametrize(
    ("rewriter", "reason", "start"),
    [
        (
            RaisingRewriter(RecursionError("maximum recursion depth exceeded")),
            "rewriting raised RecursionError",
            "action=failed; strategy=ToolResultHiding; tokens=unknown; messages=4->4;",
        ),
        (
            RaisingRewriter(ValueError("SECRET-in-the-message")),
            "rewriting raised ValueError",
            "action=failed; strategy=ToolResultHiding; tokens=unknown; messages=4->4;",
        ),
        (
            # The rewriter's report stands, with the counts of the request as it goes out.
            UnencodableRewriter(ValueError()),
            "encoding raised TypeError",
            "action=failed; strategy=Hiding; tokens=90->90; messages=4->4;",
        ),
    ],
    ids=["recursion", "value-error", "unencodable"],
)
def test_anything_the_rewriter_raises_forwards_the_original_bytes(
    upstream: tuple[FakeUpstream, str],
    caplog: pytest.LogCaptureFixture,
    rewriter: BodyRewriter,
    reason: str,
    start: str,
) -> None:
    fake, url = upstream
    caplog.set_level(logging.INFO)
    raw = json.dumps({"model": "m", "messages": openai_history(1, 1)}).encode()
    app = build_app(rewriter, ProxySettings(f"{url}/v1", url))
    with serve_in_thread(app) as proxy:
        r = post(proxy, raw)
    assert r.status_code == 200
    assert fake.received[-1].body == raw
    header = r.headers["x-ctxcompact"]
    assert header == f"{start} error=proxy {reason}"
    warnings = [rec for rec in caplog.records if rec.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert reason in warnings[0].getMessage()
    assert warnings[0].exc_info is None
    assert "SECRET" not in caplog.text
