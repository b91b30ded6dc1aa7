"""verify.dapr_history: Dapr's workflow history signatures, built here from the format.

The rows are made the way daprd makes them (docs/dapr-signatures.md): history events as
protobuf bytes, each batch signed over sha256(previous signature digest ‖ events digest)
by a leaf certificate whose SPIFFE ID names the app, issued by a tiny CA made here. Then
each tamper an attacker with write access to the state store could make.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.asymmetric.utils import Prehashed
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import NameOID
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from histaudit.errors import InputError
from histaudit.verify.dapr_history import (
    DaprWorkflowRows,
    SpiffeId,
    events_digest,
    load_anchors,
    parse_history_signature,
    parse_signing_certificate,
    read_message,
    signature_input,
    verify_dapr_history,
)

APP = "orders"
SPIFFE = f"spiffe://public/ns/default/{APP}"
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)

Key = ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey


# -- protobuf encoding, written from the wire format ----------------------------------------

def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _int(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value) if value else b""


def _bytes(number: int, value: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def event(event_id: int, at: datetime, body: bytes = b"") -> bytes:
    """A HistoryEvent: 1 eventId, 2 timestamp {1 seconds, 2 nanos}, then a body."""
    ts = _int(1, int(at.timestamp())) + _int(2, at.microsecond * 1000)
    return _int(1, event_id) + _bytes(2, ts) + body


# -- a CA, leaves, and signing ---------------------------------------------------------------

def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _sign_cert(builder: x509.CertificateBuilder, key: Key) -> x509.Certificate:
    algorithm = None if isinstance(key, ed25519.Ed25519PrivateKey) else hashes.SHA256()
    return builder.sign(key, algorithm)


def make_ca(cn: str = "sentry root") -> tuple[x509.Certificate, Key]:
    key = ed25519.Ed25519PrivateKey.generate()
    cert = _sign_cert(
        x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(T0 - timedelta(days=30)).not_valid_after(T0 + timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True),
        key)
    return cert, key


def make_leaf(issuer: x509.Certificate, issuer_key: Key, *, uri: str | None = SPIFFE,
              key: Key | None = None, ca: bool = False,
              valid: tuple[datetime, datetime] | None = None) -> tuple[x509.Certificate, Key]:
    key = key or ed25519.Ed25519PrivateKey.generate()
    start, end = valid or (T0 - timedelta(hours=1), T0 + timedelta(hours=23))
    # a sentry workload certificate has an empty subject, as here
    subject = _name("sentry issuer") if ca else x509.Name([])
    builder = (x509.CertificateBuilder().subject_name(subject)
               .issuer_name(issuer.subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(start).not_valid_after(end)
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if uri is not None:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.UniformResourceIdentifier(uri)]), critical=True)
    return _sign_cert(builder, issuer_key), key


def _raw_sign(key: Key, message: bytes) -> bytes:
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key.sign(message)
    return key.sign(message, ec.ECDSA(Prehashed(hashes.SHA256())))


def encode_signature(start: int, count: int, prev: bytes | None, digest: bytes,
                     cert_index: int, sig: bytes) -> bytes:
    out = _int(1, start) + _int(2, count)
    if prev is not None:
        out += _bytes(3, prev)
    return out + _bytes(4, digest) + _int(5, cert_index) + _bytes(6, sig)


def build(batches: list[int], key: Key, chain: list[x509.Certificate], *,
          instance: str = "wf-1") -> DaprWorkflowRows:
    """History of ``sum(batches)`` events, one signature per batch, one certificate row."""
    history: list[bytes] = []
    sigs: list[bytes] = []
    for count in batches:
        start = len(history)
        history += [event(i + 1, T0 + timedelta(seconds=i), b"\x1a\x03abc")
                    for i in range(start, start + count)]
        prev = hashlib.sha256(sigs[-1]).digest() if sigs else None
        digest = events_digest(history[start:])
        sigs.append(encode_signature(start, count, prev, digest, 0,
                                     _raw_sign(key, signature_input(prev, digest))))
    der = b"".join(c.public_bytes(Encoding.DER) for c in chain)
    meta = _int(2, len(history)) + _int(4, len(sigs)) + _int(5, 1)
    return DaprWorkflowRows(instance=instance, history=dict(enumerate(history)),
                            signatures=dict(enumerate(sigs)), certificates={0: _bytes(1, der)},
                            metadata=meta)


@pytest.fixture(scope="module")
def ca() -> tuple[x509.Certificate, Key]:
    return make_ca()


@pytest.fixture(scope="module")
def good(ca: tuple[x509.Certificate, Key]) -> DaprWorkflowRows:
    leaf, key = make_leaf(*ca)
    return build([3, 3, 3], key, [leaf])


def codes(rows: DaprWorkflowRows, anchors: list[x509.Certificate], **kw: str) -> set[str]:
    return {f.code for f in verify_dapr_history(rows, anchors, **kw).findings}


# -- the format ------------------------------------------------------------------------------

def test_events_digest_is_sha256_of_length_prefixed_events() -> None:
    want = hashlib.sha256(struct.pack(">Q", 1) + b"a" + struct.pack(">Q", 2) + b"bc").digest()
    assert events_digest([b"a", b"bc"]) == want
    assert events_digest([b"ab", b"c"]) != want  # the framing keeps boundaries apart
    assert signature_input(None, want) == hashlib.sha256(want).digest()
    assert signature_input(b"p" * 32, want) == hashlib.sha256(b"p" * 32 + want).digest()


def test_signature_rows_parse_with_absent_zero_fields(good: DaprWorkflowRows) -> None:
    first = parse_history_signature(good.signatures[0])
    assert (first.start_event_index, first.event_count, first.certificate_index) == (0, 3, 0)
    assert first.previous_signature_digest is None and len(first.signature) == 64
    second = parse_history_signature(good.signatures[1])
    assert second.previous_signature_digest == hashlib.sha256(good.signatures[0]).digest()


# -- a good history ------------------------------------------------------------------------

def test_a_good_history_verifies(ca: tuple[x509.Certificate, Key],
                                 good: DaprWorkflowRows) -> None:
    result = verify_dapr_history(good, [ca[0]], app_id=APP)
    assert result.ok, [f.to_json() for f in result.findings]
    assert (result.events, result.signatures, result.covered) == (9, 3, 9)
    assert result.signers == [SPIFFE]
    assert result.to_json()["ok"] is True


def test_ecdsa_p256_leaf_under_an_intermediate_verifies(
        ca: tuple[x509.Certificate, Key]) -> None:
    issuer, issuer_key = make_leaf(*ca, uri=None, ca=True)
    leaf, key = make_leaf(issuer, issuer_key, key=ec.generate_private_key(ec.SECP256R1()))
    rows = build([2, 1], key, [leaf, issuer])
    assert codes(rows, [ca[0]], app_id=APP) == set()
    assert codes(build([2], key, [leaf]), [ca[0]]) == {"dapr-cert-untrusted"}  # no issuer


def test_no_signatures_and_no_events_is_clean(ca: tuple[x509.Certificate, Key]) -> None:
    empty = DaprWorkflowRows(instance="wf", history={}, signatures={}, certificates={})
    assert verify_dapr_history(empty, [ca[0]]).ok


# -- tampering -------------------------------------------------------------------------------

def test_a_flipped_event_byte_is_an_events_digest_mismatch(
        ca: tuple[x509.Certificate, Key], good: DaprWorkflowRows) -> None:
    history = dict(good.history)
    raw = bytearray(history[4])
    raw[-1] ^= 0x01
    history[4] = bytes(raw)
    result = verify_dapr_history(replace(good, history=history), [ca[0]])
    assert [(f.code, f.seq) for f in result.findings] == [("dapr-events-digest-mismatch", 1)]


def test_a_forged_signature_is_invalid(ca: tuple[x509.Certificate, Key],
                                       good: DaprWorkflowRows) -> None:
    sigs = dict(good.signatures)
    raw = bytearray(sigs[2])
    raw[-1] ^= 0x01  # the last byte is inside field 6, the signature
    sigs[2] = bytes(raw)
    assert codes(replace(good, signatures=sigs), [ca[0]]) == {"dapr-signature-invalid"}


def test_a_signature_by_another_key_is_invalid(ca: tuple[x509.Certificate, Key]) -> None:
    leaf, _ = make_leaf(*ca)
    rows = build([2], ed25519.Ed25519PrivateKey.generate(), [leaf])
    assert codes(rows, [ca[0]]) == {"dapr-signature-invalid"}


def test_reordered_signatures_break_the_chain(ca: tuple[x509.Certificate, Key],
                                              good: DaprWorkflowRows) -> None:
    sigs = dict(good.signatures)
    sigs[1], sigs[2] = sigs[2], sigs[1]
    result = verify_dapr_history(replace(good, signatures=sigs), [ca[0]])
    assert {f.code for f in result.findings} == {"dapr-chain-broken"}
    assert {f.seq for f in result.findings} == {1, 2}


def test_a_root_naming_a_previous_signature_breaks_the_chain(
        ca: tuple[x509.Certificate, Key], good: DaprWorkflowRows) -> None:
    sigs = dict(good.signatures)
    sigs[0] = sigs[1]  # a later signature moved to the front
    found = codes(replace(good, signatures=sigs), [ca[0]])
    assert "dapr-chain-broken" in found


def test_a_deleted_last_signature_leaves_its_events_uncovered(
        ca: tuple[x509.Certificate, Key], good: DaprWorkflowRows) -> None:
    sigs = {i: s for i, s in good.signatures.items() if i < 2}
    result = verify_dapr_history(replace(good, signatures=sigs), [ca[0]])
    assert {f.code for f in result.findings} == {"dapr-history-uncovered",
                                                 "dapr-state-inconsistent"}
    assert result.covered == 6
    without_metadata = replace(good, signatures=sigs, metadata=None)
    assert codes(without_metadata, [ca[0]]) == {"dapr-history-uncovered"}


def test_a_cut_at_a_signature_boundary_cannot_be_told_from_the_rows(
        ca: tuple[x509.Certificate, Key], good: DaprWorkflowRows) -> None:
    """Events 6-8 and their signature gone, the metadata rewritten to match: what is
    left is a complete, valid chain — exactly what daprd wrote after its second batch.
    Only something kept outside the store (histaudit's own ledger) can tell."""
    cut = replace(good, history={i: e for i, e in good.history.items() if i < 6},
                  signatures={i: s for i, s in good.signatures.items() if i < 2},
                  metadata=_int(2, 6) + _int(4, 2) + _int(5, 1))
    assert verify_dapr_history(cut, [ca[0]]).ok
    # with the metadata left as daprd wrote it, the cut shows
    assert codes(replace(cut, metadata=good.metadata), [ca[0]]) == {"dapr-state-inconsistent"}


def test_events_cut_inside_a_signed_range_are_missing(
        ca: tuple[x509.Certificate, Key], good: DaprWorkflowRows) -> None:
    cut = replace(good, history={i: e for i, e in good.history.items() if i < 8},
                  metadata=None)
    result = verify_dapr_history(cut, [ca[0]])
    assert [(f.code, f.seq) for f in result.findings] == [("dapr-history-missing", 2)]


def test_an_event_deleted_from_the_middle_is_reported(
        ca: tuple[x509.Certificate, Key], good: DaprWorkflowRows) -> None:
    holed = replace(good, history={i: e for i, e in good.history.items() if i != 4},
                    metadata=None)
    found = codes(holed, [ca[0]])
    assert {"dapr-state-inconsistent", "dapr-events-digest-mismatch"} <= found


def test_another_ca_is_untrusted(good: DaprWorkflowRows) -> None:
    other, _ = make_ca("someone else's root")
    result = verify_dapr_history(good, [other])
    assert {f.code for f in result.findings} == {"dapr-cert-untrusted"}
    assert len(result.findings) == 3  # one per signature


def test_a_certificate_expired_at_event_time_is_untrusted(
        ca: tuple[x509.Certificate, Key]) -> None:
    leaf, key = make_leaf(*ca, valid=(T0 - timedelta(days=2), T0 - timedelta(days=1)))
    assert codes(build([2], key, [leaf]), [ca[0]]) == {"dapr-cert-untrusted"}


def test_another_spiffe_id_is_a_signer_identity_finding(
        ca: tuple[x509.Certificate, Key]) -> None:
    leaf, key = make_leaf(*ca, uri="spiffe://public/ns/default/intruder")
    rows = build([2, 2], key, [leaf])
    assert codes(rows, [ca[0]]) == set()  # no --app-id: any identity under the CA
    result = verify_dapr_history(rows, [ca[0]], app_id=APP)
    assert [(f.code, f.seq) for f in result.findings] == [("dapr-signer-identity", 0),
                                                          ("dapr-signer-identity", 1)]
    assert "intruder" in result.findings[0].message


def test_a_certificate_without_spiffe_id_is_a_signer_identity_finding(
        ca: tuple[x509.Certificate, Key]) -> None:
    leaf, key = make_leaf(*ca, uri=None)
    assert codes(build([1], key, [leaf]), [ca[0]]) == {"dapr-signer-identity"}


def test_spiffe_id_parts() -> None:
    ca, key = make_ca()
    leaf, _ = make_leaf(ca, key)
    spiffe = SpiffeId.of(leaf)
    assert spiffe is not None
    assert (spiffe.trust_domain, spiffe.namespace, spiffe.app_id) == ("public", "default", APP)


def test_malformed_rows_are_reported_not_raised(ca: tuple[x509.Certificate, Key],
                                                good: DaprWorkflowRows) -> None:
    sigs = dict(good.signatures)
    sigs[1] = b"\x0a\xff"  # field 1 as length-delimited, truncated
    assert "dapr-record-malformed" in codes(replace(good, signatures=sigs), [ca[0]])
    certs = {0: _bytes(1, b"\x30\x03abc")}
    found = codes(replace(good, certificates=certs), [ca[0]])
    assert found == {"dapr-record-malformed", "dapr-cert-untrusted"}
    missing_cert = replace(good, certificates={}, metadata=None)
    assert codes(missing_cert, [ca[0]]) == {"dapr-cert-untrusted"}
    # A metadata row that is there but does not read was ignored as if absent.
    assert codes(replace(good, metadata=b"\x0a\xff"), [ca[0]]) == {"dapr-record-malformed"}


def test_a_certificate_whose_issuer_does_not_parse_is_malformed(
        ca: tuple[x509.Certificate, Key], good: DaprWorkflowRows) -> None:
    """cryptography loads such a certificate and raises only when the issuer is read,
    which the chain walk did (a traceback); now it is read through when loaded."""
    der = read_message(good.certificates[0], {1: bytes})[1]
    name = b"\x0c\x0bsentry root"  # the issuer's CN, an UTF8String: before the subject
    assert der.count(name) == 1
    broken = der.replace(name, b"\x01\x0bsentry root")  # a BOOLEAN of 11 bytes
    found = verify_dapr_history(replace(good, certificates={0: _bytes(1, broken)}), [ca[0]])
    assert {f.code for f in found.findings} >= {"dapr-record-malformed"}
    assert any("its issuer does not parse" in f.message for f in found.findings)
    with pytest.raises(InputError, match=r"trust anchors a\.pem: certificate 1: its issuer"):
        load_anchors(x509.load_der_x509_certificate(broken).public_bytes(Encoding.PEM),
                     "a.pem")


def test_a_row_index_far_beyond_the_rows_is_set_aside_not_walked_to(
        ca: tuple[x509.Certificate, Key], good: DaprWorkflowRows) -> None:
    """history-99999999999999999999 (the row names allow 20 digits) made the walk over
    the indices missing below it run for ever; a row 10^8 away took minutes."""
    far = replace(good, history={**good.history, 10**20: good.history[0]},
                  signatures={**good.signatures, 10**8: good.signatures[0]})
    found = verify_dapr_history(far, [ca[0]], app_id=APP)
    assert [f.message for f in found.findings if "far beyond" in f.message] == [
        "1 history rows lie far beyond the 9 within reach (first at index "
        "100000000000000000000): set aside",
        "1 signature rows lie far beyond the 3 within reach (first at index 100000000): "
        "set aside"]
    assert {f.code for f in found.findings} == {"dapr-state-inconsistent"}
    assert found.events == 9 and found.verified == 9  # the rows within reach still verify


# -- rows an attacker edited: findings, never a traceback, never clean (property-style) --------

_PARTS = ("history", "signatures", "certificates")
_NOISE = st.one_of(st.binary(max_size=4), st.sampled_from(
    [b"\x0a\xff", b"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", b"\x10" + b"\xff" * 9 + b"\x7f",
     b"\x12\x0b\x08\xff\xff\xff\xff\xff\xff\xff\xff\x7f", b"\x30\x82\xff\xff", b"\x00",
     b"\x0b", b"\x0d\x00\x00"]))


@st.composite
def _edited_rows(draw: st.DrawFn, rows: DaprWorkflowRows) -> DaprWorkflowRows:
    """One to three edits of the good rows: bytes replaced, inserted or cut inside a
    row, rows deleted or copied to another index, the metadata row replaced."""
    parts = {p: dict(getattr(rows, p)) for p in _PARTS}
    metadata = rows.metadata
    for _ in range(draw(st.integers(1, 3))):
        what = draw(st.sampled_from(["bytes", "bytes", "delete", "copy", "metadata"]))
        if what == "metadata":
            # None (no row) is the store read without it: nothing to compare, not damage
            metadata = draw(st.one_of(st.binary(max_size=12), _NOISE))
            continue
        part = parts[draw(st.sampled_from(_PARTS))]
        if not part:
            continue
        index = draw(st.sampled_from(sorted(part)))
        if what == "delete":
            del part[index]
        elif what == "copy":
            part[draw(st.one_of(st.integers(0, 12), st.sampled_from([10**6, 10**20])))] = \
                part[index]
        else:
            raw = part[index]
            at = draw(st.integers(0, len(raw)))
            cut = draw(st.integers(0, 8))
            part[index] = raw[:at] + draw(_NOISE) + raw[at + cut:]
    return replace(rows, metadata=metadata, **parts)


def _meaning(rows: DaprWorkflowRows) -> tuple[object, ...]:
    """What a protobuf reader takes from the rows: the exact history bytes (they are
    signed), each signature and certificate row parsed (an unknown field added to one
    changes nothing daprd reads either), the metadata's counts; a row that does not parse
    stands for itself."""
    def parsed(fn: Any, raw: bytes) -> object:
        try:
            return fn(raw)
        except ValueError:
            return raw
    return (dict(rows.history),
            {i: parsed(parse_history_signature, r) for i, r in rows.signatures.items()},
            {i: parsed(parse_signing_certificate, r) for i, r in rows.certificates.items()},
            None if rows.metadata is None else parsed(
                lambda raw: read_message(raw, {2: int, 4: int, 5: int}), rows.metadata))


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_edited_rows_are_findings_never_a_traceback(ca: tuple[x509.Certificate, Key],
                                                    good: DaprWorkflowRows,
                                                    data: st.DataObject) -> None:
    rows = data.draw(_edited_rows(good))
    try:
        result = verify_dapr_history(rows, [ca[0]], app_id=APP)
    except InputError as exc:
        message = str(exc)
    else:
        message = ""
        if _meaning(rows) != _meaning(good):
            assert result.findings, rows
    assert "\n" not in message
    assert not codes(good, [ca[0]], app_id=APP)  # the unedited rows stay clean
