"""Tamper suite: an attacker with file or superuser access edits a real ledger directly.

Each test builds a real ledger (three interleaved instances with payloads), then plays an
attacker who first removes the append-only triggers (SQLite: ``DROP TRIGGER``;
PostgreSQL: ``ALTER TABLE ... DISABLE TRIGGER ALL`` as superuser) and then edits rows with
plain SQL. The verifier must name the attack with its specific, stable finding code, at
the entry where it happened. Every case runs on SQLite and on a real PostgreSQL server
(the ``db_url`` fixture; its postgres parameter carries the ``postgres`` marker).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from histaudit.ledger import chain
from histaudit.ledger import records as fmt
from histaudit.ledger.keys import KeyFileSigner, PublicKey, Signer, TrustStore
from histaudit.ledger.records import StoredHead
from histaudit.ledger.store import Ledger
from histaudit.verify.findings import CODES
from histaudit.verify.report import Report
from support.ledgers import LedgerDb, committed, verify_url

# Interleaved appends, so every instance's leaves are spread over the ledger.
INSTANCES = {"wf-alpha": 10, "wf-beta": 10, "wf-gamma": 8}
VICTIM = "wf-alpha"
PAYLOAD_EVERY = 3  # entries 3, 6, 9 of each instance carry a stored payload



# --- building a real ledger -------------------------------------------------------------

@dataclass
class Built:
    url: str
    signer: Signer
    trust: TrustStore
    #: instance -> seq -> the signed head as it was right after entry ``seq`` was appended
    heads: dict[str, dict[int, StoredHead]] = field(default_factory=dict)
    #: instance -> seq -> commitment of the payload that entry carries
    commitments: dict[str, dict[int, str]] = field(default_factory=dict)


def _kind(seq: int, last: int) -> str:
    # No activity.* kinds: behaviour analysis has nothing to say about these chains.
    if seq == 1:
        return "workflow.started"
    if seq == last:
        return "workflow.completed"
    return "event.raised" if seq % 2 else "timer.fired"


def build_ledger(url: str) -> Built:
    signer = KeyFileSigner.generate()
    built = Built(url=url, signer=signer, trust=TrustStore([signer.public]))
    with Ledger.open(url, create=True) as ledger:
        for rnd in range(1, max(INSTANCES.values()) + 1):
            for instance, count in INSTANCES.items():
                if rnd > count:
                    continue
                data: dict[str, Any] = {"round": rnd, "note": f"{instance} step {rnd}",
                                        "ok": True, "tags": ["a", "b"]}
                stored = None
                if rnd % PAYLOAD_EVERY == 0:
                    payload = f"secret input of {instance} #{rnd}".encode() * 4
                    data["input"], stored = committed(payload)
                    built.commitments.setdefault(instance, {})[rnd] = data["input"]["c"]
                chain.append(ledger, instance, _kind(rnd, count), data, signer=signer,
                              payloads=stored)
                head = ledger.head(instance)
                assert head is not None
                built.heads.setdefault(instance, {})[rnd] = head
    return built


@pytest.fixture
def built(db_url: str) -> Built:
    return build_ledger(db_url)


# --- verifying ---------------------------------------------------------------------------

def verify(url: str, instance: str, trust: TrustStore, *, full: bool = False,
           workers: int = 1) -> Report:
    """Verify from a freshly opened ledger, as an auditor would after the fact."""
    return verify_url(url, instance, trust, full=full, workers=workers)


def pairs(report: Report) -> set[tuple[str, int | None]]:
    return {(f.code, f.seq) for f in report.findings}


def assert_clean(built: Built, *instances: str) -> None:
    for instance in instances:
        for full in (False, True):
            report = verify(built.url, instance, built.trust, full=full)
            assert report.findings == (), (instance, full, report.findings)
            assert report.ok and report.entries == INSTANCES[instance]


def others(*skip: str) -> list[str]:
    return [i for i in INSTANCES if i not in skip]


# --- the attacker: direct SQL access (file access, or PostgreSQL superuser) ---------------

@pytest.fixture
def attacker(built: Built) -> Iterator[LedgerDb]:
    """The database with its append-only enforcement removed (only verification is left)."""
    with LedgerDb(built.url) as atk:
        atk.lift_guards()
        yield atk


def flip(data: bytes, pos: int, mask: int = 0x01) -> bytes:
    return data[:pos] + bytes([data[pos] ^ mask]) + data[pos + 1:]


def forge(original: bytes, signer: Signer, **changes: Any) -> tuple[bytes, str, bytes]:
    """A well-formed entry like ``original`` with ``changes``: (body, hash, signature)."""
    e = fmt.parse_entry(original)
    fields = {"instance": e.instance, "seq": e.seq, "leaf": e.leaf, "prev": e.prev,
              "kind": e.kind, "ts": e.ts, "kid": signer.kid, "data": dict(e.data)}
    fields.update(changes)
    body = fmt.entry_body(**fields)
    return body, fmt.sha256_hex(body), signer.sign(body)


# --- baseline ----------------------------------------------------------------------------

def test_every_code_asserted_here_is_a_stable_code() -> None:
    used = {"body-changed", "link-broken", "head-mismatch", "signature-invalid",
            "key-untrusted", "key-outside-window", "seq-gap", "seq-duplicate",
            "seq-reordered", "tail-truncated", "head-missing", "head-invalid",
            "instance-mismatch", "entry-malformed", "payload-mismatch", "instance-missing"}
    assert used <= set(CODES)


def test_clean_ledger_has_no_findings(built: Built) -> None:
    assert_clean(built, *INSTANCES)
    with Ledger.open(built.url) as ledger:
        assert sorted(ledger.instance_ids()) == sorted(INSTANCES)
        for instance, count in INSTANCES.items():
            rows = list(ledger.entries(instance))
            assert [r.seq for r in rows] == list(range(1, count + 1))
            for seq, commitment in built.commitments[instance].items():
                assert ledger.payload(commitment) is not None, (instance, seq)
        total = sum(INSTANCES.values())
        assert [r.leaf for r in ledger.all_entries()] == list(range(total))
    # The process-pool signature path agrees with the in-process one.
    report = verify(built.url, VICTIM, built.trust, full=True, workers=2)
    assert report.findings == ()


def test_erasing_payloads_keeps_the_ledger_verifying(built: Built) -> None:
    with Ledger.open(built.url) as ledger:
        for commitment in built.commitments[VICTIM].values():
            erase = {"signer": built.signer, "record": {"reason": "test"}}
            assert chain.erase_payload(ledger, VICTIM, commitment, **erase)[0] is True
            assert ledger.payload(commitment) is None
            # Already gone: recorded again, erased nothing.
            assert chain.erase_payload(ledger, VICTIM, commitment, **erase)[0] is False
    assert_clean(built, *others(VICTIM))
    erasures = len(built.commitments[VICTIM]) * 2  # one signed payload.erased per call
    for full in (False, True):
        report = verify(built.url, VICTIM, built.trust, full=full)
        assert report.findings == () and report.entries == INSTANCES[VICTIM] + erasures


# --- entry bodies, hashes and signatures -------------------------------------------------

def test_body_byte_changed_is_body_changed(built: Built, attacker: LedgerDb) -> None:
    row = attacker.entry(VICTIM, 5)
    pos = row.body.index(b'"note":"') + len(b'"note":"')
    forged = flip(row.body, pos)  # still valid JSON: one letter of a string changed
    fmt.parse_entry(forged)
    attacker.set_entry(VICTIM, 5, body=forged)  # hash column left as it was

    report = verify(built.url, VICTIM, built.trust)
    assert not report.ok
    assert ("body-changed", 5) in pairs(report)
    assert report.codes() <= {"body-changed", "link-broken"}
    assert all(f.seq is not None and f.seq >= 5 for f in report.findings)
    full = verify(built.url, VICTIM, built.trust, full=True)
    assert ("body-changed", 5) in pairs(full) and ("signature-invalid", 5) in pairs(full)
    assert_clean(built, *others(VICTIM))


def test_body_edited_with_hash_recomputed_breaks_the_next_link(built: Built,
                                                                attacker: LedgerDb) -> None:
    row = attacker.entry(VICTIM, 5)
    forged = row.body.replace(b'"round":5', b'"round":6')
    assert forged != row.body
    attacker.set_entry(VICTIM, 5, body=forged, hash=fmt.sha256_hex(forged))

    report = verify(built.url, VICTIM, built.trust)
    assert pairs(report) == {("link-broken", 6)}
    assert "body-changed" not in report.codes()
    full = verify(built.url, VICTIM, built.trust, full=True)
    assert pairs(full) == {("link-broken", 6), ("signature-invalid", 5)}
    assert_clean(built, *others(VICTIM))


def test_last_body_edited_with_hash_recomputed_is_head_mismatch(built: Built,
                                                                attacker: LedgerDb) -> None:
    last = INSTANCES[VICTIM]
    row = attacker.entry(VICTIM, last)
    forged = row.body.replace(b'"ok":true', b'"ok":false')
    assert forged != row.body
    attacker.set_entry(VICTIM, last, body=forged, hash=fmt.sha256_hex(forged))

    report = verify(built.url, VICTIM, built.trust)
    assert pairs(report) == {("head-mismatch", last)}
    assert "body-changed" not in report.codes()
    assert_clean(built, *others(VICTIM))


@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_signature_flipped_is_found_only_in_full_mode(built: Built, attacker: LedgerDb,
                                                      where: str) -> None:
    row = attacker.entry(VICTIM, 5)
    pos = {"first": 0, "middle": len(row.sig) // 2, "last": len(row.sig) - 1}[where]
    attacker.set_entry(VICTIM, 5, sig=flip(row.sig, pos, 0x80))

    default = verify(built.url, VICTIM, built.trust)
    assert default.findings == () and default.ok  # default mode does not check signatures
    full = verify(built.url, VICTIM, built.trust, full=True)
    assert pairs(full) == {("signature-invalid", 5)}
    assert not full.ok
    pooled = verify(built.url, VICTIM, built.trust, full=True, workers=2)
    assert pairs(pooled) == {("signature-invalid", 5)}


def test_entries_resigned_by_an_untrusted_key_are_key_untrusted(built: Built,
                                                                attacker: LedgerDb) -> None:
    """The attacker rewrites entry 5 and re-chains and re-signs everything after it, and
    the head, with a key of their own: a perfectly consistent chain, except for the key."""
    evil = KeyFileSigner.generate()
    last = INSTANCES[VICTIM]
    prev = attacker.entry(VICTIM, 4).hash
    final: fmt.Entry | None = None
    for seq in range(5, last + 1):
        row = attacker.entry(VICTIM, seq)
        changes: dict[str, Any] = {"prev": prev}
        if seq == 5:
            changes["data"] = {**fmt.parse_entry(row.body).data, "note": "approved by nobody"}
        body, digest, sig = forge(row.body, evil, **changes)
        attacker.set_entry(VICTIM, seq, body=body, hash=digest, sig=sig)
        prev, final = digest, fmt.parse_entry(body)
    assert final is not None
    hbody = fmt.head_body(instance=VICTIM, seq=last, leaf=final.leaf, hash=prev, ts=final.ts,
                          kid=evil.kid)
    attacker.set_head(VICTIM, seq=last, body=hbody, sig=evil.sign(hbody))

    for full in (False, True):
        report = verify(built.url, VICTIM, built.trust, full=full)
        assert report.codes() == {"key-untrusted"}, report.findings
        assert {f.seq for f in report.findings} == set(range(5, last + 1))
        assert not report.ok
    # Only the key gives it away: trusting the attacker makes the forgery verify.
    fooled = TrustStore([built.signer.public, evil.public])
    assert verify(built.url, VICTIM, fooled, full=True).findings == ()


def test_single_entry_resigned_by_an_untrusted_key(built: Built, attacker: LedgerDb) -> None:
    evil = KeyFileSigner.generate()
    row = attacker.entry(VICTIM, 5)
    body, digest, sig = forge(row.body, evil)
    attacker.set_entry(VICTIM, 5, body=body, hash=digest, sig=sig)
    report = verify(built.url, VICTIM, built.trust, full=True)
    assert ("key-untrusted", 5) in pairs(report)
    assert "signature-invalid" not in report.codes()  # an unknown key is not checked


# --- key validity windows ----------------------------------------------------------------

def _windowed(signer: Signer, *, not_before: str | None = None,
              not_after: str | None = None) -> TrustStore:
    return TrustStore([PublicKey(kid=signer.kid, raw=signer.public.raw,
                                 not_before=not_before, not_after=not_after)])


@pytest.mark.parametrize("window", [{"not_after": "2000-01-01T00:00:00Z"},
                                    {"not_before": "2999-01-01T00:00:00Z"}])
def test_key_used_outside_its_window_is_key_outside_window(built: Built,
                                                           window: dict[str, str]) -> None:
    trust = _windowed(built.signer, **window)
    last = INSTANCES[VICTIM]
    for full in (False, True):
        report = verify(built.url, VICTIM, trust, full=full)
        assert report.codes() == {"key-outside-window"}, report.findings
        assert {f.seq for f in report.findings} == set(range(1, last + 1))
        assert not report.ok


def test_key_retired_mid_chain_flags_only_later_entries(built: Built,
                                                       attacker: LedgerDb) -> None:
    """The key was retired at entry 5's time; everything signed after that is suspect."""
    cut = fmt.parse_entry(attacker.entry(VICTIM, 5).body).ts
    report = verify(built.url, VICTIM, _windowed(built.signer, not_after=cut))
    assert report.codes() == {"key-outside-window"}
    later = {s for s in range(1, INSTANCES[VICTIM] + 1)
             if fmt.parse_entry(attacker.entry(VICTIM, s).body).ts > cut}
    assert later >= set(range(6, INSTANCES[VICTIM] + 1))
    assert {f.seq for f in report.findings} == later


