"""Verifying, as one call: the library face of ``histaudit verify`` and ``dapr-verify``.

    from histaudit.verification import Verifier

    with Ledger.open("sqlite:///ledger.db") as ledger:
        verdict = Verifier(ledger, TrustStore.load("keys/"), full=True).all()
    verdict.passes()                      # no error finding: what exit status 0 means
    Verifier(None, trust).bundle("bundle/").ok()      # an exported bundle, offline

A :class:`Verifier` holds what a verification is asked to do besides reading chains —
``full`` (every signature and payload), a checkpoint kept from earlier (``since``: prove
the ledger only grew), the witness policy that judges a checkpoint, and the engine to
cross-check instances with — and checks every input ``histaudit`` verifies: one
instance, a tree of them, every instance, only the checkpoint, an exported bundle, and
Dapr's own signed history of an instance (with the ledger's chain and the cross-check
when it has a ledger). The pure checks stay in :mod:`histaudit.verify` (rows in, reports
out); this module opens nothing but what it is given and adds the reads a check needs
(the consistency proof's leaves, the engine's history). The CLI parses flags into it and
renders its :class:`Verdict` (or :class:`DaprVerdict`); what passes is the verdict's
``ok(fail_on)``, the same rule for every input.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from histaudit.errors import InputError, UsageError
from histaudit.ledger.checkpoint import Checkpoint, parse_note
from histaudit.ledger.keys import TrustStore
from histaudit.verify.consistency import check_consistency
from histaudit.verify.findings import Finding, Severity
from histaudit.verify.report import Report, Scope
from histaudit.verify.tree import TreeNode, instance_tree
from histaudit.verify.verifier import verify_all, verify_chain, verify_instance
from histaudit.witness.policy import WitnessPolicy, witness_findings, witness_report

if TYPE_CHECKING:
    from cryptography.x509 import Certificate

    from histaudit.ledger.spans import ProvenSpan
    from histaudit.ledger.store import Ledger  # the store (SQLAlchemy): a bundle needs none
    from histaudit.verify.dapr_history import DaprHistoryResult, DaprWorkflowRows

__all__ = ["DaprVerdict", "KeptCheckpoint", "Policy", "Verdict", "Verifier"]

Progress = Callable[[int, int | None], None]
"""``progress(done, total)``: entries verified so far, of ``total`` (None: not known)."""


@dataclass(frozen=True)
class KeptCheckpoint:
    """A signed checkpoint kept from earlier: its note's exact bytes (cosignatures
    included), what it says, and where it came from (named in findings)."""

    note: bytes
    checkpoint: Checkpoint
    source: str

    @classmethod
    def read(cls, note: bytes, trust: TrustStore, *, source: str) -> KeptCheckpoint:
        """Parse and check ``note``'s signature (SignatureError if no trusted key made
        it; InputError if it is not a note)."""
        return cls(note, parse_note(note, trust, source=source), source)


@dataclass(frozen=True)
class Policy:
    """What a verification must meet, in one value (sigstore's ``VerificationPolicy`` is
    the model): whose signatures count (``trust``), the witness quorum a checkpoint
    needs (``witnesses``), and the lowest severity of finding that fails (``fail_on``).
    Immutable; :meth:`but` makes a stricter or looser one from it, so a CI step and an
    auditor can share a base policy:

        base = Policy(TrustStore.load("keys/"))
        strict = base.but(fail_on=Severity.WARNING, witnesses=read_policy("witnesses"))
    """

    trust: TrustStore
    witnesses: WitnessPolicy | None = None
    fail_on: Severity = Severity.ERROR

    def __post_init__(self) -> None:
        object.__setattr__(self, "fail_on", Severity.threshold(self.fail_on))

    def but(self, **changes: Any) -> Policy:
        """This policy with ``changes`` (``trust=``, ``witnesses=``, ``fail_on=``)."""
        return dataclasses.replace(self, **changes)

    def passes(self, verdict: Verdict) -> bool:
        """What the exit status says: no finding at or above ``fail_on``."""
        return verdict.passes(self.fail_on)

    def accepts(self, verdict: Verdict) -> bool:
        """What ``--json``'s ``ok`` says: it passes, and every report is ok."""
        return verdict.ok(self.fail_on)


