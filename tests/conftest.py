"""Shared fixtures: real PostgreSQL, real SQLite files, and a real workflow engine.

Nothing here skips: a test that needs the engine or PostgreSQL fails with a message saying
how to install it, because a silently skipped crash test proves nothing.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from histaudit.errors import EngineError
from histaudit.testing import DAPRD, DURABLETASK, Sidecar, start_engine, teardown
from histaudit.testing.engine import EngineProcess, find_engine_binary
from support.postgres import PostgresError, PostgresServer

pytest_plugins = ["support.timings"]


def _attempt(action: Callable[[], object], errors: tuple[type[Exception], ...]) -> str:
    """Run ``action``; return its error message ('' on success).

    Lets fixtures call ``pytest.fail`` outside the ``except`` block, so the failure shows
    the one-line hint instead of a chained traceback.
    """
    try:
        action()
    except errors as exc:
        return str(exc) or type(exc).__name__
    return ""


def _db_name_for(request: pytest.FixtureRequest) -> str:
    """A unique, readable database name derived from the test's name."""
    stem = re.sub(r"[^a-z0-9_]+", "_", request.node.name.lower()).strip("_")[:40]
    return f"t_{stem}_{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    """One throwaway PostgreSQL server for the whole run, deleted at the end."""
    server = PostgresServer()
    problem = _attempt(server.start, (PostgresError, OSError))
    if problem:
        pytest.fail(f"cannot start PostgreSQL for tests: {problem}", pytrace=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(pg_server: PostgresServer, request: pytest.FixtureRequest) -> Iterator[str]:
    """SQLAlchemy URL of a fresh, empty PostgreSQL database, dropped after the test."""
    name = _db_name_for(request)
    url = pg_server.create_database(name)
    try:
        yield url
    finally:
        pg_server.drop_database(name)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """SQLAlchemy URL of a not-yet-existing SQLite ledger file in the test's tmp dir."""
    return f"sqlite:///{tmp_path / 'ledger.db'}"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    """A fresh ledger URL, once on SQLite and once on PostgreSQL."""
    name = "sqlite_url" if request.param == "sqlite" else "pg_url"
    return str(request.getfixturevalue(name))


@pytest.fixture(scope="session")
def engine_binary() -> Path:
    """Path of the durabletask-go binary; fails the test with a hint when missing."""
    problem = _attempt(find_engine_binary, (EngineError,))
    if problem:
        pytest.fail(problem, pytrace=False)
    return find_engine_binary()


@pytest.fixture
def engine(engine_binary: Path, tmp_path: Path) -> Iterator[EngineProcess]:
    """A running workflow engine with its state in the test's tmp dir, killed afterwards."""
    eng = EngineProcess(binary=engine_binary, state_dir=tmp_path / "engine")
    problem = _attempt(eng.start, (EngineError,))
    if problem:
        pytest.fail(f"cannot start the workflow engine: {problem}", pytrace=False)
    try:
        yield eng
    finally:
        eng.kill()


@pytest.fixture(params=[DURABLETASK, pytest.param(DAPRD, marks=pytest.mark.daprd)])
def any_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Sidecar]:
    """A running engine, once the standalone durabletask-go and once real daprd (with its
    placement and scheduler), state in the test's tmp dir, every process killed afterwards.

    A module runs its engine tests on both by overriding ``engine`` with this fixture.
    """
    binary = request.getfixturevalue("engine_binary") if request.param == DURABLETASK else None
    started: list[Sidecar] = []
    problem = _attempt(lambda: started.append(start_engine(request.param, tmp_path / "engine",
                                                           engine_binary=binary)),
                       (EngineError,))
    if problem:
        pytest.fail(f"cannot start the {request.param} engine: {problem}", pytrace=False)
    try:
        yield started[0]
    finally:
        teardown(started[0])


def _cost_class(item: pytest.Item) -> int:
    """0: crashes and daprd stacks, 1: other integration tests, 2: the rest."""
    if item.get_closest_marker("crash") or item.get_closest_marker("daprd"):
        return 0
    return 1 if "integration" in item.path.parts else 2


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest work first, so that under xdist (``--dist loadgroup --no-loadscope-reorder``)
    no worker picks up a crash matrix while the others sit idle at the end.

    Files are ordered as wholes, by their costliest test's class, and keep their own order
    inside, so a module-scoped fixture is still built once on a worker. Files whose
    module fixtures are costly keep all their tests on one worker with
    ``pytest.mark.xdist_group``; every other test is dealt out on its own.
    """
    by_file: dict[Path, int] = {}
    for item in items:
        by_file[item.path] = min(by_file.get(item.path, 2), _cost_class(item))
    items.sort(key=lambda item: by_file[item.path])
