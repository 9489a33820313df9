"""The proxy app as a class: the caller reaches the rewriter as an argument, and the app's own
lifespan closes what the proxy owns. Over real HTTP on loopback.

White-box: the app is built with the private ``build_app`` around a stand-in rewriter that
records the caller it is given, which ``create_app`` (the public door) does not let in."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from ctxcompact.proxy._app import ProxySettings, build_app
from ctxcompact.proxy._rewrite import Body, RewriteReport
from tests.helpers.proxy_servers import FakeUpstream, serve_in_thread

CHAT = "/v1/chat/completions"
BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()


@pytest.fixture
def upstream() -> Iterator[tuple[FakeUpstream, str]]:
    fake = FakeUpstream()
    with serve_in_thread(fake.app()) as url:
        yield fake, url


class RecordingRewriter:
    """Forwards every body unchanged and records whose namespace each request was given."""

    strategy_name = "Recording"
    transform_names = ("first", "second")

    def __init__(self) -> None:
        self.callers: list[str | None] = []

    async def _record(self, caller: str | None) -> tuple[Body | None, RewriteReport]:
        self.callers.append(caller)
        return None, RewriteReport("unchanged", self.strategy_name, 1, 1, 1, 1)

    async def rewrite_openai(
        self, body: Body, *, caller: str | None = None
    ) -> tuple[Body | None, RewriteReport]:
        return await self._record(caller)

    async def rewrite_anthropic(
        self, body: Body, *, caller: str | None = None
    ) -> tuple[Body | None, RewriteReport]:
        return await self._record(caller)

    async def rewrite_responses(
        self, body: Body, *, caller: str | None = None
    ) -> tuple[Body | None, RewriteReport]:
        return await self._record(caller)


def test_each_request_passes_its_callers_namespace_to_the_rewriter(
    upstream: tuple[FakeUpstream, str],
) -> None:
    fake, url = upstream
    rewriter = RecordingRewriter()
    app = build_app(rewriter, ProxySettings(f"{url}/v1", url))
    with serve_in_thread(app) as proxy:
        for key in ("key-a", "key-b", "key-a"):
            r = httpx.post(
                f"{proxy}{CHAT}", content=BODY, headers={"authorization": f"Bearer {key}"}
            )
            assert r.status_code == 200
            assert r.headers["x-ctxcompact"].startswith("action=unchanged; strategy=Recording")
    a, b, a_again = rewriter.callers
    assert a is not None
    assert b is not None
    assert a == a_again  # the same credential, the same namespace
    assert a != b  # another credential, another namespace
    assert "key-a" not in a  # a hash, never the key
    assert [r.body for r in fake.received] == [BODY] * 3


class Closable:
    def __init__(self) -> None:
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


class AsyncClosable:
    def __init__(self) -> None:
        self.closed = 0

    async def aclose(self) -> None:
        self.closed += 1


def test_the_apps_lifespan_closes_the_store_and_the_models_it_owns(
    upstream: tuple[FakeUpstream, str], caplog: pytest.LogCaptureFixture
) -> None:
    _, url = upstream
    store, model, other = Closable(), AsyncClosable(), object()  # `other` cannot be closed
    caplog.set_level("INFO", logger="ctxcompact.proxy")
    app = build_app(
        RecordingRewriter(),
        ProxySettings(f"{url}/v1", url),
        owned_store=store,
        owned_models=[model, other],
    )
    with serve_in_thread(app) as proxy:
        assert httpx.post(f"{proxy}{CHAT}", content=BODY).status_code == 200
        assert (store.closed, model.closed) == (0, 0)  # open while serving
    assert (store.closed, model.closed) == (1, 1)
    # The start-up line names the strategy and the transforms, from the rewriter itself.
    assert any("strategy Recording, transforms first, second" in m for m in caplog.messages)
