"""Witness policies (C2SP tlog-policy lines) and cosignature/v1 checks, without a network.

Cosignatures here are made with the ``cryptography`` package straight from the C2SP
tlog-cosignature text (the signed message and the line layout written out in the test),
not with histaudit's helpers, so a mistake in those cannot make its own test pass.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from hypothesis import given, settings
from hypothesis import strategies as st

from histaudit.errors import InputError
from histaudit.ledger.checkpoint import (
    WitnessKey,
    cosignature_message,
    note_text,
    read_cosignature,
    signature_lines,
    verify_cosignature,
    with_lines,
)
from histaudit.verify.findings import CODES
from histaudit.witness.policy import (
    MAX_DEPTH,
    MAX_EXPANDED,
    POLICY_LIMIT,
    WitnessPolicy,
    read_policy,
)

TEXT = (b"histaudit/00000000-0000-4000-8000-000000000000\n3\n"
        b"NmQuc8JUCrEh46a/lUWwokmCzYMOsT080Z3jzmwCHsE=\n")
LOG_LINE = b"\xe2\x80\x94 histaudit/00000000-0000-4000-8000-000000000000 " + \
    base64.b64encode(b"\x01\x02\x03\x04" + bytes(64)) + b"\n"
NOTE = TEXT + b"\n" + LOG_LINE


class Cosigner:
    """A witness key, doing by hand what C2SP tlog-cosignature says."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.private = Ed25519PrivateKey.generate()
        self.raw = self.private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.key_hash = hashlib.sha256(name.encode() + b"\n\x04" + self.raw).digest()[:4]
        key_b64 = base64.b64encode(b"\x04" + self.raw).decode()
        self.vkey = f"{name}+{self.key_hash.hex()}+{key_b64}"

    def line(self, text: bytes = TEXT, when: int = 1_764_000_000) -> bytes:
        message = b"cosignature/v1\ntime " + str(when).encode() + b"\n" + text
        blob = self.key_hash + when.to_bytes(8, "big") + self.private.sign(message)
        return "— ".encode() + self.name.encode() + b" " + base64.b64encode(blob) + b"\n"


@pytest.fixture(scope="module")
def cosigners() -> list[Cosigner]:
    return [Cosigner(f"witness.example/{n}") for n in ("a", "b", "c")]


def _policy(cosigners: list[Cosigner], tail: str) -> WitnessPolicy:
    lines = [f"witness {n} {c.vkey} https://{n}.example/w" for n, c in zip("abc", cosigners)]
    return WitnessPolicy.parse("\n".join(lines) + "\n" + tail)


# --- cosignature/v1 -----------------------------------------------------------------

def test_a_hand_made_cosignature_verifies_and_nothing_else_does(cosigners: list[Cosigner]
                                                                ) -> None:
    c = cosigners[0]
    key = WitnessKey.parse(c.vkey)
    assert (key.name, key.key_hash, key.key.raw, key.vkey) == (c.name, c.key_hash, c.raw,
                                                                 c.vkey)
    cosig = read_cosignature(c.line(when=1_700_000_123))
    assert cosig is not None and cosig.timestamp == 1_700_000_123
    assert verify_cosignature(TEXT, cosig, key)
    assert cosignature_message(7, TEXT) == b"cosignature/v1\ntime 7\n" + TEXT
    # Another text, another time, another witness's key: no.
    assert not verify_cosignature(TEXT.replace(b"\n3\n", b"\n4\n"), cosig, key)
    forged = read_cosignature(c.line(when=1).replace(c.line(when=1)[-20:-2], b"A" * 18))
    assert forged is None or not verify_cosignature(TEXT, forged, key)
    assert not verify_cosignature(TEXT, cosig, WitnessKey.parse(cosigners[1].vkey))
    # The log's own signature line (68 bytes, not 76) is not a cosignature.
    assert read_cosignature(LOG_LINE) is None


@pytest.mark.parametrize(("vkey", "why"), [
    ("no-plus-signs", "not a vkey"),
    ("a+zzzzzzzz+BAAA", "not a vkey"),
    ("a+00000000+" + base64.b64encode(b"\x01" + bytes(32)).decode(), "0x04"),
    ("a+00000000+" + base64.b64encode(b"\x04" + bytes(32)).decode(), "does not match"),
    ("a+00000000+" + base64.b64encode(b"\x04" + bytes(31)).decode(), "0x04"),
])
def test_bad_vkeys_are_input_errors(vkey: str, why: str) -> None:
    with pytest.raises(InputError, match=why):
        WitnessKey.parse(vkey)


def test_note_parts_and_appending_lines(cosigners: list[Cosigner]) -> None:
    extra = cosigners[0].line()
    note = with_lines(NOTE, [extra, extra, LOG_LINE])
    assert note == NOTE + extra  # nothing twice, nothing already there
    assert note_text(note) == TEXT
    assert signature_lines(note) == [LOG_LINE, extra]
    with pytest.raises(InputError):
        note_text(b"no blank line\n")


# --- the policy file ---------------------------------------------------------------------