@dataclass(frozen=True)
class Verdict:
    """What one verification found: a report per instance checked, the proof against
    the kept checkpoint (with the witness policy's findings), and the tree walked."""

    reports: tuple[Report, ...]
    consistency: Report | None = None
    tree: tuple[TreeNode, ...] | None = None
    checkpoint: Checkpoint | None = None
    """A bundle's own signed checkpoint (None for a ledger)."""
    spans: tuple[ProvenSpan, ...] = ()
    """The spans a bundle proves (``spans.json``)."""

    @property
    def every(self) -> tuple[Report, ...]:
        """Every report, the proof's last."""
        return (*self.reports, *(() if self.consistency is None else (self.consistency,)))

    def passes(self, fail_on: Severity | str = Severity.ERROR) -> bool:
        """No report has a finding at or above ``fail_on`` (the CLI's exit status 0): a
        Severity or its name; UsageError for anything else (an int above every severity
        would pass every ledger)."""
        threshold = Severity.threshold(fail_on)
        return not any(r.failing(threshold) for r in self.every)

    def ok(self, fail_on: Severity | str = Severity.ERROR) -> bool:
        """What ``--json``'s ``ok`` says: it passes, and no report has a finding of any
        severity that makes it not ok."""
        return self.passes(fail_on) and all(r.ok for r in self.every)


@dataclass(frozen=True)
class DaprVerdict:
    """What verifying Dapr's signed history of one instance found (``dapr-verify``): its
    signatures' result (None: the state store holds none), and with a ledger, the
    ledger's report of the instance and the cross-check's findings."""

    instance: str
    history: DaprHistoryResult | None
    ledger: Report | None = None
    crosscheck: tuple[Finding, ...] | None = None

    def ok(self, fail_on: Severity | str = Severity.ERROR) -> bool:
        threshold = Severity.threshold(fail_on)
        return ((self.history is None or self.history.ok)
                and (self.ledger is None or self.ledger.ok)
                and not any(f.severity >= threshold for f in self.crosscheck or ()))


