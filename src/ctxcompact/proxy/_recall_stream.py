"""Reading a streamed answer event by event: relay it, hold it from a recall call on, and never
let a recall call the proxy offered reach the client.

A :class:`StreamState` follows one streamed answer on one route. Events are relayed as they
come until the first call is named: when it is the recall tool, that event and every later one
are held; a later call of anything else makes the answer *mixed*, and what was held is
released. Every event the client gets passes through :meth:`StreamState.emit`, which, when the
proxy added the tool, leaves out the recall calls' events and renumbers the calls after them,
so the client sees exactly the answer without those calls. An event that needs no change goes
out byte for byte.

Each state also rebuilds the model's turn as the non-streamed answer would have it (thinking
blocks with their signatures, reasoning items as their ``output_item.done`` events gave them),
for the follow-up request, and continues the client's stream with the follow-up's
(:meth:`StreamState.next_round`): one message, one response, for the client.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..store._recall import RECALL_TOOL_NAME

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

__all__ = ["Carried", "ChatStream", "StreamState", "sse", "sse_events"]

Body = dict[str, Any]


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


@dataclass
class Carried:
    """What the client's stream already holds when a follow-up's stream continues it."""

    round: int = 0
    blocks: int = 0
    """Anthropic content blocks, Responses output items, the client has."""
    text: bool = False
    """Whether the client has received any text of the answer."""
    items: list[Body] = field(default_factory=list)
    """Responses: the output items the client has, as their ``output_item.done`` gave them."""
    response_id: str | None = None
    """Responses: the id of the response the client's stream opened."""
    sequence: int = 0
    """Responses: the next event's ``sequence_number``."""


class StreamState(ABC):
    """One streamed answer on one route: what was relayed, what is held, the answer so far.

    Args:
        added: The proxy added the recall tool (the client did not offer it): recall calls
            never reach the client.
        carried: The client's stream so far, when this answer continues it.
    """

    def __init__(self, *, added: bool = True, carried: Carried | None = None) -> None:
        self.added = added
        self.carried = carried if carried is not None else Carried()
        self.round = self.carried.round
        self.client_blocks = self.carried.blocks
        self.client_text = self.carried.text
        self.decided = False
        self.holding = False
        self.unreadable = False  # a chunk not in the provider's shape came: relay, never answer
        self.recall_keys: set[int] = set()
        self.others = False  # a call of anything but the recall tool
        self.held: list[tuple[str, Body | None]] = []

    # -- what each route says ---------------------------------------------------------------

    @abstractmethod
    def track(self, obj: Body) -> list[tuple[int, bool]]:
        """Read ``obj`` into the answer; the calls it starts, as ``(key, is recall)``.
        Raises ``AttributeError``, ``TypeError``, ``ValueError`` or ``KeyError`` for a shape
        the provider never sends."""

    @abstractmethod
    def emit(self, event: str, obj: Body, *, final: bool) -> list[bytes]:
        """What the client gets for ``event``: itself, a rewritten copy, or nothing.
        ``final``: the answer ends here with its recall calls taken out."""

    @abstractmethod
    def note_events(self, note: str) -> list[bytes]:
        """Events adding ``note`` as text at the client's next content position."""

    @abstractmethod
    def answer(self) -> Body:
        """The streamed answer in the shape of a non-streamed one (for the follow-up)."""

    @abstractmethod
    def next_round(self) -> StreamState:
        """The state for the follow-up's stream, continuing this one for the client."""

    @abstractmethod
    def error_event(self, message: str) -> bytes:
        """An error event the provider's SDK raises on, to end a stream that cannot go on."""

    @staticmethod
    def ends_answer(obj: Body | None) -> bool:
        """Whether the note goes before this event (the answer's closing event)."""
        return obj is None

    # -- the same on every route ------------------------------------------------------------

    def feed(self, event: str) -> list[bytes]:
        """The bytes to send the client now for ``event`` (none while holding)."""
        payload = _data(event)
        try:
            obj = json.loads(payload) if payload and payload != "[DONE]" else None
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's stack
            obj = None
        if not isinstance(obj, dict) or self.unreadable:
            return self._out(event, None)
        try:
            started = self.track(obj)
        except (AttributeError, TypeError, ValueError, KeyError):
            # A chunk that is JSON but not in the provider's shape: a recall call in this
            # answer could not be answered reliably, so what was held is released as it came
            # and the rest is relayed as it comes, as the plain path relays everything.
            self.unreadable = True
            return [*self._release_raw(), (event + "\n\n").encode("utf-8")]
        released: list[bytes] = []
        for key, is_recall in started:
            if is_recall:
                self.recall_keys.add(key)
            else:
                self.others = True
            if not self.decided:
                self.decided = True
                self.holding = is_recall
            elif self.holding and not is_recall:
                released += self.release()  # a mixed answer: it goes on without its recall calls
        return [*released, *self._out(event, obj)]

    def _out(self, event: str, obj: Body | None) -> list[bytes]:
        if self.holding:
            self.held.append((event, obj))
            return []
        if obj is None:
            return [(event + "\n\n").encode("utf-8")]
        return self.emit(event, obj, final=False)

    def release(self, *, note: str | None = None) -> list[bytes]:
        """Everything held, as the client is to get it; holding stops. With ``note``, the
        answer ends here, its recall calls taken out, and ``note`` is its text when the
        client has none."""
        final = note is not None
        held, self.held, self.holding = self.held, [], False
        if not held:
            return []
        out: list[bytes] = []
        noted = not final or self.client_text
        for event, obj in held:
            if not noted and self.ends_answer(obj):
                out += self.note_events(note or "")
                noted = True
            if obj is None:
                out.append((event + "\n\n").encode("utf-8"))
            else:
                out += self.emit(event, obj, final=final)
        if not noted:
            out += self.note_events(note or "")
        return out

    def _release_raw(self) -> list[bytes]:
        held, self.held, self.holding = self.held, [], False
        return [(event + "\n\n").encode("utf-8") for event, _ in held]

    def recall_calls(self) -> list[tuple[str, Any]] | None:
        """``(id, arguments)`` of each call when the held answer calls only the recall tool."""
        if not self.holding or self.unreadable or self.others or not self.recall_keys:
            return None
        return self._calls()

    @abstractmethod
    def _calls(self) -> list[tuple[str, Any]]: ...

    def shifted(self, key: int) -> int:
        """The client's index for this answer's call or block ``key``."""
        before = sum(k < key for k in self.recall_keys) if self.added else 0
        return self.client_offset + key - before

    @property
    def client_offset(self) -> int:
        return self.carried.blocks

    def dropped(self, key: object) -> bool:
        return self.added and key in self.recall_keys

    def _carry(self, **more: Any) -> Carried:
        return Carried(
            round=self.round + 1, blocks=self.client_blocks, text=self.client_text, **more
        )


