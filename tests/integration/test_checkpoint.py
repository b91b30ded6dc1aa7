"""Signed checkpoints and consistency proofs, on SQLite and on a real PostgreSQL server.

A checkpoint (docs/bundle.md §4) is a C2SP signed note over the ledger-wide Merkle tree.
Whoever keeps one can later prove that the ledger only grew (§5). These tests keep one,
then play the ways a ledger stops being an extension of it — the database restored from
an older copy, an old entry rewritten, a whole instance deleted — each with its finding;
notes that do not authenticate are input errors, and one whose origin is not the ledger's
(unsigned) id is checked against the content anyway and reported. Writers in
four processes must leave contiguous leaves that every checkpoint taken meanwhile is
consistent with. Finally the same is driven through the real ``histaudit`` command.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import multiprocessing as mp
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from histaudit.errors import InputError, SignatureError
from histaudit.ledger import chain, merkle
from histaudit.ledger.chain import make_checkpoint
from histaudit.ledger.checkpoint import (
    Checkpoint,
    note_key_hash,
    origin_of,
    parse_note,
    sign_note,
    verifier_key,
)
from histaudit.ledger.keys import KeyFileSigner, Signer, TrustStore, generate_keypair
from histaudit.ledger.store import Ledger
from histaudit.verify.consistency import check_consistency
from support.cli import cli, exits, one_error_line, verification_failed
from support.ledgers import LedgerDb
from support.repo import DOCS

INSTANCES = ("wf-a", "wf-b", "wf-c")
ROUNDS = 6  # 18 interleaved entries: each instance's leaves are spread over the tree


# --- building ledgers -------------------------------------------------------------------

@dataclass
class World:
    url: str
    tmp: Path
    signer: Signer
    trust: TrustStore
    key: Path  # the signer's private key file (0600), for the CLI
    pub: Path  # its public key file, a trust store for the CLI


def append_rounds(url: str, signer: Signer, rounds: int = ROUNDS, start: int = 1,
                  instances: tuple[str, ...] = INSTANCES) -> None:
    with Ledger.open(url, create=True) as ledger:
        for rnd in range(start, start + rounds):
            for instance in instances:
                chain.append(ledger, instance, "step.done",
                             {"round": rnd, "note": f"{instance} {rnd}"}, signer=signer)


@pytest.fixture
def world(db_url: str, tmp_path: Path) -> World:
    key, pub, signer = generate_keypair(tmp_path / "keys", name="ops")
    append_rounds(db_url, signer)
    return World(db_url, tmp_path, signer, TrustStore([signer.public]), key, pub)


def checkpoint(url: str, signer: Signer) -> Checkpoint:
    with Ledger.open(url) as ledger:
        return make_checkpoint(ledger, signer)


def codes(url: str, old: Checkpoint) -> set[str]:
    with Ledger.open(url) as ledger:
        return {f.code for f in check_consistency(ledger, old).findings}


def size_of(url: str) -> int:
    with Ledger.open(url) as ledger:
        return ledger.leaf_count()


# --- an operator restoring a backup -----------------------------------------------------

@dataclass
class Backup:
    """An older copy of the whole database, restored later.

    SQLite: the database file (and its WAL, if one is left) copied aside while no
    connection is open, copied back over the live files. PostgreSQL: what the backup held
    is remembered, and restoring deletes, as superuser with the triggers disabled, every
    entry appended since, puts the old heads back and drops the newer checkpoints.
    """

    url: str
    where: Path
    size: int = 0
    heads: list[Any] = field(default_factory=list)

    def _files(self) -> list[Path]:
        db = Path(sa.engine.make_url(self.url).database or "")
        return [db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")]

    def take(self) -> Backup:
        self.size = size_of(self.url)
        if self.url.startswith("sqlite"):
            self.where.mkdir(parents=True)
            for f in self._files()[:2]:
                if f.exists():
                    shutil.copy2(f, self.where / f.name)
        else:
            with LedgerDb(self.url) as db:
                self.heads = db.run("SELECT instance, seq, body, sig FROM histaudit_heads")
        return self

    def restore(self) -> None:
        if self.url.startswith("sqlite"):
            for f in self._files():
                f.unlink(missing_ok=True)
                if (self.where / f.name).exists():
                    shutil.copy2(self.where / f.name, f)
            return
        with LedgerDb(self.url) as db:
            db.lift_guards()
            db.run("DELETE FROM histaudit_entries WHERE leaf >= :n", n=self.size)
            db.run("DELETE FROM histaudit_heads")
            for h in self.heads:
                db.run("INSERT INTO histaudit_heads (instance, seq, body, sig) "
                       "VALUES (:i, :s, :b, :g)", i=h.instance, s=h.seq, b=h.body, g=h.sig)
            db.run("DELETE FROM histaudit_checkpoints WHERE size > :n", n=self.size)
            db.restore_guards()


# --- the note ---------------------------------------------------------------------------

def test_checkpoint_is_a_signed_note_over_the_whole_tree(world: World) -> None:
    cp = checkpoint(world.url, world.signer)
    with Ledger.open(world.url) as ledger:
        bodies = [body for _, body in ledger.leaves()]
        origin = origin_of(ledger)
        stored = ledger.checkpoint_notes()
        assert origin == f"histaudit/{ledger.ledger_id}"
    assert (cp.origin, cp.size, cp.kid) == (origin, len(INSTANCES) * ROUNDS, world.signer.kid)
    assert cp.root == merkle.root_of(merkle.leaf_hash(b) for b in bodies)[1]
    assert stored == [(cp.size, cp.note)]
    # The note, byte for byte as docs/bundle.md §4.1 describes it.
    text = f"{origin}\n{cp.size}\n{base64.b64encode(cp.root).decode()}\n".encode()
    assert cp.note.startswith(text + b"\n\xe2\x80\x94 " + origin.encode() + b" ")
    assert cp.note.endswith(b"\n") and cp.note.count(b"\n") == 5
    blob = base64.b64decode(cp.note.split(b" ")[-1])
    assert len(blob) == 68
    raw = world.signer.public.raw
    assert blob[:4] == hashlib.sha256(origin.encode() + b"\n\x01" + raw).digest()[:4]
    assert blob[:4] == note_key_hash(origin, world.signer.public)
    Ed25519PublicKey.from_public_bytes(raw).verify(blob[4:], text)  # raises if it fails
    typed_key = base64.b64encode(b"\x01" + raw).decode()
    assert verifier_key(origin, world.signer.public) == f"{origin}+{blob[:4].hex()}+{typed_key}"
    # It reads back to the same checkpoint.
    again = parse_note(cp.note, world.trust)
    assert (again.origin, again.size, again.root, again.kid) == (
        cp.origin, cp.size, cp.root, cp.kid)


def test_docs_example_note_is_reproduced() -> None:
    """docs/bundle.md §4.3: the golden test key signing the tree of a, b, c."""
    seed = hashlib.sha256(b"histaudit golden vectors: signing key seed, v1").digest()
    signer = KeyFileSigner(Ed25519PrivateKey.from_private_bytes(seed))
    origin = "histaudit/00000000-0000-4000-8000-000000000000"
    root = merkle.root_of(merkle.leaf_hash(x) for x in (b"a", b"b", b"c"))[1]
    note = sign_note(origin, 3, root, signer)
    docs = (DOCS / "bundle.md").read_text(encoding="utf-8")
    assert "\n" + note.decode() in docs
    assert verifier_key(origin, signer.public) in docs
    assert f"key hash is `{note_key_hash(origin, signer.public).hex()}`" in docs
    assert parse_note(note, TrustStore([signer.public])).size == 3


# --- consistency ------------------------------------------------------------------------

def test_appends_after_a_checkpoint_are_consistent(world: World) -> None:
    old = checkpoint(world.url, world.signer)
    append_rounds(world.url, world.signer, rounds=5, start=ROUNDS + 1)
    with Ledger.open(world.url) as ledger:
        report = check_consistency(ledger, old)
        now = merkle.root_of(merkle.leaf_hash(b) for _, b in ledger.leaves())
    assert report.ok and report.findings == ()
    assert (report.old_size, report.size) == (old.size, now[0]) == (18, 33)
    assert report.proof and merkle.verify_consistency(old.size, now[0], old.root, now[1],
                                                      report.proof)
    new = checkpoint(world.url, world.signer)
    assert codes(world.url, new) == set()  # same size: equal roots
    assert codes(world.url, old) == set()
    with Ledger.open(world.url) as ledger:
        assert [size for size, _ in ledger.checkpoint_notes()] == [18, 33]


def test_checkpoint_of_an_empty_ledger(db_url: str) -> None:
    signer = KeyFileSigner.generate()
    Ledger.open(db_url, create=True).close()
    empty = checkpoint(db_url, signer)
    assert (empty.size, empty.root) == (0, merkle.EMPTY_ROOT)
    assert parse_note(empty.note, TrustStore([signer.public])).size == 0
    append_rounds(db_url, signer, rounds=1)
    assert codes(db_url, empty) == set()


def test_restored_older_copy_is_a_rollback(world: World) -> None:
    early = checkpoint(world.url, world.signer)
    backup = Backup(world.url, world.tmp / "backup").take()
    append_rounds(world.url, world.signer, rounds=3, start=ROUNDS + 1)
    late = checkpoint(world.url, world.signer)
    assert late.size == early.size + 9
    backup.restore()
    assert size_of(world.url) == early.size
    assert codes(world.url, late) == {"checkpoint-rollback"}
    assert codes(world.url, early) == set()  # the copy is what the early checkpoint saw
    # Writing on after the restore forks the ledger: it grows past the late checkpoint's
    # size again, but not as an extension of it.
    append_rounds(world.url, world.signer, rounds=4, start=ROUNDS + 1)
    assert size_of(world.url) > late.size
    assert codes(world.url, late) == {"checkpoint-inconsistent"}
    assert codes(world.url, early) == set()


def test_rewritten_old_entry_is_inconsistent(world: World) -> None:
    cp = checkpoint(world.url, world.signer)
    append_rounds(world.url, world.signer, rounds=1, start=ROUNDS + 1)
    with LedgerDb(world.url) as db:
        db.lift_guards()
        # After the checkpoint's size: not the checkpoint's business (the chain's is).
        db.rewrite_body(cp.size + 1, b'"round":7', b'"round":8')
        assert codes(world.url, cp) == set()
        db.rewrite_body(4, b'"round":2', b'"round":9')  # wf-b's second entry
        db.restore_guards()
    assert codes(world.url, cp) == {"checkpoint-inconsistent"}


def test_deleted_instance_is_missing_leaves_and_inconsistent(world: World) -> None:
    cp = checkpoint(world.url, world.signer)
    with LedgerDb(world.url) as db:
        db.lift_guards()
        gone = [r.leaf for r in db.run("SELECT leaf FROM histaudit_entries "
                                       "WHERE instance = 'wf-b' ORDER BY leaf")]
        assert gone == list(range(1, 18, 3))  # interleaved, none of them the last leaf
        db.run("DELETE FROM histaudit_entries WHERE instance = 'wf-b'")
        db.run("DELETE FROM histaudit_heads WHERE instance = 'wf-b'")
        db.restore_guards()
    with Ledger.open(world.url) as ledger:
        report = check_consistency(ledger, cp)
        assert "wf-b" not in ledger.instance_ids()  # per instance, nothing is left to check
    assert {f.code for f in report.findings} == {"leaves-missing", "checkpoint-inconsistent"}
    assert sum(f.code == "leaves-missing" for f in report.findings) == len(gone)
    with pytest.raises(InputError, match="leaves are missing"):
        checkpoint(world.url, world.signer)


# --- notes that must not be accepted ----------------------------------------------------

def _sig_blob(note: bytes) -> bytes:
    return base64.b64decode(note.rstrip(b"\n").split(b" ")[-1])


def _with_blob(note: bytes, blob: bytes) -> bytes:
    head, _, _ = note.rstrip(b"\n").rpartition(b" ")
    return head + b" " + base64.b64encode(blob) + b"\n"


def _signed(text: str, origin: str, signer: Signer) -> bytes:
    """A note over arbitrary ``text`` with a well-formed signature line by ``signer``."""
    raw = text.encode()
    blob = note_key_hash(origin, signer.public) + signer.sign(raw)
    return raw + b"\n" + f"\u2014 {origin} {base64.b64encode(blob).decode()}\n".encode()


def test_note_from_another_ledger_is_a_finding_not_a_pass(world: World) -> None:
    """The ledger id is unsigned, so a differing origin cannot end the check with "not
    mine": the content is checked, and the id and the content are both reported."""
    other_url = f"sqlite:///{world.tmp / 'other.db'}"
    append_rounds(other_url, world.signer, rounds=2)
    other = checkpoint(other_url, world.signer)  # same trusted key, other ledger
    assert parse_note(other.note, world.trust).origin == other.origin
    with Ledger.open(world.url) as ledger:
        assert origin_of(ledger) != other.origin
        result = check_consistency(ledger, other)
    assert [f.code for f in result.findings] == ["ledger-id-mismatch",
                                                 "checkpoint-inconsistent"]
    assert other.origin in result.findings[0].message
    assert "another ledger" in result.findings[0].message and not result.ok


