"""Figure 8: appends/s with the signing key in a PKCS#11 token (SoftHSM2) and in a remote
key service (Vault's transit engine) against the same appends with a key file, in the
same run (issue #42, item 1).

Each round, in one process and one directory, alternates slices of six measurements
(rotating order, as figure 1 does, so every signer samples the same disk drift):

* ``<signer>_one``: ``chain.append``, one at a time, durable, round-robin over 8
  instances, signed by the key file's key (libsodium), inside the token (CKM_EDDSA), or by
  Vault over HTTP on loopback (one kept-alive connection; each answer verified here);
* ``<signer>_group``: ``GroupWriter`` from 8 threads at once, each its own instance,
  durable: the interceptor's path, where concurrent appends share a commit.

Ratios per round: token or service ÷ key file, one at a time and grouped.
``*_signatures_per_entry`` counts each signer's signatures over its grouped appends: an
entry is signed once and a batch signs one head per instance it touched (here every
thread has its own instance, so 2 per entry), the same for every signer: none adds one.
``*_requests_per_entry`` counts the calls that asked for them: a batch asks once
(``Signer.sign_all``), which the transit signer sends as one request.

Needs SoftHSM2 (``make softhsm``), python-pkcs11 (the ``hsm`` extra) and Vault
(``make vault``). The token lives in the run's work directory (its own SOFTHSM2_CONF),
with a key pair generated inside it; Vault runs as a dev server with its transit engine.
"""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path
from typing import Any

from bench_common import Series, Timing, log, measure

from histaudit.ledger import chain
from histaudit.ledger.keys import KeyFileSigner, Signer
from histaudit.ledger.store import Ledger
from histaudit.ledger.writer import GroupWriter

MODULE = os.environ.get("SOFTHSM2_MODULE", "/usr/lib/softhsm/libsofthsm2.so")
_PIN = "bench-pin"
_THREADS = 8
_SLICES = 5


class _Counting:
    """A signer that counts its signatures (``calls``) and the calls that asked for them
    (``requests``: a batch of appends asks once, ``sign_all``), signing with ``inner``."""

    def __init__(self, inner: Signer) -> None:
        self.inner, self.calls, self.requests = inner, 0, 0
        self.kid, self.public = inner.kid, inner.public

    def sign(self, message: bytes) -> bytes:
        self.calls += 1
        self.requests += 1
        return self.inner.sign(message)

    def sign_all(self, messages: list[bytes]) -> list[bytes]:
        self.calls += len(messages)
        self.requests += 1
        return self.inner.sign_all(messages)


def _token(workdir: Path) -> str:
    """A SoftHSM2 token in ``workdir`` with an Ed25519 key pair made inside it; its URI."""
    tokens = workdir / "tokens"
    tokens.mkdir(parents=True, exist_ok=True)
    conf = workdir / "softhsm2.conf"
    conf.write_text(f"directories.tokendir = {tokens}\nobjectstore.backend = file\n"
                    f"log.level = ERROR\n")
    os.environ["SOFTHSM2_CONF"] = str(conf)  # read once, when this process loads the module
    subprocess.run(["softhsm2-util", "--init-token", "--free", "--label", "bench", "--pin",
                    _PIN, "--so-pin", "so-" + _PIN], check=True, capture_output=True)
    import pkcs11
    from pkcs11 import Attribute, KeyType
    from pkcs11.util.ec import encode_named_curve_parameters

    with pkcs11.lib(MODULE).get_token(token_label="bench").open(user_pin=_PIN,
                                                                 rw=True) as session:
        session.create_domain_parameters(
            KeyType.EC_EDWARDS,
            {Attribute.EC_PARAMS: encode_named_curve_parameters("1.3.101.112")},
            local=True).generate_keypair(store=True, label="ledger")
    pin = workdir / "pin"
    pin.write_text(_PIN)
    pin.chmod(0o600)
    return f"pkcs11:token=bench;object=ledger?module-path={MODULE}&pin-source=file:{pin}"


