"""The kit for strategy authors: the helpers the built-in strategies use, as public names.

A third-party strategy (a class with ``async compact(ctx)``, see
:class:`~ctxcompact.CompactionStrategy`) imports these instead of ctxcompact's private
modules, which may change in any release. What it offers:

- Tool-call groups, the unit to keep whole: :class:`ToolGroup`, :func:`tool_groups`,
  :func:`old_groups_end`.
- Cache-friendly batching of a masking boundary: :func:`batched_boundary`.
- Does a tool result look like an error? :func:`is_error_result`, :func:`looks_like_error`,
  :func:`error_reason`.
- Placeholders for hidden results: :func:`validate_template`, :func:`render_placeholder`,
  :func:`placeholder_pattern`, :data:`HIDDEN_PLACEHOLDER`, :data:`SCHEMA1_PLACEHOLDER`,
  :data:`SCHEMA1_FIELDS`.
- A changed copy of a message, fast: :func:`with_content`.
- Parameters checked like the built-ins': :func:`check_int`.

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

from typing import TYPE_CHECKING

from ._history.groups import ToolGroup, tool_groups
from .exceptions import MissingArgumentError
from .strategies import _errors, _shared

if TYPE_CHECKING:
    import re
    from collections.abc import Callable, Collection, Sequence

    from ._history.messages import Message

HIDDEN_PLACEHOLDER: str = _shared.HIDDEN_PLACEHOLDER
"""KLIP-13's placeholder for a hidden tool result (``ToolResultHiding``'s default)."""

SCHEMA1_PLACEHOLDER: str = _shared.SCHEMA1_PLACEHOLDER
"""Schema 1's placeholder template (seed 001's French wording), for :func:`render_placeholder`."""

SCHEMA1_FIELDS: frozenset[str] = _shared.SCHEMA1_FIELDS
"""The fields :func:`render_placeholder` fills (``tool_call_id``, ``tool_name``,
``original_chars``): pass them to :func:`validate_template`."""

__all__ = [
    "HIDDEN_PLACEHOLDER",
    "SCHEMA1_FIELDS",
    "SCHEMA1_PLACEHOLDER",
    "ToolGroup",
    "batched_boundary",
    "check_int",
    "error_reason",
    "is_error_result",
    "looks_like_error",
    "old_groups_end",
    "placeholder_pattern",
    "render_placeholder",
    "tool_groups",
    "validate_template",
    "with_content",
]

# Thin wrappers rather than the internal functions themselves: the signatures and docstrings
# here are the public promise, and the internals behind them may change.


# -- groups -------------------------------------------------------------------------------------


def old_groups_end(history: Sequence[Message], keep: int) -> int:
    """Where the ``keep`` newest tool-call groups start: everything before it is "old".

    ``len(history)`` when ``keep`` is 0 (every group is old); ``0`` when there are fewer
    than ``keep`` groups (nothing is old). Groups are counted as :func:`tool_groups` counts
    them, one per assistant message with tool calls, scanning back from the end only as far
    as needed.

    Example:
        >>> from ctxcompact import Message, ToolCall
        >>> def turn(i):
        ...     call = ToolCall(id=f"c{i}", name="ls", arguments="{}")
        ...     return [Message.assistant(None, tool_calls=[call]), Message.tool(f"c{i}", "x")]
        >>> history = [Message.user("go"), *turn(1), *turn(2), *turn(3)]
        >>> old_groups_end(history, 2)  # the two newest groups start at index 3
        3
        >>> old_groups_end(history, 5), old_groups_end(history, 0)
        (0, 7)
    """
    return _shared.old_groups_end(history, keep)


# -- batching -----------------------------------------------------------------------------------


def batched_boundary(
    boundary: int,
    *,
    batch_turns: int = 0,
    clear_at_least: int = 0,
    unit_tokens: Callable[[int], int] | None = None,
) -> int:
    """Move a masking boundary only in batches, so the provider's prompt cache survives.

    A strategy that rewrites old messages changes the prompt prefix, and every token after
    the first change is billed again at the full price. ``boundary`` is how many units (tool
    turns or groups), oldest first, the strategy would rewrite. ``batch_turns = B`` rounds
    it down to a multiple of B. ``clear_at_least = T`` then moves it back to the last unit
    at which the cumulative tokens freed (``unit_tokens(k)`` for unit ``k``, counted from
    the oldest) cross a multiple of T, so each move frees at least T tokens (Anthropic's
    ``clear_at_least`` idea). Both depend on the history alone, so a strategy using this
    stays stateless. The built-in maskers use exactly this rule.

    Args:
        boundary: Units that may be rewritten, oldest first (``<= 0``: none, returns 0).
        batch_turns: Move in steps of this many units (0: any step).
        clear_at_least: Move only when at least this many more tokens are freed (0: always).
        unit_tokens: Tokens freed by rewriting unit ``k``; needed only with ``clear_at_least``.

    Raises:
        TypeError: ``clear_at_least`` without ``unit_tokens``.

    Example:
        >>> batched_boundary(7, batch_turns=3)
        6
        >>> freed = [100, 100, 100, 100, 100]  # per unit, oldest first
        >>> batched_boundary(5, clear_at_least=250, unit_tokens=freed.__getitem__)
        5
        >>> batched_boundary(4, clear_at_least=250, unit_tokens=freed.__getitem__)
        3
    """
    if boundary <= 0:
        return 0
    if unit_tokens is None:
        if clear_at_least > 0:
            raise MissingArgumentError(
                "unit_tokens",
                "batched_boundary: clear_at_least needs unit_tokens",
                needed_by="clear_at_least",
            )
        unit_tokens = _no_tokens
    return _shared.batched_boundary(
        boundary, batch_turns=batch_turns, clear_at_least=clear_at_least, unit_tokens=unit_tokens
    )


def _no_tokens(unit: int) -> int:
    return 0


# -- errors -------------------------------------------------------------------------------------


def is_error_result(message: Message) -> bool:
    """Whether a tool result failed: flagged by its provider (``is_error``) or looking like it.

    The text heuristic is :func:`error_reason`'s: tracebacks, ``Error:`` lines, compiler and
    test-runner failures, shell errors, timeouts, JSON error objects and more, each anchored
    so that prose or source code that merely mentions "error" does not count.

    Example:
        >>> from ctxcompact import Message
        >>> is_error_result(Message.tool("c1", "Traceback (most recent call last):\\n  ..."))
        True
        >>> is_error_result(Message.tool("c1", "Handles the error case when a file is missing."))
        False
    """
    return _errors.is_error_result(message)


def looks_like_error(content: object) -> bool:
    """Whether tool-result content (a string, or a list of text parts) looks like an error.

    Example:
        >>> looks_like_error("bash: foo: command not found")
        True
        >>> looks_like_error([{"type": "text", "text": "all 12 tests passed"}])
        False
    """
    return _errors.looks_like_error(content)


def error_reason(text: str) -> str | None:
    """The name of the first error pattern ``text`` matches (``traceback``, ``error_line``,
    ``compiler_error``, ``timeout``, ...), or ``None``. Verdicts are cached by text.

    Example:
        >>> error_reason('{"error": "not found"}')
        'json_error'
        >>> error_reason("The call raises an exception when the timeout is reached.") is None
        True
    """
    return _errors.error_reason(text)


# -- placeholders -------------------------------------------------------------------------------


def validate_template(template: str, allowed: Collection[str], *, key: str) -> None:
    """Check a placeholder template when the strategy is built, not when it first runs.

    The template must be a ``str.format`` template that uses only the fields in
    ``allowed`` and has some fixed text (or a placeholder could not be told from a real
    result).

    Raises:
        ConfigError: Naming ``key`` (the parameter) and what is wrong; the loader reports it
            with the strategy's spec.

    Example:
        >>> from ctxcompact.exceptions import ConfigError
        >>> validate_template("[old {tool} result]", {"tool"}, key="placeholder")
        >>> try:
        ...     validate_template("[old {nope}]", {"tool"}, key="placeholder")
        ... except ConfigError as exc:
        ...     print(exc.key, "|", exc)
        placeholder | key 'placeholder': placeholder template '[old {nope}]' uses unknown field(s) ['nope']; allowed: ['tool'] (write {{ and }} for literal braces)
    """  # noqa: E501 - a doctest's output is one line
    _shared.validate_template(template, allowed, key=key)


def render_placeholder(template: str, *, tool_call_id: str, tool_name: str, chars: int) -> str:
    """A Schema 1 style placeholder: ``template`` with ``{tool_call_id}``, ``{tool_name}``
    (``unknown`` when empty; seed 001 writes ``inconnu``) and ``{original_chars}`` filled in.

    Example:
        >>> render_placeholder("[masked {tool_name} {tool_call_id}: {original_chars} chars]",
        ...                    tool_call_id="c1", tool_name="", chars=1200)
        '[masked unknown c1: 1200 chars]'
    """
    return _shared.render_placeholder(
        template, tool_call_id=tool_call_id, tool_name=tool_name, chars=chars
    )


def placeholder_pattern(template: str) -> re.Pattern[str]:
    """A regex matching any rendering of ``template``: use ``fullmatch`` on a result's text
    to leave an already-masked result alone (masking it again would change it for nothing).
    Its time is linear in the text, whatever the text (a tool's output can be crafted).

    Example:
        >>> masked = placeholder_pattern("[masked {tool_name}: {original_chars} chars]")
        >>> bool(masked.fullmatch("[masked ls: 1,200 chars]")), bool(masked.fullmatch("a.py"))
        (True, False)
    """
    return _shared.placeholder_pattern(template)


# -- copies and parameters ----------------------------------------------------------------------


def with_content(message: Message, content: str) -> Message:
    """A copy of ``message`` with string ``content``; everything else (extras too) kept.

    The same result as ``message.replace(content=content)`` for a string, about three times
    faster (it skips validation a ``str`` does not need; 3.1x on the 1,065 tool results of
    the public traces, minimum of 15 runs), which matters to a strategy that rewrites
    thousands of tool results per call. The original is never changed.

    Example:
        >>> from ctxcompact import Message
        >>> result = Message.tool("c1", "a very long listing")
        >>> hidden = with_content(result, "[hidden]")
        >>> hidden.text, hidden.tool_call_id, result.text
        ('[hidden]', 'c1', 'a very long listing')
    """
    return _shared.with_content(message, content)


def check_int(name: str, value: int, *, minimum: int = 0) -> int:
    """``value`` if it is an ``int`` (not a ``bool``) ``>= minimum``, else a
    :class:`~ctxcompact.exceptions.ConfigError` naming the parameter ``name``.

    Example:
        >>> check_int("batch_turns", 4)
        4
        >>> check_int("batch_turns", -1)
        Traceback (most recent call last):
        ...
        ctxcompact.exceptions.ConfigError: key 'batch_turns': must be >= 0, got -1
    """
    return _shared.check_int(name, value, minimum=minimum)
