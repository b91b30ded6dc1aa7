"""histaudit.verification: `histaudit verify` as a library call. Cost: under 2 s."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest

from histaudit.errors import UsageError
from histaudit.ledger import chain
from histaudit.ledger.keys import KeyFileSigner, Signer, TrustStore
from histaudit.ledger.store import Ledger
from histaudit.verification import KeptCheckpoint, Verifier
from histaudit.verify.findings import Severity
from histaudit.witness.policy import WitnessPolicy


def _ledger(tmp_path: Path, signer: Signer) -> Ledger:
    ledger = Ledger.open(f"sqlite:///{tmp_path / 'l.db'}", create=True)
    for i in range(3):
        for instance in ("wf-a", "wf-b"):
            chain.append(ledger, instance, "step.done", {"i": i}, signer=signer)
    return ledger


def test_a_verifier_checks_an_instance_every_instance_and_growth_since_a_checkpoint(
        tmp_path: Path) -> None:
    signer = KeyFileSigner.generate()
    trust = TrustStore([signer.public])
    with _ledger(tmp_path, signer) as ledger:
        kept = KeptCheckpoint.read(chain.make_checkpoint(ledger, signer).note, trust,
                                   source="cp.note")
        chain.append(ledger, "wf-a", "step.done", {"i": 3}, signer=signer)
        verifier = Verifier(ledger, trust, full=True, since=kept)
        one = verifier.instance("wf-a")
        assert [r.instance_id for r in one.reports] == ["wf-a"]
        assert one.reports[0].entries == 4 and one.passes()
        assert one.consistency is not None and one.consistency.ok
        every = verifier.all()
        assert {r.instance_id for r in every.reports} >= {"wf-a", "wf-b"} and every.passes()
        only = verifier.checkpoint()
        assert only.reports == () and only.every == (only.consistency,)
        # a key the trust store lacks: the chains fail, the verdict says so
        stranger = Verifier(ledger, TrustStore([KeyFileSigner.generate().public])).instance("wf-b")
        assert not stranger.passes()
        assert "key-untrusted" in {f.code for f in stranger.reports[0].findings}
        assert not stranger.passes(Severity.WARNING)


def test_a_verifier_refuses_what_cannot_be_asked(tmp_path: Path) -> None:
    signer = KeyFileSigner.generate()
    trust = TrustStore([signer.public])
    with _ledger(tmp_path, signer) as ledger:
        with pytest.raises(ValueError, match="kept checkpoint"):
            Verifier(ledger, trust).checkpoint()
        with pytest.raises(ValueError, match="witness policy judges a kept checkpoint"):
            Verifier(ledger, trust, witnesses=WitnessPolicy.parse("quorum none\n"))


def test_the_package_names_its_api_and_loads_each_part_only_when_asked() -> None:
    """``import histaudit`` loads neither the Dapr SDK nor the store; each name of
    ``__all__`` resolves (a fresh interpreter: this one has imported both already)."""
    import subprocess
    import sys

    code = ("import sys, histaudit\n"
            "light = not any(m in sys.modules for m in ('sqlalchemy', 'dapr', 'grpc'))\n"
            "missing = [n for n in histaudit.__all__ if getattr(histaudit, n, None) is None]\n"
            "print(light, missing)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    assert out.strip() == "True []", out


@pytest.mark.parametrize("threshold", [Severity.ERROR + 1, 99, 30, 0, -1, True, None, 2.5,
                                       "fatal", "", "err"])
def test_passes_refuses_a_threshold_that_is_no_severity(tmp_path: Path,
                                                        threshold: object) -> None:
    """Issue #50 item 8: ``passes(fail_on=Severity.ERROR + 1)`` (an int above every
    severity) or ``99`` said True of a ledger with error findings; only a Severity, or
    one of its names, is a threshold."""
    signer = KeyFileSigner.generate()
    with _ledger(tmp_path, signer) as ledger:
        verdict = Verifier(ledger, TrustStore([KeyFileSigner.generate().public])).all()
    assert not verdict.passes()
    with pytest.raises(UsageError, match="fail_on"):
        verdict.passes(fail_on=threshold)  # type: ignore[arg-type]
    for name in ("error", "WARNING", "info"):
        assert not verdict.passes(fail_on=name)  # type: ignore[arg-type]


def test_one_verifier_verifies_a_bundle_with_the_same_rules(tmp_path: Path) -> None:
    """Issue #51: a bundle is one more input of the Verifier (the CLI only renders it):
    clean, its reports pass and are ok; a changed file fails it; a witness policy judges
    the bundle's own checkpoint, so it needs no kept one; and a Verifier without a
    ledger refuses the ledger's inputs in one line."""
    from histaudit.bundle.export import export

    signer = KeyFileSigner.generate()
    trust = TrustStore([signer.public])
    with _ledger(tmp_path, signer) as ledger:
        export(ledger, [], tmp_path / "bundle", signer=signer, trust=trust, html=False)
    verifier = Verifier(None, trust)
    clean = verifier.bundle(tmp_path / "bundle")
    assert clean.ok() and clean.passes() and clean.checkpoint is not None
    assert sorted(r.instance_id for r in clean.reports) == ["(bundle)", "wf-a", "wf-b"]
    witness = KeyFileSigner.generate().public.raw
    blob = b"\x04" + witness
    key_hash = hashlib.sha256(b"w1\n" + blob).digest()[:4].hex()
    vkey = f"w1+{key_hash}+{base64.b64encode(blob).decode()}"  # C2SP cosignature/v1
    quorum = Verifier(None, trust, witnesses=WitnessPolicy.parse(
        f"witness w1 {vkey} https://w1.example\nquorum w1\n"))
    short = quorum.bundle(tmp_path / "bundle")  # nobody cosigned it
    assert not short.ok() and short.reports[-1].mode == "witness policy"
    with (tmp_path / "bundle" / "keys.json").open("ab") as fh:
        fh.write(b" ")
    changed = verifier.bundle(tmp_path / "bundle")
    assert not changed.ok() and "bundle-file-changed" in {
        f.code for r in changed.reports for f in r.findings}
    with pytest.raises(UsageError, match="given no ledger"):
        verifier.all()


def test_a_policy_holds_trust_witnesses_and_the_failing_severity(tmp_path: Path) -> None:
    """Issue #51: one Policy value decides; ``but`` composes a stricter one from a base,
    and a Verifier built from it takes its trust (an untrusted key fails the chain)."""
    from histaudit.verification import Policy

    signer = KeyFileSigner.generate()
    base = Policy(TrustStore([signer.public]))
    strict = base.but(fail_on="warning")
    assert base.fail_on is Severity.ERROR and strict.fail_on is Severity.WARNING
    assert strict.trust is base.trust
    with pytest.raises(UsageError, match="fail_on"):
        base.but(fail_on=99)
    with _ledger(tmp_path, signer) as ledger:
        verdict = Verifier(ledger, base).all()
        stranger = Verifier(ledger, base.but(trust=TrustStore([KeyFileSigner.generate().public])))
        untrusted = stranger.all()
        with pytest.raises(ValueError, match="in the Policy"):
            Verifier(ledger, base, witnesses=WitnessPolicy.parse("quorum none\n"))
    assert base.passes(verdict) and base.accepts(verdict) and strict.accepts(verdict)
    assert not base.passes(untrusted) and not base.accepts(untrusted)
