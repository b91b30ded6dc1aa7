"""``histaudit replay --engine ADDR`` for an agent module with no ``DAPR_*`` variables
(issue 48, item 6). Cost: ≈ 12 s of CPU (one daprd stack, one agent run, two replays).

The example agent (``examples/durable_agent/app.py``) is the honest subject: dapr-agents
1.0.9 builds a ``DaprClient`` while the module is imported, whose constructor waits for the
sidecar's *HTTP* health endpoint and then asks daprd for its metadata over gRPC. A module
that only builds ``DaprWorkflowClient()`` or ``WorkflowRuntime()`` at import would prove
nothing: their gRPC channels connect lazily, so it imports without any sidecar.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from examples.durable_agent.stub_llm import StubLLM

from histaudit.ledger.keys import generate_keypair
from histaudit.testing import teardown
from histaudit.testing.daprd import DaprdStack
from support.apps import AppProcess, AppRig
from support.cli import cli
from support.repo import REPO

pytestmark = [pytest.mark.daprd, pytest.mark.engine]

EXAMPLE = REPO / "examples" / "durable_agent"
APP = EXAMPLE / "app.py"
NO_SIDECAR = dict.fromkeys(("DAPR_GRPC_ENDPOINT", "DAPR_RUNTIME_HOST", "DAPR_GRPC_PORT",
                            "DAPR_HTTP_ENDPOINT", "DAPR_HTTP_PORT"), "")
"""Every variable the SDK finds its sidecar by, unset (empty is unset, for the SDK too)."""


@pytest.fixture
def ran(tmp_path: Path) -> Iterator[tuple[AppRig, str, str, StubLLM]]:
    """One clean run of the agent on daprd: (rig, instance, ledger URL, stub LLM)."""
    engine = DaprdStack(state_dir=tmp_path / "engine", resources=EXAMPLE / "components")
    engine.start()
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    key, _trust, _ = generate_keypair(tmp_path / "keys", name="agent")
    try:
        with StubLLM() as llm, AppRig(engine) as rig:
            app = rig.add_app(AppProcess(
                engine, [APP], log=tmp_path / "app.log", ready="ready", ready_timeout=90,
                env={"HISTAUDIT_DB": url, "HISTAUDIT_KEY": str(key),
                     "DATA_DIR": str(tmp_path), "STUB_LLM_URL": llm.url}))
            app.start()
            instance = rig.schedule("dapr.agents.scribe.workflow", {"task": "note hello"})
            assert rig.wait(instance, 120).runtime_status.name == "COMPLETED", app.tail()
            app.kill()  # the replay needs daprd, not the app
            yield rig, instance, url, llm
    finally:
        teardown(engine)


def test_replay_with_the_engine_s_address_alone_imports_the_agent(
        ran: tuple[AppRig, str, str, StubLLM], tmp_path: Path) -> None:
    rig, instance, url, llm = ran
    env = {**NO_SIDECAR, "DAPR_HEALTH_TIMEOUT": "5", "DATA_DIR": str(tmp_path),
           "STUB_LLM_URL": llm.url}
    began = time.monotonic()
    r = cli("replay", "--workflow", f"{APP}:wfr", "--engine", rig.engine.address, instance,
            "--db", url, "--json", cwd=tmp_path, env=env)
    took = time.monotonic() - began
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "Health check" not in r.stdout + r.stderr  # the SDK's noise while it waited
    doc = json.loads(r.stdout)
    assert doc["ok"] is True and doc["output_check"]["status"] == "same", doc
    assert took < 30, took
    assert llm.calls == 4  # the clean run's; replay asked nothing
    # set variables are the user's: a wrong sidecar stays wrong, said in one line
    r = cli("replay", "--workflow", f"{APP}:wfr", "--engine", rig.engine.address, instance,
            cwd=tmp_path, env={**env, "DAPR_HTTP_PORT": "9", "DAPR_HEALTH_TIMEOUT": "1"})
    ours = [line for line in r.stderr.splitlines() if line.startswith("histaudit:")]
    assert r.returncode == 2 and len(ours) == 1, r.stderr[-2000:]
    assert "Dapr health check timed out" in ours[0], ours
