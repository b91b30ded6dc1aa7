"""Reading a small input file whole, refused when it is larger than it may be.

Checkpoint notes, trust stores, witness policies, saved histories and trust anchors are
read into memory at once. A file over its limit is refused before more than the limit
plus one byte is read, never read in part (a cut file can still parse and mean something
else). Only a regular file is read: a FIFO, a device, a socket or a directory is refused
before a byte is read (a FIFO with no writer would otherwise block for ever, a device
stream without end). Errors name ``what`` the file is: ``{what} {path}: {reason}``.
"""

from __future__ import annotations

import os
import stat

from .errors import HistauditError, InputError

__all__ = ["not_regular", "open_nonblocking", "read_limited", "read_up_to"]

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def not_regular(mode: int) -> str | None:
    """What a file of ``mode`` is when it is not a regular file ("a FIFO", …), else None."""
    if stat.S_ISREG(mode):
        return None
    return next((w for test, w in _KINDS if test(mode)), "not a regular file")


def open_nonblocking(path: str | os.PathLike[str], *, follow: bool = True) -> int:
    """A read-only descriptor of ``path``, opened without waiting: opening a FIFO that has
    no writer returns at once (the caller refuses it by :func:`not_regular`)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    return os.open(path, flags)


def read_up_to(fd: int, limit: int) -> bytes:
    """At most ``limit`` + 1 bytes of ``fd``: one more than allowed shows it is too large."""
    chunks, got = [], 0
    while got <= limit and (chunk := os.read(fd, min(1 << 20, limit + 1 - got))):
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_limited(path: str | os.PathLike[str], what: str, limit: int, *,
                 error: type[HistauditError] = InputError) -> bytes:
    """The bytes of regular file ``path``; ``error`` when it cannot be read, is not a
    regular file or holds more than ``limit`` bytes."""
    try:
        fd = open_nonblocking(path)
    except OSError as exc:
        raise error(f"{what} {path}: {exc.strerror or exc}") from None
    try:
        kind = not_regular(os.fstat(fd).st_mode)
        if kind is not None:
            raise error(f"{what} {path} is {kind}, not a regular file")
        data = read_up_to(fd, limit)
    except OSError as exc:
        raise error(f"{what} {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise error(f"{what} {path} is larger than {limit} bytes")
    return data
