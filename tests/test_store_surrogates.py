"""A store failure never blocks compaction, whatever the content: a lone UTF-16 surrogate
(what a JavaScript client sends when it cuts an emoji in two) is stored losslessly and
recalled exactly, in the library, the agent and the proxy, with every built-in store."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ctxcompact import Agent, CompactionController, Completion, Message, ToolCall, check_history
from ctxcompact.exceptions import StoreError
from ctxcompact.store import (
    RECALL_TOOL_NAME,
    MemoryStore,
    OriginalsStore,
    RedisStore,
    SQLiteStore,
    StoredOriginal,
    execute_recall,
    message_key,
    summary_key,
)
from ctxcompact.strategies import ToolResultHiding
from ctxcompact.testing import LLMRequest, ScriptedLLM
from tests.helpers.gen import assistant, call, system, tool, user
from tests.helpers.proxy_servers import FakeUpstream, serve_in_thread
from tests.test_proxy import SECRET, openai_history, start_proxy, write_config

LONE = "\ud800"  # a high surrogate with no low one after it: UTF-8 cannot encode it


def lone_text(n: int) -> str:
    return "\n".join(
        [f"result {n} cut an emoji in two: {LONE}!", *(f"row {k}" for k in range(200))]
    )


def history(turns: int = 4) -> list[Message]:
    out = [system("be brief"), user(f"inspect {LONE} the repo")]
    for n in range(turns):
        out += [assistant(None, call(f"c{n}", "cat")), tool(f"c{n}", lone_text(n))]
    return [*out, assistant("done")]


StoreFactory = Callable[[Path], OriginalsStore]
STORES: dict[str, StoreFactory] = {
    "memory": lambda _: MemoryStore(),
    "sqlite": lambda tmp: SQLiteStore(tmp / "originals.db"),
}


@pytest.fixture(params=[*sorted(STORES), "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OriginalsStore]:
    made: OriginalsStore
    if request.param == "redis":  # a real redis-server (skips, saying how to install, without)
        server = request.getfixturevalue("redis_server")
        made = RedisStore(server.url, prefix=server.prefix())
    else:
        made = STORES[request.param](tmp_path)
    yield made
    if isinstance(made, (SQLiteStore, RedisStore)):
        made.close()


def test_a_record_of_a_lone_surrogate_round_trips_exactly(store: OriginalsStore) -> None:
    original = Message(role="tool", content=lone_text(1), tool_call_id="c1", note=f"x{LONE}")
    record = StoredOriginal.from_message(original, position=3, kind="hidden")
    store.put(record)
    got = store.get("default", "c1")
    assert got is not None
    assert got.message == original
    assert got.message.text == lone_text(1)
    assert message_key(original) == record.content_hash
    store.put_summary("default", summary_key([original]), [Message.user(f"sum {LONE}")])
    assert store.get_summary("default", summary_key([original])) == (Message.user(f"sum {LONE}"),)


async def test_the_controller_compacts_it_and_recall_returns_the_original_exactly(
    store: OriginalsStore,
) -> None:
    controller = CompactionController(
        ToolResultHiding(preserve_recent_n=1),
        max_context_size=2_000,
        reserved_context_size=100,
        store=store,
        recall_placeholder='[call recall_tool_result("{tool_call_id}")]',
    )
    before = history()
    result = await controller.compact(before)
    assert result.changed
    assert result.store_error is None
    assert check_history(result.history) == []
    assert 'recall_tool_result("c0")' in result.history[3].text
    recalled = execute_recall(store, {"tool_call_id": "c0", "limit": 1})
    assert recalled.splitlines()[1] == f"1: result 0 cut an emoji in two: {LONE}!"
    for pattern in ("emoji.*two", f"two: {LONE}"):  # RE2, and a plain string
        found = execute_recall(store, {"tool_call_id": "c1", "pattern": pattern})
        assert found.endswith(f"1: result 1 cut an emoji in two: {LONE}!"), pattern
    refused = execute_recall(store, {"tool_call_id": "c1", "pattern": f"emoji.*{LONE}"})
    assert refused.startswith("Error: recall_tool_result: pattern")
    assert "lone surrogate" in refused


async def test_the_agent_runs_on_and_recalls_it(store: OriginalsStore) -> None:
    def cat(path: str) -> str:
        """Print a file.

        Args:
            path: The file.
        """
        return lone_text(int(path))

    def calling(call_id: str, name: str, **arguments: Any) -> Message:
        return Message.assistant(
            None, tool_calls=[ToolCall(id=call_id, name=name, arguments=json.dumps(arguments))]
        )

    seen: list[str] = []

    def recall_the_first(request: LLMRequest) -> Completion:
        assert 'recall_tool_result("a")' in request.messages[2].text  # hidden, named
        return Completion(calling("r", RECALL_TOOL_NAME, tool_call_id="a", limit=1))

    def answer(request: LLMRequest) -> Completion:
        seen.append(request.messages[-1].text)
        return Completion(Message.assistant("done"))

    llm = ScriptedLLM(
        calling("a", "cat", path="0"),
        calling("b", "cat", path="1"),
        calling("c", "cat", path="2"),
        recall_the_first,
        answer,
    )
    agent = Agent(
        llm,
        tools=[cat],
        compaction=ToolResultHiding(preserve_recent_n=1),
        # Hiding brings the history under the threshold here: a rewrite that would not is
        # weighed against the cache it breaks, and this conversation is too short to pay.
        max_context_size=1_000,
        reserved_context_size=100,
        store=store,
        recall=True,
    )
    assert await agent.run(f"read {LONE} them") == "done"
    assert seen[0].splitlines()[1] == f"1: result 0 cut an emoji in two: {LONE}!"
    assert check_history(agent.history) == []


@pytest.fixture
def upstream() -> Iterator[tuple[FakeUpstream, str]]:
    fake = FakeUpstream()
    with serve_in_thread(fake.app()) as url:
        yield fake, url


@pytest.mark.parametrize("where", ["memory", "sqlite"])
def test_the_proxy_compacts_it_and_recalls_it_exactly(
    upstream: tuple[FakeUpstream, str], tmp_path: Path, where: str
) -> None:
    fake, url = upstream
    path = f'path = "{tmp_path / "originals.db"}"\n' if where == "sqlite" else ""
    config = write_config(tmp_path, url, extra=f"[store]\n{path}recall = true\n")
    messages = openai_history(turns=4, output_chars=300)
    for m in messages:
        if m["role"] == "tool":
            m["content"] = f"{LONE} cut\n" + m["content"]
    body = json.dumps({"model": "m", "messages": messages, "max_tokens": 50}).encode()
    assert b"\\ud800" in body  # the escape a JavaScript client sends
    fake.recall_ids = ["call_0"]
    with start_proxy(config) as proxy:
        r = httpx.post(
            f"{proxy}/v1/chat/completions",
            content=body,
            headers={"authorization": f"Bearer {SECRET}", "content-type": "application/json"},
            timeout=30,
        )
    assert r.status_code == 200, r.text
    assert "action=compacted" in r.headers["x-ctxcompact"]
    assert "store_error" not in r.headers["x-ctxcompact"]
    first, second = (item.json() for item in fake.received)
    assert len(fake.received[0].body) < len(body) / 2  # compacted, not forwarded whole
    assert 'recall_tool_result("call_0")' in first["messages"][3]["content"]
    recalled = second["messages"][-1]["content"]
    assert recalled.splitlines()[1] == f"1: {LONE} cut"  # exactly the string the client sent


async def test_a_message_no_record_can_hold_is_reported_not_raised(
    store: OriginalsStore, caplog: pytest.LogCaptureFixture
) -> None:
    # Not JSON at all (an object a third-party integration put in an extra field): the
    # compaction stands, the failure is reported, and nothing tells the model to recall it.
    odd = Message(role="tool", content=lone_text(0), tool_call_id="c0", note=object())
    before = history()
    before[3] = odd
    controller = CompactionController(
        ToolResultHiding(preserve_recent_n=1),
        max_context_size=2_000,
        reserved_context_size=100,
        store=store,
        recall_placeholder='[call recall_tool_result("{tool_call_id}")]',
    )
    with caplog.at_level("WARNING", logger="ctxcompact.controller"):
        result = await controller.compact(before)
    assert result.changed
    assert result.store_error is not None
    assert "PydanticSerializationError" in result.store_error
    assert "recall_tool_result" not in result.history[3].text  # the strategy's own text
    assert 'recall_tool_result("c1")' in result.history[5].text  # the others were stored
    assert store.get("default", "c0") is None
    assert store.get("default", "c1") is not None
    assert "cut an emoji" not in caplog.text


def test_sqlite_refuses_an_id_it_cannot_hold_with_a_store_error(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "o.db") as sqlite:
        odd = StoredOriginal.from_message(Message.tool(f"c{LONE}", "x"), position=1, kind="hidden")
        with pytest.raises(StoreError, match="lone surrogate"):
            sqlite.put(odd)
        with pytest.raises(StoreError, match="lone surrogate"):
            sqlite.get("default", f"c{LONE}")
        recalled = execute_recall(sqlite, {"tool_call_id": f"c{LONE}"})
        assert recalled.startswith("Error: recall_tool_result: the store")
        sqlite.put(StoredOriginal.from_message(Message.tool("c", "x"), position=1, kind="hidden"))
        assert sqlite.get("default", "c") is not None  # the file is fine after the refusal
