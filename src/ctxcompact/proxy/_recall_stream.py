"""Reading a streamed answer event by event: relay it, or hold it once it calls the recall tool.

:class:`StreamState` follows one streamed answer (OpenAI chunks or Anthropic events). Events
are relayed as they come until the first tool call is named: when it is the recall tool, that
event and all later ones are held; a later call of another tool releases them (a mixed answer
is passed through). It also rebuilds the answer (text and tool calls) for the follow-up
request, and, for an Anthropic follow-up, leaves out its ``message_start`` and shifts its
content-block indices so the client sees one message.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..store._recall import RECALL_TOOL_NAME

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

__all__ = ["StreamState", "sse_events"]


async def sse_events(text: AsyncIterator[str]) -> AsyncIterator[str]:
    """The server-sent events of a text stream, each without its blank separator line."""
    buffer = ""
    async for piece in text:
        buffer += piece.replace("\r\n", "\n")
        while "\n\n" in buffer:
            event, buffer = buffer.split("\n\n", 1)
            if event.strip():
                yield event
    if buffer.strip():
        yield buffer


def _data(event: str) -> str:
    return "\n".join(
        line[5:].removeprefix(" ") for line in event.split("\n") if line.startswith("data:")
    )


class StreamState:
    """One streamed answer: what was relayed, what is held, the answer so far."""

    def __init__(self, provider: str, *, round_: int = 0, offset: int = 0) -> None:
        self.provider = provider
        self.round = round_
        self.offset = offset  # Anthropic: content blocks the client already has
        self.client_blocks = offset
        self.decided = False
        self.holding = False
        self.unreadable = False  # a chunk not in the provider's shape came: relay, never answer
        self.held: list[tuple[bytes, bool]] = []
        self.text = ""
        self.calls: dict[int, dict[str, str]] = {}
        self.blocks: dict[int, dict[str, Any]] = {}

    def feed(self, event: str) -> list[bytes]:
        """The bytes to send the client now for ``event`` (none while holding)."""
        payload = _data(event)
        try:
            obj = json.loads(payload) if payload and payload != "[DONE]" else None
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's stack
            obj = None
        block_start = False
        if isinstance(obj, dict):
            names, released = self._read(obj)
            if self.provider == "anthropic":
                if obj.get("type") == "message_start" and self.round:
                    return released  # the client's stream already started its message
                block_start = obj.get("type") == "content_block_start"
                if self.offset and isinstance(obj.get("index"), int):
                    obj["index"] += self.offset
                    event = f"event: {obj.get('type')}\ndata: {json.dumps(obj)}"
            released += self._decide(names)
        else:
            released = []
        out = (event + "\n\n").encode("utf-8")
        if self.holding:
            self.held.append((out, block_start))
            return released
        self.client_blocks += block_start
        return [*released, out]

    def _read(self, obj: dict[str, Any]) -> tuple[list[str], list[bytes]]:
        """The tool names ``obj`` starts, and what to release when it cannot be read.

        A chunk that is JSON but not in the provider's shape (``tool_calls`` not a list of
        objects, a delta that is a string, a number where text goes) ends the reading of
        this answer: a recall call in it could not be answered reliably, so what was held is
        released and the rest is relayed as it comes, as the plain path relays everything.
        """
        if self.unreadable:
            return [], []
        try:
            names = self._openai(obj) if self.provider == "openai" else self._anthropic(obj)
        except (AttributeError, TypeError, ValueError):  # a shape the provider never sends
            self.unreadable = True
            return [], self.release()
        return names, []

    def _decide(self, names: list[str]) -> list[bytes]:
        released: list[bytes] = []
        for name in names:
            if not self.decided:
                self.decided = True
                self.holding = name == RECALL_TOOL_NAME
            elif self.holding and name != RECALL_TOOL_NAME:
                self.holding = False  # a mixed answer: pass it through as it is
                released = self.release()
        return released

    def release(self) -> list[bytes]:
        """Everything held, to send as it is; holding stops."""
        out = [b for b, _ in self.held]
        self.client_blocks += sum(start for _, start in self.held)
        self.held = []
        self.holding = False
        return out

    def _openai(self, obj: dict[str, Any]) -> list[str]:
        names: list[str] = []
        for choice in obj.get("choices") or []:
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if not isinstance(delta, dict):
                continue
            if isinstance(delta.get("content"), str):
                self.text += delta["content"]
            for call in delta.get("tool_calls") or []:
                entry = self.calls.setdefault(
                    int(call.get("index", 0)), {"id": "", "name": "", "arguments": ""}
                )
                function = call.get("function") or {}
                if call.get("id"):
                    entry["id"] = call["id"]
                if function.get("name"):
                    entry["name"] = function["name"]
                    names.append(function["name"])
                entry["arguments"] += function.get("arguments") or ""
        return names

    def _anthropic(self, obj: dict[str, Any]) -> list[str]:
        kind, index = obj.get("type"), obj.get("index")
        if kind == "content_block_start" and isinstance(index, int):
            block = dict(obj.get("content_block") or {})
            self.blocks[index] = block
            if block.get("type") == "tool_use":
                block["partial"] = ""
                return [str(block.get("name"))]
        elif kind == "content_block_delta" and index in self.blocks:
            delta, block = obj.get("delta") or {}, self.blocks[index]
            if delta.get("type") == "text_delta":
                block["text"] = block.get("text", "") + delta.get("text", "")
            elif delta.get("type") == "input_json_delta":
                block["partial"] = block.get("partial", "") + delta.get("partial_json", "")
        return []

    def recall_calls(self) -> list[tuple[str, Any]] | None:
        """``(id, arguments)`` of each call when the held answer calls only the recall tool."""
        if not self.holding or self.unreadable:
            return None
        calls: list[tuple[str, Any, object]]
        if self.provider == "openai":
            calls = [(c["id"], c["arguments"], c["name"]) for c in self.calls.values()]
        else:
            calls = [
                (str(b.get("id")), b.get("partial") or "{}", b.get("name"))
                for b in self.blocks.values()
                if b.get("type") == "tool_use"
            ]
        if not calls or any(name != RECALL_TOOL_NAME for _, _, name in calls):
            return None
        return [(i, args) for i, args, _ in calls]

    def answer(self) -> dict[str, Any]:
        """The streamed answer in the shape of a non-streamed one (for :func:`follow_up`)."""
        if self.provider == "openai":
            tool_calls = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": c["arguments"]},
                }
                for _, c in sorted(self.calls.items())
            ]
            message = {"role": "assistant", "content": self.text or None, "tool_calls": tool_calls}
            return {"choices": [{"message": message}]}
        content: list[dict[str, Any]] = []
        for _, block in sorted(self.blocks.items()):
            if block.get("type") == "text" and block.get("text"):
                content.append({"type": "text", "text": block["text"]})
            elif block.get("type") == "tool_use":
                try:
                    arguments = json.loads(block.get("partial") or "{}")
                except ValueError:
                    arguments = {}
                content.append(
                    {
                        "type": "tool_use",
                        "id": block.get("id"),
                        "name": block.get("name"),
                        "input": arguments,
                    }
                )
        return {"content": content}

    def next_round(self) -> StreamState:
        """The state for the follow-up's stream, continuing this one for the client."""
        return StreamState(self.provider, round_=self.round + 1, offset=self.client_blocks)

    def error_event(self, message: str) -> bytes:
        """An error event the provider's SDK raises on, to end a stream that cannot go on."""
        data: dict[str, Any]
        if self.provider == "openai":
            data = {"error": {"type": "ctxcompact_proxy_error", "message": message}}
            return f"data: {json.dumps(data)}\n\n".encode()
        data = {"type": "error", "error": {"type": "api_error", "message": message}}
        return f"event: error\ndata: {json.dumps(data)}\n\n".encode()
