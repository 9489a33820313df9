"""orjson reads and writes the proxy's bodies only where the standard library's ``json`` would
give exactly the same: checked here against ``json`` itself.

White-box (``ctxcompact.proxy._json``'s private ``_strict`` and ``compact_json``): the public
behaviour (bodies forwarded byte for byte, rewritten bodies as ``json.dumps`` writes them) is
tested through the real proxy in tests/test_proxy*.py; here the two paths are compared value by
value, on the edge cases where orjson differs (integers beyond 64 bits, small floats, NaN,
lone surrogates, types ``json`` refuses).
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxcompact.proxy._json import MAX_DEPTH, BodyError, _strict, compact_json, depth, parse_body

_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats()
    | st.floats(min_value=-1e-3, max_value=1e-3)
    | st.text()
)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)


def _stdlib(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _outcome(write: Any, value: Any) -> tuple[str, Any]:
    try:
        return "ok", write(value)
    except Exception as exc:
        return "raised", type(exc)


@settings(max_examples=600, deadline=None)
@given(_values)
def test_compact_json_writes_what_json_dumps_writes_or_raises_alike(value: Any) -> None:
    assert _outcome(compact_json, value) == _outcome(_stdlib, value)


@pytest.mark.parametrize(
    "value",
    [
        {"temperature": 1e-05},  # orjson: 0.00001
        {"x": float("nan")},  # orjson: null
        {"x": [float("inf"), -float("inf")]},
        {"n": 2**64},  # orjson raises
        {"n": -(2**63) - 1},
        {"s": "\ud800"},  # a lone surrogate: json's UnicodeEncodeError, as before
        {1: "int key"},  # json writes "1"
        {"nested": [[[[{"deep": 1e-7}]]]]},
    ],
)
def test_compact_json_where_orjson_differs(value: Any) -> None:
    assert _outcome(compact_json, value) == _outcome(_stdlib, value)


@dataclasses.dataclass
class _Point:
    x: int


@pytest.mark.parametrize("odd", [_Point(1), uuid.UUID(int=1), {1, 2}])
def test_compact_json_refuses_what_json_refuses(odd: object) -> None:
    """orjson writes dataclasses and UUIDs; json raises TypeError, and so must the proxy."""
    with pytest.raises(TypeError):
        compact_json({"messages": [odd]})


def _same(a: Any, b: Any) -> bool:
    # repr tells 1 from 1.0 and 0.0 from -0.0; NaN cannot parse.
    return repr(a) == repr(b)


_texts = _values.map(lambda v: json.dumps({"v": v}, allow_nan=False) if _finite(v) else "{}")


def _finite(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except ValueError:
        return False
    return True


@settings(max_examples=600, deadline=None)
@given(_texts)
def test_parse_body_reads_what_json_reads(text: str) -> None:
    assert _same(parse_body(text.encode()), _strict(text))


@pytest.mark.parametrize(
    "text",
    [
        '{"n": 18446744073709551616}',  # 2**64: orjson would give a float
        '{"n": -9223372036854775809}',
        '{"n": ' + "9" * 300 + "}",
        '{"n": 18446744073709551615, "m": -9223372036854775808}',  # 64-bit: orjson exact
        '{"f": 1e19, "g": -0.0, "h": 5e-324, "i": 0.1}',
        '{"a": 1, "a": 2}',
        '{"s": "\\ud83d\\ude00"}',
    ],
)
def test_parse_body_reads_integers_beyond_64_bits_exactly(text: str) -> None:
    assert _same(parse_body(text.encode()), _strict(text))


@pytest.mark.parametrize(
    "raw",
    [
        b'{"x": NaN}',
        b'{"x": 1e400}',
        b'{"x": 1}x',
        b'{"s": "\\ud800"}',
        b"[1]",
        b'{"n": ' + b"1" * 5000 + b"}",
    ],
)
def test_parse_body_errors_are_json_s(raw: bytes) -> None:
    """Where orjson refuses, json reads the body and says why (or accepts what it accepts)."""
    try:
        expected: tuple[str, Any] = ("ok", repr(_strict(raw.decode())))
        if not isinstance(_strict(raw.decode()), dict):
            expected = ("raised", "request body must be a JSON object")
    except BodyError as exc:
        expected = ("raised", exc.reason)
    try:
        got: tuple[str, Any] = ("ok", repr(parse_body(raw)))
    except BodyError as exc:
        got = ("raised", exc.reason)
    assert got == expected


@pytest.mark.parametrize("levels", [MAX_DEPTH, MAX_DEPTH + 1, 1023, 1100])
def test_depth_limit_holds_on_both_paths(levels: int) -> None:
    raw = ('{"x":' + "[" * (levels - 1) + "]" * (levels - 1) + "}").encode()
    if levels <= MAX_DEPTH:
        assert depth(parse_body(raw)) == levels
    else:
        with pytest.raises(BodyError, match="nested deeper"):
            parse_body(raw)