# --- sequence: gaps, duplicates, order, truncation ---------------------------------------

def test_middle_entry_deleted_is_seq_gap(built: Built, attacker: LedgerDb) -> None:
    attacker.delete_entries(VICTIM, 5)
    report = verify(built.url, VICTIM, built.trust)
    assert pairs(report) == {("seq-gap", 6)}
    assert verify(built.url, VICTIM, built.trust, full=True).codes() == {"seq-gap"}
    assert_clean(built, *others(VICTIM))


@pytest.mark.parametrize("seq", [5, INSTANCES[VICTIM]], ids=["middle", "last"])
def test_entry_duplicated_is_seq_duplicate(built: Built, attacker: LedgerDb, seq: int) -> None:
    row = attacker.entry(VICTIM, seq)
    attacker.rebuild_entries_without_constraints()  # no UNIQUE (instance, seq) any more
    attacker.insert_entry(leaf=row.leaf, instance=VICTIM, seq=seq, digest=row.hash,
                          body=row.body, sig=row.sig)
    assert len(attacker.run("SELECT leaf FROM histaudit_entries WHERE instance = :i "
                            "AND seq = :s", i=VICTIM, s=seq)) == 2

    report = verify(built.url, VICTIM, built.trust)
    assert ("seq-duplicate", seq) in pairs(report)
    # The copy's leaf is not after its twin's, which the leaf-order check adds.
    allowed = {"seq-duplicate", "seq-reordered"}
    assert pairs(report) <= {("seq-duplicate", seq), ("seq-reordered", seq)}
    full = verify(built.url, VICTIM, built.trust, full=True)
    assert "seq-duplicate" in full.codes() and full.codes() <= allowed
    assert_clean(built, *others(VICTIM))


