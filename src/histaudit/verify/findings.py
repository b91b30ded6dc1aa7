"""Finding codes: one stable code per thing the verifier can report.

Codes never change meaning once released; new classes get new codes. The table below
is the single source of truth for each code's severity, group and one-line description
(the user guide's list of codes, docs/guide.md, is a summary of it).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from histaudit.errors import UsageError


class Severity(enum.IntEnum):
    INFO = 10
    WARNING = 20
    ERROR = 30

    @classmethod
    def parse(cls, text: str) -> Severity:
        try:
            return cls[text.upper()]
        except (KeyError, AttributeError):
            raise UsageError(f"unknown severity {str(text)[:40]!r} (use info, warning or "
                             f"error)") from None

    @classmethod
    def threshold(cls, value: Severity | str, *, name: str = "fail_on") -> Severity:
        """``value`` as a threshold: a Severity as it is, one of its names ("error",
        "WARNING") parsed; UsageError for anything else. Severity is an IntEnum, so
        ``Severity.ERROR + 1`` or ``99`` is a plain int above every finding: taken as a
        threshold, nothing would ever fail (issue #50)."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str) and value.upper() in cls.__members__:
            return cls[value.upper()]
        raise UsageError(f"{name} must be a Severity (info, warning or error), not "
                         f"{type(value).__name__} {str(value)[:40]!r}")

    def __str__(self) -> str:
        return self.name.lower()


class Group(enum.StrEnum):
    """What a finding is about: the records themselves, or what the workflow did."""

    INTEGRITY = "integrity"
    """The ledger (or bundle) is not what was signed: tampering, loss, a bad key."""
    BEHAVIOUR = "behaviour"
    """The records are intact and show what a crash did: a re-run, a duplicate effect."""


E, W, I = Severity.ERROR, Severity.WARNING, Severity.INFO  # noqa: E741 - the table reads E/W/I

INT, BEH = Group.INTEGRITY, Group.BEHAVIOUR


class Code(NamedTuple):
    """What a finding code means: its severity, its group, and one line of description."""

    severity: Severity
    group: Group
    text: str


#: code -> (severity, group, what it means): each code says its own group
CODES: dict[str, Code] = {code: Code(*row) for code, row in {
    # integrity of the chain
    "body-changed": (E, INT, "stored entry bytes no longer hash to the recorded entry hash"),
    "signature-invalid": (E, INT, "entry signature does not verify over the stored bytes"),
    "key-untrusted": (E, INT, "entry or head signed by a key that is not in the trust store"),
    "key-outside-window": (E, INT, "entry signed by a key outside that key's validity window"),
    "link-broken": (E, INT, "entry does not commit to the hash of the previous entry"),
    "seq-gap": (E, INT, "sequence numbers skip: entries are missing from the middle"),
    "seq-duplicate": (E, INT, "two entries carry the same sequence number (a forked chain)"),
    "seq-reordered": (E, INT, "entries are out of sequence order"),
    "instance-mismatch": (E, INT, "entry names another instance than the chain it is stored in"),
    "entry-malformed": (E, INT, "entry bytes are not a valid record (JSON, fields or version)"),
    "payload-mismatch": (E, INT, "stored payload does not match its signed commitment"),
    "payload-missing": (E, INT, "payload signed as kept is gone without a signed payload.erased"),
    "tail-truncated": (E, INT, "signed head names entries that are no longer stored"),
    "head-missing": (E, INT, "instance has entries but no signed head"),
    "head-invalid": (E, INT, "signed head is malformed or its signature does not verify"),
    "head-mismatch": (E, INT, "signed head does not match the last stored entry"),
    "instance-missing": (E, INT, "no entries and no head are stored for this instance"),
    # the ledger-wide tree and its checkpoints
    "leaf-mismatch": (E, INT, "entry is stored at another ledger-wide position than it signed"),
    "leaves-missing": (E, INT, "ledger-wide leaf indices have a gap: entries or instances deleted"),
    "checkpoint-rollback": (E, INT, "ledger is smaller than an earlier signed checkpoint"),
    "checkpoint-inconsistent": (E, INT, "ledger is not an append-only extension of a checkpoint"),
    "ledger-id-mismatch": (E, INT, "ledger's unsigned id differs from the origin of a checkpoint"),
    "inclusion-invalid": (E, INT, "entry's inclusion proof does not lead to the checkpoint root"),
    "bundle-file-changed": (E, INT, "a bundle file differs from what the signed manifest lists"),
    "span-unproven": (E, INT, "a span names an entry the ledger or bundle does not hold as named"),
    # a bundle's SCITT statements, receipts and Capsules (docs/scitt.md)
    "scitt-statement-invalid": (E, INT, "an entry's SCITT statement is missing, unsigned by a "
                                        "trusted key, or not of its body"),
    "scitt-receipt-invalid": (E, INT, "a COSE receipt does not prove its leaf, or the tree's "
                                      "growth, against the signed checkpoint"),
    "capsule-invalid": (E, INT, "a guarded call's Agent Action Capsule is missing, unsigned, or "
                                "not the one its entries imply"),
    # witness cosignatures of checkpoints (docs/bundle.md §4.4)
    "witness-quorum-missing": (E, INT, "checkpoint lacks the witness cosignatures its policy "
                                       "needs"),
    "cosignature-invalid": (E, INT, "a policy witness's cosignature does not verify over the note"),
    "witnessed-checkpoint-contradicted": (E, INT, "ledger contradicts a checkpoint cosigned by its "
                                                  "witness quorum"),
    # Dapr's own history signatures (WorkflowHistorySigning; docs/dapr-signatures.md)
    "dapr-signature-invalid": (E, INT, "Dapr history signature does not verify with its "
                                       "certificate's key"),
    "dapr-chain-broken": (E, INT, "Dapr history signatures do not link or are not contiguous"),
    "dapr-events-digest-mismatch": (E, INT, "Dapr history events differ from what their "
                                            "signature covers"),
    "dapr-history-uncovered": (E, INT, "Dapr history events are covered by no signature"),
    "dapr-history-missing": (E, INT, "Dapr history signature covers events no longer stored"),
    "dapr-cert-untrusted": (E, INT, "Dapr signing certificate does not chain to a trust anchor "
                                    "at the signed events' time"),
    "dapr-signer-identity": (E, INT, "Dapr history signed by another SPIFFE identity than "
                                     "expected"),
    "dapr-record-malformed": (E, INT, "Dapr signature, certificate, event or metadata row is "
                                      "not the message it should be"),
    "dapr-state-inconsistent": (E, INT, "Dapr workflow state rows are missing or disagree with "
                                        "its metadata"),
    # Dapr's signed history against the ledger (docs/dapr-signatures.md, cross-check)
    "propagated-history-mismatch": (E, INT, "a workflow was given a propagated history its "
                                            "ancestors did not sign (changed or cut short)"),
    "rerun-prefix-mismatch": (E, INT, "a rerun's copied history holds a result its source did "
                                      "not sign"),
    "dapr-attestation-invalid": (E, INT, "a Dapr completion attestation does not verify or does "
                                         "not attest the completion it is stored in"),
    "dapr-attestation-missing": (E, INT, "a completion in Dapr's signed history carries no "
                                         "attestation"),
    "dapr-attestation-ledger-mismatch": (E, INT, "a Dapr completion attestation's ioDigest is not "
                                                 "that of the input and result the ledger "
                                                 "committed to"),
    "dapr-history-behind-ledger": (E, INT, "Dapr's signed history lacks what the ledger signed: "
                                           "cut at a signature boundary or rolled back"),
    "dapr-instance-missing": (E, INT, "the ledger holds an instance the Dapr state store has no "
                                      "state for (purged or deleted)"),
    "dapr-history-purged": (I, INT, "Dapr's state of the instance is gone, after its signed "
                                    "history was captured into the ledger (dapr-capture)"),
    "dapr-history-changed-since-capture": (E, INT, "Dapr's signed history is not the one captured "
                                                   "into the ledger: rolled back or replaced"),
    # behaviour across crashes
    "activity-reexecuted": (I, BEH, "activity delivered more than once for one task "
                                    "(at-least-once)"),
    "activity-nondeterministic": (W, BEH, "re-executions of one task returned different results"),
    "effect-duplicate": (E, BEH, "side effect completed more than once for one idempotency key"),
    "effect-uncertain": (W, BEH, "side effect started, never confirmed, and the activity ran "
                                 "again"),
    "effect-deduplicated": (I, BEH, "re-execution found the side effect done and skipped it"),
    "llm-call-repeated": (W, BEH, "an activity's LLM calls were made again by a re-execution: "
                                  "the calls and tokens a crash cost"),
    "conversation-restarted": (W, BEH, "an agent's LLM call sent less of the conversation than an "
                                       "earlier one: the agent lost it and began again"),
    "replay-mismatch": (E, BEH, "replayed result differs from the signed checkpoint"),
    "workflow-nondeterministic": (E, BEH, "workflow code scheduled something else on replay"),
    "engine-unsigned-completion": (E, BEH, "engine history has a completion with no signed record"),
    "engine-missing-completion": (W, BEH, "signed completion is absent from the engine history"),
    "engine-completion-unverifiable": (I, BEH, "engine completion not comparable: signed payload "
                                               "erased, sizes agree"),
    "decision-resigned": (I, BEH, "workflow decision signed twice: made again after the engine "
                                  "lost the first (a replay's re-append of a lost one is normal)"),
    # how the workflow ended, when not a success
    "workflow-failed": (W, BEH, "the workflow ended failed (workflow.failed): its error type and "
                                "message"),
    "workflow-terminated": (I, BEH, "the workflow was terminated by a client: it ended there, "
                                    "neither unfinished nor unsigned"),
}.items()}


GROUPS: dict[str, Group] = {code: c.group for code, c in CODES.items()}
"""code -> group."""
BEHAVIOUR_CODES = frozenset(c for c, g in GROUPS.items() if g is Group.BEHAVIOUR)
"""What a crash may legitimately cause; every other code is about integrity."""


ENTRIES_LISTED = 6
"""A finding about many entries lists the first this many in ``entries`` (its message
gives the total): the behaviour check keeps no more per task or effect, so its memory
stays bounded however often an activity ran."""


@dataclass(frozen=True, slots=True)
class EffectRef:
    """The side effect a finding is about: its ``name`` and idempotency ``key``."""

    name: str
    key: str

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "key": self.key}


