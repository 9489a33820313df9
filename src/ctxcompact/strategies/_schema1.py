"""Schema 1 observation masking (seeds 000 and 001), as a strategy and as the seed's function.

Old tool results, counted in *tool turns* (assistant messages with ``tool_calls``), get a short
French placeholder as content; errors, the newest ``window_turns`` turns, the last K results of
each tool, orphans and non-string content are left alone. Turns are positional: a result
belongs to the assistant message right before its run of tool messages, never to another
message that happens to re-use its id.

The one deviation from seed 001 to the letter: a result that costs no more tokens than its
rendered placeholder (under the context's token counter; the heuristic for
:func:`mask_old_tool_results`) is left alone, since masking it would make the prompt bigger.
So masking never makes a result bigger in tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from .._history.groups import tool_groups
from .._history.messages import Message, ToolCall, construct
from .._tokens.counters import HeuristicTokenCounter, TokenCounter
from ..exceptions import ConfigError
from ..kit import (
    SCHEMA1_FIELDS,
    SCHEMA1_PLACEHOLDER,
    SCHEMA1_SEED_PLACEHOLDER,
    UNKNOWN_TOOL_NAME,
    PlaceholderCost,
    batched_boundary,
    call_names,
    check_int,
    looks_like_error,
    options_repr,
    placeholder_pattern,
    render_placeholder,
    rewrite_contents,
    validate_template,
)
from ._clear_inputs import ArgumentClearer, clearer_for

if TYPE_CHECKING:
    from .._contract.protocols import CompactionContext

__all__ = ["ChatMessage", "MaskPolicy", "Schema1Masking", "mask_old_tool_results"]

_M = TypeVar("_M", Message, ToolCall)

ChatMessage = dict[str, object]
"""One raw OpenAI chat message, as seed 001 types it."""


@dataclass(frozen=True)
class MaskPolicy:
    """Seed 001's policy, with the seed's defaults (``enabled`` is off, as in its TOML).

    Attributes:
        enabled: Off means :func:`mask_old_tool_results` returns its input list itself.
        window_turns: How many of the newest tool turns keep their results (``<= 0``: off).
        keep_errors: Leave results that look like errors (see the README's list) unmasked.
        keep_last_k_per_tool: Keep the last K results of each tool name even outside the
            window (``None`` or 0: off).
        placeholder_template: Uses ``{tool_call_id}``, ``{tool_name}``, ``{original_chars}``;
            the seed's French text by default (:data:`SCHEMA1_SEED_PLACEHOLDER`).
        batch_turns: Not in the seed: move the boundary by multiples of this many turns.
        clear_at_least: Not in the seed: move the boundary only when it frees this many tokens.

    Example:
        >>> MaskPolicy(enabled=True, window_turns=2).keep_errors
        True
    """

    enabled: bool = False
    window_turns: int = 8
    keep_errors: bool = True
    keep_last_k_per_tool: int | None = None
    placeholder_template: str = SCHEMA1_SEED_PLACEHOLDER
    batch_turns: int = 0
    clear_at_least: int = 0


def _mask_plan(
    history: Sequence[Message],
    policy: MaskPolicy,
    *,
    flagged: Callable[[int], bool],
    cost: PlaceholderCost,
    clearer: ArgumentClearer | None = None,
    counter: TokenCounter | None = None,
) -> tuple[list[tuple[int, str]], list[tuple[int, Message]]]:
    """``(index, placeholder)`` for every tool result to mask, oldest first, and
    ``(index, copy)`` for every call message whose arguments ``clearer`` clears: the calls
    of the masked turns, except those whose result is kept (an error, the last K of a tool,
    list content)."""
    groups = tool_groups(history)
    boundary = len(groups) - policy.window_turns
    if boundary <= 0:
        return [], []
    template = policy.placeholder_template
    masked_already = placeholder_pattern(template).fullmatch
    names = [call_names(history[g.call_index]) for g in groups]

    keep: set[int] = set()
    k = policy.keep_last_k_per_tool or 0
    if k > 0:
        seen: dict[str, int] = {}
        for g_index in range(len(groups) - 1, -1, -1):
            for i in reversed(groups[g_index].result_indices):
                name = names[g_index].get(history[i].tool_call_id or "") or UNKNOWN_TOOL_NAME
                n = seen.get(name, 0)
                if n < k:
                    keep.add(i)
                    seen[name] = n + 1

    # Exact counts only serve clear_at_least; otherwise cost.shrinks counts as little as it can.
    count_all = policy.clear_at_least > 0

    def maskable(g_index: int, kept: set[str]) -> list[tuple[int, str, int]]:
        """``(index, placeholder, tokens freed)`` for each result of the group to mask; the
        ids of the results kept for a reason of their own are added to ``kept``."""
        out = []
        for i in groups[g_index].result_indices:
            msg = history[i]
            content = msg.content
            call_id = msg.tool_call_id
            if not call_id:
                continue
            if i in keep or not isinstance(content, str):
                kept.add(call_id)
                continue
            if masked_already(content):
                continue
            name = names[g_index].get(call_id) or UNKNOWN_TOOL_NAME
            text = render_placeholder(
                template, tool_call_id=call_id, tool_name=name, chars=len(content)
            )
            if count_all:
                saved = cost.saved(msg, text, cost.tokens(text))
                if saved <= 0:
                    continue  # masking it would make the prompt bigger, not smaller
            elif cost.shrinks(msg, text):
                saved = 1  # positive; the amount only matters to clear_at_least
            elif clearer is None:
                continue
            else:
                saved = 0  # too short to mask; its call is cleared unless it is an error
            if policy.keep_errors and (flagged(i) or looks_like_error(content)):
                kept.add(call_id)
                continue
            if saved > 0:
                out.append((i, text, saved))
        return out

    kept_ids: list[set[str]] = [set() for _ in range(boundary)]
    per_group = [maskable(g_index, kept_ids[g_index]) for g_index in range(boundary)]
    cleared: list[Message | None] = [None] * boundary
    freed_inputs = [0] * boundary
    if clearer is not None:
        for g_index in range(boundary):
            call_message = history[groups[g_index].call_index]
            new = clearer.message(call_message, kept_ids[g_index])[0]
            cleared[g_index] = new
            if new is not None and count_all and counter is not None:
                freed_inputs[g_index] = counter.count_message(call_message) - counter.count_message(
                    new
                )
    if policy.batch_turns > 0 or policy.clear_at_least > 0:
        boundary = batched_boundary(
            boundary,
            batch_turns=policy.batch_turns,
            clear_at_least=policy.clear_at_least,
            unit_tokens=lambda g: sum(saved for _, _, saved in per_group[g]) + freed_inputs[g],
        )
    return [(i, text) for group in per_group[:boundary] for i, text, _ in group], [
        (groups[g].call_index, new) for g, new in enumerate(cleared[:boundary]) if new is not None
    ]


def _bare(cls: type[_M], fields: dict[str, object]) -> _M:
    """A model instance from ``fields`` with no validation (``model_construct``, faster)."""
    return construct(cls, fields, set(fields), None)


def _skeleton(raw: object) -> Message:
    """The structure of one raw dict as a :class:`Message`, without validation (fast)."""
    if not isinstance(raw, Mapping):
        # Not a message at all: an opaque entry that ends any run of tool results.
        return _bare(
            Message,
            {
                "role": "user",
                "content": None,
                "tool_calls": None,
                "tool_call_id": None,
                "name": None,
            },
        )
    calls = raw.get("tool_calls")
    tool_calls: tuple[ToolCall, ...] | None = None
    if isinstance(calls, list):
        built = []
        for tc in calls:
            if isinstance(tc, Mapping) and isinstance(tc.get("id"), str):
                fn = tc.get("function")
                name = fn.get("name") if isinstance(fn, Mapping) else None
                built.append(
                    _bare(
                        ToolCall,
                        {
                            "id": tc["id"],
                            "name": name if isinstance(name, str) else "",
                            "arguments": "",
                            "type": "function",
                        },
                    )
                )
        tool_calls = tuple(built) or None
    content = raw.get("content")
    call_id = raw.get("tool_call_id")
    return _bare(
        Message,
        {
            "role": raw.get("role"),
            # List content stays an opaque, non-string value: Schema 1 never masks it.
            "content": content if isinstance(content, str) or content is None else (),
            "tool_calls": tool_calls,
            "tool_call_id": call_id if isinstance(call_id, str) else None,
            "name": None,
        },
    )


def mask_old_tool_results(messages: list[ChatMessage], policy: MaskPolicy) -> list[ChatMessage]:
    """Seed 001's function: mask old tool results in a list of raw OpenAI message dicts.

    Disabled (or ``window_turns <= 0``), it returns ``messages`` itself. Otherwise a new list
    holding the same dict objects, except masked tool messages, which are new dicts with only
    ``content`` changed. The input list and its dicts are never modified. Unlike the seed to
    the letter, a result costing no more tokens (:class:`~ctxcompact.HeuristicTokenCounter`)
    than its rendered placeholder is kept as it is (masking it would lengthen the prompt);
    see :class:`Schema1Masking`.

    Example:
        >>> def turn(i):
        ...     fn = {"name": "ls", "arguments": "{}"}
        ...     return {"role": "assistant", "content": None,
        ...             "tool_calls": [{"id": i, "type": "function", "function": fn}]}
        >>> def result(i, text):
        ...     return {"role": "tool", "tool_call_id": i, "content": text}
        >>> msgs = [turn("c1"), result("c1", "a.py " * 40), turn("c2"), result("c2", "b.py"),
        ...         turn("c3"), result("c3", "c.py")]
        >>> out = mask_old_tool_results(msgs, MaskPolicy(enabled=True, window_turns=1))
        >>> out[1]["content"]
        '[Observation masquée: résultat d’outil ancien (tool_call_id=c1, outil=ls, chars=200)]'
        >>> out[3]["content"]  # shorter than its placeholder: kept
        'b.py'
    """
    if not policy.enabled or policy.window_turns <= 0:
        return messages
    validate_template(policy.placeholder_template, SCHEMA1_FIELDS, key="placeholder_template")
    skeleton = [_skeleton(m) for m in messages]
    counter = HeuristicTokenCounter()

    def flagged(i: int) -> bool:
        raw = messages[i]
        return isinstance(raw, Mapping) and raw.get("is_error") is True

    plan, _ = _mask_plan(skeleton, policy, flagged=flagged, cost=PlaceholderCost(counter))
    out = list(messages)
    for i, text in plan:
        out[i] = {**messages[i], "content": text}
    return out


class Schema1Masking:
    """Schema 1 observation masking as a strategy (choosing it is what turns masking on).

    Old tool results outside the newest ``window_turns`` tool turns get a short placeholder
    (``{tool_call_id}``, ``{tool_name}``, ``{original_chars}``). Kept whole: results of the
    window, results that look like errors (``keep_errors``), the last ``keep_last_k_per_tool``
    results of each tool, orphan results, non-string (list) content, results already masked,
    and results that cost no more tokens than their rendered placeholder under the context's
    token counter, which masking would only lengthen (the one deviation from seed 001). Only
    ``content`` changes; a second run on the output returns ``None``.

    Args:
        window_turns: Newest tool turns (assistant messages with calls) left untouched
            (0: none are masked).
        keep_errors: Keep results that look like errors unmasked.
        keep_last_k_per_tool: Keep the last K results of each tool name (0: off).
        placeholder_template: Format string over the three fields above; default
            ``[Observation masked: old tool result (tool_call_id=..., tool=..., chars=...)]``,
            seed 001's own French text is the preset ``SCHEMA1_SEED_PLACEHOLDER``.
        batch_turns: When > 0, move the masked boundary by multiples of this many turns; 0
            moves it at every turn, as seed 001 does. ``None`` (the default): by
            ``window_turns``, so the prompt prefix changes once per window's worth of turns,
            not at every call (between ``window_turns`` and twice as many newest turns stay
            whole).
        clear_at_least: When > 0, move it only where it frees a further multiple of this many
            tokens (each result's tokens minus its placeholder's, counted from the oldest
            turn), so the cached prompt prefix stays put.
        clear_tool_inputs: Also clear the calls of the masked turns (``True``: every tool;
            a list: those tool names; ``False``: off, the default): each string value longer
            than ``clear_inputs_min_chars`` in their arguments becomes ``[cleared: N chars]``,
            as :class:`~ctxcompact.strategies.ToolInputClearing` does. A call whose result is
            kept (an error, the last K of its tool, list content) keeps its arguments; the
            arguments stay a JSON object with the same keys; ids and names never change;
            the window's turns are untouched.
        clear_inputs_min_chars: Only longer string values are cleared.
        always: Mask a history that fits the window too (``token_count +
            reserved_context_size < max_context_size``). Off by default: masking what fits
            is optional, and a per-request transform, which sees each request afresh, cannot
            tell whether the cache it breaks would be paid back (see the README's "defaults
            that never lose money"). As the controller's strategy it runs at the threshold,
            where the history does not fit, so this only matters with ``max_messages`` or
            ``trigger_ratio``.

    Raises:
        ConfigError: A negative count, a template with unknown fields, or
            ``clear_tool_inputs`` neither a boolean nor a list of names.

    Example:
        >>> strategy = Schema1Masking(window_turns=4, keep_last_k_per_tool=1)
        >>> strategy.policy.window_turns
        4
    """

    def __init__(
        self,
        *,
        window_turns: int = 8,
        keep_errors: bool = True,
        keep_last_k_per_tool: int = 0,
        placeholder_template: str = SCHEMA1_PLACEHOLDER,
        batch_turns: int | None = None,
        clear_at_least: int = 0,
        clear_tool_inputs: bool | Sequence[str] = False,
        clear_inputs_min_chars: int = 200,
        always: bool = False,
    ) -> None:
        if not isinstance(placeholder_template, str):
            raise ConfigError(
                f"must be a string, got {placeholder_template!r}", key="placeholder_template"
            )
        validate_template(placeholder_template, SCHEMA1_FIELDS, key="placeholder_template")
        self.policy = MaskPolicy(
            enabled=True,
            window_turns=check_int("window_turns", window_turns),
            keep_errors=bool(keep_errors),
            keep_last_k_per_tool=check_int("keep_last_k_per_tool", keep_last_k_per_tool or 0),
            placeholder_template=placeholder_template,
            batch_turns=check_int(
                "batch_turns", window_turns if batch_turns is None else batch_turns
            ),
            clear_at_least=check_int("clear_at_least", clear_at_least),
        )
        self.clear_tool_inputs = clear_tool_inputs
        self._clearer = clearer_for(clear_tool_inputs, clear_inputs_min_chars)
        self.clear_inputs_min_chars = clear_inputs_min_chars
        self.always = bool(always)
        self.batch_turns = batch_turns  # None: by window_turns (policy.batch_turns holds it)

    @classmethod
    def from_policy(cls, policy: MaskPolicy) -> Schema1Masking:
        """The strategy for an enabled seed :class:`MaskPolicy`.

        Raises:
            ConfigError: The policy is disabled: leave the strategy out instead.
        """
        if not policy.enabled:
            raise ConfigError(
                "the policy is disabled (enabled=False); a strategy always masks, so leave "
                "Schema1Masking out to turn masking off",
                key="enabled",
            )
        return cls(
            window_turns=max(policy.window_turns, 0),
            keep_errors=policy.keep_errors,
            keep_last_k_per_tool=policy.keep_last_k_per_tool or 0,
            placeholder_template=policy.placeholder_template,
            batch_turns=policy.batch_turns,
            clear_at_least=policy.clear_at_least,
            always=True,  # the seed masks every request
        )

    def __repr__(self) -> str:
        return options_repr(self, self.policy)  # most options live on the policy

    async def compact(self, ctx: CompactionContext) -> list[Message] | None:
        """Mask old tool results of ``ctx.history``; ``None`` when nothing was masked, or when
        the history fits the window and ``always`` is off."""
        fits = ctx.token_count + ctx.reserved_context_size < ctx.max_context_size
        if fits and not self.always:
            return None
        return self.mask(ctx.history, token_counter=ctx.token_counter)

    def mask(
        self, history: Sequence[Message], *, token_counter: TokenCounter | None = None
    ) -> list[Message] | None:
        """The synchronous core of :meth:`compact` (the heuristic when ``token_counter`` is
        ``None``)."""
        policy = self.policy
        if policy.window_turns <= 0:
            return None
        counter = token_counter or HeuristicTokenCounter()
        cost = PlaceholderCost(counter)

        def flagged(i: int) -> bool:
            # The flag lives in the extras; most results have none, so skip the property.
            message = history[i]
            return bool(message.__pydantic_extra__) and message.is_error

        plan, cleared = _mask_plan(
            history, policy, flagged=flagged, cost=cost, clearer=self._clearer, counter=counter
        )
        if not plan and not cleared:
            return None
        out = rewrite_contents(history, plan)
        for i, message in cleared:
            out[i] = message
        return out