def test_unreadable_notes_are_input_errors_and_unverified_ones_signature_errors(
        world: World) -> None:
    """A note that does not read (docs/bundle.md §4.2 steps 1-3) is an InputError (exit 2);
    one that reads but whose signatures do not verify with the trust store (step 4: an
    altered note, a stranger's key) is a SignatureError, a failed check (exit 1)."""
    cp = checkpoint(world.url, world.signer)
    note, origin, root64 = cp.note, cp.origin, base64.b64encode(cp.root).decode()
    blob = _sig_blob(note)
    stranger = KeyFileSigner.generate()
    text = f"{origin}\n{cp.size}\n{root64}\n"
    untrusted: dict[str, bytes] = {
        "signature byte flipped": _with_blob(note, blob[:40] + bytes([blob[40] ^ 1]) + blob[41:]),
        "key hash altered": _with_blob(note, bytes([blob[0] ^ 0x80]) + blob[1:]),
        "signature cut short": _with_blob(note, blob[:-1]),
        "size line altered": note.replace(f"\n{cp.size}\n".encode(),
                                          f"\n{cp.size - 1}\n".encode()),
        "root line altered": note.replace(root64.encode(), base64.b64encode(
            hashlib.sha256(b"x").digest())),
        "origin line altered": note.replace(f"{origin}\n".encode(), f"{origin}x\n".encode(), 1),
        "signature line names another key": note.replace(f"\u2014 {origin} ".encode(),
                                                         f"\u2014 {origin}x ".encode()),
        "signed by an untrusted key": sign_note(origin, cp.size, cp.root, stranger),
    }
    unreadable: dict[str, bytes] = {
        "signature not base64": note.replace(note.split(b" ")[-1], b"%%%%\n"),
        "no signature lines": text.encode() + b"\n",
        "no blank line": text.encode() + note.split(b"\n\n")[1],
        "signature line without em dash": note.replace("\u2014 ".encode(), b"- "),
        "garbage": b"this is not a checkpoint\n",
        "empty": b"",
        "not UTF-8": b"\xff\xfe" + note,
        "two lines of text": _signed(f"{origin}\n{cp.size}\n", origin, world.signer),
        "non-ASCII digits, trusted signature": _signed(
            f"{origin}\n\u0661\u0668\n{root64}\n", origin, world.signer),
        "superscript digit, trusted signature": _signed(
            f"{origin}\n\u00b2\n{root64}\n", origin, world.signer),
        "leading zero, trusted signature": _signed(f"{origin}\n0{cp.size}\n{root64}\n",
                                                   origin, world.signer),
        "short root, trusted signature": _signed(
            f"{origin}\n{cp.size}\n{base64.b64encode(cp.root[:31]).decode()}\n", origin,
            world.signer),
    }
    for expected, cases in ((SignatureError, untrusted), (InputError, unreadable)):
        for name, variant in cases.items():
            assert variant != note, name
            try:
                parse_note(variant, world.trust)
            except expected:
                continue
            except (InputError, SignatureError) as exc:
                pytest.fail(f"{name}: {type(exc).__name__}, not {expected.__name__}: {exc}")
            pytest.fail(f"accepted: {name}")
    # The right note under a trust store that lacks its key.
    with pytest.raises(SignatureError, match="no valid signature by a trusted key"):
        parse_note(note, TrustStore([stranger.public]))


