"""Signing keys held by a remote key service (issue #42, item 1: the KMS-style signer), on a
real HashiCorp Vault dev server's transit engine (`make vault`) and the real engine.

* An audited workflow signs its ledger through Vault (``transit+http://`` to loopback, the
  token in an owner-only file): the public key is exported from the service into a trust
  store, and `verify --all --full` proves the ledger with that alone; no private key and
  no token is written anywhere else.
* The key version is pinned when the signer opens: a rotation inside Vault leaves a
  running app signing with the version it exported; a signer opened after the rotation is
  a new histaudit key (the new version's public key), and the trust store takes both.
* A signature the service's answer carries is verified before it is used: through a
  proxy that alters one byte of every answer's signature, a checkpoint fails in one line,
  a batch of appends is refused whole, and the ledger holds nothing.
* A batch of appends (its entries and heads) is signed in one request.
* Every wrong way to name the key is one line, exit 2, the token shown nowhere, and the
  ledger unchanged.
* Against a stand-in service on 127.0.0.1 (issue #50): a key version that is no number,
  a service that trickles its answer (given up at the URL's ``timeout=``), a service that
  echoes the token in its refusal (never printed) — each one line, exit 2, on SQLite and
  PostgreSQL, the ledger unchanged.

Cost: ≈ 4 s of CPU, 11 s of wall (one Vault, one engine, one app), and ≈ 4.5 s of CPU,
13 s of wall for the stand-in cases (mostly their deadlines).
"""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from histaudit.errors import KeyMaterialError
from histaudit.ledger import chain
from histaudit.ledger.chain import Item
from histaudit.ledger.keys import KeyFileSigner, TrustStore
from histaudit.ledger.signers import load_signer
from histaudit.ledger.store import Ledger
from histaudit.testing.engine import EngineProcess
from histaudit.verification import Verifier
from support.apps import AppProcess, AppRig
from support.cli import cli, exits, one_error_line
from support.ledgers import read_entries
from support.slow_server import SlowServer
from support.vault import Vault

pytestmark = [pytest.mark.engine, pytest.mark.vault]

APP = Path(__file__).resolve().parent / "apps" / "outage_app.py"


@pytest.fixture
def vault(tmp_path: Path) -> Iterator[Vault]:
    with Vault(tmp_path) as server:
        server.make_key("ledger")
        yield server


def _run_app(engine: EngineProcess, tmp: Path, url: str, key: str, n: int = 5) -> str:
    with AppRig(engine) as rig:
        app = rig.add_app(AppProcess(
            engine, [APP], log=tmp / "app.log", ready="APP READY", ready_timeout=60,
            env={"HISTAUDIT_DB": url, "HISTAUDIT_KEY": key, "PYTHONUNBUFFERED": "1"}))
        app.start()
        instance = rig.schedule("chain", {"n": n, "pause": 0})
        state = rig.wait(instance, timeout=60)
        assert state.runtime_status.name == "COMPLETED", app.tail()
        return instance


def _export(vault: Vault, key: str, name: str) -> str:
    r = cli("keys", "export-public", "--key", key, "--out", "trust", "--name", name,
            cwd=vault.workdir)
    exits(r)
    return r.stdout.split()[2]


def test_a_ledger_signed_by_vault_verifies_with_only_its_exported_public_key(
        vault: Vault, engine: EngineProcess) -> None:
    url = f"sqlite:///{vault.workdir / 'ledger.db'}"
    Ledger.open(url, create=True).close()
    key = vault.key_url("ledger")
    instance = _run_app(engine, vault.workdir, url, key)
    kid = _export(vault, key, "v1")
    entries = read_entries(url, instance)
    assert len(entries) >= 12 and {e.kid for e in entries} == {kid}

    # Rotated inside Vault: what signs from now on names its version; the old is pinned.
    vault.rotate("ledger")
    exits(cli("checkpoint", "--db", url, "--key", vault.key_url("ledger", "key-version=1"),
              cwd=vault.workdir))
    new_kid = _export(vault, key, "v2")  # opened after the rotation: version 2
    assert new_kid != kid
    again = _run_app(engine, vault.workdir, url, key, n=2)
    assert {e.kid for e in read_entries(url, again)} == {new_kid}
    exits(cli("checkpoint", "--db", url, "--key", key, cwd=vault.workdir))

    proved = cli("verify", "--all", "--full", "--json", "--db", url, "--trust", "trust",
                 cwd=vault.workdir)
    exits(proved)
    assert json.loads(proved.stdout)["ok"] is True
    for path in vault.workdir.rglob("*"):  # no private key, the token only in its file
        if path.is_file() and path != vault.token_file and path.name != "vault.log":
            data = path.read_bytes()
            assert b"PRIVATE KEY" not in data and vault.token.encode() not in data, path


