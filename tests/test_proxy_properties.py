"""Property tests of the proxy's fail-open rule, over real HTTP on 127.0.0.1.

Generated chat bodies are valid but unusual JSON (lone surrogates, control characters,
astral characters, empty strings, floats, integers up to 4,300 digits, extra keys, nesting up
to the 256-level limit, duplicate-free keys in any order, any spacing). For each: never a
500; the upstream receives exactly one request whose body is either the bytes sent or valid
JSON that keeps every field the rewriting does not own. Bodies over a limit or cut short
get a 400 and reach nobody.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.helpers.proxy_servers import FakeUpstream, serve_in_thread
from tests.test_proxy import start_proxy, write_config

# Schema 1 rewrites every request with more than one tool turn; a small window makes the
# hiding strategy fire on the larger ones; truncation cuts long results (surrogates included).
EXTRA = (
    "[observation_masking.schema1]\nenabled = true\nwindow_turns = 1\n"
    "[tool_result_truncation]\nenabled = true\n"
    "max_chars = 1500\nhead_chars = 300\ntail_chars = 300\n"
)
ODD = ["\ud800", "\udfff", "\ud83d", "\ude00", "\x00", "\x1f", "\u2028", "😀", "终", '"', "\\", ""]
MAX_BODY_BYTES = 200_000
"""``[proxy] max_body_bytes`` as ``tests.test_proxy.write_config`` writes it."""

PROPERTY = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FakeUpstream, str]]:
    fake = FakeUpstream()
    tmp: Path = tmp_path_factory.mktemp("proxy")
    with (
        serve_in_thread(fake.app()) as url,
        start_proxy(write_config(tmp, url, extra=EXTRA, max_context_size=1500)) as proxy_url,
    ):
        yield fake, proxy_url


texts = st.lists(st.one_of(st.text(max_size=12), st.sampled_from(ODD)), max_size=6).map("".join)
big_ints = st.builds(
    lambda digits, sign: sign * int("9" * digits), st.integers(1, 4300), st.sampled_from([1, -1])
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    big_ints,
    st.floats(allow_nan=False, allow_infinity=False),
    texts,
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(texts, children, max_size=3),
    max_leaves=12,
)


@st.composite
def deep_values(draw: st.DrawFn, max_depth: int) -> Any:
    """Arrays and objects ``1..max_depth`` levels deep around a scalar."""
    value = draw(scalars)
    for wrap in draw(st.lists(st.booleans(), min_size=1, max_size=max_depth)):
        value = [value] if wrap else {"k": value}
    return value


extras = st.dictionaries(
    st.sampled_from(["x_meta", "cache_control", "reasoning_content", ""]),
    json_values | deep_values(253),  # a message sits 3 levels deep: 3 + 253 = 256
    max_size=2,
)


@st.composite
def openai_bodies(draw: st.DrawFn) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    if draw(st.booleans()):
        messages.append({"role": "system", "content": draw(texts)})
    messages.append({"role": "user", "content": draw(texts), **draw(extras)})
    for i in range(draw(st.integers(0, 5))):
        call = f"call_{i}"
        arguments = json.dumps(draw(st.dictionaries(texts, scalars, max_size=2)))
        messages.append(
            {
                "role": "assistant",
                "content": draw(st.none() | texts),
                "tool_calls": [
                    {
                        "id": call,
                        "type": "function",
                        "function": {"name": "bash", "arguments": arguments},
                    }
                ],
            }
        )
        result = draw(texts) * draw(st.sampled_from([1, 40, 400]))  # some cut, some hidden
        messages.append({"role": "tool", "tool_call_id": call, "content": result, **draw(extras)})
    body: dict[str, Any] = {"model": draw(texts), "messages": messages}
    body.update(
        draw(st.dictionaries(st.sampled_from(["temperature", "seed", "x", ""]), json_values))
    )
    return body


@st.composite
def anthropic_bodies(draw: st.DrawFn) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": draw(texts), **draw(extras)}]
    for i in range(draw(st.integers(0, 5))):
        use = {"type": "tool_use", "id": f"toolu_{i}", "name": "bash"}
        use["input"] = draw(st.dictionaries(texts, json_values, max_size=2))
        text = {"type": "text", "text": draw(texts)}
        messages.append({"role": "assistant", "content": [text, use]})
        result = draw(texts) * draw(st.sampled_from([1, 40, 400]))
        block = {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": result}
        messages.append({"role": "user", "content": [{**block, **draw(extras)}]})
    body: dict[str, Any] = {"model": draw(texts), "max_tokens": 100, "messages": messages}
    if draw(st.booleans()):
        body["system"] = draw(texts)
    body.update(draw(st.dictionaries(st.sampled_from(["temperature", "x", ""]), json_values)))
    return body


def encode(body: dict[str, Any], ascii_only: bool, spaced: bool) -> bytes:
    separators = (", ", ": ") if spaced else (",", ":")
    try:
        return json.dumps(body, ensure_ascii=ascii_only, separators=separators).encode()
    except UnicodeEncodeError:  # a lone surrogate can only travel as an escape
        return json.dumps(body, ensure_ascii=True, separators=separators).encode()


def strict_loads(raw: bytes) -> Any:
    def refuse(name: str) -> None:
        raise AssertionError(f"{name} sent upstream")

    return json.loads(raw.decode("utf-8"), parse_constant=refuse)


def ids(messages: list[dict[str, Any]]) -> list[Any]:
    """Every tool-call and tool-result id, in order (OpenAI fields and Anthropic blocks)."""
    found: list[Any] = []
    for m in messages:
        found.append(m.get("tool_call_id"))
        found += [c["id"] for c in m.get("tool_calls") or []]
        if isinstance(m.get("content"), list):
            found += [b.get("id") or b.get("tool_use_id") for b in m["content"]]
    return found


@PROPERTY
@given(
    provider=st.sampled_from(["openai", "anthropic"]),
    data=st.data(),
    ascii_only=st.booleans(),
    spaced=st.booleans(),
)
def test_valid_json_is_forwarded_as_sent_or_as_valid_json(
    proxy: tuple[FakeUpstream, str],
    provider: str,
    data: st.DataObject,
    ascii_only: bool,
    spaced: bool,
) -> None:
    fake, url = proxy
    body = data.draw(openai_bodies() if provider == "openai" else anthropic_bodies())
    raw = encode(body, ascii_only, spaced)
    path = "/v1/chat/completions" if provider == "openai" else "/v1/messages"
    fake.received.clear()
    r = httpx.post(f"{url}{path}", content=raw, headers={"anthropic-version": "1"}, timeout=30)
    if len(raw) > MAX_BODY_BYTES:  # an ASCII-escaped body can outgrow the limit: refused whole
        assert r.status_code == 413, r.text
        assert fake.received == []
        return
    assert r.status_code == 200, r.text
    assert len(fake.received) == 1
    sent = fake.received[0].body
    action = r.headers["x-ctxcompact"].split(";")[0]
    event(f"{provider} {action}")
    if action in ("action=unchanged", "action=skipped") or sent == raw:
        assert sent == raw
        return
    out = strict_loads(sent)
    original = json.loads(raw)
    # Everything but the history is the client's and goes through as it came.
    owned = ("messages", "system")
    assert {k: v for k, v in out.items() if k not in owned} == {
        k: v for k, v in original.items() if k not in owned
    }
    assert out.get("system") == original.get("system")
    before, after = original["messages"], out["messages"]
    assert ids(after) == ids(before)
    assert [m["role"] for m in after] == [m["role"] for m in before]
    for old, new in zip(before, after, strict=True):
        if old["role"] in ("system", "user") and isinstance(old["content"], str):
            assert new == old


@PROPERTY
@given(
    body=openai_bodies(),
    breakage=st.one_of(
        st.tuples(st.just("deep"), st.integers(254, 900)),
        st.tuples(st.just("digits"), st.integers(4301, 6000)),
        st.tuples(st.just("constant"), st.sampled_from(["NaN", "Infinity", "-Infinity"])),
        st.tuples(st.just("cut"), st.integers(1, 10_000)),
    ),
)
def test_over_a_limit_or_cut_short_is_a_400_that_reaches_nobody(
    proxy: tuple[FakeUpstream, str], body: dict[str, Any], breakage: tuple[str, Any]
) -> None:
    fake, url = proxy
    kind, n = breakage
    event(kind)
    if kind == "deep":  # the extra key sits at depth 3: 3 + 254 > 256
        body["messages"][0]["deep"] = json.loads("[" * n + "]" * n)
        raw = encode(body, True, False)
    elif kind == "digits":
        raw = encode(body, True, False)[:-1] + b',"n":' + b"7" * n + b"}"
    elif kind == "constant":
        raw = encode(body, True, False)[:-1] + b',"t":' + n.encode() + b"}"
    else:
        whole = encode(body, True, False)
        raw = whole[: n % len(whole)]
    fake.received.clear()
    r = httpx.post(f"{url}/v1/chat/completions", content=raw, timeout=30)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["type"] == "ctxcompact_proxy_error"
    assert fake.received == []
