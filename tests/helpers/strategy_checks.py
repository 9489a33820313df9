"""Invariant checks shared by the strategy tests (test_strategy_*.py).

The invariants themselves are checked by the public :mod:`ctxcompact.testing` functions; this
adds what the project's own tests also want (a dump to compare, content-only rewrites).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ctxcompact import CompactionContext, HeuristicTokenCounter, Message
from ctxcompact.testing import assert_output_invariants

if TYPE_CHECKING:
    from ctxcompact import CompactionStrategy


def ctx_for(
    history: Sequence[Message], *, max_context_size: int = 200_000, reserved: int = 50_000
) -> CompactionContext:
    counter = HeuristicTokenCounter()
    return CompactionContext(
        history=history,
        token_count=counter.count(history),
        max_context_size=max_context_size,
        reserved_context_size=reserved,
        token_counter=counter,
    )


def run(strategy: CompactionStrategy, history: Sequence[Message], **kw: Any) -> Any:
    """``strategy.compact`` on a fresh context, from sync code (hypothesis tests)."""
    return asyncio.run(strategy.compact(ctx_for(history, **kw)))


def dump(history: Sequence[Message]) -> list[dict[str, Any]]:
    return [m.model_dump() for m in history]


def skeleton(m: Message) -> tuple[Any, ...]:
    """Everything but content: what no strategy may change on a kept message."""
    return (m.role, m.tool_call_id, m.tool_calls, m.name, m.model_extra, m.model_fields_set)


def assert_content_only(before: Sequence[Message], after: Sequence[Message]) -> list[int]:
    """Same length and order, only ``content`` of tool messages changed; the changed indices."""
    assert len(after) == len(before)
    changed = []
    for i, (b, a) in enumerate(zip(before, after, strict=True)):
        if a is b:
            continue
        assert b.role == "tool", f"message {i} ({b.role}) was changed"
        assert skeleton(a)[:5] == skeleton(b)[:5], f"message {i}: more than content changed"
        assert a.content != b.content, f"message {i} was copied but not changed"
        changed.append(i)
    return changed


def assert_safe(
    before: Sequence[Message],
    snapshot: list[dict[str, Any]],
    after: Sequence[Message] | None,
    *,
    max_new_messages: int = 0,
) -> None:
    """Input unchanged, and the output keeps every invariant: the public
    :func:`ctxcompact.testing.assert_output_invariants` (order, tool-call integrity, system
    messages kept, ``None`` for no change, no new validator problem)."""
    assert dump(before) == snapshot, "the input history was mutated"
    if after is None:
        return
    assert isinstance(after, list)
    assert_output_invariants(before, after, max_new_messages=max_new_messages)