def sse(obj: Body, name: str | None = None) -> bytes:
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {json.dumps(obj)}\n\n".encode()


class ChatStream(StreamState):
    """OpenAI Chat Completions chunks."""

    def __init__(self, *, added: bool = True, carried: Carried | None = None) -> None:
        super().__init__(added=added, carried=carried)
        self.text = ""
        self.calls: dict[int, dict[str, str]] = {}
        self.last: Body = {}

    @property
    def client_offset(self) -> int:
        return 0  # the client never has tool calls from an earlier round

    def track(self, obj: Body) -> list[tuple[int, bool]]:
        started: list[tuple[int, bool]] = []
        self.last = obj
        for choice in obj.get("choices") or []:
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if not isinstance(delta, dict):
                continue
            if isinstance(delta.get("content"), str):
                self.text += delta["content"]
            for call in delta.get("tool_calls") or []:
                index = int(call.get("index", 0))
                entry = self.calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
                function = call.get("function") or {}
                if call.get("id"):
                    entry["id"] = call["id"]
                if function.get("name"):
                    entry["name"] = function["name"]
                    started.append((index, function["name"] == RECALL_TOOL_NAME))
                entry["arguments"] += function.get("arguments") or ""
        return started

    def emit(self, event: str, obj: Body, *, final: bool) -> list[bytes]:
        changed = False
        for choice in obj.get("choices") or []:
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if not isinstance(delta, dict):
                continue
            if delta.get("content"):
                self.client_text = True
            calls = delta.get("tool_calls")
            if self.added and self.recall_keys and isinstance(calls, list):
                kept = []
                for call in calls:
                    index = int(call.get("index", 0))
                    if self.dropped(index):
                        continue
                    if self.shifted(index) != index:
                        call = {**call, "index": self.shifted(index)}
                    kept.append(call)
                changed = changed or kept != calls
                if kept:
                    delta["tool_calls"] = kept
                else:
                    del delta["tool_calls"]
            if final and not self.others and choice.get("finish_reason") == "tool_calls":
                choice["finish_reason"] = "stop"
                changed = True
        return [sse(obj)] if changed else [(event + "\n\n").encode("utf-8")]

    @staticmethod
    def ends_answer(obj: Body | None) -> bool:
        if obj is None:
            return True  # [DONE]
        choices = obj.get("choices")
        return isinstance(choices, list) and any(
            isinstance(c, dict) and c.get("finish_reason") for c in choices
        )

    def note_events(self, note: str) -> list[bytes]:
        self.client_text = True
        chunk: Body = {
            k: self.last[k] for k in ("id", "object", "created", "model") if k in self.last
        }
        chunk["choices"] = [{"index": 0, "delta": {"content": note}, "finish_reason": None}]
        return [sse(chunk)]

    def _calls(self) -> list[tuple[str, Any]]:
        return [(c["id"], c["arguments"]) for _, c in sorted(self.calls.items())]

    def answer(self) -> Body:
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

    def next_round(self) -> StreamState:
        return ChatStream(added=self.added, carried=self._carry())

    def error_event(self, message: str) -> bytes:
        return sse({"error": {"type": "ctxcompact_proxy_error", "message": message}})
