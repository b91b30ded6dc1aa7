"""Reading and spoiling the JSON-lines files of an exported bundle (docs/bundle.md)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from histaudit.bundle.envelope import MANIFEST_TYPE, pae
from histaudit.bundle.export import export
from histaudit.ledger.keys import Signer, TrustStore, generate_keypair
from histaudit.ledger.records import StoredHead
from histaudit.ledger.store import Ledger

from .ledgers import LedgerDb, append_order

__all__ = ["KEPT_CASES", "Built", "build_bundle", "edit_lines", "kept_payload_bundle",
           "manifest_of", "put_head", "read_lines", "resign_manifest", "write_lines"]

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


@dataclass(frozen=True)
class Built:
    bundle: Path
    pub: Path          # the exporter's public key file (a --trust for the command)
    signer: Signer
    trust: TrustStore


def build_bundle(root: Path, instances: tuple[str, ...] = ("order-1", "order-2")) -> Built:
    """A real SQLite ledger of order workflows under ``root``, exported with payloads to
    ``root / "bundle"`` through the library (what ``histaudit export`` calls)."""
    _, pub, signer = generate_keypair(root / "keys", name="exporter")
    trust = TrustStore([signer.public])
    url = f"sqlite:///{root / 'ledger.db'}"
    with Ledger.open(url, create=True) as ledger:
        for instance in instances:
            append_order(ledger, signer, instance)
        export(ledger, [], root / "bundle", signer=signer, trust=trust, with_payloads=True)
    return Built(root / "bundle", pub, signer, trust)


def manifest_of(bundle: Path) -> dict[str, Any]:
    """The manifest inside the bundle's DSSE envelope, parsed."""
    env = json.loads((bundle / "manifest.dsse.json").read_bytes())
    return dict(json.loads(base64.b64decode(env["payload"])))


def resign_manifest(bundle: Path, signer: Signer, change: Callable[[Doc], object]) -> None:
    """Let ``change`` edit the manifest, then sign it again properly with ``signer``: what
    a hostile exporter holding a trusted key can hand an auditor."""
    manifest = manifest_of(bundle)
    change(manifest)
    # json, not orjson: a hostile manifest may hold integers past 64 bits.
    payload = json.dumps(manifest, sort_keys=True, indent=2).encode()
    env = {"payloadType": MANIFEST_TYPE, "payload": base64.b64encode(payload).decode(),
           "signatures": [{"keyid": signer.kid, "sig": base64.b64encode(
               signer.sign(pae(MANIFEST_TYPE, payload))).decode()}]}
    (bundle / "manifest.dsse.json").write_bytes(orjson.dumps(env))


#: The ways a bundle of kept payloads (format.md §8.3) is made, for kept_payload_bundle.
KEPT_CASES = ("clean", "row deleted before export", "payload line deleted",
              "exported without payloads")


def kept_payload_bundle(url: str, signer: Signer, bundle: Path, case: str
                        ) -> dict[int, str]:
    """One instance ``kept-1`` written by the interceptor's recorder (three outputs, each
    signed as kept), the one at entry 1 erased with a signed record, exported to
    ``bundle`` the way ``case`` (one of :data:`KEPT_CASES`) says; returns seq -> commitment.
    """
    from histaudit.interceptor.recorder import AuditRecorder
    from histaudit.ledger import chain

    refs: dict[int, str] = {}
    with Ledger.open(url, create=True) as ledger:
        recorder = AuditRecorder(ledger, signer)
        for n in range(1, 4):
            p = recorder.commit("kept-1", f'{{"card":"4111","n":{n}}}')
            assert p.ref is not None and p.ref["k"] is True
            refs[recorder.append("kept-1", "activity.completed", {"output": p.ref}, p).seq] = \
                p.ref["c"]
        chain.erase_payload(ledger, "kept-1", refs[1], signer=signer, record={"entry": 1})
    if case == "row deleted before export":
        with LedgerDb(url) as db:
            db.run("DELETE FROM histaudit_payloads WHERE commitment = :c", c=refs[2])
    with Ledger.open(url) as ledger:
        export(ledger, ["kept-1"], bundle, signer=signer, trust=TrustStore([signer.public]),
               with_payloads=case != "exported without payloads")
    if case == "payload line deleted":
        edit_lines(bundle / "payloads.jsonl",
                   lambda docs: docs.remove(next(d for d in docs if d["commitment"] == refs[3])))
    return refs
