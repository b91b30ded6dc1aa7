"""The orjson fast path of histaudit.ledger.canonical: exact, or not taken at all.

``canonical_bytes`` keeps orjson's bytes only when the module docstring's rules prove
them canonical, and otherwise runs the reference emitter (``_slow_bytes``). These tests
check each rule against the installed orjson, the ``rfc8785`` package and the emitter:

* every Unicode scalar value, in strings and in object names, comes out identical;
* random documents biased toward the characters where encoders differ (C0 controls,
  DEL, U+2028/2029, U+E000-U+FFFF against astral names, surrogate pairs' characters)
  give the same bytes on both paths, and the fast path is taken exactly when the
  independent model ``takes_fast_path`` below says so;
* every refusal raises the same FormatError, with the same message and exception chain.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import enum
import re
import subprocess
import sys
import uuid
from typing import Any

import orjson
import pytest
import rfc8785
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from histaudit.errors import FormatError
from histaudit.ledger import canonical
from histaudit.ledger.canonical import MAX_SAFE_INTEGER, canonical_bytes

_fast_bytes = canonical._fast_bytes
_slow_bytes = canonical._slow_bytes

MANY = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SOME = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

SCALARS = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
MAX_DEPTH = 254  # containers nested deeper take the slow path (orjson's limit for lists)


def outcome(function: Any, value: Any) -> tuple[Any, ...]:
    """What calling ``function(value)`` does: its bytes, or its exception as a comparable."""
    try:
        return ("bytes", function(value))
    except Exception as exc:  # noqa: BLE001 - any exception is the outcome being compared
        return ("raises", type(exc), str(exc), type(exc.__cause__), type(exc.__context__),
                exc.__suppress_context__)


def assert_same_as_emitter(value: Any) -> None:
    assert outcome(canonical_bytes, value) == outcome(_slow_bytes, value)


def utf16_units(name: str) -> list[int]:
    data = name.encode("utf-16-be")
    return [int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2)]


def takes_fast_path(value: Any) -> bool:
    """The module docstring's slow-path list, written independently of the module."""

    def plain(node: Any, depth: int) -> bool:
        kind = type(node)
        if kind is str:
            return re.search("[\ud800-\udfff]", node) is None  # else a lone surrogate
        if kind is bool or node is None:
            return True
        if kind is int:
            return -MAX_SAFE_INTEGER <= node <= MAX_SAFE_INTEGER
        if kind in (list, tuple):
            return depth < MAX_DEPTH and all(plain(item, depth + 1) for item in node)
        if kind is dict:
            if not all(type(k) is str and plain(k, depth) for k in node):
                return False
            by_code_point = sorted(node, key=lambda k: [ord(c) for c in k])
            return (by_code_point == sorted(node, key=utf16_units)
                    and depth < MAX_DEPTH
                    and all(plain(item, depth + 1) for item in node.values()))
        return False

    return plain(value, 0)


def check_document(value: Any) -> None:
    """Both paths give RFC 8785's bytes, and the fast path is taken exactly as documented."""
    fast = _fast_bytes(value)
    event("fast path" if fast is not None else "slow path")
    expected = rfc8785.dumps(value)
    assert _slow_bytes(value) == expected
    assert canonical_bytes(value) == expected
    assert (fast is not None) == takes_fast_path(value)
    if fast is not None:
        assert fast == expected


def test_installed_orjson_agrees() -> None:
    # Without this the fast path is off and every other test here passes vacuously.
    assert canonical._ORJSON_AGREES is True


@pytest.mark.parametrize("options", [
    orjson.OPT_SORT_KEYS,  # ints past 2^53 would be written, not refused
    orjson.OPT_STRICT_INTEGER,  # names would keep insertion order
    orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER | orjson.OPT_INDENT_2,
    orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER | orjson.OPT_NON_STR_KEYS,
], ids=["no-strict-integer", "no-sort-keys", "indent", "non-str-keys"])
def test_self_check_catches_a_different_orjson(monkeypatch: pytest.MonkeyPatch,
                                               options: int) -> None:
    monkeypatch.setattr(canonical, "_OPTIONS", options)
    assert canonical._orjson_agrees() is False