@pytest.mark.parametrize("first", [5, INSTANCES[VICTIM] - 1], ids=["middle", "tail"])
def test_entries_swapped_is_seq_reordered(built: Built, attacker: LedgerDb,
                                          first: int) -> None:
    second = first + 1
    a, b = attacker.entry(VICTIM, first), attacker.entry(VICTIM, second)
    attacker.set_entry(VICTIM, first, leaf=-1)  # leaf is the primary key: swap via a spare
    attacker.set_entry(VICTIM, second, leaf=a.leaf)
    attacker.set_entry(VICTIM, first, leaf=b.leaf)
    with Ledger.open(built.url) as ledger:
        seqs = [r.seq for r in ledger.entries(VICTIM)]
    assert seqs[first - 1:first + 1] == [second, first]

    report = verify(built.url, VICTIM, built.trust)
    assert ("seq-reordered", first) in pairs(report)
    assert not report.ok
    # Read in one pass, the later entry first looks like a gap; but the entry after the
    # pair still links correctly, and the head still matches the newest entry.
    # Each of the two rows is stored at the other's leaf.
    assert pairs(report) == {("seq-reordered", first), ("seq-gap", second),
                             ("leaf-mismatch", first), ("leaf-mismatch", second)}
    assert_clean(built, *others(VICTIM))


