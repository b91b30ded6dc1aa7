"""histaudit.sdk: the one module that spells the Dapr SDK's private names."""

from __future__ import annotations

import inspect
import subprocess
import sys
from collections.abc import Generator
from pathlib import Path
from typing import Any

import dapr.ext.workflow as wf
import pytest

from histaudit import sdk
from histaudit.errors import SdkError


def test_the_installed_sdk_has_every_private_name_histaudit_uses() -> None:
    assert sdk.missing() == [], sdk.layout()


def test_the_layout_names_the_installed_distributions() -> None:
    assert sdk.layout().startswith(f"dapr {sdk.DAPR_VERSION}")
    assert ("dapr-ext-workflow" in sdk.layout()) == (sdk.EXT_WORKFLOW_VERSION is not None)
    assert "mixed" not in sdk.layout()


def test_missing_names_what_an_sdk_without_a_hook_lacks(monkeypatch: Any) -> None:
    for name in ("_resolve_history", "_execute_orchestrator"):
        if hasattr(sdk.worker.TaskHubGrpcWorker, name):
            monkeypatch.delattr(sdk.worker.TaskHubGrpcWorker, name)
    assert sdk.missing() == [
        "TaskHubGrpcWorker._resolve_history (1.19) or _execute_orchestrator (1.18)"]


def test_a_renamed_private_name_is_reported_not_raised_at_import(monkeypatch: Any) -> None:
    """The SDK's private names are resolved on first use: an SDK that renamed one still
    imports histaudit.sdk, missing() names it, and its first use is one SdkError."""
    monkeypatch.delattr(sdk.worker, "_is_suspendable")
    monkeypatch.delitem(vars(sdk), "is_suspendable", raising=False)  # resolved before
    assert "_durabletask.worker._is_suspendable" in sdk.missing()
    with pytest.raises(SdkError, match=r"has no .*worker\._is_suspendable, which histaudit"):
        _ = sdk.is_suspendable
    with pytest.raises(AttributeError):
        _ = sdk.no_such_name  # type: ignore[attr-defined]


class _Stub:
    """Where the SDK's worker sends a work item's result."""

    def __init__(self) -> None:
        self.responses: list[Any] = []

    def CompleteOrchestratorTask(self, res: Any) -> None:  # noqa: N802 - the gRPC name
        self.responses.append(res)


def test_the_history_hook_sees_the_committed_events_on_either_layout() -> None:
    """A work item that carries its whole history (pastEvents): the hook hands those
    events over — on 1.19 as ``_resolve_history`` returns them, on 1.18 (no history
    cache) as ``_execute_orchestrator`` receives them, before the workflow runs, and the
    work item is still answered. ``make test`` runs this file on both layouts."""
    wfr = wf.WorkflowRuntime(host="127.0.0.1", port="1")
    seen: list[tuple[str, list[Any]]] = []
    assert sdk.hook_resolve_history(wfr, lambda req, events: seen.append(
        (req.instanceId, list(events))))
    past = [sdk.helpers.new_workflow_started_event(),
            sdk.helpers.new_execution_started_event("wf", "wf-1", None)]
    req = sdk.protos.WorkflowRequest(instanceId="wf-1", pastEvents=past,
                                     newEvents=[sdk.helpers.new_workflow_started_event()])
    worker = getattr(wfr, sdk._WORKER_ATTR)
    if hasattr(sdk.worker.TaskHubGrpcWorker, "_resolve_history"):  # 1.19
        assert list(worker._resolve_history(req)) == past
    else:  # 1.18
        stub = _Stub()
        worker._execute_orchestrator(req, stub, None)
        assert len(stub.responses) == 1 and stub.responses[0].instanceId == "wf-1"
    assert seen == [("wf-1", past)]