def test_fast_path_off_still_canonical(monkeypatch: pytest.MonkeyPatch) -> None:
    value = realistic_body(3, REALISTIC_DATA[0])
    expected = canonical_bytes(value)
    monkeypatch.setattr(canonical, "_ORJSON_AGREES", False)
    assert canonical_bytes(value) == expected == rfc8785.dumps(value)
    with pytest.raises(FormatError, match=r"^\$\.n: floats are not allowed"):
        canonical_bytes({"n": 0.5})


# --- every character --------------------------------------------------------------------

def test_every_scalar_value_in_strings() -> None:
    singles = [chr(c) for c in SCALARS]
    assert _fast_bytes(singles) == _slow_bytes(singles)
    # runs of 61 consecutive code points, each at a different offset from the start of
    # the string, so every character also lands on and across orjson's chunk boundaries
    runs = ["~" * (i % 37) + "".join(map(chr, SCALARS[i:i + 61]))
            for i in range(0, len(SCALARS), 61)]
    out = _fast_bytes(runs)
    assert out is not None and out == _slow_bytes(runs)
    assert out == rfc8785.dumps(runs)


@pytest.mark.parametrize(("char", "json_text"), [
    ('"', r'"\""'), ("\\", r'"\\"'), ("\b", r'"\b"'), ("\f", r'"\f"'), ("\n", r'"\n"'),
    ("\r", r'"\r"'), ("\t", r'"\t"'), ("\x00", r'"\u0000"'), ("\x0b", r'"\u000b"'),
    ("\x1b", r'"\u001b"'), ("\x1f", r'"\u001f"'), ("/", '"/"'), ("\x7f", '"\x7f"'),
    ("\x80", '"\x80"'), ("\u2028", '"\u2028"'), ("\u2029", '"\u2029"'), ("é", '"é"'),
    ("\ufeff", '"\ufeff"'), ("\uffff", '"\uffff"'), ("\U0001f600", '"\U0001f600"'),
    ("\U0010ffff", '"\U0010ffff"'), (" ", '" "'), ("'", "\"'\""), ("<", '"<"'),
])
def test_escaping_table(char: str, json_text: str) -> None:
    expected = json_text.encode("utf-8")
    for value in (char, "ab" + char * 3 + "cd" * 20):
        assert _fast_bytes(value) == _slow_bytes(value) == rfc8785.dumps(value)
    assert _fast_bytes(char) == expected
    assert _fast_bytes({char: char}) == b"{" + expected + b":" + expected + b"}"


def test_every_bmp_scalar_value_as_a_name() -> None:
    # No astral name: code point order is UTF-16 order, so the fast path sorts them.
    doc = {chr(c): c for c in SCALARS if c < 0x10000}
    out = _fast_bytes(doc)
    assert out is not None and out == _slow_bytes(doc) == rfc8785.dumps(doc)


def test_astral_names_without_high_bmp_names() -> None:
    doc = {chr(c): c for c in SCALARS if c < 0xD800 or (c >= 0x10000 and c % 97 == 0)}
    doc.update({"\U00010000": 0, "\U0010ffff": 1, "\U0001f600": 2})
    out = _fast_bytes(doc)
    assert out is not None and out == _slow_bytes(doc) == rfc8785.dumps(doc)


def test_names_ordered_differently_in_utf8_take_the_slow_path() -> None:
    doc = {chr(c): c for c in SCALARS if c >= 0xE000 and (c < 0x10000 or c % 97 == 0)}
    assert _fast_bytes(doc) is None
    assert canonical_bytes(doc) == _slow_bytes(doc) == rfc8785.dumps(doc)
    # orjson's own order, for the record: UTF-8 bytes, which RFC 8785 does not use
    assert orjson.dumps({"\uffff": 1, "\U0001f600": 2}, option=orjson.OPT_SORT_KEYS) == (
        '{"\uffff":1,"\U0001f600":2}'.encode())
    assert canonical_bytes({"\uffff": 1, "\U0001f600": 2}) == (
        '{"\U0001f600":2,"\uffff":1}'.encode())