def test_quorums_nested_groups_and_their_verdicts(cosigners: list[Cosigner]) -> None:
    a, b, c = cosigners
    policy = _policy(cosigners, "group ab any a b\ngroup top 2 ab c # a comment\nquorum top\n")
    assert policy.describe() == "2 of ([1 of (a, b)], c)"
    assert policy.witnesses["a"].url == "https://a.example/w/"
    only_a = policy.judge(NOTE + a.line())
    assert not only_a.satisfied and dict(only_a.cosigned) == {"a": 1_764_000_000}
    assert [f.code for f in only_a.findings()] == ["witness-quorum-missing"]
    assert policy.judge(NOTE + b.line() + c.line()).satisfied
    # a and b satisfy only one member (the group ab): not 2 of (ab, c).
    assert not policy.judge(NOTE + a.line() + b.line()).satisfied


def test_a_cosignature_that_fails_is_a_finding(cosigners: list[Cosigner]) -> None:
    a, b, _ = cosigners
    policy = _policy(cosigners, "group all2 all a b\nquorum all2\n")
    other_text = TEXT.replace(b"\n3\n", b"\n9\n")
    verdict = policy.judge(NOTE + a.line(other_text) + b.line())
    assert verdict.invalid == ("a",) and not verdict.satisfied
    codes = [f.code for f in verdict.findings("kept.note")]
    assert codes == ["cosignature-invalid", "witness-quorum-missing"]
    assert all(code in CODES for code in codes)
    # A line by a witness the policy does not name is not looked at.
    stranger = Cosigner("witness.example/stranger")
    assert policy.judge(NOTE + stranger.line() + a.line() + b.line()).satisfied


def test_quorum_none_and_single_witness(cosigners: list[Cosigner]) -> None:
    assert _policy(cosigners, "quorum none\n").judge(NOTE).satisfied
    single = _policy(cosigners, "quorum b\n")
    assert single.describe() == "witness b"
    assert not single.judge(NOTE + cosigners[0].line()).satisfied
    assert single.judge(NOTE + cosigners[1].line()).satisfied


@pytest.mark.parametrize(("tail", "why"), [
    ("", "no quorum line"),
    ("quorum nobody\n", "not defined"),
    ("group g 3 a b\nquorum g\n", "threshold"),
    ("group g 0 a b\nquorum g\n", "threshold"),
    ("group g any a x\nquorum g\n", "not defined above"),
    ("group g any a a\nquorum g\n", "twice"),
    ("group a any b\nquorum a\n", "already taken"),
    ("quorum a\nquorum b\n", "second quorum"),
    ("witnesses a b\nquorum a\n", "line 4"),
])
def test_bad_policies_name_the_line(cosigners: list[Cosigner], tail: str, why: str) -> None:
    with pytest.raises(InputError, match=why):
        _policy(cosigners, tail)


def test_witness_url_must_be_http(cosigners: list[Cosigner]) -> None:
    with pytest.raises(InputError, match="http"):
        WitnessPolicy.parse(f"witness a {cosigners[0].vkey} ftp://x/\nquorum a\n")
    with pytest.raises(InputError, match="witness policy"):
        read_policy("/nonexistent/policy.txt")


# --- hostile policies: every one is a one-line InputError, and parsing stays bounded ---

@pytest.mark.parametrize(("url", "why"), [
    ("http://[::1/", "http"), ("https://w.example:99999/", "valid port"),
    ("https://:443/", "host"), ("https:///path", "host"),
])
def test_witness_urls_that_cannot_be_dialled_are_refused(cosigners: list[Cosigner], url: str,
                                                          why: str) -> None:
    with pytest.raises(InputError, match=why):
        WitnessPolicy.parse(f"witness a {cosigners[0].vkey} {url}\nquorum a\n")


def test_a_threshold_of_thousands_of_digits_is_a_bad_threshold(cosigners: list[Cosigner]
                                                                ) -> None:
    # int() of 4,301 digits raises ValueError (CPython's conversion limit), not InputError.
    with pytest.raises(InputError, match="threshold '9999"):
        _policy(cosigners, f"group g {'9' * 5000} a b\nquorum g\n")


def test_groups_nested_too_deep_are_refused(cosigners: list[Cosigner]) -> None:
    chain = ["group g0 any a"] + [f"group g{i} any g{i - 1}" for i in range(1, 3000)]
    with pytest.raises(InputError, match=r"line 20: group g16 nests groups more than 16"):
        _policy(cosigners, "\n".join(chain) + "\nquorum g2999\n")
    ok = _policy(cosigners, "\n".join(chain[:MAX_DEPTH]) + f"\nquorum g{MAX_DEPTH - 1}\n")
    assert ok.judge(NOTE + cosigners[0].line()).satisfied and not ok.judge(NOTE).satisfied