class Verifier:
    """One verification of ``ledger`` with the keys of ``trust`` (module docstring)."""

    def __init__(self, ledger: Ledger | None, trust: TrustStore | Policy, *,
                 full: bool = False, workers: int | None = None,
                 since: KeptCheckpoint | None = None, witnesses: WitnessPolicy | None = None,
                 engine: str | None = None) -> None:
        """``trust``: a trust store, or a :class:`Policy` (its trust and witnesses; then
        :attr:`policy` judges the verdicts). ``ledger`` None: a verifier of bundles only
        (they carry their checkpoint, which ``witnesses`` judges); with a ledger,
        ``witnesses`` judges ``since``."""
        if isinstance(trust, Policy):
            if witnesses is not None:
                raise ValueError("give the witness policy in the Policy, not beside it")
            self.policy = trust
        else:
            self.policy = Policy(trust, witnesses)
        if self.policy.witnesses is not None and since is None and ledger is not None:
            raise ValueError("a witness policy judges a kept checkpoint: give since=")
        self._ledger = ledger
        self.full, self.workers = full, workers
        self.since, self.engine = since, engine

    @property
    def trust(self) -> TrustStore:
        return self.policy.trust

    @property
    def witnesses(self) -> WitnessPolicy | None:
        return self.policy.witnesses

    @property
    def ledger(self) -> Ledger:
        if self._ledger is None:
            raise UsageError("this Verifier was given no ledger: verify a bundle, or pass "
                             "the ledger")
        return self._ledger

    # --- what to verify -------------------------------------------------------------

    def instance(self, instance_id: str, *, progress: Progress | None = None,
                 total: int | None = None) -> Verdict:
        """``instance_id``'s chain (and with ``engine``, its engine history)."""
        consistency = self._consistency()
        report = verify_instance(self.ledger, instance_id, trust=self.trust, full=self.full,
                                 workers=self.workers,
                                 engine_history=self._history(instance_id),
                                 progress=progress, total=total)
        return Verdict((report,), consistency)

    def tree(self, root: str, *, progress: Progress | None = None) -> Verdict:
        """``root``, every child workflow below it and every generation of each, as its
        signed ``workflow.scheduled_child`` entries name them; ``progress(done, total)``
        in entries, after each instance. An instance the ledger never recorded is not
        asked of the engine."""
        consistency = self._consistency()
        nodes = instance_tree(root, self.ledger.entries)
        total, done = sum(n.entries for n in nodes), 0
        if progress is not None:
            progress(0, total)
        reports = []
        for node in nodes:
            history = None if node.state == "not-recorded" else self._history(node.instance)
            reports.append(verify_instance(self.ledger, node.instance, trust=self.trust,
                                           full=self.full, workers=self.workers,
                                           engine_history=history))
            done += node.entries
            if progress is not None:
                progress(done, total)
        return Verdict(tuple(reports), consistency, tuple(nodes))

    def all(self, *, advance: Callable[[int], None] | None = None) -> Verdict:
        """Every instance, and the ledger-wide checks; ``advance(entries)`` after each
        instance (the signatures of ``full`` come back from one shared pool)."""
        consistency = self._consistency()
        reports = []
        for report in verify_all(self.ledger, trust=self.trust, full=self.full,
                                 workers=self.workers):
            reports.append(report)
            if advance is not None and report.scope is Scope.INSTANCE:
                advance(report.entries)
        return Verdict(tuple(reports), consistency)

    def checkpoint(self) -> Verdict:
        """Only the proof that the ledger extends the kept checkpoint (``since``)."""
        if self.since is None:
            raise ValueError("no kept checkpoint to prove against: give since=")
        return Verdict((), self._consistency())

    def bundle(self, path: str | os.PathLike[str], *,
               anchors: Sequence[Certificate] | None = None,
               progress: Progress | None = None) -> Verdict:
        """An exported bundle, offline: its manifest, files, checkpoint and proofs, every
        chain, its SCITT files and Dapr rows (``anchors`` instead of the ones it carries),
        the proof against ``since``, and ``witnesses``' verdict on the bundle's own
        checkpoint note (its cosignature lines are covered by the manifest's digest).
        The reports: the bundle's own first, one per instance, the witness policy's."""
        from histaudit.bundle.verify import verify_bundle

        result = verify_bundle(path, self.trust, full=True,
                               since=None if self.since is None else self.since.checkpoint,
                               progress=progress, anchors=anchors)
        reports = result.all_reports()
        proof = reports.pop() if result.consistency is not None else None
        if self.witnesses is not None:
            reports.append(witness_report(self.witnesses, result.checkpoint.note,
                                          where="bundle checkpoint.note"))
        return Verdict(tuple(reports), proof, checkpoint=result.checkpoint,
                       spans=result.spans)

    def dapr(self, instance: str, rows: DaprWorkflowRows | None,
             anchors: Sequence[Certificate], *, app_id: str | None = None) -> DaprVerdict:
        """Dapr's signed history of ``instance`` (``rows`` read from its state store; None
        when the store holds none) against ``anchors``; with a ledger, also the
        instance's chain and the cross-check of the two, from one snapshot."""
        from histaudit.verify.dapr_crosscheck import verify_with_ledger
        from histaudit.verify.dapr_history import verify_dapr_history

        if self._ledger is None:
            if rows is None:
                raise InputError(f"no workflow state for instance {instance!r}")
            return DaprVerdict(instance, verify_dapr_history(rows, anchors, app_id=app_id))
        with self._ledger.snapshot() as snap:
            # the rows are streamed twice from the one snapshot, never held: an instance
            # of a million entries costs what verify does
            head = snap.head(instance)
            report = verify_chain(instance, snap.entries(instance), head, trust=self.trust,
                                  payload_lookup=snap.payload)
            if report.entries == 0 and head is None:
                if rows is None:
                    raise InputError(f"no workflow state for instance {instance!r} in the "
                                     f"state store, and no entries for it in the ledger")
                raise InputError(f"the ledger has no entries for instance {instance!r}")
            both = verify_with_ledger(instance, rows, anchors, snap.entries(instance),
                                      snap.payload, app_id=app_id)
        return DaprVerdict(instance, both.history, report, tuple(both.crosscheck))

    # --- the parts ------------------------------------------------------------------

    def _history(self, instance_id: str) -> list[object] | None:
        if self.engine is None:
            return None
        # Here, not at the top: it loads the Dapr SDK's gRPC client, which verifying a
        # ledger without an engine never needs.
        from histaudit.replay.history import History

        return list(History.fetch(self.engine, instance_id).events)

    def _consistency(self) -> Report | None:
        """The proof against ``since`` (None without one), with the witness policy's
        verdict on its note: a quorum that cosigned a tree the ledger no longer extends
        is ``witnessed-checkpoint-contradicted``."""
        if self.since is None:
            return None
        proof = check_consistency(self.ledger, self.since.checkpoint).report()
        if self.witnesses is None:
            return proof
        return proof.with_findings(witness_findings(
            self.witnesses, self.since.note, where=f"checkpoint {self.since.source}",
            contradicted_by=proof), "witness policy")
