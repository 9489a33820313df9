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

import orjson

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "MAX_DEPTH",
    "MAX_INT_DIGITS",
    "BodyError",
    "check_charset",
    "compact_json",
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

    orjson reads it when it can say for sure that the result is what the standard library
    would give (:func:`_fast`); otherwise ``json`` reads it, and gives the errors.

    Raises:
        BodyError: not UTF-8, not JSON, not an object, or over a limit.
    """
    text = _text(raw)
    fast = _fast(raw)
    if fast is None:
        body = _strict(text)
        deepest = depth(body)
    else:
        body, deepest = fast
    if not isinstance(body, dict):
        raise BodyError("request body must be a JSON object")
    if deepest > MAX_DEPTH:
        raise BodyError(f"request body is nested deeper than {MAX_DEPTH} levels")
    return body


_INT64 = float(2**63)


def _fast(raw: bytes) -> tuple[Any, int] | None:
    """``raw`` parsed by orjson, and its :func:`depth`; ``None`` when ``json`` must read it.

    orjson refuses all that :func:`_strict` refuses (NaN and Infinity, numbers beyond a
    float's range, trailing data) and a little it accepts (a lone surrogate escape, nesting
    deeper than 1,024): ``json`` then reads the body and gives its result or its error. Every
    other value both parse alike (float literals to the same correctly rounded float, the
    last of duplicate keys kept), but integers beyond 64 bits, which orjson turns into floats:
    a float of that size in its result may have been one, so ``json`` reads that body. So
    does a body nested deeper than :data:`MAX_DEPTH`, which is refused with the error it
    always had.
    """
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    # depth(), with exact types (orjson builds no subclasses) and the floats looked at.
    level = [value] if type(value) is dict or type(value) is list else []
    deepest = 0
    while level:
        deepest += 1
        inner: list[Any] = []
        for item in level:
            for child in item.values() if type(item) is dict else item:
                kind = type(child)
                if kind is dict or kind is list:
                    inner.append(child)
                elif kind is float and not -_INT64 < child < _INT64:
                    return None
        level = inner
    if deepest > MAX_DEPTH:  # refused: json reads it, so the error is the one it always was
        return None
    return value, deepest


def _strict(text: str) -> Any:
    """``text`` parsed by the standard library's ``json``, within the limits."""
    try:
        return json.loads(text, parse_constant=_constant, parse_int=_int, parse_float=_float)
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


def depth(value: Any) -> int:
    """How many arrays/objects are nested at the deepest point (a scalar is 0); no recursion.

    Example:
        >>> depth({"a": [1, {"b": []}]}), depth("x")
        (4, 0)
    """
    # One level at a time: each container is visited once, scalars are only looked at.
    level = [value] if isinstance(value, dict | list) else []
    deepest = 0
    while level:
        deepest += 1
        inner: list[Any] = []
        for item in level:
            children = item.values() if isinstance(item, dict) else item
            inner.extend(child for child in children if isinstance(child, dict | list))
        level = inner
    return deepest


def compact_json(value: Any) -> bytes:
    """``json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")``, byte
    for byte, and its errors; written by orjson when the value holds only plain JSON types.

    orjson writes strings, integers and structure exactly as ``json`` does (checked for every
    code point), and raises where ``json`` would not (an integer beyond 64 bits, a key that is
    not a string, a lone surrogate, nesting deeper than 254): ``json`` writes those, or raises
    its own error. It writes some floats otherwise (``1e-05`` as ``0.00001``, NaN as
    ``null``) and some types ``json`` refuses (dataclasses, UUIDs): a value holding any other
    type than dict, list, tuple, str, int, bool and None, or a float orjson does not write as
    ``json`` does (each float is compared), is written by ``json``.

    Example:
        >>> compact_json({"a": [1, 0.5, 1e-05, "é"]})
        b'{"a":[1,0.5,1e-05,"\xc3\xa9"]}'
    """
    if _plain(value):
        try:
            return orjson.dumps(value)
        except orjson.JSONEncodeError:
            pass
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


_SCALARS = frozenset({str, int, bool, type(None)})


def _plain(value: Any) -> bool:
    """Whether ``value`` holds only dicts, lists, tuples, str, int, bool, None and floats that
    orjson writes as ``json`` does."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            stack.extend(item.values())
        elif kind is list or kind is tuple:
            stack.extend(item)
        elif kind is float:
            if orjson.dumps(item) != float.__repr__(item).encode():
                return False
        elif kind not in _SCALARS:
            return False
    return True


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
