"""histaudit.verify.check: one protocol for every check, one loop that feeds them."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from histaudit.errors import FormatError
from histaudit.ledger import records
from histaudit.ledger.keys import KeyFileSigner, Signer, TrustStore
from histaudit.ledger.records import Entry, StoredEntry
from histaudit.verify import check as check_mod
from histaudit.verify.check import ChainCheck, Parsed, run_checks
from histaudit.verify.findings import Finding
from histaudit.verify.verifier import verify_chain


def _row(signer: Signer, seq: int, prev: str, *, body: bytes | None = None) -> StoredEntry:
    body = body or records.entry_body(instance="wf", seq=seq, leaf=seq - 1, prev=prev,
                                      kind="workflow.scheduled_activity",
                                      ts="2026-12-01T00:00:00.000000Z",
                                      kid=signer.kid, data={"n": seq})
    return StoredEntry(seq - 1, "wf", seq, records.sha256_hex(body), body, signer.sign(body))


class Recorder:
    """A check that remembers what it was fed and reports one finding per bad row."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log
        self.seen: list[tuple[int, Parsed]] = []

    def observe(self, row: StoredEntry, parsed: Parsed) -> None:
        self.seen.append((row.seq, parsed))
        self.log.append(f"{self.name}:{row.seq}")

    def finish(self) -> Iterable[Finding]:
        return [Finding.make("entry-malformed", "wf", seq, f"{self.name} saw {seq}")
                for seq, parsed in self.seen if isinstance(parsed, FormatError)]


def test_every_check_sees_every_row_in_order_parsed_once(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    signer = KeyFileSigner.generate()
    first = _row(signer, 1, records.GENESIS_PREV)
    rows = [first, _row(signer, 2, first.hash), _row(signer, 3, "0" * 64, body=b"{not json")]
    calls: list[bytes] = []
    real = check_mod.parse_entry

    def counting(body: bytes) -> Entry:
        calls.append(body)
        return real(body)

    monkeypatch.setattr(check_mod, "parse_entry", counting)
    log: list[str] = []
    a, b = Recorder("a", log), Recorder("b", log)
    checks: list[ChainCheck] = [a, b]
    count, findings = run_checks(rows, checks)
    assert count == 3 and len(calls) == 3  # once per row, however many checks
    assert log == ["a:1", "b:1", "a:2", "b:2", "a:3", "b:3"]
    assert [type(p).__name__ for _, p in a.seen] == ["Entry", "Entry", "FormatError"]
    assert a.seen[0][1] is b.seen[0][1]  # the same parsed value goes to both
    assert [f.message for f in findings] == ["a saw 3", "b saw 3"]  # check by check


def test_without_parsing_checks_get_a_placeholder() -> None:
    signer = KeyFileSigner.generate()
    rec = Recorder("a", [])
    count, _ = run_checks([_row(signer, 1, records.GENESIS_PREV)], [rec], parse=False)
    assert count == 1 and isinstance(rec.seen[0][1], FormatError)


def test_verify_chain_composes_the_checks_into_one_report() -> None:
    signer = KeyFileSigner.generate()
    trust = TrustStore([signer.public])
    first = _row(signer, 1, records.GENESIS_PREV)
    second = _row(signer, 2, "f" * 64)  # breaks the link
    report = verify_chain("wf", [first, second], None, trust=trust, full=True, workers=1)
    # integrity (link-broken) and head (head-missing) both report, in entry order
    assert [f.code for f in report.findings] == ["link-broken", "head-missing"]
    assert report.mode == "full" and report.entries == 2 and not report.ok
    engine = verify_chain("wf", [first], None, trust=trust, engine_history=[])
    assert engine.mode == "default+engine"
