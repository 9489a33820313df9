"""Request bodies in and out of the proxy: strict, bounded JSON parsing and safe re-encoding.

Every valid JSON body within the limits below parses; everything else is a
:class:`BodyError` whose reason is a fixed sentence (the proxy answers 400 with it, and it never
quotes the body). The limits:

- nesting: at most :data:`MAX_DEPTH` arrays/objects inside one another;
- integers: at most :data:`MAX_INT_DIGITS` digits (Python's own default cap on converting
  digit strings to ``int``);
- numbers with a fraction or exponent must fit a 64-bit float (``1e400`` does not);
- ``NaN``, ``Infinity`` and ``-Infinity`` are refused: they are not JSON (RFC 8259 §6),
  although Python's ``json`` accepts them by default.

The depth check walks the parsed value with an explicit stack, so a deep body costs no
recursion; a body so deep that the parser itself runs out of stack is refused the same way.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["MAX_DEPTH", "MAX_INT_DIGITS", "BodyError", "encode_body", "parse_body"]

MAX_DEPTH = 256
"""Deepest nesting of arrays and objects accepted in a request body (the body itself is 1)."""

MAX_INT_DIGITS = 4300
"""Most digits accepted in one JSON integer (Python's ``sys.get_int_max_str_digits()``
default)."""


class BodyError(ValueError):
    """A request body the proxy refuses with a 400. ``reason`` is fixed text, never content.

    Example:
        >>> try:
        ...     parse_body(b'{"x": NaN}')
        ... except BodyError as exc:
        ...     exc.reason
        'NaN and Infinity are not JSON'
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _constant(name: str) -> Any:
    raise BodyError("NaN and Infinity are not JSON")


def _int(digits: str) -> int:
    if len(digits) - digits.startswith("-") > MAX_INT_DIGITS:
        raise BodyError(f"an integer has more than {MAX_INT_DIGITS} digits")
    return int(digits)


def _float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise BodyError("a number is outside the range of a 64-bit float")
    return value


def parse_body(raw: bytes) -> dict[str, Any]:
    """Parse a chat request body: a JSON object within the documented limits.

    Raises:
        BodyError: invalid UTF-8 or JSON, not an object, or over a limit.
    """
    try:
        body = json.loads(raw, parse_constant=_constant, parse_int=_int, parse_float=_float)
    except BodyError:
        raise
    except RecursionError:
        raise BodyError(f"request body is nested deeper than {MAX_DEPTH} levels") from None
    except UnicodeDecodeError:
        raise BodyError("request body is not valid UTF-8") from None
    except json.JSONDecodeError as exc:
        # Position only: the decoder's message quotes no content, but keep it to the offset.
        raise BodyError(
            f"request body is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None
    except ValueError:  # int() refusing a digit string above sys.get_int_max_str_digits()
        raise BodyError(f"an integer has more than {MAX_INT_DIGITS} digits") from None
    if not isinstance(body, dict):
        raise BodyError("request body must be a JSON object")
    if depth(body) > MAX_DEPTH:
        raise BodyError(f"request body is nested deeper than {MAX_DEPTH} levels")
    return body


def depth(value: Any) -> int:
    """How many arrays/objects are nested at the deepest point (a scalar is 0); no recursion.

    Example:
        >>> depth({"a": [1, {"b": []}]}), depth("x")
        (4, 0)
    """
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in children if isinstance(child, dict | list))
    return deepest


def encode_body(body: dict[str, Any], dumps: Callable[[dict[str, Any]], bytes]) -> bytes:
    """The bytes to forward for a rewritten body, or :class:`ValueError` if it has none.

    ``dumps`` (the rewriter's encoder) is used as is when it succeeds. A lone UTF-16
    surrogate (``"\\ud800"``, which JavaScript clients produce when they cut an emoji in two)
    parses into a Python string that UTF-8 cannot encode; such a body is encoded again with
    each lone surrogate written back as the ``\\udXXX`` escape it arrived as, so the
    upstream receives exactly the string the client sent.

    Raises:
        ValueError: The body holds something JSON cannot say (a NaN put into a message by
            a strategy); ``TypeError`` for a value that is not JSON at all. The caller
            forwards the original bytes instead.
    """
    try:
        return dumps(body)
    except UnicodeEncodeError:
        pass
    # Only lone surrogates are unencodable in UTF-8, they only occur inside JSON strings,
    # and backslashreplace writes a code point below U+10000 as exactly \uXXXX.
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.encode("utf-8", "backslashreplace")
