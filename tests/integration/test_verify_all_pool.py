"""verify --all --full: one pool of worker processes for every instance of the ledger.

A chunk of signatures holds the entries of as many small instances as fit, so an
instance's report waits for chunks that also hold its neighbours'. Each report must still
be exactly the one the instance gets verified alone, in one process, and come in instance
order: checked on a real ledger (both stores) with damage that only the workers see — bad
signatures, bodies out of canonical form — spread over instances and chunk boundaries.
"""

from __future__ import annotations

import pytest

from histaudit.ledger import chain
from histaudit.ledger.keys import KeyFileSigner, TrustStore
from histaudit.ledger.store import Ledger
from histaudit.verify import parallel, verifier
from histaudit.verify.verifier import verify_all, verify_instance
from support.ledgers import LedgerDb
from support.pools import count_pools

SIGNER, STRANGER = KeyFileSigner.generate(), KeyFileSigner.generate()
TRUST = TrustStore([SIGNER.public])
SIZES = {f"wf-{i:02d}": 1 + i % 6 for i in range(24)}  # 1..6 entries: 84 in all
BAD_SIG = {("wf-01", 2), ("wf-04", 1), ("wf-04", 5), ("wf-17", 6), ("wf-23", 6)}
LOOSE = {("wf-05", 3), ("wf-11", 6), ("wf-16", 1)}  # re-encoded with a space, rehashed
STRANGER_AT = {("wf-09", 2)}


def _build(url: str) -> None:
    with Ledger.open(url, create=True) as ledger:
        for rnd in range(1, max(SIZES.values()) + 1):
            for instance, size in SIZES.items():
                if rnd <= size:
                    signer = STRANGER if (instance, rnd) in STRANGER_AT else SIGNER
                    chain.append(ledger, instance, "event.raised", {"round": rnd},
                                 signer=signer)
    with LedgerDb(url) as db:
        db.lift_guards()
        for instance, seq in BAD_SIG:
            db.set_entry(instance, seq, sig=b"\x01" * 64)
        for instance, seq in LOOSE:
            db.rewrite_body(db.entry(instance, seq).leaf, b'"round":', b'"round": ')
        db.restore_guards()


@pytest.fixture
def ledger_url(db_url: str) -> str:
    _build(db_url)
    return db_url


def _order(ledger: Ledger) -> list[str]:
    """The instances in the order ``verify --all`` takes them (newest activity first)."""
    with ledger.snapshot() as snap:
        return snap.instance_ids()


@pytest.mark.parametrize(("chunk", "waiting", "pools"),
                         [(5, 4096, 1), (7, 3, 1), (4096, 4096, 0)])
def test_every_report_is_the_one_the_instance_gets_alone(
        ledger_url: str, monkeypatch: pytest.MonkeyPatch, chunk: int, waiting: int,
        pools: int) -> None:
    with Ledger.open(ledger_url) as ledger:
        order = _order(ledger)
        alone = [verify_instance(ledger, i, trust=TRUST, full=True, workers=1)
                 for i in order]
        monkeypatch.setattr(parallel, "CHUNK", chunk)
        monkeypatch.setattr(verifier, "WAITING", waiting)
        started = count_pools(monkeypatch)
        together = list(verify_all(ledger, trust=TRUST, full=True, workers=2))
    assert len(started) == pools  # one pool for all (none when everything fits a chunk)
    assert sorted(order) == sorted(SIZES)
    assert [r.instance_id for r in together] == order
    assert together == alone
    found = {(r.instance_id, f.seq, f.code) for r in together for f in r.findings}
    # a re-encoded body no longer matches its signature either
    assert {(i, s) for i, s, c in found if c == "signature-invalid"} == BAD_SIG | LOOSE
    canonical = {(r.instance_id, f.seq) for r in together for f in r.findings
                 if "canonical form" in f.message}
    assert canonical == LOOSE
    assert ("wf-09", 2, "key-untrusted") in found
    clean = [r.instance_id for r in together if r.ok]
    assert clean and "wf-00" in clean


def test_an_instance_that_fails_mid_run_leaves_no_worker_behind(
        ledger_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import multiprocessing

    monkeypatch.setattr(parallel, "CHUNK", 3)
    started = count_pools(monkeypatch)
    real = verifier._Chain.scan

    def scan(self: verifier._Chain, chunks: object, as_entry: object = None) -> None:
        if self.instance == order[20]:
            raise OSError("disk I/O error")
        real(self, chunks, as_entry)  # type: ignore[arg-type]

    monkeypatch.setattr(verifier._Chain, "scan", scan)
    with Ledger.open(ledger_url) as ledger:
        order = _order(ledger)
        reports = verify_all(ledger, trust=TRUST, full=True, workers=2)
        seen: list[str] = []
        with pytest.raises(OSError, match="disk I/O error"):
            seen.extend(report.instance_id for report in reports)
    assert started == [1]
    assert seen == order[:len(seen)] and len(seen) < 20
    assert multiprocessing.active_children() == []
