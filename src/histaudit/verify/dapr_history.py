"""Offline check of Dapr's own workflow history signatures (``WorkflowHistorySigning``).

Dapr 1.18 (preview feature ``WorkflowHistorySigning``) signs each batch of history events
a workflow actor persists. This module re-checks, from the raw rows of the actor state
store, what daprd checks when it loads the instance: every ``HistorySignature``, their
chain, full coverage of the history, each signature with its leaf certificate's key, each
certificate chain against the given trust anchors at the time of the signed events, and
the signer's SPIFFE ID. docs/dapr-signatures.md describes the format and the limits.

Pure: it is handed the rows (:class:`DaprWorkflowRows`, built by
``histaudit.bundle.dapr_state`` from a database) and imports no database driver. The
protobuf messages are read with the small wire-format reader of :mod:`.protowire`, not
generated code: the messages are tiny, only a handful of fields are needed, and the
signed bytes must be the exact stored bytes, never a re-serialisation.
"""

from __future__ import annotations

import hashlib
import re
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa, utils
from cryptography.hazmat.primitives.serialization import Encoding

from histaudit.errors import InputError

from .findings import Finding
from .protowire import WireError, int32, read_message, string_value

__all__ = ["ROW_NAME", "DaprHistoryResult", "DaprWorkflowRows", "HistorySignature",
           "SpiffeId", "WireError", "events_digest", "int32", "load_anchors",
           "parse_history_signature", "parse_signing_certificate", "read_message",
           "signature_input", "split_der", "string_value", "verify_dapr_history"]


# -- the messages ------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class HistorySignature:
    """durabletask ``HistorySignature``: fields 1-6 (3 is proto3 ``optional``)."""

    start_event_index: int
    event_count: int
    previous_signature_digest: bytes | None
    events_digest: bytes
    certificate_index: int
    signature: bytes


def parse_history_signature(raw: bytes) -> HistorySignature:
    f = read_message(raw, {1: int, 2: int, 3: bytes, 4: bytes, 5: int, 6: bytes})
    return HistorySignature(start_event_index=f.get(1, 0), event_count=f.get(2, 0),
                            previous_signature_digest=f.get(3), events_digest=f.get(4, b""),
                            certificate_index=f.get(5, 0), signature=f.get(6, b""))


def parse_signing_certificate(raw: bytes) -> bytes:
    """durabletask ``SigningCertificate``: field 1, the DER certificates concatenated
    (leaf first)."""
    return bytes(read_message(raw, {1: bytes}).get(1, b""))


def event_timestamp(raw_event: bytes) -> datetime | None:
    """``HistoryEvent.timestamp`` (field 2, a ``google.protobuf.Timestamp``), or None."""
    ts = read_message(raw_event, {2: bytes}).get(2)
    if ts is None:
        return None
    t = read_message(ts, {1: int, 2: int})
    seconds = t.get(1, 0)
    if seconds >= 1 << 63:
        seconds -= 1 << 64
    nanos = t.get(2, 0)
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=seconds,
                                                         microseconds=nanos // 1000)


def events_digest(raw_events: Sequence[bytes]) -> bytes:
    """sha256 over each event as u64 big-endian length ‖ bytes."""
    h = hashlib.sha256()
    for event in raw_events:
        h.update(struct.pack(">Q", len(event)))
        h.update(event)
    return h.digest()


def signature_input(previous_digest: bytes | None, digest: bytes) -> bytes:
    """What the key signs for an own-history signature: sha256(previous ‖ events)."""
    return hashlib.sha256((previous_digest or b"") + digest).digest()


# -- identities and certificates -----------------------------------------------------------

@dataclass(frozen=True, slots=True)
class SpiffeId:
    """``spiffe://<trust_domain>/ns/<namespace>/<app_id>``, as Dapr's sentry issues it."""

    uri: str
    trust_domain: str
    namespace: str | None
    app_id: str | None

    @classmethod
    def of(cls, cert: x509.Certificate) -> SpiffeId | None:
        try:
            san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        except (x509.ExtensionNotFound, ValueError):  # absent, or not parseable
            return None
        uris = [u for u in san.value.get_values_for_type(x509.UniformResourceIdentifier)
                if u.startswith("spiffe://")]
        if len(uris) != 1:
            return None
        uri = uris[0]
        trust_domain, _, path = uri[len("spiffe://"):].partition("/")
        parts = path.split("/")
        if len(parts) == 3 and parts[0] == "ns":
            return cls(uri, trust_domain, parts[1], parts[2])
        return cls(uri, trust_domain, None, None)


