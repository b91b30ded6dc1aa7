"""CrewAI agents on Diagrid's runner, audited through the adapter port (:mod:`histaudit.adapters`).

Diagrid's ``diagrid.agent.crewai.DaprWorkflowAgentRunner`` (0.5.3) runs a CrewAI ``Agent``
as one workflow whose activities are ``call_llm_activity`` (one LLM call:
``litellm.completion(model, messages, tools)``, called by diagrid itself, not through
CrewAI's ``LLM``) and ``execute_tool_activity`` (one tool call: the agent's tool object's
``_run(**args)``), one after another, each with a retry policy of 3 attempts. Dapr
delivers each at least once, so after a crash a tool that booked, sent or paid does it
again, and an LLM call is billed again. What this adapter adds, on the runner's own agent,
before ``runner.start()``:

* every tool but the ``read_only`` ones runs as the side effect ``tool:<name>`` (the name
  the runner gives the tool: its function's name) keyed by the LLM's tool call id (read
  from the activity's input, ``{"tool_call": {"id": ...}}``): a re-delivery that finds it
  done gets the recorded result without calling the tool (``effect-deduplicated``); one
  that finds only its intent calls it again and the verifier says so
  (``effect-uncertain``). ``_run`` is wrapped on the tool object; outside an audited
  activity the tool just runs.
* a tool that raises is signed ``effect.failed`` with the exception's class, never done
  (diagrid then catches it and hands the LLM its text as an error result).
* every LLM call: litellm reaches an OpenAI-compatible provider (``openai/<model>``,
  any ``base_url``) through the ``openai`` package's chat completions, which
  :func:`histaudit.adapters.watch_openai` signs with the provider's usage. A provider
  litellm reaches by its own HTTP code (``anthropic/``, ``bedrock/`` …) is not signed:
  diagrid calls ``litellm.completion`` by name inside its activity, with no hook an
  adapter can hold, and litellm's own success callbacks run on a background thread after
  the call has returned (too late to sign inside the activity).
* the runner's ``WorkflowRuntime`` is given over to an audited one
  (:func:`histaudit.contrib._diagrid.take_over_runner`), with the workflow's output fields
  that hold the LLM's tool call ids declared volatile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from histaudit import adapters
from histaudit.contrib._diagrid import take_over_runner
from histaudit.errors import UsageError

__all__ = ["VOLATILE_OUTPUT", "audit_runner"]

VOLATILE_OUTPUT = ("$.messages[*].tool_calls[*].id", "$.messages[*].tool_call_id")
"""Fields of the runner workflow's output (``AgentWorkflowOutput``: the conversation) that
differ between two correct runs: the LLM's tool call ids, which a real model draws anew on
every answer. The crash matrix leaves them out of comparisons."""

_GUARDED = "_histaudit_guarded"


def audit_runner(runner: Any, *, read_only: Iterable[str] = ()) -> Any:
    """Audit Diagrid's CrewAI ``DaprWorkflowAgentRunner`` (built, not started): every tool
    of its agent but the ``read_only`` ones guarded, every LLM call to an OpenAI-compatible
    provider signed, its runtime an audited one (``runner.start()`` starts it); return
    the runner.

    ``read_only`` names tools as the runner does (a ``@tool`` function's name); a name it
    has not is a UsageError, and so is a runner already audited or started."""
    agent = getattr(runner, "agent", None)
    name_of = getattr(runner, "_get_tool_name", None)
    if agent is None or not callable(name_of) or not hasattr(agent, "tools"):
        raise UsageError(f"audit_runner(): {type(runner).__name__} is not Diagrid's CrewAI "
                         "runner (it has no agent with tools and no _get_tool_name)")
    tools = {str(name_of(tool)): tool for tool in (agent.tools or [])}
    exempt = adapters.read_only_tools(read_only, tools, "audit_runner()")
    runtime = take_over_runner(runner, "audit_runner()")
    for name, tool in tools.items():
        if name not in exempt:
            _guard(tool, name)
    adapters.watch_openai()
    workflow = getattr(runner, "workflow_name", None)
    if isinstance(workflow, str):
        runtime.mark_volatile(workflow, *VOLATILE_OUTPUT)
    return runner


def _guard(tool: Any, name: str) -> None:
    """Shadow ``tool._run`` (what diagrid's activity calls) for this tool object. CrewAI's
    tools are pydantic models, which refuse attributes that are not fields: the instance
    attribute is set past pydantic, for this tool only."""
    run = getattr(tool, "_run", None)
    if not callable(run) or getattr(run, _GUARDED, False):
        return

    def call(*args: Any, **kwargs: Any) -> Any:
        result = run(*args, **kwargs)
        # an async tool's coroutine runs inside the guard, as diagrid would run it after
        return asyncio.run(result) if asyncio.iscoroutine(result) else result

    def run_guarded(*args: Any, **kwargs: Any) -> Any:
        return adapters.guarded_call(name, _tool_call_id(), lambda: call(*args, **kwargs))

    setattr(run_guarded, _GUARDED, True)
    object.__setattr__(tool, "_run", run_guarded)


def _tool_call_id() -> str | None:
    """The id the LLM gave the tool call being run: diagrid's ``execute_tool_activity`` is
    called with ``{"tool_call": {"id": ..., "name": ..., "args": ...}, ...}``."""
    run = adapters.current_activity()
    payload = run.input if run is not None else None
    call = payload.get("tool_call") if isinstance(payload, dict) else None
    found = call.get("id") if isinstance(call, dict) else None
    return found if isinstance(found, str) else None

