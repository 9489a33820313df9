"""Invariant checks shared by the strategy tests (test_strategy_*.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from ctxcompact import CompactionContext, HeuristicTokenCounter, Message, check_history
from ctxcompact._contract import CompactionStrategy


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


def kinds(history: Sequence[Message]) -> set[str]:
    return {p.kind for p in check_history(history)}


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


def assert_subsequence(before: Sequence[Message], after: Sequence[Message]) -> None:
    """``after`` keeps ``before``'s order: each message is an input one (or its cut copy:
    a tool result, or the task a guard cut or noted its dropped steps on)."""
    j = 0
    for a in after:
        while j < len(before) and not (
            before[j] is a
            or (before[j].role in ("tool", "user") and skeleton(before[j]) == skeleton(a))
        ):
            j += 1
        assert j < len(before), f"{a!r} is not in the input, or is out of order"
        j += 1


def assert_safe(
    before: Sequence[Message], snapshot: list[dict[str, Any]], after: Sequence[Message] | None
) -> None:
    """Input unchanged; no validator problem the input did not have; order kept."""
    assert dump(before) == snapshot, "the input history was mutated"
    if after is None:
        return
    assert isinstance(after, list)
    new = kinds(after) - kinds(before)
    assert not new, f"new problems {new}: {check_history(after)}"
    assert_subsequence(before, after)