def split_der(chain: bytes) -> list[x509.Certificate]:
    """The certificates of a DER concatenation (each a self-delimiting SEQUENCE)."""
    certs, pos = [], 0
    while pos < len(chain):
        if chain[pos] != 0x30 or pos + 2 > len(chain):
            raise ValueError("not a DER SEQUENCE")
        first = chain[pos + 1]
        if first < 0x80:
            header, length = 2, first
        else:
            n = first & 0x7F
            if n == 0 or n > 4 or pos + 2 + n > len(chain):
                raise ValueError("bad DER length")
            header, length = 2 + n, int.from_bytes(chain[pos + 2:pos + 2 + n], "big")
        end = pos + header + length
        if end > len(chain):
            raise ValueError("truncated DER certificate")
        certs.append(_read_through(x509.load_der_x509_certificate(chain[pos:end])))
        pos = end
    if not certs:
        raise ValueError("empty certificate chain")
    return certs


def _read_through(cert: x509.Certificate) -> x509.Certificate:
    """``cert``, once every part the checks read has parsed. cryptography reads a
    certificate's parts when first asked: a mangled issuer loads, then fails in the
    middle of a chain walk. ValueError here names the part."""
    parts: dict[str, Callable[[], object]] = {
        "subject": lambda: cert.subject, "issuer": lambda: cert.issuer,
        "validity": lambda: (cert.not_valid_before_utc, cert.not_valid_after_utc),
        "extensions": lambda: cert.extensions, "public key": cert.public_key,
        "signature algorithm": lambda: cert.signature_hash_algorithm}
    for part, read in parts.items():
        try:
            read()
        # On attacker bytes cryptography raises ValueError, UnsupportedAlgorithm, and for
        # a name attribute of an unknown string type KeyError: whatever it raises here
        # means the part does not parse.
        except Exception as exc:  # noqa: BLE001
            raise ValueError(f"its {part} does not parse: {exc!r}"[:300]) from None
    return cert


def load_anchors(data: bytes, source: str) -> list[x509.Certificate]:
    """The PEM certificates of a trust-anchors file (``source`` names it in the error)."""
    try:
        anchors = list(x509.load_pem_x509_certificates(data))
    except ValueError:
        raise InputError(f"trust anchors {source}: no PEM certificate in the file") from None
    for i, anchor in enumerate(anchors):
        try:
            _read_through(anchor)
        except ValueError as exc:
            raise InputError(f"trust anchors {source}: certificate {i + 1}: {exc}") from None
    return anchors


def _valid_at(cert: x509.Certificate, at: datetime) -> bool:
    return cert.not_valid_before_utc <= at <= cert.not_valid_after_utc


