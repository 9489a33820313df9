"""A streamed Anthropic Messages answer through a recall round (see :mod:`._recall_stream`).

A follow-up's ``message_start`` is left out and its block indices continue the client's, so
the client's SDK sees one message. The model's turn is rebuilt from the events for the
follow-up: ``thinking`` blocks from their ``thinking_delta`` and ``signature_delta`` events,
``redacted_thinking`` as it came, each in its place: the API refuses a tool round whose
assistant turn lost them.
"""

from __future__ import annotations

import json
from typing import Any

from ..store._recall import RECALL_TOOL_NAME
from ._recall_stream import Carried, StreamState, sse

__all__ = ["MessagesStream"]

Body = dict[str, Any]

_MODEL_OWN = frozenset({"text", "thinking", "redacted_thinking"})
"""Anthropic blocks that are the model's own words, not calls."""


class MessagesStream(StreamState):
    """Anthropic Messages events. A follow-up's ``message_start`` is left out and its block
    indices continue the client's, so the client's SDK sees one message."""

    def __init__(self, *, added: bool = True, carried: Carried | None = None) -> None:
        super().__init__(added=added, carried=carried)
        self.blocks: dict[int, Body] = {}
        self.partial: dict[int, str] = {}

    def track(self, obj: Body) -> list[tuple[int, bool]]:
        kind, index = obj.get("type"), obj.get("index")
        if kind == "content_block_start" and isinstance(index, int):
            block = dict(obj["content_block"])
            self.blocks[index] = block
            if block.get("type") in _MODEL_OWN:
                return []
            self.partial[index] = ""
            is_recall = block.get("type") == "tool_use" and block.get("name") == RECALL_TOOL_NAME
            return [(index, is_recall)]
        if kind == "content_block_delta" and index in self.blocks:
            delta, block = obj.get("delta") or {}, self.blocks[index]
            what = delta.get("type")
            if what == "text_delta":
                block["text"] = block.get("text", "") + delta["text"]
            elif what == "thinking_delta":
                block["thinking"] = block.get("thinking", "") + delta["thinking"]
            elif what == "signature_delta":
                block["signature"] = delta["signature"]  # set, not appended (as the SDK does)
            elif what == "input_json_delta":
                self.partial[index] = self.partial.get(index, "") + delta["partial_json"]
            elif what == "citations_delta":
                block["citations"] = [*(block.get("citations") or []), delta["citation"]]
        return []

    def emit(self, event: str, obj: Body, *, final: bool) -> list[bytes]:
        kind = obj.get("type")
        if kind == "message_start" and self.round:
            return []  # the client's stream already started its message
        changed = False
        index = obj.get("index")
        if isinstance(index, int):
            if self.dropped(index):
                return []
            if self.shifted(index) != index:
                obj["index"] = self.shifted(index)
                changed = True
            if kind == "content_block_start":
                self.client_blocks += 1
            if kind == "content_block_delta" and (obj.get("delta") or {}).get("text"):
                self.client_text = True
        if final and not self.others and kind == "message_delta":
            delta = obj.get("delta")
            if isinstance(delta, dict) and delta.get("stop_reason") == "tool_use":
                delta["stop_reason"] = "end_turn"
                changed = True
        if not changed:
            return [(event + "\n\n").encode("utf-8")]
        return [sse(obj, str(kind))]

    @staticmethod
    def ends_answer(obj: Body | None) -> bool:
        return obj is None or obj.get("type") in ("message_delta", "message_stop")

    def note_events(self, note: str) -> list[bytes]:
        index = self.client_blocks
        self.client_blocks += 1
        self.client_text = True
        start = {"type": "content_block_start", "index": index}
        start["content_block"] = {"type": "text", "text": ""}
        delta = {"type": "content_block_delta", "index": index}
        delta["delta"] = {"type": "text_delta", "text": note}
        stop = {"type": "content_block_stop", "index": index}
        return [sse(e, str(e["type"])) for e in (start, delta, stop)]

    def _calls(self) -> list[tuple[str, Any]]:
        keys = sorted(self.recall_keys)
        return [(str(self.blocks[k].get("id")), self.partial.get(k) or "{}") for k in keys]

    def answer(self) -> Body:
        content: list[Body] = []
        for index, block in sorted(self.blocks.items()):
            if block.get("type") == "text" and not block.get("text"):
                continue  # the API refuses an empty text block
            if index in self.partial:
                try:
                    arguments = json.loads(self.partial[index] or "{}")
                except ValueError:
                    arguments = {}
                block = {**block, "input": arguments}
            # thinking and redacted_thinking as they came, signature and data unchanged
            content.append(block)
        return {"content": content}

    def next_round(self) -> StreamState:
        return MessagesStream(added=self.added, carried=self._carry())

    def error_event(self, message: str) -> bytes:
        data = {"type": "error", "error": {"type": "api_error", "message": message}}
        return sse(data, "error")
