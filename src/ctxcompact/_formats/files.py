"""Reading conversation files: format detection, Claude Code session logs, precise errors.

Accepted files, detected from their content:

* ``openai``: a JSON list of OpenAI chat-completions messages, or a request body
  ``{"model": ..., "messages": [...]}``;
* ``jsonl``: JSON Lines, one OpenAI message object per line;
* ``anthropic``: an Anthropic Messages request body ``{"system": ..., "messages": [...]}``
  (a bare list of Anthropic messages only when the format is forced);
* ``claude-code``: a Claude Code session log (``~/.claude/projects/<project>/<session>.jsonl``):
  one JSON object per line with ``type``, ``message``, ``uuid``, ``parentUuid``...
* ``responses``: a JSON list of OpenAI Responses items, or a body with an ``input`` list;
* ``codex``: JSON Lines of Responses items, such as a Codex CLI rollout (see
  :mod:`ctxcompact._formats.responses_files`).

Every error is a :class:`~ctxcompact.exceptions.ConversationFileError` that names the file
and where: line and column for a JSON syntax error, the line for a JSON Lines record, the
message index (and field) for a malformed message of a JSON list.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..exceptions import ConversationFileError, FormatError
from .anthropic import from_anthropic
from .openai_chat import from_openai
from .responses import from_responses
from .responses_files import from_codex_lines, is_codex_lines
from .responses_items import looks_like_responses

if TYPE_CHECKING:
    from .._history.messages import Message

__all__ = ["FORMATS", "Conversation", "Format", "parse_conversation", "read_conversation"]

Format = Literal["openai", "jsonl", "anthropic", "claude-code", "responses", "codex"]
FORMATS: tuple[Format, ...] = ("openai", "jsonl", "anthropic", "claude-code", "responses", "codex")

# Keys and block types only the Anthropic Messages format uses.
_ANTHROPIC_BLOCKS = frozenset({"tool_use", "tool_result", "thinking", "redacted_thinking"})
_OPENAI_ROLES = frozenset({"system", "developer", "tool"})
_CLAUDE_CODE_MESSAGES = ("user", "assistant")


@dataclass(frozen=True, slots=True)
class Conversation:
    """A conversation read from a file.

    Attributes:
        name: The path as given.
        format: The format it was read as.
        messages: The provider-neutral history.
        envelope: The request body around the messages (model, tools...), when the file was
            a body rather than a bare list.

    Example:
        >>> parse_conversation("x.json", '[{"role": "user", "content": "hi"}]').format
        'openai'
    """

    name: str
    format: Format
    messages: list[Message]
    envelope: dict[str, Any] | None = None


def read_conversation(path: str | Path, *, fmt: Format | None = None) -> list[Message]:
    """Read one conversation file into a history, detecting its format unless ``fmt`` is given.

    A Claude Code session log is read as its main thread: lines of other kinds (progress,
    system, file snapshots, ``type: summary`` titles) and sidechain lines (a Task subagent's
    messages, ``isSidechain: true``) are left out, unless every message line is a sidechain
    (a subagent's own log), which is then read whole. Streamed assistant lines that share a
    ``message.id`` become one message, and the tool results that arrive between them follow
    it in the order of its calls. A compaction summary (``isCompactSummary``) stays where it
    is, as the user message Claude Code wrote; synthetic API-error lines
    (``isApiErrorMessage``) are left out, as Claude Code never sends them to the model.

    Args:
        path: The file.
        fmt: Force a format (one of :data:`FORMATS`) instead of detecting it.

    Raises:
        ConversationFileError: The file is not UTF-8, not JSON / JSON Lines, has the wrong
            shape, or a message is malformed; the error names the file and the line (and
            column) or the message index.
        OSError: The file cannot be read.

    Example:
        >>> import pathlib, tempfile
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "chat.json"
        >>> _ = path.write_text('[{"role": "user", "content": "hi"}]')
        >>> [m.role for m in read_conversation(path)]
        ['user']
    """
    return load_conversation(path, fmt=fmt).messages


def load_conversation(path: str | Path, *, fmt: Format | None = None) -> Conversation:
    """:func:`read_conversation` with the format and the envelope (to write it back)."""
    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConversationFileError(
            f"not UTF-8 text ({exc.reason} at byte {exc.start})", path=str(path)
        ) from None
    return parse_conversation(str(path), text, fmt=fmt)


def parse_conversation(name: str, text: str, *, fmt: Format | None = None) -> Conversation:
    """Like :func:`load_conversation`, from text already read (``name`` is used in errors)."""
    if text.startswith("\ufeff"):
        text = text[1:]
    stripped = text.lstrip()
    if not stripped:
        raise ConversationFileError("empty file: expected a conversation", path=name)
    if fmt in ("jsonl", "claude-code", "codex"):
        return _from_lines(name, _parse_lines(name, text), fmt)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data" and fmt is None and stripped[0] == "{":
            lines = _parse_lines(name, text)
            return _from_lines(name, lines, _lines_format(lines))
        raise _syntax_error(name, exc) from None
    if isinstance(data, list):
        return _convert(name, fmt or _list_format(data), data, None)
    if isinstance(data, dict) and (fmt == "responses" or (fmt is None and _responses_body(data))):
        key = "input" if isinstance(data.get("input"), list) else "output"
        items = data.get(key)
        if not isinstance(items, list):
            raise ConversationFileError('"input" must be a list of Responses items', path=name)
        return _convert(name, "responses", items, data)
    if isinstance(data, dict) and "messages" in data:
        messages = data["messages"]
        if not isinstance(messages, list):
            raise ConversationFileError(
                f'"messages" must be a list, got {_kind(messages)}', path=name
            )
        detected: Format = fmt or ("anthropic" if _looks_anthropic(data) else "openai")
        return _convert(name, detected, messages, data)
    if isinstance(data, dict) and fmt is None and ("role" in data or _is_claude_code(data)):
        lines = [(_first_line(text), data)]  # JSON Lines with a single line
        return _from_lines(name, lines, _lines_format(lines))
    raise ConversationFileError(
        "expected a JSON list of messages, JSON Lines, a Claude Code session log, or a "
        f'request body with "messages"; got {_kind(data)}',
        path=name,
    )


# -- JSON and JSON Lines ----------------------------------------------------------------------


def _syntax_error(
    name: str, exc: json.JSONDecodeError, line: int | None = None
) -> ConversationFileError:
    return ConversationFileError(
        f"invalid JSON: {exc.msg}",
        path=name,
        line=exc.lineno if line is None else line,
        column=exc.colno,
    )


def _parse_lines(name: str, text: str) -> list[tuple[int, Any]]:
    """``(line number, decoded object)`` for every non-blank line."""
    items: list[tuple[int, Any]] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            items.append((lineno, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise _syntax_error(name, exc, lineno) from None
    return items


def _first_line(text: str) -> int:
    return text[: len(text) - len(text.lstrip())].count("\n") + 1


def _list_format(items: list[Any]) -> Format:

    return "responses" if looks_like_responses(items) else "openai"


def _responses_body(data: dict[str, Any]) -> bool:

    return "messages" not in data and looks_like_responses(data)


def _is_claude_code(item: object) -> bool:
    return isinstance(item, dict) and "type" in item and "role" not in item


def _lines_format(lines: list[tuple[int, Any]]) -> Format:

    if is_codex_lines([item for _, item in lines]):
        return "codex"
    return "claude-code" if lines and _is_claude_code(lines[0][1]) else "jsonl"


def _from_lines(name: str, lines: list[tuple[int, Any]], fmt: Format) -> Conversation:
    if fmt == "claude-code":
        return _convert_claude_code(name, lines)
    if fmt == "codex":
        messages, envelope = from_codex_lines(name, lines)
        return Conversation(name, "codex", messages, envelope)

    try:
        messages = from_openai([item for _, item in lines])
    except FormatError as exc:
        if exc.index is None or exc.index >= len(lines):
            raise ConversationFileError(exc.detail, path=name, field=exc.field) from None
        raise ConversationFileError(
            exc.detail, path=name, line=lines[exc.index][0], index=exc.index, field=exc.field
        ) from None
    return Conversation(name, "jsonl", list(messages), None)


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

    try:
        if fmt == "responses":
            messages = from_responses(items)
        elif fmt == "anthropic":
            system = envelope.get("system") if envelope is not None else None
            messages = from_anthropic(items, system=system)
        else:
            messages = from_openai(items)
    except FormatError as exc:
        raise ConversationFileError(
            exc.detail, path=name, index=exc.index, field=exc.field
        ) from None
    return Conversation(name, fmt, list(messages), envelope)


def _kind(value: object) -> str:
    if isinstance(value, dict):
        return 'a JSON object without "messages"'
    return {list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )


# -- Claude Code session logs -----------------------------------------------------------------


@dataclass
class _Turn:
    """One assistant message being assembled from its streamed lines, with its results."""

    id: object
    line: int
    blocks: list[Any]
    results: list[tuple[int, dict[str, Any]]]


class _ClaudeCodeReader:
    """Turns Claude Code log lines into Anthropic messages, each with the line it starts on."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.messages: list[dict[str, Any]] = []
        self.lines: list[int] = []
        self.turn: _Turn | None = None

    def error(self, message: str, line: int) -> ConversationFileError:
        return ConversationFileError(message, path=self.name, line=line or None)

    def add(self, lineno: int, entry: dict[str, Any]) -> None:
        message = entry.get("message")
        kind = entry["type"]
        if not isinstance(message, dict):
            raise self.error(f"a line of type {kind!r} needs a 'message' object", lineno)
        content = message.get("content")
        if kind == "assistant":
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
            if not isinstance(blocks, list):
                raise self.error("message.content must be a string or a list of blocks", lineno)
            turn = self.turn
            if turn is not None and message.get("id") is not None and message["id"] == turn.id:
                turn.blocks.extend(blocks)
            else:
                self.close()
                self.turn = _Turn(message.get("id"), lineno, list(blocks), [])
            return
        if isinstance(content, list):
            results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
            others = [b for b in content if not any(b is r for r in results)]
            if results:
                if self.turn is None:
                    raise self.error("a tool_result with no assistant tool_use before it", lineno)
                self.turn.results.extend((lineno, block) for block in results)
                if not others:
                    return
                content = others
        self.close()
        self.emit({"role": "user", "content": content}, lineno)

    def emit(self, message: dict[str, Any], line: int) -> None:
        self.messages.append(message)
        self.lines.append(line)

    def close(self) -> None:
        """Emit the open assistant message, then its results in the order of its calls."""
        turn, self.turn = self.turn, None
        if turn is None:
            return
        self.emit({"role": "assistant", "content": turn.blocks}, turn.line)
        if not turn.results:
            return
        order = {
            b.get("id"): k
            for k, b in enumerate(turn.blocks)
            if isinstance(b, dict) and b.get("type") == "tool_use"
        }
        for lineno, block in turn.results:
            if block.get("tool_use_id") not in order:
                raise self.error(
                    f"tool_result for {block.get('tool_use_id')!r} answers no tool_use of the "
                    f"assistant message on line {turn.line}",
                    lineno,
                )
        ranked = sorted(turn.results, key=lambda r: order[r[1]["tool_use_id"]])
        self.emit({"role": "user", "content": [b for _, b in ranked]}, ranked[0][0])


def _convert_claude_code(name: str, lines: list[tuple[int, Any]]) -> Conversation:

    entries: list[tuple[int, dict[str, Any]]] = []
    for lineno, item in lines:
        if not isinstance(item, dict):
            raise ConversationFileError(
                f"expected a JSON object, got {_kind(item)}", path=name, line=lineno or None
            )
        if item.get("type") in _CLAUDE_CODE_MESSAGES and not item.get("isApiErrorMessage"):
            entries.append((lineno, item))
    main = [(n, e) for n, e in entries if not e.get("isSidechain")]
    reader = _ClaudeCodeReader(name)
    for lineno, entry in main or entries:
        reader.add(lineno, entry)
    reader.close()
    try:
        messages = from_anthropic(reader.messages)
    except FormatError as exc:
        line = reader.lines[exc.index] if exc.index is not None else None
        field = f"message.{exc.field}" if exc.field else None
        raise ConversationFileError(exc.detail, path=name, line=line, field=field) from None
    return Conversation(name, "claude-code", list(messages), None)
