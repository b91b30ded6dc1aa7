"""The seed's scenario in the OpenAI Agents SDK: a 100-step agent, audited with one line.

One tool, ``report``, appends ``step <n>`` to ``$DATA_DIR/report.txt`` (the side effect a
crash must not repeat); the LLM (``python -m examples.frameworks.stub_llm --steps 100`` at
``$STUB_LLM_URL``) asks for it once per turn, step 1 to step 100, then answers. Crash it
right after step 87's tool activity body (``HISTAUDIT_CRASH_AT=after:execute_tool_activity#87``:
the 87th tool activity this process ran) and start it again: the re-delivered step 87
finds its effect done and returns the recorded result, so the report has 100 lines and
``histaudit verify`` shows step 87, and only it, deduplicated. Serves like ``app.py``
(``ready``, until killed); the workflow ``dapr.openai.Steps.workflow`` starts with
``{"task": "report 100 steps"}``.
"""

from __future__ import annotations

import os
from pathlib import Path

from app import build_runner, serve

from agents import Agent, function_tool

REPORT = Path(os.environ.get("DATA_DIR", ".")) / "report.txt"
STEPS = 100


@function_tool
def report(step: int) -> str:
    """Report that a step is done."""
    with REPORT.open("a", encoding="utf-8") as fh:
        fh.write(f"step {step}\n")
    return f"step {step} reported"


AGENT = Agent(name="steps", instructions="Report each step.", model="stub-travel",
              tools=[report])

if __name__ == "__main__":
    # STEPS tool turns and the answer: the runner's loop must allow STEPS + 1 LLM calls
    serve(build_runner(AGENT, read_only=(), max_iterations=STEPS + 1))
