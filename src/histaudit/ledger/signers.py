"""Which signer a ``--key`` / ``$HISTAUDIT_KEY`` names: a key file, a key in a PKCS#11
token (:mod:`.pkcs11`), or a key in a transit key service (:mod:`.transit`). The one
place that chooses, by the text's form."""

from __future__ import annotations

import os

from histaudit.config import Settings
from histaudit.errors import KeyMaterialError

from .keys import Signer
from .pkcs11 import Pkcs11Signer, is_pkcs11_uri
from .transit import TransitSigner, is_transit_url

__all__ = ["load_signer"]


def load_signer(key: str | os.PathLike[str] | None,
                settings: Settings | None = None) -> Signer:
    """The signer ``key`` names; a clear error if it names none. A ``pkcs11:`` URI names
    a key held in a PKCS#11 token (:mod:`.pkcs11`), a ``transit+https://`` URL one held by
    a Vault or OpenBao transit engine (:mod:`.transit`); anything else is a key file's
    path. ``settings`` (histaudit.config) gives the PIN, module and token such a key's
    name may leave out; the edges pass ``$HISTAUDIT_KEY`` as ``key``."""
    if not key:
        raise KeyMaterialError("no signing key: pass --key PATH or set HISTAUDIT_KEY")
    settings = settings or Settings()
    text = os.fspath(key)
    if is_pkcs11_uri(text):
        return Pkcs11Signer(text, pin=settings.pkcs11_pin, module=settings.pkcs11_module)
    if is_transit_url(text):
        return TransitSigner(text, token=settings.vault_token)
    return Signer.load(key)
