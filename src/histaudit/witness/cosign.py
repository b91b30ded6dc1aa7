"""Get a ledger's checkpoint cosigned by the witnesses of a policy, and keep the result.

:func:`cosign` signs and stores a checkpoint over every leaf (or reuses the stored one of
that size), then sends it to every witness of the policy that has a URL, each with the
consistency proof from the size that witness last cosigned (remembered from the stored
cosignatures; a 409 answer names the size it has, and the request is sent again with a
proof from there). Cosignatures that verify are stored in ``histaudit_cosignatures``
beside the checkpoint, and the cosigned note — the checkpoint note with every stored
cosignature line of that size that counts (:func:`stored_cosignatures`) appended — is
judged by the policy. A witness that has seen
a larger tree, or refuses the proof, contradicts the ledger: the result is then not ok,
whatever the quorum says.
"""

from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass
from typing import TYPE_CHECKING

from histaudit.ledger import merkle
from histaudit.ledger.chain import make_checkpoint
from histaudit.ledger.checkpoint import (
    Checkpoint,
    note_text,
    read_cosignature,
    verify_cosignature,
    with_lines,
)
from histaudit.ledger.keys import Signer
from histaudit.services import service_words
from histaudit.urls import secrets_of, shown_url, without_secrets

from .client import Answer, add_checkpoint, request_body
from .policy import Counted, PolicyVerdict, PolicyWitness, WitnessPolicy, counted_cosignatures

if TYPE_CHECKING:
    from histaudit.ledger.store import Ledger

__all__ = ["CosignResult", "WitnessOutcome", "cosign", "stored_cosignatures"]

DEFAULT_TIMEOUT = 10.0
_MAX_TRIES = 3

COSIGNED, REFUSED, CONTRADICTED, UNREACHABLE = "cosigned", "refused", "contradicted", \
    "unreachable"


@dataclass(frozen=True)
class WitnessOutcome:
    """What one witness did with the checkpoint: ``status`` (cosigned, refused,
    contradicted — it has seen a tree this ledger does not extend — or unreachable), a
    one-line ``message``, its cosignature line when it cosigned, and the old size last sent."""

    witness: str
    status: str
    message: str
    line: bytes | None = None
    old_size: int = 0


@dataclass(frozen=True)
class CosignResult:
    checkpoint: Checkpoint
    note: bytes
    """The checkpoint note with every stored cosignature line of its size."""
    outcomes: tuple[WitnessOutcome, ...]
    verdict: PolicyVerdict
    ignored: tuple[str, ...] = ()
    """Stored cosignature rows of this size that do not count, and why (one phrase each):
    written by something other than histaudit, left out of the note."""

    @property
    def contradicted(self) -> tuple[WitnessOutcome, ...]:
        return tuple(o for o in self.outcomes if o.status == CONTRADICTED)

    @property
    def ok(self) -> bool:
        return self.verdict.satisfied and not self.contradicted and not self.verdict.invalid

    def summary(self) -> str:
        """One line: what failed (or that the quorum holds), naming each witness."""
        cp = self.checkpoint
        parts = [f"witness {o.witness}: {o.message}" for o in self.outcomes
                 if o.status != COSIGNED]
        if self.contradicted:
            head = f"checkpoint of {cp.size} leaves: a witness contradicts this ledger"
        elif not self.verdict.satisfied:
            head = (f"checkpoint of {cp.size} leaves: witness quorum not met (needs "
                    f"{self.verdict.required}; cosigned by "
                    f"{', '.join(sorted(self.verdict.cosigned)) or 'none'})")
        else:
            head = f"checkpoint of {cp.size} leaves: witness quorum met"
        return "; ".join([head, *parts])


def stored_cosignatures(ledger: Ledger, size: int, note: bytes,
                        policy: WitnessPolicy | None = None) -> Counted:
    """The stored cosignatures of the checkpoint ``note`` of ``size`` that count
    (:func:`~histaudit.witness.policy.counted_cosignatures`: the one rule)."""
    return counted_cosignatures(((w, kh, line) for s, w, kh, line in ledger.cosignatures()
                                 if s == size), note, policy)