def test_tail_entries_deleted_is_tail_truncated(built: Built, attacker: LedgerDb) -> None:
    last = INSTANCES[VICTIM]
    attacker.delete_entries(VICTIM, last - 2, last - 1, last)
    report = verify(built.url, VICTIM, built.trust)
    assert pairs(report) == {("tail-truncated", last)}
    assert_clean(built, *others(VICTIM))


# --- heads -------------------------------------------------------------------------------

def test_head_replaced_by_an_older_head_is_head_mismatch(built: Built,
                                                         attacker: LedgerDb) -> None:
    old = built.heads[VICTIM][6]
    attacker.set_head(VICTIM, seq=old.seq, body=old.body, sig=old.sig)
    assert attacker.head(VICTIM)[0] == 6
    report = verify(built.url, VICTIM, built.trust)
    assert pairs(report) == {("head-mismatch", INSTANCES[VICTIM])}


def test_head_deleted_is_head_missing(built: Built, attacker: LedgerDb) -> None:
    attacker.delete_head(VICTIM)
    report = verify(built.url, VICTIM, built.trust)
    assert pairs(report) == {("head-missing", INSTANCES[VICTIM])}
    assert_clean(built, *others(VICTIM))


@pytest.mark.parametrize("how", ["seq-field", "byte-flipped", "not-json", "signature"])
def test_head_edited_is_head_invalid(built: Built, attacker: LedgerDb, how: str) -> None:
    seq, body, sig = attacker.head(VICTIM)
    last = INSTANCES[VICTIM]
    if how == "seq-field":
        body = body.replace(f'"seq":{last}'.encode(), f'"seq":{last + 1}'.encode())
    elif how == "byte-flipped":
        body = flip(body, body.index(b'"ts":"') + 8)
    elif how == "not-json":
        body = flip(body, 0)
    else:
        sig = flip(sig, 7)
    attacker.set_head(VICTIM, seq=seq, body=body, sig=sig)
    report = verify(built.url, VICTIM, built.trust)
    assert report.codes() == {"head-invalid"}, report.findings
    assert not report.ok


