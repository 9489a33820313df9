"""Tool: schema from a typed function and its docstring, validation, error results."""

from __future__ import annotations

import asyncio
import threading
from typing import Literal

import pytest
from pydantic import BaseModel

from ctxcompact import Tool, ToolResult, ToolSpec, tool
from ctxcompact.exceptions import UserError


def read_file(path: str, max_lines: int = 100, *, encoding: Literal["utf-8", "latin-1"] = "utf-8"):  # type: ignore[no-untyped-def]
    """Read a text file.

    Returns its first lines.

    Args:
        path: The file to read,
            relative to the project root.
        max_lines (int): How many lines to return.
        encoding: The text encoding.

    Returns:
        The text.
    """
    return f"{path}:{max_lines}:{encoding}"


def test_schema_comes_from_the_signature_and_the_google_docstring() -> None:
    t = Tool(read_file)
    assert t.name == "read_file"
    assert t.description == "Read a text file.\n\nReturns its first lines."
    assert t.spec == ToolSpec("read_file", t.description, t.parameters)
    params = t.parameters
    assert params["type"] == "object"
    assert params["required"] == ["path"]
    assert params["additionalProperties"] is False
    props = params["properties"]
    assert props["path"] == {
        "type": "string",
        "description": "The file to read, relative to the project root.",
    }
    assert props["max_lines"] == {
        "type": "integer",
        "default": 100,
        "description": "How many lines to return.",
    }
    assert props["encoding"]["enum"] == ["utf-8", "latin-1"]
    assert "title" not in params
    assert "The text." not in t.description


def test_name_and_description_can_be_overridden() -> None:
    t = Tool.from_function(read_file, name="cat", description="Print a file.")
    assert (t.spec.name, t.spec.description) == ("cat", "Print a file.")


async def test_valid_arguments_are_validated_and_coerced_then_passed() -> None:
    t = Tool(read_file)
    result = await t.call('{"path": "a.py", "max_lines": "7", "encoding": "latin-1"}')
    assert result == ToolResult("a.py:7:latin-1")


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"max_lines": 3}', "path: Field required"),
        ('{"path": "a", "max_lines": "many"}', "max_lines: Input should be a valid integer"),
        ('{"path": "a", "encoding": "ascii"}', "encoding: Input should be 'utf-8' or 'latin-1'"),
        ('{"path": "a", "colour": 1}', "colour: Extra inputs are not permitted"),
        ('{"path": "a"', "not valid JSON"),
        ('["a"]', "must be a JSON object, got list"),
    ],
)
async def test_invalid_arguments_become_an_error_result_for_the_model(
    arguments: str, expected: str
) -> None:
    calls: list[str] = []

    def remember(
        path: str, max_lines: int = 1, encoding: Literal["utf-8", "latin-1"] = "utf-8"
    ) -> str:
        calls.append(path)
        return "never"

    result = await Tool(remember, name="read_file").call(arguments)
    assert result.is_error
    assert result.text.startswith("Error: tool 'read_file'")
    assert expected in result.text
    assert calls == []


async def test_empty_arguments_mean_no_arguments() -> None:
    def now() -> str:
        """The time."""
        return "noon"

    t = Tool(now)
    assert t.parameters["properties"] == {}
    assert await t.call("") == ToolResult("noon")
    assert await t.call("{}") == ToolResult("noon")
    assert (await t.call('{"x": 1}')).is_error


async def test_an_exception_in_the_tool_becomes_an_error_result() -> None:
    async def explode(n: int) -> str:
        raise KeyError(f"no item {n}")

    result = await Tool(explode).call('{"n": 4}')
    assert result == ToolResult("Error: tool 'explode' failed: KeyError: 'no item 4'", True)


async def test_cancellation_is_not_swallowed() -> None:
    started = asyncio.Event()

    async def slow() -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    task = asyncio.create_task(Tool(slow).call("{}"))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_non_string_results_are_sent_as_json() -> None:
    class Point(BaseModel):
        x: int
        y: int

    def where(name: str) -> dict[str, object]:
        return {"name": name, "at": Point(x=1, y=2), "tags": ("a", "é")}

    def nothing() -> None:
        return None

    assert (await Tool(where).call('{"name": "p"}')).text == (
        '{"name": "p", "at": {"x": 1, "y": 2}, "tags": ["a", "é"]}'
    )
    assert (await Tool(nothing).call("{}")).text == ""


async def test_pydantic_models_as_parameters_are_validated_from_json() -> None:
    class Edit(BaseModel):
        line: int
        text: str

    def apply(path: str, edits: list[Edit]) -> int:
        return sum(e.line for e in edits)

    t = Tool(apply)
    assert t.parameters["properties"]["edits"]["type"] == "array"
    ok = await t.call('{"path": "a", "edits": [{"line": 2, "text": "x"}, {"line": 3, "text": ""}]}')
    assert ok == ToolResult("5")
    bad = await t.call('{"path": "a", "edits": [{"line": 2}]}')
    assert bad.is_error
    assert "edits.0.text: Field required" in bad.text


async def test_parameters_named_like_basemodel_attributes_work() -> None:
    def search(json: str, schema: int = 0, copy: bool = False) -> str:
        return f"{json}-{schema}-{copy}"

    t = Tool(search)
    assert set(t.parameters["properties"]) == {"json", "schema", "copy"}
    assert await t.call('{"json": "q", "schema": 2}') == ToolResult("q-2-False")


async def test_positional_only_parameters_are_passed_positionally() -> None:
    def div(a: float, b: float, /) -> float:
        return a / b

    assert await Tool(div).call('{"a": 1, "b": 4}') == ToolResult("0.25")


async def test_sync_tools_run_in_a_worker_thread() -> None:
    def which_thread() -> str:
        return threading.current_thread().name

    result = await Tool(which_thread).call("{}")
    assert result.text != threading.current_thread().name


def test_decorator_forms() -> None:
    @tool
    async def ping() -> str:
        """Check the connection."""
        return "pong"

    @tool(name="say", description="Say something.")
    def speak(words: str) -> str:
        return words

    assert isinstance(ping, Tool)
    assert ping.spec.description == "Check the connection."
    assert (speak.name, speak.description) == ("say", "Say something.")


def test_functions_that_cannot_be_described_are_rejected() -> None:
    def star(*paths: str) -> str:
        return ""

    def kw(**options: str) -> str:
        return ""

    with pytest.raises(UserError, match=r"\*paths"):
        Tool(star)
    with pytest.raises(UserError, match=r"options"):
        Tool(kw)
    with pytest.raises(UserError, match="invalid tool name"):
        Tool(lambda: "x")
    with pytest.raises(UserError, match="invalid tool name"):
        Tool(read_file, name="read file")
    with pytest.raises(UserError, match="callable"):
        Tool("read_file")  # type: ignore[arg-type]
