"""Agent with an originals store: recall through ScriptedLLM, [store] in TOML, and on a real
trace, the transcript and the store agree (every original is seen or recallable)."""

from __future__ import annotations

import json
import re
import sqlite3
from collections import defaultdict, deque
from pathlib import Path
from typing import Any

import pytest

from ctxcompact import (
    Agent,
    CompactionController,
    Completion,
    Message,
    Tool,
    ToolCall,
    ToolResult,
    check_history,
    from_openai,
    load_config,
    wire,
)
from ctxcompact.exceptions import ConfigError, MaxStepsExceeded, UserError
from ctxcompact.store import RECALL_TOOL_NAME, MemoryStore, SQLiteStore, execute_recall
from ctxcompact.strategies import (
    ContextGuard,
    Schema1Masking,
    ToolResultHiding,
    ToolResultTruncation,
)
from ctxcompact.testing import LLMRequest, ScriptedLLM

from .helpers.llama_server import LlamaServer
from .helpers.traces import load_trace

NAMED_ID = re.compile(r'recall_tool_result\("([^"]+)"\)')


def cat_output(name: str) -> str:
    return "\n".join(f"{name}:{k}: {'detail ' * 8}" for k in range(60)) + f"\nEND OF {name}"


async def cat(path: str) -> str:
    """Print a file.

    Args:
        path: The file.
    """
    return cat_output(path)


def calling(call_id: str, name: str, **arguments: Any) -> Message:
    return Message.assistant(
        None, tool_calls=[ToolCall(id=call_id, name=name, arguments=json.dumps(arguments))]
    )


def hiding_agent(llm: ScriptedLLM, store: Any, **kwargs: Any) -> Agent:
    return Agent(
        llm,
        tools=[cat],
        compaction=ToolResultHiding(preserve_recent_n=1),
        max_context_size=1_500,
        reserved_context_size=200,
        store=store,
        **kwargs,
    )


# -- construction ---------------------------------------------------------------------------


def test_recall_without_a_store_is_a_user_error_saying_what_to_pass() -> None:
    with pytest.raises(UserError, match=r"recall=True needs an originals store: pass store="):
        Agent(
            ScriptedLLM("x"),
            recall=True,
            store=None,  # no store at all (by default the agent keeps one in memory)
            max_context_size=10_000,
            reserved_context_size=10,
        )


def test_a_recall_placeholder_without_recall_and_a_store_beside_a_controller_are_refused() -> None:
    # A placeholder asks for recall (on by default with a store): only recall=False refuses it.
    with pytest.raises(UserError, match="recall=False"):
        Agent(
            ScriptedLLM("x"),
            store=MemoryStore(),
            recall=False,
            recall_placeholder="[{tool_call_id}]",
        )
    ctl = CompactionController(
        ToolResultHiding(), max_context_size=10_000, reserved_context_size=100, store=None
    )
    with pytest.raises(UserError, match="store"):
        Agent(ScriptedLLM("x"), controller=ctl, store=MemoryStore())
    with pytest.raises(UserError, match="recall=True needs an originals store"):
        Agent(ScriptedLLM("x"), controller=ctl, recall=True)
    with_store = CompactionController(
        ToolResultHiding(), max_context_size=10_000, reserved_context_size=100, store=MemoryStore()
    )
    with pytest.raises(UserError, match="recall_placeholder"):
        Agent(
            ScriptedLLM("x"),
            controller=with_store,
            recall=True,
            recall_placeholder="[{tool_call_id}]",
        )
    agent = Agent(ScriptedLLM("x"), controller=with_store, recall=True)
    assert agent.store is with_store.store
    assert RECALL_TOOL_NAME in agent.tools


def test_recall_offers_the_tool_and_a_tool_of_the_same_name_is_refused() -> None:
    store = MemoryStore()
    agent = hiding_agent(ScriptedLLM("x"), store, recall=True)
    assert [s.name for s in agent.tool_specs] == ["cat", RECALL_TOOL_NAME]
    assert agent.store is store
    assert agent.controller.store is store

    def recall_tool_result(tool_call_id: str) -> str:
        """Mine."""
        return tool_call_id

    with pytest.raises(UserError, match="already named 'recall_tool_result'"):
        Agent(ScriptedLLM("x"), tools=[recall_tool_result], store=store, recall=True)


