"""Export and offline verification report how far they are through ``progress(done,
total)``, ending at done == total; without a callback nothing changes."""

from __future__ import annotations

from pathlib import Path

from histaudit.bundle.export import export
from histaudit.bundle.verify import verify_bundle
from histaudit.ledger.store import Ledger
from histaudit.verify.progress import Tally
from support.bundles import build_bundle


def test_tally_hands_back_the_iterable_when_nobody_listens() -> None:
    items = [1, 2, 3]
    assert Tally(None).count(items) is items


def test_tally_tells_every_few_hundred_and_when_asked() -> None:
    told: list[tuple[int, int | None]] = []
    tally = Tally(lambda done, total: told.append((done, total)), 1000)
    assert sum(tally.count(range(1000))) == sum(range(1000))
    assert told == [(256, 1000), (512, 1000), (768, 1000)]
    tally.tell()
    assert told[-1] == (1000, 1000)
    tally.add(5)
    assert told[-1] == (1005, 1000)


def test_export_and_verify_bundle_end_at_their_totals(tmp_path: Path) -> None:
    built = build_bundle(tmp_path)
    told: list[tuple[int, int | None]] = []
    with Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}") as ledger:
        export(ledger, [], tmp_path / "again", signer=built.signer, trust=built.trust,
               progress=lambda done, total: told.append((done, total)))
    assert told[0][0] == 0 and told[-1][0] == told[-1][1] and told[-1][0] > 0

    told.clear()
    result = verify_bundle(built.bundle, built.trust,
                           progress=lambda done, total: told.append((done, total)))
    assert result.ok
    assert told[-1] == (2 * sum(r.entries for r in result.reports),) * 2
