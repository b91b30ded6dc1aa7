"""The one URL printer: no secret of a URL reaches any output (issue #40, item 4).
Cost: under 1 s of CPU (one connection refused on 127.0.0.1)."""

from __future__ import annotations

import pytest

from histaudit.bundle.dapr_state import read_workflow_rows
from histaudit.errors import InputError
from histaudit.ledger.store import Ledger
from histaudit.urls import shown_url, without_secrets

SECRET = "Pg5ecret"


@pytest.mark.parametrize(("url", "shown"), [
    (f"postgresql://u:{SECRET}@db:5432/l", "postgresql://u:***@db:5432/l"),
    (f"http://w:{SECRET}@w.example/", "http://w:***@w.example/"),
    (f"postgresql://db/l?user=u&password={SECRET}&sslmode=require",
     "postgresql://db/l?user=u&password=***&sslmode=require"),
    (f"https://w.example/?token={SECRET}", "https://w.example/?token=***"),
    (f"postgres://u:{SECRET}@[zz/db", "postgres://***@[zz/db"),  # unparseable: all userinfo
    ("sqlite:///ledger.db", "sqlite:///ledger.db"),
    ("postgresql://u@db/l", "postgresql://u@db/l"),
])
def test_shown_url_masks_every_secret(url: str, shown: str) -> None:
    assert shown_url(url) == shown


def test_without_secrets_scrubs_a_driver_message() -> None:
    url = f"postgresql://u:{SECRET}@db/l"
    said = f'invalid dsn "{url}": bad option near {SECRET}'
    assert SECRET not in without_secrets(said, url)
    assert "postgresql://u:***@db/l" in without_secrets(said, url)


@pytest.mark.parametrize("url", [f"postgres://u:{SECRET}@127.0.0.1:1/db",
                                 f"postgres://u:{SECRET}@[zz/db"])
def test_the_state_store_and_the_ledger_never_print_a_password(url: str) -> None:
    """dapr-verify and export --dapr-state printed psycopg's message, URL included."""
    with pytest.raises(InputError) as raised:
        read_workflow_rows(url, "wf-1")
    assert SECRET not in str(raised.value) and "***" in str(raised.value)
    with pytest.raises(Exception) as opened:  # noqa: PT011 - any error: its text matters
        Ledger.open(url.replace("postgres://", "postgresql://"))
    assert SECRET not in str(opened.value)
