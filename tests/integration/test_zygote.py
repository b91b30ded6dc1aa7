"""The sweep's fork server: workers forked from one process that loaded the app, on the
real engine — they connect, crash with the crash status, report it; an app that starts
a thread at import is not forked from (workers are spawned instead)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from histaudit import crashtest as ct
from histaudit.crash import CRASH_EXIT_CODE, ENV_CRASH_AT
from histaudit.crashtest.judge import decode_output
from histaudit.crashtest.sandbox import Sandbox

pytestmark = [pytest.mark.engine, pytest.mark.crash]

APPS = Path(__file__).resolve().parent / "apps"


def parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def test_forked_workers_run_crash_and_report_their_status(engine_binary: Path) -> None:
    spec = ct.CrashSpec(target=f"{APPS / 'sweep_app.py'}:steps", input=0, timeout=30)
    with Sandbox(spec, label="zygote", fork=True) as sb:
        sb.start_engine()
        crashing = sb.spawn("crash", {ENV_CRASH_AT: "after:add#2"})
        held = sb.spawn("resume", hold=True)
        assert held.proc.pid is None  # a held fork is forked when released
        crashing.wait_ready()
        zygote = sb._zygote()
        assert zygote is not None and isinstance(crashing.proc.pid, int)
        assert parent_of(crashing.proc.pid) == zygote.proc.pid  # forked, not spawned
        sb.schedule()
        sb.wait_terminal(30, watch=crashing.exited)
        assert crashing.proc.poll() == CRASH_EXIT_CODE
        assert "crash point 'after:add' reached" in crashing.output()
        held.release()
        held.wait_ready()
        state = sb.wait_terminal(30)
        assert state is not None and state.status == "COMPLETED", state
        assert decode_output(state.output_text) == {"x": 4,
                                                       "stamp": {"x": 3, "runs": 1}}


def test_an_app_that_starts_threads_at_import_is_spawned_not_forked(
        engine_binary: Path) -> None:
    spec = ct.CrashSpec(target=f"{APPS / 'threaded_app.py'}:single", input=1, timeout=30)
    with Sandbox(spec, label="zygote", fork=True) as sb:
        sb.start_engine()
        worker = sb.spawn("w")
        worker.wait_ready()
        assert sb._zygote() is None
        assert sb.fork_refused is not None
        assert "starts threads when imported: workers cannot be forked" in sb.fork_refused
        assert parent_of(worker.proc.pid) == os.getpid()  # spawned by us instead
        sb.schedule()
        state = sb.wait_terminal(30)
        assert state is not None and state.status == "COMPLETED"
