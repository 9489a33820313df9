"""Reading and writing conversation files: format detection, precise errors, the demo.

Accepted inputs:

* ``openai``: a JSON list of OpenAI chat-completions messages, or a request body
  ``{"model": ..., "messages": [...]}``;
* ``jsonl``: JSON Lines, one OpenAI message object per line;
* ``anthropic``: an Anthropic Messages request body ``{"system": ..., "messages": [...]}``
  (or a bare list of Anthropic messages when forced with ``--format anthropic``).

Every error names the file and, when it is about one message, that message's index.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from ..exceptions import CtxCompactError

if TYPE_CHECKING:
    from .._messages import Message

__all__ = [
    "DEMO_NAME",
    "FORMATS",
    "CliError",
    "Conversation",
    "load_demo",
    "read_conversation",
    "write_conversation",
]

Format = Literal["openai", "jsonl", "anthropic"]
FORMATS: tuple[Format, ...] = ("openai", "jsonl", "anthropic")
DEMO_NAME = "demo (built-in)"

# Keys and block types only the Anthropic Messages format uses.
_ANTHROPIC_BLOCKS = frozenset({"tool_use", "tool_result", "thinking", "redacted_thinking"})
_OPENAI_ROLES = frozenset({"system", "developer", "tool"})


class CliError(CtxCompactError):
    """A problem the command line reports on one line and exits 2 for (bad input, bad flag)."""


@dataclass(frozen=True, slots=True)
class Conversation:
    """A conversation read from a file.

    Attributes:
        name: The path as given (or the demo's name).
        format: The format it was read as, and is written back in.
        messages: The provider-neutral history.
        envelope: The request body around the messages (model, tools...), when the file was
            a body rather than a bare list; written back with the new messages.

    Example:
        >>> parse_conversation("x.json", '[{"role": "user", "content": "hi"}]').format
        'openai'
    """

    name: str
    format: Format
    messages: list[Message]
    envelope: dict[str, Any] | None = None


def read_conversation(path: str | Path, *, fmt: Format | None = None) -> Conversation:
    """Read and convert one file, detecting its format unless ``fmt`` forces one.

    Raises:
        CliError: The file cannot be read, is not JSON / JSON Lines, has the wrong shape,
            or a message is malformed (the error names the message index).
    """
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CliError(f"{name}: no such file") from None
    except IsADirectoryError:
        raise CliError(f"{name}: is a directory, not a conversation file") from None
    except UnicodeDecodeError as exc:
        raise CliError(f"{name}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise CliError(f"{name}: cannot read: {exc.strerror or exc}") from None
    return parse_conversation(name, text, fmt=fmt)


def parse_conversation(name: str, text: str, *, fmt: Format | None = None) -> Conversation:
    """Like :func:`read_conversation`, from text already read."""
    stripped = text.lstrip()
    if not stripped:
        raise CliError(f"{name}: empty file: expected a conversation")
    if fmt == "jsonl":
        return _convert(name, "jsonl", _parse_jsonl(name, text), None)
    if stripped[0] == "[":
        items = _parse_array(name, text)
        return _convert(name, fmt or "openai", items, None)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data" and fmt is None:
            return _convert(name, "jsonl", _parse_jsonl(name, text), None)
        raise CliError(
            f"{name}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    if isinstance(data, dict) and "messages" in data:
        messages = data["messages"]
        if not isinstance(messages, list):
            raise CliError(f'{name}: "messages" must be a list, got {_kind(messages)}')
        detected: Format = fmt or ("anthropic" if _looks_anthropic(data) else "openai")
        return _convert(name, detected, messages, data)
    if isinstance(data, dict) and fmt is None and "role" in data:
        return _convert(name, "jsonl", [data], None)  # JSON Lines with a single line
    raise CliError(
        f"{name}: expected a JSON list of messages, JSON Lines, or a request body with "
        f'"messages"; got {_kind(data)}'
    )


def load_demo() -> Conversation:
    """The demo conversation that ships inside the package (a coding-agent session)."""
    text = (resources.files("ctxcompact") / "data" / "demo.json").read_text(encoding="utf-8")
    return parse_conversation(DEMO_NAME, text, fmt="openai")


def write_conversation(conversation: Conversation, history: list[Message], out: str) -> None:
    """Write ``history`` in the format ``conversation`` was read in (``-``: standard output)."""
    from .._anthropic_format import to_anthropic
    from .._openai_format import to_openai

    payload: object
    if conversation.format == "anthropic":
        system, messages = to_anthropic(history)
        body = dict(conversation.envelope or {})
        body.pop("system", None)
        if system is not None:
            body["system"] = system
        body["messages"] = messages
        # A bare list has no place for a system prompt: write a body when there is one.
        payload = body if conversation.envelope is not None or system is not None else messages
    else:
        messages_out = to_openai(history)
        if conversation.envelope is not None:
            payload = {**conversation.envelope, "messages": messages_out}
        else:
            payload = messages_out
    if conversation.format == "jsonl":
        items = cast("list[object]", payload)
        text = "".join(json.dumps(item, ensure_ascii=False) + "\n" for item in items)
    else:
        text = json.dumps(payload, ensure_ascii=False, indent=2) + "\n"
    if out == "-":
        sys.stdout.write(text)
        return
    try:
        Path(out).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise CliError(f"{out}: cannot write: {exc.strerror or exc}") from None


# -- parsing ------------------------------------------------------------------------------


def _parse_array(name: str, text: str) -> list[Any]:
    """Parse a top-level JSON array element by element, to say which element is broken."""
    decoder = json.JSONDecoder()
    pos = _skip_ws(text, 0) + 1  # past "["
    items: list[Any] = []
    pos = _skip_ws(text, pos)
    if pos < len(text) and text[pos] == "]":
        return _expect_end(name, text, pos + 1, items)
    while True:
        try:
            item, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise CliError(
                f"{name}: message {len(items)}: invalid JSON at line {exc.lineno}, "
                f"column {exc.colno}: {exc.msg}"
            ) from None
        items.append(item)
        pos = _skip_ws(text, pos)
        if pos < len(text) and text[pos] == ",":
            pos = _skip_ws(text, pos + 1)
            continue
        if pos < len(text) and text[pos] == "]":
            return _expect_end(name, text, pos + 1, items)
        line, col = _line_col(text, pos)
        raise CliError(
            f"{name}: after message {len(items) - 1}: invalid JSON at line {line}, "
            f"column {col}: expected ',' or ']'"
        )


def _expect_end(name: str, text: str, pos: int, items: list[Any]) -> list[Any]:
    pos = _skip_ws(text, pos)
    if pos != len(text):
        line, col = _line_col(text, pos)
        raise CliError(f"{name}: invalid JSON at line {line}, column {col}: extra data")
    return items


def _parse_jsonl(name: str, text: str) -> list[Any]:
    items: list[Any] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            items.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise CliError(
                f"{name}: message {len(items)} (line {lineno}): invalid JSON at column "
                f"{exc.colno}: {exc.msg}"
            ) from None
    return items


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def _line_col(text: str, pos: int) -> tuple[int, int]:
    line = text.count("\n", 0, pos) + 1
    return line, pos - (text.rfind("\n", 0, pos) + 1) + 1


def _looks_anthropic(body: dict[str, Any]) -> bool:
    if "system" in body:
        return True
    for message in body["messages"]:
        if not isinstance(message, dict):
            continue
        if message.get("role") in _OPENAI_ROLES or "tool_calls" in message:
            return False
        content = message.get("content")
        if isinstance(content, list) and any(
            isinstance(block, dict) and block.get("type") in _ANTHROPIC_BLOCKS for block in content
        ):
            return True
    return False


def _convert(
    name: str, fmt: Format, items: list[Any], envelope: dict[str, Any] | None
) -> Conversation:
    from .._anthropic_format import from_anthropic
    from .._openai_format import from_openai

    try:
        if fmt == "anthropic":
            system = envelope.get("system") if envelope is not None else None
            messages = from_anthropic(items, system=system)
        else:
            messages = from_openai(items)
    except (CtxCompactError, ValueError, TypeError) as exc:
        raise CliError(f"{name}: {exc}") from None
    return Conversation(name, fmt, list(messages), envelope)


def _kind(value: object) -> str:
    if isinstance(value, dict):
        return 'a JSON object without "messages"'
    return {list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )
