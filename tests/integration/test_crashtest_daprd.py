"""The crash matrix on real daprd (``--engine daprd``) beside the same matrix on
durabletask-go: two triage points, app and engine crashes, judged the same on both, and
right; the JSON, the JUnit properties, the header and the rerun commands name the engine.
Split from ``test_crashtest.py`` (stop 47) to keep each file inside its CPU budget; and a
rerun (``--rerun-from``) crashed at its own points.
Cost: ≈ 35 s of CPU, 45–75 s of wall on a slow 2-core machine.
"""

from __future__ import annotations

import json
import shlex
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from histaudit import crashtest as ct
from histaudit.errors import UsageError
from support.cli import cli

pytestmark = [pytest.mark.engine, pytest.mark.crash]

TRIAGE = Path(__file__).resolve().parents[2] / "examples" / "triage" / "app.py"
TICKET = {"id": "T-1", "title": "Login page 500s"}


@pytest.mark.daprd
@pytest.mark.timeout(600)
def test_a_small_matrix_gives_the_same_verdicts_on_daprd(tmp_path: Path) -> None:
    """``--engine daprd``: the same points, app and engine crashes, judged the same as on
    durabletask-go — and right (so not merely equally wrong)."""
    fake_engine = tmp_path / "bin" / "durabletask-go"  # daprd's run must not touch it
    fake_engine.parent.mkdir()
    fake_engine.write_text("#!/bin/sh\necho 'not the engine for this run' >&2\nexit 3\n")
    fake_engine.chmod(0o755)
    points = ["before:summarize", "after_post"]
    verdicts: dict[str, dict[tuple[str, str], tuple[str, list[str], dict[str, int]]]] = {}
    walls: dict[str, float] = {}
    for engine in ("durabletask", "daprd"):
        json_file, junit_file = tmp_path / f"{engine}.json", tmp_path / f"{engine}.xml"
        env = {"HISTAUDIT_ENGINE_BIN": str(fake_engine)} if engine == "daprd" else {}
        began = time.monotonic()
        run = cli("crashtest", f"{TRIAGE}:triage", "--input", json.dumps(TICKET), "--engine",
                  engine, *(a for p in points for a in ("--point", p)), "--json", json_file,
                  "--junit", junit_file, cwd=tmp_path, env=env, timeout=500)
        walls[engine] = time.monotonic() - began
        assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
        doc = json.loads(json_file.read_text())
        assert doc["engine"] == engine
        assert doc["clean"]["status"] == "COMPLETED" and doc["clean"]["effects"] == {
            "post-comment": 1}
        verdicts[engine] = {(p["point"], p["kind"]): (p["outcome"], p["codes"], p["effects"])
                            for p in doc["points"]}
        reruns = [shlex.split(p["rerun"]) for p in doc["points"]]
        props = {e.get("name"): e.get("value")
                 for e in ET.parse(junit_file).getroot().iter("property")}
        assert props["engine"] == engine
        header = run.stdout.splitlines()[1]
        if engine == "daprd":
            assert header.endswith(", engine daprd"), header
            assert all(r[r.index("--engine") + 1] == "daprd" for r in reruns), reruns
        else:
            assert "engine" not in header and not any("--engine" in r for r in reruns)
    print(f"\nsmall matrix: durabletask {walls['durabletask']:.1f}s, "
          f"daprd {walls['daprd']:.1f}s")
    assert verdicts["daprd"] == verdicts["durabletask"]
    got = verdicts["daprd"]
    assert set(got) == {(p, k) for p in points for k in ("app", "engine")}
    for kind in ("app", "engine"):
        assert got[("before:summarize", kind)][0] == "identical", got
        outcome, codes, effects = got[("after_post", kind)]
        assert outcome == "findings" and "effect-duplicate" in codes, got
        assert effects == {"post-comment": 2}


def test_a_spec_names_a_known_engine() -> None:
    with pytest.raises(UsageError, match="engine must be one of durabletask, daprd, not 'dapr'"):
        ct.CrashSpec(target=f"{TRIAGE}:triage", input=TICKET, engine="dapr")
    spec = ct.CrashSpec(target=f"{TRIAGE}:triage", input=TICKET, engine="daprd",
                        lock_timeout=9)
    rerun = shlex.split(spec.rerun_command("after_post", engine_crash=True))
    assert rerun[-2:] == ["--engine", "daprd"] and "--lock-timeout" not in rerun


SWEEP_APP = Path(__file__).resolve().parent / "apps" / "sweep_app.py"


@pytest.mark.daprd
@pytest.mark.timeout(300)
def test_a_rerun_is_crashed_at_its_own_points(tmp_path: Path) -> None:
    """``--rerun-from 5``: every run completes ``steps`` as a source, then reruns it from
    event 5 (``fragile``); only the rerun's passes are points (fragile and the last add —
    the copied ``stamp`` is declared but never reached), and a crash at each recovers to
    the clean rerun's output, whose stamp is the source's (copied, not run again)."""
    json_file = tmp_path / "rerun.json"
    run = cli("crashtest", f"{SWEEP_APP}:steps", "--input", "0", "--engine", "daprd",
              "--rerun-from", "5", "--no-engine-points", "--json", json_file,
              cwd=tmp_path, timeout=280)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    doc = json.loads(json_file.read_text())
    assert doc["clean"]["output"] == {"x": 4, "stamp": {"x": 3, "runs": 1}}
    # the rerun's own passes, numbered in the rerun's process: its add is its first
    assert [p["point"] for p in doc["points"]] == [
        "before:fragile", "after:fragile", "before:add", "after:add"]
    assert {p["outcome"] for p in doc["points"]} == {"identical"}
    assert all("--rerun-from 5" in p["rerun"] for p in doc["points"])
    refused = cli("crashtest", f"{SWEEP_APP}:steps", "--input", "0", "--rerun-from", "5",
                  cwd=tmp_path)
    assert refused.returncode == 2 and "--rerun-from needs --engine daprd" in refused.stderr
