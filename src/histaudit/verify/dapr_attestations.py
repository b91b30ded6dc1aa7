"""Dapr's completion attestations, checked offline (daprd 1.18, ``WorkflowHistorySigning``).

With history signing on, whoever ran an activity — or a child workflow — signs what it
returned, and the parent keeps that signature inside the completion event it stores
(``TaskCompleted``/``TaskFailed`` field 4, ``ChildWorkflowInstanceCompleted``/``Failed``
field 3): an *attestation*, ``{payload, signature}``. The payload is a deterministic
protobuf message ``{parentInstanceId, parentTaskScheduledId, activityName (activities
only), ioDigest, signerCertDigest, terminalStatus, canonicalSpecVersion}``; the signature
is the signer's (its SPIFFE certificate's key) over ``sha256(payload)``, the same
primitive as a history signature; the signer's certificate chain is kept once per digest
in the instance's ``ext-sigcert-NNNNNN`` rows (``{digest, certificate}``, the DER chain
leaf first). ``ioDigest`` is ``sha256(u64be(len(in)) ‖ in ‖ u64be(len(out)) ‖ out)``
over the NFC-normalised UTF-8 of the scheduled input and of the result, or, for a
failure, of a length-prefixed serialisation of its failure details.

daprd checks an attestation once, when the completion arrives, against the wall clock.
This module checks every stored one again, as an auditor would, from the exact stored
bytes: the payload's fields (spec version 1, the status the event's type says, this
instance and task id, the scheduled activity's name), the certificate row its digest
names, the signature over the payload with that certificate's key, the chain to the
trust anchors at the event's time, and the ``ioDigest`` recomputed from the input and
output the history itself holds. :func:`io_digest` is public so the ledger cross-check
(:mod:`.dapr_crosscheck`) recomputes it from what histaudit committed to.
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from cryptography import x509

from .dapr_history import (
    WireError,
    chain_problem,
    event_timestamp,
    int32,
    read_message,
    signature_problem,
    split_der,
    string_value,
)

__all__ = ["Attestation", "attestations_of", "canonical_failure", "check_attestations",
           "external_certificates", "io_digest"]

SPEC_VERSION = 1
"""The ``canonicalSpecVersion`` this reader knows (daprd 1.18 writes 1)."""

_MAX_FAILURE_DEPTH = 32
"""Nested failure details deeper than this are refused, as by daprd."""

# HistoryEvent fields: eventId 1, timestamp 2; the scheduling events and the completions
_SCHEDULED, _CHILD_CREATED = 6, 9
_COMPLETIONS = {7: ("activity", "COMPLETED"), 8: ("activity", "FAILED"),
                10: ("child", "COMPLETED"), 11: ("child", "FAILED")}
_STATUS = {1: "COMPLETED", 2: "FAILED"}

_Add = Callable[[str, "int | None", str], None]


def _nfc(text: str) -> bytes:
    return unicodedata.normalize("NFC", text).encode("utf-8")


def io_digest(given: str | None, returned: bytes) -> bytes:
    """``ioDigest`` of an invocation: ``given`` its input text (None: no input), and
    ``returned`` its output in canonical bytes (:func:`canonical_output`)."""
    inp = b"" if given is None else _nfc(given)
    h = hashlib.sha256()
    for part in (inp, returned):
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.digest()


def canonical_output(result: str | None) -> bytes:
    """A COMPLETED invocation's output bytes: its result text, NFC (none: empty)."""
    return b"" if result is None else _nfc(result)


def canonical_failure(details: bytes | None, depth: int = 0) -> bytes:
    """A FAILED invocation's output bytes from its stored ``TaskFailureDetails``:
    errorType, errorMessage and stackTrace each as u32be length and NFC bytes, then 1 and
    the inner failure, or 0 (``isNonRetriable`` is not part of it)."""
    if depth >= _MAX_FAILURE_DEPTH:
        raise WireError(f"failure details nested deeper than {_MAX_FAILURE_DEPTH}")
    f = read_message(details or b"", {1: bytes, 2: bytes, 3: bytes, 4: bytes})
    stack = read_message(f[3], {1: bytes}).get(1, b"") if 3 in f else b""
    out = bytearray()
    for raw in (f.get(1, b""), f.get(2, b""), stack):
        text = _nfc(bytes(raw).decode("utf-8"))
        out += len(text).to_bytes(4, "big") + text
    if 4 in f:
        out += b"\x01" + canonical_failure(f[4], depth + 1)
    else:
        out += b"\x00"
    return bytes(out)


@dataclass(frozen=True)
class Attestation:
    """One completion event's attestation, with what the history says it attests."""

    index: int
    """The completion event's index in the history (``history-NNNNNN``)."""
    kind: str
    """``activity`` or ``child``."""
    status: str
    """What the event's type says: ``COMPLETED`` or ``FAILED``."""
    task_id: int
    """The event's ``taskScheduledId``."""
    name: str | None
    """The scheduled activity's (or child workflow's) name, None if not scheduled here."""
    given: str | None
    """The scheduled input text the history holds (None: none, or not scheduled here)."""
    returned: bytes
    """The output in canonical bytes (:func:`canonical_output`, :func:`canonical_failure`)."""
    payload: bytes
    signature: bytes
    at: datetime | None
    """The completion event's timestamp (None when unreadable)."""


