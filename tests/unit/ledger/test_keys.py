"""histaudit.keys: key files, key ids, trust stores and validity windows."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from histaudit.config import Settings
from histaudit.errors import FormatError, KeyMaterialError
from histaudit.ledger.keys import (
    KEY_TEXT_NOT_PATH,
    TRUST_FILE_LIMIT,
    KeyFileSigner,
    PublicKey,
    TrustStore,
    generate_keypair,
    is_key_material,
    key_id,
    parse_time,
)
from histaudit.ledger.signers import load_signer

SEED = bytes(range(32))


def _raw_public(private: Ed25519PrivateKey) -> bytes:
    return private.public_key().public_bytes(serialization.Encoding.Raw,
                                             serialization.PublicFormat.Raw)


def _pub_doc(seed: bytes = SEED, **extra: str) -> dict[str, str]:
    raw = _raw_public(Ed25519PrivateKey.from_private_bytes(seed))
    return {"alg": "ed25519", "kid": hashlib.sha256(raw).hexdigest()[:16],
            "public_key": base64.b64encode(raw).decode(), **extra}


def _write_private(path: Path, pem: bytes, mode: int = 0o600) -> Path:
    path.write_bytes(pem)
    path.chmod(mode)
    return path


# --- generating and loading private keys ---------------------------------------------

def test_generate_writes_private_0600_and_public_json(tmp_path: Path) -> None:
    priv, pub, signer = generate_keypair(tmp_path / "keys", name="ops",
                                         not_before="2025-01-01T00:00:00Z")
    assert priv == tmp_path / "keys" / "ops.key" and pub == tmp_path / "keys" / "ops.pub.json"
    assert stat.S_IMODE(priv.stat().st_mode) == 0o600
    assert priv.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    doc = json.loads(pub.read_bytes())
    assert doc["alg"] == "ed25519" and doc["kid"] == signer.kid and doc["name"] == "ops"
    assert doc["not_before"] == "2025-01-01T00:00:00Z" and "not_after" not in doc
    assert base64.b64decode(doc["public_key"]) == signer.public.raw
    loaded = KeyFileSigner.load(priv)
    assert loaded.kid == signer.kid
    assert loaded.public.verify(loaded.sign(b"m"), b"m")


def test_generate_private_key_is_0600_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        priv, _, _ = generate_keypair(tmp_path, name="loose")
    finally:
        os.umask(old)
    assert stat.S_IMODE(priv.stat().st_mode) == 0o600


@pytest.mark.parametrize("existing", ["ops.key", "ops.pub.json"])
def test_generate_refuses_to_overwrite(tmp_path: Path, existing: str) -> None:
    (tmp_path / existing).write_bytes(b"precious")
    with pytest.raises(KeyMaterialError, match="refusing to overwrite"):
        generate_keypair(tmp_path, name="ops")
    assert (tmp_path / existing).read_bytes() == b"precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == [existing]


def test_generate_twice_refuses_second(tmp_path: Path) -> None:
    priv, pub, _ = generate_keypair(tmp_path)
    before = priv.read_bytes(), pub.read_bytes()
    with pytest.raises(KeyMaterialError):
        generate_keypair(tmp_path)
    assert (priv.read_bytes(), pub.read_bytes()) == before


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_load_refuses_readable_private_key(tmp_path: Path, mode: int) -> None:
    pem = KeyFileSigner(Ed25519PrivateKey.from_private_bytes(SEED)).private_pem()
    path = _write_private(tmp_path / "k.key", pem, mode)
    with pytest.raises(KeyMaterialError, match="chmod 600") as info:
        KeyFileSigner.load(path)
    assert f"{mode:04o}" in str(info.value)


def test_load_accepts_owner_only_modes(tmp_path: Path) -> None:
    pem = KeyFileSigner(Ed25519PrivateKey.from_private_bytes(SEED)).private_pem()
    for mode in (0o600, 0o400):
        path = _write_private(tmp_path / f"k{mode:o}.key", pem, mode)
        assert KeyFileSigner.load(path).kid == key_id(
            _raw_public(Ed25519PrivateKey.from_private_bytes(SEED)))


BAD_PEM = b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"


@pytest.mark.parametrize("content", [b"", b"not a key at all\n", BAD_PEM,
                                     b"\x30\x2e\x02\x01\x00"],
                         ids=["empty", "text", "bad-pem", "der"])
def test_load_refuses_non_pem(tmp_path: Path, content: bytes) -> None:
    path = _write_private(tmp_path / "k.key", content)
    with pytest.raises(KeyMaterialError, match="not an unencrypted PEM"):
        KeyFileSigner.load(path)


def test_load_refuses_encrypted_pem(tmp_path: Path) -> None:
    pem = Ed25519PrivateKey.from_private_bytes(SEED).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"pw"))
    with pytest.raises(KeyMaterialError, match="not an unencrypted PEM"):
        KeyFileSigner.load(_write_private(tmp_path / "k.key", pem))


@pytest.mark.parametrize("make", [lambda: ec.generate_private_key(ec.SECP256R1()),
                                  lambda: rsa.generate_private_key(65537, 2048)],
                         ids=["ec-p256", "rsa"])
def test_load_refuses_non_ed25519(tmp_path: Path, make: object) -> None:
    pem = make().private_bytes(serialization.Encoding.PEM,  # type: ignore[operator]
                               serialization.PrivateFormat.PKCS8,
                               serialization.NoEncryption())
    with pytest.raises(KeyMaterialError, match="not an Ed25519 key"):
        KeyFileSigner.load(_write_private(tmp_path / "k.key", pem))


def test_load_refuses_missing_and_directory(tmp_path: Path) -> None:
    with pytest.raises(KeyMaterialError, match="does not exist"):
        KeyFileSigner.load(tmp_path / "absent.key")
    with pytest.raises(KeyMaterialError, match="not a regular file"):
        KeyFileSigner.load(tmp_path)


def test_load_signer(tmp_path: Path) -> None:
    priv, _, signer = generate_keypair(tmp_path)
    with pytest.raises(KeyMaterialError, match="HISTAUDIT_KEY"):
        load_signer(Settings.from_env({}).key)
    assert load_signer(Settings.from_env({"HISTAUDIT_KEY": str(priv)}).key).kid == signer.kid
    assert load_signer(priv).kid == signer.kid


def test_signer_repr_hides_key() -> None:
    private = Ed25519PrivateKey.from_private_bytes(SEED)
    signer = KeyFileSigner(private)
    pem = signer.private_pem().decode()
    secret_b64 = base64.b64encode(SEED).decode()
    for shown in (repr(signer), str(signer), f"{signer}", repr([signer])):
        assert signer.kid in shown
        assert SEED.hex() not in shown and secret_b64 not in shown
        assert "PRIVATE" not in shown and pem.splitlines()[1] not in shown


# --- key ids and public key files ---------------------------------------------------

# RFC 8032 §7.1, TEST 1-3: (secret key, public key, message, signature), hex
RFC8032 = [
    ("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
     "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", "",
     "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bac"
     "c61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"),
    ("4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
     "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c", "72",
     "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e"
     "458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"),
    ("c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
     "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025", "af82",
     "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290"
     "ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a"),
]


@pytest.mark.parametrize(("secret", "public", "message", "signature"), RFC8032)
def test_signer_signs_rfc8032_vectors(secret: str, public: str, message: str,
                                      signature: str) -> None:
    signer = KeyFileSigner(Ed25519PrivateKey.from_private_bytes(bytes.fromhex(secret)))
    assert signer.public.raw == bytes.fromhex(public)
    assert signer.sign(bytes.fromhex(message)) == bytes.fromhex(signature)


@settings(max_examples=300, deadline=None)
@given(seed=st.binary(min_size=32, max_size=32), message=st.binary(max_size=2048))
def test_signer_signature_is_openssls_byte_for_byte(seed: bytes, message: bytes) -> None:
    """libsodium signs; Ed25519 is deterministic, so the bytes must be OpenSSL's."""
    private = Ed25519PrivateKey.from_private_bytes(seed)
    signature = KeyFileSigner(private).sign(message)
    assert signature == private.sign(message)
    private.public_key().verify(signature, message)  # raises unless valid