def test_cosignatures_and_extension_lines_are_tolerated(world: World) -> None:
    """C2SP: signatures by unknown keys are skipped; extension lines after the root too."""
    cp = checkpoint(world.url, world.signer)
    witness = KeyFileSigner.generate()
    text = cp.note.split(b"\n\n")[0] + b"\n"
    foreign = (f"\u2014 witness.example/w1 "
               f"{base64.b64encode(b'1234' + witness.sign(text)).decode()}\n").encode()
    ours = cp.note.split(b"\n\n")[1]
    for variant in (text + b"\n" + foreign + ours, text + b"\n" + ours + foreign):
        assert parse_note(variant, world.trust).size == cp.size
    extended = _signed(text.decode() + "extension line\n", cp.origin, world.signer)
    assert parse_note(extended, world.trust).root == cp.root


# --- concurrent writers -----------------------------------------------------------------

WRITERS, PER_WRITER = 4, 40


def _append_worker(url: str, key_path: str, worker: int, count: int, barrier: Any,
                   halfway: Any) -> None:
    signer = KeyFileSigner.load(key_path)
    with Ledger.open(url) as ledger:
        barrier.wait(timeout=120)
        for i in range(count):
            if i == count // 2:
                halfway.wait(timeout=600)  # the test checkpoints here, mid-run, for certain
            chain.append(ledger, f"wf-writer-{worker}", "step.done", {"i": i}, signer=signer)
            chain.append(ledger, "wf-shared", "step.done", {"worker": worker, "i": i},
                         signer=signer)


