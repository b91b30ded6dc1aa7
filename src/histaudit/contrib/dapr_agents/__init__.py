"""Audit a dapr-agents ``DurableAgent`` in one line: ``wfr = audit_agent(agent)``.

Every tool not declared ``read_only`` runs as the side effect ``tool:<name>`` keyed by the
LLM's tool call, a tool's error is signed as a failed call, every LLM call is signed with
the provider's usage, and the agent's workflows and activities are registered on an
audited runtime at once (see :mod:`._adapter`). dapr-agents is imported by the caller, not
here (it needs dapr 1.18 + dapr-ext-workflow 1.18; ADR 0012).
"""

from ._adapter import VOLATILE_OUTPUT, audit_agent

__all__ = ["VOLATILE_OUTPUT", "audit_agent"]
