"""An app with ``wfr = AuditedWorkflowRuntime()`` at module level, as Dapr's docs write one.

Importing it needs no key and creates no ledger (``histaudit replay`` and the crash
matrix import apps they never start); ``start()`` opens both, and fails there with the
one-line error construction used to give. ``HISTAUDIT_ENABLED=0`` runs the same app
unaudited on the real engine.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from histaudit.config import Settings
from histaudit.errors import KeyMaterialError, StoreError, UsageError
from histaudit.ledger.keys import generate_keypair
from histaudit.testing.engine import EngineProcess
from support.apps import AppProcess, AppRig
from support.cli import cli, exits
from support.repo import ORDER_HISTORY, app_env

APP_READY = "APP READY"
INTERCEPTOR_APP = Path(__file__).resolve().parent / "apps" / "interceptor_app.py"

DOCS_STYLE_APP = textwrap.dedent('''
    from examples.nondeterminism import workflows
    from histaudit.dapr import AuditedWorkflowRuntime

    wfr = AuditedWorkflowRuntime()
    workflows.register(wfr)
''')


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HISTAUDIT_")}
    return {**env, **app_env(), "PYTHONDONTWRITEBYTECODE": "1", **extra}


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    """An otherwise empty directory holding only the docs-style app."""
    d = tmp_path / "app"
    d.mkdir()
    (d / "docs_app.py").write_text(DOCS_STYLE_APP, encoding="utf-8")
    return d


def test_importing_the_app_needs_no_key_and_creates_no_file(app_dir: Path) -> None:
    r = subprocess.run([sys.executable, "-c",
                        "import docs_app; assert not docs_app.wfr.recorder.bound"],
                       cwd=app_dir, env=_clean_env(), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert _files(app_dir) == {"docs_app.py"}


def test_replay_of_the_apps_runtime_needs_no_key_and_records_nothing(app_dir: Path) -> None:
    """``histaudit replay --workflow app.py:wfr`` replays the audited registrations as
    they are, and signs nothing: a replay is not an execution."""
    r = cli("replay", "golden-order", "--workflow", f"{app_dir / 'docs_app.py'}:wfr",
            "--history", ORDER_HISTORY, "--json", cwd=app_dir, env=app_env())
    exits(r, 0)
    assert '"ok": true' in r.stdout
    assert _files(app_dir) == {"docs_app.py"}


def test_start_without_a_key_is_the_one_line_error_and_creates_no_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from histaudit.dapr import AuditedWorkflowRuntime

    monkeypatch.chdir(tmp_path)
    for name in ("HISTAUDIT_KEY", "HISTAUDIT_DB", "HISTAUDIT_ENABLED"):
        monkeypatch.delenv(name, raising=False)
    wfr = AuditedWorkflowRuntime(host="127.0.0.1", port="1")  # nothing listens there
    with pytest.raises(KeyMaterialError) as info:
        wfr.start()
    message = str(info.value)
    assert message.startswith("AuditedWorkflowRuntime: no signing key: pass key=PATH or set "
                              "HISTAUDIT_KEY") and "\n" not in message
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(UsageError, match=r"AuditedWorkflowRuntime\.start\(\)"):
        _ = wfr.ledger


def test_a_bad_ledger_url_is_reported_by_start_not_by_construction(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from histaudit.dapr import AuditedWorkflowRuntime

    key, _, _ = generate_keypair(tmp_path / "keys", name="app")
    monkeypatch.delenv("HISTAUDIT_ENABLED", raising=False)
    missing_dir = tmp_path / "nowhere" / "ledger.db"
    wfr = AuditedWorkflowRuntime(host="127.0.0.1", port="1", key=str(key),
                                 ledger=f"sqlite:///{missing_dir}")
    with pytest.raises(StoreError, match=r"^AuditedWorkflowRuntime: ") as info:
        wfr.start()
    assert "\n" not in str(info.value)
    assert not missing_dir.parent.exists()


def test_settings_passed_in_are_used_instead_of_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``AuditedWorkflowRuntime(settings=...)`` (issue #51): the environment says auditing
    is off and names no key or ledger; the settings passed in decide all three. (The
    ledger they name cannot be created, so start stops there, before any worker.)"""
    from histaudit import AuditedWorkflowRuntime

    key, _, _ = generate_keypair(tmp_path / "keys", name="app")
    for name in ("HISTAUDIT_KEY", "HISTAUDIT_DB"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HISTAUDIT_ENABLED", "0")
    missing = tmp_path / "given" / "ledger.db"
    settings = Settings.from_env({"HISTAUDIT_KEY": str(key),
                                  "HISTAUDIT_DB": f"sqlite:///{missing}"})
    wfr = AuditedWorkflowRuntime(host="127.0.0.1", port="1", settings=settings)
    assert wfr.audited  # not the environment's HISTAUDIT_ENABLED=0
    with pytest.raises(StoreError, match=r"^AuditedWorkflowRuntime: ") as info:
        wfr.start()  # the key loaded from the settings; their ledger opened, and refused
    assert str(missing.parent) in str(info.value)


def test_a_ledger_that_cannot_be_written_is_refused_by_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store's own verdict (``Ledger.read_only``), not a second check of its own that
    root passes: a ledger opened read-only would take no entry, and the app would run
    unrecorded until its first append failed."""
    from histaudit.dapr import AuditedWorkflowRuntime
    from histaudit.ledger.store import Ledger

    key, _, _ = generate_keypair(tmp_path / "keys", name="app")
    monkeypatch.delenv("HISTAUDIT_ENABLED", raising=False)
    path = tmp_path / "ledger.db"
    Ledger.open(f"sqlite:///{path}", create=True).close()
    wfr = AuditedWorkflowRuntime(host="127.0.0.1", port="1", key=str(key),
                                 ledger=f"sqlite:///{path}?mode=ro")
    with pytest.raises(StoreError, match=r"^AuditedWorkflowRuntime: ledger .* cannot be "
                                         r"written: ") as info:
        wfr.start()
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(("text", "on"), [
    (None, True), ("", True), ("1", True), ("true", True), ("YES", True), (" on ", True),
    ("0", False), ("false", False), ("No", False), ("off", False)])
def test_the_off_switch_reads_the_usual_words(text: str | None, on: bool) -> None:
    env = {} if text is None else {"HISTAUDIT_ENABLED": text}
    assert Settings.from_env(env).audit_enabled is on


@pytest.mark.parametrize("text", ["2", "disabled", "nope", "0 1"])
def test_any_other_off_switch_value_is_a_one_line_error_naming_it(text: str) -> None:
    with pytest.raises(UsageError, match=r"^HISTAUDIT_ENABLED must be ") as info:
        _ = Settings.from_env({"HISTAUDIT_ENABLED": text}).audit_enabled
    assert repr(text) in str(info.value) and "\n" not in str(info.value)


def test_the_same_app_built_unaudited_wraps_nothing(app_dir: Path) -> None:
    probe = ("import docs_app\n"
             "from examples.nondeterminism import workflows\n"
             "from histaudit import sdk\n"
             "reg = sdk.registry_of(docs_app.wfr)\n"
             "assert not docs_app.wfr.audited and not docs_app.wfr.checks_replayed_results\n"
             "assert not any(getattr(f, '__wrapped__', None) for f in reg.activities.values())\n")
    r = subprocess.run([sys.executable, "-c", probe], cwd=app_dir,
                       env=_clean_env(HISTAUDIT_ENABLED="off"), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert _files(app_dir) == {"docs_app.py"}


@pytest.fixture
def unaudited(engine: EngineProcess, tmp_path: Path) -> Iterator[tuple[AppRig, Path, Path]]:
    """tests/integration/apps/interceptor_app.py with HISTAUDIT_ENABLED=0 and no key."""
    data = tmp_path / "data"
    data.mkdir()
    ledger = tmp_path / "ledger.db"
    env = {"APP_DATA": str(data), "HISTAUDIT_DB": f"sqlite:///{ledger}",
           "HISTAUDIT_ENABLED": "0", "PYTHONUNBUFFERED": "1"}
    with AppRig(engine) as rig:
        rig.add_app(AppProcess(engine, [INTERCEPTOR_APP], log=tmp_path / "app.log", env=env,
                               ready=APP_READY, ready_timeout=30.0)).start()
        yield rig, data, ledger


@pytest.mark.engine
def test_histaudit_enabled_0_runs_the_app_unaudited_on_the_engine(
        unaudited: tuple[AppRig, Path, Path]) -> None:
    rig, data, ledger = unaudited
    instance = rig.schedule("billing", 42)
    state = rig.wait(instance)
    assert state.runtime_status.name == "COMPLETED", rig.apps[0].tail()
    assert state.serialized_output == '"charged 42"'
    assert (data / "charge.runs").read_text().count("\n") == 1
    assert not ledger.exists()


def test_side_effect_and_once_run_the_effect_every_time_when_unaudited(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Unaudited, activities run unwrapped: nothing knows the effect happened before, so
    it happens every time — ``already_done`` and ``uncertain`` False, nothing recorded."""
    import threading

    from histaudit import AuditedWorkflowRuntime, once, side_effect
    from histaudit.interceptor import effects

    # this test's own flag: the unaudited runtime below sets it for the whole process
    monkeypatch.setattr(effects, "_UNAUDITED", threading.Event())
    monkeypatch.setenv("HISTAUDIT_ENABLED", "0")
    assert not AuditedWorkflowRuntime(host="127.0.0.1", port="1").audited
    calls: list[int] = []
    assert once(None, "post-comment", lambda: calls.append(1) or len(calls),
                key="ticket-7") == 1
    assert once(None, "post-comment", lambda: calls.append(1) or len(calls),
                key="ticket-7") == 2
    with side_effect(None, "post-comment", key="ticket-7") as effect:
        assert not effect.already_done and not effect.uncertain
        assert effect.previous_result is None and not effect.previous_result_available
        effect.result = "posted"
    with pytest.raises(UsageError, match="name must be a non-empty string"), \
            side_effect(None, ""):
        pass
