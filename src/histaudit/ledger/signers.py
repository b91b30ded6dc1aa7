"""Which signer a ``--key`` / ``$HISTAUDIT_KEY`` names: a key file, a key in a PKCS#11
token (:mod:`.pkcs11`), or a key in a transit key service (:mod:`.transit`). The one
place that chooses, by the text's form."""

from __future__ import annotations

import os

from histaudit.errors import KeyMaterialError

from .keys import Signer
from .pkcs11 import Pkcs11Signer, is_pkcs11_uri
from .transit import TransitSigner, is_transit_url

__all__ = ["signer_from_env"]


def signer_from_env(path: str | os.PathLike[str] | None = None) -> Signer:
    """The signing key from ``path``, else ``$HISTAUDIT_KEY``; a clear error if neither.
    A ``pkcs11:`` URI names a key held in a PKCS#11 token (:mod:`.pkcs11`), a
    ``transit+https://`` URL one held by a Vault or OpenBao transit engine
    (:mod:`.transit`); anything else is a key file's path."""
    chosen = path or os.environ.get("HISTAUDIT_KEY")
    if not chosen:
        raise KeyMaterialError("no signing key: pass --key PATH or set HISTAUDIT_KEY")
    text = os.fspath(chosen)
    if is_pkcs11_uri(text):
        return Pkcs11Signer(text)
    if is_transit_url(text):
        return TransitSigner(text)
    return Signer.load(chosen)
