"""Token accounting: the ``TokenCounter`` protocol and a fast offline heuristic."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from ._messages import ImagePart, Message, TextPart

__all__ = ["HeuristicTokenCounter", "TokenCounter"]


@runtime_checkable
class TokenCounter(Protocol):
    """Counts the tokens a list of messages costs in a prompt."""

    def count(self, messages: Iterable[Message]) -> int:
        """Tokens of all ``messages``."""
        ...

    def count_message(self, message: Message) -> int:
        """Tokens of one message, its per-message overhead included."""
        ...


class HeuristicTokenCounter:
    """A fast estimate with no tokenizer: text length with a safety margin.

    Example:
        >>> HeuristicTokenCounter().count([Message.user("hello world")])
        7
    """

    def __init__(
        self,
        *,
        chars_per_token: float = 3.5,
        per_message: int = 4,
        image_tokens: int = 1600,
    ) -> None:
        self.chars_per_token = chars_per_token
        self.per_message = per_message
        self.image_tokens = image_tokens

    def count(self, messages: Iterable[Message]) -> int:
        return sum(self.count_message(m) for m in messages)

    def count_message(self, message: Message) -> int:
        total = self.per_message + self.count_text(message.name or "")
        content = message.content
        if isinstance(content, str):
            total += self.count_text(content)
        elif content:
            for part in content:
                if isinstance(part, TextPart):
                    total += self.count_text(part.text)
                elif isinstance(part, ImagePart):
                    total += self.image_tokens
                else:
                    total += self.count_text(json.dumps(part.model_dump(), ensure_ascii=False))
        for call in message.tool_calls or ():
            total += self.count_text(call.name) + self.count_text(call.arguments)
        return total

    def count_text(self, text: str) -> int:
        """Tokens of a string: ASCII by ``chars_per_token``, other characters one each."""
        if not text:
            return 0
        if text.isascii():
            return math.ceil(len(text) / self.chars_per_token)
        non_ascii = sum(1 for ch in text if ord(ch) > 127)
        return math.ceil((len(text) - non_ascii) / self.chars_per_token) + non_ascii