def test_kid_is_sha256_prefix_of_raw_public_key() -> None:
    raw = _raw_public(Ed25519PrivateKey.from_private_bytes(SEED))
    assert key_id(raw) == hashlib.sha256(raw).hexdigest()[:16]
    assert len(key_id(raw)) == 16
    assert KeyFileSigner(Ed25519PrivateKey.from_private_bytes(SEED)).kid == key_id(raw)
    assert key_id(bytes(32)) != key_id(b"\x01" + bytes(31))


def test_public_key_round_trip() -> None:
    doc = _pub_doc(name="ops", not_before="2025-01-01T00:00:00Z",
                   not_after="2026-01-01T00:00:00.5Z")
    key = PublicKey.from_json(doc, source="t")
    assert key.to_json() == doc
    assert key.kid == doc["kid"] and len(key.raw) == 32


def test_public_key_kid_may_be_derived() -> None:
    doc = _pub_doc()
    kid = doc.pop("kid")
    assert PublicKey.from_json(doc, source="t").kid == kid


@pytest.mark.parametrize("public_key", [
    "not base64!",
    "r8dirBSq2Ya39paYjzcQWTxjPnoWZkTdTmEPzhRHxKk",  # unpadded
    base64.b64encode(bytes(31)).decode(),
    base64.b64encode(bytes(33)).decode(),
    "",
], ids=["garbage", "unpadded", "31-bytes", "33-bytes", "empty"])
def test_public_key_bad_base64_refused(public_key: str) -> None:
    doc = _pub_doc()
    doc["public_key"] = public_key
    with pytest.raises(KeyMaterialError, match="base64 Ed25519"):
        PublicKey.from_json(doc, source="t")


