"""Reading and writing conversation files for the command line: CLI errors, the demo.

Reading and format detection live in :mod:`ctxcompact._formats.files` (OpenAI JSON list or
body, JSON Lines, Anthropic body, Claude Code session logs, Responses items and Codex
rollouts); here its errors become
:class:`CliError` (one line, exit 2) and results are written back in the input's format.
"""

from __future__ import annotations

import json
import sys
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, cast

from .._formats.anthropic import to_anthropic
from .._formats.files import FORMATS, Conversation, Format
from .._formats.files import load_conversation as _load
from .._formats.files import parse_conversation as _parse
from .._formats.openai_chat import to_openai
from .._formats.responses_files import dump_responses
from ..exceptions import CliError, ConversationFileError

if TYPE_CHECKING:
    from .._history.messages import Message

__all__ = [
    "DEMO_NAME",
    "FORMATS",
    "CliError",
    "Conversation",
    "load_demo",
    "parse_conversation",
    "read_conversation",
    "write_conversation",
]

DEMO_NAME = "demo (built-in)"


def read_conversation(path: str | Path, *, fmt: Format | None = None) -> Conversation:
    """Read and convert one file, detecting its format unless ``fmt`` forces one.

    Raises:
        CliError: The file cannot be read, is not JSON / JSON Lines, has the wrong shape,
            or a message is malformed (the error names the file and the line or message).
    """
    name = str(path)
    try:
        return _load(path, fmt=fmt)
    except ConversationFileError as exc:
        raise CliError(str(exc), path=exc.path) from None
    except FileNotFoundError:
        raise CliError(f"{name}: no such file", path=name) from None
    except IsADirectoryError:
        raise CliError(f"{name}: is a directory, not a conversation file", path=name) from None
    except OSError as exc:
        raise CliError(f"{name}: cannot read: {exc.strerror or exc}", path=name) from None


def parse_conversation(name: str, text: str, *, fmt: Format | None = None) -> Conversation:
    """Like :func:`read_conversation`, from text already read."""
    try:
        return _parse(name, text, fmt=fmt)
    except ConversationFileError as exc:
        raise CliError(str(exc), path=exc.path) from None


def load_demo() -> Conversation:
    """The demo conversation that ships inside the package (a coding-agent session)."""
    text = (resources.files("ctxcompact") / "data" / "demo.json").read_text(encoding="utf-8")
    return parse_conversation(DEMO_NAME, text, fmt="openai")


def write_conversation(conversation: Conversation, history: list[Message], out: str) -> None:
    """Write ``history`` in the format ``conversation`` was read in (``-``: standard output)."""

    payload: object
    if conversation.format in ("responses", "codex"):
        _write_text(dump_responses(history, conversation.format, conversation.envelope), out)
        return
    # A Claude Code log is written as the Anthropic Messages it holds (its blocks round-trip).
    if conversation.format in ("anthropic", "claude-code"):
        system, messages = to_anthropic(history)
        body = dict(conversation.envelope or {})
        body.pop("system", None)
        if system is not None:
            body["system"] = system
        body["messages"] = messages
        # A bare list has no place for a system prompt: write a body when there is one (and
        # for a Claude Code log, so that reading the output back detects Anthropic blocks).
        bare = conversation.envelope is None and system is None
        payload = messages if bare and conversation.format == "anthropic" else body
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
    _write_text(text, out)


def _write_text(text: str, out: str) -> None:
    if out == "-":
        sys.stdout.write(text)
        return
    try:
        Path(out).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise CliError(f"{out}: cannot write: {exc.strerror or exc}", path=out) from None
