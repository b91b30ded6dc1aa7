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

from histaudit import history_file
from histaudit.errors import FormatError, HistauditError
from histaudit.ledger.kinds import Kind
from histaudit.ledger.records import Entry, StoredEntry, commitment_matches, parse_entry
from histaudit.verify.crosscheck import EngineCrossCheck
from histaudit.verify.findings import Finding
from histaudit.verify.payloads import SAME, UNKNOWN, PayloadLookup, compare_committed

from .result import ReplayResult

__all__ = ["NOT_COMPARED", "GenerationCheck", "GenerationStatus", "OutputCheck", "OutputStatus",
           "against", "compare_signed", "replay_generations"]


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
    """``replay-mismatch`` findings (workflow output, activity results, generations)."""
    generations: tuple[GenerationCheck, ...] = ()
    """The earlier generations of a workflow that continued as new, each replayed from
    the history its ``workflow.continued_as_new`` entry signed (the engine keeps only the
    last generation's)."""

    def __bool__(self) -> bool:
        return not self.findings

    def to_json(self) -> dict[str, Any]:
        return {"status": str(self.status), "message": self.message,
                "findings": [f.to_json() for f in self.findings],
                "generations": [g.to_json() for g in self.generations]}


class GenerationStatus(enum.StrEnum):
    SAME = "same"
    """Today's code replays the signed history and continues as new with the signed input."""
    DIFFERENT = "different"
    """It diverges from the signed history, or ends it otherwise: ``replay-mismatch``."""
    UNVERIFIABLE = "unverifiable"
    """It replays the history, but the signed next input was erased: equality unproven."""
    NOT_REPLAYED = "not-replayed"
    """No history to replay: none signed (an older ledger), erased, or unreadable."""


@dataclass(frozen=True, slots=True)
class GenerationCheck:
    """One earlier generation of a workflow that continued as new, replayed."""

    generation: int
    """0 for the first; the engine's history is the generation after the last of these."""
    seq: int
    """The ``workflow.continued_as_new`` entry that signed its end and its history."""
    status: GenerationStatus
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"generation": self.generation, "seq": self.seq, "status": str(self.status),
                "message": self.message}


NOT_COMPARED = OutputCheck(OutputStatus.NOT_COMPARED,
                           "output not compared with the signed one: no ledger given (--db)")


def _same(ref: Any, text: str | None, lookup: PayloadLookup) -> bool | None:
    """Whether ``text`` is the payload ``ref`` commits to; None when that cannot be told."""
    verdict = compare_committed(ref, None if text is None else text.encode("utf-8"), lookup)
    return None if verdict == UNKNOWN else verdict == SAME


def compare_signed(result: ReplayResult, history: Sequence[Any], rows: Iterable[StoredEntry],
                   lookup: PayloadLookup, workflow: Any = None) -> OutputCheck:
    """Compare ``result`` (a replay of ``history``) with the instance's stored ``rows``;
    with ``workflow`` (the code ``result`` replayed), also replay every earlier generation
    from the history the ledger signed for it (:func:`replay_generations`).

    Entries that do not parse are skipped: reporting them is ``histaudit verify``'s job.
    """
    instance = result.instance_id
    cross = EngineCrossCheck(instance, history, lookup)
    ends: list[Entry] = []
    continued: list[Entry] = []
    for row in rows:
        try:
            entry = parse_entry(row.body)
        except FormatError:
            continue
        cross.observe(row, entry)
        if entry.kind in (Kind.WORKFLOW_COMPLETED, Kind.WORKFLOW_FAILED):
            ends.append(entry)
        elif entry.kind == Kind.WORKFLOW_CONTINUED_AS_NEW:
            continued.append(entry)
    findings = [f for f in cross.finish() if f.code == "replay-mismatch"]
    status, message = _compare_end(result, ends, lookup, findings)
    if findings and status is not OutputStatus.DIFFERENT:
        status = OutputStatus.DIFFERENT
        message = f"{message}; but {len(findings)} activity result(s) differ from the signed"
    generations: tuple[GenerationCheck, ...] = ()
    if workflow is not None and continued:
        generations = replay_generations(continued, lookup, workflow, instance)
        bad = [g for g in generations if g.status is GenerationStatus.DIFFERENT]
        findings += [Finding.make("replay-mismatch", instance, g.seq,
                                  f"generation {g.generation}: {g.message}") for g in bad]
        if bad and status is not OutputStatus.DIFFERENT:
            status = OutputStatus.DIFFERENT
            message = f"{message}; but generation {bad[0].generation} does not replay"
        message += "; " + _generations_summary(generations)
    return OutputCheck(status, message, tuple(findings), generations)


