"""A streamed Responses answer through a recall round (see :mod:`._recall_stream`).

The client's SDK builds one response from the events and checks it: the lifecycle events must
name one response id, output indices must not repeat, and every item it saw added must be done
or in the final ``response.completed``. So a follow-up's stream continues the client's: its
``response.created`` and ``response.in_progress`` are left out, its output indices continue
the client's, its ``sequence_number`` goes on from the client's last, its lifecycle events
carry the first response's id, and its ``response.completed`` lists every item the client got
(the earlier rounds' included, the recall calls left out). The follow-up request gets the
answer's items as their ``response.output_item.done`` events gave them (a reasoning item's
``encrypted_content`` is complete only there).
"""

from __future__ import annotations

from typing import Any

from ..store._recall import RECALL_TOOL_NAME
from ._recall_formats import note_item
from ._recall_stream import Carried, StreamState, sse

__all__ = ["ResponsesStream"]

Body = dict[str, Any]

_OWN = frozenset({"reasoning", "message"})
_OPENING = frozenset({"response.created", "response.in_progress", "response.queued"})
_CLOSING = frozenset({"response.completed", "response.incomplete", "response.failed"})


class ResponsesStream(StreamState):
    """OpenAI Responses events."""

    def __init__(self, *, added: bool = True, carried: Carried | None = None) -> None:
        super().__init__(added=added, carried=carried)
        self.response_id = self.carried.response_id
        self.sequence = self.carried.sequence
        self.items: dict[int, Body] = {}  # this answer's items, from output_item.done
        self.names: dict[int, Body] = {}  # this answer's call items, from output_item.added
        self.final: Body | None = None
        self.client_items: list[Body] = list(self.carried.items)
        self.renumber = bool(self.round)

    def track(self, obj: Body) -> list[tuple[int, bool]]:
        kind = obj.get("type")
        if kind == "response.created" and self.response_id is None:
            self.response_id = str(obj["response"]["id"])
        elif kind == "response.output_item.added":
            item, index = obj["item"], obj["output_index"]
            if not isinstance(index, int) or not isinstance(item, dict):
                raise TypeError("output item")
            if item.get("type") in _OWN:
                return []
            self.names[index] = item
            is_recall = item.get("type") == "function_call" and item.get("name") == RECALL_TOOL_NAME
            return [(index, is_recall)]
        elif kind == "response.output_item.done":
            index = obj["output_index"]
            if not isinstance(index, int) or not isinstance(obj["item"], dict):
                raise TypeError("output item")
            self.items[index] = obj["item"]
        elif kind in _CLOSING:
            response = obj["response"]
            if not isinstance(response, dict):
                raise TypeError("response")
            self.final = response
        return []

    def emit(self, event: str, obj: Body, *, final: bool) -> list[bytes]:
        kind = obj.get("type")
        if self.round and kind in _OPENING:
            return []  # the client's stream already opened its response
        changed = False
        index = obj.get("output_index")
        if isinstance(index, int):
            if self.dropped(index):
                return []
            if self.shifted(index) != index:
                obj["output_index"] = self.shifted(index)
                changed = True
            if kind == "response.output_item.added":
                self.client_blocks += 1
            elif kind == "response.output_item.done" and isinstance(obj.get("item"), dict):
                self.client_items.append(obj["item"])
            elif kind == "response.output_text.delta" and obj.get("delta"):
                self.client_text = True
        response = obj.get("response")
        if kind in _CLOSING and isinstance(response, dict):
            changed = self._close(response) or changed
        if self.renumber:
            obj["sequence_number"] = self.sequence
            changed = True
        if isinstance(obj.get("sequence_number"), int):
            self.sequence = obj["sequence_number"] + 1
        # An event the upstream left unnumbered goes out as it came, until a round renumbers.
        if not changed:
            return [(event + "\n\n").encode("utf-8")]
        return [sse(obj, str(kind))]

    def _close(self, response: Body) -> bool:
        """The closing event's response as the client is to see it; whether it changed."""
        output = response.get("output")
        if not isinstance(output, list):
            return False
        if not self.round and not (self.added and self.recall_keys) and not self.renumber:
            return False
        if self.response_id is not None:
            response["id"] = self.response_id
        # Every item the client got, in its order: the earlier rounds' and this one's.
        response["output"] = list(self.client_items)
        return True

    @staticmethod
    def ends_answer(obj: Body | None) -> bool:
        return obj is None or obj.get("type") in _CLOSING

    def note_events(self, note: str) -> list[bytes]:
        self.renumber = True  # the events after the note follow its numbers
        index = self.client_blocks
        self.client_blocks += 1
        self.client_text = True
        item = note_item(note, self.response_id or "")
        self.client_items.append(item)
        part = item["content"][0]
        item_id = item["id"]
        at = {"output_index": index, "item_id": item_id, "content_index": 0}
        events: list[Body] = [
            {
                "type": "response.output_item.added",
                "output_index": index,
                "item": {**item, "status": "in_progress", "content": []},
            },
            {"type": "response.content_part.added", **at, "part": {**part, "text": ""}},
            {"type": "response.output_text.delta", **at, "delta": note, "logprobs": []},
            {"type": "response.output_text.done", **at, "text": note, "logprobs": []},
            {"type": "response.content_part.done", **at, "part": part},
            {"type": "response.output_item.done", "output_index": index, "item": item},
        ]
        out = []
        for event in events:
            event["sequence_number"] = self.sequence
            self.sequence += 1
            out.append(sse(event, str(event["type"])))
        return out

    def _calls(self) -> list[tuple[str, Any]]:
        calls = []
        for key in sorted(self.recall_keys):
            item = self.items.get(key) or self.names[key]
            calls.append((str(item.get("call_id")), item.get("arguments")))
        return calls

    def answer(self) -> Body:
        if self.items:
            return {"output": [item for _, item in sorted(self.items.items())]}
        output = self.final.get("output") if self.final is not None else None
        return {"output": output if isinstance(output, list) else []}

    def next_round(self) -> StreamState:
        carried = self._carry(
            items=self.client_items, response_id=self.response_id, sequence=self.sequence
        )
        return ResponsesStream(added=self.added, carried=carried)

    def error_event(self, message: str) -> bytes:
        data = {
            "type": "error",
            "code": "ctxcompact_proxy_error",
            "message": message,
            "param": None,
            "sequence_number": self.sequence,
            # The SDK raises on an event whose data has an "error" object.
            "error": {"type": "ctxcompact_proxy_error", "message": message},
        }
        return sse(data, "error")
