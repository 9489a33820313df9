"""The kit for strategy authors: the helpers the built-in strategies are made of, public.

A third-party strategy (a class with ``async compact(ctx)``, see
:class:`~ctxcompact.CompactionStrategy`) imports these instead of ctxcompact's private
modules, which may change in any release; the built-ins import them from here too, so a
helper behaves the same in both. What it offers:

- Tool-call groups, the unit to keep whole: :class:`ToolGroup`, :func:`tool_groups`,
  :func:`old_groups_end`, :func:`group_results`, :func:`call_names`.
- Cache-friendly batching of a masking boundary: :func:`batched_boundary`.
- Does a tool result look like an error? :func:`is_error_result`, :func:`looks_like_error`,
  :func:`error_reason`, :func:`clear_error_cache`.
- Placeholders for hidden results: :func:`validate_template`, :func:`render_placeholder`,
  :func:`placeholder_pattern`, :data:`HIDDEN_PLACEHOLDER`, :data:`KLIP13_PLACEHOLDER`,
  :data:`SCHEMA1_PLACEHOLDER`, :data:`SCHEMA1_SEED_PLACEHOLDER`, :data:`SCHEMA1_FIELDS`,
  :data:`UNKNOWN_TOOL_NAME`.
- What a placeholder saves, in the context's tokens: :class:`PlaceholderCost`,
  :data:`MAX_CHARS_PER_TOKEN`, :data:`HEURISTIC_TOKENS_PER_EXTRA_BYTE`.
- What names things in a text (identifiers, paths, numbers): :func:`distinctive_tokens`.
- Markers that name what a removal took and the handle to recall it with (module
  :mod:`ctxcompact.kit._markers` documents the handle scheme): :func:`result_handle`,
  :func:`arguments_handle`, :func:`message_handle`, :func:`range_handle`,
  :func:`recall_placeholder`, :func:`truncation_marker`, :func:`cleared_marker`,
  :func:`drop_note`, :func:`range_note`, :func:`strip_notes`, :func:`note_ranges`,
  :func:`without_markers` (a text without what markers add: handles, sizes, notes),
  :data:`RECALL_TOOL_NAME`, :data:`DEFAULT_RECALL_TEMPLATE`,
  :data:`LEGACY_RECALL_TEMPLATE`, :data:`TRUNCATION_MARKER`,
  :data:`INPUT_MARKER`, :data:`DROP_MARKER`, :data:`MAX_NOTE_RESULTS`, the handles' prefixes
  (:data:`ARGUMENTS_PREFIX`, :data:`RANGE_PREFIX`, :data:`STAND_IN_RANGE`), and the regexes
  reading them back
  (:data:`TRUNCATION_RE`, :data:`CLEARED_RE`, :data:`DROP_NOTE_RE`, :data:`RANGE_NOTE_RE`).
  A strategy writes the plain forms, or the recall forms when ``ctx.recall`` says the
  controller keeps the originals; one that writes the plain forms and budgets counts what the
  controller's recall forms will add with :func:`recall_extra`.
- Pins, the messages never to drop: :func:`pinned_indices`, :class:`PinRules` (at most
  :data:`MAX_PIN_PATTERNS` patterns of :data:`MAX_PIN_PATTERN_CHARS` characters).
- Changed copies, fast: :func:`with_content`, :func:`rewrite_contents`.
- Options checked like the built-ins' and a repr derived from them: :func:`check_int`,
  :func:`options_repr`.

To test a strategy, :func:`ctxcompact.testing.assert_strategy_invariants` runs it and raises
:class:`AssertionError` naming any invariant it breaks. Count tokens with
``ctx.token_counter``: it is the controller's own counter, so a strategy counts as the
controller does.

Example:
    >>> from ctxcompact import Message, ToolCall
    >>> from ctxcompact.kit import old_groups_end, tool_groups, with_content
    >>> ls = ToolCall(id="c1", name="ls", arguments="{}")
    >>> history = [Message.user("go"), Message.assistant(None, tool_calls=[ls]),
    ...            Message.tool("c1", "a.py b.py"), Message.assistant("done")]
    >>> [(g.call_index, g.result_indices) for g in tool_groups(history)]
    [(1, (2,))]
    >>> hidden = [*history[:2], with_content(history[2], "[hidden]"), history[3]]
    >>> hidden[2].text, hidden[2].tool_call_id, history[2].text
    ('[hidden]', 'c1', 'a.py b.py')
"""