def _is_ca(cert: x509.Certificate) -> bool:
    try:
        return bool(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except (x509.ExtensionNotFound, ValueError):
        return False


def _issued_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    if cert.issuer != issuer.subject:
        return False
    try:
        cert.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def chain_problem(chain: Sequence[x509.Certificate], anchors: Sequence[x509.Certificate],
                  at: datetime) -> str | None:
    """Why ``chain`` (leaf first) does not lead to one of ``anchors`` at time ``at``, or
    None when it does: each certificate valid at ``at``, each issued (name and signature)
    by the next, every issuer a CA, ending at an anchor. This is what Go's
    ``x509.Certificate.Verify`` with ``ExtKeyUsageAny`` checks for Dapr; cryptography's
    ``PolicyBuilder`` is not used because its web-PKI profile imposes rules (EKU,
    subject and SAN forms) that SPIFFE workload certificates need not meet."""
    anchor_der = {a.public_bytes(Encoding.DER) for a in anchors}
    current, pool = chain[0], list(chain[1:])
    for _ in range(len(chain) + 1):
        if not _valid_at(current, at):
            return (f"certificate {current.subject.rfc4514_string() or '(no subject)'} not "
                    f"valid at {at.isoformat()}")
        if current.public_bytes(Encoding.DER) in anchor_der:
            return None
        for anchor in anchors:
            if _issued_by(current, anchor) and _is_ca(anchor):
                if not _valid_at(anchor, at):
                    return f"trust anchor not valid at {at.isoformat()}"
                return None
        issuer = next((c for c in pool if _is_ca(c) and _issued_by(current, c)), None)
        if issuer is None:
            return "no path from the certificate to a trust anchor"
        pool.remove(issuer)
        current = issuer
    return "no path from the certificate to a trust anchor"  # pragma: no cover


def signature_problem(cert: x509.Certificate, message: bytes, sig: bytes) -> str | None:
    """Why ``sig`` is not the leaf key's signature of ``message`` (the 32-byte signature
    input), or None. Ed25519 signs the input itself; ECDSA and RSA PKCS#1 v1.5 sign it
    as a SHA-256 digest (Dapr's kit signer)."""
    key = cert.public_key()
    try:
        if isinstance(key, ed25519.Ed25519PublicKey):
            key.verify(sig, message)
        elif isinstance(key, ec.EllipticCurvePublicKey):
            key.verify(sig, message, ec.ECDSA(utils.Prehashed(hashes.SHA256())))
        elif isinstance(key, rsa.RSAPublicKey):
            key.verify(sig, message, padding.PKCS1v15(), utils.Prehashed(hashes.SHA256()))
        else:
            return f"unsupported key type {type(key).__name__}"
    except InvalidSignature:
        return "signature does not verify with the leaf certificate's key"
    except ValueError as exc:
        return f"signature does not verify: {exc}"
    return None


# -- the check -----------------------------------------------------------------------------

ROW_KINDS = ("history", "signature", "sigcert", "ext-sigcert")
"""The numbered rows of a workflow's state that matter here, by name prefix."""

ROW_NAME = re.compile(rf"({'|'.join(ROW_KINDS)})-(\d{{6,20}})\Z")
"""The rows of a workflow that :class:`DaprWorkflowRows` holds, by name: daprd writes the
index as ``%06d`` of a 64-bit counter, so 6 to 20 digits (a longer one is no daprd row)."""


@dataclass(frozen=True)
class DaprWorkflowRows:
    """One instance's signing-relevant rows from daprd's actor state store, by index
    (the NNNNNN of ``history-NNNNNN``), raw; ``metadata`` is the raw metadata row."""

    instance: str
    history: Mapping[int, bytes]
    signatures: Mapping[int, bytes]
    certificates: Mapping[int, bytes]
    metadata: bytes | None = None
    external_certificates: Mapping[int, bytes] = field(default_factory=dict)
    """``ext-sigcert-NNNNNN``: the certificates of those who attested completions
    (:mod:`.dapr_attestations`)."""

    @classmethod
    def of_kinds(cls, instance: str, kinds: Mapping[str, Mapping[int, bytes]],
                 metadata: bytes | None) -> DaprWorkflowRows:
        """From rows by kind (a :data:`ROW_KINDS` name -> index -> bytes)."""
        return cls(instance=instance, history=kinds.get("history", {}),
                   signatures=kinds.get("signature", {}),
                   certificates=kinds.get("sigcert", {}), metadata=metadata,
                   external_certificates=kinds.get("ext-sigcert", {}))

    def kinds(self) -> dict[str, Mapping[int, bytes]]:
        """The numbered rows by kind (:data:`ROW_KINDS`)."""
        return {"history": self.history, "signature": self.signatures,
                "sigcert": self.certificates, "ext-sigcert": self.external_certificates}


@dataclass
class DaprHistoryResult:
    instance: str
    events: int
    signatures: int
    covered: int
    signers: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    verified: int = 0
    """How many leading events are covered by signatures 0..k that all passed every check
    (no finding about any of them): Dapr's *signed history*, what a cross-check may
    trust. Events after it are not Dapr's word, whatever else is stored."""
    attestations: int = 0
    """Completion attestations checked (:mod:`.dapr_attestations`)."""

    @property
    def ok(self) -> bool:
        return not self.findings

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "instance": self.instance, "events": self.events,
                "signatures": self.signatures, "covered_events": self.covered,
                "attestations": self.attestations,
                "signers": self.signers, "findings": [f.to_json() for f in self.findings]}


ROW_GAP_LIMIT = 4096
"""Rows of a kind more than this beyond the count stored are set aside, not walked to: a
row named ``history-99999999999999999999`` made the walk over the missing indices
below it run for ever."""


@dataclass(frozen=True)
class _Kind:
    """One kind's rows: those within reach in index order, the first indices missing
    below the highest of them (at most six) and how many, and the rows set aside."""

    rows: list[bytes]
    top: int
    missing: list[int]
    missing_count: int
    far: list[int]


