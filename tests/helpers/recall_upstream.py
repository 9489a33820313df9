"""A fake model that pages through everything the proxy removed, on all three routes.

:class:`Pager` answers ``/v1/chat/completions``, ``/v1/messages`` and ``/v1/responses`` (streamed
or not) like the real APIs would, and behaves like the most recall-hungry model there is: while
the request offers ``recall_tool_result`` and a marker in it names a handle it has not read to
the end, it calls the tool for the next page of that handle (``offset`` from the recall
result's "more from line N" note); then it answers in text. It reads the handles passed
opaquely: whatever marker text names ``recall_tool_result("<handle>")`` works.

It also checks what real providers check on a tool round, and refuses with a 400 as they do:

* Anthropic, ``thinking`` on: the assistant turn that carries a ``tool_use`` it issued must
  hold the thinking block it streamed before that call, unchanged (thinking text and
  signature), and start with it;
* Responses: a ``function_call`` item it issued must come back after the ``reasoning`` item
  of the same answer, unchanged (``encrypted_content`` included);
* every route: each recall call it issued is answered by exactly one result.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.helpers.proxy_servers import Received

RECALL = "recall_tool_result"
MARKER = re.compile(r"recall_tool_result\(\s*(?:[A-Za-z_]+\s*=\s*)?[\"']([^\"']+)[\"']")
MORE = re.compile(r"offset=(\d+)")
BUDGET_WORDS = "budget"


def signature(text: str) -> str:
    """What the fake signs a thinking block with (a real provider's is opaque too)."""
    return "sig-" + hashlib.sha256(text.encode()).hexdigest()[:24]


@dataclass
class Progress:
    """Where the model is in reading the handles of one request."""

    handles: list[str]
    next_offset: dict[str, int | None] = field(default_factory=dict)  # None: read to the end
    pages: int = 0
    budget_spent: bool = False

    def next_call(self) -> dict[str, Any] | None:
        for handle in self.handles:
            if handle not in self.next_offset:
                return {"tool_call_id": handle}
            offset = self.next_offset[handle]
            if offset is not None:
                return {"tool_call_id": handle, "offset": offset}
        return None

    def saw(self, arguments: str, result: str) -> None:
        try:
            args = json.loads(arguments)
        except ValueError:
            return
        if not isinstance(args, dict) or not isinstance(args.get("tool_call_id"), str):
            return
        self.pages += 1
        if BUDGET_WORDS in result and "Error" not in result.split("\n", 1)[0]:
            self.budget_spent = True
        last = result.rstrip().rsplit("\n", 1)[-1]
        more = MORE.search(last) if "more" in last else None
        self.next_offset[args["tool_call_id"]] = int(more.group(1)) if more else None


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(_text(v.get("text", "")) if isinstance(v, dict) else "" for v in value)
    return ""


@dataclass
class Pager:
    """The fake upstream (see the module docstring).

    Attributes:
        received: Every request, in order.
        thinking: Emit a thinking block (Anthropic, signed) or a reasoning item (Responses,
            with ``encrypted_content``) before each call and each answer, and check they come
            back.
        stubborn: Keep calling recall after a result says the budget is spent.
        parallel: Recall calls per answer (pages of different handles, or the next ones).
        silent: Answers that call recall carry no text.
        also_call: Answers that call recall also call this other tool (a mixed answer).
        refusals: The 400s it answered, as ``(route, reason)``.
    """

    received: list[Received] = field(default_factory=list)
    thinking: bool = False
    stubborn: bool = False
    parallel: int = 1
    silent: bool = False
    also_call: str | None = None
    refusals: list[tuple[str, str]] = field(default_factory=list)
    issued: dict[str, dict[str, Any]] = field(default_factory=dict)

    # -- reading a request ------------------------------------------------------------------

    def _progress(self, route: str, body: dict[str, Any]) -> tuple[Progress, str | None]:
        """What the request asks the model to read, what it has read, and a refusal reason."""
        calls: dict[str, str] = {}  # call id -> arguments, recall calls only
        results: dict[str, list[str]] = {}
        texts: list[str] = []
        problem: str | None = None
        if route == "chat":
            for m in body.get("messages") or []:
                for c in m.get("tool_calls") or []:
                    if c["function"]["name"] == RECALL:
                        calls[c["id"]] = c["function"]["arguments"]
                if m.get("role") == "tool" and m.get("tool_call_id") in calls:
                    results.setdefault(m["tool_call_id"], []).append(_text(m.get("content")))
                else:
                    texts.append(_text(m.get("content")))
        elif route == "messages":
            texts.append(_text(body.get("system")))
            messages = body.get("messages") or []
            for n, m in enumerate(messages):
                content = m.get("content")
                blocks = content if isinstance(content, list) else []
                if isinstance(content, str):
                    texts.append(content)
                for b in blocks:
                    if b.get("type") == "tool_use" and b.get("name") == RECALL:
                        calls[b["id"]] = json.dumps(b.get("input"))
                        problem = problem or self._check_thinking(b["id"], blocks, body, n)
                    elif b.get("type") == "tool_result" and b.get("tool_use_id") in calls:
                        results.setdefault(b["tool_use_id"], []).append(_text(b.get("content")))
                    elif b.get("type") == "tool_result":
                        texts.append(_text(b.get("content")))
                    elif b.get("type") == "text":
                        texts.append(b["text"])
        else:
            texts.append(_text(body.get("instructions")))
            items = body.get("input") or []
            for n, item in enumerate(items):
                kind = item.get("type")
                if kind == "function_call" and item.get("name") == RECALL:
                    calls[item["call_id"]] = item["arguments"]
                    problem = problem or self._check_reasoning(item, items[:n])
                elif kind == "function_call_output" and item.get("call_id") in calls:
                    results.setdefault(item["call_id"], []).append(_text(item.get("output")))
                elif kind == "function_call_output":
                    texts.append(_text(item.get("output")))
                elif kind == "message" or "role" in item:
                    texts.append(_text(item.get("content")))
        handles = list(dict.fromkeys(MARKER.findall("\n".join(texts))))
        progress = Progress(handles)
        for call_id, arguments in calls.items():
            got = results.get(call_id, [])
            if len(got) != 1:
                problem = problem or f"recall call {call_id} has {len(got)} results"
                continue
            progress.saw(arguments, got[0])
        return progress, problem

    def _check_thinking(
        self, call_id: str, blocks: list[dict[str, Any]], body: dict[str, Any], n: int
    ) -> str | None:
        issued = self.issued.get(call_id)
        if not self.thinking or issued is None or "thinking" not in issued:
            return None
        if not blocks or blocks[0] != issued["thinking"]:
            return (
                f"messages.{n}.content.0: the assistant turn carrying a tool_use must start "
                "with its thinking block, unchanged (thinking and signature)"
            )
        return None

    def _check_reasoning(self, item: dict[str, Any], before: list[dict[str, Any]]) -> str | None:
        issued = self.issued.get(item["call_id"])
        if not self.thinking or issued is None or "reasoning" not in issued:
            return None
        if issued["reasoning"] not in before:
            return (
                f"Item '{item.get('id')}' of type 'function_call' was provided without its "
                f"required 'reasoning' item: '{issued['reasoning']['id']}'."
            )
        return None

    # -- deciding the answer ----------------------------------------------------------------

    def _decide(self, route: str, body: dict[str, Any]) -> tuple[list[tuple[str, str, str]], str]:
        """``(call id, tool name, arguments JSON)`` of the calls to make (none: answer in
        text), and the answer's text."""
        n = len(self.received)
        offered = any(
            (t.get("function") or t).get("name") == RECALL for t in body.get("tools") or []
        )
        progress, _ = self._progress(route, body)
        if not offered or (progress.budget_spent and not self.stubborn):
            return [], f"read {progress.pages} pages of {len(progress.handles)} results"
        calls: list[tuple[str, str, str]] = []
        for k in range(self.parallel):
            nxt = progress.next_call()
            if nxt is None:
                if self.stubborn and progress.budget_spent and not calls:
                    nxt = {"tool_call_id": progress.handles[0] if progress.handles else "x"}
                else:
                    break
            calls.append((f"rc_{n}_{k}", RECALL, json.dumps(nxt)))
            # a second parallel call reads the next handle
            progress.next_offset[nxt["tool_call_id"]] = None
        if not calls:
            return [], f"read {progress.pages} pages of {len(progress.handles)} results"
        if self.also_call:
            calls.append((f"oc_{n}", self.also_call, "{}"))
        return calls, "" if self.silent else "Let me read more."

    # -- the app ----------------------------------------------------------------------------

    def app(self) -> Starlette:
        async def handle(request: Request) -> Response:
            item = Received(
                request.method, request.url.path, dict(request.headers), await request.body()
            )
            self.received.append(item)
            route = {"/v1/chat/completions": "chat", "/v1/messages": "messages"}.get(
                request.url.path, "responses"
            )
            body = item.json()
            _, problem = self._progress(route, body)
            if problem is not None:
                self.refusals.append((route, problem))
                error = {"type": "invalid_request_error", "message": problem}
                return JSONResponse({"type": "error", "error": error}, status_code=400)
            calls, text = self._decide(route, body)
            stream = body.get("stream") is True
            if route == "chat":
                events = self._chat(calls, text)
            elif route == "messages":
                events = self._messages(calls, text)
            else:
                events = self._responses(calls, text)
            if not stream:
                return JSONResponse(
                    events[-1][1] if route != "chat" else self._chat_whole(calls, text)
                )
            return StreamingResponse(
                _sse(events, named=route != "chat"), media_type="text/event-stream"
            )

        routes = ["/v1/chat/completions", "/v1/messages", "/v1/responses"]
        return Starlette(routes=[Route(r, handle, methods=["POST"]) for r in routes])

    # -- Chat Completions -------------------------------------------------------------------

    def _chat_whole(self, calls: list[tuple[str, str, str]], text: str) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            message["tool_calls"] = [
                {"id": i, "type": "function", "function": {"name": name, "arguments": a}}
                for i, name, a in calls
            ]
        return {
            "id": "chatcmpl-p",
            "object": "chat.completion",
            "created": 0,
            "model": "pager",
            "choices": [
                {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }

    def _chat(self, calls: list[tuple[str, str, str]], text: str) -> list[tuple[str, Any]]:
        def chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[str, Any]:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            data = {
                "id": "chatcmpl-p",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": "pager",
                "choices": [choice],
            }
            return "", data

        events = [chunk({"role": "assistant", "content": text[:4]})]
        if text[4:]:
            events.append(chunk({"content": text[4:]}))
        for k, (i, name, args) in enumerate(calls):
            half = len(args) // 2
            function = {"name": name, "arguments": args[:half]}
            events.append(
                chunk(
                    {
                        "tool_calls": [
                            {"index": k, "id": i, "type": "function", "function": function}
                        ]
                    }
                )
            )
            events.append(
                chunk({"tool_calls": [{"index": k, "function": {"arguments": args[half:]}}]})
            )
        events.append(chunk({}, "tool_calls" if calls else "stop"))
        events.append(("", "[DONE]"))
        return events

    # -- Messages ---------------------------------------------------------------------------

    def _messages(self, calls: list[tuple[str, str, str]], text: str) -> list[tuple[str, Any]]:
        n = len(self.received)
        content: list[dict[str, Any]] = []
        events: list[tuple[str, Any]] = []
        message = {
            "id": f"msg_{n}",
            "type": "message",
            "role": "assistant",
            "model": "pager",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }
        events.append(("message_start", {"type": "message_start", "message": message}))

        def block(
            start: dict[str, Any], deltas: list[dict[str, Any]], whole: dict[str, Any]
        ) -> None:
            index = len(content)
            content.append(whole)
            events.append(
                (
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": start},
                )
            )
            for delta in deltas:
                events.append(
                    (
                        "content_block_delta",
                        {"type": "content_block_delta", "index": index, "delta": delta},
                    )
                )
            events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))

        thought = None
        if self.thinking:
            words = f"I should look at page {n}."
            thought = {"type": "thinking", "thinking": words, "signature": signature(words)}
            block(
                {"type": "thinking", "thinking": "", "signature": ""},
                [
                    {"type": "thinking_delta", "thinking": words[:7]},
                    {"type": "thinking_delta", "thinking": words[7:]},
                    {"type": "signature_delta", "signature": thought["signature"]},
                ],
                thought,
            )
        if text:
            block(
                {"type": "text", "text": ""},
                [
                    {"type": "text_delta", "text": text[:4]},
                    {"type": "text_delta", "text": text[4:]},
                ],
                {"type": "text", "text": text},
            )
        for i, name, args in calls:
            half = len(args) // 2
            block(
                {"type": "tool_use", "id": i, "name": name, "input": {}},
                [
                    {"type": "input_json_delta", "partial_json": args[:half]},
                    {"type": "input_json_delta", "partial_json": args[half:]},
                ],
                {"type": "tool_use", "id": i, "name": name, "input": json.loads(args)},
            )
            if thought is not None:
                self.issued[i] = {"thinking": thought}
        stop = "tool_use" if calls else "end_turn"
        delta = {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}}
        events.append(("message_delta", {**delta, "usage": {"output_tokens": 5}}))
        events.append(("message_stop", {"type": "message_stop"}))
        whole = {**message, "content": content, "stop_reason": stop}
        whole["usage"] = {"input_tokens": 1, "output_tokens": 5}
        events.append(("", whole))  # not sent in a stream: the non-streamed answer
        return events

    # -- Responses --------------------------------------------------------------------------

    def _responses(self, calls: list[tuple[str, str, str]], text: str) -> list[tuple[str, Any]]:
        n = len(self.received)
        rid = f"resp_{n}"
        output: list[dict[str, Any]] = []
        events: list[dict[str, Any]] = []

        def response(status: str, items: list[dict[str, Any]]) -> dict[str, Any]:
            return {
                "id": rid,
                "object": "response",
                "created_at": 0,
                "model": "pager",
                "status": status,
                "output": items,
                "parallel_tool_calls": True,
                "tool_choice": "auto",
                "tools": [],
                "usage": {
                    "input_tokens": 1,
                    "output_tokens": 1,
                    "total_tokens": 2,
                    "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens_details": {"reasoning_tokens": 0},
                },
            }

        events.append({"type": "response.created", "response": response("in_progress", [])})
        events.append({"type": "response.in_progress", "response": response("in_progress", [])})
        reasoning = None
        if self.thinking:
            reasoning = {
                "type": "reasoning",
                "id": f"rs_{n}",
                "summary": [{"type": "summary_text", "text": f"page {n}"}],
                "encrypted_content": f"gAAAA-{n}-" + signature(str(n)),
            }
            index = len(output)
            output.append(reasoning)
            events.append(
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**reasoning, "summary": [], "encrypted_content": None},
                }
            )
            events.append(
                {"type": "response.output_item.done", "output_index": index, "item": reasoning}
            )
        if text:
            message = {
                "type": "message",
                "id": f"msg_{n}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
            index = len(output)
            output.append(message)
            part = {"type": "output_text", "text": "", "annotations": []}
            events += [
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**message, "status": "in_progress", "content": []},
                },
                {
                    "type": "response.content_part.added",
                    "output_index": index,
                    "item_id": message["id"],
                    "content_index": 0,
                    "part": part,
                },
                {
                    "type": "response.output_text.delta",
                    "output_index": index,
                    "item_id": message["id"],
                    "content_index": 0,
                    "delta": text[:4],
                    "logprobs": [],
                },
                {
                    "type": "response.output_text.delta",
                    "output_index": index,
                    "item_id": message["id"],
                    "content_index": 0,
                    "delta": text[4:],
                    "logprobs": [],
                },
                {
                    "type": "response.output_text.done",
                    "output_index": index,
                    "item_id": message["id"],
                    "content_index": 0,
                    "text": text,
                    "logprobs": [],
                },
                {
                    "type": "response.content_part.done",
                    "output_index": index,
                    "item_id": message["id"],
                    "content_index": 0,
                    "part": message["content"][0],
                },
                {"type": "response.output_item.done", "output_index": index, "item": message},
            ]
        for i, name, args in calls:
            item = {
                "type": "function_call",
                "id": f"fc_{i}",
                "call_id": i,
                "name": name,
                "arguments": args,
                "status": "completed",
            }
            index = len(output)
            output.append(item)
            half = len(args) // 2
            events += [
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**item, "arguments": "", "status": "in_progress"},
                },
                {
                    "type": "response.function_call_arguments.delta",
                    "output_index": index,
                    "item_id": item["id"],
                    "delta": args[:half],
                },
                {
                    "type": "response.function_call_arguments.delta",
                    "output_index": index,
                    "item_id": item["id"],
                    "delta": args[half:],
                },
                {
                    "type": "response.function_call_arguments.done",
                    "output_index": index,
                    "item_id": item["id"],
                    "arguments": args,
                },
                {"type": "response.output_item.done", "output_index": index, "item": item},
            ]
            if reasoning is not None:
                self.issued[i] = {"reasoning": reasoning}
        final = response("completed", output)
        events.append({"type": "response.completed", "response": final})
        for k, event in enumerate(events):
            event["sequence_number"] = k
        out: list[tuple[str, Any]] = [(e["type"], e) for e in events]
        out.append(("", final))
        return out


async def _sse(events: Iterable[tuple[str, Any]], *, named: bool) -> AsyncIterator[bytes]:
    items = list(events)
    if named:
        items = items[:-1]  # the last entry is the non-streamed answer
    for name, data in items:
        payload = data if isinstance(data, str) else json.dumps(data)
        head = f"event: {name}\n" if named and name else ""
        yield f"{head}data: {payload}\n\n".encode()
