"""Named crash points: end the process like a power cut at an exact, repeatable place.

A crash test is only worth having if the crash lands at the same spot every run.
``crash_point("after:post_comment")`` does nothing unless ``$HISTAUDIT_CRASH_AT`` names
that point, in which case the process ends at once through ``os._exit`` — no ``finally``
blocks, no ``atexit`` hooks, no flushing of buffered output, no goodbye to the workflow
engine — which is what a killed container looks like to everything else.

``$HISTAUDIT_CRASH_AT`` holds one name or a comma list. ``name#N`` fires on the N-th
time *this process* reaches ``name`` (a loop that runs the same activity 50 times can
crash in its 37th; a restarted process counts from 1 again). A point can also have
*aliases* that name it independently of any process: the interceptor gives the points
around each activity its step — the workflow's task id, N for the N-th activity it
schedules — so ``before:step:87`` fires before step 87's body and ``after:step:87`` (or
``step:87``) after it, in whichever process runs it. When ``$HISTAUDIT_CRASH_TRACE``
names a file, every point reached is appended to it as one line (the crash point itself
included; aliases after a tab), so a crash matrix can run the workload once and
enumerate every point there is to crash at.

Inside a *scope* — :func:`crash_scope`, which the interceptor opens around each activity
execution with the key ``<instance>/<task id>`` — every point also gets a *scoped* alias,
``name@<instance>/<task id>`` (``#n`` added for its n-th pass in that one execution). A
scoped alias names the same pass in every process and every run of the same instance,
which is what a sweep needs: with ``$HISTAUDIT_CRASH_SWEEP`` naming a file of scoped
aliases (one per line, read once per process), a process crashes at the first of them it
reaches and appends that alias to ``<file>.fired`` first; the harness takes it off the
list and lets the next process run into the next one (:mod:`histaudit.crashtest.sweep`).

``$HISTAUDIT_CRASH_MODE=engine`` turns the point into a place to crash the *engine* at
(the crash matrix does this): instead of exiting, the process writes a marker file named
by ``$HISTAUDIT_CRASH_SIGNAL`` (holding the point's name) and waits, polling, until the
marker is removed — the harness SIGKILLs and restarts the workflow engine meanwhile — and
then carries on as if nothing happened. Without ``$HISTAUDIT_CRASH_SIGNAL`` the mode is
ignored and the process exits as usual.

All variables are read on every call, so a test can set them after import.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path

__all__ = ["CRASH_EXIT_CODE", "CRASH_MODE_ENGINE", "ENV_CRASH_AT", "ENV_CRASH_INSTANCE",
           "ENV_CRASH_MODE",
           "ENV_CRASH_SIGNAL", "ENV_CRASH_SWEEP", "ENV_CRASH_TRACE", "crash_point",
           "crash_scope", "fired_path", "read_trace", "read_trace_entries", "scoped_name",
           "step_aliases"]

ENV_CRASH_AT = "HISTAUDIT_CRASH_AT"
"""Environment variable naming the crash point(s) to die at."""

ENV_CRASH_TRACE = "HISTAUDIT_CRASH_TRACE"
"""Environment variable naming a file that records every crash point reached."""

ENV_CRASH_MODE = "HISTAUDIT_CRASH_MODE"
"""``engine``: at the point, signal the harness and wait instead of exiting."""

ENV_CRASH_SIGNAL = "HISTAUDIT_CRASH_SIGNAL"
"""Marker file written at the point in engine mode; the process waits until it is gone."""

ENV_CRASH_SWEEP = "HISTAUDIT_CRASH_SWEEP"
"""A file of scoped aliases: crash at the first one reached, noting it in ``<file>.fired``."""

ENV_CRASH_INSTANCE = "HISTAUDIT_CRASH_INSTANCE"
"""Only points passed inside this instance's activity scopes count (traced, fired): the
crash matrix of a rerun runs the rerun's source to completion in the same workers first."""

CRASH_MODE_ENGINE = "engine"

SIGNAL_WAIT_LIMIT_S = 600.0
"""Longest an engine-mode point waits for its marker to go (a dead harness must not
leave the app blocked for ever)."""

CRASH_EXIT_CODE = 86
"""Exit status of an injected crash.

Distinct from Python's own 1 and from the 128+N of a signal, so a harness can tell "it
crashed where we asked" from "it failed on its own".
"""

_reached: Counter[str] = Counter()
_lock = threading.Lock()
_hold_lock = threading.Lock()
"""Held through an engine-mode hold: one point at a time waits for the engine restart."""


class _Scope:
    """One activity execution: its key, and the points passed in it so far."""

    __slots__ = ("key", "seen")

    def __init__(self, key: str) -> None:
        self.key = key
        self.seen: Counter[str] = Counter()


_SCOPE: ContextVar[_Scope | None] = ContextVar("histaudit_crash_scope", default=None)
_sweep_todo: dict[str, set[str]] = {}
"""The sweep file's aliases still to fire in this process, by file (read once)."""


@contextlib.contextmanager
def crash_scope(key: str) -> Iterator[None]:
    """Points passed inside get the scoped alias ``name@key`` (see the module docstring)."""
    token = _SCOPE.set(_Scope(key))
    try:
        yield
    finally:
        _SCOPE.reset(token)


def scoped_name(name: str, key: str, n: int = 1) -> str:
    """The scoped alias of the ``n``-th pass of point ``name`` in scope ``key``."""
    return f"{name}@{key}" if n == 1 else f"{name}@{key}#{n}"


