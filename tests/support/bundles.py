"""Reading and spoiling the JSON-lines files of an exported bundle (docs/bundle.md)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from histaudit.ledger.records import StoredHead

__all__ = ["edit_lines", "put_head", "read_lines", "write_lines"]

Doc = dict[str, Any]


def read_lines(path: Path) -> list[Doc]:
    """Every line of a ``*.jsonl`` file, parsed."""
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def write_lines(path: Path, docs: list[Doc]) -> None:
    path.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in docs))


def edit_lines(path: Path, change: Callable[[list[Doc]], object]) -> None:
    """Read ``path``, let ``change`` edit its lines in place, write them back."""
    docs = read_lines(path)
    change(docs)
    write_lines(path, docs)


def put_head(bundle: Path, instance: str, head: StoredHead) -> None:
    """Replace ``instance``'s line in heads.jsonl by ``head`` (a genuine, older one)."""
    def change(heads: list[Doc]) -> None:
        for h in heads:
            if h["instance"] == instance:
                h["body"] = base64.b64encode(head.body).decode()
                h["sig"] = base64.b64encode(head.sig).decode()
    edit_lines(bundle / "heads.jsonl", change)