def test_concurrent_appends_give_contiguous_leaves_and_consistent_checkpoints(
        world: World) -> None:
    first = checkpoint(world.url, world.signer)
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(WRITERS + 1)
    halfway = ctx.Barrier(WRITERS + 1, action=None)
    procs = [ctx.Process(target=_append_worker, daemon=True,
                         args=(world.url, str(world.key), w, PER_WRITER, barrier, halfway))
             for w in range(WRITERS)]
    for p in procs:
        p.start()
    taken = [first]
    try:
        barrier.wait(timeout=120)
        # Checkpoints race the writers until they all reach halfway; one more is taken
        # while they wait there, so at least one lands strictly inside the run however
        # slow this machine is.
        while halfway.n_waiting < WRITERS and any(p.is_alive() for p in procs):
            taken.append(checkpoint(world.url, world.signer))
            time.sleep(0.02)
        taken.append(checkpoint(world.url, world.signer))
        halfway.wait(timeout=120)
        deadline = time.monotonic() + 600
        while any(p.is_alive() for p in procs) and time.monotonic() < deadline:
            taken.append(checkpoint(world.url, world.signer))  # while the writers write
            time.sleep(0.02)
        for p in procs:
            p.join(timeout=max(0.0, deadline - time.monotonic()))
        assert [p.exitcode for p in procs] == [0] * WRITERS
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    total = first.size + WRITERS * PER_WRITER * 2
    last = checkpoint(world.url, world.signer)
    taken.append(last)
    assert last.size == total
    assert len({cp.size for cp in taken}) > 2, "no checkpoint was taken during the appends"
    with Ledger.open(world.url) as ledger:
        assert [leaf for leaf, _ in ledger.leaves()] == list(range(total))
        for instance in [f"wf-writer-{w}" for w in range(WRITERS)] + ["wf-shared"]:
            seqs = [r.seq for r in ledger.entries(instance)]
            assert seqs == list(range(1, len(seqs) + 1)), instance
        tree = merkle.Tree([merkle.leaf_hash(b) for _, b in ledger.leaves()])
        for cp in taken:
            report = check_consistency(ledger, cp)
            assert report.ok, (cp.size, report.findings)
            assert tree.root(cp.size) == cp.root
    # Every checkpoint taken during the run extends the one before it.
    for a, b in itertools.pairwise(taken):
        assert merkle.verify_consistency(a.size, b.size, a.root, b.root,
                                         tree.consistency_proof(a.size, b.size))


