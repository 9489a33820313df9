"""Responses-format test data: the Codex rollout fixtures, the Chat Completions traces rewritten
as Responses items (with synthetic encrypted reasoning), and an item-level validity check that
does not go through ctxcompact's own converter."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "responses"
ROLLOUTS = sorted(p.stem for p in DATA_DIR.glob("*.jsonl"))


def load_rollout(name: str) -> list[dict[str, Any]]:
    """The ``response_item`` payloads of a Codex rollout file, in order."""
    items = []
    for line in (DATA_DIR / f"{name}.jsonl").read_text("utf-8").splitlines():
        record = json.loads(line)
        if record["type"] == "response_item":
            items.append(record["payload"])
    return items


def _parts(content: Any, text_type: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": text_type, "text": content}]
    out = []
    for part in content or ():
        if part.get("type") == "text":
            out.append({"type": text_type, "text": part["text"]})
        elif part.get("type") == "image_url":
            out.append({"type": "input_image", "image_url": part["image_url"]["url"]})
    return out


def chat_to_items(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A Chat Completions conversation as the items a Responses agent would have sent.

    Each assistant turn gets a reasoning item with opaque ``encrypted_content`` first, and
    items carry ids and statuses as the API returns them.
    """
    items: list[dict[str, Any]] = []
    for i, msg in enumerate(messages):
        role = msg["role"]
        if role in ("system", "developer", "user"):
            items.append(
                {
                    "type": "message",
                    "role": "developer" if role == "system" else role,
                    "content": _parts(msg.get("content"), "input_text"),
                }
            )
        elif role == "assistant":
            items.append(
                {
                    "type": "reasoning",
                    "id": f"rs_{i}",
                    "summary": [{"type": "summary_text", "text": f"step {i}"}],
                    "encrypted_content": f"gAAAAAB{i:06d}opaque+/=",
                }
            )
            text = _parts(msg.get("content"), "output_text")
            if any(p.get("text") for p in text):
                items.append(
                    {
                        "type": "message",
                        "id": f"msg_{i}",
                        "role": "assistant",
                        "status": "completed",
                        "content": [{**p, "annotations": []} for p in text],
                    }
                )
            for j, call in enumerate(msg.get("tool_calls") or ()):
                items.append(
                    {
                        "type": "function_call",
                        "id": f"fc_{i}_{j}",
                        "call_id": call["id"],
                        "name": call["function"]["name"],
                        "arguments": call["function"]["arguments"],
                        "status": "completed",
                    }
                )
        elif role == "tool":
            content = msg.get("content")
            output = content if isinstance(content, str) else json.dumps(content)
            items.append(
                {"type": "function_call_output", "call_id": msg["tool_call_id"], "output": output}
            )
    return items


_CALLS = {"function_call": "function_call_output", "custom_tool_call": "custom_tool_call_output"}
_OUTPUTS = {v: k for k, v in _CALLS.items()}


def item_problems(items: Sequence[Mapping[str, Any]]) -> list[str]:
    """What the Responses API would reject in ``items``, checked on the items themselves.

    * an output whose ``call_id`` answers no earlier unanswered call of its kind;
    * a call never answered, unless it is in the final model turn (pending);
    * a reasoning item not followed by another item of the same model turn (the API demands
      the item a reasoning item preceded);
    * anything that is not an object with a ``type`` or a ``role``.
    """
    problems = []
    open_calls: dict[tuple[str, str], list[int]] = {}
    for k, item in enumerate(items):
        if not isinstance(item, Mapping) or not ("type" in item or "role" in item):
            problems.append(f"item {k}: not an item")
            continue
        kind = item.get("type")
        if kind in _CALLS:
            key = (kind, item["call_id"])
            open_calls.setdefault(key, []).append(k)
        elif kind in _OUTPUTS:
            key = (_OUTPUTS[kind], item["call_id"])
            if not open_calls.get(key):
                problems.append(f"item {k}: output for {item['call_id']!r} answers no call")
            else:
                open_calls[key].pop(0)
        elif kind == "reasoning":
            after = items[k + 1] if k + 1 < len(items) else None
            follows = after is not None and (
                after.get("type") in ("reasoning", *_CALLS)
                or after.get("role") == "assistant"
                or str(after.get("type", "")).endswith("_call")
            )
            if not follows:
                problems.append(f"item {k}: reasoning item without the item it preceded")
    last_turn = max(
        (k for k, it in enumerate(items) if it.get("type") in _OUTPUTS or it.get("role") == "user"),
        default=-1,
    )
    for (_, call_id), where in open_calls.items():
        problems.extend(
            f"item {k}: call {call_id!r} never answered" for k in where if k < last_turn
        )
    return sorted(problems, key=lambda p: int(p.split(":")[0].split()[1]))