def attestations_of(history: Sequence[bytes]) -> tuple[list[Attestation], list[int]]:
    """The attestations of ``history`` (stored events, exact bytes), and the indices of
    completion events that carry none. WireError when an event does not read."""
    scheduled: dict[int, tuple[str, str | None]] = {}
    found: list[Attestation] = []
    bare: list[int] = []
    for index, raw in enumerate(history):
        f = read_message(raw, {1: int, _SCHEDULED: bytes, _CHILD_CREATED: bytes,
                               **dict.fromkeys(_COMPLETIONS, bytes)})
        event_id = int32(f.get(1, 0))
        if _SCHEDULED in f:
            s = read_message(f[_SCHEDULED], {1: bytes, 3: bytes})
            scheduled[event_id] = (bytes(s.get(1, b"")).decode("utf-8"), string_value(s.get(3)))
        elif _CHILD_CREATED in f:
            c = read_message(f[_CHILD_CREATED], {2: bytes, 4: bytes})
            scheduled[event_id] = (bytes(c.get(2, b"")).decode("utf-8"), string_value(c.get(4)))
        for number, (kind, status) in _COMPLETIONS.items():
            if number not in f:
                continue
            field_no = 4 if kind == "activity" else 3
            done = read_message(f[number], {1: int, 2: bytes, field_no: bytes})
            task_id = int32(done.get(1, 0))
            if field_no not in done:
                bare.append(index)
                continue
            wrapper = read_message(done[field_no], {1: bytes, 2: bytes})
            returned = (canonical_output(string_value(done.get(2))) if status == "COMPLETED"
                        else canonical_failure(done.get(2)))
            name, given = scheduled.get(task_id, (None, None))
            found.append(Attestation(index, kind, status, task_id, name, given, returned,
                                     bytes(wrapper.get(1, b"")), bytes(wrapper.get(2, b"")),
                                     event_timestamp(raw)))
    return found, bare


def external_certificates(rows: Sequence[bytes], add: _Add
                          ) -> dict[bytes, list[x509.Certificate]]:
    """The ``ext-sigcert`` rows as {digest: chain}; a row whose digest is not the SHA-256
    of its certificate bytes, or that does not read, is a finding and left out."""
    chains: dict[bytes, list[x509.Certificate]] = {}
    for i, raw in enumerate(rows):
        try:
            f = read_message(raw, {1: bytes, 2: bytes})
            digest, der = bytes(f.get(1, b"")), bytes(f.get(2, b""))
            if hashlib.sha256(der).digest() != digest:
                add("dapr-state-inconsistent", None,
                    f"ext-sigcert {i}: its digest is not the SHA-256 of its certificates")
                continue
            chains[digest] = split_der(der)
        except ValueError as exc:  # WireError included
            add("dapr-record-malformed", None, f"ext-sigcert {i} is not a certificate "
                                               f"chain: {exc}")
    return chains


def check_attestations(instance: str, history: Sequence[bytes], ext_rows: Sequence[bytes],
                       anchors: Sequence[x509.Certificate], add: _Add, *,
                       signed: bool) -> int:
    """Check every attestation of ``instance``'s stored ``history`` (see the module
    docstring); return how many were checked. ``signed``: the history carries Dapr's
    signatures, so every completion must carry an attestation (daprd refuses one
    without); unsigned, attestations found are checked and absent ones are not asked
    for."""
    try:
        found, bare = attestations_of(history)
    except (WireError, UnicodeDecodeError) as exc:
        add("dapr-record-malformed", None, f"a history event does not read: {exc}")
        return 0
    if signed:
        for index in bare:
            add("dapr-attestation-missing", None,
                f"completion event {index} carries no attestation of its result")
    chains = external_certificates(ext_rows, add)
    for att in found:
        problems = _problems(instance, att, chains, anchors)
        if problems:
            add("dapr-attestation-invalid", None,
                f"the attestation of event {att.index} ({att.kind} task {att.task_id}): "
                + "; ".join(problems))
    return len(found)


def _problems(instance: str, att: Attestation, chains: Mapping[bytes, list[x509.Certificate]],
              anchors: Sequence[x509.Certificate]) -> list[str]:
    """What is wrong with one attestation ([] when nothing)."""
    try:
        p = read_message(att.payload, {1: bytes, 2: int, 3: bytes, 4: bytes, 5: bytes,
                                       6: int, 7: int})
    except WireError as exc:
        return [f"its payload does not read: {exc}"]
    if att.kind == "activity":
        name, io, cert, status, spec = p.get(3), p.get(4), p.get(5), p.get(6, 0), p.get(7, 0)
    else:  # a child's payload has no name: its fields from 3 on are one lower
        name, io, cert, status, spec = None, p.get(3), p.get(4), p.get(5, 0), p.get(6, 0)
    problems: list[str] = []
    if spec != SPEC_VERSION:
        return [f"canonical spec version {spec}, not {SPEC_VERSION}"]
    if _STATUS.get(status) != att.status:
        problems.append(f"says {_STATUS.get(status, status)}, the event says {att.status}")
    parent = bytes(p.get(1, b"")).decode("utf-8", "replace")
    if parent != instance or int32(p.get(2, 0)) != att.task_id:
        problems.append(f"names task {int32(p.get(2, 0))} of {parent!r}")
    if att.kind == "activity" and att.name is not None \
            and bytes(name or b"").decode("utf-8", "replace") != att.name:
        problems.append(f"names activity {bytes(name or b'')!r}, scheduled as {att.name!r}")
    if io is None or len(io) != 32 or cert is None or len(cert) != 32:
        return [*problems, "its digests are not 32 bytes"]
    chain = chains.get(bytes(cert))
    if chain is None:
        return [*problems, "no ext-sigcert row holds the certificate it names"]
    problem = signature_problem(chain[0], hashlib.sha256(att.payload).digest(), att.signature)
    if problem:
        problems.append(problem)
    if att.at is None:
        problems.append("its event has no readable timestamp")
    else:
        problem = chain_problem(chain, anchors, att.at)
        if problem:
            problems.append(problem)
    if att.name is not None and bytes(io) != io_digest(att.given, att.returned):
        problems.append("its ioDigest is not that of the input and output the history holds")
    return problems