def _kind_of(rows: Mapping[int, bytes]) -> _Kind:
    reach = len(rows) + ROW_GAP_LIMIT
    inside = sorted(i for i in rows if 0 <= i < reach)
    top = inside[-1] if inside else -1
    missing: list[int] = []
    for i in range(top + 1):  # stops after len(inside) + 6 steps
        if i not in rows:
            missing.append(i)
            if len(missing) == 6:
                break
    return _Kind([rows[i] for i in inside], top, missing, top + 1 - len(inside),
                 sorted(i for i in rows if not 0 <= i < reach))


def _metadata_lengths(raw: bytes) -> dict[str, int]:
    """The row counts a ``BackendWorkflowStateMetadata`` names (WireError: not one)."""
    f = read_message(raw, {2: int, 4: int, 5: int, 6: int})
    return {"history": f.get(2, 0), "signature": f.get(4, 0), "sigcert": f.get(5, 0),
            "ext-sigcert": f.get(6, 0)}


_Add = Callable[[str, "int | None", str], None]
"""``add(code, seq, message)``: one finding of the instance being verified."""


def verify_dapr_history(rows: DaprWorkflowRows, anchors: Sequence[x509.Certificate], *,
                        app_id: str | None = None) -> DaprHistoryResult:
    """Every check of the module docstring over ``rows``; one finding per problem
    (a broken signature does not stop the walk: later ones are still judged)."""
    inst = rows.instance
    out: list[Finding] = []

    def add(code: str, seq: int | None, message: str) -> None:
        out.append(Finding.make(code, inst, seq, message))

    history, raw_sigs, raw_certs = _stored_rows(rows, add)
    chains = _chains(raw_certs, add)

    signers: list[str] = []
    expected_start = 0
    covered_flags = [False] * len(history)
    # The sound prefix: signature i extends it when it and all before it added no finding.
    verified, sound, mark, pending = 0, True, len(out), 0
    for i, raw in enumerate(raw_sigs):
        if i > 0 and sound:
            sound = len(out) == mark
            verified = pending if sound else verified
        mark = len(out)
        try:
            sig = parse_history_signature(raw)
        except WireError as exc:
            add("dapr-record-malformed", i, f"signature {i} is not a HistorySignature: {exc}")
            break
        start, end = sig.start_event_index, sig.start_event_index + sig.event_count
        pending = end
        # chain linkage and contiguity
        if i == 0 and sig.previous_signature_digest is not None:
            add("dapr-chain-broken", i, "first signature names a previous signature")
        elif i > 0 and sig.previous_signature_digest != hashlib.sha256(raw_sigs[i - 1]).digest():
            add("dapr-chain-broken", i,
                f"signature {i} does not commit to the digest of signature {i - 1}")
        if start != expected_start:
            add("dapr-chain-broken", i, f"signature {i} starts at event {start}, "
                                        f"expected {expected_start}")
        expected_start = end
        if sig.event_count == 0:
            add("dapr-record-malformed", i, f"signature {i} covers no events")
            continue
        # events a signature claims count as covered; whether it holds is judged below
        covered_flags[start:end] = [True] * len(covered_flags[start:end])
        if end > len(history):
            add("dapr-history-missing", i, f"signature {i} covers events [{start}, {end}) "
                                           f"but only {len(history)} are stored")
            continue
        covered = history[start:end]
        if events_digest(covered) != sig.events_digest:
            add("dapr-events-digest-mismatch", i,
                f"events [{start}, {end}) do not match signature {i}'s digest")
        signer = _signer(i, sig, covered, chains, anchors, app_id, add)
        if signer is not None and signer not in signers:
            signers.append(signer)
    if raw_sigs and sound and len(out) == mark:
        verified = pending
    from .dapr_attestations import check_attestations  # it reads events with this module

    attested = check_attestations(inst, history, [
        rows.external_certificates[i] for i in sorted(rows.external_certificates)],
        anchors, add, signed=bool(raw_sigs))
    gaps = _runs(covered_flags)
    if gaps:
        where = ", ".join(f"[{a}, {b})" for a, b in gaps[:6])
        add("dapr-history-uncovered", None, f"events {where} are covered by no signature"
                                            + ("" if len(gaps) <= 6 else f" ({len(gaps)} runs)"))
    return DaprHistoryResult(instance=inst, events=len(history), signatures=len(raw_sigs),
                             covered=sum(covered_flags), signers=signers, findings=out,
                             verified=min(verified, len(history)), attestations=attested)