# --- instances, malformed entries, payloads ----------------------------------------------

def test_entry_moved_to_another_instance_is_instance_mismatch(built: Built,
                                                              attacker: LedgerDb) -> None:
    # wf-gamma has 8 entries, so wf-alpha's entry 9 does not collide with one of its seqs.
    attacker.set_entry(VICTIM, 9, instance="wf-gamma")
    gamma = verify(built.url, "wf-gamma", built.trust)
    assert ("instance-mismatch", 9) in pairs(gamma)
    assert not gamma.ok
    alpha = verify(built.url, VICTIM, built.trust)
    assert ("seq-gap", 10) in pairs(alpha)
    assert_clean(built, "wf-beta")


def test_entry_moved_to_a_new_instance_is_instance_mismatch(built: Built,
                                                            attacker: LedgerDb) -> None:
    attacker.set_entry(VICTIM, 1, instance="wf-forged")
    report = verify(built.url, "wf-forged", built.trust)
    assert ("instance-mismatch", 1) in pairs(report)
    assert "head-missing" in report.codes()


@pytest.mark.parametrize("how", ["not-json", "version-2", "not-object", "missing-field",
                                 "wrong-type"])
@pytest.mark.parametrize("rehash", [True, False], ids=["hash-recomputed", "hash-kept"])
def test_malformed_body_is_entry_malformed(built: Built, attacker: LedgerDb, how: str,
                                           rehash: bool) -> None:
    row = attacker.entry(VICTIM, 5)
    if how == "not-json":
        body = b"this is not JSON at all"
    elif how == "version-2":
        assert row.body.endswith(b'"v":1}')  # canonical: keys sorted, "v" last
        body = row.body[:-len(b'1}')] + b"2}"
    elif how == "not-object":
        body = b'["entry", 5]'
    elif how == "missing-field":
        body = row.body.replace(b'"kind":', b'"kinx":')
    else:
        body = row.body.replace(b'"type":"entry"', b'"type":"head"')
    assert body != row.body
    attacker.set_entry(VICTIM, 5, body=body, **({"hash": fmt.sha256_hex(body)} if rehash
                                                  else {}))
    report = verify(built.url, VICTIM, built.trust)
    assert ("entry-malformed", 5) in pairs(report)
    assert ("body-changed" in report.codes()) is not rehash
    assert all(f.seq is not None and f.seq >= 5 for f in report.findings)
    # The verifier carries on: the rest of the chain is still read.
    assert report.entries == INSTANCES[VICTIM]
    assert_clean(built, *others(VICTIM))