def _generations_summary(generations: Sequence[GenerationCheck]) -> str:
    counts: dict[str, int] = {}
    for g in generations:
        counts[g.status] = counts.get(g.status, 0) + 1
    parts = ", ".join(f"{n} {s}" for s, n in counts.items())
    return (f"{len(generations)} earlier generation(s) replayed from their signed "
            f"histories: {parts}")


def replay_generations(continued: Sequence[Entry], lookup: PayloadLookup, workflow: Any,
                       instance: str) -> tuple[GenerationCheck, ...]:
    """Replay each generation a ``workflow.continued_as_new`` entry (``continued``, in
    chain order) ended, from the history it signed, and check that the code continues as
    new with the signed input. A generation with no history to replay says why."""
    from .replayer import replay

    checks = []
    for n, entry in enumerate(continued):
        status, message = _generation(n, entry, lookup, workflow, instance, replay)
        checks.append(GenerationCheck(n, entry.seq, status, message))
    return tuple(checks)


def _generation(n: int, entry: Entry, lookup: PayloadLookup, workflow: Any, instance: str,
                replay: Callable[..., ReplayResult]) -> tuple[GenerationStatus, str]:
    seq = entry.seq
    ref = entry.data.get("history")
    if not (isinstance(ref, dict) and isinstance(ref.get("c"), str)):
        return GenerationStatus.NOT_REPLAYED, (
            f"not replayed: entry {seq} signed no history for it (a ledger written before "
            f"histaudit signed generations' histories, or the SDK's was unreachable)")
    stored = lookup(ref["c"])
    if stored is None:
        return GenerationStatus.NOT_REPLAYED, (f"not replayed: the history entry {seq} "
                                               f"signed was erased")
    salt, raw = stored
    if not commitment_matches(ref["c"], raw, salt):
        return GenerationStatus.DIFFERENT, (f"the stored history is not the one entry {seq} "
                                            f"signed (its payload row was altered)")
    try:
        events = history_file.loads(raw, f"of generation {n} (entry {seq})")
        result = replay(events, workflow, instance)
    except HistauditError as exc:
        return GenerationStatus.NOT_REPLAYED, f"not replayed: {exc}"
    where = f"{result.events} events signed at entry {seq}"
    if result.divergence is not None:
        d = result.divergence
        return GenerationStatus.DIFFERENT, (
            f"DIVERGED from the {where}: {d.kind} at step #{d.event_id}: {d.message}; "
            f"history: {d.expected}; code: {d.actual}")
    if result.outcome != "continued-as-new":
        return GenerationStatus.DIFFERENT, (f"the replay of the {where} ends {result.outcome}"
                                            f", but the generation continued as new")
    same = _same(entry.data.get("input"), result.output, lookup)
    if same is None:
        return GenerationStatus.UNVERIFIABLE, (f"replays the {where}; the next input it "
                                               f"signed was erased")
    if not same:
        return GenerationStatus.DIFFERENT, (f"replays the {where}, but continues as new "
                                            f"with another input than the one signed")
    return GenerationStatus.SAME, (f"OK: replays the {where} and continues as new with "
                                   f"the signed input")


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


def against(ledger: _SignedStore, workflow: Any = None
            ) -> Callable[[ReplayResult, Iterable[Any]], OutputCheck]:
    """:func:`compare_signed` with each instance's rows and payloads read from ``ledger``
    (and, given the ``workflow`` code, its earlier generations replayed)."""
    def compare(result: ReplayResult, history: Iterable[Any]) -> OutputCheck:
        return compare_signed(result, list(history), ledger.entries(result.instance_id),
                              ledger.payload, workflow)
    return compare
