"""A recall round in each route's shape: Chat Completions, Messages and Responses.

For a non-streamed answer, each :class:`RecallShape` says which recall calls it makes
(:meth:`~RecallShape.recall_calls`: only when it calls nothing else), appends the model's turn
and the recall results to the request as that API expects them
(:meth:`~RecallShape.follow_up`), and takes recall calls out of an answer the client is to
receive (:meth:`~RecallShape.strip`). The model's own turn goes back verbatim: Anthropic
``thinking`` and ``redacted_thinking`` blocks keep their signatures, Responses ``reasoning``
items their ``encrypted_content``, as both providers require on a tool round. Recall
arguments and results are passed as they are: the proxy never reads the handle.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from typing import Any

from ..store._recall import RECALL_TOOL_NAME, recall_tool_spec_anthropic, recall_tool_spec_openai

__all__ = [
    "SHAPES",
    "Calls",
    "ChatShape",
    "MessagesShape",
    "RecallShape",
    "ResponsesShape",
    "budget_spent",
    "kept_back",
    "no_room",
    "recall_tool_spec_responses",
]

Body = dict[str, Any]
Calls = list[tuple[str, Any]]
"""``(call id, arguments)`` of each recall call, arguments as the model wrote them."""


def budget_spent(rounds: int) -> str:
    """The recall result that answers a call past the bound: the model is asked to go on."""
    return (
        f"Not run: this request's recall budget is spent ({rounds} rounds, the proxy's "
        "max_recall_rounds). Go on with what you have: answer, or use your other tools; "
        f"{RECALL_TOOL_NAME} works again on your next turn."
    )


def no_room(left: int) -> str:
    """The recall result that answers a call when the window has no room left for a page."""
    return (
        f"Not run: the context window has no room left for more recalled text in this "
        f"request ({left} tokens left). Go on with what you have: answer, or use your other "
        f"tools; {RECALL_TOOL_NAME} works again on your next turn."
    )


def kept_back(rounds: int) -> str:
    """The text an answer gets when its recall calls were taken out and nothing was left."""
    return (
        f"[ctxcompact proxy: the model kept calling {RECALL_TOOL_NAME} after this request's "
        f"recall budget ({rounds} rounds) was spent; those calls were not passed on]"
    )


def recall_tool_spec_responses() -> Body:
    """The recall tool as a Responses ``tools`` entry. ``strict`` is off: its optional
    ``offset``, ``limit`` and ``pattern`` are not what strict mode accepts (every property
    required, no defaults).

    Example:
        >>> sorted(recall_tool_spec_responses())
        ['description', 'name', 'parameters', 'strict', 'type']
    """
    function = recall_tool_spec_openai()["function"]
    return {"type": "function", **function, "strict": False}


def tool_name(tool: object) -> object:
    """A ``tools`` entry's name, in any of the three shapes."""
    if not isinstance(tool, dict):
        return None
    function = tool.get("function")
    return function.get("name") if isinstance(function, dict) else tool.get("name")


class RecallShape(ABC):
    """One route's shapes."""

    provider = ""

    @abstractmethod
    def spec(self) -> Body:
        """The recall tool's ``tools`` entry on this route."""

    @abstractmethod
    def recall_calls(self, answer: Body) -> Calls | None:
        """The recall calls, when the answer calls the recall tool and nothing else."""

    @abstractmethod
    def has_recall(self, answer: Body) -> bool:
        """Whether any recall call is in the answer (then the client must not get it)."""

    @abstractmethod
    def follow_up(self, body: Body, answer: Body, results: list[tuple[str, str]]) -> Body:
        """``body`` with the model's turn and the recall results appended."""

    @abstractmethod
    def strip(self, answer: Body, note: str) -> Body:
        """``answer`` without its recall calls; ``note`` as its text when none is left."""


class ChatShape(RecallShape):
    """``/v1/chat/completions``: ``tool_calls`` on the message, ``tool`` messages back."""

    provider = "openai"

    def spec(self) -> Body:
        return recall_tool_spec_openai()

    def recall_calls(self, answer: Body) -> Calls | None:
        choices = answer.get("choices")
        if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
            return None
        message = choices[0].get("message")
        raw = message.get("tool_calls") if isinstance(message, dict) else None
        calls: Calls = []
        for call in raw if isinstance(raw, list) else []:
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or function.get("name") != RECALL_TOOL_NAME:
                return None
            if not isinstance(call.get("id"), str):
                return None
            calls.append((call["id"], function.get("arguments")))
        return calls or None

    def has_recall(self, answer: Body) -> bool:
        return any(_is_recall_call(c) for m in _messages(answer) for c in _tool_calls(m))

    def follow_up(self, body: Body, answer: Body, results: list[tuple[str, str]]) -> Body:
        message = answer["choices"][0]["message"]
        assistant = {"role": "assistant", "content": message.get("content")}
        assistant["tool_calls"] = message["tool_calls"]
        tools = [{"role": "tool", "tool_call_id": i, "content": text} for i, text in results]
        return {**body, "messages": [*(body.get("messages") or []), assistant, *tools]}

    def strip(self, answer: Body, note: str) -> Body:
        out = copy.deepcopy(answer)
        for choice in out.get("choices") or []:
            message = choice.get("message") if isinstance(choice, dict) else None
            if not isinstance(message, dict):
                continue
            kept = [c for c in _tool_calls(message) if not _is_recall_call(c)]
            if kept:
                message["tool_calls"] = kept
                continue
            message.pop("tool_calls", None)
            if choice.get("finish_reason") == "tool_calls":
                choice["finish_reason"] = "stop"
            if not message.get("content"):
                message["content"] = note
        return out