# -- recall through the agent ---------------------------------------------------------------


async def test_the_model_recalls_a_hidden_result_by_the_id_its_placeholder_names() -> None:
    store = MemoryStore()
    seen: dict[str, Any] = {}

    def recall_what_was_hidden(request: LLMRequest) -> Completion:
        assert RECALL_TOOL_NAME in [t.name for t in request.tools or ()]
        placeholders = [m for m in request.messages if m.role == "tool" and NAMED_ID.search(m.text)]
        assert placeholders, "no placeholder names the recall tool"
        first = placeholders[0]
        named = NAMED_ID.search(first.text)
        assert named is not None
        assert named[1] == first.tool_call_id == "a"
        seen["placeholder"] = first.text
        return Completion(
            calling("r1", RECALL_TOOL_NAME, tool_call_id="a", pattern="^a:5[0-9]|END")
        )

    def answer_from_the_recall(request: LLMRequest) -> Completion:
        recalled = request.messages[-1]
        assert recalled.role == "tool"
        assert recalled.tool_call_id == "r1"
        seen["recalled"] = recalled.text
        return Completion(Message.assistant("a ends at line 60"))

    llm = ScriptedLLM(
        calling("a", "cat", path="a"),
        calling("b", "cat", path="b"),
        calling("c", "cat", path="c"),
        recall_what_was_hidden,
        answer_from_the_recall,
    )
    agent = hiding_agent(llm, store, recall=True)
    assert await agent.run("read a, b and c") == "a ends at line 60"
    assert seen["placeholder"] == ('[hidden: recall_tool_result("a")]')
    original = cat_output("a").splitlines()
    assert f"51: {original[50]}" in seen["recalled"]
    assert f"61: {original[60]}" in seen["recalled"]
    assert "a:10:" not in seen["recalled"]  # only the matching lines came back
    assert check_history(agent.history) == []
    assert any(m.text == cat_output("a") for m in agent.messages)  # the transcript keeps it


async def test_the_recall_text_is_configurable() -> None:
    store = MemoryStore()
    llm = ScriptedLLM(
        calling("a", "cat", path="a"),
        calling("b", "cat", path="b"),
        calling("c", "cat", path="c"),
        "done",
    )
    agent = hiding_agent(
        llm, store, recall=True, recall_placeholder="<{tool_name} {tool_call_id}: recall it>"
    )
    await agent.run("go")
    texts = [m.text for m in llm.requests[-1].messages if m.role == "tool"]
    assert "<cat a: recall it>" in texts


async def test_results_truncated_on_arrival_are_stored_whole() -> None:
    store = MemoryStore()
    llm = ScriptedLLM(calling("a", "cat", path="a"), "done")
    agent = Agent(
        llm,
        tools=[cat],
        compaction=ToolResultHiding(),
        max_context_size=100_000,
        reserved_context_size=100,
        tool_result_truncation=ToolResultTruncation(max_chars=500, head_chars=100, tail_chars=100),
        store=store,
    )
    await agent.run("go")
    sent = [m for m in llm.requests[-1].messages if m.role == "tool"]
    assert len(sent[0].text) < 1_000
    record = store.get("default", "a")
    assert record is not None
    assert record.kind == "truncated"
    assert record.message.text == cat_output("a")


async def test_a_failing_store_never_stops_the_agent() -> None:
    class Broken(MemoryStore):
        def put(self, *records: Any) -> None:
            raise OSError("disk full")

    llm = ScriptedLLM(
        calling("a", "cat", path="a"),
        calling("b", "cat", path="b"),
        calling("c", "cat", path="c"),
        "done",
    )
    agent = hiding_agent(llm, Broken(), recall=True)
    assert await agent.run("go") == "done"
    texts = [m.text for m in llm.requests[-1].messages if m.role == "tool"]
    # Compaction happened, and no placeholder promises a recall that cannot work.
    assert "[old tool result hidden]" in texts
    assert not any(RECALL_TOOL_NAME in t for t in texts)


