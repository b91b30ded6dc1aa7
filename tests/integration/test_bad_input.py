"""Bad input, table-driven: every command against every bad input that applies to it.

The rule (product brief): a missing or corrupt database, a wrong URL, a non-JSON body, an
unknown schema or format version, a missing, wrong or unreadable key, a huge payload —
each is met with ONE line on stderr, ``histaudit: error: ...``, naming the problem, and
exit status 2; never a traceback; and the ledger is byte-identical afterwards (SHA-256 of
every file next to a SQLite ledger; a dump of every row of every table on PostgreSQL).
A *ledger* that is readable but holds a broken entry is not bad input: ``verify`` reports
it as a finding (exit 1) and the other commands keep working.

Everything runs the installed console script in a subprocess, like a user would. This
file: bad trust stores, keys, redactions and command lines; bad databases, URLs and
corrupt files under the writing commands are in ``test_bad_input_databases.py`` (split
off in stop 47 to keep each file inside its CPU budget); ``support/bad_input.py`` names
the other three and holds what they share.
Cost: ≈ 35 s of CPU on a slow 2-core machine (223 tests; most are one forked command
each).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from histaudit.ledger.keys import KeyFileSigner, generate_keypair
from support.bad_input import (
    DB_COMMANDS,
    GARBAGE,
    TRUST_COMMANDS,
    Ctx,
    keys_for,
    run,
    snapshot_files,
)
from support.cli import cli, exits, one_error_line

# --- 4. the trust store is bad -----------------------------------------------------------

_RAW32 = "YWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWE="  # base64 of 32 x 'a'


def _trust_file(content: bytes) -> Callable[[Path, Path], Path]:
    def make(tmp: Path, good: Path) -> Path:
        path = tmp / "trust.json"
        path.write_bytes(content)
        return path
    return make


def _trust_dir_with_bad_file(tmp: Path, good: Path) -> Path:
    d = tmp / "trusted"
    d.mkdir()
    shutil.copyfile(good, d / "ops.pub.json")
    (d / "zz-broken.pub.json").write_bytes(b"{")
    return d


def _trust_dir_listing_a_key_twice(tmp: Path, good: Path) -> Path:
    """The same key as ops.pub.json and, retired, as ops-retired.pub.json (read first)."""
    d = tmp / "trusted"
    d.mkdir()
    shutil.copyfile(good, d / "ops.pub.json")
    retired = {**json.loads(good.read_bytes()), "not_after": "2020-01-01T00:00:00Z"}
    (d / "ops-retired.pub.json").write_text(json.dumps(retired))
    return d


def _trust_empty_dir(tmp: Path, good: Path) -> Path:
    d = tmp / "trusted"
    d.mkdir()
    return d


#: name -> (make the trust store, what the error must say)
BAD_TRUST: dict[str, tuple[Callable[[Path, Path], Path], tuple[str, ...]]] = {
    "missing": (lambda tmp, good: tmp / "nope.pub.json", ("nope.pub.json", "does not exist")),
    "not JSON": (_trust_file(b"ed25519 AAAA..."), ("trust.json", "not JSON")),
    "binary": (_trust_file(b"\xff\xfe\x00garbage"), ("trust.json", "not JSON")),
    "a SQLite file": (_trust_file(b"SQLite format 3\x00" + GARBAGE[:100]),
                      ("trust.json", "not JSON")),
    "JSON but not an object": (_trust_file(b"[1, 2, 3]"), ("trust.json", "JSON object")),
    "bad base64": (_trust_file(b'{"alg": "ed25519", "public_key": "!!not base64!!"}'),
                   ("trust.json", "not a base64 Ed25519 key")),
    "wrong key length": (_trust_file(b'{"alg": "ed25519", "public_key": "AAAA"}'),
                         ("trust.json", "not a base64 Ed25519 key")),
    "no public_key": (_trust_file(b'{"alg": "ed25519"}'),
                      ("trust.json", "not a base64 Ed25519 key")),
    "unknown alg": (_trust_file(b'{"alg": "rsa-sha256", "public_key": "' + _RAW32.encode()
                                + b'"}'), ("trust.json", "unsupported key algorithm",
                                           "rsa-sha256")),
    "kid mismatch": (_trust_file(b'{"alg": "ed25519", "kid": "0000000000000000", '
                                 b'"public_key": "' + _RAW32.encode() + b'"}'),
                     ("trust.json", "does not match")),
    "bad validity window": (_trust_file(b'{"alg": "ed25519", "not_before": "yesterday", '
                                        b'"public_key": "' + _RAW32.encode() + b'"}'),
                            ("trust.json", "not_before", "yesterday")),
    "keys not a list": (_trust_file(b'{"keys": {"alg": "ed25519"}}'),
                        ("trust.json", "'keys' must be a list")),
    "name not text": (_trust_file(b'{"alg": "ed25519", "name": ["ops"], "public_key": "'
                                  + _RAW32.encode() + b'"}'),
                      ("trust.json", "name must be a non-empty string")),
    "a key listed twice": (_trust_dir_listing_a_key_twice,
                           ("ops-retired.pub.json", "ops.pub.json", "twice")),
    "over 4 MiB": (_trust_file(b'{"keys": [], "pad": "' + b"x" * (4 << 20) + b'"}'),
                   ("trust.json", "larger than 4194304 bytes")),
    "empty directory": (_trust_empty_dir, ("trusted", "holds no *.pub.json")),
    "directory with one broken file": (_trust_dir_with_bad_file,
                                       ("zz-broken.pub.json", "not JSON")),
}


def _chmod(path: Path, mode: int) -> Path:
    path.chmod(mode)
    return path


def _cases(table: dict[str, Any]) -> list[Any]:
    return list(table)


@pytest.mark.parametrize("command", TRUST_COMMANDS)
@pytest.mark.parametrize("case", _cases(BAD_TRUST))
def test_bad_trust_store(case: str, command: str, ledger_ctx: Ctx) -> None:
    make, needles = BAD_TRUST[case]
    ledger_ctx.trust = make(ledger_ctx.tmp, ledger_ctx.trust)
    before = ledger_ctx.state()
    one_error_line(run(DB_COMMANDS[command](ledger_ctx), cwd=ledger_ctx.tmp), *needles)
    assert ledger_ctx.state() == before


@pytest.mark.parametrize("args", [["verify", "order-1"], ["verify", "--all"]])
def test_verify_without_any_trust_store(args: list[str], ledger_ctx: Ctx) -> None:
    before = ledger_ctx.state()
    one_error_line(run([*args, "--db", ledger_ctx.url], cwd=ledger_ctx.tmp),
                          "trust")
    assert ledger_ctx.state() == before


# --- 5. the private key is bad (redact) --------------------------------------------------

def _pem(private: Any) -> bytes:
    return private.private_bytes(serialization.Encoding.PEM,
                                 serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())


def _key_file(content: bytes, mode: int = 0o600) -> Callable[[Path, Path], Path]:
    def make(tmp: Path, good: Path) -> Path:
        path = tmp / "bad.key"
        path.write_bytes(content)
        path.chmod(mode)
        return path
    return make


def _copy_key(mode: int) -> Callable[[Path, Path], Path]:
    def make(tmp: Path, good: Path) -> Path:
        path = tmp / "copied.key"
        shutil.copyfile(good, path)
        path.chmod(mode)
        return path
    return make


def _encrypted(tmp: Path, good: Path) -> Path:
    pem = ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"passphrase"))
    return _key_file(pem)(tmp, good)


def _dangling(tmp: Path, good: Path) -> Path:
    link = tmp / "dangling.key"
    link.symlink_to(tmp / "gone.key")
    return link


def _key_dir(tmp: Path, good: Path) -> Path:
    d = tmp / "keydir"
    d.mkdir()
    return d


#: name -> (make the key path, what the error must say)
BAD_KEYS: dict[str, tuple[Callable[[Path, Path], Path], tuple[str, ...]]] = {
    "missing": (lambda tmp, good: tmp / "nope.key", ("nope.key", "does not exist")),
    "dangling symlink": (_dangling, ("dangling.key", "does not exist")),
    "a directory": (_key_dir, ("keydir", "not a regular file")),
    "world-readable 0644": (_copy_key(0o644), ("copied.key", "readable by others", "0644",
                                               "chmod 600")),
    "group-readable 0640": (_copy_key(0o640), ("copied.key", "readable by others")),
    "not PEM": (_key_file(b"this is not a key\n"), ("bad.key", "not an unencrypted PEM")),
    "empty": (_key_file(b""), ("bad.key", "not an unencrypted PEM")),
    "binary": (_key_file(GARBAGE[:512]), ("bad.key", "not an unencrypted PEM")),
    "the public key file": (lambda tmp, good: _key_file(
        (good.parent / "ops.pub.json").read_bytes())(tmp, good),
        ("bad.key", "not an unencrypted PEM")),
    "encrypted PEM": (_encrypted, ("bad.key", "not an unencrypted PEM")),
    "RSA key": (lambda tmp, good: _key_file(_pem(rsa.generate_private_key(
        public_exponent=65537, key_size=2048)))(tmp, good), ("bad.key", "not an Ed25519 key")),
    "EC key": (lambda tmp, good: _key_file(_pem(ec.generate_private_key(ec.SECP256R1())))(
        tmp, good), ("bad.key", "not an Ed25519 key")),
}


@pytest.mark.parametrize("case", _cases(BAD_KEYS))
def test_bad_private_key(case: str, ledger_ctx: Ctx) -> None:
    make, needles = BAD_KEYS[case]
    ledger_ctx.key = make(ledger_ctx.tmp, ledger_ctx.key)
    before = ledger_ctx.state()
    one_error_line(run(DB_COMMANDS["redact"](ledger_ctx), cwd=ledger_ctx.tmp),
                          *needles)
    assert ledger_ctx.state() == before


def test_no_private_key_at_all(ledger_ctx: Ctx) -> None:
    before = ledger_ctx.state()
    args = ["redact", "order-1", "--seq", "1", "--field", "input", "--db", ledger_ctx.url]
    one_error_line(run(args, cwd=ledger_ctx.tmp), "no signing key", "--key")
    assert ledger_ctx.state() == before


def test_key_from_environment_is_checked_too(ledger_ctx: Ctx) -> None:
    ledger_ctx.key.chmod(0o644)
    before = ledger_ctx.state()
    args = ["redact", "order-1", "--seq", "1", "--field", "input", "--db", ledger_ctx.url]
    r = run(args, cwd=ledger_ctx.tmp, env={"HISTAUDIT_KEY": str(ledger_ctx.key)})
    one_error_line(r, "readable by others")
    assert ledger_ctx.state() == before


# --- 6. redact asks for something that is not there --------------------------------------

BAD_REDACTS: dict[str, tuple[list[str], tuple[str, ...]]] = {
    "nonexistent seq": (["order-1", "--seq", "99", "--field", "input"], ("has no entry 99",)),
    "nonexistent instance": (["ghost", "--seq", "1", "--field", "input"],
                             ("'ghost'", "has no entry 1")),
    "field without payload": (["order-1", "--seq", "2", "--field", "activity"],
                              ("no committed payload 'activity'",)),
    "field absent": (["order-1", "--seq", "1", "--field", "output"],
                     ("no committed payload 'output'",)),
    "seq zero": (["order-1", "--seq", "0", "--field", "input"], ("--seq",)),
    "seq not a number": (["order-1", "--seq", "first", "--field", "input"], ("--seq",)),
    "seq beyond 64 bits": (["order-1", "--seq", str(2**70), "--field", "input"], ("--seq",)),
    "seq 2**63": (["order-1", "--seq", str(2**63), "--field", "input"], ("--seq",)),
    "10 kB instance id": (["x" * 10240, "--seq", "1", "--field", "input"],
                          ("has no entry 1", "(10240 chars)")),
    "instance id with a newline": (["order-1\nfake: OK", "--seq", "1", "--field", "input"],
                                   ("'order-1\\nfake: OK'",)),
    "no field": (["order-1", "--seq", "1"], ("--field",)),
}


@pytest.mark.parametrize("case", BAD_REDACTS)
def test_bad_redact_request(case: str, ledger_ctx: Ctx) -> None:
    args, needles = BAD_REDACTS[case]
    before = ledger_ctx.state()
    r = run(["redact", *args, "--db", ledger_ctx.url, "--key", str(ledger_ctx.key)],
            cwd=ledger_ctx.tmp)
    one_error_line(r, *needles)
    assert ledger_ctx.state() == before


# --- 7. bad command lines ----------------------------------------------------------------

BAD_USAGE: dict[str, list[str]] = {
    "verify instance and --all": ["verify", "order-1", "--all"],
    "verify neither": ["verify"],
    "verify unknown --fail-on": ["verify", "order-1", "--fail-on", "panic"],
    "verify --workers 0": ["verify", "order-1", "--workers", "0"],
    "show no instance": ["show"],
    "unknown command": ["frobnicate"],
    "unknown option": ["list", "--colour"],
}


@pytest.mark.parametrize("case", BAD_USAGE)
def test_bad_command_line(case: str, ledger_ctx: Ctx) -> None:
    before = ledger_ctx.state()
    args = [*BAD_USAGE[case], "--db", ledger_ctx.url, "--trust", str(ledger_ctx.trust)]
    if case == "unknown command":
        args = BAD_USAGE[case]
    one_error_line(run(args, cwd=ledger_ctx.tmp))
    assert ledger_ctx.state() == before


# --- 8. keys generate --------------------------------------------------------------------

def _existing_pair(tmp: Path) -> list[str]:
    generate_keypair(tmp / "out", name="ops")
    return ["--out", str(tmp / "out"), "--name", "ops"]


def _existing_public_only(tmp: Path) -> list[str]:
    (tmp / "out").mkdir()
    (tmp / "out" / "ops.pub.json").write_bytes(b"precious")
    return ["--out", str(tmp / "out"), "--name", "ops"]


def _out_is_file(tmp: Path) -> list[str]:
    (tmp / "out").write_bytes(b"a file")
    return ["--out", str(tmp / "out")]


def _out_under_file(tmp: Path) -> list[str]:
    (tmp / "out").write_bytes(b"a file")
    return ["--out", str(tmp / "out" / "keys")]


#: name -> (set up tmp and return the arguments, what the error must say)
BAD_KEYGEN: dict[str, tuple[Callable[[Path], list[str]], tuple[str, ...]]] = {
    "pair exists": (_existing_pair, ("ops.key", "refusing to overwrite")),
    "public key exists": (_existing_public_only, ("ops.pub.json", "refusing to overwrite")),
    "--out is a file": (_out_is_file, ("out", "not a directory")),
    "--out under a file": (_out_under_file, ("out", "directory")),
    "--not-before not RFC 3339": (lambda t: ["--out", str(t / "k"), "--not-before",
                                             "yesterday"], ("--not-before", "yesterday")),
    "--not-after impossible date": (lambda t: ["--out", str(t / "k"), "--not-after",
                                               "2025-13-40T00:00:00Z"], ("--not-after",)),
    "empty validity window": (lambda t: ["--out", str(t / "k"),
                                         "--not-before", "2030-01-01T00:00:00Z",
                                         "--not-after", "2020-01-01T00:00:00Z"],
                              ("validity window",)),
    "name escapes --out": (lambda t: ["--out", str(t / "k"), "--name", "../escaped"],
                           ("key name", "../escaped")),
    "name with a slash": (lambda t: ["--out", str(t / "k"), "--name", "a/b"], ("key name",)),
    "empty name": (lambda t: ["--out", str(t / "k"), "--name", ""], ("key name",)),
    "hidden name": (lambda t: ["--out", str(t / "k"), "--name", ".ops"], ("key name",)),
    "no --out": (lambda t: [], ("--out",)),
}


@pytest.mark.parametrize("case", BAD_KEYGEN)
def test_bad_keys_generate(case: str, tmp_path: Path) -> None:
    setup, needles = BAD_KEYGEN[case]
    work = tmp_path / "work"
    work.mkdir()
    args = setup(work)
    before = snapshot_files(tmp_path)
    one_error_line(run(["keys", "generate", *args], cwd=work), *needles)
    assert snapshot_files(tmp_path) == before, "keys generate wrote or changed files"



# --- key text where a key path belongs: refused, never shown ----------------------------

def _secret_lines(key: Path) -> list[str]:
    """The lines of a PEM that are secret (every base64 line), at least one."""
    lines = [ln for ln in key.read_text().splitlines() if ln and not ln.startswith("-----")]
    assert lines
    return lines


def _assert_not_shown(text: str, key: Path) -> None:
    pem = key.read_text()
    assert pem.strip() not in text
    for line in _secret_lines(key):
        assert line not in text, "a line of the private key was printed"
        assert line[:24] not in text, "part of the private key was printed"


#: what a user may hand over instead of the key file's path
KEY_TEXT_FORMS: dict[str, Callable[[str], str]] = {
    "the PEM": lambda pem: pem,
    "the PEM on one line": lambda pem: " ".join(pem.split()),
    "the PEM with \\n escapes": lambda pem: pem.strip().replace("\n", "\\n"),
    "its base64 line": lambda pem: pem.splitlines()[1],
}
KEY_COMMANDS: dict[str, Callable[[Ctx], list[str]]] = {
    "checkpoint": lambda c: ["checkpoint", "--db", c.url],
    "export": lambda c: ["export", "order-1", "--out", str(c.tmp / "bundle"), "--db", c.url,
                         "--trust", str(c.trust)],
    "redact": lambda c: ["redact", "order-1", "--seq", "1", "--field", "input", "--db", c.url],
}
KEY_TEXT_SAYS = "HISTAUDIT_KEY/--key holds key material, not a path: pass the path of the key"


@pytest.mark.parametrize("form", KEY_TEXT_FORMS)
@pytest.mark.parametrize("command", KEY_COMMANDS)
def test_key_text_instead_of_a_path_is_never_printed(ledger_ctx: Ctx, command: str,
                                                     form: str) -> None:
    ctx = ledger_ctx
    text = KEY_TEXT_FORMS[form](ctx.key.read_text())
    before = ctx.state()
    r = run([*KEY_COMMANDS[command](ctx), "--key", text], cwd=ctx.tmp)
    one_error_line(r, KEY_TEXT_SAYS)
    _assert_not_shown(r.stdout + r.stderr, ctx.key)
    assert ctx.state() == before
    assert not (ctx.tmp / "bundle").exists()


@pytest.mark.parametrize("command", KEY_COMMANDS)
def test_key_text_in_the_environment_is_never_printed(ledger_ctx: Ctx, command: str) -> None:
    ctx = ledger_ctx
    before = ctx.state()
    r = run(KEY_COMMANDS[command](ctx), cwd=ctx.tmp, env={"HISTAUDIT_KEY": ctx.key.read_text()})
    one_error_line(r, KEY_TEXT_SAYS)
    _assert_not_shown(r.stdout + r.stderr, ctx.key)
    assert ctx.state() == before


@pytest.mark.parametrize("how", ["key=", "HISTAUDIT_KEY"])
def test_runtime_given_key_text_never_shows_it(tmp_path: Path, how: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """In the app: neither the exception text nor its formatted traceback (the one a
    crashing app prints, with its chain) holds the key; the ledger is not even opened.
    Building the runtime reads no key: ``start()`` does, and refuses it."""
    import traceback

    from histaudit.dapr import AuditedWorkflowRuntime
    from histaudit.errors import KeyMaterialError

    key, _, _ = keys_for(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HISTAUDIT_DB", raising=False)
    kwargs: dict[str, Any] = {}
    if how == "key=":
        kwargs["key"] = key.read_text()
    else:
        monkeypatch.setenv("HISTAUDIT_KEY", key.read_text())
    wfr = AuditedWorkflowRuntime(host="127.0.0.1", port="1", **kwargs)
    with pytest.raises(KeyMaterialError, match="holds key material, not a path") as info:
        wfr.start()
    shown = "".join(traceback.format_exception(info.value))
    assert "AuditedWorkflowRuntime" in shown
    _assert_not_shown(shown, key)
    assert not (tmp_path / "histaudit.db").exists()


def test_app_started_with_key_text_prints_no_key(tmp_path: Path) -> None:
    """The same app as a process: its (uncaught) traceback on stderr holds no key line."""
    import sys

    key, _, _ = keys_for(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HISTAUDIT_")}
    env["HISTAUDIT_KEY"] = key.read_text()
    r = subprocess.run([sys.executable, "-c", "from histaudit.dapr import "
                        "AuditedWorkflowRuntime\nAuditedWorkflowRuntime().start()"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "holds key material, not a path" in r.stderr, r.stderr
    _assert_not_shown(r.stdout + r.stderr, key)


# --- trust keys with an empty validity window ---------------------------------------------

@pytest.mark.parametrize("command", TRUST_COMMANDS)
def test_trust_key_with_an_empty_window_is_refused(ledger_ctx: Ctx, command: str) -> None:
    ctx = ledger_ctx
    doc = json.loads(ctx.trust.read_text())
    doc.update(not_before="2030-01-01T00:00:00Z", not_after="2020-01-01T00:00:00Z")
    ctx.trust = ctx.tmp / "backwards.pub.json"
    ctx.trust.write_text(json.dumps(doc))
    before = ctx.state()
    one_error_line(run(DB_COMMANDS[command](ctx), cwd=ctx.tmp), "backwards.pub.json",
                   "not_before 2030-01-01T00:00:00Z", "not_after 2020-01-01T00:00:00Z")
    assert ctx.state() == before


# --- keys generate onto a full disk leaves nothing behind ---------------------------------

@pytest.mark.parametrize("fails", ["private key", "public key"])
def test_keys_generate_on_a_full_disk_leaves_no_file(tmp_path: Path, fails: str) -> None:
    """RLIMIT_FSIZE makes the write fail with EFBIG for real, as a full disk would: once
    inside the private key, once inside the public key (the private one already written)."""
    _, probe_pub, _ = generate_keypair(tmp_path / "probe", name="ops")
    priv_size = (tmp_path / "probe" / "ops.key").stat().st_size
    pub_size = probe_pub.stat().st_size
    assert priv_size + 4 < pub_size, (priv_size, pub_size)
    limit = priv_size // 2 if fails == "private key" else priv_size + 2
    out = tmp_path / "keys"
    out.mkdir()
    args = ["keys", "generate", "--out", out, "--name", "ops"]
    one_error_line(cli(*args, cwd=tmp_path, file_size_limit=limit),
                   "cannot write key pair ops", "File too large", "nothing was written")
    assert sorted(p.name for p in out.iterdir()) == []
    r = cli(*args, cwd=tmp_path)  # with room, the next try is not blocked
    exits(r, 0)
    assert sorted(p.name for p in out.iterdir()) == ["ops.key", "ops.pub.json"]
    assert (out / "ops.key").stat().st_mode & 0o777 == 0o600
    KeyFileSigner.load(out / "ops.key")
