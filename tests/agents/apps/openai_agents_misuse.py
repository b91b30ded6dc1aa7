"""``audit_runner`` misused, on a real runner beside daprd: prints one line per misuse,
``<case>: <the UsageError's message>`` (or ``<case>: no error``), then ``done``.

One process holds one OpenAI Agents runner (diagrid stamps its module-level activities), so
the cases run in an order that needs only one: a started runner, the same runner stopped
and audited with a tool it lacks in ``read_only``, then audited, then audited again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from diagrid.agent.openai_agents import DaprWorkflowAgentRunner

from agents import Agent, function_tool
from histaudit.contrib.openai_agents import audit_runner
from histaudit.errors import UsageError


@function_tool
def lookup(topic: str) -> str:
    """Look a topic up."""
    return topic


def attempt(case: str, call: Callable[[], Any]) -> None:
    try:
        call()
    except UsageError as exc:
        print(f"{case}: {exc}", flush=True)
    else:
        print(f"{case}: no error", flush=True)


runner = DaprWorkflowAgentRunner(agent=Agent(name="misuse", tools=[lookup]), name="misuse")
runner.start()
attempt("started", lambda: audit_runner(runner))
runner.shutdown()
attempt("unknown read_only", lambda: audit_runner(runner, read_only=["lookupp"]))
attempt("first", lambda: audit_runner(runner, read_only=["lookup"]))
attempt("twice", lambda: audit_runner(runner))
print("done", flush=True)
