"""Re-record the golden workflow histories in tests/golden/histories/ on the real engine.

    .venv/bin/python tests/golden/record_histories.py        (after `make venv engine`)

Starts durabletask-go on a throwaway SQLite file, runs the example workflows of
``examples/nondeterminism/workflows.py`` once each with the plain Dapr SDK runtime, fetches
each instance's history with GetInstanceHistory and writes it with
``histaudit.replay.save_history``. The unit tests (tests/unit/replay/test_replayer.py)
replay these files without any engine.

``wall_clock`` is recorded a few seconds before its deadline, so it took the fast path;
any replay after that takes the slow path, which is the point of that example.
"""

from __future__ import annotations

import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent / "histories"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

import dapr.ext.workflow as wf
from examples.nondeterminism import workflows

from histaudit.replay import History, replay
from histaudit.testing.engine import EngineProcess

RUNS = {  # file stem -> (workflow, input, instance id)
    "order": (workflows.order, {"id": "A-17", "items": ["book", "lamp"], "amount": 42},
              "golden-order"),
    "approval": (workflows.approval, "lamp", "golden-approval"),
    "wall_clock": (workflows.wall_clock, None, "golden-wall-clock"),
    "dice": (workflows.dice, None, "golden-dice"),
}
TIMEOUT_S = 60


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="histaudit-golden-") as tmp, \
            EngineProcess(state_dir=tmp) as engine:
        host, port = engine.address.rsplit(":", 1)
        runtime = wf.WorkflowRuntime(host=host, port=port)
        workflows.register(runtime)
        runtime.start()
        client = wf.DaprWorkflowClient(host=host, port=port)
        try:
            for stem, (fn, payload, instance) in RUNS.items():
                if stem == "wall_clock":
                    payload = {"deadline": (datetime.now(UTC) + timedelta(seconds=5)).isoformat()}
                client.schedule_new_workflow(fn, input=payload, instance_id=instance)
                if stem == "approval":
                    client.wait_for_workflow_start(instance, timeout_in_seconds=TIMEOUT_S)
                    client.raise_workflow_event(instance, "approve", data=True)
                state = client.wait_for_workflow_completion(instance,
                                                            timeout_in_seconds=TIMEOUT_S)
                if state is None or state.runtime_status.name != "COMPLETED":
                    raise SystemExit(f"{stem}: did not complete: {state}")
                events = History.fetch(engine.address, instance).events
                if stem != "wall_clock":  # past its deadline by the next replay, not now
                    check = replay(events, fn)
                    if stem != "dice" and not check.ok:
                        raise SystemExit(f"{stem}: fresh history does not replay:\n"
                                         f"{check.explain()}")
                path = History.of(events).save(OUT / f"{stem}.json")
                print(f"{stem}: {len(events)} events -> {path.relative_to(ROOT)}")
        finally:
            client.close()
            runtime.shutdown()


if __name__ == "__main__":
    main()
