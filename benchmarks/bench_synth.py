"""Synthetic workload: a realistic entry mix, and a fast bulk builder for big ledgers.

The mix imitates what the Dapr interceptor (``histaudit.interceptor``: ``activity``,
``workflow``, ``effects``) records for one long workflow instance, with the same field names::

    seq 1   workflow.started             {workflow, input: {c, n}, input_digest, worker}
    then per task t = 0, 1, 2, ...
            workflow.scheduled_activity  {workflow, activity, task_id, execution_id,
                                          retry_policy, input: {c, n}, input_digest, worker}
            activity.started             {activity, task_id, execution_id, attempt, worker,
                                          input: {c, n}, input_digest}
            effect.intent                {..., name, key}           (every 4th task)
            effect.done                  {..., name, key, intent_seq,
                                          result: {c, n}, result_digest}  (every 4th task)
            activity.completed           {..., started_seq, output: {c, n}, output_digest}

so 3.5 entries per task on average; every entry but effect.intent references a
payload commitment ({c, n}), each with its own salt, and every payload is stored.
Digests are HMAC-SHA256 hex, as the interceptor writes them. Entry bodies are 390-580
bytes (median ~550). The behaviour check (``BehaviourCheck``) sees every kind it tracks.

The bulk builder writes rows straight into a ledger created by ``Ledger.open(...,
create=True)`` in one transaction: bodies built with
:func:`histaudit.ledger.records.entry_body` (so they are the exact canonical bytes an
append would write), hashed with :func:`histaudit.ledger.records.sha256_hex`, signed with
a :class:`histaudit.ledger.keys.Signer` key (signatures computed on a process pool), and
a signed head built with :func:`histaudit.ledger.records.head_body`. It is ~50x faster
than a million ``append`` calls, and the result verifies clean (run.py checks that before
timing anything).
"""

from __future__ import annotations

import hashlib
import hmac
import random
import sqlite3
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from histaudit.ledger import records as fmt
from histaudit.ledger.keys import KeyFileSigner, Signer
from histaudit.ledger.store import Ledger

ACTIVITIES = ("fetch-order", "charge-card", "reserve-stock", "send-email")
WORKFLOW = "order-triage"
WORKER = "bench-host:4242"
BASE_TS = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
_DIGEST_SECRET = b"bench-digest-secret"


def workload(n: int, *, seed: int = 7, first_task: int = 0
             ) -> Iterator[tuple[str, dict[str, Any], dict[bytes, tuple[str, bytes]]]]:
    """Yield ``n`` (kind, data, payloads) triples of the mix described above.

    Field names and shapes follow what ``histaudit.interceptor`` records.
    ``payloads`` maps salt -> (commitment, payload bytes), exactly what
    ``histaudit.ledger.chain.append(payloads=...)`` takes.
    """
    rng = random.Random(seed)
    made = 0

    def committed(doc: dict[str, Any]) -> tuple[dict[str, Any], str,
                                                 dict[bytes, tuple[str, bytes]]]:
        payload = orjson.dumps(doc)
        salt = rng.randbytes(fmt.SALT_BYTES)
        c = fmt.commit(payload, salt)
        digest = hmac.new(_DIGEST_SECRET, payload, hashlib.sha256).hexdigest()
        return {"c": c, "n": len(payload)}, digest, {salt: (c, payload)}

    if first_task == 0:
        ref, digest, p = committed({"order": "A-1001", "items": 3})
        yield ("workflow.started", {"workflow": WORKFLOW, "input": ref, "input_digest": digest,
                                    "worker": WORKER}, p)
        made += 1
    task = first_task
    while made < n:
        activity = ACTIVITIES[task % len(ACTIVITIES)]
        execution_id = f"{rng.getrandbits(64):016x}"
        fields = {"activity": activity, "task_id": task, "execution_id": execution_id,
                  "attempt": 1, "worker": WORKER}
        ref, digest, p_in = committed({"order": "A-1001", "task": task})
        steps: list[tuple[str, dict[str, Any], dict[bytes, tuple[str, bytes]]]] = [
            ("workflow.scheduled_activity",
             {"workflow": WORKFLOW, "activity": activity, "task_id": task,
              "execution_id": execution_id, "retry_policy": False, "input": ref,
              "input_digest": digest, "worker": WORKER}, p_in),
        ]
        # the activity commits to its input again (its own salt, its own stored payload)
        ref2, digest2, p_in2 = committed({"order": "A-1001", "task": task})
        steps.append(("activity.started", {**fields, "input": ref2, "input_digest": digest2},
                      p_in2))
        # started_seq / intent_seq: the seqs these entries get when the mix starts at
        # seq 1 (exact for the bulk-built ledger; plausible numbers for the appenders)
        started_seq = made + 2
        if task % 4 == 0:
            base = {**fields, "name": "notify", "key": execution_id}
            res, rdigest, p_res = committed({"sent": True, "task": task})
            steps.append(("effect.intent", dict(base), {}))
            steps.append(("effect.done", {**base, "intent_seq": made + 3, "result": res,
                                          "result_digest": rdigest}, p_res))
        out, odigest, p_out = committed({"task": task, "status": "ok", "ref": f"R{task:08d}"})
        steps.append(("activity.completed", {**fields, "started_seq": started_seq,
                                             "output": out, "output_digest": odigest}, p_out))
        for step in steps:
            if made >= n:
                return
            yield step
            made += 1
        task += 1


