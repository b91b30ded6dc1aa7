"""Audit an OpenAI Agents SDK agent run durably on Dapr by Diagrid's runner, in one line::

    runner = audit_runner(DaprWorkflowAgentRunner(agent=agent, name="travel"),
                          read_only=["search_flights"])

Every tool not declared ``read_only`` runs as the side effect ``tool:<name>`` keyed by the
LLM's tool call, a tool's exception is signed as a failed call, every LLM call is signed
with the provider's usage, and the runner's workflow runtime is an audited one (see
:mod:`._adapter` and the README beside this file). diagrid and openai-agents are imported
by the caller, not here.
"""

from ._adapter import VOLATILE_OUTPUT, audit_runner

__all__ = ["VOLATILE_OUTPUT", "audit_runner"]
