"""SupersededReadMasking: hide tool results that a later call of the same tool made stale."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

# Only public ctxcompact names: the package's top level and the kit for strategy authors.
from ctxcompact import HeuristicTokenCounter, Message, tool_groups
from ctxcompact.exceptions import ConfigError
from ctxcompact.kit import (
    batched_boundary,
    check_int,
    is_error_result,
    validate_template,
    with_content,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ctxcompact import CompactionContext, TokenCounter

__all__ = ["DEFAULT_PLACEHOLDER", "DEFAULT_TOOLS", "PLACEHOLDER_FIELDS", "SupersededReadMasking"]

DEFAULT_TOOLS: Mapping[str, str] = {
    "read_file": "path",
    "Read": "file_path",
    "view_file": "path",
}
"""Tool name -> the argument that says what was read (common agents' file readers)."""

DEFAULT_PLACEHOLDER = (
    "[superseded: this {tool} result for {key}={value} was replaced by a later {tool} call "
    "with the same {key}; see the newer result]"
)
"""Replacement text; ``{tool}``, ``{key}`` and ``{value}`` are filled in."""

PLACEHOLDER_FIELDS = frozenset({"tool", "key", "value"})
"""The fields a placeholder may use."""


@dataclass(frozen=True, slots=True)
class _Read:
    group: int
    tool: str
    key: str
    value: str  # canonical JSON of the key argument
    others: Mapping[str, Any]  # the call's other arguments
    results: tuple[int, ...]  # indices of its result messages
    failed: bool


@dataclass(kw_only=True, eq=False)
class SupersededReadMasking:
    """Masks an older tool result when a later call of the same tool reads the same thing.

    An agent that reads ``a.py``, edits it and reads it again carries two copies of the file;
    the older one is stale. This strategy replaces the older result's content with a short
    placeholder, keeping its ``tool_call_id`` (tool calls stay paired, order is kept, the
    input is never mutated). A later call supersedes an earlier one when it is in a later
    tool-call turn, has the same tool name and key argument, succeeded, and its other
    arguments are either the same as the earlier call's or absent (a full read covers a
    partial one; a partial read covers only the same part).

    Error results are kept (the model may need to know what failed), and a result is only
    superseded by a later result that is not an error.

    Cache awareness, with the built-in maskers' batching rule
    (:func:`ctxcompact.kit.batched_boundary`): with ``batch_turns=N`` only calls in the first
    ``N * k`` tool-call turns can supersede, so the rewritten prefix changes once every ``N``
    turns instead of at every call; with ``clear_at_least=T`` that boundary moves only when
    the tokens freed, counted from the oldest turn, cross a multiple of ``T`` (so at least
    ``T`` tokens per move). Both are computed from the history alone, so the strategy is
    stateless.

    Tokens are counted with the context's counter (``ctx.token_counter``), the one the
    controller counts with, so "saves tokens" means the same thing to both.

    The options are the dataclass's fields, keyword-only: the constructor's parameters, the
    ``[compaction.params]`` keys, and the repr, from one definition each. They are checked
    when the strategy is built.

    Raises:
        ConfigError: A bad option, named by its key.

    Example:
        >>> s = SupersededReadMasking(tools={"read_file": "path"}, batch_turns=4)
        >>> s.tools, s.batch_turns, s.keep_errors
        ({'read_file': 'path'}, 4, True)
        >>> SupersededReadMasking(batch_turns=-1)
        Traceback (most recent call last):
        ...
        ctxcompact.exceptions.ConfigError: key 'batch_turns': must be >= 0, got -1
    """

    tools: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_TOOLS))
    """Tool name -> the argument that says what was read (:data:`DEFAULT_TOOLS`)."""

    placeholder: str = DEFAULT_PLACEHOLDER
    """The replacement text; ``{tool}``, ``{key}`` and ``{value}`` are filled in."""

    keep_errors: bool = True
    """Never mask a result that looks like an error."""

    batch_turns: int = 0
    """Move the superseding horizon in steps of this many tool-call turns (0: any step)."""

    clear_at_least: int = 0
    """Move the masked prefix only in steps freeing at least this many tokens (0: always)."""

    def __post_init__(self) -> None:
        if not isinstance(self.tools, Mapping):
            raise ConfigError(
                f"must map tool names to argument names, got {self.tools!r}", key="tools"
            )
        self.tools = dict(self.tools)
        for name, key in self.tools.items():
            if not isinstance(name, str) or not isinstance(key, str) or not key:
                raise ConfigError(
                    f"must map tool names to argument names, got {name!r}: {key!r}", key="tools"
                )
        validate_template(self.placeholder, PLACEHOLDER_FIELDS, key="placeholder")
        check_int("batch_turns", self.batch_turns)
        check_int("clear_at_least", self.clear_at_least)

    def _reads(self, history: Sequence[Message]) -> tuple[list[_Read], int]:
        groups = tool_groups(history)
        reads: list[_Read] = []
        for gi, group in enumerate(groups):
            by_id: dict[str, list[int]] = {}
            for ri in group.result_indices:
                by_id.setdefault(history[ri].tool_call_id or "", []).append(ri)
            for call in history[group.call_index].tool_calls or ():
                key = self.tools.get(call.name)
                if key is None:
                    continue
                try:
                    args = json.loads(call.arguments)
                except (TypeError, ValueError):
                    continue  # unparsable arguments: cannot tell what was read, keep it
                if not isinstance(args, dict) or key not in args:
                    continue
                results = tuple(by_id.get(call.id, ()))
                reads.append(
                    _Read(
                        group=gi,
                        tool=call.name,
                        key=key,
                        value=json.dumps(args[key], sort_keys=True, ensure_ascii=False),
                        others={k: v for k, v in args.items() if k != key},
                        results=results,
                        failed=any(is_error_result(history[i]) for i in results),
                    )
                )
        return reads, len(groups)

    def superseded(
        self, history: Sequence[Message], *, token_counter: TokenCounter | None = None
    ) -> dict[int, Message]:
        """Index of each result to mask -> the masked copy (only those that save tokens).

        ``token_counter`` counts what a mask saves (:meth:`compact` passes
        ``ctx.token_counter``; ``None`` is the heuristic, the context's default).
        """
        count = (token_counter or HeuristicTokenCounter()).count_message
        reads, n_groups = self._reads(history)
        # Walk from the newest call back, remembering the successful later calls per key, to
        # find for each read the earliest later turn that supersedes it.
        later: dict[tuple[str, str], list[tuple[int, Mapping[str, Any]]]] = {}
        candidates: list[tuple[int, int, Message]] = []  # (superseding turn, index, masked)
        for read in reversed(reads):
            slot = (read.tool, read.value)
            by = [
                group
                for group, others in later.get(slot, ())
                if group > read.group and (not others or others == read.others)
            ]
            if by and not (self.keep_errors and read.failed):
                text = self.placeholder.format(
                    tool=read.tool, key=read.key, value=read.value.strip('"')
                )
                for index in read.results:
                    masked = with_content(history[index], text)
                    candidates.append((min(by), index, masked))
            if read.results and not read.failed:
                later.setdefault(slot, []).append((read.group, read.others))
        # Per superseding turn, the tokens its masks would free (results shorter than the
        # placeholder are kept: masking them would cost tokens).
        freed = [0] * n_groups
        useful: list[tuple[int, int, Message]] = []
        for turn, index, masked in candidates:
            saved = count(history[index]) - count(masked)
            if saved > 0:
                freed[turn] += saved
                useful.append((turn, index, masked))
        horizon = batched_boundary(
            n_groups,
            batch_turns=self.batch_turns,
            clear_at_least=self.clear_at_least,
            unit_tokens=freed.__getitem__,
        )
        return {index: masked for turn, index, masked in useful if turn < horizon}

    async def compact(self, ctx: CompactionContext) -> Sequence[Message] | None:
        """The history with superseded results masked, or ``None`` when there are none."""
        masks = self.superseded(ctx.history, token_counter=ctx.token_counter)
        if not masks:
            return None
        out = list(ctx.history)
        for index, masked in masks.items():
            out[index] = masked
        return out
