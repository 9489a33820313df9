"""``POST /v1/responses`` bodies <-> a history, for the proxy's rewriter.

A Responses request carries its conversation in ``input`` (a list of items, or one string)
and its system prompt in ``instructions``. The instructions are read as a system message in
front of the items, so counting and the guard see them as they see a Chat Completions system
message, and written back to ``instructions`` unchanged; strategies keep system messages, so
one that changed them has produced what this body cannot say, and the request goes out as it
came (:meth:`~ctxcompact.proxy._rewrite.Rewriter.rewrite_responses`). A string ``input`` is a
single user turn: nothing to compact, forwarded unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._controller.problems import Problem
from .._formats.responses import from_responses, to_responses

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .._history.messages import Message

__all__ = ["responses_codec"]

Body = dict[str, Any]

STRING_INPUT = Problem.fixed("string_input", "input is a string: nothing to compact")
NO_INPUT = Problem.fixed("no_input")


def responses_codec(
    body: Body,
) -> tuple[Callable[[], list[Message]], Callable[[Sequence[Message]], Body]] | Problem:
    """How to read ``body``'s conversation and write a rewritten one back into a copy.

    Returns:
        ``(decode, encode)``, or why the body is forwarded as received.

    Example:
        >>> body = {"instructions": "Be brief.", "input": [{"role": "user", "content": "hi"}]}
        >>> decode, encode = responses_codec(body)
        >>> [m.role for m in decode()], encode(decode())["instructions"]
        (['system', 'user'], 'Be brief.')
    """
    items = body.get("input")
    if isinstance(items, str):
        return STRING_INPUT
    if not isinstance(items, list):
        return NO_INPUT
    instructions = body.get("instructions")
    head: list[dict[str, Any]] = []
    if isinstance(instructions, str):
        head = [{"role": "system", "content": instructions}]

    def decode() -> list[Message]:
        return from_responses([*head, *items])

    def encode(history: Sequence[Message]) -> Body:
        out = to_responses(history)
        if head:
            if not out or out[0] != head[0]:
                # ValueError: the rewriter's "cannot be sent in this format" fail-open path.
                raise ValueError("the instructions were rewritten")
            out = out[1:]
        return {**body, "input": out}

    return decode, encode
