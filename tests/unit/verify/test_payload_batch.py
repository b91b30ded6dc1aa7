"""``verify --full`` looks payloads up 256 at a time; the findings are those of one lookup
per reference, on a real ledger (SQLite and PostgreSQL) with payloads changed, deleted
and erased across batch boundaries."""

from __future__ import annotations

from histaudit.ledger import chain
from histaudit.ledger.keys import KeyFileSigner, TrustStore
from histaudit.ledger.kinds import Kind
from histaudit.ledger.store import Ledger
from histaudit.verify.verifier import verify_chain
from support.ledgers import LedgerDb, committed

INSTANCE = "wf-batch"
N = 700  # entries, each referencing one kept payload: batches of 256, 256 and 188


def test_batched_payload_lookups_find_what_single_lookups_find(db_url: str) -> None:
    signer = KeyFileSigner.generate()
    refs = []
    with Ledger.open(db_url, create=True) as ledger:
        for i in range(N):
            ref, rows = committed(b'{"n":%d}' % i)
            ref["k"] = True  # signed as kept: its row must stay or be erased
            refs.append(ref)
            chain.append(ledger, INSTANCE, Kind.ACTIVITY_COMPLETED, {"task_id": i, "output": ref},
                         signer=signer, payloads=rows, durable=False)
        gone, _ = chain.erase_payload(ledger, INSTANCE, refs[300]["c"], signer=signer,
                                      record={"reason": "test"})
        assert gone
    changed, deleted = (5, 255, 256, 511, 699), (0, 257, 512, 698)
    with LedgerDb(db_url) as db:
        db.lift_guards()
        for i in changed:
            assert db.count("UPDATE histaudit_payloads SET data = :d WHERE commitment = :c",
                            d=b'{"n":-1}', c=refs[i]["c"]) == 1
        for i in deleted:
            assert db.count("DELETE FROM histaudit_payloads WHERE commitment = :c",
                            c=refs[i]["c"]) == 1
        db.restore_guards()
    trust = TrustStore([signer.public])
    with Ledger.open(db_url) as ledger, ledger.snapshot() as snap:
        head = snap.head(INSTANCE)
        one = verify_chain(INSTANCE, snap.entries(INSTANCE), head, trust=trust,
                           payload_lookup=snap.payload)
        many = verify_chain(INSTANCE, snap.entries(INSTANCE), head, trust=trust,
                            payload_lookup=snap.payload, payloads_lookup=snap.payloads)
    assert [f.to_json() for f in many.findings] == [f.to_json() for f in one.findings]
    by_code: dict[str, list[int]] = {}
    for f in many.findings:
        by_code.setdefault(f.code, []).append(f.seq)
    # seq = index + 1; the erased payload (index 300) is no finding
    assert by_code == {"payload-mismatch": [i + 1 for i in changed],
                       "payload-missing": [i + 1 for i in deleted]}
