"""The recall tool: paging and grepping a removed result, its specs, and an Agent using it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctxcompact import Agent, CompactionContext, Completion, Message, Tool, ToolCall, check_history
from ctxcompact.exceptions import ConfigError
from ctxcompact.store import (
    DEFAULT_RECALL_LINES,
    MAX_RECALL_CHARS,
    MemoryStore,
    SQLiteStore,
    StoredOriginal,
    execute_recall,
    recall_placeholder,
    recall_tool,
    recall_tool_spec_anthropic,
    recall_tool_spec_openai,
    record_removed,
)
from ctxcompact.testing import FunctionStrategy, LLMRequest, ScriptedLLM

LOG = "\n".join(
    f"{i:04d} ERROR disk full on /var/data" if i % 250 == 0 else f"{i:04d} ok"
    for i in range(1, 1001)
)


def store_with(text: str, call_id: str = "call_7", **kwargs: object) -> MemoryStore:
    store = MemoryStore()
    store.put(
        StoredOriginal.from_message(
            Message.tool(call_id, text),
            position=2,
            kind="hidden",
            **kwargs,  # type: ignore[arg-type]
        )
    )
    return store


def recall(store: MemoryStore, **arguments: object) -> str:
    return execute_recall(store, {"tool_call_id": "call_7", **arguments})


# -- windows ----------------------------------------------------------------------------------


def test_a_short_result_comes_back_whole_with_line_numbers() -> None:
    out = recall(store_with("alpha\nbeta"))
    assert out.splitlines() == [
        "Tool result call_7 (2 lines, 10 characters), lines 1-2:",
        "1: alpha",
        "2: beta",
    ]


def test_a_long_result_comes_back_one_window_at_a_time_with_the_way_on() -> None:
    store = store_with(LOG)
    first = recall(store)
    lines = first.splitlines()
    n = DEFAULT_RECALL_LINES
    assert lines[0] == f"Tool result call_7 (1000 lines, {len(LOG)} characters), lines 1-{n}:"
    assert lines[1] == "1: 0001 ok"
    assert lines[-1] == f"[more from line {n + 1}: call recall_tool_result with offset={n + 1}]"
    assert len(lines) == DEFAULT_RECALL_LINES + 2
    page = recall(store, offset=996, limit=3).splitlines()
    assert page == [
        f"Tool result call_7 (1000 lines, {len(LOG)} characters), lines 996-998:",
        "996: 0996 ok",
        "997: 0997 ok",
        "998: 0998 ok",
        "[more from line 999: call recall_tool_result with offset=999]",
    ]
    last = recall(store, offset=999, limit=50).splitlines()
    assert last[1:] == ["999: 0999 ok", "1000: 1000 ERROR disk full on /var/data"]


def test_paging_through_everything_returns_every_line_once() -> None:
    store = store_with(LOG)
    seen: list[str] = []
    offset = 1
    while True:
        out = recall(store, offset=offset, limit=333).splitlines()
        body = [line for line in out[1:] if not line.startswith("[more")]
        seen += [line.split(": ", 1)[1] for line in body]
        if not out[-1].startswith("[more"):
            break
        offset = int(out[-1].split("offset=")[1].rstrip("]"))
    assert "\n".join(seen) == LOG


def test_an_offset_past_the_end_says_so() -> None:
    assert recall(store_with("a\nb"), offset=5).endswith("offset 5 is past the last line (2).")
    assert recall(store_with("a\nb"), offset=2).endswith("lines 2-2:\n2: b")


def test_an_empty_result_says_so() -> None:
    assert recall(store_with("")) == "Tool result call_7 (1 line, 0 characters): the text is empty."


def test_a_window_stops_at_the_character_cap_and_says_where_to_go_on() -> None:
    text = "\n".join("x" * 1000 for _ in range(100))
    out = recall(store_with(text), limit=100).splitlines()
    shown = [line for line in out if line[:1].isdigit()]
    assert sum(len(line) for line in shown) <= MAX_RECALL_CHARS + 10 * len(shown)
    assert len(shown) < 100
    after = len(shown) + 1
    assert out[-1] == f"[more from line {after}: call recall_tool_result with offset={after}]"


def test_one_huge_line_comes_in_pieces_and_says_where_the_next_starts() -> None:
    out = recall(store_with("y" * (MAX_RECALL_CHARS + 500))).splitlines()
    assert out[1] == "1: " + "y" * MAX_RECALL_CHARS
    nxt = MAX_RECALL_CHARS + 1
    assert out[2] == (
        f"[more from line 1, char {nxt}: call recall_tool_result with offset=1 and "
        f"char_offset={nxt}]"
    )


# -- pattern ----------------------------------------------------------------------------------


def test_a_pattern_returns_only_matching_lines_with_their_numbers() -> None:
    out = recall(store_with(LOG), pattern=r"ERROR.*/var").splitlines()
    assert out[0].endswith("4 lines matching 'ERROR.*/var' from line 1:")
    assert out[1:] == [f"{n}: {n:04d} ERROR disk full on /var/data" for n in (250, 500, 750, 1000)]


def test_a_pattern_respects_offset_and_limit() -> None:
    out = recall(store_with(LOG), pattern="ERROR", offset=300, limit=1).splitlines()
    assert out[1:] == [
        "500: 0500 ERROR disk full on /var/data",
        # The next line that matches: the model's next call skips what would not.
        "[more from line 750: call recall_tool_result with offset=750 and the same pattern]",
    ]


def test_a_pattern_with_no_match_says_so() -> None:
    assert recall(store_with(LOG), pattern="WARN").endswith(
        "no line from line 1 on matches 'WARN'."
    )


def test_an_invalid_regex_gives_a_clear_error() -> None:
    out = recall(store_with(LOG), pattern="(unclosed")
    assert out.startswith(
        "Error: recall_tool_result: pattern '(unclosed' is not a valid regular expression"
    )


# -- bad arguments and unknown ids --------------------------------------------------------------


def test_an_unknown_id_says_so_in_a_sentence_and_names_no_other_id() -> None:
    store = store_with("secret content", call_id="call_secret")
    out = execute_recall(store, {"tool_call_id": "call_9"})
    # Not an error the model cannot read: a plain sentence (an evicted handle gets the same).
    assert out.startswith("Nothing is kept under 'call_9' any more")
    assert "It cannot be recalled" in out
    assert "call_secret" not in out
    assert "secret content" not in out


def test_another_namespace_cannot_recall_it() -> None:
    store = store_with("alice's data")
    assert execute_recall(store, {"tool_call_id": "call_7"}, namespace="bob").startswith(
        "Nothing is kept under 'call_7'"
    )
    assert "alice" not in execute_recall(store, {"tool_call_id": "call_7"}, namespace="bob")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ("{not json", "the arguments are not valid JSON"),
        ("[1]", "the arguments must be a JSON object"),
        ("{}", "tool_call_id is required"),
        ('{"tool_call_id": "call_7", "offset": 0}', "offset must be a positive integer, got 0"),
        (
            '{"tool_call_id": "call_7", "limit": "ten"}',
            'limit must be a positive integer, got "ten"',
        ),
        ('{"tool_call_id": "call_7", "pattern": 3}', "pattern must be a string"),
        ('{"tool_call_id": "call_7", "lines": 3}', "unknown argument(s) ['lines']"),
    ],
)
def test_bad_arguments_give_a_clear_error(arguments: str, message: str) -> None:
    out = execute_recall(store_with("x"), arguments)
    assert out.startswith("Error: recall_tool_result: ")
    assert message in out


class FailingStore(MemoryStore):
    def get(self, namespace: str, tool_call_id: str, *, position: int | None = None) -> None:
        raise OSError("/private/path/to/db is locked")


def test_a_store_failure_becomes_an_error_result_without_its_details() -> None:
    out = execute_recall(FailingStore(), {"tool_call_id": "call_7"})
    assert out == "Error: recall_tool_result: the store of removed results failed (OSError)"


# -- specs and placeholder --------------------------------------------------------------------


def test_the_specs_describe_the_same_arguments_as_the_tool() -> None:
    tool = recall_tool(MemoryStore())
    openai, anthropic = recall_tool_spec_openai(), recall_tool_spec_anthropic()
    assert openai["type"] == "function"
    assert openai["function"] == {
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.parameters,
    }
    assert anthropic == {
        "name": tool.name,
        "description": tool.description,
        "input_schema": tool.parameters,
    }
    assert tool.parameters["required"] == ["tool_call_id"]
    assert set(tool.parameters["properties"]) == {
        "tool_call_id",
        "offset",
        "limit",
        "pattern",
        "char_offset",
    }
    assert all(p.get("description") for p in tool.parameters["properties"].values())
    json.dumps(openai), json.dumps(anthropic)  # plain JSON, ready for a request body
    openai["function"]["parameters"]["required"].append("x")  # a copy each time
    assert recall_tool_spec_openai()["function"]["parameters"]["required"] == ["tool_call_id"]


def test_the_placeholder_names_the_tool_and_the_id_and_is_configurable() -> None:
    assert recall_placeholder("call_7") == '[hidden: recall_tool_result("call_7")]'
    assert (
        recall_placeholder("c1", template="<{tool_name} {tool_call_id} gone>", tool_name="ls")
        == "<ls c1 gone>"
    )
    with pytest.raises(ConfigError, match=r"must name \{tool_call_id\}"):
        recall_placeholder("c1", template="hidden")
    with pytest.raises(ConfigError, match=r"unknown: \['chars'\]"):
        recall_placeholder("c1", template="{tool_call_id} {chars}")
    with pytest.raises(ConfigError, match="invalid recall template"):
        recall_placeholder("c1", template="{tool_call_id")


async def test_the_tool_reads_a_sqlite_store(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "o.db") as store:
        store.put(
            StoredOriginal.from_message(Message.tool("call_7", LOG), position=3, kind="hidden")
        )
        result = await recall_tool(store).call(
            '{"tool_call_id": "call_7", "pattern": "ERROR", "limit": 2}'
        )
    assert not result.is_error
    assert result.text.splitlines()[1:3] == [
        "250: 0250 ERROR disk full on /var/data",
        "500: 0500 ERROR disk full on /var/data",
    ]


# -- through the Agent ------------------------------------------------------------------------


def read_log() -> str:
    """Read the server log."""
    return LOG


async def test_an_agent_model_recalls_a_hidden_result_with_the_public_api() -> None:
    """A per-request transform hides old results behind recall placeholders and stores the
    originals; the scripted model reads the placeholder, calls the recall tool, and gets the
    lines it needs back."""
    store = MemoryStore()

    def hide_with_recall(ctx: CompactionContext) -> list[Message] | None:
        history = ctx.history
        last_call = max(i for i, m in enumerate(history) if m.role == "assistant" and m.tool_calls)
        after = [
            m.replace(content=recall_placeholder(m.tool_call_id or ""))
            if m.role == "tool" and i < last_call and m.tool_call_id
            else m
            for i, m in enumerate(history)
        ]
        if after == list(history):
            return None
        record_removed(store, history, after)
        return after

    def recall_what_the_placeholder_names(request: LLMRequest) -> Completion:
        placeholder = next(
            m for m in request.messages if m.role == "tool" and "recall_tool_result" in m.text
        )
        call_id = placeholder.text.split('("')[1].split('")')[0]
        arguments = json.dumps({"tool_call_id": call_id, "pattern": "ERROR"})
        return Completion(
            Message.assistant(
                None,
                tool_calls=[ToolCall(id="call_r", name="recall_tool_result", arguments=arguments)],
            )
        )

    llm = ScriptedLLM(
        Message.assistant(
            None, tool_calls=[ToolCall(id="call_log", name="read_log", arguments="{}")]
        ),
        Message.assistant(
            "Let me check the disk.",
            tool_calls=[ToolCall(id="call_df", name="read_log", arguments="{}")],
        ),
        recall_what_the_placeholder_names,
        "The disk /var/data filled up four times.",
    )
    agent = Agent(
        llm,
        tools=[read_log, recall_tool(store)],
        # The loop wires its own recall tool over its own store, as a loop without the
        # agent's recall would: the agent's default one (same name) stays off.
        recall=False,
        transforms=[FunctionStrategy(hide_with_recall)],
        max_context_size=1_000_000,
        reserved_context_size=1_000,
    )
    assert await agent.run("why did the server fail?") == "The disk /var/data filled up four times."
    assert {spec.name for spec in llm.requests[0].tools or ()} == {"read_log", "recall_tool_result"}
    # The third request saw the first log hidden behind a placeholder naming its id.
    third = llm.requests[2].messages
    assert Message.tool("call_log", recall_placeholder("call_log")) in third
    # The recall's result, as the model saw it on the last request: the four ERROR lines.
    recalled = next(m for m in llm.requests[3].messages if m.tool_call_id == "call_r")
    assert recalled.text.splitlines()[1:] == [
        f"{n}: {n:04d} ERROR disk full on /var/data" for n in (250, 500, 750, 1000)
    ]
    # The agent's own history keeps every original, and the store holds the hidden one.
    assert check_history(agent.history) == []
    assert store.get("default", "call_log").message.text == LOG  # type: ignore[union-attr]


def test_recall_tool_is_a_tool() -> None:
    assert isinstance(recall_tool(MemoryStore()), Tool)


def test_non_text_parts_are_named_not_shown() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    store = MemoryStore()
    message = Message.tool("call_7", [{"type": "text", "text": "a chart"}, image])
    store.put(StoredOriginal.from_message(message, position=1, kind="dropped"))
    out = recall(store)
    assert out.splitlines() == [
        "Tool result call_7 (1 line, 7 characters, 1 non-text part(s) not shown), lines 1-1:",
        "1: a chart",
    ]
    assert "base64" not in out