def _stored_rows(rows: DaprWorkflowRows, add: _Add
                 ) -> tuple[list[bytes], list[bytes], list[bytes]]:
    """The history events, signatures and certificates as stored, in index order; rows
    missing from the middle, set far apart, or not the count the metadata row names are
    ``dapr-state-inconsistent`` (a missing event stands in as empty, so indices hold)."""
    kinds = {"history": _kind_of(rows.history), "signature": _kind_of(rows.signatures),
             "sigcert": _kind_of(rows.certificates)}
    for name, kind in kinds.items():
        if kind.missing:
            add("dapr-state-inconsistent", kind.missing[0] if name == "signature" else None,
                f"{name} rows missing at {kind.missing} ({kind.missing_count} in all)")
        if kind.far:
            add("dapr-state-inconsistent", None,
                f"{len(kind.far)} {name} rows lie far beyond the {len(kind.rows)} within reach "
                f"(first at index {str(kind.far[0])[:24]}): set aside")
    history = kinds["history"].rows
    if kinds["history"].missing:
        history = [rows.history.get(i, b"") for i in range(kinds["history"].top + 1)]
    try:  # no metadata row (a store read without it): nothing to compare
        lengths = None if rows.metadata is None else _metadata_lengths(rows.metadata)
    except WireError as exc:  # a row that is there but does not read is damage, not absence
        lengths = None
        add("dapr-record-malformed", None, f"the metadata row is not a workflow state "
                                           f"metadata message: {exc}")
    if lengths is not None:
        for name, have in (("history", len(rows.history)), ("signature", len(rows.signatures)),
                           ("sigcert", len(rows.certificates)),
                           ("ext-sigcert", len(rows.external_certificates))):
            if lengths[name] != have:
                add("dapr-state-inconsistent", None,
                    f"metadata names {lengths[name]} {name} rows, {have} are stored")
    return history, kinds["signature"].rows, kinds["sigcert"].rows


def _chains(raw_certs: Sequence[bytes], add: _Add) -> list[list[x509.Certificate] | None]:
    """Each stored certificate row as its chain (None, and a finding, where it is not one)."""
    chains: list[list[x509.Certificate] | None] = []
    for i, raw in enumerate(raw_certs):
        try:
            chains.append(split_der(parse_signing_certificate(raw)))
        except ValueError as exc:
            chains.append(None)
            add("dapr-record-malformed", None, f"sigcert {i} is not a certificate chain: {exc}")
    return chains


def _signer(i: int, sig: HistorySignature, covered: Sequence[bytes],
            chains: Sequence[list[x509.Certificate] | None],
            anchors: Sequence[x509.Certificate], app_id: str | None, add: _Add) -> str | None:
    """Signature ``i``'s signer judged: its certificate stored, its signature over the
    chain link and events digest, its chain to ``anchors`` at the last covered event's
    time, its SPIFFE ID (and ``app_id``'s). Returns the SPIFFE ID, None without one."""
    end = sig.start_event_index + sig.event_count
    if sig.certificate_index >= len(chains) or chains[sig.certificate_index] is None:
        add("dapr-cert-untrusted", i,
            f"signature {i} names certificate {sig.certificate_index}, which is not stored")
        return None
    chain = chains[sig.certificate_index]
    assert chain is not None
    leaf = chain[0]
    problem = signature_problem(leaf, signature_input(sig.previous_signature_digest,
                                                      sig.events_digest), sig.signature)
    if problem:
        add("dapr-signature-invalid", i, f"signature {i}: {problem}")
    try:
        at = event_timestamp(covered[-1])
    except (WireError, OverflowError):  # not a message, or a time datetime cannot hold
        at = None
    if at is None:
        add("dapr-record-malformed", i,
            f"event {end - 1} (last signed by signature {i}) has no readable timestamp")
    else:
        problem = chain_problem(chain, anchors, at)
        if problem:
            add("dapr-cert-untrusted", i, f"signature {i}: {problem}")
    spiffe = SpiffeId.of(leaf)
    if spiffe is None:
        add("dapr-signer-identity", i, f"signature {i}'s certificate has no SPIFFE ID")
        return None
    if app_id is not None and spiffe.app_id != app_id:
        add("dapr-signer-identity", i,
            f"signature {i} was made by {spiffe.uri}, not app {app_id!r}")
    return spiffe.uri


def _runs(flags: Sequence[bool]) -> list[tuple[int, int]]:
    """The [start, end) runs of False in ``flags``."""
    runs: list[tuple[int, int]] = []
    start: int | None = None
    for i, flag in enumerate([*flags, True]):
        if not flag and start is None:
            start = i
        elif flag and start is not None:
            runs.append((start, i))
            start = None
    return runs
