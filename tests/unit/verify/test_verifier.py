"""Properties of the verifier over random ledgers (hypothesis).

* A ledger written only through :class:`Ledger` always verifies clean, in both modes.
* Any single-byte change (random position, random XOR) to one stored entry's body, or to
  its hash column, never verifies.
* Any single-byte change to one stored signature never verifies in full mode (and, since
  default mode does not check signatures, is invisible there).
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from histaudit.ledger import chain
from histaudit.ledger import records as fmt
from histaudit.ledger.keys import KeyFileSigner, TrustStore
from histaudit.ledger.records import StoredEntry
from histaudit.ledger.store import Ledger
from histaudit.verify.findings import Severity
from histaudit.verify.report import Report
from histaudit.verify.verifier import verify_chain, verify_instance
from support.ledgers import LedgerDb, committed, verify_url

SIGNER = KeyFileSigner.generate()
TRUST = TrustStore([SIGNER.public])

PROPERTY_SETTINGS = settings(max_examples=30, deadline=None,
                             suppress_health_check=[HealthCheck.too_slow])

# --- strategies --------------------------------------------------------------------------

_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=16)
_ident = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=16)
# Behaviour analysis reads activity.* and effect.* kinds; these chains carry none of them.
_kind = st.one_of(
    st.sampled_from(["workflow.started", "workflow.completed", "timer.fired",
                     "event.raised", "checkpoint", "note"]),
    _ident.filter(lambda k: not k.startswith(("activity.", "effect."))))
_value = st.one_of(st.integers(min_value=-(2**53 - 1), max_value=2**53 - 1), _text)
_data = st.dictionaries(_text, _value, max_size=5)


@dataclass(frozen=True)
class Step:
    instance: int  # index into the ledger's instance names
    kind: str
    data: dict[str, Any]
    payload: bytes | None
    salt: bytes


_step = st.builds(Step, instance=st.integers(0, 2), kind=_kind, data=_data,
                  payload=st.one_of(st.none(), st.binary(max_size=64)),
                  salt=st.binary(min_size=fmt.SALT_BYTES, max_size=fmt.SALT_BYTES))
_ledger_spec = st.tuples(st.lists(_ident, min_size=1, max_size=3, unique=True),
                         st.lists(_step, min_size=1, max_size=10))


# A RAM-backed directory when there is one: the ledger runs synchronous=FULL, and a few
# hundred fsyncs per property would otherwise dominate the run time.
_TMP_ROOT = "/dev/shm" if Path("/dev/shm").is_dir() else None


@contextmanager
def built(spec: tuple[list[str], list[Step]]) -> Iterator[tuple[Path, list[str]]]:
    """Write the spec into a fresh SQLite ledger; yield its path and the instances used."""
    names, steps = spec
    with tempfile.TemporaryDirectory(prefix="histaudit-prop-", dir=_TMP_ROOT) as tmp:
        path = Path(tmp) / "ledger.db"
        used: list[str] = []
        with Ledger.open(f"sqlite:///{path}", create=True) as ledger:
            for n, step in enumerate(steps):
                instance = names[step.instance % len(names)]
                data: dict[str, Any] = dict(step.data)
                stored = None
                if step.payload is not None:
                    # Salts are random in real use; derive a distinct one per step so two
                    # equal payloads never collide on one commitment.
                    salt = hashlib.sha256(n.to_bytes(4, "big") + step.salt).digest()
                    data["payload"], stored = committed(step.payload, salt)
                chain.append(ledger, instance, step.kind, data, signer=SIGNER, payloads=stored)
                if instance not in used:
                    used.append(instance)
        yield path, used


def verify_path(path: Path, instance: str, *, full: bool) -> Report:
    return verify_url(f"sqlite:///{path}", instance, TRUST, full=full, workers=1)


def stored_rows(path: Path) -> list[StoredEntry]:
    with Ledger.open(f"sqlite:///{path}") as ledger:
        return list(ledger.all_entries())


def tamper(path: Path, leaf: int, column: str, value: Any) -> None:
    """Edit one stored entry like an attacker with file access: triggers first."""
    assert column in {"body", "hash", "sig"}
    with LedgerDb(f"sqlite:///{path}") as db:
        db.lift_guards()
        db.set_entry_at(leaf, **{column: value})


def xor_at(data: bytes, pos: int, mask: int) -> bytes:
    assert 1 <= mask <= 255
    return data[:pos] + bytes([data[pos] ^ mask]) + data[pos + 1:]


# --- properties --------------------------------------------------------------------------

@PROPERTY_SETTINGS
@given(spec=_ledger_spec)
def test_random_clean_ledgers_verify_clean(spec: tuple[list[str], list[Step]]) -> None:
    with built(spec) as (path, used):
        rows = stored_rows(path)
        assert [r.leaf for r in rows] == list(range(len(spec[1])))
        for instance in used:
            for full in (False, True):
                report = verify_path(path, instance, full=full)
                assert report.findings == (), report.findings
                assert report.ok and bool(report)
                assert report.entries == sum(1 for r in rows if r.instance == instance)


@PROPERTY_SETTINGS
@given(spec=_ledger_spec, column=st.sampled_from(["body", "hash"]), data=st.data())
def test_one_corrupted_byte_in_an_entry_never_verifies(spec: tuple[list[str], list[Step]],
                                                       column: str, data: st.DataObject
                                                       ) -> None:
    with built(spec) as (path, _used):
        rows = stored_rows(path)
        row = data.draw(st.sampled_from(rows), label="entry")
        original = row.body if column == "body" else row.hash.encode("ascii")
        pos = data.draw(st.integers(0, len(original) - 1), label="position")
        mask = data.draw(st.integers(1, 255), label="xor")
        changed = xor_at(original, pos, mask)
        tamper(path, row.leaf, column,
               changed if column == "body" else changed.decode("latin-1"))
        for full in (False, True):
            report = verify_path(path, row.instance, full=full)
            assert not report.ok, (column, pos, mask, report.findings)
            assert not report
            assert report.failing(Severity.ERROR)


@PROPERTY_SETTINGS
@given(spec=_ledger_spec, data=st.data())
def test_one_corrupted_signature_byte_never_verifies_in_full_mode(
        spec: tuple[list[str], list[Step]], data: st.DataObject) -> None:
    with built(spec) as (path, _used):
        row = data.draw(st.sampled_from(stored_rows(path)), label="entry")
        pos = data.draw(st.integers(0, len(row.sig) - 1), label="position")
        mask = data.draw(st.integers(1, 255), label="xor")
        tamper(path, row.leaf, "sig", xor_at(row.sig, pos, mask))
        full = verify_path(path, row.instance, full=True)
        assert not full.ok
        assert {(f.code, f.seq) for f in full.findings} == {("signature-invalid", row.seq)}
        # Default mode reads no signatures: the same ledger passes there.
        assert verify_path(path, row.instance, full=False).findings == ()


# --- what a SQLite hash column holds, as the scan reads it --------------------------------

_FORGED_HASHES = {
    "non-UTF-8 text": "CAST(x'ff61' || hash AS TEXT)",
    "text with a NUL": "CAST(x'00' AS TEXT) || hash",
    "upper case": "upper(hash)",
    "a blob of the same bytes": "CAST(hash AS BLOB)",
    "a blob of other bytes": "x'ff00'",
    "a real (TEXT affinity stores it as text)": "1.5e300",
    "an integer (likewise)": "42",
}


def test_forged_sqlite_hash_columns_read_as_the_entry_reader_reads_them(
        tmp_path: Path) -> None:
    """``Snapshot.entry_chunks`` reads TEXT as its bytes (no text_factory call per value);
    for every storage class a forged hash column can hold, ``verify_instance`` (which reads
    that way) reports what :func:`verify_chain` reports over the same rows read as
    StoredEntry values by ``Snapshot.entries`` (text through the text_factory)."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger.open(url, create=True) as ledger:
        for i in range(len(_FORGED_HASHES) + 1):
            chain.append(ledger, "wf", "note", {"i": i}, signer=SIGNER)
    with LedgerDb(url) as db:
        db.lift_guards()
        for seq, (_label, value) in enumerate(_FORGED_HASHES.items(), start=1):
            db.run(f"UPDATE histaudit_entries SET hash = {value} WHERE seq = :s", s=seq)
        kinds = [r[0] for r in db.run("SELECT typeof(hash) FROM histaudit_entries "
                                      "ORDER BY seq")]
    assert kinds == ["text"] * 3 + ["blob"] * 2 + ["text"] * 3
    with Ledger.open(url) as ledger:
        report = verify_instance(ledger, "wf", trust=TRUST)
        with ledger.snapshot() as snap:
            rows, head = list(snap.entries("wf")), snap.head("wf")
    expected = verify_chain("wf", rows, head, trust=TRUST)
    assert (report.entries, report.findings) == (expected.entries, expected.findings)
    changed = sorted(f.seq for f in report.findings if f.code == "body-changed")
    assert changed == [1, 2, 3, 5, 6, 7], report.findings  # 4: the same bytes, as a blob
