"""``dapr-rows.jsonl``, the bundle file holding Dapr's signed rows (histaudit.bundle.dapr_rows):
what ``encode_rows`` writes ``decode_rows`` reads back exactly, and a file that is not one —
whoever wrote it — is refused with one line naming the problem, never a crash."""

from __future__ import annotations

import base64

import orjson
import pytest

from histaudit.bundle.dapr_rows import decode_rows, encode_rows
from histaudit.errors import InputError
from histaudit.verify.dapr_history import DaprWorkflowRows

ROWS = DaprWorkflowRows(
    instance="order-1",
    history={0: b"\x0a\x02ev0", 1: b"ev1", 1_000_000: b"\x00\xff"},
    signatures={0: b"sig-a", 2: b""},
    certificates={0: b"-----BEGIN CERT-----"},
    metadata=b'{"generation":1}')


def test_rows_read_back_exactly() -> None:
    data = encode_rows({"order-1": ROWS, "purged-2": None}, "checkout-app")
    back = decode_rows(data)
    assert list(back) == ["order-1", "purged-2"]
    assert back["order-1"].rows == ROWS and back["order-1"].app_id == "checkout-app"
    assert back["purged-2"].rows is None and back["purged-2"].app_id == "checkout-app"
    first = orjson.loads(data.splitlines()[0])
    assert list(first["rows"]) == sorted(first["rows"])  # names sorted, zero-padded
    assert "history-1000000" in first["rows"] and "signature-000002" in first["rows"]
    assert decode_rows(encode_rows({}, None)) == {}


def _line(**doc: object) -> bytes:
    return orjson.dumps(doc) + b"\n"


def _b(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


GOOD = _line(instance="a", app_id=None, rows={"history-000000": _b(b"x")})

BAD = {
    "truncated": (GOOD[:-1], "truncated"),
    "not json": (b"{nope\n", "line 1 is not JSON"),
    "blank line": (GOOD + b"\n", "line 2 is not JSON"),
    "an array": (b"[1]\n", "not an object naming an instance"),
    "no instance": (_line(rows=None), "not an object naming an instance"),
    "instance a number": (_line(instance=7, rows=None), "not an object naming an instance"),
    "app_id a number": (_line(instance="a", app_id=3, rows=None), "app_id is not a string"),
    "rows a list": (_line(instance="a", rows=[]), "rows is not an object"),
    "value not base64": (_line(instance="a", rows={"history-000000": "!!"}),
                         "row 'history-000000' is not valid base64"),
    "value a number": (_line(instance="a", rows={"metadata": 5}),
                       "row 'metadata' is not a base64 string"),
    "unknown name": (_line(instance="a", rows={"inbox-000000": _b(b"x")}),
                     "'inbox-000000' is not a row name daprd writes"),
    "too few digits": (_line(instance="a", rows={"history-00001": _b(b"x")}),
                       "is not a row name daprd writes"),
    # past 4,300 digits int() itself refuses: the name must be refused before that
    "huge index": (_line(instance="a", rows={"history-" + "9" * 5000: _b(b"x")}),
                   "chars) is not a row name daprd writes"),
    "two names, one row": (_line(instance="a", rows={"signature-000001": _b(b"x"),
                                                     "signature-0000001": _b(b"y")}),
                           "names row signature 1, which another name gave already"),
    "instance twice": (GOOD + GOOD, "line 2: instance 'a' has a line already"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_file_that_is_not_dapr_rows_is_refused_in_one_line(case: str) -> None:
    data, message = BAD[case]
    with pytest.raises(InputError) as info:
        decode_rows(data)
    text = str(info.value)
    assert message in text and "\n" not in text and len(text) < 400, text
    assert text.startswith("bundle file dapr-rows.jsonl"), text
