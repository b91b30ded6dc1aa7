"""histaudit.canonical against the reference: byte-identical to RFC 8785 on its domain.

The domain (docs/format.md §Canonical JSON): null, booleans, integers within
±(2^53-1), strings of Unicode scalar values, arrays and objects with string keys.
Anything else (floats, lone surrogates, non-string keys, unsafe integers, other Python
types) raises FormatError rather than producing bytes.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import rfc8785
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from histaudit.errors import FormatError
from histaudit.ledger.canonical import MAX_SAFE_INTEGER, canonical_bytes

EXAMPLES = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
REFUSALS = settings(max_examples=100, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

# Any Unicode scalar value: controls, BMP, private use, noncharacters, astral planes —
# everything but the surrogate code points, which are not characters.
scalar = st.characters(exclude_categories=["Cs"])
# Characters whose order differs between UTF-16 code units and code points / UTF-8:
# everything from U+E000 up sorts *after* an astral character in UTF-16.
tricky = st.sampled_from(["\ue000", "\uff61", "\uffff", "\U00010000", "\U0001f600",
                          "\U0010ffff", "\ud7ff", "\x7f", "\x00", "\x1f", "\u2028", "a",
                          "A", "\\", '"', "é"])
text = st.text(scalar, max_size=12) | st.text(tricky, max_size=4)
safe_int = st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER)
edge_int = st.sampled_from([0, 1, -1, MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER, 2**31, -(2**31),
                            2**32, 10**15, 10**15 - 1, MAX_SAFE_INTEGER - 1])
scalars = st.none() | st.booleans() | safe_int | edge_int | text


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(children, max_size=5) | st.dictionaries(text, children, max_size=6)


json_values = st.recursive(scalars, _containers, max_leaves=25)
# Smaller documents to hide a refused value in.
small_values = st.recursive(scalars, _containers, max_leaves=6)


@EXAMPLES
@given(json_values)
def test_equals_rfc8785(value: Any) -> None:
    assert canonical_bytes(value) == rfc8785.dumps(value)


@EXAMPLES
@given(st.dictionaries(text, safe_int, min_size=2, max_size=8))
def test_object_keys_equal_rfc8785(value: dict[str, int]) -> None:
    assert canonical_bytes(value) == rfc8785.dumps(value)


@EXAMPLES
@given(json_values)
def test_round_trip_and_idempotent(value: Any) -> None:
    out = canonical_bytes(value)
    back = json.loads(out.decode("utf-8"))
    assert back == value
    assert canonical_bytes(back) == out
    # No insignificant whitespace: every space or newline byte sits inside a string.
    assert canonical_bytes(json.loads(json.dumps(value, indent=3))) == out


def test_known_bytes() -> None:
    assert canonical_bytes({"b": [1, True, None], "a": "x"}) == b'{"a":"x","b":[1,true,null]}'
    assert canonical_bytes({"\uffff": 1, "\U0001f600": 2}) == (
        '{"\U0001f600":2,"\uffff":1}'.encode())
    assert canonical_bytes("\x00\x1f\x7f\u2028\t\"\\/") == (
        b'"\\u0000\\u001f\x7f\xe2\x80\xa8\\t\\"\\\\/"')
    assert canonical_bytes(-0) == b"0"
    assert canonical_bytes((1, 2)) == b"[1,2]"
    assert canonical_bytes(MAX_SAFE_INTEGER) == b"9007199254740991"
    assert canonical_bytes(-MAX_SAFE_INTEGER) == b"-9007199254740991"


# --- refusals -----------------------------------------------------------------------

def _plant(value: Any, container: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Put ``value`` somewhere inside a random document."""
    return st.tuples(container, st.sampled_from(["alone", "list", "dict", "deep"])).map(
        lambda pair: {"alone": value, "list": [pair[0], value],
                      "dict": {"k": pair[0], "z": value},
                      "deep": {"a": [{"b": [value]}], "c": pair[0]}}[pair[1]])


@REFUSALS
@given(st.data())
def test_floats_refused(data: st.DataObject) -> None:
    number = data.draw(st.floats(allow_nan=True, allow_infinity=True))
    doc = data.draw(_plant(number, small_values))
    with pytest.raises(FormatError):
        canonical_bytes(doc)


@pytest.mark.parametrize("number", [0.0, 1.0, -0.0, 1e3, 0.5, float("nan"), float("inf")])
def test_integral_and_special_floats_refused(number: float) -> None:
    with pytest.raises(FormatError, match="float"):
        canonical_bytes({"n": number})


@REFUSALS
@given(st.data())
def test_out_of_range_integers_refused(data: st.DataObject) -> None:
    number = data.draw(st.integers(min_value=MAX_SAFE_INTEGER + 1)
                       | st.integers(max_value=-MAX_SAFE_INTEGER - 1))
    doc = data.draw(_plant(number, small_values))
    with pytest.raises(FormatError):
        canonical_bytes(doc)


surrogate = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)


@REFUSALS
@given(st.data())
def test_lone_surrogates_refused(data: st.DataObject) -> None:
    before, after = data.draw(st.text(scalar, max_size=5)), data.draw(st.text(scalar, max_size=5))
    bad = before + data.draw(surrogate) + after
    as_key = data.draw(st.booleans())
    doc = data.draw(_plant({bad: 1} if as_key else bad, small_values))
    with pytest.raises(FormatError):
        canonical_bytes(doc)


def test_surrogate_pair_in_python_string_refused() -> None:
    # A *pair* of surrogate code points in a Python str is still two lone surrogates:
    # it is not the astral character they would encode in UTF-16.
    with pytest.raises(FormatError):
        canonical_bytes("\ud83d\ude00")


non_str_key = (st.integers() | st.booleans() | st.none() | st.floats(allow_nan=False)
               | st.tuples(st.integers()) | st.binary(max_size=3))


@REFUSALS
@given(st.data())
def test_non_string_keys_refused(data: st.DataObject) -> None:
    key = data.draw(non_str_key)
    others = data.draw(st.dictionaries(text, safe_int, max_size=3))
    doc = data.draw(_plant({**others, key: 1}, small_values))
    with pytest.raises(FormatError, match="key"):
        canonical_bytes(doc)


@pytest.mark.parametrize("value", [b"bytes", {1, 2}, object(), 1 + 2j, frozenset()],
                         ids=["bytes", "set", "object", "complex", "frozenset"])
def test_other_types_refused(value: Any) -> None:
    with pytest.raises(FormatError):
        canonical_bytes([value])
