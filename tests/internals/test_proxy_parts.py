"""The proxy's parts one by one: the caller's store namespace, the context-error test, the
store of earlier rewrites.

White-box: each is a private function of ``ctxcompact.proxy`` that the proxy tests
(``tests/test_proxy_*.py``) exercise over real HTTP; here their edge cases are checked
directly, which no request could reach one at a time.
"""

from __future__ import annotations

import pytest

from ctxcompact import Message, ToolCall, from_openai
from ctxcompact.proxy._callers import caller_namespace
from ctxcompact.proxy._retry import is_context_error
from ctxcompact.proxy._reuse import prefix_keys, remember_rewrite, reuse_rewrites
from ctxcompact.store import MemoryStore, summary_key
from ctxcompact.strategies import SUMMARY_PREFIX
from tests.test_proxy import SECRET, openai_history
from tests.test_proxy_recall import OTHER


def test_caller_namespace_hashes_the_key_and_gives_keyless_requests_their_own() -> None:
    bearer = caller_namespace([("authorization", f"Bearer {SECRET}")])
    assert bearer == caller_namespace([("Authorization", f"Bearer {SECRET}")])
    assert SECRET not in bearer
    assert caller_namespace([("x-api-key", OTHER)]) != bearer
    assert caller_namespace([]) != caller_namespace([])


def test_caller_namespace_is_a_hash_of_every_credential_part() -> None:
    base = [("authorization", "Bearer sk-a")]
    one = caller_namespace(base, "")
    assert one == caller_namespace(base, "")
    assert "sk-a" not in one
    # Any other credential part, or a different value of one, is another namespace.
    assert caller_namespace([*base, ("api-key", "x")], "") != one
    assert caller_namespace(base, "key=x") != one
    assert caller_namespace(base, "sig=x") != one
    assert caller_namespace([("authorization", "Bearer sk-b")], "") != one
    assert caller_namespace([("authorization", "Basic sk-a")], "") != one
    # What is not a credential does not split a caller's conversations.
    noise = [("user-agent", "x"), ("idempotency-key", "1"), ("cookie", "c=1")]
    assert caller_namespace([*base, *noise], "") == one
    assert caller_namespace(base, "api-version=2024-10-21&beta=true") == one
    # Without a credential (a scheme alone is none), every request is a namespace of its own.
    for keyless in ([], [("authorization", "Bearer ")], [("x-api-key", " ")]):
        assert caller_namespace(keyless, "") != caller_namespace(keyless, "")


@pytest.mark.parametrize(
    ("status", "text", "expected"),
    [
        (400, '{"error": {"code": "context_length_exceeded"}}', True),
        (400, "prompt is too long: 210000 tokens > 200000 maximum", True),
        (400, "This model's maximum context length is 8192 tokens", True),
        (413, "", True),
        (400, '{"error": {"message": "invalid tool schema"}}', False),
        (429, "maximum context length is 8192 tokens", False),
        (500, "context_length_exceeded", False),
    ],
)
def test_context_errors_are_told_apart(status: int, text: str, expected: bool) -> None:
    assert is_context_error(status, text) is expected


def test_prefix_keys_are_the_summary_keys_of_every_prefix() -> None:
    history = from_openai(openai_history(turns=3, output_chars=2))
    assert prefix_keys(history) == [summary_key(history[:i]) for i in range(1, len(history) + 1)]
    assert prefix_keys([]) == []


def _call(i: int) -> list[Message]:
    call = ToolCall(id=f"c{i}", name="cat", arguments="{}")
    return [Message.assistant(None, tool_calls=[call]), Message.tool(f"c{i}", f"out {i}")]


async def test_a_later_compaction_is_kept_under_the_received_messages_it_covers() -> None:
    store = MemoryStore()
    head = [Message.system("sys"), Message.user("go"), *_call(0), *_call(1)]
    summary1 = Message.user(SUMMARY_PREFIX + "one")
    after1 = [head[0], summary1, *head[4:]]
    assert await remember_rewrite(store, "ns", head, 0, head, after1)
    grown = [*head, *_call(2)]
    reused, end = await reuse_rewrites(store, "ns", grown)
    assert end == 4
    assert reused == [*after1, *grown[len(head) :]]
    # What the rewrite kept unchanged is the client's own message again, not a stored copy.
    assert reused[0] is grown[0]
    assert all(a is b for a, b in zip(reused[2:], grown[4:], strict=True))
    # The compaction of the reused history merges the summary: kept under `grown`'s messages.
    summary2 = Message.user(SUMMARY_PREFIX + "two")
    assert await remember_rewrite(
        store, "ns", grown, end, reused, [reused[0], summary2, *reused[-2:]]
    )
    again, end = await reuse_rewrites(store, "ns", [*grown, *_call(3)])
    assert end == len(grown) - 2
    assert again == [reused[0], summary2, *grown[-2:], *_call(3)]
    assert grown == [*head, *_call(2)]  # input untouched
    assert await reuse_rewrites(store, "other", grown) == (grown, 0)


async def test_a_compaction_kept_for_one_window_is_not_reused_for_another() -> None:
    # White-box: the scope is how the rewriter keys kept compactions by window.
    store = MemoryStore()
    head = [Message.system("sys"), Message.user("go"), *_call(0), *_call(1)]
    after = [head[0], Message.user(SUMMARY_PREFIX + "one"), *head[4:]]
    assert await remember_rewrite(store, "ns", head, 0, head, after, scope="window=8192")
    grown = [*head, *_call(2)]
    assert await reuse_rewrites(store, "ns", grown, scope="window=128000") == (grown, 0)
    assert (await reuse_rewrites(store, "ns", grown))[1] == 0
    assert (await reuse_rewrites(store, "ns", grown, scope="window=8192"))[1] == 4


async def test_a_kept_rewrite_that_would_break_tool_pairs_is_not_used() -> None:
    store = MemoryStore()
    history = [Message.user("go"), *_call(0), *_call(1)]
    # A (corrupt) kept rewrite of the prefix ending at a call, without that call.
    store.put_summary("ns", summary_key(history[:2]), [Message.user(SUMMARY_PREFIX + "x")])
    assert await reuse_rewrites(store, "ns", history) == (history, 0)
    assert history == [Message.user("go"), *_call(0), *_call(1)]  # input untouched
