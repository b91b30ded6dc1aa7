"""Checking a bundle's ``scitt/`` files with third-party verifiers, and spoiling them.

Nothing here uses histaudit's own COSE or CBOR code: statements are read and edited with
``cbor2`` (through scitt-cose's and pycose's dependency), verified with ``scitt-cose``
0.5.0 (SCITT statements and RFC 9942 receipts), ``pycose`` 1.1.0 (COSE_Sign1) and
``tests/independent/scittcheck`` (Go: github.com/veraison/go-cose, transparency-dev/merkle,
golang.org/x/mod/sumdb/note). docs/scitt.md names the fields.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cbor2
import scitt_cose
from pycose.keys import CoseKey
from pycose.messages import CoseMessage

__all__ = ["FIELDS", "GoCheck", "build_scittcheck", "payload_of", "pycose_verifies",
           "scitt_cose_verifies", "tamper"]

REPO = Path(__file__).resolve().parents[2]
FIELDS = ("payload", "protected header", "receipt path", "tree size")
"""The single-field tampers every verifier must catch."""


def payload_of(statement: Path) -> bytes:
    """The payload of a COSE_Sign1 file (what an auditor passes as --leaf-entry-hex)."""
    return bytes(cbor2.loads(statement.read_bytes()).value[2])


def scitt_cose_verifies(statement: Path, pem: bytes, *, leaf: bytes | None = None
                        ) -> tuple[bool, bool]:
    """(statement signature verified, every attached receipt verified) by scitt-cose;
    the receipts prove ``leaf``, else the statement's own payload. A receipt verifies
    when scitt-cose says ok and the tree size its proof names is the size the receipt
    signs (protected ``histaudit-tree-size``, which scitt-cose reports unread): RFC 9942
    signs only the root, and for a leaf left of the tree's right border the same path
    folds to the same root under other sizes."""
    data = statement.read_bytes()
    parsed = scitt_cose.parse_signed_statement(data, public_key_pem=pem)
    signed = parsed["signature_verified"] is True
    try:
        receipts = scitt_cose.extract_receipts(data)
    except scitt_cose.CoseError:
        return signed, False
    entry = leaf if leaf is not None else payload_of(statement)
    results = [scitt_cose.verify_receipt(r, leaf_entry_hex=entry.hex(), log_public_key_pem=pem)
               for r in receipts]
    proven = bool(results) and all(
        r.ok and r.tree_size == r.protected_header_ext.get("histaudit-tree-size")
        for r in results)
    return signed, proven


def pycose_verifies(statement: Path, key_file: Path) -> tuple[bool, bool]:
    """(statement signature, every receipt's signature over the root its proof gives)
    checked by pycose, the roots rebuilt by scitt-cose's RFC 9162 fold."""
    key = CoseKey.decode(key_file.read_bytes())
    msg = CoseMessage.decode(statement.read_bytes())
    msg.key = key
    signed = msg.verify_signature()
    proven = True
    for raw in msg.uhdr.get(394, []):
        receipt = CoseMessage.decode(raw)
        receipt.key = key
        size, index, path = cbor2.loads(receipt.uhdr[396][-1][0])
        root = scitt_cose.merkle.root_from_inclusion_proof(
            msg.payload.hex(), index, size, [bytes(p).hex() for p in path])
        proven = proven and root is not None and receipt.verify_signature(
            detached_payload=bytes.fromhex(root))
    return signed, proven


# --- the Go verifier ---------------------------------------------------------------------

class GoCheck:
    """``tests/independent/scittcheck`` built once: run it on a bundle."""

    def __init__(self, binary: Path) -> None:
        self.binary = binary

    def __call__(self, bundle: Path, cose_key: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.binary), str(bundle), str(cose_key)],
                              capture_output=True, text=True, timeout=120, check=False)


def build_scittcheck(out_dir: Path) -> GoCheck:
    """Build the Go verifier (modules from the proxy, go.sum-checked)."""
    out = out_dir / "scittcheck"
    done = subprocess.run(["go", "build", "-o", str(out), "."],
                          cwd=REPO / "tests" / "independent" / "scittcheck",
                          env={**os.environ, "GOFLAGS": "-mod=readonly"},
                          capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise AssertionError(f"cannot build scittcheck: {done.stderr[-1500:]}")
    return GoCheck(out)


# --- tampering ---------------------------------------------------------------------------

def _edit(path: Path, change: Callable[[list[Any]], None]) -> None:
    """Rewrite the COSE_Sign1 at ``path`` after ``change`` edited its four parts; the
    result is canonical CBOR again, so only what was changed is wrong."""
    parts = list(cbor2.loads(path.read_bytes()).value)
    change(parts)
    path.write_bytes(cbor2.dumps(cbor2.CBORTag(18, parts), canonical=True))


def _receipt_proof(change: Callable[[list[Any]], None]) -> Callable[[list[Any]], None]:
    """An edit of a statement's attached receipt's inclusion proof [size, index, path]."""
    def edit(parts: list[Any]) -> None:
        receipt = cbor2.loads(parts[1][394][0])
        rparts = list(receipt.value)
        vdp = dict(rparts[1][396])
        proof = list(cbor2.loads(vdp[-1][0]))
        change(proof)
        vdp[-1] = [cbor2.dumps(proof, canonical=True)]
        rparts[1] = {**rparts[1], 396: vdp}
        parts[1] = {**parts[1], 394: [cbor2.dumps(cbor2.CBORTag(18, rparts), canonical=True)]}
    return edit


def _flip_path(proof: list[Any]) -> None:
    first = bytearray(proof[2][0])
    first[0] ^= 1
    proof[2] = [bytes(first), *proof[2][1:]]


def _grow(proof: list[Any]) -> None:
    proof[0] += 1


def _payload(parts: list[Any]) -> None:
    body = bytes(parts[2])
    assert body.endswith(b'"v":1}'), body[-20:]
    parts[2] = body[:-2] + b"2}"


def _protected(parts: list[Any]) -> None:
    header = dict(cbor2.loads(parts[0]))
    header[15] = {**header[15], 2: header[15][2] + "-other"}  # the CWT subject
    parts[0] = cbor2.dumps(header, canonical=True)


def tamper(bundle: Path, leaf: int, field: str) -> Path:
    """Spoil one ``field`` (of :data:`FIELDS`) of the statement of ``leaf`` in place;
    a receipt edit goes into both the statement and its ``.receipt`` file. Returns the
    statement's path."""
    statement = bundle / "scitt" / "entries" / f"{leaf}.cose"
    edit = {"payload": _payload, "protected header": _protected,
            "receipt path": _receipt_proof(_flip_path),
            "tree size": _receipt_proof(_grow)}[field]
    _edit(statement, edit)
    receipt = cbor2.loads(statement.read_bytes()).value[1][394][0]
    (bundle / "scitt" / "entries" / f"{leaf}.receipt").write_bytes(bytes(receipt))
    return statement
