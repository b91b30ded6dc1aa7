"""histaudit.ledger.chain: the append rule, inside the store transaction it is handed."""

from __future__ import annotations

from pathlib import Path

import pytest

from histaudit.errors import FormatError, StoreError
from histaudit.ledger import chain, records
from histaudit.ledger.checkpoint import parse_note, sign_note
from histaudit.ledger.keys import KeyFileSigner, TrustStore
from histaudit.ledger.kinds import Kind
from histaudit.ledger.store import Ledger


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    return Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}", create=True)


def test_seq_prev_leaf_and_head_follow_the_rule(ledger: Ledger) -> None:
    signer = KeyFileSigner.generate()
    a1 = chain.append(ledger, "a", Kind.ACTIVITY_STARTED, {"n": 1}, signer=signer)
    b1 = chain.append(ledger, "b", Kind.ACTIVITY_STARTED, {"n": 1}, signer=signer)
    a2 = chain.append(ledger, "a", Kind.ACTIVITY_COMPLETED, {"n": 2}, signer=signer)
    assert (a1.seq, a1.prev, a1.leaf) == (1, records.GENESIS_PREV, 0)
    assert (b1.seq, b1.prev, b1.leaf) == (1, records.GENESIS_PREV, 1)
    assert (a2.seq, a2.prev, a2.leaf) == (2, a1.hash, 2)
    stored = ledger.entry_at("a", 2)
    assert stored is not None and stored.body == a2.body and stored.hash == a2.hash
    assert signer.public.verify(stored.sig, stored.body)
    head = ledger.head("a")
    assert head is not None and signer.public.verify(head.sig, head.body)
    parsed = records.parse_head(head.body)
    assert (parsed.seq, parsed.hash, parsed.leaf) == (2, a2.hash, 2)
    assert records.parse_entry(stored.body).kind == "activity.completed"


def test_a_refused_append_leaves_nothing_behind(ledger: Ledger) -> None:
    signer = KeyFileSigner.generate()
    chain.append(ledger, "a", Kind.ACTIVITY_STARTED, {}, signer=signer)
    salt = records.new_salt()
    rows = {salt: (records.commit(b"x", salt), b"x")}
    with pytest.raises(FormatError):
        chain.append(ledger, "a", Kind.ACTIVITY_STARTED, {"bad": 1.5}, signer=signer,
                     payloads=rows)
    assert ledger.leaf_count() == 1 and ledger.payload(rows[salt][0]) is None
    head = ledger.head("a")
    assert head is not None and records.parse_head(head.body).seq == 1


def test_erasure_and_its_record_commit_together(ledger: Ledger) -> None:
    signer = KeyFileSigner.generate()
    salt = records.new_salt()
    c = records.commit(b"secret", salt)
    chain.append(ledger, "a", Kind.ACTIVITY_COMPLETED, {"output": {"c": c, "n": 6}},
                 signer=signer, payloads={salt: (c, b"secret")})
    gone, entry = chain.erase_payload(ledger, "a", c, signer=signer,
                                      record={"entry": 1, "field": "output"})
    assert gone and ledger.payload(c) is None
    assert entry.kind == Kind.PAYLOAD_ERASED and entry.data["commitment"] == c
    again, second = chain.erase_payload(ledger, "a", c, signer=signer, record={})
    assert not again and second.seq == 3


def test_make_checkpoint_signs_and_stores_the_tree(ledger: Ledger) -> None:
    signer = KeyFileSigner.generate()
    for n in range(3):
        chain.append(ledger, f"i{n}", Kind.WORKFLOW_STARTED, {}, signer=signer)
    cp = chain.make_checkpoint(ledger, signer)
    assert cp.size == 3
    assert ledger.checkpoint_notes() == [(3, cp.note)]
    again = parse_note(cp.note, TrustStore([signer.public]))
    assert (again.size, again.root, again.origin) == (3, cp.root, f"histaudit/{ledger.ledger_id}")


def test_a_planted_checkpoint_of_the_same_size_is_refused_not_skipped(db_url: str) -> None:
    """A writer that plants a note of a future size must not make the genuine one vanish."""
    signer, other = KeyFileSigner.generate(), KeyFileSigner.generate()
    with Ledger.open(db_url, create=True) as ledger:
        chain.append(ledger, "a", Kind.WORKFLOW_STARTED, {}, signer=signer)
        first = chain.make_checkpoint(ledger, signer)
        # The same checkpoint signed by another key is the same statement: accepted, and
        # the note stored first stays.
        assert chain.make_checkpoint(ledger, other).root == first.root
        assert ledger.checkpoint_notes() == [(1, first.note)]
        # Same size, another root: what a planted note looks like once the ledger gets there.
        planted = sign_note(first.origin, 2, b"\x07" * 32, signer)
        with ledger.write("plant") as tx:
            tx.add_checkpoint(2, "07" * 32, planted)
        chain.append(ledger, "a", Kind.WORKFLOW_COMPLETED, {}, signer=signer)
        with pytest.raises(StoreError, match="a different checkpoint of size 2"):
            chain.make_checkpoint(ledger, signer)
        assert ledger.checkpoint_notes() == [(1, first.note), (2, planted)]
