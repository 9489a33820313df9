"""Request bodies in and out of the proxy: strict, bounded JSON parsing and safe re-encoding.

Every valid JSON body within the limits below parses; everything else is a
:class:`BodyError` whose reason is a fixed sentence (the proxy answers 400 with it, and it never
quotes the body). The limits:

- nesting: at most :data:`MAX_DEPTH` arrays/objects inside one another;
- integers: at most :data:`MAX_INT_DIGITS` digits (Python's own default cap on converting
  digit strings to ``int``);
- numbers with a fraction or exponent must fit a 64-bit float (``1e400`` does not);
- ``NaN``, ``Infinity`` and ``-Infinity`` are refused: they are not JSON (RFC 8259 §6),
  although Python's ``json`` accepts them by default;
- the bytes must be UTF-8 (RFC 8259 §8.1), without a byte-order mark: Python's ``json``
  would also read UTF-16 and UTF-32, skip a BOM and take UTF-8-encoded surrogates (CESU-8),
  and a body it read that way would be forwarded, or rewritten as UTF-8, under a
  ``Content-Type`` that says otherwise. A declared ``charset`` other than UTF-8 is refused for
  the same reason (:func:`check_charset`).

The depth check walks the parsed value with an explicit stack, so a deep body costs no
recursion; a body so deep that the parser itself runs out of stack is refused the same way.
"""

from __future__ import annotations

import codecs
import json
import math
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "MAX_DEPTH",
    "MAX_INT_DIGITS",
    "BodyError",
    "check_charset",
    "encode_body",
    "parse_body",
]

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


_NOT_UTF8 = "request body is not UTF-8"
_UTF8_NAMES = frozenset({"utf-8", "utf8"})
_CHARSET = re.compile(r"""charset\s*=\s*["']?([^"';\s]*)""", re.IGNORECASE)
_TOKEN = re.compile(r"[a-z0-9._:-]{1,40}")


def check_charset(content_type: str | None) -> None:
    """Refuse a ``Content-Type`` whose ``charset`` is not UTF-8 (none is fine: JSON is UTF-8).

    Raises:
        BodyError: The declared charset is another one.

    Example:
        >>> check_charset("application/json; charset=utf-8")
        >>> try:
        ...     check_charset("application/json; charset=utf-16")
        ... except BodyError as exc:
        ...     exc.reason
        'request body is declared as utf-16; only UTF-8 is accepted'
    """
    found = _CHARSET.search(content_type or "")
    if found is None:
        return
    charset = found.group(1).lower()
    if charset in _UTF8_NAMES:
        return
    shown = charset if _TOKEN.fullmatch(charset) else "another charset"
    raise BodyError(f"request body is declared as {shown}; only UTF-8 is accepted")


def _text(raw: bytes) -> str:
    """``raw`` decoded as strict UTF-8, or a :class:`BodyError` saying why it is not."""
    if raw.startswith(codecs.BOM_UTF8):
        raise BodyError(f"{_NOT_UTF8} (it starts with a byte-order mark)")
    # A JSON text starts with an ASCII character: in UTF-16 or UTF-32 its first four bytes
    # hold a zero byte, or they start with that encoding's byte-order mark.
    if b"\x00" in raw[:4] or raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise BodyError(f"{_NOT_UTF8} (it looks like UTF-16 or UTF-32)")
    try:
        return raw.decode("utf-8")  # strict: encoded surrogates (CESU-8) are refused too
    except UnicodeDecodeError as exc:
        raise BodyError(f"{_NOT_UTF8} (not valid UTF-8 at byte {exc.start})") from None


def parse_body(raw: bytes) -> dict[str, Any]:
    """Parse a chat request body: a JSON object within the documented limits.

    Raises:
        BodyError: not UTF-8, not JSON, not an object, or over a limit.
    """
    text = _text(raw)
    try:
        body = json.loads(text, parse_constant=_constant, parse_int=_int, parse_float=_float)
    except BodyError:
        raise
    except RecursionError:
        raise BodyError(f"request body is nested deeper than {MAX_DEPTH} levels") from None
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