# --- random documents -------------------------------------------------------------------

CONTROLS = [chr(c) for c in range(0x20)]
COMMON = [*CONTROLS, '"', "\\", "/", "\x7f", "\x80", "\x9f", "\u2028", "\u2029", "é", "\u07ff",
          "\u0800", "\ud7ff", "a", "b", "A", "Z", "0", " ", "~"]
HIGH_BMP = ["\ue000", "\uf8ff", "\ufb01", "\ufeff", "\uff61", "\ufffd", "\uffff"]
ASTRAL = ["\U00010000", "\U0001d11e", "\U0001f600", "\U000e0001", "\U0010ffff"]
# A document drawn from one alphabet: the first two take the fast path whenever every
# value is plain, the third has names that UTF-8 and UTF-16 order differently.
ALPHABETS = [COMMON + HIGH_BMP, COMMON + ASTRAL, COMMON + HIGH_BMP + ASTRAL]

safe_ints = (st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER)
             | st.sampled_from([0, 1, -1, MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER,
                                MAX_SAFE_INTEGER - 1, 2**31 - 1, -(2**31), 2**32, 2**53 - 2,
                                10**15, -(10**15)]))


def documents(alphabet: list[str], *, max_leaves: int = 30) -> st.SearchStrategy[Any]:
    chars = st.sampled_from(alphabet) | st.characters(exclude_categories=["Cs"])
    text = st.text(st.sampled_from(alphabet), max_size=6) | st.text(chars, max_size=10)
    # names that share a prefix and then differ in one tricky character
    names = text | st.tuples(st.sampled_from(["", "k", "ke"]), st.sampled_from(alphabet),
                             text).map("".join)
    leaves = st.none() | st.booleans() | safe_ints | text
    return st.recursive(
        leaves,
        lambda children: (st.lists(children, max_size=5)
                          | st.lists(children, max_size=3).map(tuple)
                          | st.dictionaries(names, children, max_size=7)),
        max_leaves=max_leaves)


any_alphabet_document = st.sampled_from(ALPHABETS).flatmap(documents)


@MANY
@given(any_alphabet_document)
def test_documents_equal_rfc8785_on_both_paths(value: Any) -> None:
    check_document(value)


# names that differ first at one position, where a U+E000-U+FFFF character meets an
# astral one about half the time: the orders of UTF-8 and UTF-16 disagree
clashing_names = st.tuples(st.sampled_from(["", "k", "é"]),
                           st.sampled_from([*HIGH_BMP, *ASTRAL, "a", "\u07ff"]),
                           st.text(st.sampled_from(COMMON + HIGH_BMP + ASTRAL), max_size=3)
                           ).map("".join)


@MANY
@given(st.dictionaries(clashing_names, safe_ints | any_alphabet_document, min_size=2,
                       max_size=8)
       | st.lists(st.dictionaries(clashing_names, safe_ints, max_size=4), max_size=3))
def test_object_names_equal_rfc8785_on_both_paths(value: Any) -> None:
    check_document(value)


def realistic_body(seq: int, data: dict[str, Any]) -> dict[str, Any]:
    """The dict records.entry_body builds, with data like the interceptor records."""
    return {"v": 1, "type": "entry", "instance": "order-triage-000042", "seq": seq,
            "leaf": 1000 + seq, "prev": "0" * 64, "kind": "activity.completed",
            "ts": "2026-11-29T12:00:00.123456Z", "kid": "3f9a1c0d2b7e4a56", "data": data}


REALISTIC_DATA = [
    {"activity": "charge-card", "task_id": 7, "execution_id": "9f86d081884c7d65",
     "attempt": 1, "worker": "bench-host:4242", "started_seq": 25,
     "output": {"c": "ab" * 32, "n": 41}, "output_digest": "cd" * 32},
    {"workflow": "order-triage", "activity": "fetch-order", "task_id": 0,
     "execution_id": "0000000000000000", "retry_policy": False, "input": {"c": "e" * 64, "n": 28},
     "input_digest": "f" * 64, "worker": "bench-host:4242"},
    {"note": "Grüße, naïve café — ✓ 😀", "tags": ["a", "b", None, True], "nested": [[], {}]},
]


