"""Settings from the environment: read at the edges, passed down.

The edges — the CLI, :meth:`AuditedWorkflowRuntime.__init__`/``start()``, the pytest
plugin — take one snapshot of the environment (:meth:`Settings.from_env`) and hand what
each part needs to it as arguments; nothing below them reads ``os.environ``. Each setting
is parsed when first asked for, so a malformed variable fails only the command that uses
it, with one line naming the variable. ``Settings()`` is the defaults (no variable set).

=====================================  ==================================================
``HISTAUDIT_DB``                       the ledger URL (default ``sqlite:///histaudit.db``)
``HISTAUDIT_KEY``                      the signing key: a file's path, a ``pkcs11:`` URI
                                       or a ``transit+https://`` URL
``HISTAUDIT_TRUST``                    the trust store (CLI)
``HISTAUDIT_ENABLED``                  ``0``/``false``/``no``/``off`` runs an app unaudited
``HISTAUDIT_MAX_PAYLOAD_BYTES``        the largest activity output signed as a completion
``HISTAUDIT_LOCK_WAIT``                seconds a writing command waits for the write lock
``HISTAUDIT_STORE_OUTAGE_WAIT``        seconds a PostgreSQL outage is ridden out
``HISTAUDIT_PKCS11_MODULE``, ``_PIN``  a PKCS#11 key's module and PIN, when its URI
                                       names none
``VAULT_TOKEN``                        a transit key's token, when its URL names no file
``OTEL_SEMCONV_STABILITY_OPT_IN``      OpenTelemetry's comma-separated opt-in list, shared
                                       with every instrumentation: with
                                       ``gen_ai_latest_experimental`` in it, spans follow
                                       the current GenAI conventions (docs/traces.md)
=====================================  ==================================================

The crash harness's own variables (``HISTAUDIT_CRASH_*``, :mod:`histaudit.crash`) and the
engine launchers' (``HISTAUDIT_ENGINE_BIN``, ``HISTAUDIT_DAPRD_BIN_DIR``,
:mod:`histaudit.testing`) are read where a process starts, which is their edge.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

from .errors import StoreError, UsageError

__all__ = ["DEFAULT_LOCK_WAIT_SECONDS", "DEFAULT_MAX_PAYLOAD_BYTES",
           "DEFAULT_OUTAGE_WAIT_SECONDS", "ENABLED_ENV", "GENAI_LATEST_EXPERIMENTAL",
           "LOCK_WAIT_ENV", "OUTAGE_WAIT_ENV", "PKCS11_MODULE_ENV", "PKCS11_PIN_ENV",
           "SEMCONV_OPT_IN_ENV", "VAULT_TOKEN_ENV", "Settings"]

ENGINE_GRPC_LIMIT = 4 * 1024 * 1024
"""What the engine accepts in one gRPC message: grpc-go's default server receive limit,
which durabletask-go and daprd keep (the SDK worker's own send side is unlimited)."""
DEFAULT_MAX_PAYLOAD_BYTES = ENGINE_GRPC_LIMIT - 64 * 1024
"""Largest activity output histaudit signs as a completion: below the engine's limit,
leaving 64 KiB for the rest of the message (ids, token)."""
DEFAULT_LOCK_WAIT_SECONDS = 30.0
DEFAULT_OUTAGE_WAIT_SECONDS = 30.0

ENABLED_ENV = "HISTAUDIT_ENABLED"
LOCK_WAIT_ENV = "HISTAUDIT_LOCK_WAIT"
OUTAGE_WAIT_ENV = "HISTAUDIT_STORE_OUTAGE_WAIT"
PKCS11_MODULE_ENV = "HISTAUDIT_PKCS11_MODULE"
PKCS11_PIN_ENV = "HISTAUDIT_PKCS11_PIN"
VAULT_TOKEN_ENV = "VAULT_TOKEN"
SEMCONV_OPT_IN_ENV = "OTEL_SEMCONV_STABILITY_OPT_IN"
GENAI_LATEST_EXPERIMENTAL = "gen_ai_latest_experimental"
"""The value of ``$OTEL_SEMCONV_STABILITY_OPT_IN`` OpenTelemetry's GenAI instrumentations
read as "emit the latest GenAI conventions, not the old ones"."""
_ON, _OFF = ("", "1", "true", "yes", "on"), ("0", "false", "no", "off")


@dataclass(frozen=True)
class Settings:
    """A snapshot of the variables histaudit reads (module docstring), parsed on use."""

    environ: Mapping[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """The variables of ``environ`` (default: this process's) that histaudit reads."""
        source = os.environ if environ is None else environ
        return cls({k: v for k, v in source.items()
                    if k.startswith("HISTAUDIT_") or k in (VAULT_TOKEN_ENV, SEMCONV_OPT_IN_ENV)})

    def _text(self, name: str) -> str:
        return self.environ.get(name, "").strip()

    @cached_property
    def db(self) -> str | None:
        return self._text("HISTAUDIT_DB") or None

    @cached_property
    def key(self) -> str | None:
        return self._text("HISTAUDIT_KEY") or None

    @cached_property
    def trust(self) -> str | None:
        return self._text("HISTAUDIT_TRUST") or None

    @cached_property
    def audit_enabled(self) -> bool:
        """Whether ``$HISTAUDIT_ENABLED`` leaves auditing on (unset or empty: on)."""
        text = self._text(ENABLED_ENV)
        if text.lower() in _ON:
            return True
        if text.lower() in _OFF:
            return False
        raise UsageError(f"{ENABLED_ENV} must be 1, true, yes or on (audit; also when unset)"
                         f" or 0, false, no or off (run unaudited), got {text[:40]!r}")

    @cached_property
    def max_payload_bytes(self) -> int:
        """The payload size limit: ``$HISTAUDIT_MAX_PAYLOAD_BYTES`` or the default."""
        text = self._text("HISTAUDIT_MAX_PAYLOAD_BYTES")
        if not text:
            return DEFAULT_MAX_PAYLOAD_BYTES
        if not (text.isascii() and text.isdigit() and len(text) <= 18) or int(text) < 1:
            raise UsageError(f"HISTAUDIT_MAX_PAYLOAD_BYTES must be a positive number of "
                             f"bytes, got {text[:40]!r}")
        return int(text)

    @cached_property
    def lock_wait(self) -> float:
        """Seconds a writing CLI command waits for the write lock (0..86400)."""
        return self._seconds(LOCK_WAIT_ENV, DEFAULT_LOCK_WAIT_SECONDS, 86400)

    @cached_property
    def store_outage_wait(self) -> float:
        """Seconds a lost PostgreSQL connection is waited for (0..3600)."""
        return self._seconds(OUTAGE_WAIT_ENV, DEFAULT_OUTAGE_WAIT_SECONDS, 3600)

    @cached_property
    def pkcs11_module(self) -> str | None:
        return self._text(PKCS11_MODULE_ENV) or None

    @cached_property
    def pkcs11_pin(self) -> str | None:
        return self.environ.get(PKCS11_PIN_ENV) or None

    @cached_property
    def vault_token(self) -> str | None:
        return self.environ.get(VAULT_TOKEN_ENV) or None

    @cached_property
    def genai_latest_experimental(self) -> bool:
        """Whether ``$OTEL_SEMCONV_STABILITY_OPT_IN`` lists ``gen_ai_latest_experimental``
        (spans follow the current GenAI conventions). The list is every instrumentation's:
        values for others (``http``, ``database/dup``) are theirs, never an error here."""
        listed = self.environ.get(SEMCONV_OPT_IN_ENV, "").split(",")
        return GENAI_LATEST_EXPERIMENTAL in (value.strip() for value in listed)

    def _seconds(self, name: str, default: float, most: float) -> float:
        """``$name`` as seconds from 0 to ``most``, or ``default`` when unset or blank;
        StoreError when it is anything else (nan, inf and words included)."""
        text = self._text(name)
        if not text:
            return default
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not 0 <= value <= most:
            raise StoreError(f"{name}={text[:40]!r} is not a number of seconds between 0 "
                             f"and {most:g}")
        return value