class _Proxy(http.server.BaseHTTPRequestHandler):
    """Forwards to Vault and counts the sign requests; ``mode`` "flip" flips one byte of
    every signature in the answers (a single one or a batch's), "error" answers each
    batch item with an error of two lines."""

    upstream = ""
    mode = "pass"
    sign_requests = 0

    def _forward(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) or None
        request = urllib.request.Request(
            self.upstream + self.path, data=body, method=self.command,
            headers={k: v for k, v in self.headers.items() if k.lower() != "host"})
        if "/sign/" in self.path:
            type(self).sign_requests += 1
        with urllib.request.urlopen(request, timeout=10) as response:
            doc = json.loads(response.read())
        data = doc.get("data") or {}
        if self.mode == "error" and "batch_results" in data:
            data["batch_results"] = [{"error": "key is disabled\nfor signing"}
                                     for _ in data["batch_results"]]
        for answer in [data, *(data.get("batch_results") or [])] if self.mode == "flip" else []:
            signature = answer.get("signature")
            if isinstance(signature, str):
                head, _, sig = signature.rpartition(":")
                flipped = "A" if sig[0] != "A" else "B"
                answer["signature"] = f"{head}:{flipped}{sig[1:]}"
        data = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._forward()

    def do_POST(self) -> None:
        self._forward()

    def log_message(self, *_: object) -> None:
        pass


@contextlib.contextmanager
def _proxied(vault: Vault, *, mode: str) -> Iterator[str]:
    """The ledger key's URL through a :class:`_Proxy` in ``mode`` in front of ``vault``."""
    _Proxy.upstream, _Proxy.mode, _Proxy.sign_requests = f"http://{vault.address}", mode, 0
    proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Proxy)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        yield vault.key_url("ledger").replace(vault.address,
                                              f"127.0.0.1:{proxy.server_port}")
    finally:
        proxy.shutdown()


def test_a_signature_altered_on_the_way_never_reaches_the_ledger(vault: Vault) -> None:
    url = f"sqlite:///{vault.workdir / 'ledger.db'}"
    Ledger.open(url, create=True).close()
    batch = [Item("wf", "step.done", {"i": i}, None) for i in range(3)]
    with _proxied(vault, mode="flip") as key:
        r = cli("checkpoint", "--db", url, "--key", key, cwd=vault.workdir)
        one_error_line(r, "signature does not verify with the key's public key")
        signer = load_signer(key)
        with Ledger.open(url) as ledger, \
                pytest.raises(KeyMaterialError, match="does not verify"):
            chain.append_many(ledger, batch, signer=signer)  # a batch: refused whole
    with _proxied(vault, mode="error") as key, Ledger.open(url) as ledger:
        signer = load_signer(key)
        with pytest.raises(KeyMaterialError) as info:  # the service's words, one line
            chain.append_many(ledger, batch, signer=signer)
        assert str(info.value).endswith("could not sign: key is disabled for signing")
    with Ledger.open(url) as ledger:
        assert ledger.leaf_count() == 0 and ledger.checkpoint_notes() == []


