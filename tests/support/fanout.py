"""The rig of the fan-out app (tests/integration/apps/fanout_app.py): its app process on
an engine, with a ledger and key of its own, crashed and resumed, verified."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from histaudit.crash import CRASH_EXIT_CODE
from histaudit.ledger.keys import generate_keypair
from support.apps import AppProcess, AppRig
from support.cli import cli

__all__ = ["APP", "RESUME_LIMIT_S", "Fanout"]

APP = Path(__file__).resolve().parents[1] / "integration" / "apps" / "fanout_app.py"
RESUME_LIMIT_S = 60.0  # far below the standalone engine's 2-minute lock timeout
READY_LIMIT_S = 60.0


class Fanout(AppRig):
    def __init__(self, tmp: Path, engine: Any, *, stateful: bool) -> None:
        super().__init__(engine)
        self.tmp = tmp
        self.url = f"sqlite:///{tmp / 'ledger.db'}"
        key, self.trust, _ = generate_keypair(tmp / "keys", name="fanout")
        env = {"HISTAUDIT_DB": self.url, "HISTAUDIT_KEY": str(key), "DATA_DIR": str(tmp),
               "PYTHONUNBUFFERED": "1"}
        if stateful:
            env["STATEFUL_HISTORY"] = "1"
        # a CI run at load 10+ once took 30 s for a restarted app's worker to connect
        self.app = self.add_app(AppProcess(engine, [APP], log=tmp / "app.log", ready="ready",
                                           env=env, ready_timeout=READY_LIMIT_S))

    def searches(self) -> list[str]:
        log = self.tmp / "searches.log"
        return log.read_text().splitlines() if log.exists() else []

    def crash_and_resume(self, crash_at: str) -> float:
        """Crash at ``crash_at``, restart at once; seconds from restart to completion."""
        self.app.start(HISTAUDIT_CRASH_AT=crash_at)
        instance = self.schedule("procure", None)
        assert self.app.wait_exit(60) == CRASH_EXIT_CODE, self.app.tail()
        began = time.monotonic()
        self.app.start()
        state = self.finish(instance)
        took = time.monotonic() - began
        assert state.runtime_status.name == "COMPLETED", self.app.tail()
        assert json.loads(state.serialized_output) == 280
        self.app.kill()
        self.last = instance
        return took

    def finish(self, instance: str) -> Any:
        """Wait for ``instance`` within :data:`RESUME_LIMIT_S`; on a timeout the error
        carries the app's and the engine's logs, which say where the turn stopped."""
        try:
            return self.wait(instance, RESUME_LIMIT_S)
        except TimeoutError:
            log = getattr(self.engine, "log_tail", lambda: "")()
            raise AssertionError(f"{instance} not done in {RESUME_LIMIT_S:.0f}s\napp:\n"
                                 f"{self.app.tail()}\nengine:\n{log}") from None

    def verify(self, instance: str) -> list[str]:
        r = cli("verify", instance, "--json", "--db", self.url, "--trust", self.trust,
                "--engine", self.engine.address, cwd=self.tmp)
        assert r.returncode == 0, r.stdout + r.stderr
        return sorted({f["code"] for f in json.loads(r.stdout)["reports"][0]["findings"]})
