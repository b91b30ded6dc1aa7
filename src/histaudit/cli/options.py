"""What the commands share: exit codes, the common options, reading small files."""

from __future__ import annotations

import contextlib
import math
import os
from typing import Any

import click

from histaudit.config import Settings
from histaudit.errors import FormatError, InputError, UsageError
from histaudit.inputs import read_limited
from histaudit.ledger.keys import TrustStore, parse_time

EXIT_CLEAN, EXIT_FINDINGS, EXIT_BAD_INPUT = 0, 1, 2

db_option = click.option("--db", "db", metavar="URL", envvar="HISTAUDIT_DB",
                         help="Ledger URL (default $HISTAUDIT_DB or sqlite:///histaudit.db).")
trust_option = click.option("--trust", metavar="PATH", envvar="HISTAUDIT_TRUST",
                            help="Trust store: directory of *.pub.json or one JSON file "
                                 "(default $HISTAUDIT_TRUST).")
# The value is a path; key text given instead is refused unshown (Signer.load).
key_option = click.option("--key", metavar="PATH", envvar="HISTAUDIT_KEY",
                          help="Path of the private signing key file, or the pkcs11: URI of "
                               "a key in a PKCS#11 token (default $HISTAUDIT_KEY; a path or "
                               "URI, never the key itself).")


def run_settings() -> Settings:
    """This run's one snapshot of the ``HISTAUDIT_*`` environment (histaudit.config),
    taken the first time a command asks and kept on the root click context, so every
    part of one command reads the same values."""
    root = click.get_current_context().find_root()
    if not isinstance(root.obj, Settings):
        root.obj = Settings.from_env()
    return root.obj


def trust_store(path: str | None) -> TrustStore:
    if not path:
        raise UsageError("no trust store: pass --trust PATH or set HISTAUDIT_TRUST")
    return TrustStore.load(path)


def read_file(path: str, what: str, limit: int = 1 << 20) -> bytes:
    """A small input file (a checkpoint note), refused when larger than ``limit``."""
    return read_limited(path, what, limit)


def write_file(path: str, data: bytes) -> None:
    try:
        with open(path, "wb") as fh:
            fh.write(data)
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror}") from None


def check_writable(path: str) -> None:
    """Refuse an output file that :func:`write_file` could not write, before a long run
    that ends by writing it: opened for appending (nothing it holds changes), and removed
    again when this made it."""
    existed = os.path.lexists(path)
    try:
        with open(path, "ab"):
            pass
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror}") from None
    if not existed:
        with contextlib.suppress(OSError):
            os.unlink(path)


class Seconds(click.FloatRange):
    """A duration in seconds within ``[low, high]``: click's FloatRange, which lets
    ``nan`` through (no comparison with it is true), refusing every value that is not a
    finite number."""

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        return number


class Timestamp(click.ParamType):  # type: ignore[type-arg]  # generic in click>=8.2 only
    """An RFC 3339 UTC timestamp option, checked while parsing (the text is kept)."""

    name = "RFC3339"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> str:
        try:
            parse_time(value)
        except FormatError as exc:
            self.fail(str(exc), param, ctx)
        return str(value)


TIMESTAMP = Timestamp()
