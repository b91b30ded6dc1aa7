"""What today's code replays against what was signed: the workflow's output, activity results.

A history is the engine's copy; the ledger holds what the audited app signed as it ran.
:func:`compare_signed` takes a :class:`~histaudit.replay.ReplayResult`, the history it
replayed and the instance's stored ledger rows, and says whether the result the code
completes the workflow with is the output signed in ``workflow.completed`` — and whether
every activity result the history feeds the code is the output signed in its
``activity.completed`` (:class:`~histaudit.verify.crosscheck.EngineCrossCheck`). A
difference is the verifier's ``replay-mismatch`` finding ("replayed result differs from
the signed checkpoint"): the history, or the code, no longer gives what was signed.

Like the engine cross-check it compares salted commitments: with the payload row stored,
``commit(text, salt)`` decides; once erased, only the committed size can prove a
difference, never equality (``unverifiable``). Pure: the caller hands it the entries and a
payload lookup (:meth:`Ledger.payload <histaudit.ledger.store.Ledger.payload>`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from histaudit.errors import FormatError
from histaudit.ledger.kinds import Kind
from histaudit.ledger.records import Entry, StoredEntry, commitment_matches, parse_entry
from histaudit.verify.crosscheck import EngineCrossCheck
from histaudit.verify.findings import Finding
from histaudit.verify.payloads import PayloadLookup

from .result import ReplayResult

__all__ = ["NOT_COMPARED", "OutputCheck", "OutputStatus", "against", "compare_signed"]


class OutputStatus(enum.StrEnum):
    SAME = "same"
    """The replayed output is the signed one (and every activity result compared equal)."""
    DIFFERENT = "different"
    """A replayed output or activity result is not the signed one: ``replay-mismatch``."""
    UNVERIFIABLE = "unverifiable"
    """The signed payload was erased and the sizes agree: equality cannot be shown."""
    NOT_SIGNED = "not-signed"
    """The ledger has no signed end of this instance (not audited, or not ended yet)."""
    NOT_ENDED = "not-ended"
    """The replayed code did not end the workflow: there is no output to compare."""
    NOT_COMPARED = "not-compared"
    """No ledger was given."""


@dataclass(frozen=True, slots=True)
class OutputCheck:
    """The replayed output against the signed one; ``bool()`` is False only on a mismatch."""

    status: OutputStatus
    message: str
    findings: tuple[Finding, ...] = ()
    """``replay-mismatch`` findings (workflow output, activity results)."""

    def __bool__(self) -> bool:
        return not self.findings

    def to_json(self) -> dict[str, Any]:
        return {"status": str(self.status), "message": self.message,
                "findings": [f.to_json() for f in self.findings]}


NOT_COMPARED = OutputCheck(OutputStatus.NOT_COMPARED,
                           "output not compared with the signed one: no ledger given (--db)")


def _same(ref: Any, text: str | None, lookup: PayloadLookup) -> bool | None:
    """Whether ``text`` is the payload ``ref`` commits to; None when that cannot be told."""
    raw = None if text is None else text.encode("utf-8")
    if not (isinstance(ref, dict) and isinstance(ref.get("c"), str)):
        return raw is None  # signed as no payload
    if raw is None:
        return False
    stored = lookup(ref["c"])
    if stored is not None:
        return commitment_matches(ref["c"], raw, stored[0])
    size = ref.get("n")
    return False if isinstance(size, int) and size != len(raw) else None


def compare_signed(result: ReplayResult, history: Sequence[Any], rows: Iterable[StoredEntry],
                   lookup: PayloadLookup) -> OutputCheck:
    """Compare ``result`` (a replay of ``history``) with the instance's stored ``rows``.

    Entries that do not parse are skipped: reporting them is ``histaudit verify``'s job.
    """
    instance = result.instance_id
    cross = EngineCrossCheck(instance, history, lookup)
    ends: list[Entry] = []
    for row in rows:
        try:
            entry = parse_entry(row.body)
        except FormatError:
            continue
        cross.observe(row, entry)
        if entry.kind in (Kind.WORKFLOW_COMPLETED, Kind.WORKFLOW_FAILED):
            ends.append(entry)
    findings = [f for f in cross.finish() if f.code == "replay-mismatch"]
    status, message = _compare_end(result, ends, lookup, findings)
    if findings and status is not OutputStatus.DIFFERENT:
        status = OutputStatus.DIFFERENT
        message = f"{message}; but {len(findings)} activity result(s) differ from the signed"
    return OutputCheck(status, message, tuple(findings))


def _compare_end(result: ReplayResult, ends: list[Entry], lookup: PayloadLookup,
                 findings: list[Finding]) -> tuple[OutputStatus, str]:
    if not ends:
        return OutputStatus.NOT_SIGNED, "the ledger has no signed end of this instance"
    if result.outcome not in ("completed", "failed"):
        return OutputStatus.NOT_ENDED, (f"the replay did not end the workflow ({result.outcome}):"
                                        f" no output to compare with entry {ends[-1].seq}")
    last = ends[-1]
    if result.outcome == "failed" or last.kind == Kind.WORKFLOW_FAILED:
        if result.outcome == "failed" and last.kind == Kind.WORKFLOW_FAILED:
            return OutputStatus.SAME, f"the replay fails, as signed at entry {last.seq}"
        signed = "failed" if last.kind == Kind.WORKFLOW_FAILED else "completed"
        findings.append(Finding.make(
            "replay-mismatch", result.instance_id, last.seq,
            f"workflow {result.workflow}: the replay {result.outcome}, but entry {last.seq} "
            f"signed that it {signed}"))
        return OutputStatus.DIFFERENT, findings[-1].message
    verdicts = [_same(e.data.get("output"), result.output, lookup)
                for e in ends if e.kind == Kind.WORKFLOW_COMPLETED]
    if True in verdicts:
        return OutputStatus.SAME, f"the replayed output is the one signed at entry {last.seq}"
    if None in verdicts:
        return OutputStatus.UNVERIFIABLE, (f"the output signed at entry {last.seq} was erased "
                                           f"and has the replayed output's size")
    size = "no result" if result.output is None else f"{len(result.output.encode())} bytes"
    findings.append(Finding.make(
        "replay-mismatch", result.instance_id, last.seq,
        f"workflow {result.workflow}: the replayed output ({size}) is not the output "
        f"signed at entry {last.seq}"))
    return OutputStatus.DIFFERENT, findings[-1].message



class _SignedStore(Protocol):
    """What :func:`against` reads of a ledger (``histaudit.ledger.store.Ledger``)."""

    def entries(self, instance: str) -> Iterable[StoredEntry]: ...
    def payload(self, commitment: str) -> tuple[bytes, bytes] | None: ...


def against(ledger: _SignedStore) -> Callable[[ReplayResult, Iterable[Any]], OutputCheck]:
    """:func:`compare_signed` with each instance's rows and payloads read from ``ledger``."""
    def compare(result: ReplayResult, history: Iterable[Any]) -> OutputCheck:
        return compare_signed(result, list(history), ledger.entries(result.instance_id),
                              ledger.payload)
    return compare