@pytest.mark.parametrize("column", ["data", "salt"])
def test_stored_payload_changed_is_payload_mismatch(built: Built, attacker: LedgerDb,
                                                    column: str) -> None:
    commitment = built.commitments[VICTIM][3]
    (salt, data), = [(bytes(r.salt), bytes(r.data)) for r in attacker.run(
        "SELECT salt, data FROM histaudit_payloads WHERE commitment = :c", c=commitment)]
    new = {"data": data.replace(b"secret", b"SECRET"), "salt": flip(salt, 0)}[column]
    attacker.run(f"UPDATE histaudit_payloads SET {column} = :v WHERE commitment = :c",
                 v=new, c=commitment)

    assert verify(built.url, VICTIM, built.trust).findings == ()  # not read by default
    full = verify(built.url, VICTIM, built.trust, full=True)
    assert pairs(full) == {("payload-mismatch", 3)}
    assert not full.ok


def test_instance_deleted_is_instance_missing(built: Built, attacker: LedgerDb) -> None:
    attacker.run("DELETE FROM histaudit_entries WHERE instance = :i", i=VICTIM)
    attacker.delete_head(VICTIM)
    for full in (False, True):
        report = verify(built.url, VICTIM, built.trust, full=full)
        assert pairs(report) == {("instance-missing", None)}
        assert report.entries == 0 and not report.ok
    with Ledger.open(built.url) as ledger:
        assert VICTIM not in ledger.instance_ids()
    assert_clean(built, *others(VICTIM))


# --- kept payloads: deleted is not erased (docs/format.md §8.3) ---------------------------

KEPT = ("wf-kept", "wf-other")


@dataclass
class KeptLedger:
    url: str
    signer: Signer
    trust: TrustStore
    #: instance -> seq -> commitment of the kept payload that entry carries
    refs: dict[str, dict[int, str]]


def build_kept(url: str) -> KeptLedger:
    """Two instances written by the interceptor's recorder: every payload signed as kept."""
    from histaudit.interceptor.recorder import AuditRecorder

    signer = KeyFileSigner.generate()
    refs: dict[str, dict[int, str]] = {}
    with Ledger.open(url, create=True) as ledger:
        recorder = AuditRecorder(ledger, signer)
        for rnd in range(1, 4):
            for instance in KEPT:
                p = recorder.commit(instance, f'{{"secret":"{instance} {rnd}"}}')
                entry = recorder.append(instance, "event.raised", {"round": rnd,
                                                                   "input": p.ref}, p)
                assert p.ref is not None and p.ref["k"] is True
                assert ledger.payload(p.ref["c"]) is not None
                refs.setdefault(instance, {})[entry.seq] = p.ref["c"]
    return KeptLedger(url, signer, TrustStore([signer.public]), refs)


