"""Two executions of one effect in one process take turns (interceptor/effects.py).

The engine hands an activity out again while its first execution still runs in the app
when the engine restarted or the work item's lock expired. Both executions then guard the
same effect (same instance, name and key). The second must wait for the first's block to
end and find its done record, not find a bare intent and do the effect again beside it.
Real threads and a real SQLite ledger; ~0.3 s.
"""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from histaudit.interceptor.activity import audit_activity
from histaudit.interceptor.effects import _BLOCKS, once, side_effect
from histaudit.interceptor.recorder import AuditRecorder
from histaudit.ledger.keys import KeyFileSigner
from histaudit.ledger.kinds import Kind
from histaudit.ledger.store import Ledger
from support.ledgers import read_entries

INSTANCE = "book-1"


def ctx(execution: str = "exec-1") -> SimpleNamespace:
    return SimpleNamespace(orchestration_id=INSTANCE, workflow_id=INSTANCE, task_id=1,
                           task_execution_id=execution)


def kinds(db: str) -> list[str]:
    return [e.kind for e in read_entries(db, INSTANCE)
            if e.kind.startswith("effect.")]


def test_a_second_execution_waits_for_the_first_and_finds_it_done(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    inside, release = threading.Event(), threading.Event()
    bookings: list[str] = []

    def book(actx: Any, who: str) -> Any:
        def do() -> str:
            if who == "first":  # the first execution is slow inside its effect
                inside.set()
                assert release.wait(10)
            bookings.append(who)
            return f"booked by {who}"
        return once(actx, "book-flight", do)

    with Ledger.open(db, create=True) as ledger:
        audited = audit_activity(AuditRecorder(ledger, KeyFileSigner.generate()), book,
                                 lambda: "book")
        results: dict[str, Any] = {}
        first = threading.Thread(target=lambda: results.update(first=audited(ctx(), "first")))
        second = threading.Thread(
            target=lambda: results.update(second=audited(ctx(), "second")))
        first.start()
        assert inside.wait(10)
        second.start()
        second.join(0.3)
        assert second.is_alive(), "the second execution must wait for the first's block"
        release.set()
        first.join(10)
        second.join(10)
    assert bookings == ["first"]
    assert results == {"first": "booked by first", "second": "booked by first"}
    assert kinds(db) == [Kind.EFFECT_INTENT, Kind.EFFECT_DONE, Kind.EFFECT_INTENT,
                         Kind.EFFECT_SKIPPED]
    assert _BLOCKS == {}


def test_other_effects_and_the_same_thread_do_not_wait(tmp_path: Path) -> None:
    """Different keys run side by side; the same effect nested on one thread goes on."""
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    inside, release = threading.Event(), threading.Event()
    done: list[str] = []

    def act(actx: Any, which: str) -> str:
        if which == "slow":
            with side_effect(actx, "pay") as effect:
                inside.set()
                assert release.wait(10)
                effect.result = "slow"
        else:
            with side_effect(actx, "pay") as effect, side_effect(actx, "pay") as inner:
                inner.result = effect.result = "nested"
        done.append(which)
        return which

    with Ledger.open(db, create=True) as ledger:
        audited = audit_activity(AuditRecorder(ledger, KeyFileSigner.generate()), act,
                                 lambda: "act")
        slow = threading.Thread(target=audited, args=(ctx("exec-slow"), "slow"))
        slow.start()
        assert inside.wait(10)
        other = threading.Thread(target=audited, args=(ctx("exec-other"), "nested"))
        other.start()
        other.join(10)
        assert done == ["nested"], "another key's effect must not wait for this one"
        release.set()
        slow.join(10)
    assert sorted(done) == ["nested", "slow"]
    assert _BLOCKS == {}
