"""``AuditedWorkflowRuntime``: ``dapr.ext.workflow.WorkflowRuntime`` plus a ledger.

Every activity and workflow registered on it (by decorator, ``register_activity`` or
``register_workflow``) is audited (:mod:`.activity`, :mod:`.workflow`), and every
history the worker replays goes through the live replay check (:mod:`.replaycheck`).
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dapr.ext.workflow import WorkflowRuntime

from histaudit import sdk
from histaudit.errors import KeyMaterialError, StoreError
from histaudit.ledger.keys import Signer, signer_from_env
from histaudit.ledger.store import Ledger, resolve_url

from .activity import audit_activity
from .recorder import AuditRecorder
from .replaycheck import ReplayedResultCheck
from .workflow import audit_workflow

__all__ = ["AuditedWorkflowRuntime"]

log = logging.getLogger("histaudit.interceptor")

class AuditedWorkflowRuntime(WorkflowRuntime):
    """``WorkflowRuntime`` that signs every activity execution and workflow decision.

    Takes the same arguments, plus keyword-only ``ledger`` (URL; default
    ``$HISTAUDIT_DB``, else ``sqlite:///histaudit.db``), ``key`` (private key path;
    default ``$HISTAUDIT_KEY``) and ``keep_payloads`` (store payload bytes beside their
    commitments; False keeps only commitments, as if erased at once). The key is loaded
    and the ledger opened here, so an unusable one stops the app at start-up, before any
    workflow runs.
    """

    def __init__(self, *args: Any, ledger: str | None = None, key: str | None = None,
                 keep_payloads: bool = True, **kwargs: Any) -> None:
        signer = _load_signer(key)
        self.ledger = _open_ledger(ledger)
        self.signer = signer
        self.recorder = AuditRecorder(self.ledger, signer, keep_payloads=keep_payloads)
        super().__init__(*args, **kwargs)
        self.wire_inputs = self._capture_wire_inputs()
        self.replay_check = ReplayedResultCheck(self.recorder)
        self.checks_replayed_results = self._check_replayed_results()

    def _capture_wire_inputs(self) -> bool:
        """Let activities see the exact input text the engine sent (True if possible).

        The SDK decodes the input before calling the activity; this hook leaves the text
        on the SDK's ActivityContext. It relies on SDK internals, so when they change the
        interceptor falls back to re-encoding the decoded input with the SDK serializer,
        which yields the same text for any input the Python SDK produced.
        """
        hooked = sdk.hook_activity_resolve(
            self, lambda ctx, text: sdk.set_wire_input(ctx, text or None))
        if not hooked:
            log.info("histaudit: SDK activity internals not found; committing re-encoded inputs")
        return hooked

    def _check_replayed_results(self) -> bool:
        """Hand every history the worker replays to :class:`ReplayedResultCheck` (True if
        hooked; see :func:`histaudit.sdk.hook_resolve_history`).

        The request's ``newEvents`` are checked with the committed events. Without the
        hook (another SDK version) the app runs unchecked and ``histaudit verify
        --engine`` remains.
        """
        check = self.replay_check

        def after(req: Any, events: list[Any]) -> None:
            try:
                check.check(str(req.instanceId), itertools.chain(events, req.newEvents))
            except Exception as exc:  # noqa: BLE001 - see ReplayedResultCheck
                log.warning("histaudit: could not check the replayed results of %s: %s",
                            getattr(req, "instanceId", "?"), exc)

        hooked = sdk.hook_resolve_history(self, after)
        if not hooked:
            log.info("histaudit: SDK history internals not found; replayed results unchecked")
        return hooked

    def register_activity(self, fn: Callable[..., Any], *, name: str | None = None) -> None:
        """Register an activity (``def`` or ``async def``), audited."""
        wrapper: Callable[..., Any]
        wrapper = audit_activity(self.recorder, fn,
                                  lambda: sdk.registered_name(wrapper) if name is None else name)
        super().register_activity(wrapper, name=name)
        sdk.copy_registration_marks(wrapper, fn)

    def register_workflow(self, fn: Callable[..., Any], *, name: str | None = None) -> None:
        """Register a workflow, audited."""
        wrapper: Callable[..., Any]
        wrapper = audit_workflow(self.recorder, fn,
                                  lambda: sdk.registered_name(wrapper) if name is None else name)
        super().register_workflow(wrapper, name=name)
        sdk.copy_registration_marks(wrapper, fn)

    def register_versioned_workflow(self, fn: Callable[..., Any], *, name: str,
                                    version_name: str | None = None,
                                    is_latest: bool) -> None:
        """Register one version of a workflow, audited (recorded under ``name``)."""
        wrapper = audit_workflow(self.recorder, fn, lambda: name)
        super().register_versioned_workflow(wrapper, name=name, version_name=version_name,
                                            is_latest=is_latest)
        sdk.copy_registration_marks(wrapper, fn)

    def shutdown(self) -> None:
        """Stop the worker, then release the ledger's connections."""
        try:
            super().shutdown()  # type: ignore[no-untyped-call]
        finally:
            self.ledger.close()


def _load_signer(key: str | None) -> Signer:
    if not key and not os.environ.get("HISTAUDIT_KEY"):
        raise KeyMaterialError("AuditedWorkflowRuntime: no signing key: pass key=PATH or set "
                         "HISTAUDIT_KEY to an Ed25519 private key (histaudit keys generate)")
    try:
        return signer_from_env(key)
    except KeyMaterialError as exc:
        # The message never holds key text (see Signer.load); `from None` keeps the
        # original exception, and with it the caller's arguments, out of the traceback.
        text = str(exc).replace("HISTAUDIT_KEY/--key", "key=/HISTAUDIT_KEY")
        raise KeyMaterialError(f"AuditedWorkflowRuntime: {text}") from None


def _open_ledger(url: str | None) -> Ledger:
    resolved = resolve_url(url)
    try:
        ledger = Ledger.open(resolved, create=True)
    except StoreError as exc:
        raise StoreError(f"AuditedWorkflowRuntime: {exc}") from None
    if ledger.dialect == "sqlite":
        path = ledger.db.url.database
        if path and path != ":memory:":
            p = Path(path)
            for target in (p, p.parent):
                if not os.access(target, os.W_OK):
                    ledger.close()
                    raise StoreError(f"AuditedWorkflowRuntime: ledger {p} is not writable "
                                     f"({target} refuses writes)")
    return ledger
