"""The Strands travel agent of ``app.py`` through Diagrid's other Strands entry, its own
``DurableAgent`` (which builds and starts its workflow runtime on its first call), audited
with one line (``audit_agent``).

``python durable_app.py`` books one trip (``durable("book a trip to Lisbon")``: the
workflow ``dapr.strands.Travel.workflow``, instance ``dapr.strands.Travel.workflow_<hex>``),
prints the agent's answer and ``ready``, and serves until killed.
"""

from __future__ import annotations

import threading

from app import travel_agent  # beside this file
from diagrid.agent.strands import DurableAgent

from histaudit.contrib.strands import audit_agent

if __name__ == "__main__":
    durable = audit_agent(DurableAgent(travel_agent(), name="travel"),
                          read_only=["search_flights"])
    print("answer:", durable("book a trip to Lisbon"), flush=True)
    print("ready", flush=True)
    threading.Event().wait()