# --- the command ------------------------------------------------------------------------


def test_cli_checkpoint_then_verify_since_checkpoint(world: World) -> None:
    note = world.tmp / "kept.note"
    r = cli("checkpoint", "--db", world.url, "--key", world.key, "--out", note, cwd=world.tmp)
    exits(r, 0)
    assert r.stdout.encode() == note.read_bytes()
    assert parse_note(note.read_bytes(), world.trust).size == len(INSTANCES) * ROUNDS
    verify = ("verify", "--since-checkpoint", note, "--trust", world.pub, "--db", world.url)
    exits(cli(*verify, cwd=world.tmp), 0)
    append_rounds(world.url, world.signer, rounds=2, start=ROUNDS + 1)
    r = cli(*verify, "--json", cwd=world.tmp)
    exits(r, 0)
    doc = json.loads(r.stdout)
    assert doc["ok"] is True and doc["reports"] == []
    proof = doc["since_checkpoint"]
    assert (proof["size"], proof["checked"]) == (18, True)
    assert (proof["report"]["mode"], proof["report"]["entries"]) == ("consistency", 24)


def test_cli_rollback_after_checkpoint_exits_1(world: World) -> None:
    backup = Backup(world.url, world.tmp / "backup").take()
    append_rounds(world.url, world.signer, rounds=2, start=ROUNDS + 1)
    note = world.tmp / "kept.note"
    exits(cli("checkpoint", "--db", world.url, "--key", world.key, "--out", note,
              cwd=world.tmp), 0)
    backup.restore()
    verify = ("verify", "--since-checkpoint", note, "--trust", world.pub, "--db", world.url)
    r = cli(*verify, cwd=world.tmp)
    exits(r, 1)
    assert "checkpoint-rollback" in r.stdout and "FAILED" in r.stdout
    r = cli(*verify, "--json", cwd=world.tmp)
    exits(r, 1)
    assert _json_codes(r) == ["checkpoint-rollback"]


def test_cli_bad_checkpoint_files_exit_2_unverified_ones_exit_1(world: World) -> None:
    garbage = world.tmp / "garbage.note"
    garbage.write_bytes(b"\x00\x01 not a note at all \xff\n")
    other_url = f"sqlite:///{world.tmp / 'other.db'}"
    append_rounds(other_url, world.signer, rounds=1)
    foreign = world.tmp / "other-ledger.note"
    foreign.write_bytes(checkpoint(other_url, world.signer).note)
    own = world.tmp / "own.note"
    own.write_bytes(checkpoint(world.url, world.signer).note)
    altered = world.tmp / "altered.note"
    altered.write_bytes(own.read_bytes().replace(b"\n18\n", b"\n19\n"))
    stranger_keys = world.tmp / "stranger"
    generate_keypair(stranger_keys, name="stranger")

    def verify(note: Path, trust: Path = world.pub) -> subprocess.CompletedProcess[str]:
        return cli("verify", "--since-checkpoint", note, "--trust", trust, "--db", world.url,
                   cwd=world.tmp)

    one_error_line(verify(garbage), "not UTF-8")
    r = verify(foreign)  # a readable, trusted note: a finding about this ledger (exit 1)
    exits(r, 1)
    assert "ledger-id-mismatch" in r.stdout and "checkpoint-inconsistent" in r.stdout
    # Readable notes whose signature fails the trust store: a failed check, exit 1.
    verification_failed(verify(altered), "no valid signature by a trusted key")
    verification_failed(verify(own, stranger_keys), "no valid signature by a trusted key")
    r = cli("verify", "--since-checkpoint", altered, "--trust", world.pub, "--db", world.url,
            "--json", cwd=world.tmp)
    verification_failed(r, "no valid signature by a trusted key")
    one_error_line(verify(world.tmp / "missing.note"), "missing.note")
    exits(verify(own), 0)


# --- the ledger id is unsigned: the content decides (docs/format.md §11.1) ---------------

def _set_ledger_id(url: str, new_id: str | None = None) -> str:
    """Edit histaudit_meta.ledger_id as the database owner; return the new origin."""
    import uuid

    new_id = new_id or str(uuid.uuid4())
    with LedgerDb(url) as db:
        assert db.count("UPDATE histaudit_meta SET value = :v WHERE key = 'ledger_id'",
                        v=new_id) == 1
    return f"histaudit/{new_id}"


