"""Cross-check Dapr's signed workflow history with histaudit's own signed ledger.

Dapr's ``WorkflowHistorySigning`` (:mod:`histaudit.verify.dapr_history`) proves that the
stored events are what daprd signed, in order; it cannot prove that nothing was cut after
the last signature, that the instance was not rolled back to an earlier signed state, or
that it was not deleted: an earlier state is a valid signed prefix. The ledger signs every
activity completion before its result reaches the engine and the workflow's end before
its outcome does, so it knows what Dapr's history must at least contain.

Only *Dapr's signed history* counts: the events covered by the leading signatures that
passed every check (:attr:`DaprHistoryResult.verified`). Against it:

* the ledger ran a task (``activity.started``, ``.completed`` or ``.failed``) that Dapr's
  signed history never scheduled — ``dapr-history-behind-ledger``: daprd commits
  ``TaskScheduled`` before it dispatches the activity, so the history was cut or rewound;
* the ledger signed the workflow's end (``workflow.completed``, ``.failed``,
  ``.continued_as_new``) and Dapr's signed history has no ``ExecutionCompleted`` (nor
  ``ContinueAsNew``) — ``dapr-history-behind-ledger``, said as such;
* every ``TaskCompleted`` and the ledger's ``activity.completed`` records, both ways,
  through the engine cross-check itself (:class:`histaudit.verify.crosscheck.
  EngineCrossCheck`: ``engine-unsigned-completion``, ``replay-mismatch``,
  ``engine-missing-completion``, ``engine-completion-unverifiable``): Dapr's rows *are*
  the engine's history, serialized ``HistoryEvent`` protobufs;
* Dapr's ``ExecutionCompleted`` result against the signed ``workflow.completed`` output
  (``replay-mismatch``), and an ``ExecutionCompleted`` the ledger never signed an end for
  (``engine-unsigned-completion``);
* no Dapr state at all for an instance the ledger holds — ``dapr-instance-missing``.

The events are read with the same wire-format reader as the signatures (never the SDK's
generated classes: verification imports no Dapr SDK, docs/adr/0003-layers.md), into
small values with the attribute names of the generated ``HistoryEvent`` that
:class:`EngineCrossCheck` reads. Pure: rows in, findings out.

For an instance that continued as new, Dapr keeps only the last generation: the ledger's
records after its last ``workflow.continued_as_new`` are compared (none when the ledger
ends with it).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from cryptography import x509

from histaudit.errors import FormatError, HistauditError
from histaudit.ledger import records as rec
from histaudit.ledger.kinds import Kind
from histaudit.ledger.records import StoredEntry, commitment_matches

from .crosscheck import EngineCrossCheck
from .dapr_attestations import attestations_of, canonical_output, io_digest
from .dapr_history import (
    DaprHistoryResult,
    DaprWorkflowRows,
    WireError,
    events_digest,
    int32,
    read_message,
    string_value,
    verify_dapr_history,
)
from .findings import ENTRIES_LISTED, Finding
from .payloads import DIFFERENT, PayloadLookup, compare_committed

__all__ = ["DaprEvent", "DaprLedgerResult", "crosscheck_dapr", "instance_missing",
           "parse_history_event", "verify_with_ledger"]

_RAN = (Kind.ACTIVITY_STARTED, Kind.ACTIVITY_COMPLETED, Kind.ACTIVITY_FAILED)
_ENDS = (Kind.WORKFLOW_COMPLETED, Kind.WORKFLOW_FAILED, Kind.WORKFLOW_CONTINUED_AS_NEW,
         Kind.WORKFLOW_TERMINATED)
_TERMINATED = 5  # OrchestrationStatus ORCHESTRATION_STATUS_TERMINATED

# HistoryEvent's oneof members this check reads (durabletask orchestrator_service.proto)
_EXECUTION_COMPLETED, _TASK_SCHEDULED, _TASK_COMPLETED, _TASK_FAILED = 4, 6, 7, 8
_CONTINUE_AS_NEW = 20


@dataclass(frozen=True, slots=True)
class _StringValue:
    """``google.protobuf.StringValue``: ``value`` is "" when absent, as in protobuf."""

    value: str = ""


@dataclass(frozen=True, slots=True)
class _TaskCompleted:
    taskScheduledId: int  # noqa: N815 - the generated message's field names
    result: _StringValue
    taskExecutionId: str  # noqa: N815


@dataclass(frozen=True, slots=True)
class _TaskScheduled:
    taskExecutionId: str  # noqa: N815


@dataclass(frozen=True, slots=True)
class DaprEvent:
    """The parts of one stored ``HistoryEvent`` the cross-check reads. ``HasField``,
    ``eventId``, ``taskCompleted`` and ``taskScheduled`` are those of the generated
    class, so :class:`EngineCrossCheck` takes these as it takes the engine's own
    events."""

    index: int
    event_id: int
    kind: str  # "taskScheduled", "taskCompleted", "executionCompleted", … or "other"
    taskCompleted: _TaskCompleted | None = None  # noqa: N815
    taskScheduled: _TaskScheduled | None = None  # noqa: N815
    result: str | None = None  # executionCompleted's result (None when absent)
    status: int | None = None  # executionCompleted's OrchestrationStatus
    members: frozenset[str] = field(default_factory=frozenset)

    def HasField(self, name: str) -> bool:  # noqa: N802 - protobuf's name
        return name in self.members

    @property
    def eventId(self) -> int:  # noqa: N802 - protobuf's name
        return self.event_id


def parse_history_event(raw: bytes, index: int) -> DaprEvent:
    """One stored ``history-NNNNNN`` row (its exact bytes) as a :class:`DaprEvent`;
    :class:`WireError` (or UnicodeDecodeError) when it is not a HistoryEvent."""
    f = read_message(raw, {1: int, _EXECUTION_COMPLETED: bytes, _TASK_SCHEDULED: bytes,
                           _TASK_COMPLETED: bytes, _TASK_FAILED: bytes,
                           _CONTINUE_AS_NEW: bytes})
    event_id = int32(f.get(1, 0))
    if _TASK_COMPLETED in f:
        done = read_message(f[_TASK_COMPLETED], {1: int, 2: bytes, 3: bytes})
        task = _TaskCompleted(int32(done.get(1, 0)), _StringValue(string_value(done.get(2))
                                                                    or ""),
                              bytes(done.get(3, b"")).decode("utf-8"))
        return DaprEvent(index, event_id, "taskCompleted", taskCompleted=task,
                         members=frozenset({"taskCompleted"}))
    if _EXECUTION_COMPLETED in f:
        ended = read_message(f[_EXECUTION_COMPLETED], {1: int, 2: bytes})
        return DaprEvent(index, event_id, "executionCompleted",
                         result=string_value(ended.get(2)), status=int32(ended.get(1, 0)),
                         members=frozenset({"executionCompleted"}))
    if _TASK_SCHEDULED in f:
        ordered = read_message(f[_TASK_SCHEDULED], {5: bytes})
        return DaprEvent(index, event_id, "taskScheduled", taskScheduled=_TaskScheduled(
            bytes(ordered.get(5, b"")).decode("utf-8")), members=frozenset({"taskScheduled"}))
    for number, name in ((_TASK_FAILED, "taskFailed"), (_CONTINUE_AS_NEW, "continueAsNew")):
        if number in f:
            return DaprEvent(index, event_id, name, members=frozenset({name}))
    return DaprEvent(index, event_id, "other")


@dataclass
class _Claims:
    """What the ledger's current generation says happened."""

    ran: dict[int, list[int]] = field(default_factory=dict)  # task id -> seqs
    activity: dict[int, str] = field(default_factory=dict)
    end: rec.Entry | None = None