# --- which inputs take which path -------------------------------------------------------

@pytest.mark.parametrize("value", [
    *(realistic_body(i, d) for i, d in enumerate(REALISTIC_DATA)),
    {"v": 1, "type": "head", "instance": "i", "seq": 3, "leaf": 9, "hash": "a" * 64,
     "ts": "2026-11-29T12:00:00.000000Z", "kid": "k"},
    None, True, False, 0, -0, MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER, "", [], {}, (), (1, (2,)),
    {"b": [1, True, None], "a": "x"}, "".join(CONTROLS) + "\x7f\u2028\u2029/",
    {"\U0001f600": "\U0001f600", "é": 1, "a": 2},      # astral, no U+E000-U+FFFF
    {"\uffff": "\ue000", "\ufffd": 1, "a": 2},          # U+E000-U+FFFF, no astral
    {"\ue000": "\U0001f600", "a": 1},                   # both, but never two names apart
    ["\uffff", "\U0001f600", {"\ufffd": {"\U0001f600": 1}}],
    {"x\ue000": 1, "x\ue001": 2, "y": {"\U0001f600": 3, "\U0001f601": 4}},
    {"a": {"b": {"c": [[[1]]]}}},
], ids=lambda v: type(v).__name__)
def test_fast_path_taken(value: Any) -> None:
    assert takes_fast_path(value)
    out = _fast_bytes(value)
    assert out is not None and out == _slow_bytes(value) == rfc8785.dumps(value)
    assert canonical_bytes(value) == out


class Colour(enum.Enum):
    RED = 1


class Level(enum.IntEnum):
    HIGH = 3


class Tag(str):
    pass


class Count(int):
    pass


@dataclasses.dataclass
class Point:
    x: int


Pair = collections.namedtuple("Pair", "a b")


def nested(depth: int, *containers: type) -> Any:
    """``depth`` containers nested, cycling through ``containers``, around a 1."""
    value: Any = 1
    for level in range(depth):
        container = containers[level % len(containers)]
        value = {"k": value} if container is dict else container([value])
    return value


SLOW_PATH = {
    # refused by the emitter: same FormatError either way
    "float": {"n": 1.0}, "nan": [float("nan")], "neg-zero-float": -0.0,
    "int-2^53": 2**53, "int--2^53": -(2**53), "int-2^63": [2**63], "int-2^64": {"a": 2**64},
    "int-2^100": -(2**100), "lone-surrogate": "a\ud800", "surrogate-pair-chars": "\ud83d\ude00",
    "surrogate-name": {"\udfff": 1}, "int-name": {1: 2}, "none-name": {None: 1},
    "tuple-name": {(1,): 2}, "bytes": [b"x"], "set": {"s": {1}}, "complex": 1j,
    "enum": Colour.RED, "uuid": uuid.UUID(int=1), "date": datetime.date(2026, 1, 1),
    "dataclass": Point(1), "fragment": orjson.Fragment(b"[1.5]"), "object": object(),
    # accepted by the emitter, which writes them itself
    "intenum": {"level": Level.HIGH}, "int-subclass": [Count(5)], "str-subclass": Tag("x"),
    "str-subclass-name": {Tag("k"): 1}, "ordereddict": collections.OrderedDict(b=1, a=2),
    "namedtuple": Pair(1, 2), "defaultdict": collections.defaultdict(int, a=1),
    "deep-list": nested(MAX_DEPTH + 1, list), "deep-dict": nested(MAX_DEPTH + 1, dict),
    "deep-tuple": nested(MAX_DEPTH + 1, tuple),
    "deep-mixed": nested(MAX_DEPTH + 1, tuple, dict, list),
    "utf16-order-names": {"\uffff": 1, "\U0001f600": 2},
    "utf16-order-nested": [1, {"a": {"x\ue000": 1, "x\U00010000": 2}}],
}


@pytest.mark.parametrize("value", SLOW_PATH.values(), ids=SLOW_PATH.keys())
def test_slow_path_taken_and_unchanged(value: Any) -> None:
    assert not takes_fast_path(value)
    assert _fast_bytes(value) is None
    assert_same_as_emitter(value)