from __future__ import annotations

from .._history.groups import ToolGroup, tool_groups
from .._history.messages import with_content
from ._errors import clear_error_cache, error_reason, is_error_result, looks_like_error
from ._groups import batched_boundary, call_names, group_results, old_groups_end, rewrite_contents
from ._markers import (
    ARGUMENTS_PREFIX,
    CLEARED_RE,
    DEFAULT_RECALL_TEMPLATE,
    DROP_MARKER,
    DROP_NOTE_RE,
    INPUT_MARKER,
    LEGACY_RECALL_TEMPLATE,
    MAX_NOTE_RESULTS,
    RANGE_NOTE_RE,
    RANGE_PREFIX,
    RECALL_TOOL_NAME,
    STAND_IN_RANGE,
    TRUNCATION_MARKER,
    TRUNCATION_RE,
    arguments_handle,
    cleared_marker,
    drop_note,
    message_handle,
    note_ranges,
    range_handle,
    range_note,
    recall_placeholder,
    result_handle,
    strip_notes,
    truncation_marker,
    without_markers,
)
from ._options import check_int, options_repr
from ._pins import MAX_PIN_PATTERN_CHARS, MAX_PIN_PATTERNS, PinRules, pinned_indices
from ._placeholders import (
    HEURISTIC_TOKENS_PER_EXTRA_BYTE,
    HIDDEN_PLACEHOLDER,
    KLIP13_PLACEHOLDER,
    MAX_CHARS_PER_TOKEN,
    SCHEMA1_FIELDS,
    SCHEMA1_PLACEHOLDER,
    SCHEMA1_SEED_PLACEHOLDER,
    UNKNOWN_TOOL_NAME,
    PlaceholderCost,
    placeholder_pattern,
    render_placeholder,
    validate_template,
)
from ._recall_costs import recall_extra
from ._terms import distinctive_tokens

__all__ = [
    "ARGUMENTS_PREFIX",
    "CLEARED_RE",
    "DEFAULT_RECALL_TEMPLATE",
    "DROP_MARKER",
    "DROP_NOTE_RE",
    "HEURISTIC_TOKENS_PER_EXTRA_BYTE",
    "HIDDEN_PLACEHOLDER",
    "INPUT_MARKER",
    "KLIP13_PLACEHOLDER",
    "LEGACY_RECALL_TEMPLATE",
    "MAX_CHARS_PER_TOKEN",
    "MAX_NOTE_RESULTS",
    "MAX_PIN_PATTERNS",
    "MAX_PIN_PATTERN_CHARS",
    "RANGE_NOTE_RE",
    "RANGE_PREFIX",
    "RECALL_TOOL_NAME",
    "SCHEMA1_FIELDS",
    "SCHEMA1_PLACEHOLDER",
    "SCHEMA1_SEED_PLACEHOLDER",
    "STAND_IN_RANGE",
    "TRUNCATION_MARKER",
    "TRUNCATION_RE",
    "UNKNOWN_TOOL_NAME",
    "PinRules",
    "PlaceholderCost",
    "ToolGroup",
    "arguments_handle",
    "batched_boundary",
    "call_names",
    "check_int",
    "clear_error_cache",
    "cleared_marker",
    "distinctive_tokens",
    "drop_note",
    "error_reason",
    "group_results",
    "is_error_result",
    "looks_like_error",
    "message_handle",
    "note_ranges",
    "old_groups_end",
    "options_repr",
    "pinned_indices",
    "placeholder_pattern",
    "range_handle",
    "range_note",
    "recall_extra",
    "recall_placeholder",
    "render_placeholder",
    "result_handle",
    "rewrite_contents",
    "strip_notes",
    "tool_groups",
    "truncation_marker",
    "validate_template",
    "with_content",
    "without_markers",
]
