"""histaudit.sdk: the one module that spells the Dapr SDK's private names."""

from __future__ import annotations

import inspect
from collections.abc import Generator
from typing import Any

import dapr.ext.workflow as wf

from histaudit import sdk


def test_the_pinned_sdk_has_every_private_name_histaudit_uses() -> None:
    assert sdk.missing() == []


def test_missing_names_what_an_sdk_without_a_hook_lacks(monkeypatch: Any) -> None:
    monkeypatch.delattr(sdk.worker.TaskHubGrpcWorker, "_resolve_history")
    assert sdk.missing() == ["TaskHubGrpcWorker._resolve_history"]


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