def test_public_key_missing_key_refused() -> None:
    doc = _pub_doc()
    del doc["public_key"]
    with pytest.raises(KeyMaterialError):
        PublicKey.from_json(doc, source="t")


def test_public_key_kid_mismatch_refused() -> None:
    doc = _pub_doc()
    doc["kid"] = _pub_doc(bytes(32))["kid"]
    with pytest.raises(KeyMaterialError, match="does not match"):
        PublicKey.from_json(doc, source="t")


@pytest.mark.parametrize("doc", [[], "key", None, {"alg": "rsa"}, {"public_key": "x"}],
                         ids=["list", "string", "null", "rsa", "no-alg"])
def test_public_key_wrong_shape_refused(doc: object) -> None:
    with pytest.raises(KeyMaterialError):
        PublicKey.from_json(doc, source="t")


@pytest.mark.parametrize("bound", ["yesterday", "2025-01-01T00:00:00+00:00",
                                   "2025-13-01T00:00:00Z"])
def test_public_key_bad_window_refused(bound: str) -> None:
    with pytest.raises(KeyMaterialError, match="not_after"):
        PublicKey.from_json(_pub_doc(not_after=bound), source="t")


def test_verify_exact_bytes_only() -> None:
    signer = KeyFileSigner(Ed25519PrivateKey.from_private_bytes(SEED))
    sig = signer.sign(b"body")
    assert signer.public.verify(sig, b"body")
    assert not signer.public.verify(sig, b"body ")
    assert not signer.public.verify(sig[:-1] + bytes([sig[-1] ^ 1]), b"body")
    assert not signer.public.verify(b"short", b"body")
    other = PublicKey.from_json(_pub_doc(bytes(32)), source="t")
    assert not other.verify(sig, b"body")


