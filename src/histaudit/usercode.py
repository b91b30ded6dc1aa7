"""Loading the user's code: the one reader of ``MODULE:NAME`` and ``path/to/file.py:NAME``.

``histaudit replay --workflow``, ``histaudit crashtest`` (its worker processes) and the
pytest plugin all name user code the same way, and all get it from here:

* :func:`load_module` imports a dotted module (the current directory importable, as with
  ``python -m``) or a ``.py`` file (its directory importable, so its siblings import);
* :func:`load` returns the attribute ``NAME`` of it;
* :func:`workflow_functions` turns what was named into ``{workflow name: function}``:
  a function decorated with ``@wfr.workflow`` (Dapr's docs' style: the decorator returns
  a stand-in that would fail with "takes 0 positional arguments" if called as the
  workflow), a plain function, or a ``{name: function}`` mapping;
* :func:`find_runtime` finds the module's ``WorkflowRuntime``.

Anything that goes wrong — no such module or file, an error while importing it, no such
attribute — is an :class:`~histaudit.errors.InputError` naming the reference.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from .errors import InputError, UsageError

__all__ = ["find_runtime", "is_file_ref", "load", "load_module", "resolve_ref",
           "split_ref", "workflow_functions"]


def is_file_ref(ref: str) -> bool:
    """Is ``ref`` a path to a ``.py`` file (rather than a dotted module name)?"""
    return ref.endswith(".py") or os.sep in ref or "/" in ref


def resolve_ref(ref: str, what: str) -> str:
    """``ref`` checked without importing it: an absolute file path, or a dotted name."""
    if is_file_ref(ref):
        path = Path(ref).expanduser()
        if not path.is_file():
            raise InputError(f"{what} {ref!r}: no such file")
        return str(path.resolve())
    if not ref or not all(part.isidentifier() for part in ref.split(".")):
        raise UsageError(f"{what} {ref!r}: expected a dotted module name or a .py file")
    return ref


def split_ref(ref: str, what: str) -> tuple[str, str]:
    """``MODULE:NAME`` into (module, name)."""
    module, sep, name = ref.rpartition(":")
    if not sep or not module or not name:
        raise InputError(f"{what} {ref!r}: expected MODULE:FUNCTION (or path/to/file.py:NAME)")
    return module, name


def load_module(ref: str, what: str | None = None) -> ModuleType:
    """Import a dotted module or a ``.py`` file; InputError (one line) on any failure.

    ``what`` starts the error message (default: ``module 'REF'``).
    """
    what = what or f"module {ref!r}"
    try:
        if is_file_ref(ref):
            path = Path(ref).expanduser()
            if not path.is_file():
                raise InputError(f"{what}: no file {ref}")
            path = path.resolve()
            if str(path.parent) not in sys.path:
                sys.path.insert(0, str(path.parent))
            spec = importlib.util.spec_from_file_location(path.stem, path)
            if spec is None or spec.loader is None:
                raise InputError(f"{what}: cannot load {path}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[path.stem] = module
            spec.loader.exec_module(module)
            return module
        if os.getcwd() not in sys.path and "" not in sys.path:
            sys.path.insert(0, os.getcwd())
        return importlib.import_module(ref)
    except InputError:
        raise
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - user code, any error
        detail = f"{type(exc).__name__}: {exc}".replace("\n", " ")
        raise InputError(f"{what}: cannot import {ref}: {detail}{_sidecar_hint(exc)}"
                         ) from None


def _sidecar_hint(exc: BaseException) -> str:
    """What to do when the module could not import because it asked a Dapr sidecar for
    something (dapr-agents builds an agent from daprd's metadata, with no offline mode):
    the Python SDK's health check says so in its message."""
    seen: BaseException | None = exc
    while seen is not None:
        if "Dapr health check" in str(seen):
            return (" — the module needs a running Dapr sidecar when it is imported: run "
                    "this command under `dapr run --app-id ID -- histaudit …`, or point "
                    "DAPR_GRPC_ENDPOINT and DAPR_HTTP_ENDPOINT at a running daprd "
                    "(DAPR_HEALTH_TIMEOUT=5 gives up sooner than the SDK's 60 s)")
        seen = seen.__cause__ or seen.__context__
    return ""


def load(ref: str, what: str = "reference") -> Any:
    """The object ``MODULE:NAME`` names (``NAME`` may be dotted: ``app:Workflows.order``)."""
    module_ref, attr = split_ref(ref, what)
    target: Any = load_module(module_ref, f"{what} {ref!r}")
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise InputError(f"{what} {ref!r}: {module_ref} has no {attr!r}") from None
    return target


def workflow_functions(obj: Any) -> dict[str, Callable[..., Any]]:
    """``{registered name: workflow function}`` for a function or a mapping of them.

    A function decorated with ``@wfr.workflow`` is unwrapped to the function it stands
    for, under the name it was registered with.
    """
    from . import sdk

    if isinstance(obj, Mapping):
        items = [(str(name), sdk.unwrap_decorated(fn)) for name, fn in obj.items()]
    elif callable(obj):
        items = [(sdk.registered_name(obj), sdk.unwrap_decorated(obj))]
    else:
        raise UsageError(f"not a workflow: {obj!r} (give a function, a mapping of names to "
                         f"functions, or a WorkflowRuntime)")
    for name, fn in items:
        if not name or not callable(fn):
            raise UsageError(f"cannot tell the workflow name of {fn!r}")
    return dict(items)


def _returns_runtime(fn: Any, runtime_cls: type) -> bool:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    if any(p.default is inspect.Parameter.empty
           and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
           for p in sig.parameters.values()):
        return False
    ann = sig.return_annotation
    if isinstance(ann, type):
        return issubclass(ann, runtime_cls)
    return isinstance(ann, str) and ann.rsplit(".", 1)[-1] in (
        "WorkflowRuntime", "AuditedWorkflowRuntime")


def find_runtime(module: ModuleType, label: str | None = None) -> Any:
    """The module's WorkflowRuntime: a module-level instance, else a factory's result.

    A factory is a module-level function taking no arguments and annotated to return a
    ``WorkflowRuntime`` (``def build_runtime() -> AuditedWorkflowRuntime``).
    """
    from dapr.ext.workflow import WorkflowRuntime

    name = label or getattr(module, "__name__", "?")
    found = {id(v): v for v in vars(module).values() if isinstance(v, WorkflowRuntime)}
    if len(found) == 1:
        return next(iter(found.values()))
    if len(found) > 1:
        raise UsageError(f"{name} has {len(found)} module-level WorkflowRuntime objects; "
                         f"crashtest needs exactly one")
    factories = [v for v in vars(module).values()
                 if inspect.isfunction(v) and v.__module__ == module.__name__
                 and _returns_runtime(v, WorkflowRuntime)]
    if len(factories) == 1:
        runtime = factories[0]()
        if isinstance(runtime, WorkflowRuntime):
            return runtime
    raise UsageError(f"{name} has no module-level WorkflowRuntime (e.g. "
                     f"`wfr = AuditedWorkflowRuntime()`)")
