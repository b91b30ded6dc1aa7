"""PostgreSQL connections the ledger pools: pinged only after sitting idle.

A server that dropped the ledger's sessions (a restart, an administrator) is noticed by
the ping of an idle connection, which the pool then replaces; a connection used a moment
ago is not pinged, so losing it fails one write, and the next write gets a new one.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from histaudit.errors import StoreError
from histaudit.ledger import chain
from histaudit.ledger.keys import KeyFileSigner
from histaudit.ledger.store import Ledger, postgres

pytestmark = pytest.mark.postgres


def _drop_sessions(pg_url: str) -> int:
    """Terminate every other session on the ledger's database; how many there were."""
    admin = sa.create_engine(pg_url)
    try:
        with admin.connect() as conn:
            return len(conn.execute(sa.text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()")).all())
    finally:
        admin.dispose()


def test_an_idle_connection_the_server_dropped_is_replaced(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    signer = KeyFileSigner.generate()
    with Ledger.open(pg_url, create=True) as ledger:
        chain.append(ledger, "a", "workflow.started", {}, signer=signer)
        assert _drop_sessions(pg_url) >= 1
        monkeypatch.setattr(postgres, "PING_AFTER_IDLE_SECONDS", 0.0)  # every checkout is "idle"
        entry = chain.append(ledger, "a", "activity.started", {}, signer=signer)
    assert entry.seq == 2


def test_a_recently_used_connection_is_not_pinged_and_fails_one_write(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(postgres, "PING_AFTER_IDLE_SECONDS", 3600.0)
    signer = KeyFileSigner.generate()
    with Ledger.open(pg_url, create=True) as ledger:
        chain.append(ledger, "a", "workflow.started", {}, signer=signer)
        assert _drop_sessions(pg_url) >= 1
        with pytest.raises(StoreError, match="append to 'a' failed"):
            chain.append(ledger, "a", "activity.started", {}, signer=signer)
        entry = chain.append(ledger, "a", "activity.started", {}, signer=signer)
        assert entry.seq == 2
        assert [e.seq for e in ledger.entries("a")] == [1, 2]
