"""SCITT statements and receipts signed by a key held in a transit key service (Vault's
dev server, scripts/install-vault.sh): the exporting key is the same Ed25519 key whatever
holds it, every COSE signature goes through ``Signer.sign_all`` in one batch, and
scitt-cose verifies them with the service's public key as PEM.

CPU ≈ 1.5 s: a Vault dev server, one small ledger, one export.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from histaudit.bundle.cose import pem
from histaudit.bundle.export import export
from histaudit.bundle.verify import verify_bundle
from histaudit.config import Settings
from histaudit.ledger.keys import KeyFileSigner, Signer, TrustStore
from histaudit.ledger.signers import load_signer
from histaudit.ledger.store import Ledger
from support.agent_ledger import sign_into, travel
from support.scitt import scitt_cose_verifies
from support.vault import Vault

pytestmark = [pytest.mark.vault]


def test_a_transit_key_signs_every_statement_and_receipt_in_one_batch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    writer = KeyFileSigner.generate()
    with Vault(tmp_path) as vault:
        vault.make_key("exporter")
        signer = load_signer(vault.key_url("exporter"), Settings())
        batches: list[int] = []
        real = type(signer).sign_all

        def counted(self: Signer, messages: list[bytes]) -> list[bytes]:
            batches.append(len(messages))
            return real(self, messages)

        monkeypatch.setattr(type(signer), "sign_all", counted)
        trust = TrustStore([writer.public, signer.public])
        with Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}", create=True) as ledger:
            sign_into(ledger, writer, "trip-1", travel())
            export(ledger, [], tmp_path / "bundle", signer=signer, trust=trust, scitt=True,
                   html=False)
    # 31 statements and 4 Capsules signed, the receipts of the one instance sharing one
    # signature: one batch of 36 (the checkpoint and the manifest sign apart)
    assert 36 in batches
    key_pem = pem(signer.public)
    for statement in (tmp_path / "bundle" / "scitt" / "entries").glob("*.cose"):
        assert scitt_cose_verifies(statement, key_pem) == (True, True), statement.name
    result = verify_bundle(tmp_path / "bundle", trust)
    assert result.ok, [f.message for f in result.findings]
