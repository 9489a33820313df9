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
    from collections.abc import Sequence

    from .._history.messages import Message

__all__ = [
    "CONVERSATION_SUFFIXES",
    "DEMO_NAME",
    "FORMATS",
    "SIDECAR_SUFFIX",
    "CliError",
    "Conversation",
    "conversation_paths",
    "load_demo",
    "parse_conversation",
    "read_conversation",
    "write_conversation",
]

DEMO_NAME = "demo (built-in)"

CONVERSATION_SUFFIXES = (".json", ".jsonl")
"""What a folder given on the command line is read for: JSON and JSON Lines files."""

SIDECAR_SUFFIX = ".meta.json"
"""A file that describes a recorded conversation (usage per call, its source), beside it:
``tests/data/traces/x.json`` has ``x.meta.json``. It is not a conversation."""


def conversation_paths(paths: Sequence[str]) -> tuple[list[str], list[str]]:
    """The conversation files that ``paths`` name, and the sidecars left out.

    A folder stands for its ``.json`` and ``.jsonl`` files, sorted by name (not its
    sub-folders); a ``.meta.json`` sidecar is left out whether it is in a folder or named
    (a shell glob such as ``traces/*.json`` names them too). Other files are kept as given,
    so that reading them reports what is wrong with them.

    Raises:
        CliError: A folder holds no conversation file, or every file named is a sidecar.
    """
    found: list[str] = []
    skipped: list[str] = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            inside = sorted(
                p for p in path.iterdir() if p.is_file() and p.name.endswith(CONVERSATION_SUFFIXES)
            )
            conversations = [str(p) for p in inside if not p.name.endswith(SIDECAR_SUFFIX)]
            skipped += [str(p) for p in inside if p.name.endswith(SIDECAR_SUFFIX)]
            if not conversations:
                raise CliError(
                    f"{name}: a folder with no conversation file (.json or .jsonl, "
                    f"{SIDECAR_SUFFIX} sidecars aside)",
                    path=name,
                )
            found += conversations
        elif path.name.endswith(SIDECAR_SUFFIX):
            skipped.append(name)
        else:
            found.append(name)
    if not found:
        raise CliError(
            f"{paths[0]}: only {SIDECAR_SUFFIX} files, which describe recorded conversations "
            "and are not conversations themselves; name the conversation files or their folder",
            path=paths[0],
        )
    return found, skipped


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
