"""Reading a small input file whole, refused when it is larger than it may be.

Checkpoint notes, trust stores, witness policies, saved histories and trust anchors are
read into memory at once. A file over its limit is refused before more than the limit
plus one byte is read, never read in part (a cut file can still parse and mean something
else). Errors name ``what`` the file is: ``{what} {path}: {reason}``.
"""

from __future__ import annotations

import os

from .errors import HistauditError, InputError

__all__ = ["read_limited"]


def read_limited(path: str | os.PathLike[str], what: str, limit: int, *,
                 error: type[HistauditError] = InputError) -> bytes:
    """The bytes of ``path``; ``error`` when it cannot be read or holds more than
    ``limit`` bytes."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise error(f"{what} {path}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise error(f"{what} {path} is larger than {limit} bytes")
    return data