# --- validity windows ---------------------------------------------------------------

def _windowed(not_before: str | None, not_after: str | None) -> PublicKey:
    extra = {k: v for k, v in (("not_before", not_before), ("not_after", not_after)) if v}
    return PublicKey.from_json(_pub_doc(**extra), source="t")


def test_window_bounds_are_inclusive() -> None:
    key = _windowed("2025-01-01T00:00:00.000000Z", "2025-06-30T23:59:59.999999Z")
    assert key.valid_at("2025-01-01T00:00:00.000000Z")
    assert key.valid_at("2025-06-30T23:59:59.999999Z")
    assert key.valid_at("2025-03-14T09:26:53.000001Z")
    assert not key.valid_at("2024-12-31T23:59:59.999999Z")
    assert not key.valid_at("2025-07-01T00:00:00.000000Z")


def test_window_compares_instants_not_strings() -> None:
    # The bound has no fraction, the entry ts has six digits: same instant, inside.
    key = _windowed("2025-01-01T00:00:00Z", "2025-01-02T00:00:00Z")
    assert key.valid_at("2025-01-01T00:00:00.000000Z")
    assert key.valid_at("2025-01-02T00:00:00.000000Z")
    assert not key.valid_at("2025-01-02T00:00:00.000001Z")
    assert not key.valid_at("2024-12-31T23:59:59.999999Z")
    key = _windowed(None, "2025-01-01T00:00:00.5Z")
    assert key.valid_at("2025-01-01T00:00:00.500000Z")
    assert not key.valid_at("2025-01-01T00:00:00.500001Z")


def test_open_ended_windows() -> None:
    assert _windowed(None, None).valid_at("1970-01-01T00:00:00.000000Z")
    only_start = _windowed("2025-01-01T00:00:00Z", None)
    assert only_start.valid_at("2999-01-01T00:00:00.000000Z")
    assert not only_start.valid_at("2024-01-01T00:00:00.000000Z")
    only_end = _windowed(None, "2025-01-01T00:00:00Z")
    assert only_end.valid_at("1970-01-01T00:00:00.000000Z")
    assert not only_end.valid_at("2025-01-01T00:00:00.000001Z")


def test_window_with_bad_timestamp_raises_format_error() -> None:
    key = _windowed("2025-01-01T00:00:00Z", None)
    with pytest.raises(FormatError):
        key.valid_at("2025-01-01T00:00:00+00:00")


def test_parse_time_requires_z() -> None:
    assert parse_time("2025-01-01T00:00:00.000001Z").microsecond == 1
    assert parse_time("2025-01-01T00:00:00Z").utcoffset() is not None
    for bad in ("2025-01-01T00:00:00", "2025-01-01T00:00:00+00:00", "", "Z",
                "2025-13-40T00:00:00Z"):
        with pytest.raises(FormatError):
            parse_time(bad)


# --- trust stores -------------------------------------------------------------------

def _write_json(path: Path, doc: object) -> Path:
    path.write_text(json.dumps(doc))
    return path


def test_trust_store_from_directory(tmp_path: Path) -> None:
    a, b = _pub_doc(bytes(32)), _pub_doc(SEED)
    _write_json(tmp_path / "a.pub.json", a)
    _write_json(tmp_path / "b.pub.json", b)
    (tmp_path / "ignored.json").write_text("not even json")
    (tmp_path / "a.key").write_text("private keys are not read")
    store = TrustStore.load(tmp_path)
    assert len(store) == 2
    assert a["kid"] in store and b["kid"] in store
    assert {k.kid for k in store} == {a["kid"], b["kid"]}
    assert store.get(a["kid"]) is not None and store.get("0" * 16) is None


def test_trust_store_from_generated_keys(tmp_path: Path) -> None:
    _, _, one = generate_keypair(tmp_path, name="one")
    _, _, two = generate_keypair(tmp_path, name="two")
    store = TrustStore.load(tmp_path)
    assert {k.kid for k in store} == {one.kid, two.kid}