# -- a real trace: the transcript and the store agree ----------------------------------------


class RecordedTool(Tool):
    """Answers each call with the trace's next recorded result for this tool."""

    def __init__(self, name: str, results: deque[str]) -> None:
        async def recorded() -> str:
            """A tool of the recording."""
            return ""

        super().__init__(recorded, name=name)
        self.results = results

    async def call(self, arguments: str) -> ToolResult:
        return ToolResult(self.results.popleft())


def check_nothing_lost(agent: Agent, store: Any, request: LLMRequest) -> None:
    """Every tool result of the transcript is in the request verbatim or in the store, equal;
    every recall placeholder names an id the store can give back."""
    for position, original in enumerate(agent.messages):
        if original.role != "tool" or original in request.messages:
            continue
        assert original.tool_call_id is not None
        record = store.get("default", original.tool_call_id, position=position)
        assert record is not None, f"result {original.tool_call_id} (message {position}) is lost"
        assert record.message == original, (
            f"store holds something else for {position}: {record.kind} "
            f"{record.message.model_dump()} != {original.model_dump()}"
        )
    for message in request.messages:
        named = NAMED_ID.search(message.text) if message.role == "tool" else None
        if named:
            assert not execute_recall(store, {"tool_call_id": named[1]}).startswith("Error")


@pytest.mark.parametrize(
    "trace",
    ["claudecode-subagent__4d5611e5__a2898e3", "msa-gemini3pro__astropy__astropy-12907"],
)
async def test_on_a_real_trace_every_original_is_seen_or_in_the_store(
    trace: str, tmp_path: Path
) -> None:
    recording = from_openai(load_trace(trace))
    system_prompt = recording[0].text if recording[0].role == "system" else None
    first_user = next(m for m in recording if m.role == "user")
    assert all(m.role != "user" or m is first_user for m in recording)  # one user turn
    results: dict[str, deque[str]] = defaultdict(deque)
    replies: list[Message] = []
    for message in recording:
        if message.role == "tool":
            results[name_of(recording, message)].append(message.text)
        elif message.role == "assistant":
            replies.append(message)
    if replies[-1].tool_calls:
        replies.append(Message.assistant("done"))

    store = SQLiteStore(tmp_path / "originals.db")
    agent: Agent | None = None
    checked = 0

    def checked_reply(reply: Message) -> Any:
        def respond(request: LLMRequest) -> Completion:
            nonlocal checked
            assert agent is not None
            assert check_history(list(request.messages)) == []
            check_nothing_lost(agent, store, request)
            checked += 1
            return Completion(reply)

        return respond

    llm = ScriptedLLM(*(checked_reply(r) for r in replies))
    agent = Agent(
        llm,
        tools=[RecordedTool(name, queue) for name, queue in results.items()],
        system_prompt=system_prompt,
        compaction=ToolResultHiding(preserve_recent_n=2),
        max_context_size=8_000,
        reserved_context_size=1_000,
        transforms=[
            Schema1Masking(window_turns=1),
            ContextGuard(context_window=8_000, reserve_tokens=1_000),
        ],
        tool_result_truncation=ToolResultTruncation(
            max_chars=4_000, head_chars=1_000, tail_chars=1_000
        ),
        max_steps=len(replies) + 1,
        store=store,
        recall=True,
    )
    try:
        await agent.run(first_user)
        assert checked == len(replies)
        assert llm.remaining == 0
        compactions = [e for e in agent.transcript if not isinstance(e, Message)]
        assert compactions, "the window is small enough that compaction must run"
        kinds = {row[0] for row in rows(tmp_path / "originals.db")}
        assert "truncated" in kinds
        assert kinds & {"hidden", "masked"}
        last = llm.requests[-1].messages
        assert any(NAMED_ID.search(m.text) for m in last if m.role == "tool")
        # Everything the store holds is an original from the transcript (no placeholder, no
        # task the guard cut or noted): tool results by id (id@hash when re-used), calls'
        # arguments by "args:" and the id, other messages by "#hash", and the lists of what
        # one rewrite dropped ("#r...").
        originals = {(m.tool_call_id, m.text) for m in agent.messages if m.role == "tool"}
        texts = {m.text for m in agent.messages if m.role != "tool"}
        calls = {(c.id, c.arguments) for m in agent.messages for c in m.tool_calls or ()}
        for key, _ in ((r[1], r[2]) for r in rows(tmp_path / "originals.db")):
            record = store.get("default", key)
            assert record is not None
            if key.startswith("#r"):
                assert record.kind == "range"
            elif key.startswith("#"):
                assert record.message.text in texts
            elif key.startswith("args:"):
                [c] = record.message.tool_calls or ()
                assert (c.id, c.arguments) in calls
            else:
                assert (key.split("@")[0], record.message.text) in originals
    finally:
        store.close()


