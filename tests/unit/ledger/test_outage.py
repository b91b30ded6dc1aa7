"""Riding out a ledger that is away (ledger/store/outage.py) and the write's own check that
a try whose connection dropped did commit (ledger/writer.py ``_landed``): a real SQLite
ledger, failures raised by the calls themselves. The PostgreSQL restart these exist for is
tests/integration/test_ledger_outage.py. Cost: under 2 s."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from histaudit.config import Settings
from histaudit.errors import StoreError, StoreUnavailableError
from histaudit.ledger.chain import Item, append_many
from histaudit.ledger.keys import KeyFileSigner
from histaudit.ledger.store import Ledger
from histaudit.ledger.store.outage import Outage
from histaudit.ledger.writer import _landed

GONE = StoreUnavailableError("ledger x: terminating connection due to administrator command")


def _failing(times: int, result: str = "done") -> tuple[list[int], object]:
    calls: list[int] = []

    def fn() -> str:
        calls.append(1)
        if len(calls) <= times:
            raise GONE
        return result

    return calls, fn


def _answers(*replies: str | StoreUnavailableError | None
             ) -> tuple[list[int], Callable[[], str | None]]:
    """A ``landed`` that gives ``replies`` in turn (an error is raised), and its calls."""
    asked: list[int] = []

    def landed() -> str | None:
        reply = replies[len(asked)]
        asked.append(1)
        if isinstance(reply, StoreUnavailableError):
            raise reply
        return reply

    return asked, landed


def test_a_call_is_made_again_until_the_ledger_answers(caplog: pytest.LogCaptureFixture
                                                       ) -> None:
    calls, fn = _failing(2)
    with caplog.at_level(logging.WARNING, logger="histaudit"):
        assert Outage("ledger x", wait=10).call(fn) == "done"  # type: ignore[arg-type]
    assert len(calls) == 3
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines  # one when it went away, one when it came back
    assert "is unreachable" in lines[0] and "answers again" in lines[1]


def test_a_write_that_landed_is_not_made_again() -> None:
    calls, fn = _failing(1)
    got = Outage("ledger x", wait=10).call(fn, landed=lambda: "stored already")  # type: ignore[arg-type]
    assert got == "stored already" and len(calls) == 1


def test_a_write_is_not_made_again_before_landed_has_answered() -> None:
    """The server is still away when ``landed`` first asks, and back by the next moment:
    the write must not be made again on a guess, only once ``landed`` can say. (Seen in CI
    as a PostgreSQL restart that ended between the two: the batch that had committed was
    signed again and its payloads' keys collided.)"""
    calls, fn = _failing(1)
    asked, landed = _answers(GONE, "stored already")
    got = Outage("ledger x", wait=10).call(fn, landed=landed)  # type: ignore[arg-type]
    assert got == "stored already" and len(calls) == 1 and len(asked) == 2


def test_a_write_that_did_not_land_is_made_again_once_landed_says_so() -> None:
    calls, fn = _failing(2)
    asked, landed = _answers(None, GONE, None)
    got = Outage("ledger x", wait=10).call(fn, landed=landed)  # type: ignore[arg-type]
    # fn fails; landed: no; fn fails; landed: away; landed: no; fn works
    assert got == "done" and len(calls) == 3 and len(asked) == 3


def test_past_the_wait_the_call_fails_saying_how_long() -> None:
    calls, fn = _failing(1000)
    with pytest.raises(StoreUnavailableError, match=r"unreachable for 0\.\d s"):
        Outage("ledger x", wait=0.3).call(fn)  # type: ignore[arg-type]
    assert 2 <= len(calls) <= 5


def test_another_error_is_not_waited_for() -> None:
    def fn() -> None:
        raise StoreError("append failed: UNIQUE constraint failed")

    with pytest.raises(StoreError, match="UNIQUE"):
        Outage("ledger x", wait=10).call(fn)


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "3601", "soon"])
def test_a_bad_wait_in_the_environment_is_an_error(value: str) -> None:
    settings = Settings.from_env({"HISTAUDIT_STORE_OUTAGE_WAIT": value})
    with pytest.raises(StoreError, match="HISTAUDIT_STORE_OUTAGE_WAIT"):
        _ = settings.store_outage_wait


def test_landed_tells_a_committed_batch_from_one_that_was_not(tmp_path: Path) -> None:
    signer = KeyFileSigner.generate()
    items = [Item("wf-a", "step.done", {"i": 1}, None), Item("wf-b", "step.done", {"i": 2},
                                                                None),
             Item("wf-a", "step.done", {"i": 3}, None)]
    with Ledger.open(f"sqlite:///{tmp_path / 'l.db'}", create=True) as ledger:
        assert _landed(ledger, items) is None  # nothing stored yet
        stored = append_many(ledger, items, signer=signer)
        found = _landed(ledger, items)
        assert found is not None
        assert [(e.instance, e.seq, e.body) for e in found] == \
            [(e.instance, e.seq, e.body) for e in stored]
        # a batch that differs in one value, or in its last instance's count, did not land
        assert _landed(ledger, [*items[:2], Item("wf-a", "step.done", {"i": 4}, None)]) is None
        assert _landed(ledger, [*items, Item("wf-a", "step.done", {"i": 3}, None)]) is None