def task_ref(value: Any) -> int | str | None:
    """A task id as a finding names it: an integer as the interceptor writes it, None when
    the entry names none, any other value (a forged entry's) as its text."""
    if value is None or value.__class__ is int:
        return value
    return str(value)  # as the message writes it: True, 1.0, a forged string


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing the verifier found, at one position of one instance's chain.

    ``entries`` are the seqs the finding is about, ascending, ``seq`` among them (empty
    only when ``seq`` is None); ``task_id``, ``activity`` and ``effect`` are set by the
    checks that know them (None otherwise).
    """

    code: str
    instance: str
    seq: int | None
    message: str
    severity: Severity
    entries: tuple[int, ...] = ()
    task_id: int | str | None = None
    activity: str | None = None
    effect: EffectRef | None = None

    def __post_init__(self) -> None:
        seqs = {s for s in self.entries if s.__class__ is int}
        if self.seq is not None:
            seqs.add(self.seq)
        if tuple(self.entries) != tuple(sorted(seqs)):
            object.__setattr__(self, "entries", tuple(sorted(seqs)))

    @property
    def group(self) -> Group:
        return GROUPS[self.code]

    @classmethod
    def make(cls, code: str, instance: str, seq: int | None, message: str, *,
             entries: Iterable[Any] = (), task_id: Any = None, activity: Any = None,
             effect: EffectRef | None = None) -> Finding:
        """A finding at its code's severity. ``entries`` may hold values that are not
        seqs (a forged entry's ``completed_seq``): only integers are kept."""
        return cls(code=code, instance=instance, seq=seq, message=message,
                   severity=CODES[code][0], entries=tuple(entries), task_id=task_ref(task_id),
                   activity=None if activity is None else str(activity), effect=effect)

    def to_json(self) -> dict[str, Any]:
        """Every key always present: ``null`` for what the finding is not about."""
        return {"code": self.code, "severity": str(self.severity), "instance": self.instance,
                "seq": self.seq, "entries": list(self.entries), "task_id": self.task_id,
                "activity": self.activity,
                "effect": None if self.effect is None else self.effect.to_json(),
                "message": self.message}