def test_a_batch_of_appends_is_signed_in_one_request(vault: Vault) -> None:
    """Entries and heads of one batch go to the service together (``batch_input``): one
    round trip, every signature verified and the chains whole."""
    url = f"sqlite:///{vault.workdir / 'ledger.db'}"
    with _proxied(vault, mode="pass") as key, Ledger.open(url, create=True) as ledger:
        signer = load_signer(key)
        before = _Proxy.sign_requests
        items = [Item(f"wf-{i % 3}", "step.done", {"i": i}, None) for i in range(10)]
        chain.append_many(ledger, items, signer=signer)
        assert _Proxy.sign_requests - before == 1  # 10 entries and 3 heads
        chain.append(ledger, "wf-0", "step.done", {"i": 10}, signer=signer)
        assert _Proxy.sign_requests - before == 2  # a single append: its entry and head
        verdict = Verifier(ledger, TrustStore([signer.public]), full=True).all()
        assert verdict.passes() and sum(r.entries for r in verdict.reports) == 11


def test_every_wrong_way_to_name_the_key_is_one_line_and_changes_nothing(
        vault: Vault) -> None:
    url = f"sqlite:///{vault.workdir / 'ledger.db'}"
    Ledger.open(url, create=True).close()
    vault.make_key("symmetric", "aes256-gcm96")
    wrong, open_file = vault.workdir / "wrong-token", vault.workdir / "open-token"
    wrong.write_text("not-the-token\n")
    wrong.chmod(0o600)
    open_file.write_text(vault.token + "\n")
    open_file.chmod(0o644)
    good = vault.key_url("ledger")
    cases = {
        good.replace(str(vault.token_file), str(wrong)): "refused the token (HTTP 403)",
        good.replace(f"token-source=file:{vault.token_file}", f"token={vault.token}"):
            "a token in the URL is refused",
        good.replace(str(vault.token_file), str(open_file)): "readable by others",
        vault.key_url("nokey"): "no such key or mount",
        vault.key_url("symmetric"): "is not an ed25519 key",
        vault.key_url("ledger", "key-version=7"): "has no version 7",
        good.replace("127.0.0.1", "192.0.2.1"): "allowed to a loopback address only",
        good.replace(str(vault.port), "9"): "cannot reach the service",
        f"transit+http://{vault.address}/ledger": "must be transit+https://HOST",
    }
    for key, needle in cases.items():
        r = cli("checkpoint", "--db", url, "--key", key, cwd=vault.workdir)
        line = one_error_line(r, needle)
        assert vault.token not in line and vault.token not in r.stdout
    with Ledger.open(url) as ledger:
        assert ledger.leaf_count() == 0 and ledger.checkpoint_notes() == []


# --- issue #50 items 4, 5, 7: bad versions, slow services, services that echo the token ---
# A stand-in key service on 127.0.0.1 (tests/support/slow_server.py): what is tested is
# what the signer does with an answer, which no real Vault gives on purpose.

TOKEN = "hvs.CAESIJx7Qz0dNotARealTokenButShapedLikeOne"
PUBLIC = base64.b64encode(KeyFileSigner.generate().public.raw).decode()
KEY_ANSWER = json.dumps({"data": {"type": "ed25519", "latest_version": 1,
                                  "keys": {"1": {"public_key": PUBLIC}}}}).encode()


def _token_file(tmp: Path) -> Path:
    path = tmp / "token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    return path


def _key_url(port: int, tmp: Path, *extra: str) -> str:
    return "&".join([f"transit+http://127.0.0.1:{port}/transit/ledger?token-source=file:"
                     f"{_token_file(tmp)}", *extra])


def _unchanged(url: str) -> None:
    with Ledger.open(url) as ledger:
        assert ledger.leaf_count() == 0 and ledger.checkpoint_notes() == []