def _messages(answer: Body) -> list[dict[str, Any]]:
    choices = answer.get("choices")
    return [
        c["message"]
        for c in (choices if isinstance(choices, list) else [])
        if isinstance(c, dict) and isinstance(c.get("message"), dict)
    ]


def _tool_calls(message: dict[str, Any]) -> list[Any]:
    calls = message.get("tool_calls")
    return calls if isinstance(calls, list) else []


def _is_recall_call(call: object) -> bool:
    function = call.get("function") if isinstance(call, dict) else None
    return isinstance(function, dict) and function.get("name") == RECALL_TOOL_NAME


_MODEL_OWN = frozenset({"text", "thinking", "redacted_thinking"})
"""Anthropic blocks that are the model's own words, not calls: they may go with recall calls."""


class MessagesShape(RecallShape):
    """``/v1/messages``: ``tool_use`` blocks, then a user turn of ``tool_result`` blocks."""

    provider = "anthropic"

    def spec(self) -> Body:
        return recall_tool_spec_anthropic()

    def recall_calls(self, answer: Body) -> Calls | None:
        blocks = answer.get("content")
        calls: Calls = []
        for block in blocks if isinstance(blocks, list) else []:
            if not isinstance(block, dict):
                return None
            if block.get("type") in _MODEL_OWN:
                continue
            if not _is_recall_use(block) or not isinstance(block.get("id"), str):
                return None  # another tool, or a block the proxy does not know
            calls.append((block["id"], block.get("input")))
        return calls or None

    def has_recall(self, answer: Body) -> bool:
        blocks = answer.get("content")
        return any(_is_recall_use(b) for b in (blocks if isinstance(blocks, list) else []))

    def follow_up(self, body: Body, answer: Body, results: list[tuple[str, str]]) -> Body:
        # The content as it came: thinking blocks and their signatures unchanged.
        assistant = {"role": "assistant", "content": answer["content"]}
        blocks = [{"type": "tool_result", "tool_use_id": i, "content": t} for i, t in results]
        messages = [*(body.get("messages") or []), assistant, {"role": "user", "content": blocks}]
        return {**body, "messages": messages}

    def strip(self, answer: Body, note: str) -> Body:
        out = copy.deepcopy(answer)
        blocks = out.get("content")
        if not isinstance(blocks, list):
            return out
        kept = [b for b in blocks if not _is_recall_use(b)]
        if not any(isinstance(b, dict) and b.get("type") == "tool_use" for b in kept):
            if out.get("stop_reason") == "tool_use":
                out["stop_reason"] = "end_turn"
            if not any(isinstance(b, dict) and b.get("type") == "text" for b in kept):
                kept.append({"type": "text", "text": note})
        out["content"] = kept
        return out


def _is_recall_use(block: object) -> bool:
    return (
        isinstance(block, dict)
        and block.get("type") == "tool_use"
        and block.get("name") == RECALL_TOOL_NAME
    )


_RESPONSES_OWN = frozenset({"reasoning", "message"})
"""Responses output items that are the model's own words: they may go with recall calls."""


class ResponsesShape(RecallShape):
    """``/v1/responses``: ``function_call`` items, answered by ``function_call_output`` items
    paired by ``call_id``."""

    provider = "responses"

    def spec(self) -> Body:
        return recall_tool_spec_responses()

    def recall_calls(self, answer: Body) -> Calls | None:
        items = answer.get("output")
        calls: Calls = []
        for item in items if isinstance(items, list) else []:
            if not isinstance(item, dict):
                return None
            if item.get("type") in _RESPONSES_OWN:
                continue
            if not _is_recall_item(item) or not isinstance(item.get("call_id"), str):
                return None
            calls.append((item["call_id"], item.get("arguments")))
        return calls or None

    def has_recall(self, answer: Body) -> bool:
        items = answer.get("output")
        return any(_is_recall_item(i) for i in (items if isinstance(items, list) else []))

    def follow_up(self, body: Body, answer: Body, results: list[tuple[str, str]]) -> Body:
        # The answer's items as they came (reasoning with its encrypted_content first), then
        # one output per call: what the API's own guide does with response.output.
        outputs = [{"type": "function_call_output", "call_id": i, "output": t} for i, t in results]
        return {**body, "input": [*body["input"], *answer["output"], *outputs]}

    def strip(self, answer: Body, note: str) -> Body:
        out = copy.deepcopy(answer)
        items = out.get("output")
        if not isinstance(items, list):
            return out
        kept = [i for i in items if not _is_recall_item(i)]
        if not any(isinstance(i, dict) and i.get("type") != "reasoning" for i in kept):
            kept.append(note_item(note, str(out.get("id", ""))))
        out["output"] = kept
        return out


def _is_recall_item(item: object) -> bool:
    return (
        isinstance(item, dict)
        and item.get("type") == "function_call"
        and item.get("name") == RECALL_TOOL_NAME
    )


def note_item(note: str, response_id: str) -> Body:
    """A Responses ``message`` output item holding ``note``."""
    return {
        "type": "message",
        "id": f"msg_ctxcompact_{response_id}",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": note, "annotations": []}],
    }


SHAPES: dict[str, RecallShape] = {
    "openai": ChatShape(),
    "anthropic": MessagesShape(),
    "responses": ResponsesShape(),
}
"""The shape of each route, by the app's provider name."""