def test_groups_that_double_at_every_level_are_refused(cosigners: list[Cosigner]) -> None:
    """x_i and y_i both need x_{i-1} and y_{i-1}: 40 levels stand for 2^40 references,
    which describing or judging the quorum would walk one by one."""
    a, b, _ = cosigners
    lines = ["group x0 all a b", "group y0 all a b"]
    for i in range(1, 40):
        lines += [f"group x{i} all x{i - 1} y{i - 1}", f"group y{i} all x{i - 1} y{i - 1}"]
    with pytest.raises(InputError, match=f"group x10 stands for more than {MAX_EXPANDED}"):
        _policy(cosigners, "\n".join(lines) + "\nquorum x39\n")
    ok = _policy(cosigners, "\n".join(lines[:18]) + "\nquorum x8\n")  # 2^9 = 512 references
    assert ok.describe().count("a") == 256 and ok.judge(NOTE + a.line() + b.line()).satisfied
    assert not ok.judge(NOTE + a.line()).satisfied


def test_a_policy_file_over_the_limit_is_refused_not_read_in_part(
        cosigners: list[Cosigner], tmp_path: Path) -> None:
    head = f"witness a {cosigners[0].vkey}\n"
    path = tmp_path / "policy.txt"
    path.write_text(head + "#" * (POLICY_LIMIT - len(head) - len("quorum a\n")) + "\nquorum a\n")
    assert path.stat().st_size == POLICY_LIMIT + 1
    with pytest.raises(InputError, match=f"larger than {POLICY_LIMIT} bytes"):
        read_policy(str(path))  # read in part, it would have had no quorum line
    path.write_text(head + "quorum a\n")
    assert read_policy(str(path)).quorum == "a"


_WORDS = st.sampled_from(["log", "witness", "group", "quorum", "a", "b", "c", "g", "h",
                          "any", "all", "none", "0", "1", "2", "3", "#", "https://w.example/",
                          "http://[::1", "9" * 30, "x+1+AA==", "\x00", "\u00a0"])


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(st.lists(st.one_of(_WORDS, st.text(max_size=12)), max_size=6),
                      max_size=12))
def test_any_policy_text_parses_or_is_one_input_error(cosigners: list[Cosigner],
                                                     lines: list[list[str]]) -> None:
    """Policies built from the grammar's words, real vkeys and noise: the parser either
    returns a policy whose every method works, or raises InputError naming the file."""
    text = "\n".join(" ".join(w for w in ln) for ln in lines)
    witness_lines = "".join(f"witness {n} {c.vkey}\n" for n, c in zip("abc", cosigners))
    for candidate in (text, witness_lines + text):
        try:
            policy = WitnessPolicy.parse(candidate, source="p")
        except InputError as exc:
            message = str(exc)
        else:
            message = ""
        if message:
            assert message.startswith("p") and "\n" not in message
            continue
        verdict = policy.judge(NOTE + b"".join(c.line() for c in cosigners))
        assert verdict.satisfied and not verdict.invalid
        assert policy.describe()


# --- issue #50 item 11: control characters, and no credential echoed in an error ---------

@pytest.mark.parametrize("char", ["\x00", "\x01", "\x1b", "\x7f", "\x9b"])
def test_a_witness_url_with_a_control_character_is_refused(cosigners: list[Cosigner],
                                                           char: str) -> None:
    """A NUL byte passed the parser (``str.split`` does not split on it) and reached the
    HTTP client; any control character in a witness URL is refused, and not echoed."""
    with pytest.raises(InputError, match="control") as info:
        WitnessPolicy.parse(f"witness a {cosigners[0].vkey} https://w.example/{char}x\n"
                            f"quorum a\n")
    assert char not in str(info.value)


CREDENTIAL = "s3cretT0ken"


@pytest.mark.parametrize("line", [
    "witness x {vkey} https://u:{cred}@w.example/ extra",    # one field too many
    "witness x https://u:{cred}@w.example/ {vkey}",          # the URL in the key's field
    "witness x https://{cred}@w.example/",                   # a token as the user
    "witness x {vkey} https://{cred}@w.example:99999/",      # a bad port
    "witness x {vkey} ftp://u:{cred}@w.example/",            # not http(s)
    "witness https://u:{cred}@w.example/ {vkey}\n"           # the URL as the name...
    "witness https://u:{cred}@w.example/ {vkey}",
    "group g 1 https://u:{cred}@w.example/",                 # ... as a member
    "group g https://u:{cred}@w.example/ a",                 # ... as a threshold
    "quorum https://u:{cred}@w.example/",                    # ... as the quorum
    "https://u:{cred}@w.example/ a b",                       # ... as the keyword
    "group https://u:{cred}@w.example/ any a\ngroup https://u:{cred}@w.example/ any a",
])
def test_a_parse_error_never_echoes_a_word_that_could_hold_credentials(
        cosigners: list[Cosigner], line: str) -> None:
    text = (f"witness a {cosigners[0].vkey}\n"
            + line.format(vkey=cosigners[1].vkey, cred=CREDENTIAL) + "\nquorum a\n")
    with pytest.raises(InputError) as info:
        WitnessPolicy.parse(text, source="witness policy p.txt")
    message = str(info.value)
    assert CREDENTIAL[:6] not in message and "\n" not in message, message
    assert message.startswith("witness policy p.txt, line "), message
