"""AuditedWorkflowRuntime.mark_volatile: the output fields a crash matrix leaves out, as
the app declares them (audit_agent marks a DurableAgent's ``$.id``). Cost: < 1 s."""

from __future__ import annotations

import pytest

from histaudit.errors import UsageError
from histaudit.interceptor import AuditedWorkflowRuntime


def test_marks_accumulate_per_workflow_without_repeats() -> None:
    runtime = AuditedWorkflowRuntime()
    assert runtime.volatile_output == {}
    runtime.mark_volatile("agent", "$.id")
    runtime.mark_volatile("agent", "$.id", "$.created")
    runtime.mark_volatile("other", "$..stamp")
    assert runtime.volatile_output == {"agent": ("$.id", "$.created"),
                                       "other": ("$..stamp",)}


@pytest.mark.parametrize("bad", ["id", "", None, 3])
def test_a_path_that_is_not_jsonpath_text_is_refused(bad: object) -> None:
    with pytest.raises(UsageError, match=r"mark_volatile\('agent'\): paths are JSONPath"):
        AuditedWorkflowRuntime().mark_volatile("agent", bad)  # type: ignore[arg-type]
