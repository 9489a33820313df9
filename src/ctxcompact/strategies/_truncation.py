"""ToolResultTruncation: huge tool results cut to head + tail (seed 003 L1, seed 002 task 4)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._history.messages import Message, TextPart
from ..exceptions import ConfigError
from ..kit import (
    TRUNCATION_MARKER,
    TRUNCATION_RE,
    check_int,
    options_repr,
    truncation_marker,
    with_content,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._contract.protocols import CompactionContext

__all__ = ["TRUNCATION_MARKER", "ToolResultTruncation"]


class ToolResultTruncation:
    """Cut every tool result longer than ``max_chars`` to its head and tail.

    A text of exactly ``max_chars`` characters is left alone; one more and it becomes the first
    ``head_chars`` characters, a marker saying how many characters were cut, and the last
    ``tail_chars``. List content: each text part is cut on its own; images and other parts
    are kept. Use :meth:`truncate_message` on each tool result as it arrives, or the strategy
    on a whole history (only ``role="tool"`` messages change; ``None`` when none did).

    Args:
        max_chars: The longest text kept whole.
        head_chars: Characters kept from the start of a cut text.
        tail_chars: Characters kept from the end of a cut text.

    Raises:
        ConfigError: ``head_chars + tail_chars`` is not below ``max_chars``, or a count is
            negative.

    Example:
        >>> t = ToolResultTruncation(max_chars=50, head_chars=3, tail_chars=3)
        >>> t.truncate_text("a" * 30 + "b" * 30)
        'aaa\\n\\n... [54 characters truncated] ...\\n\\nbbb'
    """

    def __init__(
        self, *, max_chars: int = 50_000, head_chars: int = 2_000, tail_chars: int = 2_000
    ) -> None:
        self.max_chars = check_int("max_chars", max_chars, minimum=1)
        self.head_chars = check_int("head_chars", head_chars)
        self.tail_chars = check_int("tail_chars", tail_chars)
        if head_chars + tail_chars >= max_chars:
            raise ConfigError(
                f"head_chars + tail_chars ({head_chars} + {tail_chars}) must be below "
                f"max_chars ({max_chars}), or a cut text would not be shorter",
                key="head_chars",
            )

    def __repr__(self) -> str:
        return options_repr(self)

    def truncate_text(self, text: str, *, handle: str | None = None) -> str:
        """``text`` cut to head + marker + tail when longer than ``max_chars``, else itself.

        With ``handle`` the marker is the recall form naming it and the line the cut starts
        on (:func:`ctxcompact.kit.truncation_marker`).
        """
        n = len(text)
        if n <= self.max_chars:
            return text
        head, tail = self.head_chars, self.tail_chars
        done = TRUNCATION_RE.match(text, head)
        if done is not None and done.end() + tail == n:
            return text  # already cut by these settings: a second pass changes nothing
        marker = truncation_marker(
            n - head - tail, handle=handle, offset=text.count("\n", 0, head) + 1
        )
        cut = text[:head] + marker + (text[n - tail :] if tail else "")
        # With a small max_chars the marker can outweigh what it replaces: keep the original
        # then, which also makes a second pass over a cut text a no-op.
        return cut if len(cut) < n else text

    def truncate_message(self, message: Message, *, handle: str | None = None) -> Message:
        """``message`` with its text content cut, or the same object when nothing was cut.

        Any role is accepted (the caller decides which messages to pass); ``tool_call_id``,
        tool calls and extras are kept. ``handle``: write the recall form of the marker.
        """
        content = message.content
        if isinstance(content, str):
            cut = self.truncate_text(content, handle=handle)
            return message if cut is content else with_content(message, cut)
        if not content:
            return message
        parts = list(content)
        changed = False
        for k, part in enumerate(parts):
            if isinstance(part, TextPart) and len(part.text) > self.max_chars:
                text = self.truncate_text(part.text, handle=handle)
                if text is not part.text:
                    parts[k] = part.model_copy(update={"text": text})
                    changed = True
        return message.model_copy(update={"content": tuple(parts)}) if changed else message

    def truncate(self, history: Sequence[Message]) -> list[Message] | None:
        """Every tool result of ``history`` cut; ``None`` when none was over ``max_chars``."""
        out: list[Message] | None = None
        for i, message in enumerate(history):
            if message.role != "tool":
                continue
            cut = self.truncate_message(message)
            if cut is not message:
                if out is None:
                    out = list(history)
                out[i] = cut
        return out

    async def compact(self, ctx: CompactionContext) -> list[Message] | None:
        """Cut the oversized tool results of ``ctx.history``; ``None`` when there are none."""
        return self.truncate(ctx.history)
