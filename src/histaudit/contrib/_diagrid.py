"""What every Diagrid runner adapter does: give the runner's own runtime over to an audited
one (docs/adr/0013-framework-runtimes.md).

Diagrid's ``diagrid.agent.<framework>`` runners (0.5.x) all derive from
``BaseWorkflowRunner``, whose ``__init__`` builds ``WorkflowRuntime(host, port)`` into
``self._workflow_runtime`` and whose subclasses then register their module-level workflow
and activities on it in ``_register_workflow_components()``; nothing is sent to the sidecar
until ``start()``. So an audited runner is the same runner whose ``_workflow_runtime`` is
an :class:`~histaudit.adapters.AuditedWorkflowRuntime` that registered the same functions
(:func:`histaudit.adapters.take_over`). That uses three names of Diagrid's base class,
which is why the versions it was read from are named here, and any other version is said
once in a warning rather than trusted in silence.
"""

from __future__ import annotations

import importlib.metadata
import warnings
from typing import Any

from histaudit import adapters
from histaudit.errors import UsageError

__all__ = ["KNOWN_DIAGRID", "take_over_runner"]

KNOWN_DIAGRID = ("0.5.3",)
"""The diagrid versions whose ``BaseWorkflowRunner`` this was read from and tested on."""

_AUDITED = "_histaudit_audited"


def take_over_runner(runner: Any, who: str) -> adapters.AuditedWorkflowRuntime:
    """Replace ``runner``'s workflow runtime by an audited one that registered the same
    workflows and activities; return it (also left on the runner as
    ``runner.histaudit_runtime``). ``who`` names the caller in errors
    (``audit_runner()``). A started runner, one already audited, or an object without a
    Diagrid runner's shape is a one-line UsageError."""
    register = getattr(runner, "_register_workflow_components", None)
    runtime = getattr(runner, "_workflow_runtime", None)
    if not callable(register) or runtime is None:
        raise UsageError(f"{who}: {type(runner).__name__} is not a Diagrid workflow runner "
                         "(it has no _workflow_runtime or _register_workflow_components)")
    if getattr(runner, _AUDITED, False):
        raise UsageError(f"{who}: this runner is already audited")
    if getattr(runner, "_started", False):
        raise UsageError(f"{who}: the runner has started; audit it before runner.start()")
    _check_version(who)

    def again(audited: adapters.AuditedWorkflowRuntime) -> None:
        runner._workflow_runtime = audited
        register()

    audited = adapters.take_over(again, host=getattr(runner, "_host", None),
                                 port=getattr(runner, "_port", None))
    setattr(runner, _AUDITED, True)
    # Public, for whoever needs the runtime itself: a crashtest entry (a factory annotated
    # to return AuditedWorkflowRuntime: `return audit_runner(build()).histaudit_runtime`).
    runner.histaudit_runtime = audited
    return audited


def _check_version(who: str) -> None:
    try:
        version = importlib.metadata.version("diagrid")
    except importlib.metadata.PackageNotFoundError:
        return  # a runner of that shape without the distribution: nothing to compare
    if version not in KNOWN_DIAGRID:
        warnings.warn(f"{who}: diagrid {version} is not a version histaudit was tested with "
                      f"({', '.join(KNOWN_DIAGRID)}); its runner is audited as 0.5.3's was, "
                      "check that `histaudit verify` sees its tool and LLM calls",
                      UserWarning, stacklevel=3)