def _claims(entries: Sequence[rec.Entry]) -> _Claims:
    claims = _Claims()
    for e in entries:
        task = e.data.get("task_id")
        if e.kind in _RAN and task.__class__ is int:
            claims.ran.setdefault(task, []).append(e.seq)
            claims.activity.setdefault(task, str(e.data.get("activity", "?")))
        elif e.kind in _ENDS and (claims.end is None or e.seq > claims.end.seq):
            claims.end = e
    return claims


def _generation(entries: Iterable[StoredEntry], instance: str) -> list[rec.Entry]:
    """The instance's entries that parse (the integrity check reports the others), from
    the last ``workflow.continued_as_new`` on (the generation Dapr still holds), in seq
    order.

    "Last" is in seq order, a tie going to the later row (a stable sort's order), so even
    a ledger whose rows are out of order gets the generation it would by sorting first.
    One pass that holds only what can still be in that generation: the entries not below
    the newest continue-as-new so far — as much as Dapr itself holds, not the whole
    instance."""
    kept: list[rec.Entry] = []
    floor: int | None = None  # seq of the last continue-as-new so far
    for row in entries:
        try:
            e = rec.parse_entry(row.body)
        except FormatError:
            continue
        if e.instance != instance or (floor is not None and e.seq < floor):
            continue
        if e.kind == Kind.WORKFLOW_CONTINUED_AS_NEW:
            # not below the last one: it is now the last; what sorts before it goes
            floor = e.seq
            kept = [k for k in kept if k.seq > floor]
            continue
        kept.append(e)
    kept.sort(key=lambda e: e.seq)
    # After the last continue-as-new: the generation Dapr holds (none of its records yet
    # when the ledger ends with it, and then nothing to compare).
    return kept


