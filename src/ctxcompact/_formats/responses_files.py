"""Reading and writing OpenAI Responses-format conversation files (for the command line).

Two shapes, detected with :func:`~ctxcompact.looks_like_responses`:

* ``responses``: a JSON list of Responses items, or a request body with an ``input`` list
  (or a response body with ``output``); written back the same way, the body kept around
  the new items;
* ``codex``: JSON Lines of Responses items: a Codex CLI rollout
  (``~/.codex/sessions/.../rollout-*.jsonl``), whose ``response_item`` lines carry the items
  in ``payload``, or one bare item per line. A rollout is read as its ``response_item``
  payloads in order; its other lines (``session_meta``, ``turn_context``, ``event_msg``,
  ``compacted``) are not part of what the model saw. It is written back as the lines before
  the first ``response_item`` (the session header) followed by one ``response_item`` line per
  item; the event lines in between are not written, as they no longer describe the history.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..exceptions import ConversationFileError, FormatError
from .responses import from_responses
from .responses_items import looks_like_responses
from .responses_write import to_responses

if TYPE_CHECKING:
    from .._history.messages import Message

__all__ = ["ROLLOUT_HEAD", "dump_responses", "from_codex_lines", "is_codex_lines"]

ROLLOUT_HEAD = "rollout_head"
"""The envelope key of a Codex rollout: the lines before its first ``response_item``."""

_ITEM_LINE = "response_item"


def is_codex_lines(items: list[Any]) -> bool:
    """Whether decoded JSON Lines are a Codex rollout or bare Responses items."""

    if any(isinstance(item, dict) and item.get("type") == _ITEM_LINE for item in items):
        return True
    return looks_like_responses(items)


def from_codex_lines(
    name: str, lines: list[tuple[int, Any]]
) -> tuple[list[Message], dict[str, Any] | None]:
    """The history of rollout (or bare item) lines, and the envelope to write it back."""

    rollout = any(isinstance(item, dict) and item.get("type") == _ITEM_LINE for _, item in lines)
    numbered: list[tuple[int, Any]] = []
    head: list[Any] = []
    for lineno, item in lines:
        if not isinstance(item, dict):
            raise ConversationFileError("expected a JSON object", path=name, line=lineno)
        if not rollout:
            numbered.append((lineno, item))
        elif item.get("type") == _ITEM_LINE:
            payload = item.get("payload")
            if not isinstance(payload, dict):
                raise ConversationFileError(
                    "a response_item line needs a 'payload' object", path=name, line=lineno
                )
            numbered.append((lineno, payload))
        elif not numbered:
            head.append(item)
    try:
        messages = from_responses([item for _, item in numbered])
    except FormatError as exc:
        at = exc.index
        line = numbered[at][0] if at is not None and at < len(numbered) else None
        field = f"payload.{exc.field}" if rollout and exc.field else exc.field
        raise ConversationFileError(exc.detail, path=name, line=line, field=field) from None
    return list(messages), ({ROLLOUT_HEAD: head} if rollout else None)


def dump_responses(history: list[Message], fmt: str, envelope: dict[str, Any] | None) -> str:
    """The text of ``history`` in the Responses shape it was read from."""

    items = to_responses(history)
    if fmt == "codex":
        if envelope is None:
            lines: list[Any] = list(items)
        else:
            head = envelope.get(ROLLOUT_HEAD, [])
            lines = [*head, *({"type": _ITEM_LINE, "payload": item} for item in items)]
        return "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
    payload: object = items
    if envelope is not None:
        key = "input" if isinstance(envelope.get("input"), list) else "output"
        payload = {**envelope, key: items}
    return json.dumps(payload, ensure_ascii=False, indent=2) + "\n"
