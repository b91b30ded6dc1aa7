"""A workflow app written the way Dapr's Python docs write one: decorators, module-level
runtime, the runtime started only under ``__main__``.

tests/integration/test_docs_style_app.py runs it on the real engine and then points
``histaudit replay --workflow`` at the decorated functions and at the runtime, as a user
following Dapr's docs would. Nothing here knows about histaudit.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from typing import Any

import dapr.ext.workflow as wf

wfr = wf.WorkflowRuntime()


@wfr.workflow(name="greeting_wf")
def greeting_wf(ctx: wf.DaprWorkflowContext, name: str) -> Generator[Any, Any, str]:
    hello = yield ctx.call_activity(say_hello, input=name)
    count = yield ctx.call_activity(count_letters, input=hello)
    return f"{hello} ({count} letters)"


@wfr.workflow
def shouting_wf(ctx: wf.DaprWorkflowContext, name: str) -> Generator[Any, Any, str]:
    hello = yield ctx.call_activity(say_hello, input=name.upper())
    return hello


@wfr.activity(name="say_hello")
def say_hello(ctx: wf.WorkflowActivityContext, name: str) -> str:
    return f"Hello, {name}!"


@wfr.activity
def count_letters(ctx: wf.WorkflowActivityContext, text: str) -> int:
    return sum(c.isalpha() for c in text)


if __name__ == "__main__":
    wfr.start()
    try:
        while True:
            time.sleep(1)
    finally:
        wfr.shutdown()