def test_a_nul_in_a_file_the_key_url_names_is_one_line(tmp_path: Path) -> None:
    """Widened from item 4: a percent-encoded NUL in token-source or ca-file reached
    open() and the TLS context as a ValueError (a traceback); a ca-file that is no PEM
    file is one line too."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    Ledger.open(url, create=True).close()
    token = _token_file(tmp_path)
    not_pem = tmp_path / "ca.pem"
    not_pem.write_text("not a certificate\n")
    for key, needle in (
            (f"transit+http://127.0.0.1:9/t/k?token-source=file:{token}%00x",
             "holds a control character"),
            (f"transit+https://127.0.0.1:9/t/k?token-source=file:{token}&ca-file=a%00b",
             "cannot be read as PEM certificates"),
            (f"transit+https://127.0.0.1:9/t/k?token-source=file:{token}&ca-file={not_pem}",
             "cannot be read as PEM certificates"),
            (f"transit+https://127.0.0.1:9/t/k?token-source=file:{token}&ca-file=/nonexistent",
             "cannot be read as PEM certificates")):
        one_error_line(cli("checkpoint", "--db", url, "--key", key, cwd=tmp_path), needle)
    _unchanged(url)


def test_a_key_version_that_is_no_number_is_one_line(tmp_path: Path) -> None:
    """Item 4: "²" passed str.isdigit and int() refused it; so did 5,000 digits (CPython's
    conversion limit): tracebacks, exit 1. (Refused before the service is asked.)"""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    Ledger.open(url, create=True).close()
    for version in ("²", "٣", "9" * 5000, "0", "-1", "1.5", "0x1", " 1"):
        r = cli("checkpoint", "--db", url, "--key",
                _key_url(9, tmp_path, f"key-version={urllib.parse.quote(version)}"),
                cwd=tmp_path)
        one_error_line(r, "is not a version number")
    _unchanged(url)


@pytest.mark.parametrize("stage", ["opening the key", "signing"])
def test_a_trickling_key_service_is_given_up_at_the_deadline(db_url: str, tmp_path: Path,
                                                             stage: str) -> None:
    """Item 5: a byte every 0.3 s keeps each read inside a per-read timeout for ever; the
    whole exchange has ``timeout=`` seconds (here 1), reading the public key or signing."""
    Ledger.open(db_url, create=True).close()
    routes = {"/keys/": ("answer", KEY_ANSWER)} if stage == "signing" else {}
    with SlowServer("trickle-body", routes=routes) as service:
        start = time.monotonic()
        r = cli("checkpoint", "--db", db_url, "--key",
                _key_url(service.port, tmp_path, "timeout=1"), cwd=tmp_path)
        took = time.monotonic() - start
    line = one_error_line(r, "no complete answer within 1s")
    assert took < 8 and TOKEN[4:12] not in line, (took, line)
    assert any("/sign/" in p for p in service.paths) == (stage == "signing")
    _unchanged(db_url)
    one_error_line(cli("checkpoint", "--db", db_url, "--key",
                       _key_url(service.port, tmp_path, "timeout=nan"), cwd=tmp_path),
                   "timeout 'nan' is not a number of seconds")


def test_a_service_that_echoes_the_token_never_gets_it_printed(db_url: str,
                                                               tmp_path: Path) -> None:
    """Item 7: the service's own words were quoted as they came."""
    Ledger.open(db_url, create=True).close()
    for said in (f"permission denied for token {TOKEN}",
                 f"permission denied for token {TOKEN[:14]}…",         # a part of it
                 "permission denied: token hvs.SomeOtherTokenItHeld99"):  # shaped like one
        refusal = json.dumps({"data": {"batch_results": [{"error": said}]}}).encode()
        with SlowServer("answer", body=refusal, routes={"/keys/": ("answer", KEY_ANSWER)}
                        ) as service:
            r = cli("checkpoint", "--db", db_url, "--key", _key_url(service.port, tmp_path),
                    cwd=tmp_path)
        line = one_error_line(r, "could not sign: permission denied", "***")
        assert TOKEN[4:12] not in line and "SomeOtherToken" not in line, line
    _unchanged(db_url)
    # the key's type, as the service says it, is quoted the same way
    odd = json.dumps({"data": {"type": f"ed25519 for {TOKEN}"}}).encode()
    with SlowServer("answer", body=odd) as service:
        line = one_error_line(cli("checkpoint", "--db", db_url, "--key",
                                  _key_url(service.port, tmp_path), cwd=tmp_path),
                              "is not an ed25519 key")
    assert TOKEN[4:12] not in line, line
