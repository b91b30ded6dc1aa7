"""Audit a CrewAI agent on Diagrid's runner in one line, before ``runner.start()``::

    runner = audit_runner(DaprWorkflowAgentRunner(agent=agent, name="travel"),
                          read_only=["search_flights"])

Every tool not declared ``read_only`` runs as the side effect ``tool:<name>`` keyed by the
LLM's tool call id, a tool that raises is signed as a failed call, every LLM call to an
OpenAI-compatible provider is signed with the provider's usage, and the runner's workflow
runtime is an audited one (see :mod:`._adapter`). CrewAI and diagrid are imported by the
caller, never here (``histaudit[crewai]``).
"""

from ._adapter import VOLATILE_OUTPUT, audit_runner

__all__ = ["VOLATILE_OUTPUT", "audit_runner"]