def test_trust_store_from_single_key_file(tmp_path: Path) -> None:
    doc = _pub_doc(not_before="2025-01-01T00:00:00Z")
    store = TrustStore.load(_write_json(tmp_path / "trusted.json", doc))
    assert len(store) == 1
    key = store.get(doc["kid"])
    assert key is not None and key.not_before == "2025-01-01T00:00:00Z"


def test_trust_store_from_keys_list(tmp_path: Path) -> None:
    docs = [_pub_doc(bytes(32)), _pub_doc(SEED, name="second")]
    store = TrustStore.load(_write_json(tmp_path / "trust.json", {"keys": docs}))
    assert {k.kid for k in store} == {d["kid"] for d in docs}


def test_trust_store_errors(tmp_path: Path) -> None:
    with pytest.raises(KeyMaterialError, match="does not exist"):
        TrustStore.load(tmp_path / "absent")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(KeyMaterialError, match=r"no \*\.pub\.json"):
        TrustStore.load(empty)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(KeyMaterialError, match="not JSON"):
        TrustStore.load(tmp_path / "bad.json")
    with pytest.raises(KeyMaterialError, match="must be a list"):
        TrustStore.load(_write_json(tmp_path / "k.json", {"keys": {"a": 1}}))
    bad_kid = _pub_doc()
    bad_kid["kid"] = "0" * 16
    with pytest.raises(KeyMaterialError, match="key 1"):
        TrustStore.load(_write_json(tmp_path / "list.json", {"keys": [_pub_doc(), bad_kid]}))
    bad_dir = tmp_path / "bad-dir"
    bad_dir.mkdir()
    _write_json(bad_dir / "x.pub.json", {"alg": "ed25519", "public_key": "%%%"})
    with pytest.raises(KeyMaterialError, match=r"x\.pub\.json"):
        TrustStore.load(bad_dir)



def test_a_trust_store_listing_a_key_twice_is_refused(tmp_path: Path) -> None:
    """format.md §7.4: with ops.pub.json unbounded and ops-retired.pub.json carrying a
    not_after, keeping the last file read would silently drop the retirement."""
    doc = _pub_doc()
    retired = _pub_doc(not_after="2025-01-01T00:00:00Z")
    with pytest.raises(KeyMaterialError, match=rf"lists key {doc['kid']} twice .*key 0, .*key 2"):
        TrustStore.load(_write_json(tmp_path / "list.json",
                                    {"keys": [retired, _pub_doc(bytes(32)), doc]}))
    with pytest.raises(KeyMaterialError, match="twice"):  # identical copies too
        TrustStore.load(_write_json(tmp_path / "same.json", {"keys": [doc, doc]}))
    store = tmp_path / "store"
    store.mkdir()
    _write_json(store / "ops.pub.json", doc)
    _write_json(store / "ops-retired.pub.json", retired)
    with pytest.raises(KeyMaterialError, match=r"ops-retired\.pub\.json, .*ops\.pub\.json"):
        TrustStore.load(store)
    (store / "ops.pub.json").unlink()
    key = TrustStore.load(store).get(doc["kid"])
    assert key is not None and key.not_after == "2025-01-01T00:00:00Z"


@pytest.mark.parametrize("name", [["ops"], {"a": 1}, 5, True, ""],
                         ids=["list", "object", "number", "bool", "empty"])
def test_a_key_name_that_is_not_text_is_refused(name: object) -> None:
    doc: dict[str, object] = {**_pub_doc(), "name": name}
    with pytest.raises(KeyMaterialError, match="name must be a non-empty string"):
        PublicKey.from_json(doc, source="t")
    assert PublicKey.from_json({**_pub_doc(), "name": None}, source="t").name is None


