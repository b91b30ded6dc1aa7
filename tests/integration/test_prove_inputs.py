"""``histaudit prove`` against hostile traces and trace backends (issue #50 items 5, 6, 10),
on SQLite and PostgreSQL, with a trace written here rather than by an app (the real
Jaeger end to end is tests/integration/test_traces.py):

* a trace that holds one span id twice, differently (the forged span first), is refused
  with or without ``--span-id``: which of the two is "the" span is not for prove to pick;
  the same span sent twice, identical, is one span;
* a span whose claimed kind contradicts the kind its hashed entry signs is
  ``span-unproven`` (exit 1, no bundle), so a false kind never reaches ``spans.json``;
* ``--jaeger`` waits for a whole answer at most ``--timeout`` seconds, however slowly a
  backend trickles its headers or its body, and follows no redirect to another host;
* a ``--jaeger`` URL with a control character, or with credentials, is one line that shows no
  secret.

Cost: ≈ 3 s of CPU, 12 s of wall (mostly the slow servers' deadlines).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from histaudit.ledger import chain, merkle
from histaudit.ledger.checkpoint import origin_of
from histaudit.ledger.keys import generate_keypair
from histaudit.ledger.store import Ledger
from support.cli import cli, exits, one_error_line
from support.slow_server import SlowServer

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


class Rig:
    """A ledger of one instance (started, an activity, an LLM call) and its spans."""

    def __init__(self, url: str, tmp: Path) -> None:
        self.url, self.tmp = url, tmp
        self.key, self.pub, signer = generate_keypair(tmp / "keys", name="ops")
        with Ledger.open(url, create=True) as ledger:
            chain.append(ledger, "wf-1", "workflow.started", {"workflow": "w"}, signer=signer)
            chain.append(ledger, "wf-1", "activity.completed", {"name": "a"}, signer=signer)
            chain.append(ledger, "wf-1", "llm.call", {"model": "m"}, signer=signer)
            self.origin = origin_of(ledger)
            self.rows = {r.seq: r for r in ledger.entries("wf-1")}

    def span(self, span_id: str, seq: int, *, kind: str | None = None,
             leaf_hash: str | None = None) -> dict[str, Any]:
        """An OTLP JSON span naming entry ``seq`` of wf-1 (its kind and leaf hash unless
        told otherwise)."""
        row = self.rows[seq]
        kinds = {1: "workflow.started", 2: "activity.completed", 3: "llm.call"}
        attrs = {"histaudit.ledger.origin": {"stringValue": self.origin},
                 "histaudit.instance": {"stringValue": "wf-1"},
                 "histaudit.entry.seq": {"intValue": str(seq)},
                 "histaudit.entry.leaf": {"intValue": str(row.leaf)},
                 "histaudit.entry.leaf_hash": {
                     "stringValue": leaf_hash or merkle.leaf_hash(row.body).hex()},
                 "histaudit.entry.kind": {"stringValue": kind or kinds[seq]}}
        return {"traceId": TRACE, "spanId": span_id, "name": f"span {seq}",
                "attributes": [{"key": k, "value": v} for k, v in attrs.items()]}

    def trace(self, *spans: dict[str, Any]) -> bytes:
        return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": list(spans)}]}]}
                          ).encode()

    def trace_file(self, *spans: dict[str, Any]) -> Path:
        path = self.tmp / "trace.json"
        path.write_bytes(self.trace(*spans))
        return path

    def prove(self, *args: str | Path, out: str = "proof") -> Any:
        return cli("prove", *args, "--out", self.tmp / out, "--db", self.url,
                   "--key", self.key, "--trust", self.pub, cwd=self.tmp)

    def leaves(self) -> int:
        with Ledger.open(self.url) as ledger:
            return ledger.leaf_count()


@pytest.fixture
def rig(db_url: str, tmp_path: Path) -> Rig:
    return Rig(db_url, tmp_path)


def test_a_span_id_held_twice_is_refused(rig: Rig) -> None:
    """Item 6: the forged span first, the true one last; the last used to win silently."""
    forged = rig.span("00f067aa0ba902b7", 2, leaf_hash="0" * 64)
    true = rig.span("00f067aa0ba902b7", 2)
    path = rig.trace_file(forged, true)
    for args in (("--span-id", "00f067aa0ba902b7"), ()):
        r = rig.prove("--trace-file", path, *args)
        one_error_line(r, "holds span 00f067aa0ba902b7 2 times")
        assert not (rig.tmp / "proof").exists()
    assert rig.leaves() == 3  # no checkpoint signed either
    # the same span twice (an exporter's retry) is one span
    exits(rig.prove("--trace-file", rig.trace_file(true, true), "--span-id",
                    "00F067AA0BA902B7"))
    listed = json.loads((rig.tmp / "proof" / "spans.json").read_bytes())["spans"]
    assert [s["span_id"] for s in listed] == ["00f067aa0ba902b7"]


def test_a_span_whose_kind_contradicts_its_entry_is_unproven(rig: Rig) -> None:
    """Item 10: the leaf hash is right, the kind a lie (an LLM call claimed of an
    activity's entry): span-unproven, exit 1, nothing written."""
    path = rig.trace_file(rig.span("1111111111111111", 2, kind="llm.call"),
                          rig.span("2222222222222222", 3))
    r = rig.prove("--trace-file", path)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "span-unproven" in r.stdout and "claims kind 'llm.call'" in r.stdout \
        and "signs 'activity.completed'" in r.stdout, r.stdout
    assert not (rig.tmp / "proof").exists() and rig.leaves() == 3
    exits(rig.prove("--trace-file", rig.trace_file(rig.span("1111111111111111", 2))))
    (listed,) = json.loads((rig.tmp / "proof" / "spans.json").read_bytes())["spans"]
    assert listed["kind"] == "activity.completed"
    exits(cli("verify", "--bundle", rig.tmp / "proof", "--trust", rig.pub, cwd=rig.tmp))


@pytest.mark.parametrize("mode", ["trickle-head", "trickle-body"])
def test_a_trickling_backend_is_given_up_at_the_deadline(rig: Rig, mode: str) -> None:
    """Item 5: a byte every 0.3 s keeps every read inside any per-read timeout; the whole
    answer has ``--timeout`` seconds."""
    with SlowServer(mode) as backend:
        start = time.monotonic()
        r = rig.prove("--jaeger", backend.url, "--trace-id", TRACE, "--timeout", "2")
        took = time.monotonic() - start
    one_error_line(r, "no complete answer within 2s")
    assert took < 8, took
    assert not (rig.tmp / "proof").exists() and rig.leaves() == 3


def test_a_redirect_to_another_host_is_not_followed(rig: Rig) -> None:
    with SlowServer("answer", body=rig.trace(rig.span("00f067aa0ba902b7", 3))) as target:
        # to another host (127.0.0.2 is this machine too, but not the host asked)
        elsewhere = target.url.replace("127.0.0.1", "127.0.0.2") + "/api/v3/traces/" + TRACE
        with SlowServer("redirect", location=elsewhere) as backend:
            r = rig.prove("--jaeger", backend.url, "--trace-id", TRACE)
            one_error_line(r, "redirected to another host", "127.0.0.2")
            assert target.paths == []
        # within the same host and port: followed
        with SlowServer("redirect", location="/mirror") as backend:
            backend.location = f"{backend.url}/mirror/api/v3/traces/{TRACE}"
            r = rig.prove("--jaeger", backend.url, "--trace-id", TRACE)
            one_error_line(r, "redirects")  # …to itself, for ever: a bounded number of hops
            assert 2 <= len(backend.paths) <= 6, backend.paths


def test_a_jaeger_url_with_a_nul_or_credentials_is_one_line_without_the_secret(
        rig: Rig) -> None:
    # (an argument cannot hold a NUL byte; ESC and DEL stand for every control character)
    for char in ("\x1b", "\x7f"):
        one_error_line(rig.prove("--jaeger", f"http://127.0.0.1:9/{char}x", "--trace-id",
                                 TRACE), "control or invisible character")
    r = rig.prove("--jaeger", "http://ops:Pw5ecret@127.0.0.1:9/", "--trace-id", TRACE)
    line = one_error_line(r, "cannot reach the trace backend")
    assert "Pw5ecret" not in line and "ops" not in line, line