def name_of(recording: list[Message], result: Message) -> str:
    index = recording.index(result)
    for message in reversed(recording[:index]):
        for c in message.tool_calls or ():
            if c.id == result.tool_call_id:
                return c.name
    raise AssertionError(f"no call for {result.tool_call_id}")


def rows(path: Path) -> list[tuple[str, str, int]]:
    with sqlite3.connect(path) as conn:
        found = conn.execute(
            "SELECT kind, key, position FROM entries WHERE entry = 'original'"
        ).fetchall()
    conn.close()
    return [(str(k), str(key), int(p)) for k, key, p in found]


# -- [store] in TOML ------------------------------------------------------------------------


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "ctxcompact.toml"
    path.write_text(
        '[compaction]\nstrategy = "tool-result-hiding"\nmax_context_size = 1500\n'
        "reserved_context_size = 200\n" + text,
        encoding="utf-8",
    )
    return path


async def test_store_path_is_relative_to_the_config_file_and_recall_is_offered(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path,
        '[compaction.params]\npreserve_recent_n = 1\n[store]\npath = "data/originals.db"\n'
        "recall = true\n",
    )
    llm = ScriptedLLM(
        calling("a", "cat", path="a"),
        calling("b", "cat", path="b"),
        calling("c", "cat", path="c"),
        "done",
    )
    async with Agent.from_config(path, llm=llm, tools=[cat]) as agent:
        assert isinstance(agent.store, SQLiteStore)
        assert Path(agent.store.path) == tmp_path / "data" / "originals.db"
        assert RECALL_TOOL_NAME in [s.name for s in agent.tool_specs]
        await agent.run("go")
    assert any(NAMED_ID.search(m.text) for m in llm.requests[-1].messages)
    with SQLiteStore(tmp_path / "data" / "originals.db") as reopened:
        record = reopened.get("default", "a")
        assert record is not None
        assert record.message.text == cat_output("a")


def test_recall_without_a_path_keeps_originals_in_memory(tmp_path: Path) -> None:
    agent = Agent.from_config(write(tmp_path, "[store]\nrecall = true\n"), llm=ScriptedLLM())
    assert isinstance(agent.store, MemoryStore)
    assert agent.controller.recall_placeholder is not None
    # No [store] table: the default in-memory store, and recall with it (issue 20).
    default = Agent.from_config(write(tmp_path, ""), llm=ScriptedLLM())
    assert isinstance(default.store, MemoryStore)
    assert default.controller.recall
    assert RECALL_TOOL_NAME in default.tools
    plain = Agent.from_config(write(tmp_path, "[store]\nrecall = false\n"), llm=ScriptedLLM())
    assert isinstance(plain.store, MemoryStore)
    assert plain.controller.recall_placeholder is None
    assert RECALL_TOOL_NAME not in plain.tools
    no_store = Agent.from_config(write(tmp_path, "[store]\nenabled = false\n"), llm=ScriptedLLM())
    assert no_store.store is None
    assert RECALL_TOOL_NAME not in no_store.tools


