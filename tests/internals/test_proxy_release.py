"""A relayed upstream answer leaves no reference cycle behind: the request's body is freed when
the proxy is done with it, not at the garbage collector's next full pass.

White-box: it looks into the garbage collector (``gc.DEBUG_SAVEALL`` keeps what a collection
finds unreachable) for the proxy's own upstream ``httpx.Response`` objects, which no public
interface shows. Over real HTTP on loopback (the proxy and the fake upstream in threads).
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ctxcompact.proxy import create_app
from tests.helpers.proxy_servers import FakeUpstream, serve_in_thread


@pytest.fixture
def upstream() -> Iterator[str]:
    with serve_in_thread(FakeUpstream().app()) as url:
        yield url


def _config(tmp_path: Path, upstream: str) -> Path:
    path = tmp_path / "proxy.toml"
    path.write_text(
        "[compaction]\n"
        'strategy = "tool-result-hiding"\n'
        "max_context_size = 100000\n"
        "[proxy]\n"
        f'openai_base_url = "{upstream}/v1"\n'
        f'anthropic_base_url = "{upstream}"\n',
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize("stream", [False, True])
def test_a_relayed_answer_leaves_no_cycle_holding_the_request(
    upstream: str, tmp_path: Path, stream: bool
) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x" * 50_000}]}
    if stream:
        body["stream"] = True
    raw = json.dumps(body).encode()
    upstream_port = httpx.URL(upstream).port
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds unreachable stays in gc.garbage
    try:
        with serve_in_thread(create_app(_config(tmp_path, upstream))) as proxy:
            with httpx.Client(timeout=10) as client:
                for _ in range(3):
                    r = client.post(f"{proxy}/v1/chat/completions", content=raw)
                    assert r.status_code == 200
            time.sleep(0.2)  # the relay closes the upstream answer after the last byte went
            gc.collect()
            left = [
                o
                for o in gc.garbage
                if isinstance(o, httpx.Response) and o.request.url.port == upstream_port
            ]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert left == []
