"""Fixtures of the bad-input tests (``test_bad_*.py``); their helpers are in
``support/bad_input.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from histaudit.ledger import chain
from histaudit.ledger.store import Ledger
from support.bad_input import Ctx, keys_for
from support.ledgers import append_order


@pytest.fixture
def ledger_ctx(db_url: str, tmp_path: Path) -> Ctx:
    """A good ledger on SQLite or PostgreSQL."""
    key, trust, signer = keys_for(tmp_path)
    with Ledger.open(db_url, create=True) as ledger:
        append_order(ledger, signer, "order-1")
    return Ctx(tmp=tmp_path, url=db_url, key=key, trust=trust, files=tmp_path)


@pytest.fixture(scope="module")
def big_ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real multi-page SQLite ledger (5 instances, 300 entries) to cut and corrupt."""
    root = tmp_path_factory.mktemp("big")
    _, _, signer = keys_for(root)
    path = root / "ledger.db"
    with Ledger.open(f"sqlite:///{path}", create=True) as ledger:
        for i in range(60):
            for n in range(5):
                chain.append(ledger, f"order-{n}", "activity.started",
                              {"task_id": i, "activity": "charge" * 30}, signer=signer)
    return path