def _seqs(seqs: Sequence[int]) -> list[int]:
    return sorted(seqs)[:ENTRIES_LISTED]


def crosscheck_dapr(instance: str, signed_events: Sequence[bytes],
                    entries: Iterable[StoredEntry], lookup: PayloadLookup) -> list[Finding]:
    """Findings of the module docstring for ``instance``: ``signed_events`` are the exact
    stored bytes of Dapr's signed history (``history[:result.verified]``), ``entries``
    the instance's ledger rows, ``lookup`` the ledger's stored payloads."""
    out: list[Finding] = []
    events: list[DaprEvent] = []
    for i, raw in enumerate(signed_events):
        try:
            events.append(parse_history_event(raw, i))
        except (WireError, UnicodeDecodeError) as exc:  # signed, yet not a HistoryEvent
            out.append(Finding.make("dapr-record-malformed", instance, None,
                                    f"signed history event {i} is not a HistoryEvent: {exc}"))
    generation = _generation(entries, instance)
    claims = _claims(generation)
    scheduled = {e.event_id for e in events if e.kind == "taskScheduled"}
    ended = next((e for e in events if e.kind in ("executionCompleted", "continueAsNew")),
                 None)
    where = f"Dapr's signed history ({len(signed_events)} events)"
    for task, seqs in sorted(claims.ran.items()):
        if task in scheduled:
            continue
        name = claims.activity[task]
        out.append(Finding.make(
            "dapr-history-behind-ledger", instance, min(seqs),
            f"activity {name} (task {task}) ran at entr{'y' if len(seqs) == 1 else 'ies'} "
            f"{', '.join(map(str, sorted(seqs)[:ENTRIES_LISTED]))}, but {where} never "
            f"scheduled it: the history was cut or rolled back",
            entries=_seqs(seqs), task_id=task, activity=name))
    end = claims.end
    if end is not None and ended is None:
        out.append(Finding.make(
            "dapr-history-behind-ledger", instance, end.seq,
            f"the ledger signed {end.kind} at entry {end.seq}, but {where} has no "
            f"ExecutionCompleted: the instance's end was cut or rolled back"))
    # A client's terminate ends the instance without its code running to an end: the
    # ledger signs the termination when a turn carries it (workflow.terminated), and an
    # instance terminated before any worker saw it has nothing of the app's to sign.
    elif end is None and ended is not None and ended.kind == "executionCompleted" \
            and ended.status != _TERMINATED:
        out.append(Finding.make(
            "engine-unsigned-completion", instance, None,
            f"{where} completes the workflow (event {ended.index}), but the ledger signed "
            f"no workflow.completed or workflow.failed"))
    elif (end is not None and ended is not None and end.kind == Kind.WORKFLOW_COMPLETED
          and ended.kind == "executionCompleted"
          and _differs(end.data.get("output"), ended.result, lookup)):
        out.append(Finding.make(
            "replay-mismatch", instance, end.seq,
            f"Dapr's signed workflow result (event {ended.index}) is not the output the "
            f"ledger signed at entry {end.seq}"))
    engine = EngineCrossCheck(instance, events, lookup, ends=False)  # compared above
    for e in generation:
        if e.kind == Kind.ACTIVITY_COMPLETED:
            engine.observe_valid(_NO_ROW, e.instance, e.seq, e.kind, e.kid, e.ts, e.data)
    out.extend(engine.finish())
    out.extend(_attested_against_ledger(instance, signed_events, generation, lookup))
    return out