def _json_codes(r: subprocess.CompletedProcess[str]) -> list[str]:
    """The codes of the --since-checkpoint proof in ``verify --json``."""
    return [f["code"] for f in json.loads(r.stdout)["since_checkpoint"]["report"]["findings"]]


def test_rollback_then_edited_ledger_id_is_still_caught(world: World) -> None:
    backup = Backup(world.url, world.tmp / "backup").take()
    append_rounds(world.url, world.signer, rounds=2, start=ROUNDS + 1)
    note = world.tmp / "kept.note"
    note.write_bytes(checkpoint(world.url, world.signer).note)
    backup.restore()
    renamed = _set_ledger_id(world.url)
    kept = parse_note(note.read_bytes(), world.trust)
    with Ledger.open(world.url) as ledger:
        assert origin_of(ledger) == renamed != kept.origin
        result = check_consistency(ledger, kept)
    assert [f.code for f in result.findings] == ["ledger-id-mismatch", "checkpoint-rollback"]
    assert not result.ok
    r = cli("verify", "--since-checkpoint", note, "--trust", world.pub, "--db", world.url,
            "--json", cwd=world.tmp)
    exits(r, 1)
    assert _json_codes(r) == ["ledger-id-mismatch", "checkpoint-rollback"]


def test_rewritten_entry_then_edited_ledger_id_is_inconsistent(world: World) -> None:
    kept = checkpoint(world.url, world.signer)
    with LedgerDb(world.url) as db:
        db.lift_guards()
        row = db.entry("wf-b", 2)
        db.rewrite_body(row.leaf, b'"round":2', b'"round":9')
        db.restore_guards()
    _set_ledger_id(world.url)
    assert codes(world.url, kept) == {"ledger-id-mismatch", "checkpoint-inconsistent"}


def test_edited_ledger_id_alone_is_a_finding(world: World) -> None:
    note = world.tmp / "kept.note"
    note.write_bytes(checkpoint(world.url, world.signer).note)
    append_rounds(world.url, world.signer, rounds=1, start=ROUNDS + 1)  # it only grew
    old_origin = parse_note(note.read_bytes(), world.trust).origin
    renamed = _set_ledger_id(world.url)
    with Ledger.open(world.url) as ledger:
        result = check_consistency(ledger, parse_note(note.read_bytes(), world.trust))
    (finding,) = result.findings
    assert finding.code == "ledger-id-mismatch" and finding.severity.name == "ERROR"
    assert old_origin in finding.message and renamed in finding.message
    assert "unsigned id was changed" in finding.message
    assert result.size == size_of(world.url) and result.proof  # the proof itself holds
    verify = ("verify", "--since-checkpoint", note, "--trust", world.pub, "--db", world.url)
    r = cli(*verify, "--json", cwd=world.tmp)
    exits(r, 1)
    assert _json_codes(r) == ["ledger-id-mismatch"]
    # Putting the id back makes the same ledger and note clean again.
    _set_ledger_id(world.url, old_origin.removeprefix("histaudit/"))
    exits(cli(*verify, cwd=world.tmp), 0)


def test_checkpoint_of_a_genuinely_other_ledger_exits_1_naming_both(world: World) -> None:
    """A larger and a smaller other ledger: the outcome is a finding either way, with the
    id mismatch first, so someone who passed the wrong note sees why at once."""
    for rounds, content in ((ROUNDS + 2, "checkpoint-rollback"),
                            (2, "checkpoint-inconsistent")):
        other_url = f"sqlite:///{world.tmp / f'other-{rounds}.db'}"
        append_rounds(other_url, world.signer, rounds=rounds)
        note = world.tmp / f"other-{rounds}.note"
        note.write_bytes(checkpoint(other_url, world.signer).note)
        r = cli("verify", "--since-checkpoint", note, "--trust", world.pub, "--db",
                world.url, "--json", cwd=world.tmp)
        exits(r, 1)
        assert _json_codes(r) == ["ledger-id-mismatch", content]


# --- an auditor's kept checkpoints: `checkpoint verify`, `verify --bundle --since-checkpoint`

def _cli_checkpoint(world: World, name: str) -> Path:
    note = world.tmp / name
    exits(cli("checkpoint", "--db", world.url, "--key", world.key, "--out", note,
              cwd=world.tmp), 0)
    return note


def _cli_export(world: World, name: str, *instances: str) -> Path:
    out = world.tmp / name
    r = cli("export", *instances, "--out", out, "--db", world.url, "--key", world.key,
            "--trust", world.pub, cwd=world.tmp)
    exits(r, 0)
    return out


