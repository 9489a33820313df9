"""A deterministic stand-in summarizer: a tiny OpenAI-compatible server on 127.0.0.1.

It answers every ``POST /v1/chat/completions`` with a short summary of a fixed format, made
from the request alone (so two runs of a replay get the same summaries), and records every
request. Replays and tests use it where a real model would make the figures depend on the
model (and cost minutes per summary on a CPU):

* in tests: ``with serve_in_thread(StandIn().app()) as url: ...`` (``url + "/v1"``);
* by hand, for ``ctxcompact replay --llm-base-url http://127.0.0.1:8099/v1 --llm-model stand-in``::

      python -m tests.helpers.standin_summarizer --port 8099 [--delay 0.5]

The summary names how many transcript items and characters it stands for, whether the request
carried an earlier summary (``[earlier summary]``, how LLMSummary shows one), the first line of
the newest item, and a hash of the whole request, e.g.::

    Stand-in summary 3f2a9c1d: 12 items, 18,204 characters, merging an earlier summary.
    Newest: [tool result of read_file (id call_7)]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

__all__ = ["StandIn", "main", "summary_of"]

EARLIER = "[earlier summary]"


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def summary_of(body: dict[str, Any]) -> str:
    """The stand-in summary of a chat request ``body`` (deterministic)."""
    messages = body.get("messages") or []
    prompt = "\n".join(_text(m.get("content")) for m in messages if isinstance(m, dict))
    transcript = prompt.split("\n\n---\n\n", 1)[0]
    items = [item for item in transcript.split("\n\n[") if item.strip()]
    digest = hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:8]
    merging = ", merging an earlier summary" if EARLIER in transcript else ""
    newest = items[-1].splitlines()[0] if items else ""
    newest = newest if newest.startswith("[") else f"[{newest}"
    return (
        f"Stand-in summary {digest}: {len(items)} items, {len(transcript):,} characters"
        f"{merging}.\nNewest: {newest[:80]}"
    )


@dataclass
class StandIn:
    """The server's state: what it received, and how long it takes to answer.

    Attributes:
        delay: Seconds each answer waits (a model's latency), 0 by default.
        requests: Every chat request body received, in order.
        model: The model name it reports.
    """

    delay: float = 0.0
    requests: list[dict[str, Any]] = field(default_factory=list)
    model: str = "stand-in"

    def app(self) -> Starlette:
        """The ASGI app (``/v1/chat/completions``, ``/v1/models``)."""

        async def chat(request: Request) -> JSONResponse:
            body = await request.json()
            self.requests.append(body)
            if self.delay:
                await asyncio.sleep(self.delay)
            text = summary_of(body)
            prompt_chars = len(json.dumps(body.get("messages", [])))
            return JSONResponse(
                {
                    "id": f"chatcmpl-standin-{len(self.requests)}",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body.get("model", self.model),
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": text},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {
                        "prompt_tokens": prompt_chars // 4,
                        "completion_tokens": len(text) // 4,
                        "total_tokens": prompt_chars // 4 + len(text) // 4,
                    },
                }
            )

        async def models(request: Request) -> JSONResponse:
            return JSONResponse({"object": "list", "data": [{"id": self.model, "object": "model"}]})

        return Starlette(
            routes=[
                Route("/v1/chat/completions", chat, methods=["POST"]),
                Route("/v1/models", models, methods=["GET"]),
            ]
        )


def main() -> None:
    """Serve the stand-in on 127.0.0.1 until interrupted."""
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8099)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds per answer")
    args = parser.parse_args()
    uvicorn.run(StandIn(delay=args.delay).app(), host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