@pytest.mark.parametrize("container", [list, dict, tuple])
def test_nesting_depth_boundary(container: type) -> None:
    ok, deep = nested(MAX_DEPTH, container), nested(MAX_DEPTH + 1, container)
    assert _fast_bytes(ok) == _slow_bytes(ok) == rfc8785.dumps(ok)
    assert _fast_bytes(deep) is None
    assert canonical_bytes(deep) == _slow_bytes(deep)


DEEP_SCRIPT = """
import sys
sys.setrecursionlimit(100_000)
from histaudit.ledger.canonical import _slow_bytes, canonical_bytes
value = 1
for level in range(20_000):
    value = (value,) if level % 2 else {"a": value}
assert canonical_bytes(value) == _slow_bytes(value)
print("ok")
"""


def test_deep_tuples_never_reach_orjson() -> None:
    # orjson does not count tuples toward its nesting limit, and a couple of thousand
    # levels crash the process (orjson 3.13.0: heap corruption). Only the depth bound of
    # _plain stops that once a program has raised Python's recursion limit.
    done = subprocess.run([sys.executable, "-c", DEEP_SCRIPT], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_circular_document_fails_as_before() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(RecursionError):
        _slow_bytes(loop)
    with pytest.raises(RecursionError):
        canonical_bytes(loop)


# --- refusals: same error, same message -------------------------------------------------

@pytest.mark.parametrize(("value", "message"), [
    ({"n": 1.0}, "$.n: floats are not allowed in signed records"),
    ([0, [float("inf")]], "$[1][0]: floats are not allowed in signed records"),
    ({"a": [2**53]}, "$.a[0]: integer 9007199254740992 is outside the I-JSON safe range"),
    (-(2**53), "$: integer -9007199254740992 is outside the I-JSON safe range"),
    ({"x": {"y": 2**64}}, "$.x.y: integer 18446744073709551616 is outside the I-JSON safe range"),
    (["ok", "\ud800"], "$[1]: string holds a lone surrogate"),
    ({"k": {"\udfff": 1}}, "$.k: string holds a lone surrogate"),
    ({"a": 1, 2: 3}, "$: object key 2 is not a string"),
    ([{None: 1}], "$[0]: object key None is not a string"),
    ({"b": b"x"}, "$.b: bytes is not a JSON value"),
    ([Colour.RED], "$[0]: Colour is not a JSON value"),
    ({"u": uuid.UUID(int=1)}, "$.u: UUID is not a JSON value"),
    (orjson.Fragment(b"1"), "$: Fragment is not a JSON value"),
    ({"p": Point(1)}, "$.p: Point is not a JSON value"),
    ({"s": frozenset()}, "$.s: frozenset is not a JSON value"),
])
def test_refusal_messages(value: Any, message: str) -> None:
    with pytest.raises(FormatError) as caught:
        canonical_bytes(value)
    assert str(caught.value) == message
    assert_same_as_emitter(value)


refused_leaf = (st.floats() | st.integers(min_value=MAX_SAFE_INTEGER + 1)
                | st.integers(max_value=-MAX_SAFE_INTEGER - 1)
                | st.tuples(st.text(max_size=3),
                            st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)).map("".join)
                | st.sampled_from([b"", Colour.RED, uuid.UUID(int=7), object(), set()]))
refused_name = (st.integers() | st.none() | st.booleans() | st.floats(allow_nan=False)
                | st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF))


@SOME
@given(st.data())
def test_refusals_raise_as_before(data: st.DataObject) -> None:
    doc = data.draw(documents(COMMON + ASTRAL, max_leaves=8))
    if data.draw(st.booleans()):
        bad: Any = data.draw(refused_leaf)
    else:
        bad = {data.draw(refused_name): 1}
    value = data.draw(st.sampled_from([
        bad, [doc, bad], {"a": doc, "z": bad}, {"a": [{"b": (bad,)}], "c": doc}]))
    assert _fast_bytes(value) is None
    with pytest.raises(FormatError):
        canonical_bytes(value)
    assert_same_as_emitter(value)
