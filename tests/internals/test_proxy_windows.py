"""A request naming a model of unknown window is forwarded unchanged, with a fixed reason.

White-box: the reason in the ``x-ctxcompact`` header is compared with the private message
it comes from (``ctxcompact.proxy._windows.UNKNOWN_MODEL``). Over real HTTP on 127.0.0.1.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from ctxcompact.proxy import create_app
from ctxcompact.proxy._windows import UNKNOWN_MODEL
from tests.helpers.proxy_servers import FakeUpstream, serve_in_thread
from tests.test_proxy_models import MESSAGES, config_without_window, fields


@pytest.fixture
def upstream() -> Iterator[tuple[FakeUpstream, str]]:
    fake = FakeUpstream()
    with serve_in_thread(fake.app()) as url:
        yield fake, url


def test_unknown_model_is_forwarded_unchanged_with_a_fixed_reason(
    upstream: tuple[FakeUpstream, str],
) -> None:
    fake, url = upstream
    body = json.dumps({"model": "no-such-model-xyz", "messages": MESSAGES}).encode()
    with serve_in_thread(create_app(config_without_window(url))) as proxy:
        response = httpx.post(
            f"{proxy}/v1/chat/completions",
            content=body,
            headers={"content-type": "application/json"},
        )
    assert response.status_code == 200
    assert fake.received[0].body == body  # byte for byte
    header = fields(response)
    assert header["action"] == "skipped"
    assert "no-such-model-xyz" not in response.headers["x-ctxcompact"]
    assert header["error"] == UNKNOWN_MODEL.split(":")[0]