@pytest.fixture
def kept(db_url: str) -> KeptLedger:
    return build_kept(db_url)


def _delete_payload(url: str, commitment: str) -> None:
    """Deleting a payload row needs no lifted guard: erasure is allowed by the store."""
    with LedgerDb(url) as db:
        assert db.count("DELETE FROM histaudit_payloads WHERE commitment = :c",
                        c=commitment) == 1


def test_kept_payload_deleted_without_erasure_is_payload_missing(kept: KeptLedger) -> None:
    _delete_payload(kept.url, kept.refs["wf-kept"][2])
    assert verify(kept.url, "wf-kept", kept.trust).findings == ()  # rows not read by default
    full = verify(kept.url, "wf-kept", kept.trust, full=True)
    assert pairs(full) == {("payload-missing", 2)} and not full.ok
    assert CODES["payload-missing"][0].name == "ERROR"
    assert verify(kept.url, "wf-other", kept.trust, full=True).findings == ()


def test_kept_payload_erased_with_a_signed_record_is_clean(kept: KeptLedger) -> None:
    with Ledger.open(kept.url) as ledger:
        for commitment in kept.refs["wf-kept"].values():
            gone, entry = chain.erase_payload(ledger, "wf-kept", commitment,
                                              signer=kept.signer, record={"reason": "test"})
            assert gone and entry.data["commitment"] == commitment
    report = verify(kept.url, "wf-kept", kept.trust, full=True)
    assert report.findings == () and report.entries == 3 + 3


def test_erasure_signed_into_another_instance_does_not_cover_the_payload(
        kept: KeptLedger) -> None:
    """Only the chain that references the payload can say it was erased."""
    victim = kept.refs["wf-kept"][3]
    with Ledger.open(kept.url) as ledger:
        chain.erase_payload(ledger, "wf-other", victim, signer=kept.signer, record={})
    assert pairs(verify(kept.url, "wf-kept", kept.trust, full=True)) == {("payload-missing", 3)}
    assert verify(kept.url, "wf-other", kept.trust, full=True).findings == ()


@pytest.mark.parametrize("flag", [True, 1, "true", False, None],
                         ids=["true", "one", "string", "false", "absent"])
def test_only_a_json_true_kept_flag_claims_the_payload(db_url: str, flag: Any) -> None:
    signer = KeyFileSigner.generate()
    ref, rows = committed(b'"a short secret"')
    if flag is not None:
        ref["k"] = flag
    with Ledger.open(db_url, create=True) as ledger:
        chain.append(ledger, "wf-flag", "event.raised", {"input": ref}, signer=signer,
                     payloads=rows)
    _delete_payload(db_url, ref["c"])
    report = verify(db_url, "wf-flag", TrustStore([signer.public]), full=True)
    assert pairs(report) == ({("payload-missing", 1)} if flag is True else set())


def test_unflagged_payload_deleted_still_verifies_as_before(built: Built) -> None:
    """A ledger written before the kept flag: an absent row is an erasure, as it was."""
    for commitment in built.commitments[VICTIM].values():
        _delete_payload(built.url, commitment)
    assert_clean(built, *INSTANCES)


@pytest.mark.parametrize("task_id", [[1], {"a": [1]}, [1, {"b": None}]])
def test_forged_structured_task_ids_are_reported_not_crashed_on(db_url: str,
                                                                 task_id: Any) -> None:
    """Whoever holds a key (or a stranger, signing with their own) can sign any data: a
    task id that is a JSON array or object must not crash the verifier's behaviour check,
    and a task started twice under it is reported like any other."""
    signer = KeyFileSigner.generate()
    with Ledger.open(db_url, create=True) as ledger:
        for kind in ("activity.started", "activity.started", "effect.intent"):
            chain.append(ledger, "forged", kind, {"task_id": task_id, "execution_id": task_id,
                                                  "activity": "charge", "name": "mail",
                                                  "key": "k"}, signer=signer)
    for full in (False, True):
        report = verify(db_url, "forged", TrustStore([signer.public]), full=full)
        assert [f.code for f in report.findings] == ["activity-reexecuted"], report.findings
