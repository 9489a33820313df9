"""What the recall forms of the plain markers add, before the controller's store hook writes
them.

A strategy that budgets writes plain markers (``[masked]``, ``[cleared: N chars]``); with
recall on, the controller's store hook rewrites each in a form that names a handle, which
takes more room. :func:`recall_extra` counts that room ahead, so a strategy (the tiered one)
and the controller can weigh a rewrite as it will be sent.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import TYPE_CHECKING

from ._groups import call_names
from ._markers import (
    DEFAULT_RECALL_TEMPLATE,
    INPUT_MARKER,
    RECALL_TOOL_NAME,
    TRUNCATION_RE,
    arguments_handle,
    cleared_marker,
    recall_placeholder,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .._history.messages import Message
    from .._tokens.counters import TokenCounter

__all__ = ["MASKED", "recall_extra"]

MASKED = "[masked]"
"""What an old tool result becomes in the tiered strategy's ``mask`` tier."""


_PLAIN_CLEARED = re.compile(re.escape(INPUT_MARKER).replace(r"\{chars\}", r"(\d+)"))
_STAND_IN_DIGEST = "0" * 8


def recall_extra(
    before: Sequence[Message],
    after: Sequence[Message],
    counter: TokenCounter,
    *,
    template: str = DEFAULT_RECALL_TEMPLATE,
) -> list[int] | None:
    """Tokens each message of ``after`` (tiers' output from ``before``) will take beyond its
    count once the controller's store hook writes the recall forms of the plain markers
    (masked or hidden results, cleared arguments); ``None`` when the two are not aligned (a
    rewrite added or removed messages) or nothing needs it.

    As the hook does: a result replaced by a plain placeholder (``[masked]``, hiding's,
    Schema 1's) becomes the recall placeholder (``template``, the controller's; its
    ``{tool_name}`` the name of the call), or comes back whole when that placeholder is no
    shorter than the result's text; a
    cleared value names ``args:`` and its call's handle. A handle is the call id, with ``@``
    and 8 digits when the id is re-used (then 9 characters more).

    Example:
        >>> from ctxcompact import HeuristicTokenCounter, Message, ToolCall
        >>> read = ToolCall(id="c1", name="Read", arguments="{}")
        >>> before = [Message.assistant(None, tool_calls=[read]), Message.tool("c1", "x" * 400)]
        >>> after = [before[0], Message.tool("c1", "[masked]")]
        >>> extra = recall_extra(before, after, HeuristicTokenCounter())
        >>> extra is not None and extra[0] == 0 and extra[1] > 0
        True
    """
    if len(before) != len(after):
        return None
    ids = [m.tool_call_id for m in after if m.role == "tool" and m.tool_call_id is not None]
    reused = {i for i, n in Counter(ids).items() if n > 1}
    recall_placeholder("x", template=template)  # a bad template raises ConfigError here
    count = counter.count_message
    extra = [0] * len(after)
    names: dict[str, str] = {}  # call id -> tool name, from the newest assistant message
    for i, (old, new) in enumerate(zip(before, after, strict=True)):
        if old.role == "assistant" and old.tool_calls:
            names = call_names(old)
        if new is old:
            continue
        if _placeholder(old, new):
            call_id = new.tool_call_id
            assert call_id is not None
            handle = f"{call_id}@{_STAND_IN_DIGEST}" if call_id in reused else call_id
            if RECALL_TOOL_NAME in new.text and handle in new.text:
                continue  # the strategy's own recall text: the hook leaves it
            name = names.get(call_id) or "unknown"
            text = template.format(tool_call_id=handle, tool_name=name)
            kept = isinstance(old.content, str) and len(text) >= len(old.content)
            extra[i] = count(old if kept else new.replace(content=text)) - count(new)
        elif new.tool_calls:
            extra[i] = _cleared_extra(new, reused, count)
    return extra if any(extra) else None


def _placeholder(old: Message, new: Message) -> bool:
    """Whether ``new`` is ``old``, a tool result, replaced by a plain placeholder (a masked
    or hidden result: the hook writes the recall placeholder in its place)."""
    if new.role != "tool" or old.role != "tool" or new.tool_call_id is None:
        return False
    text = new.content
    if not isinstance(text, str) or text == old.content:
        return False
    # A cut result is not replaced: its marker is given a handle.
    return TRUNCATION_RE.search(text) is None


def _cleared_extra(message: Message, reused: set[str], count: Callable[[Message], int]) -> int:
    """What naming the handle in each plain cleared marker of ``message``'s calls adds."""
    calls = []
    changed = False
    for call in message.tool_calls or ():
        handle = arguments_handle(call.id, _STAND_IN_DIGEST if call.id in reused else None)

        def named(match: re.Match[str], handle: str = handle) -> str:
            # The marker sits in a JSON string: its quotes are escaped there.
            return json.dumps(cleared_marker(int(match.group(1)), handle=handle))[1:-1]

        arguments = _PLAIN_CLEARED.sub(named, call.arguments)
        if arguments == call.arguments:
            calls.append(call)
            continue
        changed = True
        calls.append(call.model_copy(update={"arguments": arguments}))
    if not changed:
        return 0
    return count(message.replace(tool_calls=calls)) - count(message)
