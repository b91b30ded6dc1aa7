"""``AuditedWorkflowRuntime``: ``dapr.ext.workflow.WorkflowRuntime`` plus a ledger.

Every activity and workflow registered on it (by decorator, ``register_activity`` or
``register_workflow``) is audited (:mod:`.activity`, :mod:`.workflow`), and every
history the worker replays goes through the live replay check (:mod:`.replaycheck`).
The wrappers share one recorder, made unbound with the runtime and bound to the key and
ledger by ``start()``: registering (at import, by decorator) touches neither, running does.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

from dapr.ext.workflow import WorkflowRuntime

from histaudit import sdk
from histaudit.config import Settings
from histaudit.errors import KeyMaterialError, StoreError, UsageError
from histaudit.ledger.keys import Signer
from histaudit.ledger.signers import load_signer
from histaudit.ledger.store import Ledger, resolve_url
from histaudit.urls import shown_url

from . import tracing
from .activity import audit_activity
from .effects import runs_unaudited
from .received import ReceivedEvents
from .recorder import AuditRecorder
from .replaycheck import ReplayedResultCheck
from .workflow import audit_workflow

__all__ = ["AuditedWorkflowRuntime"]

log = logging.getLogger("histaudit.interceptor")

class AuditedWorkflowRuntime(WorkflowRuntime):
    """``WorkflowRuntime`` that signs every activity execution and workflow decision.

    Takes the same arguments, plus keyword-only ``ledger`` (URL; default
    ``$HISTAUDIT_DB``, else ``sqlite:///histaudit.db``), ``key`` (private key path;
    default ``$HISTAUDIT_KEY``), ``keep_payloads`` (store payload bytes beside their
    commitments; False keeps only commitments, as if erased at once) and ``settings``
    (a :class:`histaudit.config.Settings` to use instead of the ``HISTAUDIT_*``
    environment, e.g. ``Settings.from_env({"HISTAUDIT_DB": ..., "HISTAUDIT_KEY": ...})``).

    Building one touches neither the key nor the ledger, so a module that builds it at
    import time (Dapr's docs' style) imports anywhere: ``histaudit replay``, the crash
    matrix's discovery, a test collecting it. :meth:`start` loads the key and opens the
    ledger, before the worker takes any work item, so an unusable one stops the app
    there, with the same one-line error. ``HISTAUDIT_ENABLED=0`` (read here, or
    ``settings.audit_enabled``) makes it a plain ``WorkflowRuntime``: nothing is
    wrapped, no key is needed, no ledger opened.
    """

    def __init__(self, *args: Any, ledger: str | None = None, key: str | None = None,
                 keep_payloads: bool = True, settings: Settings | None = None,
                 **kwargs: Any) -> None:
        self.stateful_history = _stateful_history(kwargs)
        """Whether the worker asks the engine for history deltas (the SDK's stateful
        history, dapr ≥ 1.19): off unless the app passed ``disable_stateful_history=False``."""
        self._settings = settings
        """What the app passed (histaudit.config); None: the environment, read here for
        ``$HISTAUDIT_ENABLED`` and again at :meth:`start` for the rest."""
        self.audited = (settings or Settings.from_env()).audit_enabled
        """False when ``$HISTAUDIT_ENABLED`` switched auditing off for this process."""
        if not self.audited:
            runs_unaudited()
        self._ledger_url = ledger
        self._key = key
        self.recorder = AuditRecorder.deferred(keep_payloads=keep_payloads)
        """Shared by every wrapper registered here; bound to the ledger and key by
        :meth:`start`."""
        super().__init__(*args, **kwargs)
        self.replay_check = ReplayedResultCheck(self.recorder)
        self.received = ReceivedEvents(self.recorder)
        """Signs events, timers, suspend/resume and terminate as turns carry them."""
        self.wire_inputs = self.audited and self._capture_wire_inputs()
        self.checks_replayed_results = self.audited and self._check_replayed_results()
        self.volatile_output: dict[str, tuple[str, ...]] = {}
        """Workflow name -> JSONPaths of output fields that differ from run to run by
        design (an id the SDK derives from the run's clock): ``crashtest`` leaves them
        out when it compares a crashed run's output with the clean run's. Set through
        :meth:`mark_volatile`; :func:`histaudit.agents.audit_agent` marks the agent's."""
        self._taking_over = False

    @contextlib.contextmanager
    def taking_over(self) -> Iterator[None]:
        """Inside the block, functions registered here may carry the marks another
        runtime left when it registered them (a framework that built its own
        ``WorkflowRuntime``, now replaced by this one before it started): the marks are
        dropped first, so the SDK does not refuse them as registered twice."""
        self._taking_over = True
        try:
            yield
        finally:
            self._taking_over = False

    def mark_volatile(self, workflow: str, *paths: str) -> None:
        """Declare output fields of ``workflow`` (RFC 9535 JSONPaths, parsed by the crash
        matrix, which names this app when one is not) that differ between two correct
        runs, so the matrix does not call every crash a divergence."""
        if not all(isinstance(p, str) and p.startswith("$") for p in paths):
            raise UsageError(f"mark_volatile({workflow!r}): paths are JSONPath strings "
                             f"starting with '$', not {paths!r}")
        known = self.volatile_output.get(workflow, ())
        self.volatile_output[workflow] = tuple(dict.fromkeys((*known, *paths)))

    @property
    def ledger(self) -> Ledger:
        """The ledger :meth:`start` opened (UsageError before that)."""
        return self.recorder.ledger

    @property
    def signer(self) -> Signer:
        """The signing key :meth:`start` loaded (UsageError before that)."""
        return self.recorder.signer

    def start(self) -> None:
        """Load the key and open the ledger (unless unaudited), then start the worker.

        The key comes first: an unusable one leaves no ledger file behind. The GenAI
        conventions the spans follow are taken from the same snapshot of the environment
        (``OTEL_SEMCONV_STABILITY_OPT_IN``, :func:`.tracing.follow`).
        """
        if self.audited and not self.recorder.bound:
            # The settings passed in, else the environment as it is now: an app may set
            # it between building the runtime (at import) and starting it.
            settings = self._settings or Settings.from_env()
            tracing.follow(settings)  # which GenAI conventions the spans follow
            signer = _load_signer(self._key, settings)
            ledger = _open_ledger(self._ledger_url, settings)
            try:
                self.recorder.bind(ledger, signer, max_payload=settings.max_payload_bytes)
            except BaseException:
                ledger.close()
                raise
        try:
            super().start()  # type: ignore[no-untyped-call]
        except BaseException:
            self._close_ledger()
            raise

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

        The request's ``newEvents`` are checked with the committed events, and handed to
        :attr:`received`, which signs the events, timers, suspends, resumes and terminates
        among them; the recorder keeps both for the turn, for a ``continue_as_new`` to
        sign as its generation's history. Without the hook (another SDK version) the app
        runs unchecked and ``histaudit verify --engine`` remains.
        """
        check = self.replay_check
        received = self.received
        recorder = self.recorder

        def after(req: Any, events: list[Any]) -> None:
            recorder.note_turn(str(req.instanceId), events, req.newEvents)
            try:
                check.check_turn(str(req.instanceId), events, req.newEvents)
            except Exception as exc:  # noqa: BLE001 - see ReplayedResultCheck
                log.warning("histaudit: could not check the replayed results of %s: %s",
                            getattr(req, "instanceId", "?"), exc)
            received.observe(str(req.instanceId), req.newEvents)

        hooked = sdk.hook_resolve_history(self, after)
        if not hooked:
            log.info("histaudit: SDK history internals not found; replayed results unchecked")
        return hooked

    def register_activity(self, fn: Callable[..., Any], *, name: str | None = None) -> None:
        """Register an activity (``def`` or ``async def``), audited (as is, unaudited)."""
        if self._taking_over:
            sdk.strip_registration_marks(fn)
        if not self.audited:
            super().register_activity(fn, name=name)
            return
        wrapper: Callable[..., Any]
        wrapper = audit_activity(self.recorder, fn,
                                  lambda: sdk.registered_name(wrapper) if name is None else name)
        super().register_activity(wrapper, name=name)
        sdk.copy_registration_marks(wrapper, fn)

    def register_workflow(self, fn: Callable[..., Any], *, name: str | None = None) -> None:
        """Register a workflow, audited (as is, unaudited)."""
        if self._taking_over:
            sdk.strip_registration_marks(fn)
        if not self.audited:
            super().register_workflow(fn, name=name)
            return
        wrapper: Callable[..., Any]
        wrapper = audit_workflow(self.recorder, fn,
                                  lambda: sdk.registered_name(wrapper) if name is None else name)
        super().register_workflow(wrapper, name=name)
        sdk.copy_registration_marks(wrapper, fn)

    def register_versioned_workflow(self, fn: Callable[..., Any], *, name: str,
                                    version_name: str | None = None,
                                    is_latest: bool) -> None:
        """Register one version of a workflow, audited (recorded under ``name``)."""
        if not self.audited:
            super().register_versioned_workflow(fn, name=name, version_name=version_name,
                                                is_latest=is_latest)
            return
        wrapper = audit_workflow(self.recorder, fn, lambda: name)
        super().register_versioned_workflow(wrapper, name=name, version_name=version_name,
                                            is_latest=is_latest)
        sdk.copy_registration_marks(wrapper, fn)

    def shutdown(self) -> None:
        """Stop the worker, then release the ledger's connections (if it was opened)."""
        try:
            super().shutdown()  # type: ignore[no-untyped-call]
        finally:
            self._close_ledger()

    def _close_ledger(self) -> None:
        ledger = self.recorder.unbind()
        if ledger is not None:
            ledger.close()


STATEFUL_HISTORY_OFF = (
    "histaudit: the SDK's stateful history is off (disable_stateful_history=True): on "
    "engines with durabletask-go before dapr/durabletask-go#129 a crash can leave a "
    "workflow turn in a dead stream's buffer until the engine's lock timeout (2 minutes); "
    "pass disable_stateful_history=False to keep it on")


def _stateful_history(kwargs: dict[str, Any]) -> bool:
    """Choose the SDK's stateful-history mode where the SDK has one (dapr ≥ 1.19) and the
    app did not: off, and said once in the log. With it on, an engine that routes a turn to
    a worker stream's own buffer and then loses the stream (a crashed worker) leaves the
    instance stalled until its lock times out — durabletask-go v0.14.0, the standalone
    engine here, does, 2 times in 16 on an 8-way fan-out (issue #39); full histories have
    no such buffer. The cost is bandwidth: every turn carries the whole history."""
    if not sdk.has_stateful_history():
        return False
    if "disable_stateful_history" in kwargs:
        return not kwargs["disable_stateful_history"]
    kwargs["disable_stateful_history"] = True
    log.info(STATEFUL_HISTORY_OFF)
    return False


def _load_signer(key: str | None, settings: Settings) -> Signer:
    if not (key or settings.key):
        raise KeyMaterialError("AuditedWorkflowRuntime: no signing key: pass key=PATH or set "
                         "HISTAUDIT_KEY to an Ed25519 private key (histaudit keys generate)")
    try:
        return load_signer(key or settings.key, settings)
    except KeyMaterialError as exc:
        # The message never holds key text (see Signer.load); `from None` keeps the
        # original exception, and with it the caller's arguments, out of the traceback.
        text = str(exc).replace("HISTAUDIT_KEY/--key", "key=/HISTAUDIT_KEY")
        raise KeyMaterialError(f"AuditedWorkflowRuntime: {text}") from None


def _open_ledger(url: str | None, settings: Settings) -> Ledger:
    resolved = resolve_url(url or settings.db)
    try:
        ledger = Ledger.open(resolved, create=True, outage_wait=settings.store_outage_wait)
    except StoreError as exc:
        raise StoreError(f"AuditedWorkflowRuntime: {exc}") from None
    if ledger.read_only:  # the store's own finding: a read-only URL, file or directory
        ledger.close()
        raise StoreError(f"AuditedWorkflowRuntime: ledger {shown_url(resolved)} cannot be "
                         f"written: {ledger.read_only}")
    return ledger