def test_cli_checkpoint_verify_says_what_a_kept_note_proves(world: World) -> None:
    note = _cli_checkpoint(world, "kept.note")
    cp = parse_note(note.read_bytes(), world.trust)
    r = cli("checkpoint", "verify", note, "--trust", world.pub, cwd=world.tmp)
    exits(r, 0)
    root = base64.b64encode(cp.root).decode()
    for said in ("OK", cp.origin, "18 leaves", root, cp.root.hex(), world.signer.kid, "ops",
                 verifier_key(cp.origin, world.signer.public), "no timestamp"):
        assert said in r.stdout, said
    r = cli("checkpoint", "verify", note, "--trust", world.pub, "--json", cwd=world.tmp)
    exits(r, 0)
    assert json.loads(r.stdout) == {
        "note": str(note), "ok": True, "origin": cp.origin, "size": 18, "root": root,
        "root_hex": cp.root.hex(), "kid": world.signer.kid, "key_name": "ops",
        "verifier_key": verifier_key(cp.origin, world.signer.public), "timestamp": None}
    # HISTAUDIT_TRUST works as --trust does; the ledger is never opened (it may be gone).
    Path(world.tmp / "ledger.db").unlink(missing_ok=True)
    exits(cli("checkpoint", "verify", note, cwd=world.tmp,
              env={"HISTAUDIT_TRUST": str(world.pub)}), 0)


def test_cli_checkpoint_verify_refuses_altered_untrusted_and_unreadable_notes(
        world: World) -> None:
    note = _cli_checkpoint(world, "kept.note")
    text = note.read_bytes()
    stranger = world.tmp / "stranger"
    generate_keypair(stranger, name="stranger")

    def check(data: bytes, trust: Path = world.pub, *extra: str
              ) -> subprocess.CompletedProcess[str]:
        path = world.tmp / "given.note"
        path.write_bytes(data)
        return cli("checkpoint", "verify", path, "--trust", trust, *extra, cwd=world.tmp)

    # One character of the signed root changed (still base64 of 32 bytes): it reads, but
    # its signature no longer verifies — a failed check, exit 1, with or without --json.
    root_line = text.split(b"\n")[2]
    flipped = root_line[:5] + (b"A" if root_line[5:6] != b"A" else b"B") + root_line[6:]
    altered = text.replace(root_line, flipped)
    verification_failed(check(altered), "no valid signature by a trusted key")
    verification_failed(check(altered, world.pub, "--json"), "no valid signature")
    sig_at = text.rindex(b" ") + 10  # inside the signature's base64
    sig_flipped = text[:sig_at] + (b"A" if text[sig_at:sig_at + 1] != b"A" else b"B") + \
        text[sig_at + 1:]
    verification_failed(check(sig_flipped), "no valid signature by a trusted key")
    verification_failed(check(text, stranger), "no valid signature by a trusted key")
    # What does not read as a note is bad input: exit 2, one line.
    one_error_line(check(b"\x00\x01 not a note at all \xff\n"), "not UTF-8")
    one_error_line(check(b"just some text\n"), "not a signed note")
    one_error_line(check(text.replace(b"\n18\n", b"\nxviii\n")), "not a decimal number")
    one_error_line(check(text.replace(root_line, root_line[:-4])), "root hash")
    one_error_line(cli("checkpoint", "verify", world.tmp / "missing.note", "--trust",
                       world.pub, cwd=world.tmp), "missing.note")
    one_error_line(cli("checkpoint", "verify", note, cwd=world.tmp), "no trust store")
    # The writing options mean nothing to `verify`: refused, not ignored.
    one_error_line(cli("checkpoint", "--db", world.url, "verify", note, "--trust",
                       world.pub, cwd=world.tmp), "--db", "checkpoint verify")
    exits(check(text), 0)


def test_cli_newer_bundle_extends_a_kept_checkpoint(world: World) -> None:
    note = _cli_checkpoint(world, "kept.note")
    append_rounds(world.url, world.signer, rounds=2, start=ROUNDS + 1)
    bundle = _cli_export(world, "bundle")
    verify = ("verify", "--bundle", bundle, "--since-checkpoint", note, "--trust", world.pub)
    r = cli(*verify, cwd=world.tmp)
    exits(r, 0)
    assert "consistency 18->24 check — OK" in r.stdout
    r = cli(*verify, "--json", cwd=world.tmp)
    exits(r, 0)
    doc = json.loads(r.stdout)
    assert doc["ok"] is True and doc["checkpoint"]["size"] == 24
    ledger_report = doc["since_checkpoint"].pop("report")
    assert doc["since_checkpoint"] == {"size": 18, "origin": parse_note(
        note.read_bytes(), world.trust).origin, "checked": True}
    assert [rep["scope"] for rep in doc["reports"]] == ["bundle", "instance", "instance",
                                                        "instance"]
    assert (ledger_report["scope"], ledger_report["mode"]) == ("ledger", "consistency")
    assert ledger_report["entries"] == 24 and ledger_report["findings"] == []
    # A bundle's own checkpoint.note is a kept checkpoint too: the next bundle extends it.
    append_rounds(world.url, world.signer, rounds=1, start=ROUNDS + 3)
    later = _cli_export(world, "later")
    exits(cli("verify", "--bundle", later, "--since-checkpoint", bundle / "checkpoint.note",
              "--trust", world.pub, cwd=world.tmp), 0)
    # The same note as the bundle's own checkpoint: sizes equal, roots must be equal.
    exits(cli("verify", "--bundle", later, "--since-checkpoint", later / "checkpoint.note",
              "--trust", world.pub, cwd=world.tmp), 0)