def fired_path(sweep_file: str | os.PathLike[str]) -> Path:
    """Where the processes of a sweep note each alias they crashed at."""
    return Path(f"{os.fspath(sweep_file)}.fired")


def _sweep_fires(sweep: str, scoped: str) -> bool:
    """True (once) if ``scoped`` is on the sweep's list; notes it as fired."""
    todo = _sweep_todo.get(sweep)
    if todo is None:
        try:
            todo = set(Path(sweep).read_text(encoding="utf-8").split())
        except OSError:
            todo = set()
        _sweep_todo[sweep] = todo
    if scoped not in todo:
        return False
    todo.discard(scoped)
    _append_trace(str(fired_path(sweep)), scoped)
    return True


def _targets(spec: str) -> set[str]:
    return {part.strip() for part in spec.split(",") if part.strip()}


def step_aliases(where: str, step: int) -> tuple[str, ...]:
    """The aliases of the ``before`` / ``after`` point of activity step ``step``."""
    if step < 0:
        return ()
    return (f"{where}:step:{step}", f"step:{step}") if where == "after" \
        else (f"{where}:step:{step}",)


def crash_point(name: str, aliases: tuple[str, ...] = ()) -> None:
    """Mark a crash point; exit with :data:`CRASH_EXIT_CODE` if ``$HISTAUDIT_CRASH_AT`` names
    it (as ``name``, ``name#N`` for its N-th pass in this process, or one of ``aliases``).

    Costs three environment lookups when none of the variables is set, so it can stay in
    production code.
    """
    spec = os.environ.get(ENV_CRASH_AT, "")
    trace = os.environ.get(ENV_CRASH_TRACE, "")
    sweep = os.environ.get(ENV_CRASH_SWEEP, "")
    if not spec and not trace and not sweep:
        return
    only = os.environ.get(ENV_CRASH_INSTANCE, "")
    if only:
        scope = _SCOPE.get()
        if scope is None or not scope.key.startswith(f"{only}/"):
            return
    marker = os.environ.get(ENV_CRASH_SIGNAL, "")
    if os.environ.get(ENV_CRASH_MODE, "") != CRASH_MODE_ENGINE or not marker:
        with _lock:
            if _fires(name, aliases, spec, trace, sweep):
                # Say where, unbuffered, then die without any clean-up: that is the point.
                _say(f"histaudit: crash point {name!r} reached ({ENV_CRASH_AT}); "
                     f"exiting with status {CRASH_EXIT_CODE}")
                os._exit(CRASH_EXIT_CODE)
        return
    # Engine mode: one hold at a time (the harness restarts the engine once per point), so
    # a thread reaching its point while another holds (a fan-out's activities) waits for
    # that hold to end before deciding whether its own point fires. Other threads keep
    # passing their points meanwhile only in the decision's short lock.
    with _hold_lock:
        with _lock:
            fires = _fires(name, aliases, spec, trace, sweep)
        if fires:
            _say(f"histaudit: crash point {name!r} reached ({ENV_CRASH_AT}, engine mode); "
                 f"waiting until {marker} is removed")
            _hold(marker, name)


def _fires(name: str, aliases: tuple[str, ...], spec: str, trace: str, sweep: str) -> bool:
    """Count this pass of ``name``, trace it, and say whether it is a point to crash at
    (noting a sweep's alias as fired). Called under ``_lock``."""
    _reached[name] += 1
    count = _reached[name]
    scope = _SCOPE.get()
    scoped = None
    if scope is not None:
        scope.seen[name] += 1
        scoped = scoped_name(name, scope.key, scope.seen[name])
        aliases = (*aliases, scoped)
    if trace:
        _append_trace(trace, "\t".join((name, *aliases)))
    targets = _targets(spec)
    return (name in targets or f"{name}#{count}" in targets
            or not targets.isdisjoint(aliases)
            or bool(sweep and scoped is not None and _sweep_fires(sweep, scoped)))


def _say(line: str) -> None:
    try:
        os.write(sys.stderr.fileno(), (line + "\n").encode())
    except (OSError, ValueError, AttributeError):
        pass


def _hold(marker: str, name: str) -> None:
    """Write ``marker`` (atomically, holding ``name``) and wait until someone removes it."""
    tmp = f"{marker}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(f"{name}\n{os.getpid()}\n")
    os.replace(tmp, marker)
    deadline = time.monotonic() + SIGNAL_WAIT_LIMIT_S
    while os.path.exists(marker) and time.monotonic() < deadline:
        time.sleep(0.02)


def _append_trace(path: str, name: str) -> None:
    # One O_APPEND write per line: lines from concurrent processes never interleave.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (name.replace("\n", " ") + "\n").encode("utf-8"))
    finally:
        os.close(fd)


def read_trace_entries(path: str | os.PathLike[str]) -> list[tuple[str, tuple[str, ...]]]:
    """(point, its aliases) for every pass recorded in a trace file, in order."""
    p = Path(path)
    if not p.exists():
        return []
    entries = []
    for line in p.read_text(encoding="utf-8").splitlines():
        if line:
            name, *aliases = line.split("\t")
            entries.append((name, tuple(aliases)))
    return entries


def read_trace(path: str | os.PathLike[str]) -> list[str]:
    """The crash points recorded in a trace file, in the order they were reached."""
    return [name for name, _aliases in read_trace_entries(path)]
