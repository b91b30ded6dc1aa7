"""Adapters that audit agent frameworks running durably on Dapr, one package each.

Each imports only the port (:mod:`histaudit.adapters`), :mod:`histaudit.errors` and
:mod:`histaudit.config`, and no other adapter; the core never imports one. A framework is
imported by the user's code, never here: each package is an optional extra
(``histaudit[openai-agents]`` …).

=====================  =============================================================
``dapr_agents``        dapr-agents' ``DurableAgent``: ``audit_agent(agent)``
``openai_agents``      the OpenAI Agents SDK on Diagrid's runner: ``audit_runner(runner)``
``langgraph``          LangGraph on Diagrid's graph runner: ``audit_runner(runner)``
``strands``            Strands on Diagrid's runner: ``audit_runner(runner)``
``crewai``             CrewAI on Diagrid's runner: ``audit_runner(runner)``
=====================  =============================================================
"""
