"""One Agent Action Capsule per guarded call, derived from the signed ledger entries.

A guarded call is one ``effect.intent`` entry (histaudit.interceptor.effects: a side
effect, or an agent's tool call ``tool:<name>``) and the entry that closed it, the one
whose ``intent_seq`` names it. Its disposition is read from the ledger, never claimed:

=================  ==========================  ===============  =================
closing entry      ``verdict_class``           ``effect.status`` derived effect_mode
=================  ==========================  ===============  =================
``effect.done``    ``executed``                ``confirmed``    confirmed
``effect.failed``  ``errored``                 ``failed``       dispatched_unconfirmed
none               ``uncertain``               ``dispatched``   dispatched_unconfirmed
``effect.skipped`` ``deduplicated``            (no effect)      not_applicable
=================  ==========================  ===============  =================

A crash inside the effect leaves its intent without an answer (uncertain: it may or may
not have happened); a crash after it makes the re-delivered call find its done and skip
(deduplicated: this call did nothing, the earlier one did). Capsules follow
draft-mih-scitt-agent-action-capsule-05, format 4 (what the reference verifier
``agent-action-capsule`` 0.12.0 accepts; docs/scitt.md says why not -01). They are a pure
function of the entries, so a verifier re-derives them and compares bytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from histaudit.ledger import records as rec
from histaudit.ledger.canonical import canonical_bytes
from histaudit.ledger.kinds import Kind

__all__ = ["SPEC_VERSION", "Capsule", "capsules_of"]

SPEC_VERSION = "draft-mih-scitt-agent-action-capsule-05"
ENTRY_REFERENCE = "histaudit-entry"
"""A ``references[]`` type: a histaudit ledger entry, its digest the entry hash (format.md
§6: SHA-256 of the exact body)."""

_VERDICT = {Kind.EFFECT_DONE: "executed", Kind.EFFECT_FAILED: "errored",
            Kind.EFFECT_SKIPPED: "deduplicated"}
_STATUS = {"executed": "confirmed", "errored": "failed", "uncertain": "dispatched"}


@dataclass(frozen=True)
class Capsule:
    """One guarded call's Capsule: its JSON (``payload``, canonical bytes), and the entry
    its receipt proves (the closing entry, or the intent when nothing closed it)."""

    instance: str
    intent_seq: int
    leaf: int
    """Leaf index of the entry the Capsule's receipt proves."""
    capsule_id: str
    verdict_class: str
    payload: bytes


def capsules_of(entries: Iterable[rec.Entry], *, origin: str) -> list[Capsule]:
    """The Capsules of one instance's guarded calls, in intent order. ``entries`` are
    the instance's parsed entries in chain order; ``origin`` names the ledger
    (``operator``)."""
    intents: dict[int, rec.Entry] = {}
    closing: dict[int, rec.Entry] = {}
    for e in entries:
        if e.kind == Kind.EFFECT_INTENT:
            intents[e.seq] = e
        elif e.kind in _VERDICT:
            seq = e.data.get("intent_seq")
            if type(seq) is int and seq in intents and seq not in closing:
                closing[seq] = e
    out: list[Capsule] = []
    last: dict[tuple[str, str], str] = {}  # (effect name, key) -> its latest Capsule id
    for seq, intent in sorted(intents.items()):
        end = closing.get(seq)
        verdict = _VERDICT[Kind(end.kind)] if end is not None else "uncertain"
        name, key = str(intent.data.get("name")), str(intent.data.get("key"))
        parent = last.get((name, key))
        doc = _capsule(intent, end, verdict, origin, parent)
        cid = hashlib.sha256(canonical_bytes(doc)).hexdigest()
        last[(name, key)] = cid
        proven = end if end is not None else intent
        out.append(Capsule(intent.instance, seq, proven.leaf, cid, verdict,
                           canonical_bytes({**doc, "capsule_id": cid})))
    return out


def _capsule(intent: rec.Entry, end: rec.Entry | None, verdict: str, origin: str,
             parent: str | None) -> dict[str, Any]:
    data: Mapping[str, Any] = intent.data
    doc: dict[str, Any] = {
        "spec_version": SPEC_VERSION, "format_version": "4", "canonicalization_id": "jcs",
        "action_id": f"{intent.instance}#{intent.seq}", "action_type": "decide",
        "operator": origin, "developer": str(data.get("activity") or "unknown"),
        "timestamp": (end or intent).ts, "domain": "action", "provenance": "runtime",
        "disposition": {"decision": "accept", "approver": "policy", "human_disposed": False,
                        "verdict_class": verdict},
        "references": [_reference(e) for e in (intent, end) if e is not None],
    }
    if verdict in _STATUS:
        effect = {"type": str(data.get("name")), "status": _STATUS[verdict],
                  "request_digest": intent.hash, "effect_attestation": "runtime_claimed"}
        if verdict == "executed":
            assert end is not None
            effect["response_digest"] = end.hash
        doc["effect"] = effect
    mode = {"executed": "confirmed", "deduplicated": "not_applicable"}.get(
        verdict, "dispatched_unconfirmed")
    doc["assurance"] = {"attestation_mode": "self_attested", "effect_mode": mode,
                        "ledger_mode": "chained" if parent is not None else "standalone"}
    if parent is not None:
        doc["chain"] = {"parent_capsule_id": parent, "relation": "follows"}
    return doc


def _reference(entry: rec.Entry) -> dict[str, str]:
    return {"type": ENTRY_REFERENCE, "digest_alg": "SHA-256", "digest": entry.hash}
