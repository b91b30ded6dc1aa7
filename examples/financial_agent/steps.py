"""The agent's plan: which activity each of its steps runs (no Dapr, no key needed)."""

from __future__ import annotations

STEPS = 100
RESEARCH = ("market_data", "financials", "competitors", "news", "filings")
"""The research activities, in the order each batch runs them; an ``analyze`` (the LLM
stand-in) follows every batch."""


def plan(steps: int = STEPS) -> list[str]:
    """The activity each step runs: batches of research then ``analyze``; the last step
    is ``send_report``. ``plan()[86]`` is what step 87 runs."""
    if steps < 2:
        raise ValueError("an agent has at least one research step and the report")
    cycle = [*RESEARCH, "analyze"]
    return [cycle[i % len(cycle)] for i in range(steps - 1)] + ["send_report"]
