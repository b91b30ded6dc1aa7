"""One error tree for histaudit.

Every error the library raises derives from :class:`HistauditError`. The CLI's one error
boundary (:func:`histaudit.cli.main`) turns any of them into one line on stderr: exit
status 1 for a :class:`VerificationError` (a check ran and failed), 2 for every other
(the input could not be read or used); they never escape as tracebacks. Parsers raise
these errors themselves, so no caller has to re-wrap a ``ValueError``.
"""

from __future__ import annotations


class HistauditError(Exception):
    """Root of every histaudit error."""


class UsageError(HistauditError):
    """The caller asked for something that cannot be done (bad flag, bad combination)."""


class InputError(HistauditError):
    """Input data is missing, unreadable or malformed (database, bundle, history, JSON)."""


class FormatError(InputError):
    """An entry, head or bundle does not follow docs/format.md (or has an unknown version)."""


class KeyMaterialError(HistauditError):
    """A key is missing, unreadable, malformed, or unsafe (a private key others can read)."""


class StoreError(HistauditError):
    """The ledger database cannot be opened, is not a histaudit ledger, or refused a write."""


class StoreUnavailableError(StoreError):
    """The ledger's database server could not be reached, or dropped the connection in the
    middle of a transaction (a restart, a failover): a write may or may not have committed,
    and the same call may succeed once the server is back."""


class EngineError(HistauditError):
    """The Dapr workflow engine could not be found, started or reached."""


class SdkError(HistauditError):
    """The Dapr workflow SDK is not installed, or installed in a layout histaudit cannot
    use (``histaudit.sdk`` says which and how to fix it)."""


class VerificationError(HistauditError):
    """Raised by the raising variants of verification when the report is not clean."""

    def __init__(self, message: str, report: object | None = None) -> None:
        super().__init__(message)
        self.report = report


class SignatureError(VerificationError):
    """A signed document that reads (a bundle manifest, a checkpoint note) carries no valid
    signature by a trusted key: a wrong trust store, or the document was altered. Nothing
    in it can be attributed, so verification stops; but the check failed, so it is a
    verification failure (exit 1), not unreadable input (exit 2)."""