def cosign(ledger: Ledger, signer: Signer, policy: WitnessPolicy, *,
           timeout: float = DEFAULT_TIMEOUT) -> CosignResult:
    """Checkpoint the ledger and collect its witnesses' cosignatures (module docstring)."""
    cp = make_checkpoint(ledger, signer)
    tree = merkle.Tree([merkle.leaf_hash(body) for _, body in ledger.leaves(below=cp.size)])
    if tree.size != cp.size or tree.root() != cp.root:
        # make_checkpoint refuses a gap; rows below its size cannot change meanwhile.
        raise AssertionError("ledger leaves changed under a checkpoint")  # pragma: no cover
    stored = ledger.cosignatures()
    seen: dict[tuple[str, str], int] = {}
    for size, name, key_hash, _ in stored:
        if size <= cp.size:
            seen[(name, key_hash)] = max(size, seen.get((name, key_hash), 0))
    targets = [w for w in policy.witnesses.values() if w.url]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(targets))) as pool:
        outcomes = list(pool.map(
            lambda w: _submit(w, cp, tree, seen.get((w.key.name, w.key.key_hash.hex()), 0),
                              timeout), targets))
    # A witness's fresh cosignature is stored unless one of its key already counts for
    # this size: a row that does not count (forged, malformed) never keeps it out.
    have = {(c.name, c.key_hash) for c in map(read_cosignature, stored_cosignatures(
        ledger, cp.size, cp.note, policy).lines) if c is not None}
    by_name = {w.name: w for w in targets}
    fresh = [o for o in outcomes if o.line is not None and (
        by_name[o.witness].key.name, by_name[o.witness].key.key_hash) not in have]
    if fresh:
        with ledger.write("storing witness cosignatures") as tx:
            for o in fresh:
                key = by_name[o.witness].key
                assert o.line is not None
                tx.add_cosignature(cp.size, key.name, key.key_hash.hex(), o.line)
    counted = stored_cosignatures(ledger, cp.size, cp.note, policy)
    note = with_lines(cp.note, list(counted.lines))
    return CosignResult(checkpoint=cp, note=note, outcomes=tuple(outcomes),
                        verdict=policy.judge(note), ignored=counted.ignored)


def _submit(witness: PolicyWitness, cp: Checkpoint, tree: merkle.Tree, guess: int,
            timeout: float) -> WitnessOutcome:
    assert witness.url is not None
    old, tried = guess, set()
    for _ in range(_MAX_TRIES):
        tried.add(old)
        body = request_body(old, tree.consistency_proof(old, cp.size), cp.note)
        answer = add_checkpoint(witness.url, body, timeout=timeout)
        if answer.status == 409:
            known = _size_of(answer)
            if known is None:
                return _out(witness, REFUSED, f"answered 409 without a tree size "
                                              f"({_excerpt(answer, witness)})", old)
            if known > cp.size:
                return _out(witness, CONTRADICTED,
                            f"it has cosigned a tree of {known} leaves, this ledger holds "
                            f"{cp.size}: the ledger was rolled back or forked", old)
            if known in tried:
                break
            old = known
            continue
        return _judge(witness, cp, answer, old)
    return _out(witness, REFUSED, f"kept answering 409 (sizes tried: "
                                  f"{', '.join(map(str, sorted(tried)))})", old)


def _judge(witness: PolicyWitness, cp: Checkpoint, answer: Answer, old: int) -> WitnessOutcome:
    status = answer.status
    if status == 0:
        url = witness.url or ""
        return _out(witness, UNREACHABLE, f"unreachable at {shown_url(url, user=False)} "
                    f"({without_secrets(answer.unreachable, url)})", old)
    if status == 200:
        text = note_text(cp.note)
        for raw in answer.body.split(b"\n"):
            cosig = read_cosignature(raw + b"\n") if raw else None
            if cosig is not None and verify_cosignature(text, cosig, witness.key):
                return WitnessOutcome(witness.name, COSIGNED,
                                      f"cosigned {cp.size} leaves (from {old})", cosig.line,
                                      old)
        return _out(witness, REFUSED, "answered 200 without a cosignature that verifies "
                                      "with its key in the policy", old)
    if status == 422:
        return _out(witness, CONTRADICTED,
                    f"refused the consistency proof from {old} to {cp.size} leaves: this "
                    f"ledger does not extend the tree it cosigned (a fork or rewritten "
                    f"history)", old)
    if status == 404:
        return _out(witness, REFUSED, f"does not know log {cp.origin} (register it with the "
                                      f"witness: its origin and verifier key)", old)
    if status == 403:
        return _out(witness, REFUSED, f"refused the checkpoint's signature (the witness "
                                      f"holds another key for {cp.origin})", old)
    return _out(witness, REFUSED, f"answered HTTP {status} ({_excerpt(answer, witness)})",
                old)


def _out(witness: PolicyWitness, status: str, message: str, old: int) -> WitnessOutcome:
    return WitnessOutcome(witness.name, status, message, None, old)


def _size_of(answer: Answer) -> int | None:
    text = answer.body.decode("ascii", "replace").strip()
    return int(text) if text.isascii() and text.isdigit() and len(text) < 20 else None


def _excerpt(answer: Answer, witness: PolicyWitness) -> str:
    """The start of what the witness answered, without the secrets of its URL (a
    witness may echo them) or anything shaped like a token."""
    text = answer.body[:4096].decode("utf-8", "replace")
    return service_words(text, secrets_of(witness.url or ""), limit=120) or "no body"
