"""A bundle's ``scitt/`` files: its entries as SCITT statements with COSE receipts, and an
Agent Action Capsule per guarded call, for tools that speak those standards.

``histaudit export --format scitt`` writes them beside the bundle's own files, listed and
hashed in the signed manifest like the others (docs/scitt.md is the spec)::

    scitt/index.json                  what each file below is
    scitt/entries/<leaf>.cose         a transparent statement: the entry body as payload,
                                      its inclusion receipt in the unprotected header (394)
    scitt/entries/<leaf>.receipt      that receipt alone
    scitt/capsules/<leaf>.cose        the Capsule of the guarded call whose closing entry (or
                                      unanswered intent) is leaf <leaf>, with that leaf's receipt
    scitt/consistency/<size>.receipt  the export's tree extends the stored checkpoint of <size>
    scitt/keys/<kid>.pem, .cose_key   the signing keys (copies of keys.json, not trust anchors)

Every receipt proves its leaf against the bundle's checkpoint and carries that checkpoint's
note with its witness cosignatures. :func:`check_scitt` is what ``verify --bundle`` adds:
every exported entry has its statement and receipt, each verifies with a trusted key
against the signed checkpoint, and the Capsules are exactly those the entries imply.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import orjson

from histaudit.errors import FormatError, InputError, SignatureError
from histaudit.ledger import merkle
from histaudit.ledger import records as rec
from histaudit.ledger.checkpoint import Checkpoint, parse_note
from histaudit.ledger.keys import PublicKey, Signer, TrustStore
from histaudit.verify.findings import Finding

from . import cose
from .capsules import Capsule, capsules_of
from .envelope import b64

__all__ = ["INDEX", "check_scitt", "scitt_files"]

INDEX = "scitt/index.json"
FORMAT, VERSION = "histaudit-scitt", 1
ENTRY_TYPE = "application/vnd.histaudit.entry+json"
CAPSULE_TYPE = "application/json"
MAX_CONSISTENCY = 32
"""Consistency receipts from at most this many stored checkpoints, the newest."""


def scitt_files(rows: Mapping[str, Sequence[rec.StoredEntry]], tree: merkle.Tree,
                cp: Checkpoint, note: bytes, signer: Signer, keys: Iterable[PublicKey],
                earlier: Sequence[tuple[int, bytes]]) -> dict[str, bytes]:
    """The ``scitt/`` files for the exported ``rows`` (by instance, chain order) under the
    checkpoint ``cp`` (``note``: as the bundle carries it, cosignatures included);
    ``earlier``: stored checkpoints as (size, note), for consistency receipts.

    Every message is signed in one :meth:`Signer.sign_all`, each distinct one once: a
    receipt's signature covers only its protected header and the root, so the receipts of
    one instance (one subject) share theirs, and a PKCS#11 token or transit service is
    asked once per export, not once per entry."""
    batch = _Batch(signer.kid)
    index: dict[str, Any] = {"format": FORMAT, "version": VERSION, "origin": cp.origin,
                             "checkpoint": {"size": cp.size, "root": b64(cp.root)},
                             "statements": [], "capsules": [], "consistency": [], "keys": []}
    receipts: dict[int, int] = {}  # leaf -> its receipt's place in the batch
    # (file name, statement's place in the batch, its receipt's), for transparent statements
    statements: list[tuple[str, int, int]] = []
    for instance, chain in rows.items():
        for r in chain:
            receipts[r.leaf] = batch.add(cose.inclusion_receipt(
                signer.kid, issuer=cp.origin, subject=instance, size=cp.size, index=r.leaf,
                path=tree.inclusion_proof(r.leaf, cp.size), root=cp.root, note=note))
            name = f"scitt/entries/{r.leaf}"
            statements.append((f"{name}.cose", batch.add(_statement(
                signer.kid, r.body, ENTRY_TYPE, cp.origin, instance)), receipts[r.leaf]))
            index["statements"].append({"leaf": r.leaf, "instance": instance, "seq": r.seq,
                                        "statement": f"{name}.cose",
                                        "receipt": f"{name}.receipt"})
        for c in _capsules(instance, chain, cp.origin):
            name = f"scitt/capsules/{c.leaf}.cose"
            statements.append((name, batch.add(_statement(
                signer.kid, c.payload, CAPSULE_TYPE, cp.origin, instance)), receipts[c.leaf]))
            index["capsules"].append({"file": name, "instance": instance,
                                      "intent_seq": c.intent_seq, "leaf": c.leaf,
                                      "capsule_id": c.capsule_id,
                                      "verdict_class": c.verdict_class})
    older = sorted({s: n for s, n in earlier if 0 < s < cp.size}.items())[-MAX_CONSISTENCY:]
    consistency = []
    for size, old_note in older:
        name = f"scitt/consistency/{size}.receipt"
        consistency.append((name, batch.add(cose.consistency_receipt(
            signer.kid, issuer=cp.origin, old_size=size, size=cp.size,
            path=tree.consistency_proof(size, cp.size), root=cp.root, old_note=old_note,
            note=note))))
        index["consistency"].append({"file": name, "from_size": size})
    signed = batch.sign(signer)
    files: dict[str, bytes] = {}
    for leaf, at in receipts.items():
        files[f"scitt/entries/{leaf}.receipt"] = signed[at].encode()
    for name, at, receipt in statements:
        files[name] = cose.with_receipts(signed[at], [signed[receipt].encode()]).encode()
    for name, at in consistency:
        files[name] = signed[at].encode()
    for key in keys:
        base = f"scitt/keys/{key.kid}"
        files[f"{base}.pem"], files[f"{base}.cose_key"] = cose.pem(key), cose.cose_key(key)
        index["keys"].append({"kid": key.kid, "pem": f"{base}.pem",
                              "cose_key": f"{base}.cose_key"})
    files[INDEX] = orjson.dumps(index, option=orjson.OPT_INDENT_2)
    return files


class _Batch:
    """Unsigned messages, signed together at the end, each distinct Sig_structure once."""

    def __init__(self, kid: str) -> None:
        self.kid = kid
        self.messages: list[tuple[cose.Sign1, bytes]] = []

    def add(self, item: tuple[cose.Sign1, bytes]) -> int:
        self.messages.append(item)
        return len(self.messages) - 1

    def sign(self, signer: Signer) -> list[cose.Sign1]:
        distinct = list(dict.fromkeys(tbs for _, tbs in self.messages))
        signatures = dict(zip(distinct, signer.sign_all(distinct), strict=True))
        return [replace(msg, signature=signatures[tbs]) for msg, tbs in self.messages]


def _statement(kid: str, payload: bytes, content_type: str, issuer: str,
               subject: str) -> tuple[cose.Sign1, bytes]:
    return cose.unsigned(kid, {cose.CONTENT_TYPE: content_type,
                               cose.CWT_CLAIMS: {cose.ISS: issuer, cose.SUB: subject}},
                         {}, payload)


def _capsules(instance: str, chain: Iterable[rec.StoredEntry], origin: str) -> list[Capsule]:
    entries = []
    for r in chain:
        try:
            entries.append(rec.parse_entry(r.body))
        except FormatError:
            continue  # the chain's verifier reports it; it implies no Capsule
    return capsules_of((e for e in entries if e.instance == instance), origin=origin)


# --- verification ----------------------------------------------------------------------

def check_scitt(contents: Mapping[str, bytes], cp: Checkpoint,
                rows: Mapping[str, Sequence[rec.StoredEntry]], trust: TrustStore
                ) -> list[Finding]:
    """Findings about the bundle's ``scitt/`` files (docs/scitt.md, "Verifying"): every
    exported entry has a statement of exactly its body, signed by a trusted key, whose
    receipt leads to the checkpoint's root at the entry's leaf; the Capsules are exactly
    those the entries imply; every consistency receipt leads from a trusted earlier
    checkpoint to this one. InputError for an index that does not read."""
    index = _index(contents[INDEX])
    if index.get("origin") != cp.origin or index.get("checkpoint") != {
            "size": cp.size, "root": b64(cp.root)}:
        return [Finding.make("scitt-statement-invalid", "(bundle)", None,
                             f"{INDEX} is not about the bundle's checkpoint")]
    check = _Checker(contents, cp, trust)
    by_leaf = {item.get("leaf"): item for item in _items(index, "statements")}
    listed = _items(index, "capsules")
    implied: set[str] = set()
    for instance, chain in rows.items():
        for r in chain:
            check.statement(r, by_leaf.pop(r.leaf, None))
        implied |= check.capsules(instance, chain, listed)
    for item in listed:
        if item.get("file") not in implied:
            check.out.append(Finding.make(
                "capsule-invalid", str(item.get("instance")), None,
                f"{INDEX} lists a Capsule {item.get('file')!r} no exported entry implies"))
    for item in by_leaf.values():
        check.out.append(Finding.make("scitt-statement-invalid", str(item.get("instance")),
                                      None, f"{INDEX} lists a statement of leaf "
                                            f"{item.get('leaf')!r}, not an exported entry"))
    for item in _items(index, "consistency"):
        check.consistency(item)
    return check.out


def _index(data: bytes) -> dict[str, Any]:
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise InputError(f"bundle {INDEX} is not JSON ({exc.msg})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise InputError(f"bundle {INDEX} is not a histaudit SCITT index")
    if type(doc.get("version")) is not int or doc["version"] != VERSION:
        raise InputError(f"bundle {INDEX} has unknown version {doc.get('version')!r} (this "
                         f"histaudit reads {VERSION})")
    return doc


def _items(index: Mapping[str, Any], member: str) -> list[dict[str, Any]]:
    items = index.get(member)
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise InputError(f"bundle {INDEX}: {member} is not a list of objects")
    return items


class _Checker:
    def __init__(self, contents: Mapping[str, bytes], cp: Checkpoint,
                 trust: TrustStore) -> None:
        self.contents, self.cp, self.trust = contents, cp, trust
        self.out: list[Finding] = []

    def _file(self, name: object) -> bytes | None:
        return self.contents.get(name) if isinstance(name, str) else None

    def statement(self, row: rec.StoredEntry, item: Mapping[str, Any] | None) -> None:
        def bad(code: str, problem: str) -> None:
            self.out.append(Finding.make(code, row.instance, row.seq,
                                         f"entry {row.seq} (leaf {row.leaf}): {problem}"))

        data = self._file(item.get("statement")) if item is not None else None
        receipt_file = self._file(item.get("receipt")) if item is not None else None
        if data is None or receipt_file is None:
            bad("scitt-statement-invalid", "no SCITT statement and receipt in the bundle")
            return
        where = f"scitt statement of leaf {row.leaf}"
        try:
            msg = cose.read_sign1(data, where)
            self._signed(msg, where, ENTRY_TYPE, row.instance)
        except (FormatError, SignatureError) as exc:
            bad("scitt-statement-invalid", str(exc))
            return
        if msg.payload != row.body:
            bad("scitt-statement-invalid", "the statement's payload is not the entry's body")
            return
        try:
            attached = cose.receipts_of(msg, where)
        except FormatError as exc:
            bad("scitt-receipt-invalid", str(exc))
            return
        if attached != [receipt_file]:
            bad("scitt-receipt-invalid", "the statement does not carry exactly its receipt "
                                         "file")
        for receipt in dict.fromkeys([*attached, receipt_file]):
            problem = self._receipt(receipt, row.body, row.leaf, f"receipt of leaf {row.leaf}")
            if problem is not None:
                bad("scitt-receipt-invalid", problem)

    def _signed(self, msg: cose.Sign1, where: str, content_type: str, subject: str) -> None:
        cose.verify_sign1(msg, self.trust, where)
        claims = msg.claims()
        if msg.protected.get(cose.CONTENT_TYPE) != content_type:
            raise FormatError(f"{where} has content type "
                              f"{msg.protected.get(cose.CONTENT_TYPE)!r}, not {content_type}")
        if claims.get(cose.ISS) != self.cp.origin or claims.get(cose.SUB) != subject:
            raise FormatError(f"{where} names issuer {claims.get(cose.ISS)!r} and subject "
                              f"{claims.get(cose.SUB)!r}, not this ledger and instance")

    def _receipt(self, data: bytes, leaf_body: bytes, leaf: int, where: str) -> str | None:
        """What is wrong with an inclusion receipt of ``leaf_body`` at ``leaf``, or None."""
        try:
            got = cose.read_receipt(data, self.trust, where, leaf=leaf_body)
        except (FormatError, SignatureError) as exc:
            return str(exc)
        if (got.size, got.index, got.root) != (self.cp.size, leaf, self.cp.root):
            return (f"{where} proves leaf {got.index} of a tree of {got.size}, not leaf {leaf} "
                    f"of the checkpoint's {self.cp.size}")
        if got.note != self.contents.get("checkpoint.note"):
            return f"{where} does not carry the bundle's checkpoint note"
        return None

    def capsules(self, instance: str, chain: Sequence[rec.StoredEntry],
                 listed: Sequence[Mapping[str, Any]]) -> set[str]:
        """Check the Capsules ``chain`` implies; return their file names."""
        bodies = {r.leaf: r.body for r in chain}
        names = set()
        for c in _capsules(instance, chain, self.cp.origin):
            name = f"scitt/capsules/{c.leaf}.cose"
            names.add(name)
            problem = self._capsule(c, name, bodies[c.leaf],
                                    any(i.get("file") == name for i in listed))
            if problem is not None:
                self.out.append(Finding.make(
                    "capsule-invalid", instance, c.intent_seq,
                    f"the {c.verdict_class} call of entry {c.intent_seq}: {problem}"))
        return names

    def _capsule(self, c: Capsule, name: str, leaf_body: bytes, listed: bool) -> str | None:
        data = self._file(name)
        if data is None or not listed:
            return f"its Capsule {name} is not in the bundle"
        try:
            msg = cose.read_sign1(data, name)
            self._signed(msg, name, CAPSULE_TYPE, c.instance)
            receipts = cose.receipts_of(msg, name)
        except (FormatError, SignatureError) as exc:
            return str(exc)
        if msg.payload != c.payload:
            return f"{name} is not the Capsule its entries imply"
        if len(receipts) != 1:
            return f"{name} carries {len(receipts)} receipts, not one"
        return self._receipt(receipts[0], leaf_body, c.leaf, f"{name} receipt")

    def consistency(self, item: Mapping[str, Any]) -> None:
        name, data = item.get("file"), self._file(item.get("file"))
        problem = None
        if data is None:
            problem = f"{name!r} is not in the bundle"
        else:
            try:
                old = _old_checkpoint(data, self.trust, str(name))
                got = cose.read_receipt(data, self.trust, str(name), old_root=old.root)
                if (old.origin, got.index, got.size, got.root) != (
                        self.cp.origin, old.size, self.cp.size, self.cp.root):
                    problem = (f"{name} leads from {old.origin} size {got.index} to size "
                               f"{got.size}, not to this checkpoint")
            except (FormatError, SignatureError, InputError) as exc:
                problem = str(exc)
        if problem is not None:
            self.out.append(Finding.make("scitt-receipt-invalid", "(bundle)", None, problem))


def _old_checkpoint(data: bytes, trust: TrustStore, name: str) -> Checkpoint:
    msg = cose.read_sign1(data, name)
    old = msg.unprotected.get(cose.CHECKPOINT_FROM)
    if not isinstance(old, bytes):
        raise FormatError(f"{name} does not carry the earlier checkpoint's note")
    return parse_note(old, trust, source=f"{name} earlier checkpoint")