def _attested_against_ledger(instance: str, signed_events: Sequence[bytes],
                             generation: Sequence[rec.Entry], lookup: PayloadLookup
                             ) -> list[Finding]:
    """Each activity result Dapr attested (in its signed history) against what the
    ledger committed to: the ``ioDigest`` recomputed from the scheduled input and the
    signed completion's output, both read back from the ledger's stored payloads. A
    task the ledger completed more than once (a re-execution) agrees when any of its
    completions does: the engine kept one of them. A task whose input or outputs are
    erased (or were never kept), a failure (the ledger signs no stack trace) and a child
    workflow (its output is in the child's chain) cannot be recomputed and are passed
    over; the verifier reports what is missing from the ledger elsewhere."""
    try:
        attested, _ = attestations_of(signed_events)
    except (WireError, UnicodeDecodeError):
        return []  # a malformed event is reported above
    inputs: dict[int, Any] = {}
    outputs: dict[int, list[tuple[int, Any]]] = {}
    for e in generation:
        task = e.data.get("task_id")
        if task.__class__ is not int:
            continue
        if e.kind == Kind.WORKFLOW_SCHEDULED_ACTIVITY:
            inputs.setdefault(task, e.data.get("input"))
        elif e.kind == Kind.ACTIVITY_COMPLETED:
            outputs.setdefault(task, []).append((e.seq, e.data.get("output")))
    out: list[Finding] = []
    for att in attested:
        if att.kind != "activity" or att.status != "COMPLETED" or att.task_id not in outputs:
            continue
        given = _kept_text(inputs.get(att.task_id), lookup)
        results = [(seq, _kept_text(ref, lookup)) for seq, ref in outputs[att.task_id]]
        if given is None or any(text is None for _, text in results):
            continue  # not stored: nothing to recompute from
        claimed = read_message(att.payload, {4: bytes}).get(4)
        if any(io_digest(given.text, canonical_output(text.text)) == claimed
               for _, text in results if text is not None):
            continue
        seqs = [seq for seq, _ in results]
        out.append(Finding.make(
            "dapr-attestation-ledger-mismatch", instance, min(seqs),
            f"Dapr's attestation of activity {att.name} (task {att.task_id}, event "
            f"{att.index}) is not over the input and result the ledger committed to at "
            f"entr{'y' if len(seqs) == 1 else 'ies'} {', '.join(map(str, _seqs(seqs)))}",
            entries=_seqs(seqs), task_id=att.task_id, activity=att.name))
    return out


@dataclass(frozen=True)
class _Kept:
    text: str | None
    """The text a payload reference commits to (None: the reference is to no payload)."""


def _kept_text(ref: Any, lookup: PayloadLookup) -> _Kept | None:
    """What a payload reference commits to, read back from the ledger; None when the
    ledger does not hold it (erased, never kept, or not matching its commitment)."""
    if ref is None:
        return _Kept(None)
    if not (isinstance(ref, dict) and isinstance(ref.get("c"), str)):
        return None
    stored = lookup(ref["c"])
    if stored is None or not commitment_matches(ref["c"], stored[1], stored[0]):
        return None
    try:
        return _Kept(stored[1].decode("utf-8"))
    except UnicodeDecodeError:
        return None


_NO_ROW = StoredEntry(-1, "", 0, "", b"", b"")  # EngineCrossCheck reads the parsed fields only


def _differs(ref: Any, result: str | None, lookup: PayloadLookup) -> bool:
    """Whether Dapr's ``result`` provably differs from the signed output ``ref``: by the
    salted commitment while the payload is stored, by size once it is erased."""
    raw = None if result is None or result == "" else result.encode("utf-8")
    return compare_committed(ref, raw, lookup) == DIFFERENT


def instance_missing(instance: str, entries: int) -> Finding:
    """The finding for an instance the ledger holds (``entries`` of them) and the state
    store does not: purged, deleted, or never this store's."""
    return Finding.make(
        "dapr-instance-missing", instance, None,
        f"the ledger holds {entries} entries of instance {instance!r}, but the state store "
        f"has no workflow state for it: purged or deleted")


