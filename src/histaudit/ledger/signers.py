"""Which signer a ``--key`` / ``$HISTAUDIT_KEY`` names: the registry of signers.

A key's name is a file path (:class:`~histaudit.ledger.keys.KeyFileSigner`) unless it
starts with a scheme in :data:`SIGNERS`: ``pkcs11:`` names a key in a PKCS#11 token
(:mod:`.pkcs11`), ``transit+https://`` one in a Vault or OpenBao transit engine
(:mod:`.transit`). Each implements :class:`~histaudit.ledger.keys.Signer` and builds itself
from the name and the settings with ``from_name``; its module is imported only when a key
names it. A new way to hold a key is one module, one entry here and one more case of
tests/integration/test_signer_contract.py.
"""

from __future__ import annotations

import importlib
import os

from histaudit.config import Settings
from histaudit.errors import KeyMaterialError

from .keys import KeyFileSigner, Signer

__all__ = ["SIGNERS", "load_signer"]

SIGNERS: dict[str, str] = {
    "pkcs11": "histaudit.ledger.pkcs11:Pkcs11Signer",
    "transit+https": "histaudit.ledger.transit:TransitSigner",
    "transit+http": "histaudit.ledger.transit:TransitSigner",  # to a loopback address only
}
"""Each key-name scheme and the ``module:class`` of its signer, which has a
``from_name(name, settings)`` classmethod."""


def load_signer(key: str | os.PathLike[str] | None,
                settings: Settings | None = None) -> Signer:
    """The signer ``key`` names; a clear error if it names none. ``settings``
    (histaudit.config) gives what a key's name may leave out (a PKCS#11 PIN and module, a
    service's token); the edges pass ``$HISTAUDIT_KEY`` as ``key``."""
    if not key:
        raise KeyMaterialError("no signing key: pass --key PATH or set HISTAUDIT_KEY")
    text = os.fspath(key)
    scheme, colon, _ = text.partition(":")
    where = SIGNERS.get(scheme) if colon else None
    if where is None:
        return KeyFileSigner.load(text)
    module, _, name = where.partition(":")
    signer: Signer = getattr(importlib.import_module(module), name).from_name(
        text, settings or Settings())
    return signer