def test_cli_bundle_of_some_instances_cannot_prove_it_extends_a_checkpoint(
        world: World) -> None:
    note = _cli_checkpoint(world, "kept.note")
    append_rounds(world.url, world.signer, rounds=1, start=ROUNDS + 1)
    partial = _cli_export(world, "partial", "wf-a")
    args = ("verify", "--bundle", partial, "--since-checkpoint", note, "--trust", world.pub)
    one_error_line(cli(*args, cwd=world.tmp), "6 of the 18 leaves", "export every instance")
    one_error_line(cli(*args, "--json", cwd=world.tmp), "cannot prove")
    exits(cli("verify", "--bundle", partial, "--trust", world.pub, cwd=world.tmp), 0)


def test_cli_bundle_of_a_rolled_back_ledger_against_a_later_checkpoint(world: World) -> None:
    backup = Backup(world.url, world.tmp / "backup").take()
    append_rounds(world.url, world.signer, rounds=2, start=ROUNDS + 1)
    note = _cli_checkpoint(world, "kept.note")  # 24 leaves, kept by the auditor
    backup.restore()  # back to 18
    for bundle in (_cli_export(world, "bundle"), _cli_export(world, "partial", "wf-b")):
        # The sizes alone prove a rollback: a bundle of some instances shows it too.
        r = cli("verify", "--bundle", bundle, "--since-checkpoint", note, "--trust",
                world.pub, "--json", cwd=world.tmp)
        exits(r, 1)
        doc = json.loads(r.stdout)
        assert doc["ok"] is False
        ledger_report = doc["since_checkpoint"]["report"]
        assert [f["code"] for f in ledger_report["findings"]] == ["checkpoint-rollback"]
        assert all(rep["ok"] for rep in doc["reports"])
    r = cli("verify", "--bundle", world.tmp / "bundle", "--since-checkpoint", note,
            "--trust", world.pub, cwd=world.tmp)
    exits(r, 1)
    assert "checkpoint-rollback" in r.stdout and "FAILED" in r.stdout


def test_cli_bundle_of_a_forked_ledger_is_inconsistent(world: World) -> None:
    """Restored from a copy older than the kept checkpoint, then written past its size
    with other entries: a bundle whose every chain verifies, but whose tree does not
    extend what the auditor kept."""
    backup = Backup(world.url, world.tmp / "backup").take()
    append_rounds(world.url, world.signer, rounds=2, start=ROUNDS + 1)
    note = _cli_checkpoint(world, "kept.note")
    backup.restore()
    append_rounds(world.url, world.signer, rounds=3, start=100)  # 27 leaves, another history
    bundle = _cli_export(world, "bundle")
    exits(cli("verify", "--bundle", bundle, "--trust", world.pub, cwd=world.tmp), 0)
    r = cli("verify", "--bundle", bundle, "--since-checkpoint", note, "--trust", world.pub,
            "--json", cwd=world.tmp)
    exits(r, 1)
    since = json.loads(r.stdout)["since_checkpoint"]
    ledger_report = since["report"]
    assert (since["size"], ledger_report["mode"], ledger_report["entries"]) == (
        24, "consistency", 27)
    assert [f["code"] for f in ledger_report["findings"]] == ["checkpoint-inconsistent"]
    # A kept checkpoint of another ledger: named first, then what the content says.
    other_url = f"sqlite:///{world.tmp / 'other.db'}"
    append_rounds(other_url, world.signer, rounds=2)
    other = world.tmp / "other.note"
    other.write_bytes(checkpoint(other_url, world.signer).note)
    r = cli("verify", "--bundle", bundle, "--since-checkpoint", other, "--trust", world.pub,
            "--json", cwd=world.tmp)
    exits(r, 1)
    ledger_report = json.loads(r.stdout)["since_checkpoint"]["report"]
    assert [f["code"] for f in ledger_report["findings"]] == ["ledger-id-mismatch",
                                                              "checkpoint-inconsistent"]


def test_cli_bundle_with_entries_cut_out_fails_rather_than_being_called_partial(
        world: World) -> None:
    """Lines deleted from a whole bundle's entries.jsonl are tampering (exit 1), not a
    bundle of some instances (exit 2): the signed manifest says which it is."""
    note = _cli_checkpoint(world, "kept.note")
    bundle = _cli_export(world, "bundle")
    entries = bundle / "entries.jsonl"
    lines = entries.read_bytes().splitlines(keepends=True)
    entries.write_bytes(b"".join(line for line in lines if b'"instance":"wf-b"' not in line))
    r = cli("verify", "--bundle", bundle, "--since-checkpoint", note, "--trust", world.pub,
            "--json", cwd=world.tmp)
    exits(r, 1)
    doc = json.loads(r.stdout)
    assert doc["since_checkpoint"]["checked"] is False
    assert doc["since_checkpoint"]["report"] is None
    bundle_codes = {f["code"] for rep in doc["reports"] for f in rep["findings"]}
    assert "bundle-file-changed" in bundle_codes