def test_runtime_context_is_the_sdk_context_behind_the_wrapper(monkeypatch: Any) -> None:
    inner = sdk.worker._RuntimeOrchestrationContext("wf-1")
    outer = wf.DaprWorkflowContext(inner)
    assert sdk.runtime_context(outer) is inner
    assert sdk.runtime_context(inner) is inner  # not a wrapper: itself
    # the pending task of a call made through the wrapper is found on the inner context
    task = outer.call_activity("act", input=1)
    task_id, action = sdk.pending_action(sdk.runtime_context(outer), task)
    assert task_id == inner._sequence_number == 1
    assert action.scheduleTask.name == "act"
    # an SDK whose wrapper keeps its context under another name is reported
    monkeypatch.setattr(sdk, "_CONTEXT_ATTR", "_renamed")
    assert sdk.missing() == ["DaprWorkflowContext._renamed"]


def _docs_style() -> tuple[Any, Any, Any]:
    wfr = wf.WorkflowRuntime(host="127.0.0.1", port="1")

    @wfr.workflow(name="named_wf")
    def named(ctx: Any, x: int) -> Generator[Any, Any, int]:
        yield ctx.call_activity(act, input=x)
        return x

    @wfr.workflow
    def bare(ctx: Any) -> Generator[Any, Any, None]:
        yield ctx.call_activity(act, input=0)

    @wfr.activity
    def act(ctx: Any, x: int) -> int:
        return x

    return named, bare, wfr


def test_unwrap_decorated_returns_the_function_a_decorator_stands_for() -> None:
    named, bare, wfr = _docs_style()
    for stand_in in (named, bare):
        assert inspect.signature(stand_in).parameters  # looks like the workflow…
        assert stand_in.__code__.co_argcount == 0  # …but takes nothing
        real = sdk.unwrap_decorated(stand_in)
        assert real is stand_in.__wrapped__ and real.__code__.co_argcount >= 1
    assert sdk.registered_name(named) == "named_wf"
    assert sdk.registered_name(bare) == "bare"
    assert sdk.registered_names(wfr) == (["named_wf", "bare"], ["act"])


def test_unwrap_decorated_leaves_everything_else_alone() -> None:
    def plain(ctx: Any) -> None:
        return None

    forwarding = wf.alternate_name("alias")(plain)  # innerfn(*args, **kwargs) forwards
    for obj in (plain, forwarding, len, "not a function", None):
        assert sdk.unwrap_decorated(obj) is obj


def test_registration_marks_copy_and_strip() -> None:
    named, _bare, _wfr = _docs_style()

    def copy(ctx: Any) -> None:
        return None

    sdk.copy_registration_marks(named, copy)
    assert sdk.registered_name(copy) == "named_wf"
    sdk.strip_registration_marks(copy)
    assert sdk.registered_name(copy) == "copy"


_WITHOUT_SDK = """
import sys, importlib.abc

class NoWorkflowSdk(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "dapr.ext.workflow" or name.startswith("dapr.ext.workflow."):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None

sys.meta_path.insert(0, NoWorkflowSdk())
from histaudit.cli import main
main(sys.argv[1:])
"""


def test_without_the_workflow_sdk_the_dapr_commands_say_what_to_install(
        tmp_path: Path) -> None:
    """dapr 1.18 without dapr-ext-workflow (or any dapr without its SDK): the commands
    that need the SDK stop with one line naming it; those that do not, run."""
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", _WITHOUT_SDK, *args], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120, check=False)

    replay = run("replay", "x", "--workflow", "app.py:wfr", "--history", "h.json")
    assert replay.returncode == 2 and replay.stdout == "", replay.stderr
    (line,) = replay.stderr.splitlines()
    assert line.startswith("histaudit: error: the Dapr workflow SDK (dapr.ext.workflow) is "
                           "not importable: ")
    if sdk.DAPR_VERSION and sdk.DAPR_VERSION.startswith("1.18"):
        assert "pip install 'dapr-ext-workflow>=1.18.3,<1.19'" in line
    version = run("--version")
    assert version.returncode == 0 and "Dapr workflow SDK: not usable: " in version.stdout
    keys = run("keys", "generate", "--name", "ops", "--out", str(tmp_path / "k"))
    assert keys.returncode == 0, keys.stderr