def ts_for(i: int) -> str:
    """A strictly increasing RFC 3339 UTC timestamp (1 ms apart) for entry ``i``."""
    return (BASE_TS + timedelta(milliseconds=i)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# --- signing on a process pool ---------------------------------------------------------

_POOL_KEY: Ed25519PrivateKey | None = None


def _pool_init(raw_private: bytes) -> None:
    global _POOL_KEY
    _POOL_KEY = Ed25519PrivateKey.from_private_bytes(raw_private)


def _pool_sign(bodies: list[bytes]) -> list[bytes]:
    assert _POOL_KEY is not None
    sign = _POOL_KEY.sign
    return [sign(b) for b in bodies]


def raw_private(signer: KeyFileSigner) -> bytes:
    """The signer's raw 32-byte private key (the signing pool and raw baselines use it)."""
    key = serialization.load_pem_private_key(signer.private_pem(), password=None)
    assert isinstance(key, Ed25519PrivateKey)
    return key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                             serialization.NoEncryption())


def build_ledger(path: Path, instances: list[tuple[str, int]], signer: Signer, *,
                 workers: int = 2, chunk: int = 4096, progress: Any = None) -> dict[str, Any]:
    """Create a SQLite ledger at ``path`` holding ``instances`` [(name, entries)].

    Returns {instance: {"entries", "first_leaf", "last_leaf"}}.
    """
    url = f"sqlite:///{path}"
    Ledger.open(url, create=True).close()
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA synchronous = OFF")  # build durability only; file format unchanged
    db.execute("BEGIN IMMEDIATE")
    entry_sql = ("INSERT INTO histaudit_entries (leaf, instance, seq, hash, body, sig) "
                 "VALUES (?, ?, ?, ?, ?, ?)")
    payload_sql = "INSERT INTO histaudit_payloads (commitment, salt, data) VALUES (?, ?, ?)"
    summary: dict[str, Any] = {}
    leaf = 0
    pool = ProcessPoolExecutor(max_workers=workers, initializer=_pool_init,
                               initargs=(raw_private(signer),))
    pending: list[tuple[Future[list[bytes]], list[tuple[int, str, int, str, bytes]]]] = []

    def drain(limit: int) -> None:
        while len(pending) > limit:
            fut, rows = pending.pop(0)
            sigs = fut.result()
            db.executemany(entry_sql, [(*r, s) for r, s in zip(rows, sigs, strict=True)])

    try:
        for idx, (name, n) in enumerate(instances):
            prev, first_leaf = fmt.GENESIS_PREV, leaf
            rows: list[tuple[int, str, int, str, bytes]] = []
            payload_rows: list[tuple[str, bytes, bytes]] = []
            ts = ""
            for seq, (kind, data, payloads) in enumerate(workload(n, seed=1000 + idx), start=1):
                ts = ts_for(seq)
                body = fmt.entry_body(instance=name, seq=seq, leaf=leaf, prev=prev, kind=kind,
                                      ts=ts, kid=signer.kid, data=data)
                prev = fmt.sha256_hex(body)
                rows.append((leaf, name, seq, prev, body))
                for salt, (c, payload) in payloads.items():
                    payload_rows.append((c, salt, payload))
                leaf += 1
                if len(rows) >= chunk:
                    pending.append((pool.submit(_pool_sign, [r[4] for r in rows]), rows))
                    rows = []
                    db.executemany(payload_sql, payload_rows)
                    payload_rows = []
                    drain(2 * workers)
                    if progress is not None and seq % (chunk * 32) == 0:
                        progress(f"built {seq:,}/{n:,} entries of {name}")
            if rows:
                pending.append((pool.submit(_pool_sign, [r[4] for r in rows]), rows))
            db.executemany(payload_sql, payload_rows)
            drain(0)
            hbody = fmt.head_body(instance=name, seq=n, leaf=leaf - 1, hash=prev, ts=ts,
                                  kid=signer.kid)
            db.execute("INSERT INTO histaudit_heads (instance, seq, body, sig) VALUES (?,?,?,?)",
                       (name, n, hbody, signer.sign(hbody)))
            summary[name] = {"entries": n, "first_leaf": first_leaf, "last_leaf": leaf - 1}
        db.execute("COMMIT")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        pool.shutdown()
        db.close()
    return summary


def self_check(path: Path, instance: str, public_raw: bytes, *, sig_sample: int = 500
               ) -> dict[str, Any]:
    """Check a built instance independently of histaudit.verify (which may change).

    Every body hashes to its stored hash and links to the previous entry; seq and leaf
    fields match their columns; the head signs the last entry's seq, leaf and hash; the
    head signature and the first ``sig_sample`` entry signatures verify.
    """
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    key = Ed25519PublicKey.from_public_bytes(public_raw)
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        prev, n, last_leaf = fmt.GENESIS_PREV, 0, -1
        cur = db.execute("SELECT leaf, seq, hash, body, sig FROM histaudit_entries "
                         "WHERE instance = ? ORDER BY leaf", (instance,))
        for leaf, seq, digest, body, sig in cur:
            n += 1
            doc = orjson.loads(body)
            if (fmt.sha256_hex(body) != digest or doc["prev"] != prev or doc["seq"] != seq
                    or seq != n or doc["leaf"] != leaf or leaf <= last_leaf):
                raise RuntimeError(f"built ledger broken at {instance} seq {seq}")
            if n <= sig_sample:
                key.verify(sig, body)
            prev, last_leaf = digest, leaf
        hbody, hsig = db.execute("SELECT body, sig FROM histaudit_heads WHERE instance = ?",
                                 (instance,)).fetchone()
        key.verify(hsig, hbody)
        head = orjson.loads(hbody)
        if (head["seq"], head["leaf"], head["hash"]) != (n, last_leaf, prev):
            raise RuntimeError(f"built head of {instance} does not sign the last entry")
    finally:
        db.close()
    return {"entries": n, "head_ok": True, "signatures_checked": min(n, sig_sample)}