def _one(ledger: Ledger, signer: Any, n: int, tag: str) -> int:
    for i in range(n):
        chain.append(ledger, f"{tag}-{i % 8}", "activity.completed", {"i": i, "out": "x" * 64},
                     signer=signer)
    return n


def _group(ledger: Ledger, signer: Any, n: int, tag: str) -> int:
    writer = GroupWriter(ledger, signer)

    def work(t: int) -> None:
        for i in range(n // _THREADS):
            writer.append(f"{tag}-g{t}", "activity.completed", {"i": i, "out": "x" * 64})

    threads = [threading.Thread(target=work, args=(t,)) for t in range(_THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return (n // _THREADS) * _THREADS


def run(workdir: Path, *, rounds: int, n: int) -> dict[str, Any]:
    from histaudit.ledger.pkcs11 import Pkcs11Signer
    from histaudit.ledger.transit import TransitSigner
    from support.vault import Vault

    with Vault(workdir) as vault:
        vault.make_key("ledger")
        signers = {"file": _Counting(KeyFileSigner.generate()),
                   "hsm": _Counting(Pkcs11Signer(_token(workdir))),
                   "transit": _Counting(TransitSigner(vault.key_url("ledger")))}
        return _rounds(workdir, signers, rounds=rounds, n=n)


def _rounds(workdir: Path, signers: dict[str, _Counting], *, rounds: int,
            n: int) -> dict[str, Any]:
    names = [f"{s}_{how}" for s in signers for how in ("one", "group")]
    others = [s for s in signers if s != "file"]
    series = {k: Series() for k in names}
    for s in others:
        for k in (f"{s}_one_ratio", f"{s}_group_ratio", f"{s}_signatures_per_entry"):
            series[k] = Series()
    series["file_signatures_per_entry"] = Series()
    per = max(_THREADS, n // _SLICES)
    for r in range(rounds):
        with Ledger.open(f"sqlite:///{workdir / f'signers-{r}.db'}", create=True) as ledger:
            done: dict[str, list[Timing]] = {k: [] for k in names}
            calls, requests = dict.fromkeys(signers, 0), dict.fromkeys(signers, 0)
            order = [(f"{s}_{how}", s, fn) for s in signers
                     for how, fn in (("one", _one), ("group", _group))]
            for sl in range(_SLICES):
                turn = order[sl % len(order):] + order[:sl % len(order)]
                for name, who, fn in turn:
                    signer, tag = signers[who], f"{name}-{r}-{sl}"
                    before, asked = signer.calls, signer.requests
                    t = measure(lambda fn=fn, signer=signer, tag=tag: fn(ledger, signer, per,
                                                                         tag))
                    done[name].append(t)
                    if name.endswith("_group"):
                        calls[who] += signer.calls - before
                        requests[who] += signer.requests - asked
            rate = {k: sum(t.ops for t in v) / sum(t.wall for t in v) for k, v in done.items()}
        for k, v in rate.items():
            series[k].add(v)
        signed = {s: calls[s] / sum(t.ops for t in done[f"{s}_group"]) for s in signers}
        asked = {s: requests[s] / sum(t.ops for t in done[f"{s}_group"]) for s in signers}
        for s in signers:
            series.setdefault(f"{s}_requests_per_entry", Series()).add(asked[s])
        series["file_signatures_per_entry"].add(signed["file"])
        for s in others:
            series[f"{s}_one_ratio"].add(rate[f"{s}_one"] / rate["file_one"])
            series[f"{s}_group_ratio"].add(rate[f"{s}_group"] / rate["file_group"])
            series[f"{s}_signatures_per_entry"].add(signed[s])
        log(f"  round {r + 1}/{rounds}: appends/s one at a time / grouped: " + "; ".join(
            f"{s} {rate[f'{s}_one']:.0f} / {rate[f'{s}_group']:.0f} "
            f"({signed[s]:.3f} sig, {asked[s]:.3f} requests/entry)" for s in signers))
    return {"params": {"rounds": rounds, "appends_per_measure": per * _SLICES,
                       "threads": _THREADS, "module": MODULE},
            "series": {k: v.to_json() for k, v in series.items()}}
