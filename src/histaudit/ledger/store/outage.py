"""Riding out a ledger database that goes away for a moment (a PostgreSQL restart or
failover), so that an audited workflow does not fail for it.

A call that fails with :class:`~histaudit.errors.StoreUnavailableError` (the server could
not be reached, or dropped the connection mid-transaction) is made again, with a growing
pause, until :attr:`Outage.wait` seconds have passed since the failure; then it fails with
the same error, saying how long the ledger was unreachable.
Reads are simply asked again. A write whose connection dropped may have committed all
the same (the server can go away after the COMMIT but before its answer), so before each
new try the write's own ``landed()`` looks whether it is already stored, and only a write
that is not is made again: every record is stored once. While ``landed()`` cannot answer
(the server still away) it is asked again, never passed over.

One line is logged when an outage begins and one when it ends, however many calls wait
through it. ``$HISTAUDIT_STORE_OUTAGE_WAIT`` sets the wait (seconds, 0 to 3600; default
:data:`DEFAULT_OUTAGE_WAIT_SECONDS`; 0 fails at once, as before this existed).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from histaudit.config import DEFAULT_OUTAGE_WAIT_SECONDS, OUTAGE_WAIT_ENV
from histaudit.errors import StoreUnavailableError

__all__ = ["DEFAULT_OUTAGE_WAIT_SECONDS", "OUTAGE_WAIT_ENV", "Outage"]

T = TypeVar("T")

# The default wait, DEFAULT_OUTAGE_WAIT_SECONDS (histaudit.config): long enough for a
# PostgreSQL restart or a managed failover (typically under 30 s), short enough that an
# activity waiting on the ledger fails before the engine's own timeouts would.
_FIRST_PAUSE_S = 0.1
_LONGEST_PAUSE_S = 2.0

_log = logging.getLogger("histaudit")


class Outage:
    """The outage state of one ledger: shared by every thread that uses it."""

    def __init__(self, shown_url: str, wait: float) -> None:
        self.wait = wait
        self._shown = shown_url
        self._lock = threading.Lock()
        self._since: float | None = None
        """When the current outage was first seen (None: the ledger is answering)."""

    def call(self, fn: Callable[[], T], *, landed: Callable[[], T | None] | None = None) -> T:
        """``fn()``, made again while the ledger is unavailable (module docstring);
        ``landed()``, for a write, returns its result when the failed try did commit
        (None when it did not), and is asked before every new try."""
        began: float | None = None
        pause = _FIRST_PAUSE_S
        unsure = False  # a try of the write failed and landed() has not said how it ended
        while True:
            try:
                if unsure and landed is not None:
                    done = landed()
                    unsure = False
                    if done is not None:
                        self._ended()
                        return done
                result = fn()
            except StoreUnavailableError as exc:
                # fn failed, or landed could not answer: either way it is landed's turn
                # next, never fn's on a guess (a server back between the two would store
                # the write twice)
                unsure = True
                now = time.monotonic()
                began = now if began is None else began
                self._begun(exc, now)
                if now - began >= self.wait:
                    raise StoreUnavailableError(
                        f"{exc} (the ledger was unreachable for {now - began:.1f} s; "
                        f"{OUTAGE_WAIT_ENV}={self.wait:g})") from None
                time.sleep(min(pause, max(0.0, began + self.wait - now)))
                pause = min(pause * 2, _LONGEST_PAUSE_S)
                continue
            if began is not None:
                self._ended()
            return result

    def _begun(self, exc: StoreUnavailableError, now: float) -> None:
        with self._lock:
            if self._since is not None:
                return
            self._since = now
        _log.warning("histaudit: ledger %s is unreachable (%s); waiting up to %gs for it "
                     "(%s)", self._shown, exc, self.wait, OUTAGE_WAIT_ENV)

    def _ended(self) -> None:
        with self._lock:
            since, self._since = self._since, None
        if since is not None:
            _log.warning("histaudit: ledger %s answers again after %.1fs", self._shown,
                         time.monotonic() - since)