@pytest.mark.parametrize(
    ("table", "key", "words"),
    [
        ("max_bytes = 0", "store.max_bytes", "out of range"),
        ('recall_placeholder = "[hidden]"', "store.recall_placeholder", "{tool_call_id}"),
        ("recal = true", "store.recal", "did you mean 'recall'"),
        ('recall = "yes"', "store.recall", "bool"),
        ('path = ""', "store.path", "at least 1"),
    ],
)
def test_store_config_errors_name_the_file_and_the_key(
    tmp_path: Path, table: str, key: str, words: str
) -> None:
    path = write(tmp_path, f"[store]\n{table}\n")
    with pytest.raises(ConfigError) as info:
        Agent.from_config(path, llm=ScriptedLLM())
    assert info.value.key == key
    assert info.value.path == str(path)
    assert words in info.value.message


def test_a_store_file_that_cannot_be_opened_is_a_config_error_at_store_path(
    tmp_path: Path,
) -> None:
    (tmp_path / "taken").write_text("not a directory", encoding="utf-8")
    path = write(tmp_path, '[store]\npath = "taken/originals.db"\n')
    with pytest.raises(ConfigError, match="cannot open the store") as info:
        Agent.from_config(path, llm=ScriptedLLM())
    assert info.value.key == "store.path"
    assert info.value.path == str(path)


def test_wire_opens_the_store_only_for_callers_that_close_it(tmp_path: Path) -> None:
    path = write(tmp_path, '[store]\npath = "originals.db"\nrecall = true\n')
    config = load_config(path)
    wiring = wire(config)  # the CLI's replay and the proxy: no file is opened
    assert wiring.store is None
    assert wiring.recall
    assert not (tmp_path / "originals.db").exists()
    assert wiring.controller().recall_placeholder is None  # no store
    controller = CompactionController.from_config(config)
    try:
        assert isinstance(controller.store, SQLiteStore)
        assert (tmp_path / "originals.db").exists()
        assert controller.recall_placeholder == config.store.recall_placeholder
    finally:
        controller.store.close()


# -- once against the local llama.cpp server ------------------------------------------------


@pytest.mark.llama
async def test_a_real_server_gets_the_recall_tool_and_any_recall_returns_the_original(
    llama_server: LlamaServer,
) -> None:
    """The recall tool's schema and a recall placeholder go over the real wire and the run
    completes; whatever the tiny model does, a recall it makes is answered from the store."""
    from ctxcompact.llm.openai import OpenAIChatLLM

    llm = OpenAIChatLLM(
        llama_server.model,
        base_url=llama_server.base_url,
        api_key="local",
        max_tokens=48,
        max_retries=0,
    )
    store = MemoryStore()
    agent = Agent(
        llm,
        tools=[cat],
        system_prompt="Answer briefly. Use recall_tool_result to see a hidden tool result.",
        compaction=ToolResultHiding(preserve_recent_n=0),
        max_context_size=llama_server.n_ctx,
        reserved_context_size=llama_server.n_ctx - 400,  # compact before the first call
        store=store,
        recall=True,
        max_steps=3,
    )
    # llama-cpp-python's server wants text in an assistant message that calls tools.
    call_7 = ToolCall(id="call_7", name="cat", arguments='{"path": "notes.txt"}')
    agent.add(Message.user("Print notes.txt"), Message.assistant("Reading.", tool_calls=[call_7]))
    agent.add(Message.tool("call_7", cat_output("notes.txt")))
    try:
        await agent.run("What is the last line of notes.txt? Recall the hidden result.")
    except MaxStepsExceeded:
        pass  # a tiny model may keep calling tools; the bound held
    finally:
        await llm.aclose()
    assert check_history(agent.history) == []
    assert agent.history[3].text == ('[hidden: recall_tool_result("call_7")]')
    record = store.get("default", "call_7")
    assert record is not None
    assert record.message.text == cat_output("notes.txt")
    calls = {c.id: c for m in agent.messages for c in m.tool_calls or ()}
    for message in agent.messages:
        call = calls.get(message.tool_call_id or "")
        if call is not None and call.name == RECALL_TOOL_NAME and message.role == "tool":
            asked = json.loads(call.arguments).get("tool_call_id")
            if asked == "call_7" and not message.is_error:
                assert "END OF notes.txt" in message.text or "notes.txt:" in message.text
