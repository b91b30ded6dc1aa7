"""``histaudit replay`` on an app written exactly in the Dapr docs' style.

``@wfr.workflow`` registers the function and hands back a zero-argument stand-in; before
histaudit.usercode unwrapped it, ``replay --workflow app:greeting_wf`` failed on every
such app with "takes 0 positional arguments". The app runs on the real engine, in this
process (its runtime connects like any app's), and the CLI replays what the engine holds.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import dapr.ext.workflow as wf
import pytest

from histaudit.replay import History, replay
from histaudit.testing.engine import EngineProcess
from support.cli import cli, exits

pytestmark = pytest.mark.engine

APP = Path(__file__).resolve().parent / "apps" / "docs_style_app.py"


@pytest.fixture
def app(engine: EngineProcess, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The docs-style app module, its runtime started against ``engine``."""
    for key, value in engine.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("DAPR_GRPC_ENDPOINT", raising=False)
    spec = importlib.util.spec_from_file_location("docs_style_app_under_test", APP)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.wfr.start()
    try:
        yield module
    finally:
        module.wfr.shutdown()


def _run(engine: EngineProcess, workflow: object, name: str, instance: str) -> str:
    host, port = engine.address.rsplit(":", 1)
    client = wf.DaprWorkflowClient(host=host, port=port)
    try:
        client.schedule_new_workflow(workflow, input=name, instance_id=instance)
        state = client.wait_for_workflow_completion(instance, timeout_in_seconds=60)
    finally:
        client.close()
    assert state is not None and state.runtime_status.name == "COMPLETED", state
    return str(state.serialized_output)


def test_replay_accepts_decorated_workflows_and_the_runtime(
        app: ModuleType, engine: EngineProcess, tmp_path: Path) -> None:
    out = _run(engine, app.greeting_wf, "Ada", "docs-1")
    assert json.loads(out) == "Hello, Ada! (8 letters)"
    _run(engine, app.shouting_wf, "bob", "docs-2")

    # The decorated function with a name, a bare-decorated one, and the runtime object.
    for instance, target in (("docs-1", "greeting_wf"), ("docs-2", "shouting_wf"),
                             ("docs-1", "wfr")):
        r = cli("replay", instance, "--engine", engine.address,
                "--workflow", f"{APP}:{target}", "--json", cwd=tmp_path)
        exits(r, 0)
        item = json.loads(r.stdout)
        result = item["replay"]
        assert item["ok"] is True and result["ok"] is True, item
        assert result["divergence"] is None and result["outcome"] == "completed"
        assert result["workflow"] == ("shouting_wf" if instance == "docs-2" else "greeting_wf")

    # The library takes the decorated stand-in too, and a saved history replays offline.
    history = History.fetch(engine.address, "docs-1")
    saved = history.save(tmp_path / "docs-1.json")
    assert replay(History.load(saved), app.greeting_wf).ok


def test_a_decorated_workflow_that_changed_is_a_divergence_not_a_crash(
        app: ModuleType, engine: EngineProcess, tmp_path: Path) -> None:
    _run(engine, app.greeting_wf, "Ada", "docs-3")
    changed = tmp_path / "changed_app.py"
    changed.write_text(APP.read_text().replace("input=hello)", "input=hello + '!')"))
    r = cli("replay", "docs-3", "--engine", engine.address,
            "--workflow", f"{changed}:greeting_wf", "--json", cwd=tmp_path)
    exits(r, 1)
    result = json.loads(r.stdout)["replay"]
    assert result["divergence"]["kind"] == "different-input", result
    assert "count_letters" in result["divergence"]["message"]
