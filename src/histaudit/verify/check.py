"""The one shape every verification check has, and the loop that feeds them.

A check is told about each stored row in stored order (``observe``), with what the row's
bytes parse to — the :class:`~histaudit.ledger.records.Entry`, or the ``FormatError``
saying why they do not parse — and says what it found once the rows end (``finish``).
Integrity, keys and signatures, payloads, the signed head, behaviour across crashes, the
engine cross-check and the checkpoint-consistency proof are all checks; :func:`run_checks`
is the only loop, and each row is parsed once whatever the number of checks.

Checks read values they are given; none of them touches a store.

A check that also implements :class:`ValidEntryCheck` can be fed by the faster loop of
:mod:`histaudit.verify.scan`, which does not build an ``Entry`` for a row that is
plainly well-formed but hands over its fields.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from histaudit.errors import FormatError
from histaudit.ledger.records import Entry, StoredEntry, parse_entry

from .findings import Finding

Parsed = Entry | FormatError
"""What a row's bytes parse to: the entry, or why they are not one."""


class ChainCheck(Protocol):
    """One kind of verification, fed the rows of one chain (or of the whole ledger)."""

    def observe(self, row: StoredEntry, parsed: Parsed) -> None:
        """One stored row, in stored order, with what its bytes parse to."""

    def finish(self) -> Iterable[Finding]:
        """The findings, once every row has been observed."""


class ValidEntryCheck(ChainCheck, Protocol):
    """A check that can also be fed the fields of a row known to parse."""

    def observe_valid(self, row: StoredEntry, instance: str, seq: int, kind: str, kid: str,
                      ts: str, data: Mapping[str, Any]) -> None:
        """Exactly ``observe(row, parse_entry(row.body))`` for such a row."""


_UNPARSED = FormatError("not parsed")


def run_checks(rows: Iterable[StoredEntry], checks: Sequence[ChainCheck], *,
               parse: bool = True) -> tuple[int, list[Finding]]:
    """Feed every row to every check; return (rows seen, findings check by check).

    With ``parse=False`` (checks that only hash bytes, such as the ledger-wide tree) the
    rows are not parsed and every check gets a placeholder error instead.
    """
    count = 0
    for row in rows:
        parsed: Parsed = _UNPARSED
        if parse:
            try:
                parsed = parse_entry(row.body)
            except FormatError as exc:
                parsed = exc
        for check in checks:
            check.observe(row, parsed)
        count += 1
    findings: list[Finding] = []
    for check in checks:
        findings.extend(check.finish())
    return count, findings
