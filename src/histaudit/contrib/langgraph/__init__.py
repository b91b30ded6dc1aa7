"""Audit a LangGraph graph run durably on Dapr by Diagrid's graph runner in one line:
``runner = audit_runner(DaprWorkflowGraphRunner(graph=graph, name="travel"))``.

Every tool of the graph's ToolNodes not declared ``read_only`` runs as the side effect
``tool:<name>`` keyed by the ToolCall id, a tool that raises is signed as a failed call,
every OpenAI chat completion a node makes is signed with the provider's usage, and the
runner's workflow and activities run on an audited runtime (see :mod:`._adapter`).
LangGraph and diagrid are imported by the caller, not here.
"""

from ._adapter import audit_runner

__all__ = ["audit_runner"]