def test_a_trust_store_file_over_the_limit_is_refused(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    big.write_bytes(json.dumps({"keys": [_pub_doc()], "pad": "x" * TRUST_FILE_LIMIT}).encode())
    with pytest.raises(KeyMaterialError, match=f"larger than {TRUST_FILE_LIMIT} bytes"):
        TrustStore.load(big)


# --- key text given where a key path belongs ---------------------------------------------

def _key_texts() -> dict[str, str]:
    pem = KeyFileSigner(Ed25519PrivateKey.from_private_bytes(SEED)).private_pem().decode()
    return {
        "pem": pem,
        "pem on one line": " ".join(pem.split()),
        "pem with literal \\n": pem.strip().replace("\n", "\\n"),
        "base64 line": pem.splitlines()[1],
        "hex seed": SEED.hex(),
        "sec1 ec key": base64.b64encode(ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.DER, serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption())).decode(),
        "very long": "k" * 5000,
        "nul": "keys/ops.key\x00",
    }


@pytest.mark.parametrize("form", sorted(_key_texts()))
def test_load_refuses_key_text_without_showing_it(form: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    text = _key_texts()[form]
    with pytest.raises(KeyMaterialError) as info:
        KeyFileSigner.load(text)
    assert str(info.value) == KEY_TEXT_NOT_PATH
    if "\x00" not in text:  # an environment variable cannot hold a NUL
        with pytest.raises(KeyMaterialError) as info:
            load_signer(Settings.from_env({"HISTAUDIT_KEY": text}).key)
        assert str(info.value) == KEY_TEXT_NOT_PATH
    secret = base64.b64encode(SEED).decode()
    assert secret[:16] not in str(info.value) and SEED.hex()[:16] not in str(info.value)


@pytest.mark.parametrize("path", [
    "keys/ops.key", "/etc/histaudit/production-signing.key", "ops",
    "/home/user/projects/histaudit/keys/prod1",  # 40 base64-alphabet chars, not DER
    "MyKeysDirectoryWithALongNameButNoDotsAtAll/key", "relative dir/with spaces.key",
])
def test_plausible_missing_paths_are_still_named(path: str) -> None:
    assert not is_key_material(path)
    with pytest.raises(KeyMaterialError, match="does not exist") as info:
        KeyFileSigner.load(path)
    assert path in str(info.value)


def test_an_existing_file_is_a_path_whatever_its_name(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    priv, _, signer = generate_keypair(tmp_path)
    name = SEED.hex()  # looks like a hex seed, but it is a file
    (tmp_path / name).write_bytes(priv.read_bytes())
    (tmp_path / name).chmod(0o600)
    monkeypatch.chdir(tmp_path)
    assert KeyFileSigner.load(name).kid == signer.kid


# --- trust keys with an empty window -----------------------------------------------------

def test_trust_key_with_window_ending_before_it_starts_is_refused(tmp_path: Path) -> None:
    f = _write_json(tmp_path / "old.pub.json", _pub_doc(not_before="2030-01-01T00:00:00Z",
                                                        not_after="2029-12-31T23:59:59Z"))
    with pytest.raises(KeyMaterialError) as info:
        TrustStore.load(tmp_path)
    assert str(info.value) == (f"{f}: validity window is empty: not_before "
                               f"2030-01-01T00:00:00Z is after not_after 2029-12-31T23:59:59Z")
    listed = _write_json(tmp_path / "list.json", {"keys": [
        _pub_doc(), _pub_doc(not_before="2030-01-01T00:00:00.5Z",
                             not_after="2030-01-01T00:00:00Z")]})
    with pytest.raises(KeyMaterialError, match=r"list\.json key 1: validity window is empty"):
        TrustStore.load(listed)


def test_trust_key_window_of_one_instant_is_accepted() -> None:
    key = PublicKey.from_json(_pub_doc(not_before="2030-01-01T00:00:00Z",
                                       not_after="2030-01-01T00:00:00.000000Z"), source="t")
    assert key.valid_at("2030-01-01T00:00:00.000000Z")
