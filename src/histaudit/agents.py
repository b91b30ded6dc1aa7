"""``histaudit.agents``, where ``audit_agent`` was first: kept importable for apps written
against it. The adapter lives in :mod:`histaudit.contrib.dapr_agents`."""

from histaudit.adapters import TOOL_EFFECT_PREFIX
from histaudit.contrib.dapr_agents import VOLATILE_OUTPUT, audit_agent

__all__ = ["TOOL_EFFECT_PREFIX", "VOLATILE_OUTPUT", "audit_agent"]
