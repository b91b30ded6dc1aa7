"""Audit a Strands agent on Diagrid's runner in one line, before ``runner.start()``::

    runner = audit_runner(DaprWorkflowAgentRunner(agent=agent, name="travel"),
                          read_only=["search_flights"])

Every tool not declared ``read_only`` runs as the side effect ``tool:<name>`` keyed by the
LLM's tool call id, a tool's error result is signed as a failed call, every model call is
signed with the provider's usage, and the runner's workflow runtime is an audited one (see
:mod:`._adapter`). Diagrid's own Strands ``DurableAgent``, before its first call::

    durable = audit_agent(DurableAgent(agent, name="travel"), read_only=["search_flights"])

Strands and diagrid are imported by the caller, never here (``histaudit[strands]``).
"""

from ._adapter import VOLATILE_OUTPUT, audit_agent, audit_runner

__all__ = ["VOLATILE_OUTPUT", "audit_agent", "audit_runner"]