@dataclass
class DaprLedgerResult:
    """Dapr's own signature checks of one instance (None: no state stored) and the
    cross-check of its signed history with the ledger."""

    history: DaprHistoryResult | None
    crosscheck: list[Finding]

    @property
    def findings(self) -> list[Finding]:
        return [*(self.history.findings if self.history is not None else ()),
                *self.crosscheck]


def capture_record(history: DaprHistoryResult, rows: DaprWorkflowRows,
                   app_id: str | None) -> dict[str, Any]:
    """What ``dapr-capture`` signs into the ledger of a verified Dapr history: how many
    signatures and events, by whom, and the digest of the signed events (the same
    ``events_digest`` Dapr's signatures chain), so the ledger can later say what Dapr's
    history was, once the engine has purged it."""
    signed = [rows.history[i] for i in range(history.verified)]
    return {"signatures": history.signatures, "signed_events": history.verified,
            "events_sha256": events_digest(signed).hex(), "signers": list(history.signers),
            "app_id": app_id}


def _capture_findings(instance: str, captured: rec.Entry | None,
                      signed: Sequence[bytes] | None) -> list[Finding]:
    """The capture's word against the store's: the signed history must still begin with
    the captured events (``signed`` None: the store holds no state any more)."""
    if captured is None:
        return []
    n, digest = captured.data.get("signed_events"), captured.data.get("events_sha256")
    if signed is None:
        return [Finding.make(
            "dapr-history-purged", instance, captured.seq,
            f"the state store has no workflow state for {instance!r} any more; its signed "
            f"history ({n} events, {captured.data.get('signatures')} signatures by "
            f"{', '.join(map(str, captured.data.get('signers') or [])) or 'nobody'}) was "
            f"captured into the ledger at entry {captured.seq}")]
    if not isinstance(n, int) or n > len(signed) or events_digest(signed[:n]).hex() != digest:
        return [Finding.make(
            "dapr-history-changed-since-capture", instance, captured.seq,
            f"Dapr's signed history holds {len(signed)} events whose first {n} are not the "
            f"ones captured at entry {captured.seq} (digest {str(digest)[:16]}…): rolled back "
            f"or replaced since")]
    return []


class _CaptureWatch:
    """Passes a stream of rows through, noting the last ``dapr.history_captured`` entry
    and how many rows went by: the rows stay a stream, read once, never held."""

    def __init__(self) -> None:
        self.captured: rec.Entry | None = None
        self.rows = 0

    def watch(self, entries: Iterable[StoredEntry]) -> Iterator[StoredEntry]:
        marker = Kind.DAPR_HISTORY_CAPTURED.value.encode()
        for row in entries:
            self.rows += 1
            if marker in row.body:  # parse only the rows that can be one
                try:
                    entry = rec.parse_entry(row.body)
                except HistauditError:
                    entry = None  # the chain's verification reports it
                if entry is not None and entry.kind == Kind.DAPR_HISTORY_CAPTURED:
                    self.captured = entry
            yield row


def verify_with_ledger(instance: str, rows: DaprWorkflowRows | None,
                       anchors: Sequence[x509.Certificate], entries: Iterable[StoredEntry],
                       lookup: PayloadLookup, *, app_id: str | None = None
                       ) -> DaprLedgerResult:
    """Dapr's signature checks over ``rows`` (None when the store holds no state for
    ``instance``), then the cross-check of the events they cover with ``entries`` (read
    once, as a stream), and with the last history ``dapr-capture`` signed into them."""
    seen = _CaptureWatch()
    if rows is None:
        for _ in seen.watch(entries):
            pass
        found = _capture_findings(instance, seen.captured, None)
        return DaprLedgerResult(None, found or [instance_missing(instance, seen.rows)])
    history = verify_dapr_history(rows, anchors, app_id=app_id)
    signed = [rows.history[i] for i in range(history.verified)]
    cross = crosscheck_dapr(instance, signed, seen.watch(entries), lookup)
    return DaprLedgerResult(history, [*cross, *_capture_findings(instance, seen.captured,
                                                                 signed)])
